"""Weak order and cost of the SDE methods by Monte Carlo: Brownian motion on S^2, E <x0, Y_1>.

The exact value is exp(-(d - 1) sigma^2 t / 2). For each method and step count the script simulates
``--paths`` paths (in chunks of ``--chunk``), prints the weak error with its standard error, the
fitted order, and the wall time; and the exact chain expectation (quadrature over the chi
distribution of the step) for comparison. Measure on a quiet machine: the load average is printed.

    python benchmarks/sde_weak_order.py --paths 30000000    # strang's finest error ~ 4e-4: SE 1e-4
    python benchmarks/sde_weak_order.py --paths 20000 --chunk 20000      # a quick check
"""

from __future__ import annotations

import argparse
import math
import os
import time

import numpy as np
from scipy import integrate as spi
from scipy import stats

from riemattn.geometry.manifolds import Sphere
from riemattn.solvers.sde import brownian_mean_cosine, integrate_sde

#: step counts and sigma per method: where the error is in (or near) its asymptotic regime and large
#: enough against the Monte Carlo noise (strang: -8.3e-3, -1.9e-3, -4.4e-4 for the exact chain)
STEPS = {"em": ((8, 16, 32), 1.0), "strang": ((2, 4, 8), math.sqrt(2.0))}


def chain(method, n, sigma, T, N):
    h = T / N
    if method == "em":
        g = lambda x: 1.0 / np.sqrt(1.0 + sigma**2 * h * x * x)  # noqa: E731
    else:
        g = lambda x: np.cos(np.exp(-(n - 1) * sigma**2 * h / 12) * sigma * math.sqrt(h) * x)  # noqa: E731
    return spi.quad(lambda x: g(x) * stats.chi.pdf(x, n), 0, 60, limit=200, epsabs=1e-14)[0] ** N


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--paths", type=int, default=1_000_000)
    ap.add_argument("--chunk", type=int, default=250_000)
    ap.add_argument("--d", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    d, T = args.d, 1.0
    print(f"Brownian motion on S^{d - 1}, t = {T}; {args.paths} paths; load average {os.getloadavg()}")
    for method, (steps, sigma) in STEPS.items():
        exact = float(brownian_mean_cosine(T, d, sigma))
        print(f"  {method}: sigma = {sigma:.4g}, E<x0, Y_t> = {exact:.6f}")
        errs = []
        for N in steps:
            s = s2 = 0.0
            done, t0 = 0, time.perf_counter()
            k = 0
            while done < args.paths:
                m = min(args.chunk, args.paths - done)
                y0 = np.zeros((m, 1, d))
                y0[..., 0] = 1.0
                sol = integrate_sde(Sphere(d - 1), y0, (0.0, T), sigma=sigma, dt=T / N, method=method,
                                    seed=args.seed + 1000 * N + k, saveat=[0.0, T])
                c = sol.y[-1][:, 0, 0]
                s, s2, done, k = s + c.sum(), s2 + (c * c).sum(), done + m, k + 1
            wall = time.perf_counter() - t0
            mean = s / done
            se = math.sqrt(max(s2 / done - mean**2, 0.0) / done)
            errs.append(mean - exact)
            print(f"  {method:6s} steps {N:3d}: weak error {mean - exact:+.3e} +- {se:.1e} "
                  f"(exact chain {chain(method, d - 1, sigma, T, N) - exact:+.3e}); {wall:.2f} s, "
                  f"{wall / done * 1e6:.2f} us/path")
        p = np.polyfit(np.log(T / np.array(steps)), np.log(np.abs(errs)), 1)[0]
        print(f"  {method}: fitted weak order {p:.2f}")
    print(f"load average at the end {os.getloadavg()}")


if __name__ == "__main__":
    main()
