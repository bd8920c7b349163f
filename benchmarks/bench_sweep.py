"""ra.sweep on this machine: 1- vs 2-worker throughput, and the Dask path's overhead vs a plain loop.

    python benchmarks/bench_sweep.py

1. Throughput on a phase-diagram grid (GLPR Fig. 3 style: d in {8, 32} x 8 replicates x 19 beta,
   every beta of a task in one integration: glpr-fig3's point function at its full-size task of
   16 configurations of n = 32 particles up to t = 30): tasks per second with a
   LocalCluster of 1 worker process and of 2, each cluster started before the clock (the start is
   printed apart). Target: 2 workers >= 1.7x the throughput of 1.
2. Overhead per point: the same points (each >= 1 s) run by a plain Python loop in this process
   (one BLAS thread, as the sweep's tasks) and by ra.sweep on a 1-worker LocalCluster, the store
   written as usual. Target: <= 10 % more wall time per point.

Prints the load average (os.getloadavg) before and after: other work on the machine distorts both.
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
import time

import numpy as np
from threadpoolctl import threadpool_limits

import riemattn as ra
from riemattn.experiments._phase import phase_point
from riemattn.sweep import local_cluster, point_rng


def _cluster(n):
    from distributed import Client

    t = time.perf_counter()
    cluster = local_cluster(n)  # what ra.sweep starts by default
    client = Client(cluster)
    client.wait_for_workers(n)
    return cluster, client, time.perf_counter() - t


def _point(m, t1):
    return functools.partial(phase_point, n=32, m=m, eps=1e-3, t1=t1, dt=0.1, save_every=0.5,
                             matrices="sa")


def throughput(tmp):
    fn = _point(m=16, t1=30.0)  # glpr-fig3's full-size task: 16 configurations, t in [0, 30]
    grid = {"d": [8, 32], "beta": np.linspace(0, 9, 19).tolist(), "replicate": list(range(8))}
    tasks = 16
    out = {}
    for n in (1, 2):
        cluster, client, start = _cluster(n)
        try:
            # warm up the workers (imports) on a throw-away point before the clock
            ra.sweep(fn, {**grid, "d": [2], "replicate": [99]}, os.path.join(tmp, f"warm{n}.zarr"),
                     client=client, batch_dims=("beta",))
            t = time.perf_counter()
            res = ra.sweep(fn, grid, os.path.join(tmp, f"tp{n}.zarr"), client=client,
                           batch_dims=("beta",))
            wall = time.perf_counter() - t
        finally:
            client.close()
            cluster.close()
        assert res.complete, res
        out[n] = tasks / wall
        print(f"  {n} worker(s): {tasks} tasks in {wall:.2f} s = {out[n]:.3f} tasks/s "
              f"(cluster start {start:.1f} s, not counted)")
    return out[2] / out[1]


def overhead(tmp):
    fn = _point(m=24, t1=30.0)
    grid = {"d": [32], "beta": np.linspace(0, 9, 19).tolist(), "replicate": list(range(6))}
    units = [{"d": 32, "replicate": r} for r in range(6)]
    betas = np.asarray(grid["beta"])
    t = time.perf_counter()
    with threadpool_limits(limits=1):
        for u in units:
            fn({**u, "beta": betas}, point_rng(u, 0))
    loop = time.perf_counter() - t
    cluster, client, _ = _cluster(1)
    try:
        ra.sweep(_point(m=2, t1=1.0), {**grid, "replicate": [99]}, os.path.join(tmp, "warm.zarr"),
                 client=client, batch_dims=("beta",))
        t = time.perf_counter()
        res = ra.sweep(fn, grid, os.path.join(tmp, "ov.zarr"), client=client, batch_dims=("beta",))
        dask = time.perf_counter() - t
    finally:
        client.close()
        cluster.close()
    assert res.complete, res
    per_loop, per_dask = loop / len(units), dask / len(units)
    print(f"  plain loop: {len(units)} points in {loop:.2f} s ({per_loop:.2f} s per point)")
    print(f"  ra.sweep, 1 worker: {dask:.2f} s ({per_dask:.2f} s per point)")
    return (per_dask - per_loop) / per_loop, per_loop


def main():
    print(f"load average before: {os.getloadavg()}  (cores: {os.cpu_count()})")
    tmp = tempfile.mkdtemp(prefix="bench-sweep-")
    try:
        print("throughput on a phase-diagram grid (d = 8, 32 x 8 replicates x 19 beta, n = 32, "
              "16 configurations per task):")
        ratio = throughput(tmp)
        print(f"  2 workers / 1 worker = {ratio:.2f}x  (target >= 1.7x: {'met' if ratio >= 1.7 else 'NOT met'})")
        print("overhead of the Dask path per point:")
        ov, per = overhead(tmp)
        print(f"  overhead = {100 * ov:+.1f} % per point of {per:.2f} s  "
              f"(target <= 10 % for points >= 1 s: {'met' if ov <= 0.10 and per >= 1.0 else 'NOT met'})")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
