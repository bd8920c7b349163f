"""The induced metric's geodesics: riemattn (DOP853 + Newton shooting) against geomstats' generic
solvers (ExpODESolver and LogShootingSolver on the same Christoffel symbols; defaults: 10 Euler
steps for exp, scipy's L-BFGS-B with finite-difference gradients for log on the NumPy backend).

Accuracy is measured against independent references: exp against SciPy's DOP853 at rtol 1e-13,
log by |exp(log(y)) - y| and against the known v with y = exp(v). Prints the machine load: the
final numbers must be measured on a quiet machine.

    python benchmarks/induced_geodesics.py [--points N]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import scipy.integrate
from geomstats.geometry.connection import Connection
from geomstats.numerics.geodesic import ExpODESolver, LogShootingSolver
from geomstats.numerics.ivp import ScipySolveIVP
from geomstats.numerics.optimization import ScipyMinimize

import riemattn as ra


def main(points: int = 20, d: int = 3, cond: float = 10.0, seed: int = 0):
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.normal(size=(d, d)))
    W = (Q * np.geomspace(1.0, cond, d)) @ Q.T
    E = ra.Ellipsoid(W, metric="euclidean")
    M = E.metric
    x = E.projection(rng.normal(size=(points, d)))
    v = M.to_tangent(rng.normal(size=(points, d)), x)
    v *= (0.8 * M.log_radius / np.linalg.norm(v, axis=-1))[:, None]

    def ref_exp(xi, vi):
        sol = scipy.integrate.solve_ivp(lambda t, s: M._rhs(t, s.reshape(2, d)).ravel(), (0.0, 1.0),
                                        np.concatenate([xi, vi]), method="DOP853", rtol=1e-13, atol=1e-14)
        return sol.y[:d, -1]

    ref = np.array([ref_exp(a, b) for a, b in zip(x, v)])
    print(f"load average {os.getloadavg()}; {points} points, d = {d}, cond(W) = {cond:g}, |v| = 0.8 log_radius")

    t = time.perf_counter()
    y = M.exp(v, x)
    t_exp = time.perf_counter() - t
    t = time.perf_counter()
    lv = M.log(y, x)
    t_log = time.perf_counter() - t
    print(f"riemattn   exp {t_exp * 1e3:8.1f} ms  err vs scipy {np.abs(y - ref).max():.1e} | "
          f"log {t_log * 1e3:8.1f} ms  |log - v| {np.abs(lv - v).max():.1e}")

    # geomstats' generic solvers on the same geodesic equation (its christoffels)
    exp_solver = ExpODESolver(E)
    # the NumPy backend has no autodiff: scipy's L-BFGS-B with finite-difference gradients
    log_solver = LogShootingSolver(E, optimizer=ScipyMinimize(method="L-BFGS-B", tol=1e-14))
    t = time.perf_counter()
    yg = exp_solver.exp(v, x)
    t_gexp = time.perf_counter() - t
    t = time.perf_counter()
    try:
        lg = log_solver.log(y, x)
        log_err = f"{np.abs(lg - v).max():.1e}"
    except Exception as exc:  # noqa: BLE001 - report what geomstats does
        lg, log_err = None, f"failed ({type(exc).__name__})"
    t_glog = time.perf_counter() - t
    print(f"geomstats  exp {t_gexp * 1e3:8.1f} ms  err vs scipy {np.abs(yg - ref).max():.1e} | "
          f"log {t_glog * 1e3:8.1f} ms  |log - v| {log_err}")
    # geomstats' exp with scipy's DOP853 at the same tolerance as riemattn (its default: 10 Euler steps)
    tight = ExpODESolver(E, integrator=ScipySolveIVP(method="DOP853", rtol=1e-13, atol=1e-14))
    t = time.perf_counter()
    yt = tight.exp(v, x)
    t_texp = time.perf_counter() - t
    print(f"geomstats  exp {t_texp * 1e3:8.1f} ms  err vs scipy {np.abs(yt - ref).max():.1e}"
          "  (ExpODESolver with ScipySolveIVP DOP853, rtol 1e-13)")
    assert isinstance(M, Connection)
    print("(geomstats' solvers use the same Christoffel symbols, M.christoffels; see the docstring)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=20)
    args = parser.parse_args()
    main(args.points)
