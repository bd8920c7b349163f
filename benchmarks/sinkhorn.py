"""Sinkhorn attention: time per field evaluation and the column error reached (issue 55, item 4).

    python benchmarks/sinkhorn.py [--repeat N]

Tokens uniform on S^2, one head, P = I, ``AttentionField(I, normalization="sinkhorn", beta=beta)``
at the default tolerance 1e-10 (columns; rows are exact). For each (l, beta): the best and the
median time of ``field(0.0, y)`` over N calls, each case in a fresh process (no warm caches shared
between cases), and the column error ``max_j |sum_i alpha_ij - 1|`` of the result. Targets: l = 64,
beta = 100 within 20 ms; l = 128, beta = 1e3 within 100 ms. Prints the load average: on a busy
machine the times are upper bounds.

The baseline, for comparison, is the same field with the Newton finisher off (``NEWTON_AFTER``
raised above ``sinkhorn_iters``: the default cap of 1000 plain sweeps), which does not reach the
tolerance at the larger beta. (Before issue 55 the NumPy path annealed the sweeps instead; measured
once on this machine under load: l = 64, beta = 100 0.81 s with columns 3.2e-5 from 1, l = 128,
beta = 1e3 4.0 s with 3.4e-5, both silently.)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

CASES = [(16, 1.0), (64, 10.0), (64, 100.0), (128, 1e3), (256, 100.0)]


def one(ell: int, beta: float, repeat: int, sweeps_only: bool) -> dict:
    import warnings

    import numpy as np

    import riemattn as ra
    from riemattn.dynamics import _normalize

    if sweeps_only:
        _normalize.NEWTON_AFTER = 10**9
    rng = np.random.default_rng(0)
    y = rng.standard_normal((ell, 3))
    y /= np.linalg.norm(y, axis=1, keepdims=True)
    field = ra.AttentionField(np.eye(3), normalization="sinkhorn", beta=beta, on_nonconvergence="ignore")
    times = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(repeat):
            t = time.perf_counter()
            field(0.0, y)
            times.append(time.perf_counter() - t)
        A = field.attention(0.0, y)[0]
    return {"l": ell, "beta": beta, "best_ms": 1e3 * min(times), "median_ms": 1e3 * float(np.median(times)),
            "column_error": float(np.abs(A.sum(0) - 1).max()), "sweeps": int(field._work.sinkhorn[0])}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        ell, beta, mode = int(args.worker[0]), float(args.worker[1]), args.worker[2]
        print(json.dumps(one(ell, beta, args.repeat, mode == "sweeps")))
        return
    print(f"load average before: {os.getloadavg()}")
    print(f"{'l':>4} {'beta':>7} | {'best ms':>8} {'median ms':>9} {'column error':>12} | "
          f"{'sweeps only: best ms':>20} {'column error':>12}")
    for ell, beta in CASES:
        rows = []
        for mode in ("newton", "sweeps"):
            out = subprocess.run([sys.executable, __file__, "--repeat", str(args.repeat if mode == "newton" else 1),
                                  "--worker", str(ell), str(beta), mode], capture_output=True, text=True, check=True)
            rows.append(json.loads(out.stdout))
        a, b = rows
        print(f"{ell:>4} {beta:>7g} | {a['best_ms']:>8.2f} {a['median_ms']:>9.2f} {a['column_error']:>12.2e} | "
              f"{b['best_ms']:>20.1f} {b['column_error']:>12.2e}")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
