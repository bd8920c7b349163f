"""Cluster counting: ``riemattn.diagnostics.cluster_count`` against SciPy's connected components,
and the two published ways of counting clusters (components vs GLPR's matrix rank).

**Timing** (the default). B configurations of n = 200 tokens on S^2 (d = 3), clustered as in the
metastable regime (12 random centres, each token a centre plus N(0, 0.03^2) noise, projected) and
linked at distance tol = sqrt(2 * 1e-3) (GLPR's eps = 1e-3). Each tool runs in a fresh process
(this script started again with ``--tool``), times ``--repeat`` passes over the B configurations
and reports its best pass per configuration:

* **riemattn**: ``cluster_count(y, tol)`` on the whole batch (B, n, 3) at once;
* **scipy**: what a user would write, one configuration at a time:
  ``connected_components(csr_matrix(squareform(pdist(x)) <= tol), directed=False)``.

Both give the same counts (checked: the script fails otherwise; equal work, equal answers). The
issue's target: riemattn within 2x of SciPy (it was 130 ms against 2.6 ms per configuration when
cluster_count was a transitive closure by repeated squaring). The last line is
``cluster_count / scipy per configuration: X.XX``. The machine load (os.getloadavg) is printed
beside the times: take the final measurement on a quiet machine.

**Counts** (``--counts``): SA at beta = 1 on the circle (n = 32, d = 2, GLPR's phase-diagram
setting), B configurations from i.i.d. uniform tokens, dopri5 at rtol 1e-8; at t = 2, 5, 10, 20
the median number of clusters by connected components (riemattn) and by the rank of the 0/1
matrix [<x_i, x_j> > 1 - 1e-4] (GLPR's published code, ``cluster_count(..., method="rank")``).

**Many tokens** (``--large-n [N]``, issue 57 item 4): each diagnostic once on N (default 10^5)
uniform tokens on S^2, in a fresh process: seconds, the peak of NumPy's allocations (tracemalloc)
and the process's peak resident memory (ru_maxrss, the interpreter and libraries included), with
the load average before and after each. The double sums run over tiles of 256 x 256 pairs
(``riemattn.analysis._pairs``); one N x N float64 matrix would be 80 GB at N = 10^5.

Run: ``python benchmarks/diagnostics.py [--batch 50] [--repeat 5] [--quick] [--counts] [--large-n [N]]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

N, D, CENTRES, SPREAD = 200, 3, 12, 0.03
TOL = float(np.sqrt(2e-3))


def configurations(B, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((B, CENTRES, D))
    which = rng.integers(0, CENTRES, (B, N))
    y = np.take_along_axis(centres, which[..., None], axis=1) / np.linalg.norm(
        np.take_along_axis(centres, which[..., None], axis=1), axis=-1, keepdims=True)
    y = y + SPREAD * rng.standard_normal(y.shape)
    return y / np.linalg.norm(y, axis=-1, keepdims=True)


def _time_tool(tool, batch, repeat):
    """In this (fresh) process: best seconds per configuration over ``repeat`` passes, and the counts."""
    y = configurations(batch)
    if tool == "riemattn":
        from riemattn.analysis.diagnostics import cluster_count

        def count():
            return cluster_count(y, TOL)
    else:
        from scipy.sparse import csr_matrix
        from scipy.sparse.csgraph import connected_components
        from scipy.spatial.distance import pdist, squareform

        def count():
            return np.array([connected_components(csr_matrix(squareform(pdist(x)) <= TOL), directed=False)[0]
                             for x in y])
    counts = count()  # warm-up (imports, caches)
    best = np.inf
    for _ in range(repeat):
        start = time.perf_counter()
        count()
        best = min(best, time.perf_counter() - start)
    return {"tool": tool, "seconds_per_configuration": best / batch, "counts": np.asarray(counts).tolist()}


def _fresh(tool, batch, repeat):
    out = subprocess.run([sys.executable, __file__, "--tool", tool, "--batch", str(batch), "--repeat", str(repeat)],
                         check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


#: The diagnostics timed by --large-n (y: the tokens, v: a pole, P: an SPD matrix).
LARGE = {
    "energy (beta 4)": "gf.energy(y, 4.0)",
    "energy rescaled centered (beta 400)": "gf.energy(y, 400.0, rescaled=True, centered=True)",
    "log energy (beta 4)": "gf.energy(y, 4.0, log=True)",
    "energy_weights rescaled (beta 4)": "gf.energy_weights(y, 4.0, rescaled=True)",
    "potential (ARXIV V_P)": "gf.potential(y, P)",
    "clustered_fraction (0.999)": "dg.clustered_fraction(y, 0.999)",
    "misalignment": "dg.misalignment(y)",
    "hemisphere_lyapunov + token_lyapunov": "(dg.hemisphere_lyapunov(y, v), dg.token_lyapunov(y, v))",
    "consensus_distance": "dg.consensus_distance(y)",
    "cluster_count (tol 0.02)": "dg.cluster_count(y, 0.02)",
}


def _large_one(name, n):
    """In this (fresh) process: one call of LARGE[name] on n tokens; seconds and memory."""
    import resource
    import tracemalloc

    from riemattn import diagnostics as dg, gradient_flow as gf

    y = np.random.default_rng(0).standard_normal((n, 3))
    y /= np.linalg.norm(y, axis=-1, keepdims=True)
    v, P = np.array([0.0, 0.0, 1.0]), np.diag([2.0, 1.0, 0.5])
    env = {"dg": dg, "gf": gf, "y": y, "v": v, "P": P}
    load = os.getloadavg()[0]
    tracemalloc.start()
    start = time.perf_counter()
    eval(LARGE[name], env)
    seconds = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kB on Linux
    return {"name": name, "seconds": seconds, "numpy_peak": peak, "maxrss": rss, "load": [load, os.getloadavg()[0]]}


def _large(n):
    print(f"n = {n} tokens on S^2, one call each in a fresh process (an n x n float64 matrix: {8 * n * n / 1e9:.3g} GB)")
    print(f"  {'diagnostic':38s} {'seconds':>8s} {'NumPy peak':>11s} {'max RSS':>9s}  load (1 min) before/after")
    for name in LARGE:
        out = subprocess.run([sys.executable, __file__, "--large-one", name, "--large-n", str(n)],
                             check=True, capture_output=True, text=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"  {name:38s} {r['seconds']:8.2f} {r['numpy_peak'] / 1e6:8.1f} MB {r['maxrss'] / 1e6:6.0f} MB"
              f"  {r['load'][0]:.2f} / {r['load'][1]:.2f}", flush=True)


def _counts(batch):
    import riemattn as ra

    rng = np.random.default_rng(0)
    x0 = rng.standard_normal((batch, 32, 2))
    x0 /= np.linalg.norm(x0, axis=-1, keepdims=True)
    times = [2.0, 5.0, 10.0, 20.0]
    sol = ra.integrate(ra.sa(1.0, 2), x0, (0.0, times[-1]), "dopri5", rtol=1e-8, atol=1e-10, saveat=times)
    tol = float(np.sqrt(2e-4))  # <x_i, x_j> > 0.9999 on the unit circle
    print(f"SA beta = 1, n = 32, d = 2, {batch} configurations, eps = 1e-4 (tol = {tol:.4f}):")
    for t, y in zip(sol.t, sol.y):
        comp = ra.diagnostics.cluster_count(y, tol)
        rank = ra.diagnostics.cluster_count(y, tol, method="rank")
        print(f"  t = {t:4g}: median clusters {np.median(comp):5.1f} (components), {np.median(rank):5.1f} (rank); "
              f"they differ in {np.mean(comp != rank):.0%} of the configurations")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=50)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="10 configurations, 3 passes (64 for --counts)")
    ap.add_argument("--counts", action="store_true", help="the components vs rank medians at beta = 1")
    ap.add_argument("--large-n", type=int, nargs="?", const=100_000, default=None, metavar="N",
                    help="each diagnostic once at N tokens on S^2 (default 100000): time and memory")
    ap.add_argument("--tool", choices=["riemattn", "scipy"], help=argparse.SUPPRESS)
    ap.add_argument("--large-one", choices=list(LARGE), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.large_one:
        print(json.dumps(_large_one(args.large_one, args.large_n)))
        return 0
    if args.tool:
        print(json.dumps(_time_tool(args.tool, args.batch, args.repeat)))
        return 0
    print(f"load average (1, 5, 15 min): {os.getloadavg()}")
    if args.large_n:
        _large(args.large_n)
        return 0
    if args.counts:
        _counts(64 if args.quick else 256)
        return 0
    batch, repeat = (10, 3) if args.quick else (args.batch, args.repeat)
    mine, ref = _fresh("riemattn", batch, repeat), _fresh("scipy", batch, repeat)
    if mine["counts"] != ref["counts"]:
        raise SystemExit(f"the counts differ: riemattn {mine['counts']} vs scipy {ref['counts']}")
    print(f"n = {N}, d = {D}, {batch} configurations, tol = {TOL:.4f}, clusters {min(ref['counts'])}..{max(ref['counts'])}")
    for r in (mine, ref):
        print(f"  {r['tool']:9s} {1e3 * r['seconds_per_configuration']:8.3f} ms per configuration (best of {repeat})")
    print(f"load average after: {os.getloadavg()}")
    print(f"cluster_count / scipy per configuration: {mine['seconds_per_configuration'] / ref['seconds_per_configuration']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
