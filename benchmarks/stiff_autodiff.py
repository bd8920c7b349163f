"""Cost of differentiating through the stiff steppers (the torch path of ``"rodas4p"``).

Problem: l tokens on S^(d-1) gathered near a pole (spread 0.3), one head, P = I + N(0, 0.1^2/d),
beta = 9 (the stiff regime), float64 PyTorch tensors on the CPU, one torch thread; ``steps``
steps of size 0.01 of a stepper called directly (a fixed grid: the cost of the steps, not of the
step-size control). The scalar ``sum(C * y(T))`` (C fixed, random) is differentiated with respect
to P and y0. Per step, for ``"rodas4p"`` and, as a reference, the explicit ``"dopri5"``:

- ``host``: the NumPy step without gradients (what tensors that nothing differentiates use);
- ``forward`` and ``backward``: wall time of the differentiated solve and of its backward pass;
- ``graph``: the bytes of the tensors that autograd saved for the backward pass (counted by
  ``torch.autograd.graph.saved_tensors_hooks``; a tensor saved twice counts twice), per step.

Run: ``python benchmarks/stiff_autodiff.py [--sizes 4x3 8x4 16x8 32x8] [--steps 20]``. Prints the
table, the machine and the load average (take the final numbers on a quiet machine).
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np
import torch

import riemattn as ra
from riemattn.solvers.steppers import get_stepper

H = 0.01


def _problem(l, d, seed=0):
    rng = np.random.default_rng(seed)
    pole = np.zeros(d)
    pole[0] = 1.0
    y0 = pole + 0.3 * rng.normal(size=(l, d))
    y0 /= np.linalg.norm(y0, axis=-1, keepdims=True)
    P = np.eye(d) + 0.1 * rng.normal(size=(d, d)) / np.sqrt(d)
    return y0, P, rng.normal(size=(l, d))


def _solve(name, P, y0, steps):
    stepper = get_stepper(name)
    field = ra.AttentionField(P, beta=9.0, normalization="mean")._unchecked()
    y, k1 = y0, None
    for i in range(steps):
        res = stepper.step(field, i * H, y, H, k1)
        y, k1 = res.y, res.k_next
    return y


def measure(name, l, d, steps):
    y0, P, C = _problem(l, d)
    _solve(name, P, y0, 2)  # warm-up (imports, caches)
    t0 = time.perf_counter()
    _solve(name, P, y0, steps)
    host = (time.perf_counter() - t0) / steps
    tP = torch.tensor(P, requires_grad=True)
    ty = torch.tensor(y0, requires_grad=True)
    _solve(name, tP, ty, 1)
    saved = [0]

    def pack(x):
        saved[0] += x.numel() * x.element_size()
        return x

    t0 = time.perf_counter()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda x: x):
        y = _solve(name, tP, ty, steps)
    forward = (time.perf_counter() - t0) / steps
    t0 = time.perf_counter()
    torch.autograd.grad((y * torch.tensor(C)).sum(), [tP, ty])
    backward = (time.perf_counter() - t0) / steps
    return host, forward, backward, saved[0] / steps


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["4x3", "8x4", "16x8"])
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    print(f"machine: {platform.machine()} {platform.processor() or ''}, {os.cpu_count()} cores, torch "
          f"{torch.__version__}, one thread; load average at start {os.getloadavg()}")
    print(f"{'stepper':8} {'l x d':>6} {'l d':>4} | {'host ms':>8} {'fwd ms':>8} {'bwd ms':>8} | {'graph/step':>11}")
    for size in args.sizes:
        l, d = (int(v) for v in size.split("x"))
        for name in ("rodas4p", "dopri5"):
            host, fwd, bwd, graph = measure(name, l, d, args.steps)
            print(f"{name:8} {size:>6} {l * d:4d} | {1e3 * host:8.2f} {1e3 * fwd:8.2f} {1e3 * bwd:8.2f} | "
                  f"{graph / 1e6:8.3f} MB", flush=True)
    print(f"load average at end {os.getloadavg()}")


if __name__ == "__main__":
    main()
