"""Stiff attention at low temperature: riemattn's stiff steppers against SciPy, at equal measured error.

Cases (tokens uniform on S^2 from a fixed seed; scipy's solvers call riemattn's own field on the
flattened state; errors are max |y(T) - y_ref(T)| over tokens (and trajectories), the reference
from SciPy Radau at rtol = atol = 1e-13 on the same ODE (given riemattn's closed-form Jacobian
for its Newton iterations), renormalised; a SciPy run that raises, e.g. an overflow of the
unprojected state at a loose tolerance, counts as failed):

(A) GLPR's USA, beta = 9, 6 tokens, T = 2 and T = 20 (issue 28's table);
(B) USA, beta = 16, 16 tokens, causal mask, T = 20;
(C) a batch of B (default 1000) trajectories of (A)'s kind (6 tokens, USA) with beta uniform in
    [1, 16], T = 5: riemattn's batched call (each trajectory its own steps, method and, for
    "auto", its own switching) against looping scipy LSODA over the trajectories. References:
    LSODA at rtol = atol = 1e-12 given riemattn's closed-form Jacobian (Radau at 1e-13 costs up
    to 280 s for one beta = 16 trajectory; on five trajectories spanning beta in [1, 16] the two
    agree to 3e-10, measured), computed once and cached under benchmarks/.cache/;
(D) the README example (a scalar P(t) = cos(t) P, two heads, causal, ellipsoid, 100 trajectories,
    dopri5, T = 20) without and with ``time_vectorized=True``;
(E) the non-stiff hemisphere ensemble (B = 100, T = 10): "auto" against dopri5 and dop853.

For (A)-(C) every method is run over a tolerance grid (rtol = atol) and the summary takes, per
method, its fastest run whose error is <= TARGET = 1e-8 ("--" where none is), and prints the
ratios to scipy LSODA measured in the same run. In (A) and (B), LSODA and the stiff steppers run
each tolerance three times and keep the best time (single runs of a fraction of a second vary by
tens of per cent on a shared machine). Each line shows the 1-minute load average: the
development machine has 2 shared cores, so final numbers must be taken on a quiet machine.

Run: ``python benchmarks/stiff.py`` (full: many minutes; explicit steppers at T = 20 take tens of
seconds each) or ``--quick`` (smaller: T = 2 only for the explicit steppers, coarser
grids, only LSODA among SciPy's methods, (B) and (C) with T = 2, B = 20).
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
from scipy.integrate import solve_ivp

import riemattn as ra
from riemattn.dynamics.jacobians import jacobian

TARGET = 1e-8
#: tolerance grids, loose to tight (a sweep stops once the error is 10x below TARGET)
SCIPY_TOLS = [1e-3, 1e-4, 1e-5, 1e-6, 1e-7, 1e-8, 1e-9, 1e-10, 1e-11]
STIFF_TOLS = [1e-3, 1e-4, 1e-5, 1e-6, 3e-7, 1e-7, 3e-8, 1e-8]
CACHE = os.path.join(os.path.dirname(os.path.abspath(__file__)), ".cache")


def load() -> str:
    return f"load {os.getloadavg()[0]:.1f}"


def tokens(rng, shape):
    y = rng.normal(size=shape)
    return y / np.linalg.norm(y, axis=-1, keepdims=True)


def scipy_run(field, y0, T, method, tol):
    shape = y0.shape
    fun = lambda t, x: field(t, x.reshape(shape)).ravel()
    t0 = time.perf_counter()
    try:
        sol = solve_ivp(fun, (0.0, T), y0.ravel(), method=method, rtol=tol, atol=tol)
    except (ValueError, ArithmeticError) as err:  # e.g. riemattn's overflow error on a diverged state
        print(f"    ({method} at tol {tol:.0e} raised {type(err).__name__}: {str(err)[:80]})")
        return time.perf_counter() - t0, 0, np.full(shape, np.nan), False
    dt = time.perf_counter() - t0
    y = sol.y[:, -1].reshape(shape)
    return dt, sol.nfev, y / np.linalg.norm(y, axis=-1, keepdims=True), sol.success


def reference(field, y0, T, tol=1e-13):
    """SciPy Radau at ``tol`` (1e-13), with riemattn's closed-form Jacobian for its Newton iterations (the
    Jacobian only speeds up convergence: Radau's solution is fixed by its collocation equations
    and the tolerance; a wrong Jacobian would slow or stop it, not bias it). Cached under
    benchmarks/.cache/, keyed by the field's repr, y0, T and tol."""
    key = repr(field).encode() + y0.tobytes() + np.array([T, tol]).tobytes()
    return cached("stiff_ref", key, lambda: solve_with_jacobian(field, y0, T, "Radau", tol))


def cached(prefix, key: bytes, compute):
    """``compute()`` (an array), stored as benchmarks/.cache/<prefix>_<sha1 of key>.npy and loaded
    from there when present."""
    import hashlib

    path = os.path.join(CACHE, f"{prefix}_{hashlib.sha1(key).hexdigest()[:16]}.npy")
    if os.path.exists(path):
        return np.load(path)
    value = compute()
    os.makedirs(CACHE, exist_ok=True)
    np.save(path, value)
    return value


def solve_with_jacobian(field, y0, T, method, tol):
    """y(T) by SciPy ``method`` at rtol = atol = ``tol``, given riemattn's closed-form Jacobian,
    renormalised."""
    shape, n = y0.shape, y0.size
    sol = solve_ivp(lambda t, x: field(t, x.reshape(shape)).ravel(), (0.0, T), y0.ravel(), method=method,
                    rtol=tol, atol=tol, jac=lambda t, x: jacobian(field, t, x.reshape(shape)).reshape(n, n))
    assert sol.success, sol.message
    y = sol.y[:, -1].reshape(shape)
    return y / np.linalg.norm(y, axis=-1, keepdims=True)


def riemattn_run(field, y0, T, stepper, tol):
    t0 = time.perf_counter()
    r = ra.integrate(field, y0, (0.0, T), stepper=stepper, rtol=tol, atol=tol, saveat=[T])
    return time.perf_counter() - t0, r.nfev, r.y[-1], r.success


def best(rows):
    ok = [r for r in rows if r[3] <= TARGET and r[4]]
    return min(ok, key=lambda r: r[1]) if ok else None


def sweep(name, runner, tols, ref, repeat=1):
    """Each tolerance's run ``repeat`` times, its best time kept (runs of a fraction of a second on
    a shared machine vary by tens of per cent between calls)."""
    rows = []
    for tol in tols:
        runs = [runner(tol) for _ in range(repeat)]
        dt, nfev, y, success = runs[0]
        dt = min(r[0] for r in runs)
        err = float(np.abs(y - ref).max()) if np.all(np.isfinite(y)) else np.inf
        rows.append((tol, dt, nfev, err, success))
        print(f"  {name:8s} tol {tol:.0e}: {dt:8.3f} s  nfev {nfev:7d}  error {err:.2e}  {'' if success else 'FAILED '}{load()}",
              flush=True)
        if err <= TARGET * 0.1 and success:
            break  # tighter tolerances only cost more
    return best(rows)


def summary(title, results):
    print(f"\n{title}: fastest run with error <= {TARGET:g} per method")
    lsoda = results.get("LSODA")
    for name, row in results.items():
        if row is None:
            print(f"  {name:8s} --")
            continue
        ratio = f"  {row[1] / lsoda[1]:6.2f} x LSODA's time" if lsoda else ""
        print(f"  {name:8s} {row[1]:8.3f} s  (tol {row[0]:.0e}, nfev {row[2]}, error {row[3]:.2e}){ratio}")
    print(f"  [{load()}]", flush=True)


def single(title, field, y0, T, explicit, quick, repeat=3):
    print(f"\n== {title} ==  [{load()}]", flush=True)
    ref = reference(field, y0, T)
    out = {}
    for m in ("LSODA", "BDF", "Radau") if not quick else ("LSODA",):
        out[m] = sweep(m, lambda tol, m=m: scipy_run(field, y0, T, m, tol), SCIPY_TOLS, ref,
                       repeat if m == "LSODA" else 1)
    for s in ("rodas4p", "rodas4", "auto") + tuple(explicit):
        stiff = s.startswith("rodas") or s == "auto"
        tols = STIFF_TOLS if stiff else [1e-8, 1e-9]
        out[s] = sweep(s, lambda tol, s=s: riemattn_run(field, y0, T, s, tol), tols if not quick else tols[::2], ref,
                       repeat if stiff else 1)
    summary(title, out)
    floor(field, y0, T, out)
    return out


def floor(field, y0, T, out):
    """What the best stiff run would cost with a free engine: its field evaluations and Jacobians
    alone (each timed here), against LSODA's time: the per-step Python/NumPy work of the stepper
    and the loop is what is left to beat a compiled code on a small system."""
    import timeit

    from riemattn.solvers.rosenbrock import lifted_jacobian
    from riemattn.solvers.steppers import _check_field

    best_stiff = min((r for k, r in out.items() if k.startswith("rodas") and r is not None),
                     key=lambda r: r[1], default=None)
    if best_stiff is None or out.get("LSODA") is None:
        return
    g = _check_field(field)
    t_f = min(timeit.repeat(lambda: g(0.0, y0), number=200, repeat=3)) / 200
    t_j = min(timeit.repeat(lambda: lifted_jacobian(g, 0.0, y0), number=200, repeat=3)) / 200
    steps = best_stiff[2] / 6  # RODAS4(P): 6 evaluations per step (5 stages + the next step's first)
    cost = best_stiff[2] * t_f + steps * t_j
    print(f"  floor of the best stiff run (its {best_stiff[2]} evaluations x {t_f * 1e6:.0f} us + about "
          f"{steps:.0f} Jacobians x {t_j * 1e6:.0f} us): {cost:.3f} s = {cost / out['LSODA'][1]:.2f} x LSODA's "
          f"time; the run took {best_stiff[1]:.3f} s  [{load()}]", flush=True)


def batch_references(betas, y0, T):
    """LSODA at rtol = atol = 1e-12 with riemattn's closed-form Jacobian, per trajectory, cached
    in benchmarks/.cache/ (keyed by the problem's data)."""
    def compute():
        t0 = time.perf_counter()
        refs = np.stack([solve_with_jacobian(ra.usa(b, 3), y0[k], T, "LSODA", 1e-12) for k, b in enumerate(betas)])
        print(f"  references (LSODA 1e-12 with the Jacobian, looped): {time.perf_counter() - t0:.1f} s", flush=True)
        return refs

    return cached(f"stiff_C_{len(betas)}", np.concatenate([betas, y0.ravel(), [T]]).tobytes(), compute)


def batch_case(B, quick):
    rng = np.random.default_rng(3)
    betas = rng.uniform(1.0, 16.0, B)
    y0 = tokens(rng, (B, 6, 3))
    T = 2.0 if quick else 5.0
    print(f"\n== (C) batch of {B} USA trajectories, beta uniform in [1, 16], 6 tokens, T = {T} ==  [{load()}]", flush=True)
    refs = batch_references(betas, y0, T)
    fields = [ra.usa(b, 3) for b in betas]

    def lsoda(tol):
        t0 = time.perf_counter()
        ys, nfev, ok = [], 0, True
        for k, f in enumerate(fields):
            _, n, y, s = scipy_run(f, y0[k], T, "LSODA", tol)
            ys.append(y)
            nfev += n
            ok &= s
        return time.perf_counter() - t0, nfev, np.stack(ys), ok

    out = {"LSODA": sweep("LSODA", lsoda, [1e-8, 1e-9, 1e-10, 1e-11], refs)}
    field = ra.usa(betas, 3)
    for s in ("rodas4p", "auto"):
        out[s] = sweep(s, lambda tol, s=s: riemattn_run(field, y0, T, s, tol), [3e-7, 1e-7, 3e-8, 1e-8, 3e-9, 1e-9], refs)
    summary(f"(C) batch of {B}", out)


def readme_case(quick):
    rng = np.random.default_rng(0)
    d, n, heads = 3, 10, 2
    W = np.diag([1.0, 2.0, 4.0])
    P = rng.uniform(-0.5, 0.5, (heads, d, d))
    T = 5.0 if quick else 20.0
    print(f"\n== (D) README example, scalar P(t) = cos(t) P, 100 trajectories, T = {T} ==  [{load()}]", flush=True)
    times = {}
    for name, kw, fn in (("scalar P(t), detected", {}, lambda t: np.cos(t) * P),
                         ("time_vectorized=True", {"time_vectorized": True},
                          lambda t: np.cos(t)[:, None, None, None] * P),
                         ("time_vectorized=False", {"time_vectorized": False}, lambda t: np.cos(t) * P)):
        field = ra.AttentionField(fn, W=W, mask="causal", **kw)
        y0 = field.manifold.projection(np.random.default_rng(0).uniform(-0.5, 0.5, (100, n, d)))
        t0 = time.perf_counter()
        sol = ra.integrate(field, y0, (0.0, T), stepper="dopri5", rtol=1e-8, saveat=np.linspace(0, T, 21))
        times[name] = (time.perf_counter() - t0, sol.y[-1])
        print(f"  {name:24s} {times[name][0]:7.3f} s  {load()}", flush=True)
    a, b = times["scalar P(t), detected"], times["time_vectorized=True"]
    print(f"  detected / flagged: {a[0] / b[0]:.2f} x; max |difference| of the results {np.abs(a[1] - b[1]).max():.1e}")


def hemisphere_case(quick):
    """(E) the non-stiff hemisphere ensemble (ARXIV section 7.2, B = 100): auto against dopri5."""
    from riemattn.experiments._papers import hemisphere_P

    T = 2.0 if quick else 10.0
    field = ra.AttentionField(hemisphere_P)
    rng = np.random.default_rng(0)
    y0 = field.manifold.projection(rng.uniform(-0.5, 0.5, (100, 10, 3)))
    print(f"\n== (E) hemisphere ensemble, B = 100, T = {T}, tol 1e-8 (not stiff) ==  [{load()}]", flush=True)
    times = {}
    for s in ("dopri5", "dop853", "auto", "dopri5", "dop853", "auto"):  # twice, interleaved: take the best
        t0 = time.perf_counter()
        r = ra.integrate(field, y0, (0.0, T), stepper=s, rtol=1e-8, atol=1e-8)
        times[s] = min(times.get(s, np.inf), time.perf_counter() - t0)
        print(f"  {s:8s} {time.perf_counter() - t0:7.3f} s  steps {r.n_steps}  {load()}", flush=True)
    best = min(times["dopri5"], times["dop853"])
    print(f"  auto / best explicit: {times['auto'] / best:.2f} x")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--batch", type=int, default=None, help="trajectories in (C) (default 1000, quick 20)")
    parser.add_argument("--only", default="ABCDE", help="which cases to run, e.g. AD")
    args = parser.parse_args()
    rng = np.random.default_rng(1)
    if "A" in args.only:
        y0 = tokens(rng, (6, 3))
        single("(A) USA beta = 9, 6 tokens, T = 2", ra.usa(9.0, 3), y0, 2.0, ("dop853", "dopri5"), args.quick)
        single("(A) USA beta = 9, 6 tokens, T = 20", ra.usa(9.0, 3), y0, 20.0,
               () if args.quick else ("dop853",), args.quick)
    if "B" in args.only:
        y0 = tokens(np.random.default_rng(2), (16, 3))
        T = 2.0 if args.quick else 20.0
        single(f"(B) USA beta = 16, 16 tokens, causal, T = {T:g}", ra.usa(16.0, 3, mask="causal"), y0, T, (), args.quick)
    if "C" in args.only:
        batch_case(args.batch or (20 if args.quick else 1000), args.quick)
    if "D" in args.only:
        readme_case(args.quick)
    if "E" in args.only:
        hemisphere_case(args.quick)


if __name__ == "__main__":
    main()
