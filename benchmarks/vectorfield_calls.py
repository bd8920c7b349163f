"""Calls and wall time of a user's ``VectorField`` in an adaptive batch: how ``func`` gets the times.

In an adaptive batch every trajectory has its own step size, so after the first step the
trajectories are at different times. ``ra.VectorField(func, M, time_vectorized=...)`` then calls
``func``

* ``False``: once per distinct time (one call per trajectory and stage);
* ``True``: once, with an array of times (the user promises ``func`` accepts it);
* ``None`` (default): detected at the first such call (docs/steppers.md, "Fields of your own";
  :class:`riemattn.dynamics.fields.VectorField`).

The field is the sigmoid attention of docs/testing.md (time-independent, so the default detects
it as taking array times) on B trajectories of 5 tokens on S^2, integrated to T = 10 with dopri5
and dop853 at rtol = atol = 1e-8. For each stepper and mode the script prints the calls of
``func`` (counted by the script's own wrapper), ``sol.nfev`` (which must equal them), the best
wall time of ``--reps`` runs, each mode in a fresh process, and the error against a tight
reference (dop853, tolerance 1e-12). The last block loops SciPy's ``solve_ivp`` (same method,
same tolerances) over the trajectories in R^(5 x 3), the tool a user would otherwise pick, and
prints its error too (a projected field, not kept on the sphere: the error is measured on the
tokens as returned). Load averages are printed beside the timings.

Run: ``python benchmarks/vectorfield_calls.py`` (B = 100) or ``--quick`` (B = 20, one rep, ~10 s).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

T, L, D, RTOL = 10.0, 5, 3, 1e-8


def problem(B: int, seed: int = 0):
    import riemattn as ra

    rng = np.random.default_rng(seed)
    M = ra.Sphere(D - 1)
    P = rng.uniform(-1, 1, size=(D, D))
    y0 = M.projection(np.abs(rng.normal(size=(B, L, D))) + 0.1)
    return M, P, y0


def sigmoid_attention(P, M, counter):
    def f(t, y):
        counter[0] += 1
        A = 1.0 / (1.0 + np.exp(-(y @ P @ np.swapaxes(y, -1, -2)))) / y.shape[-2]
        return M.tangent(y, A @ y)
    return f


def reference(B: int) -> np.ndarray:
    import riemattn as ra

    M, P, y0 = problem(B)
    f = ra.VectorField(sigmoid_attention(P, M, [0]), M, time_vectorized=True)
    return ra.integrate(f, y0, (0.0, T), "dop853", rtol=1e-12, atol=1e-12).y[-1]


def one(args) -> dict:
    """One configuration in this (fresh) process: best time of args.reps runs."""
    import riemattn as ra

    M, P, y0 = problem(args.B)
    best, calls, nfev, y = np.inf, 0, 0, None
    for _ in range(args.reps):
        counter = [0]
        if args.mode == "scipy":
            from scipy.integrate import solve_ivp

            f = sigmoid_attention(P, M, counter)
            method = {"dopri5": "RK45", "dop853": "DOP853"}[args.stepper]
            t0 = time.perf_counter()
            out = []
            for b in range(args.B):
                r = solve_ivp(lambda t, x: f(t, x.reshape(L, D)).ravel(), (0.0, T), y0[b].ravel(), method=method,
                              rtol=RTOL, atol=RTOL)
                out.append(r.y[:, -1].reshape(L, D))
            elapsed = time.perf_counter() - t0
            y, nfev = np.stack(out), counter[0]
        else:
            tv = {"default": None, "per-time": False, "flag": True}[args.mode]
            field = ra.VectorField(sigmoid_attention(P, M, counter), M, time_vectorized=tv)
            t0 = time.perf_counter()
            sol = ra.integrate(field, y0, (0.0, T), args.stepper, rtol=RTOL, atol=RTOL)
            elapsed = time.perf_counter() - t0
            assert sol.success, sol.message
            y, nfev = sol.y[-1], sol.nfev
        best, calls = min(best, elapsed), counter[0]
    np.save(args.out, y)
    return {"time": best, "calls": calls, "nfev": int(nfev), "load": os.getloadavg()[0]}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="B = 20, one rep")
    ap.add_argument("--B", type=int, default=None)
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--mode", default="default", help=argparse.SUPPRESS)
    ap.add_argument("--stepper", default="dopri5", help=argparse.SUPPRESS)
    ap.add_argument("--out", default="", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.B = args.B or (20 if args.quick else 100)
    args.reps = args.reps or (1 if args.quick else 3)
    if args.one:
        print(json.dumps(one(args)))
        return
    import tempfile

    ref = reference(args.B)
    print(f"B = {args.B} trajectories x {L} tokens on S^2, T = {T}, rtol = atol = {RTOL}; best of {args.reps}; "
          f"load average at start {os.getloadavg()}")
    print(f"{'stepper':8s} {'mode':9s} {'func calls':>10s} {'sol.nfev':>9s} {'time [s]':>9s} {'max error':>10s} load")
    with tempfile.TemporaryDirectory() as tmp:
        for stepper in ("dopri5", "dop853"):
            times = {}
            for mode in ("per-time", "default", "flag", "scipy"):
                out = os.path.join(tmp, f"{stepper}-{mode}.npy")
                cmd = [sys.executable, __file__, "--one", "--mode", mode, "--stepper", stepper, "--B", str(args.B),
                       "--reps", str(args.reps), "--out", out]
                res = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
                err = float(np.max(np.abs(np.load(out) - ref)))
                times[mode] = res["time"]
                print(f"{stepper:8s} {mode:9s} {res['calls']:10d} {res['nfev']:9d} {res['time']:9.3f} {err:10.2e} "
                      f"{res['load']:.2f}")
            print(f"{stepper}: per-time / default = {times['per-time'] / times['default']:.1f}x, "
                  f"default / flag = {times['default'] / times['flag']:.2f}x, "
                  f"looping SciPy / default = {times['scipy'] / times['default']:.1f}x")


if __name__ == "__main__":
    main()
