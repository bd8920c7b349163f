"""Cost of events that never fire: the B = 1000 hemisphere ensemble with and without them.

The hemisphere ensemble (ARXIV section 7.2: 10 tokens on S^2, two time-varying heads,
``riemattn.experiments._papers.hemisphere_P``, T = 10; random initial conditions as in
``benchmarks/bench_backends.py``), solved with ``ra.integrate(..., "dop853")`` at rtol = atol =
``--tol``, saving at T only, in one process, interleaved ``--repeat`` times (best time of each):

* **plain**: no events;
* **events**: two events that do not fire on this problem (checked): a terminal consensus event
  (misalignment <= 1e-14, :func:`riemattn.analysis.events.consensus`) and a cluster merge to one
  cluster at distance 1e-9 (:func:`riemattn.analysis.events.cluster_merge`): two ``g`` calls per
  accepted step on the rows being stepped, no root finding.

The issue's target: events that never fire add at most 10 % wall time. The last line is
``events/plain wall time: X.XX`` (best of each); the per-round ratios and their median are printed
before it (on a loaded machine the best times can come from different load phases). The machine load (os.getloadavg) is printed: take the final
measurement on a quiet machine.

Run: ``python benchmarks/events.py [--batch 1000] [--repeat 3] [--tol 1e-8]``.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np


def initial(B, seed=0):
    rng = np.random.default_rng(seed)
    y = rng.uniform(-0.5, 0.5, (B, 10, 3))
    return y / np.linalg.norm(y, axis=-1, keepdims=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--tol", type=float, default=1e-8)
    ap.add_argument("--t1", type=float, default=10.0)
    args = ap.parse_args(argv)

    import riemattn as ra
    from riemattn.analysis.events import cluster_merge, consensus
    from riemattn.experiments._papers import hemisphere_P

    field = ra.AttentionField(hemisphere_P, time_vectorized=True)
    y0 = initial(args.batch)
    events = [consensus(1e-14), cluster_merge(1e-9, 1)]
    kw = {"rtol": args.tol, "atol": args.tol, "saveat": [args.t1]}
    print(f"riemattn {ra.__version__}; hemisphere ensemble B = {args.batch}, T = {args.t1}, dop853, "
          f"tol {args.tol:g}; {os.cpu_count()} CPUs, load average {os.getloadavg()}")
    best = {"plain": np.inf, "events": np.inf}
    times = {"plain": [], "events": []}
    for r in range(args.repeat):
        for name in ("plain", "events"):
            t0 = time.perf_counter()
            sol = ra.integrate(field, y0, (0.0, args.t1), "dop853", events=events if name == "events" else None, **kw)
            dt = time.perf_counter() - t0
            best[name] = min(best[name], dt)
            times[name].append(dt)
            extra = ""
            if name == "events":
                fired = int(sol.events.count.sum())
                assert fired == 0, f"{fired} crossings: the events were meant not to fire"
                extra = f", crossings {fired}"
            print(f"round {r}: {name:6s} {dt:7.3f} s  nfev {sol.nfev}  steps (max) {sol.n_steps}{extra}")
            last = sol
        assert last.success
    print(f"best: plain {best['plain']:.3f} s, events {best['events']:.3f} s; load average {os.getloadavg()}")
    ratios = np.array(times["events"]) / np.array(times["plain"])  # per round (interleaved pairs)
    print(f"per-round events/plain: {np.round(ratios, 3).tolist()}, median {np.median(ratios):.3f}")
    print(f"events/plain wall time: {best['events'] / best['plain']:.2f}")


if __name__ == "__main__":
    main()
