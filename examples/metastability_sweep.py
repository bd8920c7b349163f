"""GLPR Problem 1 (metastability) as a sweep: how long does (SA) sit at k clusters before k - 1?

    python examples/metastability_sweep.py                  # small: ~1 min on 2 cores
    python examples/metastability_sweep.py --full           # larger grid and horizon
    python examples/metastability_sweep.py --scheduler tcp://host:8786 --out meta.zarr

For n particles i.i.d. uniform on S^1 (d = 2) or S^2 (d = 3), every beta and n of the grid and
several replicate seeds, the (SA) dynamics dx_i/dt = P_x_i^perp(sum_j softmax_j(beta <x_i, x_j>) x_j)
is integrated (dopri5) to t1 on a geometric time grid, and the number of clusters (single linkage,
distance <= tol) is recorded. The instrument is tau_k, the first saved time at which at most k
clusters remain (k = 1 ... k_max; NaN if not reached by t1); the dwell time at k clusters before
dropping to k - 1 is tau_{k-1} - tau_k. GLPR (section 6.3, Figure 4, Problem 1) ask whether these
dwell times grow with beta (a metastable state of several clusters before the final collapse):
the printed table gives the median dwell times from 2 to 1 cluster per (d, n, beta).

Results go to a Zarr store (``--out``, resumable: re-running computes only missing points);
``xarray.open_zarr(store)`` has ``tau`` (d, n, beta, replicate, k, trajectory) and ``clusters``
(d, n, beta, replicate, time, trajectory). The ``if __name__ == "__main__"`` guard is needed:
the local cluster's worker processes re-import this file.

References
----------
Geshkovski, Letrouit, Polyanskiy, Rigollet, "A mathematical perspective on Transformers",
section 6.3, Figure 4, Problem 1.
"""

from __future__ import annotations

import argparse
import functools

import numpy as np
import xarray as xr

import riemattn as ra
from riemattn.analysis.diagnostics import cluster_count


def metastability_point(params, rng, *, trajectories, t1, saves, tol, k_max):
    """One grid point: params d, n, replicate and an array beta (all beta in one integration)."""
    d, n = int(params["d"]), int(params["n"])
    betas = np.asarray(params["beta"], dtype=float)
    x0 = rng.standard_normal((trajectories, n, d))
    x0 /= np.linalg.norm(x0, axis=-1, keepdims=True)
    x0 = np.broadcast_to(x0, betas.shape + x0.shape)
    t = np.concatenate([[0.0], np.geomspace(0.1, t1, saves - 1)])
    sol = ra.integrate(ra.sa(betas[:, None], d), x0, (0.0, t1), stepper="dopri5", rtol=1e-7,
                       atol=1e-9, saveat=t, save_fn=lambda s, y: cluster_count(y, tol))
    clusters = np.asarray(sol.observables["value"])  # (time, beta, trajectory)
    ks = np.arange(1, k_max + 1)
    reached = clusters[None] <= ks[:, None, None, None]  # (k, time, beta, trajectory)
    tau = np.where(reached.any(axis=1), t[np.argmax(reached, axis=1)], np.nan)  # (k, beta, traj)
    return xr.Dataset(
        {"tau": (("k", "beta", "trajectory"), tau),
         "clusters": (("time", "beta", "trajectory"), clusters)},
        coords={"k": ks, "time": t},
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--full", action="store_true", help="larger grid and horizon")
    parser.add_argument("--out", default="metastability.zarr", help="Zarr store (resumable)")
    parser.add_argument("--scheduler", default=None, help="Dask scheduler address (default: local)")
    parser.add_argument("--workers", type=int, default=None, help="local worker processes")
    args = parser.parse_args(argv)
    if args.full:
        grid = {"d": [2, 3], "n": [8, 16, 32], "beta": [1.0, 2.0, 4.0, 8.0, 16.0],
                "replicate": list(range(8))}
        opts = dict(trajectories=16, t1=1e4, saves=121, tol=1e-2, k_max=6)
    else:
        grid = {"d": [2, 3], "n": [8, 16], "beta": [1.0, 4.0, 9.0], "replicate": [0, 1]}
        opts = dict(trajectories=8, t1=300.0, saves=61, tol=1e-2, k_max=4)
    fn = functools.partial(metastability_point, **opts)
    result = ra.sweep(fn, grid, args.out, client=args.scheduler, workers=args.workers, seed=1,
                      batch_dims=("beta",), progress=True, attrs=opts)
    print(result)
    ds = xr.open_zarr(args.out).load()
    dwell = (ds.tau.sel(k=1) - ds.tau.sel(k=2))  # time spent at 2 clusters before the last merge
    table = dwell.median(dim=["replicate", "trajectory"], skipna=True)
    reached = ds.tau.sel(k=1).notnull().mean(dim=["replicate", "trajectory"])
    print("median time at 2 clusters before 1 (t of last merge - t of reaching 2), "
          "and fraction of runs reaching 1 cluster by t1:")
    for d in ds.d.values:
        for n in ds.n.values:
            row = ", ".join(f"beta={b:g}: {float(table.sel(d=d, n=n, beta=b)):8.2f} "
                            f"({float(reached.sel(d=d, n=n, beta=b)):.2f})" for b in ds.beta.values)
            print(f"  S^{d - 1}, n = {n:2d}: {row}")


if __name__ == "__main__":
    main()
