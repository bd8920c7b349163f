"""Point functions for tests/runs/test_sweep.py, importable by Dask worker processes and subprocesses.

Each writes one marker file per call into the directory named by the environment variable
``RIEMATTN_SWEEP_MARKS`` (when set), so a test can count the calls that really ran.
"""

from __future__ import annotations

import os
import time
import uuid

import numpy as np
import xarray as xr

import riemattn as ra
from riemattn.analysis.diagnostics import cluster_count, misalignment


def _mark(kind, params):
    where = os.environ.get("RIEMATTN_SWEEP_MARKS")
    if where:
        name = "_".join(f"{k}={v}" for k, v in sorted(params.items()) if np.ndim(v) == 0)
        with open(os.path.join(where, f"{kind}-{name}-{uuid.uuid4().hex}"), "w"):
            pass


def sa_point(params, rng):
    """A short SA integration: n = 4 tokens on S^(d-1), random start from ``rng``; 6 saved times."""
    _mark("start", params)
    delay = float(os.environ.get("RIEMATTN_SWEEP_DELAY", "0"))
    if delay:
        time.sleep(delay)
    d, beta = int(params["d"]), params["beta"]
    batch = np.shape(beta)
    x0 = rng.standard_normal((4, d))
    x0 /= np.linalg.norm(x0, axis=-1, keepdims=True)
    x0 = np.broadcast_to(x0, batch + (4, d))
    b = np.asarray(beta, dtype=float) if batch else float(beta)
    t = np.linspace(0.0, 1.0, 6)
    sol = ra.integrate(ra.sa(b, d), x0, (0.0, 1.0), stepper="rk4", dt=0.1, saveat=t)
    dims = ("beta",) if batch else ()
    ds = xr.Dataset(
        {
            "misalignment": (("time",) + dims, misalignment(sol.y)),
            "clusters": (dims, cluster_count(sol.y[-1], 1e-3)),
            "first": (dims + ("component",), sol.y[-1, ..., 0, :2]),
        },
        coords={"time": t},
    )
    _mark("end", params)
    return ds


def failing_point(params, rng):
    """``sa_point``, except that the point d = 3, beta = 2.0 raises."""
    if int(params["d"]) == 3 and float(np.max(params["beta"])) == 2.0 and np.ndim(params["beta"]) == 0:
        raise FloatingPointError(f"deliberate failure at d={params['d']}, beta={params['beta']}")
    return sa_point(params, rng)
