"""Many tokens (issue 57): one trajectory of SA (beta = 4) on S^2, n = 10^3 .. 10^5 tokens.

Tools, each size in a fresh process (compile and import excluded: a warm-up call first):

- ``compiled``: riemattn's compiled engine, streamed attention (``_kernel_stream``), query tiles on
  all of numba's threads; ``compiled1``: the same on one thread (the thread efficiency);
- ``numpy``: riemattn's NumPy engine (an (n, n) attention matrix: up to ``--dense-max`` tokens);
- ``pykeops``: KeOps on the CPU (``LazyTensor.sumsoftmaxweight``: the softmax-weighted sum, never an
  (n, n) array), the tangent projection in NumPy; its solve is SciPy's ``RK45`` (Dormand--Prince 5(4),
  as riemattn's ``dopri5``, without the retraction) at the same tolerances;
- ``torch``: the same field in plain PyTorch on the CPU (dense, up to ``--dense-max``), solved like pykeops.

Per field evaluation: best of ``--repeat`` calls (one call from 50 000 tokens); per pair of tokens
per core: time x threads / n^2. Per solve: dopri5 from t = 0 to ``--t1`` at rtol 1e-6, atol 1e-8, up
to ``--solve-max`` tokens. Memory: the process's peak resident set (``ru_maxrss``) after the run and
after the warm-up (imports, compiled code: the baseline). Every line carries the load average
(1, 5, 15 min) read when its process started and ended: the machine may be shared, so the numbers
are indicative.

    python benchmarks/large_n.py --quick                  # n = 1000, 4000
    python benchmarks/large_n.py                          # n = 1000, 4000, 16000, 100000
    python benchmarks/large_n.py --sizes 100000 --tools compiled --solve-max 100000
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

BETA, D, RTOL, ATOL = 4.0, 3, 1e-6, 1e-8
TOOLS = ("compiled", "compiled1", "numpy", "pykeops", "torch")


def tokens(n, seed=0):
    import numpy as np

    y = np.random.default_rng(seed).standard_normal((n, D))
    return y / np.linalg.norm(y, axis=1, keepdims=True)


def _peak():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # bytes (Linux: KiB)


def _best(fn, repeat):
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _riemattn_eval(threads):
    """One streamed evaluation of the field through the engine's kernel, as the loops call it."""
    import numpy as np

    import riemattn as ra
    from riemattn.dynamics import kernels as kk
    from riemattn.dynamics.kernels import _kernel_layout as K
    from riemattn.dynamics.kernels import _kernel_stream as ks
    from riemattn.solvers.compiled import _stream

    field = ra.sa(BETA, D)

    def make(y):
        n = y.shape[0]
        pack = kk.pack_field(field, y.shape)
        ints = pack.ints.copy()
        ints[K.STREAM_TILES] = _stream.TILES if threads > 1 else _stream.ROWS
        work, out = np.empty(ks.stream_work_length(ints, n, D)), np.empty((n, D))
        return lambda: ks.evaluate_streamed(kk.RHS, 0.0, y, 0, ints, pack.floats, pack.per, work, out)

    def solve(y, t1):
        sol = ra.integrate(field, y, (0.0, t1), "dopri5", rtol=RTOL, atol=ATOL, engine="compiled",
                           saveat=[0.0, t1])
        return sol.n_steps, sol.nfev, sol.y[-1]

    return make, solve


def _numpy_eval():
    import riemattn as ra

    field = ra.sa(BETA, D)

    def solve(y, t1):
        sol = ra.integrate(field, y, (0.0, t1), "dopri5", rtol=RTOL, atol=ATOL, engine="numpy", saveat=[0.0, t1])
        return sol.n_steps, sol.nfev, sol.y[-1]

    return (lambda y: (lambda: field(0.0, y))), solve


def _scipy_solve(rhs):
    """SciPy's RK45 (Dormand--Prince 5(4)) on the flattened tokens."""
    from scipy.integrate import solve_ivp

    def solve(y, t1):
        shape = y.shape
        sol = solve_ivp(lambda t, v: rhs(v.reshape(shape)).ravel(), (0.0, t1), y.ravel(), method="RK45",
                        rtol=RTOL, atol=ATOL, t_eval=[t1])
        return "-", int(sol.nfev), sol.y[:, -1].reshape(shape)  # (solve_ivp does not count steps)

    return solve


def _pykeops_eval():
    import numpy as np
    from pykeops.numpy import LazyTensor

    def rhs(y):
        y = np.ascontiguousarray(y)
        x_i, x_j = LazyTensor(y[:, None, :]), LazyTensor(y[None, :, :])
        f = (BETA * (x_i | x_j)).sumsoftmaxweight(x_j, axis=1)
        return f - np.sum(f * y, axis=1, keepdims=True) * y

    return (lambda y: (lambda: rhs(y))), _scipy_solve(rhs)


def _torch_eval():
    import torch

    def rhs_t(y):
        f = torch.softmax(BETA * (y @ y.T), dim=1) @ y
        return f - (f * y).sum(dim=1, keepdim=True) * y

    def rhs(y):
        return rhs_t(torch.from_numpy(y)).numpy()

    return (lambda y: (lambda: rhs_t(torch.from_numpy(y)))), _scipy_solve(rhs)


def worker(tool, n, solve, t1, repeat):
    """One tool at one size in this (fresh) process: prints one JSON line."""
    import numpy as np

    load0 = os.getloadavg()
    threads = 1 if tool == "compiled1" else os.cpu_count()
    if tool.startswith("compiled"):
        import numba

        numba.set_num_threads(threads)
        numba.set_parallel_chunksize(1)  # as the engine's worker thread (riemattn.solvers.compiled._threads)
        make, solver = _riemattn_eval(threads)
    else:
        make, solver = {"numpy": _numpy_eval, "pykeops": _pykeops_eval, "torch": _torch_eval}[tool]()
    if tool == "torch":
        import torch

        threads = torch.get_num_threads()
    small = tokens(300, seed=1)  # warm-up: compiled code loaded, formulas compiled
    got = make(small)()
    if got is not None:  # the same field as riemattn's (the sums in other orders: rounding)
        import riemattn as ra

        assert np.max(np.abs(np.asarray(got) - ra.sa(BETA, D)(0.0, small))) < 1e-12, tool
    if solve:
        solver(small, 0.01)
    base = _peak()
    y = tokens(n)
    row = dict(tool=tool, n=n, threads=threads, load_start=load0, baseline_bytes=base)
    t_eval = _best(make(y), 1 if n >= 50_000 else repeat)
    row.update(eval_s=t_eval, ns_per_pair_core=t_eval * threads / n / n * 1e9)
    if solve:
        t0 = time.perf_counter()
        steps, nfev, y1 = solver(y, t1)
        row.update(solve_s=time.perf_counter() - t0, t1=t1, steps=steps, nfev=nfev,
                   drift=float(np.max(np.abs(np.linalg.norm(y1, axis=1) - 1.0))))
    row.update(peak_bytes=_peak(), load_end=os.getloadavg())
    print(json.dumps(row), flush=True)


def _fmt_load(a, b):
    return f"{a[0]:.1f}/{a[1]:.1f}/{a[2]:.1f} -> {b[0]:.1f}/{b[1]:.1f}/{b[2]:.1f}"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="n = 1000 and 4000 only")
    p.add_argument("--sizes", default=None, help="comma-separated token counts (default 1000,4000,16000,100000)")
    p.add_argument("--tools", default=",".join(TOOLS), help=f"comma-separated, of {', '.join(TOOLS)}")
    p.add_argument("--solve-max", type=int, default=16000, help="solve only up to this many tokens")
    p.add_argument("--dense-max", type=int, default=8000, help="numpy and torch (n x n arrays) up to this many")
    p.add_argument("--t1", type=float, default=1.0, help="the solves' end time")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--worker", nargs=5, metavar=("TOOL", "N", "SOLVE", "T1", "REPEAT"), help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        tool, n, solve, t1, repeat = a.worker
        worker(tool, int(n), solve == "1", float(t1), int(repeat))
        return
    sizes = [1000, 4000] if a.quick else [int(s) for s in (a.sizes or "1000,4000,16000,100000").split(",")]
    tools = [t for t in a.tools.split(",") if t]
    print(f"# SA beta = {BETA} on S^{D - 1}, one trajectory; {os.cpu_count()} cores; dopri5 rtol {RTOL} atol {ATOL}")
    print("| n | tool | threads | field eval | ns / pair / core | solve to t1 (steps, nfev) | peak RSS (baseline) "
          "| load 1/5/15 min start -> end |")
    print("|---|---|---|---|---|---|---|---|")
    for n in sizes:
        for tool in tools:
            if tool in ("numpy", "torch") and n > a.dense_max:
                print(f"| {n} | {tool} | | skipped: (n, n) arrays of {8 * n * n / 1e9:.1f} GB (--dense-max) | | | | |")
                continue
            solve = "1" if n <= a.solve_max else "0"
            cmd = [sys.executable, os.path.abspath(__file__), "--worker", tool, str(n), solve, str(a.t1), str(a.repeat)]
            out = subprocess.run(cmd, capture_output=True, text=True)
            lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
            if out.returncode or not lines:
                why = (out.stderr.strip().splitlines() or ["no output"])[-1][:120]
                print(f"| {n} | {tool} | | failed: {why} | | | | |", flush=True)
                continue
            r = json.loads(lines[-1])
            sol = (f"{r['solve_s']:.3g} s ({r['steps']}, {r['nfev']}) to t = {r['t1']:g}" if "solve_s" in r
                   else "not run (--solve-max)")
            print(f"| {n} | {tool} | {r['threads']} | {r['eval_s'] * 1e3:.4g} ms | {r['ns_per_pair_core']:.2f} | {sol} "
                  f"| {r['peak_bytes'] / 1e6:.0f} MB ({r['baseline_bytes'] / 1e6:.0f} MB) "
                  f"| {_fmt_load(r['load_start'], r['load_end'])} |", flush=True)


if __name__ == "__main__":
    main()
