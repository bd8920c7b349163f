"""Work--precision benchmark on the hemisphere problem (ARXIV section 7.2), horizon 10.

The problem: 10 tokens y_i on the sphere S^2, two heads, U = I, full attention,

    dy_i/dt = f_i - <y_i, f_i> y_i,   f_i = sum_eta sum_j alpha_ij^eta(t) y_j,
    alpha_ij^eta(t) = exp(y_i^T P_eta(t) y_j) / (sqrt(3) sum_k exp(y_i^T P_eta(t) y_k))

("paper" normalization: each row of alpha^eta sums to 1/sqrt(d), d = 3), with P_eta(t) =
D_eta(t) P'_eta, the matrices P'_1, P'_2 printed in ARXIV section 7.2 and
D_1(t) = 2 diag(cos 10 pi t, sin 10 pi t, cos 6 pi t), D_2(t) = 2 diag(cos 6 pi t, sin 6 pi t,
cos 4 pi t). This is ``riemattn.experiments._papers.hemisphere_P``, used here with
``AttentionField(hemisphere_P, time_vectorized=True)`` (one P(t) per trajectory, since adaptive
steps are per trajectory).

(a) one trajectory, (b) an ensemble of 100 random initial conditions (tokens uniform in the cube
[-0.5, 0.5]^3, projected). Error = max over tokens and trajectories of |y(10) - y_ref(10)|,
y_ref from scipy DOP853 at rtol = atol = 1e-13 (for the ensemble: one call on the flattened
ensemble state). Methods:

* every riemattn stepper through ``ra.integrate`` (fixed steppers over a range of dt, adaptive ones
  over a range of tolerances), the ensemble integrated in one batched call (each trajectory with
  its own step size); ``dop853`` is the projected Dormand--Prince 8(5,3) pair with the
  coefficients and error estimate of scipy's DOP853;
* explicit Euler followed by renormalisation (the papers' authors' scheme), a plain NumPy loop
  (batched over the ensemble, which favours it);
* scipy ``solve_ivp`` RK45 and DOP853 on the flattened state of one trajectory, followed by
  renormalisation, looped over the ensemble's trajectories.

riemattn ``dopri5`` / ``dop853`` and scipy DOP853 are swept over the same tolerance grid
(rtol = atol). Every run is timed as the best of up to 5 repeats (runs longer than 1 s once).
All methods use the same ``AttentionField`` for the right-hand side, so the comparison is about
the integrators. The summary compares, for each method, its cheapest run whose max error is
<= 1e-8, and prints the speed-up of the best riemattn stepper over looped scipy DOP853, for the
ensemble and for one trajectory, both measured in the same run, with the load average (the
development machine has 2 cores and is shared; every timing line shows the 1-minute load).

Then, at d = 500 (l = 50 tokens, h = 2 heads), with P_eta(t) = D_eta(t) P'_eta, P'_eta entries
uniform in [-0.5, 0.5] and D_eta(t) = diag(|2 sin(omega_eta,k t + phi_eta,k)|)_k (omega uniform in
[0, 1], phi uniform in [0, 2 pi]), the cost of one Lie-group step divided by the cost of the
field evaluations it needs.

Where diffrax is installed (the ``bench`` extra, in a separate venv), the script ends by running
``benchmarks/vs_diffrax.py`` (riemattn against diffrax ``Dopri5`` under ``jax.vmap``, B = 100 and
1000, each contender in a fresh process, at equal measured error); ``--no-diffrax`` skips it.
``--cpu N`` runs everything (this process and the fresh processes of vs_diffrax) on CPU N, with
one BLAS (and XLA) thread.

Run: ``python benchmarks/work_precision.py`` (10-20 minutes on 2 cores, plus ~10 for diffrax;
``--quick`` for a smaller sweep). Prints tables; writes ``docs/work_precision.png`` (``--out``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

import numpy as np
from scipy.integrate import solve_ivp

import riemattn as ra
from riemattn.experiments._papers import hemisphere_P

T_END = 10.0


def initial(n_traj, seed):
    rng = np.random.default_rng(seed)
    y = rng.uniform(-0.5, 0.5, (n_traj, 10, 3))
    return y / np.linalg.norm(y, axis=-1, keepdims=True)


def flat_rhs(field, shape):
    return lambda t, x: field(t, x.reshape(shape)).ravel()


def reference(field, y0):
    sol = solve_ivp(flat_rhs(field, y0.shape), (0.0, T_END), y0.ravel(), method="DOP853", rtol=1e-13, atol=1e-13)
    assert sol.success, sol.message
    return sol.y[:, -1].reshape(y0.shape)


def timed(fn, min_time=1.0, max_reps=5):
    """Best wall time of up to ``max_reps`` runs (repeats only runs shorter than ``min_time``)."""
    best, out, reps = np.inf, None, 0
    while reps < max_reps:
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
        reps += 1
        if best > min_time:
            break
    return best, out


# ---------------------------------------------------------------------------------------------
def run_riemattn(field, y0, name, param):
    st = ra.STEPPERS[name]
    if st.adaptive:
        sol = ra.integrate(field, y0, (0.0, T_END), stepper=name, rtol=param, atol=param, saveat=[T_END],
                           max_steps=10**6)
    else:
        sol = ra.integrate(field, y0, (0.0, T_END), stepper=name, dt=param, saveat=[T_END])
    assert sol.success, sol.message
    return sol.y[-1]


def run_euler_renorm(field, y0, dt):
    n = int(round(T_END / dt))
    y = y0.copy()
    for k in range(n):
        y = y + dt * field.update(k * dt, y)
        y /= np.linalg.norm(y, axis=-1, keepdims=True)
    return y


def run_scipy_loop(field, y0, method, rtol):
    out = np.empty_like(y0)
    rhs = flat_rhs(field, y0.shape[1:])
    for b in range(y0.shape[0]):
        sol = solve_ivp(rhs, (0.0, T_END), y0[b].ravel(), method=method, rtol=rtol, atol=rtol)
        assert sol.success, sol.message
        y = sol.y[:, -1].reshape(y0.shape[1:])
        out[b] = y / np.linalg.norm(y, axis=-1, keepdims=True)
    return out


def sweeps(quick, ensemble):
    dts_hi = [0.04, 0.02, 0.01, 0.005] if not quick else [0.02, 0.01]
    dts_lo = [0.01, 0.003, 0.001] if not quick else [0.01, 0.003]
    if ensemble:
        dts_hi = dts_hi[:-1] if not quick else dts_hi
    # one tolerance grid (rtol = atol) for riemattn dopri5 / dop853 and scipy DOP853, so the
    # time to reach the error target is picked from the same candidates for each of them
    if quick:
        grid = [1e-7, 1e-8, 1e-9, 1e-10, 1e-11]
    elif ensemble:
        grid = [1e-7, 3e-8, 1e-8, 3e-9, 1e-9, 3e-10, 1e-10, 3e-11, 1e-11]
    else:
        grid = [1e-6, 3e-7, 1e-7, 3e-8, 1e-8, 3e-9, 1e-9, 3e-10, 1e-10, 3e-11, 1e-11]
    rkmk45 = [1e-6, 1e-8, 1e-10] if not quick else [1e-8]
    out = []
    for name in ("euler", "lie-euler"):
        out += [(f"riemattn {name}", name, dt) for dt in dts_lo]
    for name in ("heun", "rk4", "cg3", "rkmk4", "cf4"):
        out += [(f"riemattn {name}", name, dt) for dt in dts_hi]
    out += [("riemattn dopri5", "dopri5", tol) for tol in grid]
    out += [("riemattn rkmk45", "rkmk45", tol) for tol in rkmk45]
    out += [("riemattn dop853", "dop853", tol) for tol in grid]
    out += [("Euler + renormalisation", "euler-renorm", dt) for dt in dts_lo]
    if ensemble:
        rk45 = [1e-4, 1e-6] if not quick else [1e-4]
    else:
        rk45 = [1e-4, 1e-5, 1e-6, 1e-7, 1e-8] if not quick else [1e-5, 1e-7]
    out += [("scipy RK45 (looped)", "RK45", tol) for tol in rk45]
    out += [("scipy DOP853 (looped)", "DOP853", tol) for tol in grid]
    return out


def work_precision(field, y0, ref, configs):
    rows = []
    for label, kind, param in configs:
        if kind == "euler-renorm":
            fn = lambda: run_euler_renorm(field, y0, param)  # noqa: E731
        elif kind in ("RK45", "DOP853"):
            fn = lambda: run_scipy_loop(field, y0, kind, param)  # noqa: E731
        else:
            fn = lambda: run_riemattn(field, y0, kind, param)  # noqa: E731
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t, y = timed(fn)
        err = float(np.max(np.abs(y - ref)))
        rows.append((label, param, t, err))
        print(f"  {label:28s} {param:9.3g}  time {t:9.4f} s  error {err:9.3e}  "
              f"load {os.getloadavg()[0]:.2f}", flush=True)
    return rows


def time_to_reach(rows, label, target):
    """The cheapest of a method's runs with error <= target: (time, param, error), or None."""
    ok = [(t, p, e) for (lab, p, t, e) in rows if lab == label and e <= target]
    return min(ok) if ok else None


def summarize(rows, target=1e-8):
    """Print each method's cheapest run reaching max error <= target; return
    (best riemattn label, its (time, param, error), scipy DOP853's (time, param, error)) or None."""
    labels = list(dict.fromkeys(r[0] for r in rows))
    best = {lab: time_to_reach(rows, lab, target) for lab in labels}
    print(f"\n  time to reach max error <= {target:g} (cheapest run of the sweep):")
    for lab in labels:
        b = best[lab]
        print(f"    {lab:28s} " + ("not reached" if b is None else
                                   f"{b[0]:.4f} s (param {b[1]:.3g}, error {b[2]:.2e})"))
    ours = {lab: b for lab, b in best.items() if lab.startswith("riemattn") and b is not None}
    dop = best.get("scipy DOP853 (looped)")
    if ours and dop is not None:
        lab = min(ours, key=lambda k: ours[k][0])
        print(f"  best riemattn stepper: {lab} ({ours[lab][0]:.4f} s); scipy DOP853: {dop[0]:.4f} s; "
              f"speed-up {dop[0] / ours[lab][0]:.2f}x")
        return lab, ours[lab], dop
    return None


def ratio_line(prefix, claim, other):
    """``<prefix>: riemattn <stepper> vs <other>: X.Xx faster`` (or ``slower``)."""
    if claim is None:
        return f"{prefix}: riemattn vs {other}: not measured (a method did not reach the error target)"
    lab, (t_ours, p_ours, e_ours), (t_dop, p_dop, e_dop) = claim
    r = t_dop / t_ours
    verdict = f"{r:.1f}x faster" if r >= 1 else f"{1 / r:.1f}x slower"
    return (f"{prefix}: riemattn {lab.removeprefix('riemattn ')} vs {other}: {verdict}"
            f"  [{t_ours:.4f} s at tol {p_ours:.3g} (error {e_ours:.2e}) vs {t_dop:.4f} s at rtol "
            f"{p_dop:.3g} (error {e_dop:.2e})]")


# ---------------------------------------------------------------------------------------------
class FieldTimer(ra.Field):
    """A field that adds the wall time spent inside ``field``'s calls to ``acc`` = [seconds, calls].

    It evaluates ``field``'s unchecked twin (what ``integrate`` steps; ``checked=True``: the public
    field, what SciPy calls) and passes compaction (``take``) on, so an integration through it
    does the same work as one through ``field``.
    """

    def __init__(self, field, acc=None, checked=False):
        self.inner = field._unchecked() if hasattr(field, "_unchecked") and not checked else field
        self.manifold = self.inner.manifold
        self.acc = [0.0, 0] if acc is None else acc

    def __call__(self, t, y):
        t0 = time.perf_counter()
        out = self.inner(t, y)
        self.acc[0] += time.perf_counter() - t0
        self.acc[1] += 1
        return out

    def take(self, index, batch_shape):
        sub = self.inner.take(index, batch_shape)
        return None if sub is None else FieldTimer(sub, self.acc)


def field_share(field, y0, claim, reps=3):
    """Where riemattn's and SciPy's time goes in the runs of ``claim`` (see :func:`summarize`).

    Repeats both runs through :class:`FieldTimer` (best of ``reps``, interleaved) and returns
    (riemattn total, riemattn seconds inside the field, SciPy total, SciPy seconds inside the
    field). SciPy calls the public field (token checks, about 2 us per call) on the flat state.
    """
    lab, (_, p_ours, _), (_, p_dop, _) = claim
    name = lab.removeprefix("riemattn ")
    best = [np.inf] * 4
    for _ in range(reps):
        timer = FieldTimer(field)
        t0 = time.perf_counter()
        run_riemattn(timer, y0, name, p_ours)
        total = time.perf_counter() - t0
        if total < best[0]:
            best[0], best[1] = total, timer.acc[0]
        timer = FieldTimer(field, checked=True)
        t0 = time.perf_counter()
        run_scipy_loop(timer, y0, "DOP853", p_dop)
        total = time.perf_counter() - t0
        if total < best[2]:
            best[2], best[3] = total, timer.acc[0]
    return tuple(best)


def bound_line(prefix, shares):
    """How fast riemattn could be with an engine that costs nothing (only its field calls)."""
    ours, ours_f, dop, dop_f = shares
    return (f"{prefix}: riemattn {ours:.4f} s, {ours_f / ours:.0%} inside the field; SciPy {dop:.4f} s, "
            f"{dop_f / dop:.0%} inside the field. Speed-up now {dop / ours:.1f}x; with a zero-cost "
            f"riemattn engine at most {dop / ours_f:.1f}x")


def lie_step_cost(reps=7):
    """At d = 500, l = 50, h = 2: one Lie step vs the field evaluations it needs."""
    rng = np.random.default_rng(0)
    d, l, h = 500, 50, 2
    Pp = rng.uniform(-0.5, 0.5, (h, d, d))
    omega, phi = rng.uniform(0, 1, (h, d)), rng.uniform(0, 2 * np.pi, (h, d))

    def P(t):
        return np.abs(2 * np.sin(omega * t + phi))[:, :, None] * Pp

    field = ra.AttentionField(P)
    y0 = field.manifold.projection(rng.uniform(-0.5, 0.5, (l, d)))
    dt = 0.01
    field(0.0, y0)  # warm up
    t_field = min(timed(lambda: field(0.0, y0), min_time=1e9, max_reps=reps)[0] for _ in range(1))
    print(f"\n  d = {d}, l = {l}, h = {h}: one field evaluation {t_field * 1e3:.2f} ms")
    ratios = {}
    for name in ("lie-euler", "cg3", "rkmk4", "cf4", "rkmk45"):
        st = ra.STEPPERS[name]()
        nfev = st.step(field, 0.0, y0, dt).nfev  # warm up, and the number of evaluations
        step_t, eval_t = [], []
        for _ in range(reps):  # interleaved, so load changes hit both alike
            t0 = time.perf_counter()
            st.step(field, 0.0, y0, dt)
            step_t.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            for k in range(nfev):  # the same number of evaluations, at the stage times
                field(k * dt / nfev, y0)
            eval_t.append(time.perf_counter() - t0)
        ratio = min(step_t) / min(eval_t)
        ratios[name] = ratio
        print(f"    {name:10s} step {min(step_t) * 1e3:8.2f} ms, {nfev} field evaluations "
              f"{min(eval_t) * 1e3:8.2f} ms, ratio {ratio:.3f}")
    return ratios


def plot(results, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(13, 5.2))
    for ax, (title, rows) in zip(axes, results):
        labels = list(dict.fromkeys(r[0] for r in rows))
        for lab in labels:
            pts = sorted((t, e) for (l_, _, t, e) in rows if l_ == lab)
            ts, es = np.array(pts).T
            style = "-o" if lab.startswith("riemattn") else "--s"
            ax.loglog(ts, np.maximum(es, 1e-16), style, ms=4, label=lab)
        ax.axhline(1e-8, color="gray", lw=0.8, ls=":")
        ax.set_xlabel("wall time [s]")
        ax.set_ylabel("max error at t = 10")
        ax.set_title(title)
        ax.grid(True, which="major", alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, loc="lower center", ncol=5, frameon=False)
    fig.suptitle("Work-precision, hemisphere problem (ARXIV section 7.2), 10 tokens on S^2, h = 2, horizon 10")
    fig.tight_layout(rect=(0, 0.13, 1, 1))
    fig.savefig(path, dpi=120)
    print(f"\n  wrote {path}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller sweeps (minutes)")
    ap.add_argument("--n-traj", type=int, default=100)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "docs", "work_precision.png"))
    ap.add_argument("--cpu", type=int, help="run on this CPU only (and pin vs_diffrax's processes to it)")
    ap.add_argument("--no-diffrax", action="store_true", help="skip the comparison with diffrax")
    args = ap.parse_args(argv)
    if args.cpu is not None:  # one CPU, one BLAS thread (threads sharing a CPU only wait for each other)
        os.environ["RIEMATTN_BENCH_CPU"] = str(args.cpu)
        os.sched_setaffinity(0, {args.cpu})
        from threadpoolctl import threadpool_limits

        threadpool_limits(1)
    field = ra.AttentionField(hemisphere_P, time_vectorized=True)
    print(f"riemattn {ra.__version__}, numpy {np.__version__}, python {sys.version.split()[0]}, "
          f"{os.cpu_count()} CPUs" + (f", pinned to CPU {args.cpu}" if args.cpu is not None else ""))
    results, claims = [], {}
    for title, n_traj, seed in (("(a) one trajectory", 1, 0), (f"(b) ensemble of {args.n_traj}", args.n_traj, 1)):
        y0 = initial(n_traj, seed)
        t0 = time.perf_counter()
        ref = reference(field, y0)
        print(f"\n{title}: reference (DOP853, 1e-13) in {time.perf_counter() - t0:.1f} s; "
              f"load average {os.getloadavg()[0]:.2f}")
        rows = work_precision(field, y0, ref, sweeps(args.quick, ensemble=n_traj > 1))
        claims[title] = summarize(rows)
        print(f"  load average after this part: {os.getloadavg()[0]:.2f}", flush=True)
        results.append((title, rows))
    ratios = lie_step_cost()
    print(f"  load average: {os.getloadavg()[0]:.2f}")
    plot(results, os.path.abspath(args.out))
    print("\nsummary")
    (single_title, single), (ens_title, ens) = claims.items()
    print("  " + ratio_line(f"ensemble (B={args.n_traj})", ens, "looped scipy DOP853"))
    print("  " + ratio_line("single trajectory", single, "scipy DOP853"))
    # the part of each ratio an integrator can change: riemattn's time outside the field
    for prefix, claim, y0 in ((f"ensemble (B={args.n_traj})", ens, initial(args.n_traj, 1)),
                              ("single trajectory", single, initial(1, 0))):
        if claim is not None:
            print("  " + bound_line(prefix, field_share(field, y0, claim)), flush=True)
    print("  load average (1, 5, 15 min) at the end: " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))
    print("  Lie step / field evaluations at d = 500: " + ", ".join(f"{k} {v:.3f}" for k, v in ratios.items()))
    if args.no_diffrax:
        return
    import importlib.util

    if importlib.util.find_spec("diffrax") is None or importlib.util.find_spec("jax") is None:
        print("\ndiffrax is not installed: no comparison with it (pip install -e '.[bench]' in a separate venv)")
        return
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import vs_diffrax

    print("\n" + "=" * 100 + "\nriemattn against diffrax (benchmarks/vs_diffrax.py)\n", flush=True)
    vs_diffrax.main(["--batch", "100", "1000"] + (["--rounds", "1"] if args.quick else []))


if __name__ == "__main__":
    main()
