"""Achieved GFLOP/s of one attention-field evaluation, next to NumPy's own matrix-product rate.

Problem: batch B = 100 trajectories, l = 50 tokens, d = 500, h = 2 heads, causal, paper
normalization, random P_eta and U_eta (so every matrix product is a general one), sphere.

Flops of one evaluation ``field(t, y)`` (multiply-add = 2 flops, dense counts; the causal mask
does not reduce the work of dense products):

- scores, step 1: y_i^T P_eta for all tokens, one (B l x d) @ (d x h d) product: 2 B l d (h d)
- scores, step 2: (y P_eta) y^T per trajectory and head, (l x d) @ (d x l):    2 B h l^2 d
- values: U_eta y_j for all tokens, one (B l x d) @ (d x h d) product:       2 B l d (h d)
- mixing: alpha^eta @ (U_eta y), (l x l) @ (l x d) per trajectory and head:   2 B h l^2 d
- tangent projection f - (y^T f) y:                                         4 B l d
  (softmax: B h l^2 exponentials, not counted)

Total 4 B l h d^2 + 4 B h l^2 d + 4 B l d = 11.01 GFLOP at these sizes.

The reference rate is NumPy's ``@`` on square float64 matrices of size 2000 (2 n^3 flops), measured in
the same run with the same BLAS and threads, interleaved with the field evaluations (best of
``--repeat`` each), so that load from other processes affects both alike. The issue's target is a
ratio >= 0.6.

Run:  python benchmarks/bench_field.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

import riemattn as ra


def best_times(fns, repeat):
    """Best wall time of each function, measured interleaved (f1, f2, f1, f2, ...) so that changes
    of the machine's load during the run hit all of them alike."""
    for fn in fns:
        fn()  # warm-up
    times = [[] for _ in fns]
    for _ in range(repeat):
        for k, fn in enumerate(fns):
            start = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - start)
    return [min(t) for t in times]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--tokens", type=int, default=50)
    parser.add_argument("--dim", type=int, default=500)
    parser.add_argument("--heads", type=int, default=2)
    args = parser.parse_args(argv)
    B, ell, d, h = args.batch, args.tokens, args.dim, args.heads
    rng = np.random.default_rng(0)
    field = ra.AttentionField(
        rng.uniform(-0.5, 0.5, (h, d, d)) / np.sqrt(d), rng.uniform(-0.5, 0.5, (h, d, d)), mask="causal"
    )
    y = field.manifold.projection(rng.uniform(-0.5, 0.5, (B, ell, d)))
    flops = 4 * B * ell * h * d**2 + 4 * B * h * ell**2 * d + 4 * B * ell * d
    n = 2000
    a, b = rng.normal(size=(n, n)), rng.normal(size=(n, n))
    t_field, t_mm = best_times([lambda: field(0.0, y), lambda: a @ b], args.repeat)
    field_rate = flops / t_field / 1e9
    mm_rate = 2 * n**3 / t_mm / 1e9
    print(f"field evaluation (B={B}, l={ell}, d={d}, h={h}, causal): {flops / 1e9:.2f} GFLOP in {t_field * 1e3:.1f} ms"
          f" -> {field_rate:.1f} GFLOP/s")
    print(f"NumPy matmul {n}x{n} @ {n}x{n}:                          {mm_rate:.1f} GFLOP/s")
    print(f"ratio field / matmul: {field_rate / mm_rate:.2f}  (target >= 0.6); load average "
          f"{os.getloadavg()[0]:.2f}")
    return field_rate / mm_rate


if __name__ == "__main__":
    main()
