"""The compiled engine against the tools a user would pick instead, at equal measured error.

Every timed solve runs in a fresh process (``--worker``), after one untimed call that compiles
(numba's cache, jax's jit) and warms up; the process then times ``--repeat`` calls, and more while
they add up to less than ``--min-time`` seconds, and keeps the best. For each tool, a tolerance grid (rtol = atol, loose to tight) is swept and the tool's time is
its fastest run whose measured error is at most the case's target: ratios compare tools at equal
measured error, not at equal tolerance. The 1-minute load average is printed with every timing
(the development machine has 2 cores; take final numbers on a quiet machine).

Cases
-----
(a) Stiff single trajectories (``benchmarks/stiff.py``'s (A) and (B)): GLPR's USA at beta = 9,
    6 tokens on S^2, T = 20; USA at beta = 16, 16 tokens, causal mask, T = 20. Tools: riemattn's
    compiled rodas4 / rodas4p / auto; SciPy's LSODA calling riemattn's field (the same field, in
    NumPy); numbalsoda's LSODA calling the same field written as a numba ``cfunc`` (asserted equal
    to riemattn's ``field(t, y)`` to 1e-12 before timing); riemattn's NumPy engine (auto) for the
    record. Error: max |y(T) - y_ref(T)| over tokens after renormalisation (LSODA integrates the
    unprojected ODE); reference SciPy Radau at 1e-13 with the closed-form Jacobian (cached under
    benchmarks/.cache/, shared with stiff.py). Target 1e-8.
(b) The hemisphere ensemble (``benchmarks/vs_diffrax.py``: ARXIV section 7.2, 10 tokens on S^2, two
    time-varying heads, T = 10) at B = 1, 100, 1000: riemattn compiled dopri5 / dop853, the NumPy
    engine's dopri5 / dop853, and diffrax's Dopri5 under ``jax.vmap`` (jit-compiled; compile time
    excluded). Reference: SciPy DOP853 at 1e-13 on the flattened batch. Target 1e-8.
(c) Cost per step against the FLOP floor: one trajectory, one head, random P, U = identity,
    "softmax", sphere, for (l, d) in (6, 3), (10, 3), (32, 16), (64, 64), (200, 2); rk4 with a fixed
    step on both engines. The floor is the multiply-adds of the field's formula (2 l d^2 + 4 l^2 d
    + 4 l d per evaluation, exponentials not counted; 4 evaluations per rk4 step) at the rate of
    NumPy's matrix product on one thread (measured in the same process). Then where
    ``engine="auto"`` switches: the engine it picks and both engines' times for dopri5 at
    B in 1, 10, 100.
(d) The mixed-beta stiff batch (``stiff.py``'s (C)): 1 000 USA trajectories, 6 tokens, beta uniform in
    [1, 16], T = 5: compiled rodas4p / auto (one batched call) against SciPy LSODA looped over the
    trajectories, at max error <= 5e-7 (the references, LSODA at 1e-12 with the closed-form
    Jacobian, are accurate to a few 1e-9: see stiff.py).
(e) One trajectory at a mid size: 32 tokens on S^15, one head (random P, U = I, "softmax"), T = 5:
    riemattn's default call (``ra.integrate(field, y0, (0, T), "dop853", rtol=tol, atol=tol)``:
    engine "auto") against SciPy's DOP853 on a right-hand side written in plain NumPy (asserted equal
    to riemattn's field to 1e-14 before timing). The same tolerance grid for both; error: max
    |y(T) - y_ref(T)| after renormalisation; reference SciPy DOP853 at 1e-13. Target 1e-8.
(f) Thread efficiency: (b)'s problem at B = 1000 (quick: 200), compiled dopri5 at tol 1e-9, on 1 and
    on 2 threads (``numba.set_num_threads``), each in a fresh process: time on 1 / (2 x time on 2).
(g) Ensembles of other shapes (``benchmarks/_shapes.py``): constant heads P_eta with entries
    N(0, 1/d) (fixed seeds), beta = 1, U = I, "softmax", full mask, tokens on S^{d-1}, T = 20, for
    (l, d, h) = (8, 4, 1), (16, 8, 2), (32, 8, 1), at B = 100 and 1000 (quick: 20 and 100): (b)'s
    tools less the NumPy dop853 (compiled dopri5 / dop853, NumPy dopri5, diffrax Dopri5 under
    ``jax.vmap`` on a JAX field asserted equal to riemattn's to 1e-12). Reference: SciPy DOP853 at
    1e-13 on the flattened batch (a NumPy right-hand side), checked against per-trajectory solves
    of 3 trajectories. Target 1e-8; summary lines against issue 42's >= 4x diffrax (every B) and
    >= 3x the NumPy engine (B = 1000).

Run (the bench venv: ``pip install -e ".[bench]"`` gives jax and diffrax; numbalsoda is in the
``bench-lsoda`` extra, which needs a Fortran compiler; see docs/performance.md)::

    .venv-bench/bin/python benchmarks/compiled.py            # everything: ~20-40 min
    .venv-bench/bin/python benchmarks/compiled.py --quick    # smaller grids and sizes: a few minutes
    .venv-bench/bin/python benchmarks/compiled.py --only ab  # some cases

Without jax/diffrax or numbalsoda their lines say "not installed". Prints a summary with the
issue-37 and issue-42 ratios.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _shapes  # noqa: E402  (case (g)'s problems)
import stiff  # noqa: E402  (references, cache, token draws shared with benchmarks/stiff.py)

STIFF_TARGET, BATCH_TARGET = 1e-8, 5e-7
STIFF_TOLS = [1e-4, 1e-5, 1e-6, 3e-7, 1e-7, 3e-8, 1e-8, 3e-9]
LSODA_TOLS = [1e-6, 1e-7, 1e-8, 1e-9, 1e-10, 1e-11]
EXPLICIT_TOLS = [1e-8, 3e-9, 1e-9, 3e-10, 1e-10]
SIZES = [(6, 3), (10, 3), (32, 16), (64, 64), (200, 2)]
MID_TOLS = [1e-5, 3e-6, 1e-6, 3e-7, 1e-7, 3e-8, 1e-8, 3e-9, 1e-9]
MID_SHAPE, MID_T = (32, 16), 5.0


def load() -> float:
    return os.getloadavg()[0]


# ------------------------------------------------------------------------------------------------
# The problems (built the same way in the parent and in every worker)
def stiff_problem(name, quick):
    import riemattn as ra

    if name == "usa9":
        return ra.usa(9.0, 3), stiff.tokens(np.random.default_rng(1), (6, 3)), 20.0
    if name == "usa16c":
        T = 2.0 if quick else 20.0
        return ra.usa(16.0, 3, mask="causal"), stiff.tokens(np.random.default_rng(2), (16, 3)), T
    raise KeyError(name)


def batch_problem(B, quick):
    import riemattn as ra

    rng = np.random.default_rng(3)  # stiff.py's (C): the same draws, so the cached references serve
    betas = rng.uniform(1.0, 16.0, B)
    y0 = stiff.tokens(rng, (B, 6, 3))
    return ra.usa(betas, 3), betas, y0, (2.0 if quick else 5.0)


def hemisphere_problem(B):
    import vs_diffrax

    return hemisphere_field(), vs_diffrax.initial(B, 1), vs_diffrax.T_END


def hemisphere_field():
    """ARXIV Figures 2-3's two heads as a time-dependent kind the compiled engine supports."""
    import riemattn as ra
    from riemattn.experiments._papers import hemisphere_heads

    return ra.AttentionField(hemisphere_heads())


def size_problem(l, d, B=1):
    import riemattn as ra

    rng = np.random.default_rng(l * 1000 + d)
    P = rng.normal(size=(d, d)) / math.sqrt(d)
    y0 = stiff.tokens(rng, (B, l, d) if B > 1 else (l, d))
    return ra.AttentionField(P, normalization="softmax"), y0


# ------------------------------------------------------------------------------------------------
# numbalsoda: the USA field as a numba cfunc
def mid_problem():
    """(e): one head on S^15, 32 tokens; the field and the same field in plain NumPy."""
    import riemattn as ra

    l, d = MID_SHAPE
    rng = np.random.default_rng(0)
    P = rng.standard_normal((d, d)) / math.sqrt(d)
    y0 = rng.standard_normal((l, d))
    y0 /= np.linalg.norm(y0, axis=1, keepdims=True)

    def rhs(t, x):
        Y = x.reshape(l, d)
        S = Y @ (Y @ P.T).T  # s_ij = y_i . P y_j
        S -= S.max(axis=1, keepdims=True)
        A = np.exp(S)
        A /= A.sum(axis=1, keepdims=True)
        F = A @ Y
        F -= np.sum(F * Y, axis=1, keepdims=True) * Y
        return F.ravel()

    field = ra.AttentionField(P, normalization="softmax")
    gap = np.max(np.abs(rhs(0.0, y0.ravel()) - np.asarray(field(0.0, y0)).ravel()))
    assert gap <= 1e-14, f"the NumPy right-hand side differs from riemattn's field by {gap:.1e}"
    return field, rhs, y0, MID_T


def mid_reference():
    from scipy.integrate import solve_ivp

    field, rhs, y0, T = mid_problem()
    y = solve_ivp(rhs, (0.0, T), y0.ravel(), method="DOP853", rtol=1e-13, atol=1e-13).y[:, -1].reshape(y0.shape)
    return y / np.linalg.norm(y, axis=-1, keepdims=True)


def usa_cfunc():
    """A numba ``cfunc`` of GLPR's USA field in riemattn's ambient form F_i = f_i - <x_i, f_i> x_i,
    f_i = (1/n) sum_{j (<= i if causal)} e^{beta <x_i, x_j>} x_j; data = (beta, n, d, causal)."""
    import numba as nb
    from numbalsoda import lsoda_sig

    @nb.cfunc(lsoda_sig)
    def rhs(t, u_, du_, p_):
        p = nb.carray(p_, (4,))
        beta, n, d, causal = p[0], int(p[1]), int(p[2]), p[3] != 0.0
        u = nb.carray(u_, (n * d,))
        du = nb.carray(du_, (n * d,))
        for i in range(n):
            for k in range(d):
                du[i * d + k] = 0.0
            for j in range(i + 1 if causal else n):
                s = 0.0
                for k in range(d):
                    s += u[i * d + k] * u[j * d + k]
                w = math.exp(beta * s) / n
                for k in range(d):
                    du[i * d + k] += w * u[j * d + k]
            xf = 0.0
            for k in range(d):
                xf += u[i * d + k] * du[i * d + k]
            for k in range(d):
                du[i * d + k] -= xf * u[i * d + k]

    return rhs


def check_cfunc(field, y0, beta, causal):
    """Assert numbalsoda's cfunc equals riemattn's field(t, y) to 1e-12 (relative), on and off the sphere."""
    import ctypes

    rhs = usa_cfunc()
    n, d = y0.shape
    data = np.array([beta, n, d, float(causal)])
    f = ctypes.CFUNCTYPE(None, ctypes.c_double, *[ctypes.POINTER(ctypes.c_double)] * 3)(rhs.address)
    worst = 0.0
    for y in (y0, 1.3 * y0 + 0.1):
        y = np.ascontiguousarray(y)
        out = np.zeros(n * d)
        ptr = lambda a: a.ctypes.data_as(ctypes.POINTER(ctypes.c_double))  # noqa: E731
        f(0.0, ptr(y.ravel()), ptr(out), ptr(data))
        want = field(0.0, y).ravel()
        worst = max(worst, float(np.max(np.abs(out - want)) / max(1.0, np.max(np.abs(want)))))
    assert worst <= 1e-12, f"numbalsoda's field differs from riemattn's by {worst:.2e}"
    return worst


# ------------------------------------------------------------------------------------------------
# Workers: one tool, one tolerance, one fresh process
def runner(spec):
    """A function () -> (y_T renormalised, info) for the spec's tool, and the reference."""
    import riemattn as ra

    case, tool, tol = spec["case"], spec["tool"], spec["tol"]
    data = spec["data"]
    ref = np.load(os.path.join(data, f"ref_{case}.npy"))
    if case.startswith("hemi"):
        field, y0, T = hemisphere_problem(int(case[4:]))
    elif case.startswith("shape"):
        field, y0, T = _shapes.problem(case)
    elif case.startswith("batch"):
        field, betas, y0, T = batch_problem(int(case[5:]), spec["quick"])
    elif case == "mid":
        field, rhs, y0, T = mid_problem()
    else:
        field, y0, T = stiff_problem(case, spec["quick"])

    if tool.startswith(("compiled ", "numpy ")):
        engine, stepper = tool.split()

        def run():
            sol = ra.integrate(field, y0, (0.0, T), stepper=stepper, rtol=tol, atol=tol, saveat=[T],
                               engine=engine, max_steps=10**6)
            assert sol.engine == engine, (sol.engine, engine)
            return sol.y[-1], {"steps": int(sol.n_steps), "nfev": int(sol.nfev), "ok": bool(sol.success)}
    elif tool == "default dop853":  # engine "auto", as a user calls it
        def run():
            sol = ra.integrate(field, y0, (0.0, T), "dop853", rtol=tol, atol=tol)
            y = np.asarray(sol.y[-1])
            return (y / np.linalg.norm(y, axis=-1, keepdims=True),
                    {"steps": int(sol.n_steps), "nfev": int(sol.nfev), "ok": bool(sol.success), "engine": sol.engine})
    elif tool == "scipy DOP853":
        from scipy.integrate import solve_ivp

        def run():
            sol = solve_ivp(rhs, (0.0, T), y0.ravel(), method="DOP853", rtol=tol, atol=tol)
            y = sol.y[:, -1].reshape(y0.shape)
            return y / np.linalg.norm(y, axis=-1, keepdims=True), {"nfev": int(sol.nfev), "ok": bool(sol.success)}
    elif tool == "scipy LSODA":
        if case.startswith("batch"):
            fields = [ra.usa(b, 3) for b in betas]

            def run():
                ys, nfev, ok = [], 0, True
                for k, f in enumerate(fields):
                    _, n, y, s = stiff.scipy_run(f, y0[k], T, "LSODA", tol)
                    ys.append(y)
                    nfev, ok = nfev + n, ok and s
                return np.stack(ys), {"nfev": nfev, "ok": bool(ok)}
        else:
            def run():
                _, nfev, y, ok = stiff.scipy_run(field, y0, T, "LSODA", tol)
                return y, {"nfev": int(nfev), "ok": bool(ok)}
    elif tool == "numbalsoda LSODA":
        from numbalsoda import lsoda

        address = usa_cfunc().address
        n, d = y0.shape
        p = np.array([float(field.beta), n, d, float(field.mask == "causal")])
        u0, t_eval = np.ascontiguousarray(y0.ravel()), np.array([0.0, T])

        def run():
            u, ok = lsoda(address, u0, t_eval, data=p, rtol=tol, atol=tol, mxstep=10**7)
            y = u[-1].reshape(n, d)
            return y / np.linalg.norm(y, axis=-1, keepdims=True), {"ok": bool(ok)}
    elif tool == "diffrax Dopri5":
        import vs_diffrax

        # the field in JAX: the hemisphere's (b), or the shape's constant heads (g)
        jax, jfield = vs_diffrax.jax_field() if case.startswith("hemi") else \
            _shapes.jax_field(_shapes.heads(*_shapes.parse(case)[:3]))
        import diffrax

        def solve(y):
            sol = diffrax.diffeqsolve(
                diffrax.ODETerm(jfield), diffrax.Dopri5(), 0.0, T, None, y,
                stepsize_controller=diffrax.PIDController(rtol=tol, atol=tol),
                saveat=diffrax.SaveAt(t1=True), max_steps=10**6)
            return sol.ys[-1], sol.stats["num_steps"], sol.result == diffrax.RESULTS.successful

        solve_all = jax.jit(jax.vmap(solve))
        y0j = jax.numpy.asarray(y0)

        def run():
            yT, steps, ok = jax.block_until_ready(solve_all(y0j))
            y = np.asarray(yT)
            return (y / np.linalg.norm(y, axis=-1, keepdims=True),
                    {"steps": int(np.max(np.asarray(steps))), "ok": bool(np.all(np.asarray(ok)))})
    else:
        raise KeyError(tool)
    return run, ref


def worker(spec):
    vd = sys.modules.get("vs_diffrax")
    if vd is None:
        import vs_diffrax as vd
    vd.pin_cpu()
    if spec.get("threads"):
        import numba

        numba.set_num_threads(int(spec["threads"]))
    run, ref = runner(spec)
    t0 = time.perf_counter()
    run()  # compile (numba cache / jit) and warm up
    first = time.perf_counter() - t0
    if spec["tool"].startswith(("compiled ", "default ")):
        # the first call compiles the field kernel specialised to the tokens' shape in a background
        # process (riemattn.dynamics.kernels._kernel_shaped; small shapes): time the runs after it
        from riemattn.solvers.compiled import _background, _kernel

        t1 = time.perf_counter()
        for proc in list(_background._SHAPES.values()):
            if proc is not None:
                proc.wait()
        if _background._SHAPES:
            time.sleep(_kernel.NOT_READY_RECHECK)
            run()
        first += time.perf_counter() - t1
    times = []  # --repeat calls, and more while they add up to less than --min-time (at most 1000)
    while len(times) < spec["repeat"] or (sum(times) < spec.get("min_time", 0.0) and len(times) < 1000):
        t0 = time.perf_counter()
        y, info = run()
        times.append(time.perf_counter() - t0)
    err = float(np.max(np.abs(y - ref))) if np.all(np.isfinite(y)) else math.inf
    out = dict(spec, time=min(times), times=times, first=first, err=err, load=load(), **info)
    print("RESULT " + json.dumps(out), flush=True)


#: seconds of timed calls a worker makes at least (--min-time); fresh processes per point (--processes)
MIN_TIME = [0.0]
PROCESSES = [1]


def spawn(spec):
    spec = dict(spec, min_time=MIN_TIME[0])
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", json.dumps(spec)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        print(f"    {spec['tool']} tol {spec['tol']:.0e}: FAILED ({' | '.join(tail)[:300]})", flush=True)
        return None
    return json.loads(lines[-1][len("RESULT "):])


def sweep(case, tool, tols, target, data, quick, repeat):
    """Run ``tool`` over ``tols`` (loose to tight), each in a fresh process; stop once the error is
    10x below target. Returns the fastest run with error <= target (None if none)."""
    good = []
    for tol in tols:
        runs = [spawn(dict(case=case, tool=tool, tol=tol, data=data, quick=quick, repeat=repeat))
                for _ in range(PROCESSES[0])]  # (a process's speed varies on a shared machine: the best)
        runs = [r for r in runs if r is not None]
        if not runs:
            continue
        r = min(runs, key=lambda r: r["time"])
        ok = r["ok"] and r["err"] <= target
        print(f"    {tool:18s} tol {tol:7.1e}  {r['time']:9.4f} s  error {r['err']:.2e}"
              f"{'' if r['ok'] else ' FAILED'}  steps {r.get('steps', '-')}  first call {r['first']:.2f} s"
              f"  load {r['load']:.1f}", flush=True)
        if ok:
            good.append(r)
        if r["ok"] and r["err"] <= 0.1 * target:
            break
    return min(good, key=lambda r: r["time"]) if good else None


def report(title, best, base, target):
    print(f"\n  {title}: fastest run with max error <= {target:g}, and its time against {base}'s")
    b = best.get(base)
    for tool, r in best.items():
        if r is None:
            print(f"    {tool:18s} --  (no run reached the target)")
            continue
        ratio = f"  {b['time'] / r['time']:7.2f}x faster than {base}" if b and tool != base else ""
        print(f"    {tool:18s} {r['time']:9.4f} s  (tol {r['tol']:.0e}, error {r['err']:.2e}, steps "
              f"{r.get('steps', '-')}){ratio}")


def installed(module):
    import importlib.util

    return importlib.util.find_spec(module) is not None


# ------------------------------------------------------------------------------------------------
# The cases
def case_a(data, quick, repeat, summary):
    for name, title in (("usa9", "USA beta = 9, 6 tokens, T = 20"),
                        ("usa16c", f"USA beta = 16, 16 causal tokens, T = {2 if quick else 20}")):
        field, y0, T = stiff_problem(name, quick)
        print(f"\n== (a) {title} ==  load {load():.1f}", flush=True)
        np.save(os.path.join(data, f"ref_{name}.npy"), stiff.reference(field, y0, T))
        tools = ["compiled rodas4", "compiled rodas4p", "compiled auto", "scipy LSODA"]
        if installed("numbalsoda"):
            print(f"    numbalsoda's cfunc vs riemattn's field: max relative difference "
                  f"{check_cfunc(field, y0, float(field.beta), field.mask == 'causal'):.1e}")
            tools.append("numbalsoda LSODA")
        else:
            print("    numbalsoda: not installed, its lines skipped (pip install -e '.[bench-lsoda]' needs "
                  "gfortran; see docs/performance.md)")
        tools.append("numpy auto")
        best = {}
        for tool in tools:
            tols = LSODA_TOLS if "LSODA" in tool else STIFF_TOLS
            best[tool] = sweep(name, tool, tols[::2] if quick else tols, STIFF_TARGET, data, quick, repeat)
        report(title, best, "scipy LSODA", STIFF_TARGET)
        ours = [best[t] for t in best if t.startswith("compiled") and best[t]]
        if ours:
            fastest = min(ours, key=lambda r: r["time"])
            for peer in ("scipy LSODA", "numbalsoda LSODA"):
                if best.get(peer):
                    summary.append(f"(a) {title}: {fastest['tool']} {best[peer]['time'] / fastest['time']:.1f}x "
                                   f"faster than {peer} ({fastest['time'] * 1e3:.2f} ms vs "
                                   f"{best[peer]['time'] * 1e3:.2f} ms, errors {fastest['err']:.1e} / "
                                   f"{best[peer]['err']:.1e})")


def ensemble(case, title, tools, data, quick, repeat):
    """Sweep ``tools`` (and diffrax's Dopri5 when installed) over the explicit tolerance grid on the
    ensemble ``case`` (its reference saved in ``data``), print the report; return (best per tool,
    the fastest compiled run)."""
    if installed("diffrax"):
        tools = tools + ["diffrax Dopri5"]
    else:
        print("    diffrax: not installed, its lines skipped (pip install -e '.[bench]')")
    best = {tool: sweep(case, tool, EXPLICIT_TOLS[::2] if quick else EXPLICIT_TOLS, STIFF_TARGET, data, quick,
                        repeat) for tool in tools}
    report(title, best, "numpy dopri5", STIFF_TARGET)
    ours = [best[t] for t in best if t.startswith("compiled") and best[t]]
    return best, (min(ours, key=lambda r: r["time"]) if ours else None)


def case_b(data, quick, repeat, summary, batches=None):
    import vs_diffrax

    batches = batches or ([1, 100] if quick else [1, 100, 1000])
    for B in batches:
        field, y0, T = hemisphere_problem(B)
        print(f"\n== (b) hemisphere ensemble, B = {B}, T = {T:g} ==  load {load():.1f}", flush=True)
        ref = stiff.cached(f"hemi_ref_{B}", y0.tobytes(), lambda: vs_diffrax.reference(y0))
        np.save(os.path.join(data, f"ref_hemi{B}.npy"), ref)
        tools = ["compiled dopri5", "compiled dop853", "numpy dopri5", "numpy dop853"]
        best, mine = ensemble(f"hemi{B}", f"hemisphere B = {B}", tools, data, quick, repeat)
        if mine:
            for peer in ("diffrax Dopri5", "numpy dopri5", "numpy dop853"):
                if best.get(peer):
                    summary.append(f"(b) hemisphere B = {B}: {mine['tool']} {best[peer]['time'] / mine['time']:.1f}x "
                                   f"faster than {peer} ({mine['time']:.4f} s vs {best[peer]['time']:.4f} s)")


def case_g(data, quick, repeat, summary):
    """Ensembles of other shapes: constant heads, softmax (benchmarks/_shapes.py); issue 42's targets
    >= 4x diffrax at every B and >= 3x the NumPy engine at B = 1000."""
    for l, d, h, T in _shapes.SHAPES:
        for B in [20, 100] if quick else [100, 1000]:
            case = _shapes.case_name(l, d, h, B)
            title = f"{l} tokens on S^{d - 1}, {h} head{'s' if h > 1 else ''}, B = {B}"
            print(f"\n== (g) {title}, T = {T:g} (constant heads, softmax) ==  load {load():.1f}", flush=True)
            if installed("diffrax"):
                print(f"    JAX field vs riemattn's field(t, y): max relative difference "
                      f"{_shapes.check_jax(case):.1e} (asserted <= 1e-12)", flush=True)
            field, y0, T = _shapes.problem(case)

            def compute():
                ref, gap = _shapes.reference(case)
                print(f"    reference (SciPy DOP853 1e-13, flattened batch) vs per-trajectory solves of 3 "
                      f"trajectories: max difference {gap:.1e}", flush=True)
                assert gap <= 0.1 * STIFF_TARGET, "the batch reference is not 10x below the target"
                return ref

            key = y0.tobytes() + _shapes.heads(l, d, h).tobytes() + repr(T).encode()
            np.save(os.path.join(data, f"ref_{case}.npy"), stiff.cached(f"{case}_ref", key, compute))
            best, mine = ensemble(case, title, ["compiled dopri5", "compiled dop853", "numpy dopri5"],
                                  data, quick, repeat)
            if not mine:
                continue
            line = f"(g) {title}: {mine['tool']} {mine['time']:.4f} s (tol {mine['tol']:.0e}, error " \
                   f"{mine['err']:.1e}, steps {mine.get('steps')})"
            for peer, target in (("diffrax Dopri5", 4.0), ("numpy dopri5", 3.0 if B == 1000 else None)):
                r = best.get(peer)
                if r is None:
                    line += f"; {peer}: not measured"
                    continue
                ratio = r["time"] / mine["time"]
                goal = "" if target is None else f", target >= {target:g}x {'met' if ratio >= target else 'NOT met'}"
                line += f"; {peer}/compiled {ratio:.2f} ({r['time']:.4f} s, steps {r.get('steps')}{goal})"
            print(f"    {line[4:]}  load {load():.1f}", flush=True)
            summary.append(line)


def size_worker(spec):
    """(c): time per rk4 step of one trajectory on one engine, and the machine's matmul rate."""
    import vs_diffrax

    vs_diffrax.pin_cpu()
    from threadpoolctl import threadpool_limits

    import riemattn as ra

    l, d, engine, steps = spec["l"], spec["d"], spec["engine"], spec["steps"]
    field, y0 = size_problem(l, d)
    with threadpool_limits(1):
        T = 0.01 * steps
        ra.integrate(field, y0, (0.0, 0.02), stepper="rk4", dt=0.01, engine=engine)  # compile / warm up
        times = []
        for _ in range(spec["repeat"]):
            t0 = time.perf_counter()
            sol = ra.integrate(field, y0, (0.0, T), stepper="rk4", dt=0.01, saveat=[T], engine=engine)
            times.append(time.perf_counter() - t0)
        assert sol.engine == engine and sol.success
        a = np.random.default_rng(0).normal(size=(400, 400))
        rate = 0.0
        for _ in range(5):
            t0 = time.perf_counter()
            a @ a
            rate = max(rate, 2 * 400**3 / (time.perf_counter() - t0))
    out = dict(spec, per_step=min(times) / steps, rate=rate, load=load())
    print("RESULT " + json.dumps(out), flush=True)


def auto_worker(spec):
    """(c): which engine "auto" picks for dopri5 on a batch, and its time (the best of ``repeat``
    calls after one warm-up call)."""
    import riemattn as ra

    field, y0 = size_problem(spec["l"], spec["d"], spec["B"])
    args = dict(stepper="dopri5", rtol=1e-8, atol=1e-8, engine=spec["engine"])
    ra.integrate(field, y0, (0.0, 0.1), **args)
    times = []
    for _ in range(spec.get("repeat", 3)):
        t0 = time.perf_counter()
        sol = ra.integrate(field, y0, (0.0, 2.0), saveat=[2.0], **args)
        times.append(time.perf_counter() - t0)
    out = dict(spec, time=min(times), ran=sol.engine, load=load())
    print("RESULT " + json.dumps(out), flush=True)


def spawn_kind(kind, spec):
    cmd = [sys.executable, os.path.abspath(__file__), f"--{kind}", json.dumps(spec)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        print(f"    {kind} {spec} FAILED: {(proc.stderr or proc.stdout).strip().splitlines()[-1:]}", flush=True)
        return None
    return json.loads(lines[-1][len("RESULT "):])


def case_c(quick, repeat, summary):
    print(f"\n== (c) cost per rk4 step of one trajectory against the FLOP floor ==  load {load():.1f}")
    print(f"    {'(l, d)':>9s} {'compiled':>12s} {'numpy':>12s} {'floor':>10s} {'compiled/floor':>15s}"
          f" {'numpy/compiled':>15s}")
    for l, d in SIZES:
        steps = 50 if l * d > 2000 else 200
        r = {e: spawn_kind("size-worker", dict(l=l, d=d, engine=e, steps=steps, repeat=repeat))
             for e in ("compiled", "numpy")}
        if None in r.values():
            continue
        flops = 4 * (2 * l * d * d + 4 * l * l * d + 4 * l * d)
        floor = flops / r["compiled"]["rate"]
        c, n = r["compiled"]["per_step"], r["numpy"]["per_step"]
        print(f"    {str((l, d)):>9s} {c * 1e6:9.1f} us {n * 1e6:9.1f} us {floor * 1e6:7.2f} us {c / floor:15.1f}"
              f" {n / c:15.1f}   load {r['compiled']['load']:.1f}", flush=True)
        summary.append(f"(c) (l, d) = {(l, d)}: compiled {c * 1e6:.1f} us per rk4 step = {c / floor:.1f}x the "
                       f"FLOP floor; NumPy engine {n / c:.1f}x slower")
    print("\n    where engine='auto' switches (dopri5, tol 1e-8, T = 2):")
    for l, d in SIZES[:3] if quick else SIZES:
        for B in (1, 10, 100):
            r = {e: spawn_kind("auto-worker", dict(l=l, d=d, B=B, engine=e, repeat=repeat))
                 for e in ("auto", "compiled", "numpy")}
            if None in r.values():
                continue
            print(f"    (l, d) = {str((l, d)):9s} B = {B:4d}: auto ran {r['auto']['ran']:8s} "
                  f"{r['auto']['time']:8.4f} s; compiled {r['compiled']['time']:8.4f} s, numpy "
                  f"{r['numpy']['time']:8.4f} s  load {r['auto']['load']:.1f}", flush=True)


def case_d(data, quick, repeat, summary):
    B = 50 if quick else 1000
    field, betas, y0, T = batch_problem(B, quick)
    print(f"\n== (d) {B} USA trajectories, beta uniform in [1, 16], 6 tokens, T = {T:g} ==  load {load():.1f}")
    np.save(os.path.join(data, f"ref_batch{B}.npy"), stiff.batch_references(betas, y0, T))
    best = {}
    for tool, tols in (("compiled rodas4p", [3e-7, 1e-7, 3e-8, 1e-8, 3e-9]),
                       ("compiled auto", [3e-7, 1e-7, 3e-8, 1e-8, 3e-9]),
                       ("scipy LSODA", [1e-8, 1e-9, 1e-10, 1e-11])):
        best[tool] = sweep(f"batch{B}", tool, tols, BATCH_TARGET, data, quick, 1 if "LSODA" in tool else repeat)
    report(f"batch of {B}", best, "scipy LSODA", BATCH_TARGET)
    ours = [best[t] for t in best if t.startswith("compiled") and best[t]]
    if ours and best.get("scipy LSODA"):
        mine = min(ours, key=lambda r: r["time"])
        summary.append(f"(d) batch of {B}: {mine['tool']} {best['scipy LSODA']['time'] / mine['time']:.1f}x faster "
                       f"than looped LSODA ({mine['time']:.2f} s vs {best['scipy LSODA']['time']:.2f} s, errors "
                       f"{mine['err']:.1e} / {best['scipy LSODA']['err']:.1e})")


def case_e(data, quick, repeat, summary):
    l, d = MID_SHAPE
    title = f"one trajectory, {l} tokens on S^{d - 1}, one head, T = {MID_T:g}"
    print(f"\n== (e) {title} ==  load {load():.1f}", flush=True)
    np.save(os.path.join(data, "ref_mid.npy"), stiff.cached("mid_ref", repr(MID_SHAPE).encode(), mid_reference))
    best = {tool: sweep("mid", tool, MID_TOLS, STIFF_TARGET, data, quick, repeat)
            for tool in ("default dop853", "scipy DOP853")}
    report(title, best, "scipy DOP853", STIFF_TARGET)
    mine, peer = best["default dop853"], best["scipy DOP853"]
    if mine and peer:
        summary.append(f"(e) {title}: riemattn's default (engine {mine.get('engine')}) "
                       f"{peer['time'] / mine['time']:.2f}x faster than SciPy DOP853 on a NumPy right-hand side "
                       f"({mine['time'] * 1e3:.2f} ms vs {peer['time'] * 1e3:.2f} ms, errors {mine['err']:.1e} / "
                       f"{peer['err']:.1e})")


def case_f(data, quick, repeat, summary):
    """Thread efficiency of the compiled engine on 2 cores: time on 1 thread / (2 x time on 2)."""
    import vs_diffrax

    B = 200 if quick else 1000
    field, y0, T = hemisphere_problem(B)
    print(f"\n== (f) thread efficiency: hemisphere ensemble, B = {B}, compiled dopri5, tol 1e-9 ==  "
          f"load {load():.1f}", flush=True)
    ref = stiff.cached(f"hemi_ref_{B}", y0.tobytes(), lambda: vs_diffrax.reference(y0))
    np.save(os.path.join(data, f"ref_hemi{B}.npy"), ref)
    r = {n: spawn(dict(case=f"hemi{B}", tool="compiled dopri5", tol=1e-9, data=data, quick=quick,
                       repeat=repeat, threads=n)) for n in (1, 2)}
    if None in r.values():
        return
    eff = r[1]["time"] / (2 * r[2]["time"])
    print(f"    1 thread {r[1]['time']:.3f} s, 2 threads {r[2]['time']:.3f} s: efficiency {eff:.2f}  "
          f"load {r[2]['load']:.1f}", flush=True)
    summary.append(f"(f) hemisphere B = {B}: thread efficiency on 2 threads {eff:.2f} "
                   f"({r[1]['time']:.3f} s on 1 thread, {r[2]['time']:.3f} s on 2)")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller grids and sizes")
    ap.add_argument("--only", default="abcdefg", help="cases to run, e.g. ab")
    ap.add_argument("--repeat", type=int, default=3, help="timed calls per process (best kept)")
    ap.add_argument("--min-time", type=float, default=1.0,
                    help="every case but (c): more timed calls while they add up to less than this "
                         "many seconds (at most 1000): a best of a few calls of a few ms is at the mercy "
                         "of a shared machine's noise; the same rule for every tool")
    ap.add_argument("--processes", type=int, default=1,
                    help="(a), (b), (d), (e), (g): run each tool at each tolerance in this many fresh processes "
                         "and keep the fastest (on the 2-core development machine one process's best "
                         "call varied by up to 25 %% from another's, for every tool)")
    ap.add_argument("--hemi-batches", default=None, help="(b)'s batch sizes, e.g. 1,100 (default 1,100,1000)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--size-worker", help=argparse.SUPPRESS)
    ap.add_argument("--auto-worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return worker(json.loads(args.worker))
    if args.size_worker:
        return size_worker(json.loads(args.size_worker))
    if args.auto_worker:
        return auto_worker(json.loads(args.auto_worker))

    import numba
    import scipy

    import riemattn as ra

    print(f"riemattn {ra.__version__}, numba {numba.__version__}, numpy {np.__version__}, scipy "
          f"{scipy.__version__}, python {sys.version.split()[0]}, {os.cpu_count()} CPUs, "
          f"numba threads {numba.config.NUMBA_NUM_THREADS}; load {os.getloadavg()}")
    summary = []
    data = tempfile.mkdtemp(prefix="bench_compiled_")
    if "a" in args.only:
        case_a(data, args.quick, args.repeat, summary)
    MIN_TIME[0], PROCESSES[0] = args.min_time, max(1, args.processes)
    if "b" in args.only:
        case_b(data, args.quick, args.repeat, summary,
               [int(b) for b in args.hemi_batches.split(",")] if args.hemi_batches else None)
    if "c" in args.only:
        case_c(args.quick, args.repeat, summary)
    if "d" in args.only:
        case_d(data, args.quick, args.repeat, summary)
    if "e" in args.only:
        case_e(data, args.quick, args.repeat, summary)
    if "f" in args.only:
        case_f(data, args.quick, args.repeat, summary)
    if "g" in args.only:
        case_g(data, args.quick, args.repeat, summary)
    print("\nsummary (equal measured error; each tool in fresh processes, best of "
          f"{args.repeat} calls, or of as many as fill {args.min_time:g} s, after a warm-up call; the best of "
          f"{max(1, args.processes)} such processes per point):")
    for line in summary:
        print("  " + line)
    print("  load average (1, 5, 15 min) at the end: " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main()
