"""The compiled engine's compile and load times, and a first look at its speed (issue 37).

Each measurement runs in a fresh process: ``cold`` with an empty numba cache directory (every
loop compiled), ``warm`` with the cache the cold run filled (loaded from disk). For each, the
first call of a fixed-step (rk4) and of an adaptive solve (dopri5, then rodas4) is timed, wall
and CPU (process) time -- CPU time is what a compile costs on an idle core when the machine is
shared -- and then a second call against the NumPy engine on the same problem. The load average
is printed beside every number.

    python benchmarks/compile_times.py [--quick]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

CHILD = r"""
import json, os, sys, time
import numpy as np
t_import = time.perf_counter()
import riemattn as ra
out = {"import_s": time.perf_counter() - t_import}
rng = np.random.default_rng(0)
B, l, d = int(sys.argv[1]), 6, 3
y0 = rng.standard_normal((B, l, d)); y0 /= np.linalg.norm(y0, axis=-1, keepdims=True)
field = ra.AttentionField(rng.standard_normal((d, d)), beta=np.linspace(0.5, 2.0, B))
for name, kw in (("rk4", dict(dt=0.05)), ("dopri5", dict(rtol=1e-8, atol=1e-10)), ("rodas4", dict(rtol=1e-8, atol=1e-10))):
    w, c = time.perf_counter(), time.process_time()
    sol = ra.integrate(field, y0, (0.0, 5.0), name, engine="compiled", **kw)
    out[name + "_first_wall_s"] = time.perf_counter() - w
    out[name + "_first_cpu_s"] = time.process_time() - c
    w = time.perf_counter()
    sol = ra.integrate(field, y0, (0.0, 5.0), name, engine="compiled", **kw)
    out[name + "_compiled_s"] = time.perf_counter() - w
    w = time.perf_counter()
    ref = ra.integrate(field, y0, (0.0, 5.0), name, engine="numpy", **kw)
    out[name + "_numpy_s"] = time.perf_counter() - w
    out[name + "_steps"] = int(sol.per_trajectory.n_steps.sum())
    out[name + "_max_diff"] = float(np.abs(sol.y - ref.y).max())
out["loadavg"] = os.getloadavg()
print(json.dumps(out))
"""


def run(cache: str, B: int) -> dict:
    env = dict(os.environ, NUMBA_CACHE_DIR=cache)
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    res = subprocess.run([sys.executable, "-c", CHILD, str(B)], env=env, capture_output=True, text=True,
                         timeout=3600)
    if res.returncode:
        raise SystemExit(res.stderr)
    return json.loads(res.stdout.strip().splitlines()[-1])


def main(argv=None):
    quick = "--quick" in (argv or sys.argv[1:])
    B = 4 if quick else 100
    print(f"load average before: {os.getloadavg()}")
    with tempfile.TemporaryDirectory() as cache:
        for label in ("cold", "warm"):
            out = run(cache, B)
            print(f"{label} (B = {B}):")
            for k, v in out.items():
                print(f"  {k:24s} {v if isinstance(v, (int, list, tuple)) else '%.4g' % v}")


if __name__ == "__main__":
    main()
