"""One batched solve with one weight matrix per system against a loop of one solve per system.

GLPR's published phase-diagram code (github borjanG/2023-transformers-rotf) draws one Q^T K and
one V per system. With per-trajectory weights (``AttentionField(P, U)`` with P, U of shape
(B, h, d, d), docs/index.md) the B systems are one ``integrate`` call; before, a user looped
over B calls. This script measures, in one run, each in a fresh process (``python -c``):

* **loop**: B calls ``integrate(AttentionField(P[b], U[b], ...), y0[b], ...)``;
* **batched**: one call ``integrate(AttentionField(P, U, ...), y0, ...)``.

Systems: n tokens on S^{d-1}, one head, P = Q^T K / sqrt(d) with Q, K i.i.d. N(0, 1) and
V = G G^T / d (the authors' law, as riemattn's glpr-fig5), beta = 1, plain softmax, t in [0, T],
stepper dopri5 at rtol = atol = tol (``--stepper`` for others; ``--dt`` for fixed steps). Equal work: the script checks that
the batched call took the same steps per system as the loop (n_steps, n_rejected) and that the
final states agree to within 10 x tol (the measured error of the two runs is the same, not just
their tolerance). Each side is timed ``--reps`` times in its process (best time reported), the
load average printed beside it. The last line is ``loop/batched ratio: X.X`` (issue 36's goal:
>= 5 at B = 256).

Run: ``python benchmarks/batched_weights.py`` (B = 256, ~1 min on 2 cores); ``--quick`` (B = 32,
a few seconds) checks that the script runs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

CHILD = r"""
import json, os, sys, time
import numpy as np
sys.path.insert(0, {root!r})
import riemattn as ra

cfg = json.loads({cfg!r})
rng = np.random.default_rng(cfg["seed"])
B, n, d, tol, T = cfg["B"], cfg["n"], cfg["d"], cfg["tol"], cfg["T"]
Q, K, G = (rng.standard_normal((B, 1, d, d)) for _ in range(3))
P = np.swapaxes(Q, -1, -2) @ K / np.sqrt(d)
U = G @ np.swapaxes(G, -1, -2) / d
y0 = rng.standard_normal((B, n, d))
y0 /= np.linalg.norm(y0, axis=-1, keepdims=True)
opts = dict(stepper=cfg["stepper"], saveat=[0.0, T], engine=cfg["engine"])
opts.update(dict(rtol=tol, atol=tol) if ra.STEPPERS[cfg["stepper"]].adaptive else dict(dt=cfg["dt"]))


def run():
    if cfg["mode"] == "batched":
        sol = ra.integrate(ra.AttentionField(P, U, normalization="softmax"), y0, (0.0, T), **opts)
        return sol.y[-1], sol.per_trajectory.n_steps, sol.per_trajectory.n_rejected
    ys, steps, rej = [], [], []
    for b in range(B):
        sol = ra.integrate(ra.AttentionField(P[b], U[b], normalization="softmax"), y0[b], (0.0, T), **opts)
        ys.append(sol.y[-1]); steps.append(int(sol.per_trajectory.n_steps)); rej.append(int(sol.per_trajectory.n_rejected))
    return np.stack(ys), np.array(steps), np.array(rej)


times = []
for _ in range(cfg["reps"]):
    start = time.perf_counter()
    y, steps, rej = run()
    times.append(time.perf_counter() - start)
np.save(cfg["out"], y)
print(json.dumps({{"best": min(times), "times": times, "load": os.getloadavg(), "steps": steps.tolist(),
                   "rejected": rej.tolist()}}))
"""


def child(mode, args, out):
    cfg = dict(mode=mode, B=args.B, n=args.n, d=args.d, tol=args.tol, T=args.T, seed=args.seed,
               stepper=args.stepper, dt=args.dt, reps=args.reps, out=out, engine=args.engine)
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    code = CHILD.format(root=root, cfg=json.dumps(cfg))
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    if res.returncode:
        raise SystemExit(f"{mode} run failed:\n{res.stderr}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--B", type=int, default=256, help="number of systems")
    ap.add_argument("--n", type=int, default=16, help="tokens per system")
    ap.add_argument("--d", type=int, default=8, help="dimension (tokens on S^{d-1})")
    ap.add_argument("--T", type=float, default=10.0, help="horizon")
    ap.add_argument("--tol", type=float, default=1e-6)
    ap.add_argument("--stepper", default="dopri5")
    ap.add_argument("--dt", type=float, default=0.05, help="step of a fixed-step stepper")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="B = 32, T = 3, one repetition")
    ap.add_argument("--engine", default="numpy", choices=["numpy", "compiled"],
                    help="integrate's engine for both sides (default numpy: the batching this measures; "
                         "the compiled engine runs each trajectory in its own loop either way)")
    args = ap.parse_args(argv)
    if args.quick:
        args.B, args.T, args.reps = 32, 3.0, 1
    import tempfile

    import numpy as np

    import riemattn

    print(f"riemattn {riemattn.__version__}, numpy {np.__version__}, python {sys.version.split()[0]}, "
          f"{os.cpu_count()} CPUs")
    print(f"B = {args.B} systems, n = {args.n} tokens, d = {args.d}, one head, random P = Q^T K / sqrt(d), "
          f"V = G G^T / d, softmax, t in [0, {args.T}], {args.stepper} "
          + (f"rtol = atol = {args.tol:g}" if riemattn.STEPPERS[args.stepper].adaptive else f"dt = {args.dt:g}")
          + f", engine={args.engine!r}")
    with tempfile.TemporaryDirectory() as tmp:
        res = {}
        for mode in ("loop", "batched"):
            res[mode] = child(mode, args, os.path.join(tmp, f"{mode}.npy"))
            r = res[mode]
            print(f"{mode:8s} best {r['best']:.3f} s of {len(r['times'])} ({', '.join(f'{t:.3f}' for t in r['times'])}), "
                  f"load average {', '.join(f'{x:.2f}' for x in r['load'])}")
        y_loop, y_batch = (np.load(os.path.join(tmp, f"{m}.npy")) for m in ("loop", "batched"))
    same_steps = res["loop"]["steps"] == res["batched"]["steps"] and res["loop"]["rejected"] == res["batched"]["rejected"]
    diff = float(np.max(np.abs(y_loop - y_batch)))
    print(f"same steps per system: {same_steps} (total {sum(res['batched']['steps'])} accepted); "
          f"max |y_batched - y_loop| at T = {diff:.3g} (bound 10 x tol = {10 * args.tol:.3g})")
    if not same_steps or diff > 10 * args.tol:
        raise SystemExit("the two runs did not do the same work: no ratio reported")
    print(f"loop/batched ratio: {res['loop']['best'] / res['batched']['best']:.1f}")


if __name__ == "__main__":
    main()
