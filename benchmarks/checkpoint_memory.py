"""Memory of the backward pass through a long solve, with and without gradient checkpointing.

Problem (issue 27): l = 32 tokens on S^63 (d = 64), one head, P random (entries N(0, 1/d)), U = I,
float64 PyTorch tensors on the CPU, ``"rk4"`` with dt = 0.01, ``n`` steps; the scalar
misalignment(y(T)) differentiated with respect to P and y0. Contenders:

- ``plain``: ``riemattn.integrate`` (saving t0 and T only) and ``backward()``: the graph holds every
  stage of every step;
- ``checkpoint``: :func:`riemattn.solvers.autodiff.integrate_checkpointed` with its default
  ``ceil(sqrt(n))`` segments.

Each (contender, n) runs in a fresh process (``resource.getrusage`` max RSS is a per-process
high-water mark; tracemalloc does not see PyTorch's CPU allocations). The process first runs a
short solve with its backward pass (libraries loaded, allocator warm), reads its max RSS, then
runs the measured forward and backward passes and reads it again: the difference is the peak
memory that the differentiated solve added. Times are the forward and backward wall times.
The exponent is the slope of log(peak) against log(n) between the smallest and largest n.

Run: ``python benchmarks/checkpoint_memory.py [--steps 1250 2500 5000 10000]``. Prints the table,
the machine and the load average (take the final numbers on a quiet machine).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import subprocess
import sys
import time

L, D, DT = 32, 64, 0.01


def _maxrss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


def worker(mode: str, n: int) -> dict:
    import torch

    import riemattn as ra
    from riemattn.analysis.diagnostics import misalignment
    from riemattn.solvers.autodiff import integrate_checkpointed

    torch.manual_seed(0)
    torch.set_num_threads(1)
    P = (torch.randn(D, D, dtype=torch.float64) / math.sqrt(D)).requires_grad_()
    y0 = torch.randn(L, D, dtype=torch.float64)
    y0 = (y0 / y0.norm(dim=-1, keepdim=True)).requires_grad_()
    field = ra.AttentionField(P)

    def loss(steps):
        T = steps * DT
        if mode == "plain":
            yT = ra.integrate(field, y0, (0.0, T), "rk4", dt=DT, saveat=[0.0, T]).y[-1]
        else:
            yT = integrate_checkpointed(field, y0, (0.0, T), "rk4", dt=DT).y[-1]
        return misalignment(yT)

    loss(20).backward()  # warm-up: libraries, allocator
    P.grad = y0.grad = None
    base = _maxrss_mb()
    t0 = time.perf_counter()
    value = loss(n)
    t1 = time.perf_counter()
    value.backward()
    t2 = time.perf_counter()
    return {"mode": mode, "n": n, "peak_mb": _maxrss_mb() - base, "base_mb": base,
            "forward_s": t1 - t0, "backward_s": t2 - t1, "loss": float(value.detach()),
            "grad_norm": float(P.grad.norm())}


def main(argv=None) -> list:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, nargs="+", default=[1250, 2500, 5000, 10000])
    parser.add_argument("--worker", nargs=2, metavar=("MODE", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker[0], int(args.worker[1]))))
        return []
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; "
          f"load average before: {os.getloadavg()}")
    print(f"# l = {L}, d = {D}, rk4, dt = {DT}, float64 CPU; peak = max RSS added by forward + backward")
    rows = []
    env = dict(os.environ, OMP_NUM_THREADS="1")
    for n in args.steps:
        for mode in ("plain", "checkpoint"):
            out = subprocess.run([sys.executable, __file__, "--worker", mode, str(n)], capture_output=True,
                                 text=True, env=env, check=True)
            rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
            r = rows[-1]
            print(f"{mode:>10} n = {n:6d}: peak {r['peak_mb']:9.1f} MB, forward {r['forward_s']:7.2f} s, "
                  f"backward {r['backward_s']:7.2f} s, |dloss/dP| = {r['grad_norm']:.12g}", flush=True)
    for mode in ("plain", "checkpoint"):
        mine = [r for r in rows if r["mode"] == mode]
        if len(mine) > 1 and mine[0]["peak_mb"] > 0 and mine[-1]["peak_mb"] > 0:
            slope = math.log(mine[-1]["peak_mb"] / mine[0]["peak_mb"]) / math.log(mine[-1]["n"] / mine[0]["n"])
            print(f"# {mode}: peak memory grows like n^{slope:.2f} (n = {mine[0]['n']} .. {mine[-1]['n']})")
    print(f"# load average after: {os.getloadavg()}")
    return rows


if __name__ == "__main__":
    main()
