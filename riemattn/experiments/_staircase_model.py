"""The pieces of ``meta-staircase``: clusters as weighted particles on a clock that follows them.

The reduction -- rescaled USA on the circle for k clusters of w_c coincident particles, run in
the clock variable sigma (ds = dsigma / c(theta)) so that merges at s ~ 1e132 stay resolvable --
is public, with its derivation: :mod:`riemattn.analysis.weighted_clusters`.

The published iteration (Geshkovski, Koubbi, Polyanskiy, Rigollet, code of arXiv 2410.06833,
``staircase.py``, final loop): theta <- theta + lr log(beta) g / |g|, g the rescaled USA
gradient, and when |g| < 1e-5 every pair within 1e-3 snapped together; it plots
(1/n^2) sum_ij e^{beta (cos - 1)} against lr x iteration, i.e. arclength / log(beta).
"""

from __future__ import annotations

import numpy as np
from scipy.integrate import quad

from ..analysis.weighted_clusters import WeightedClusterField as ClusterClock  # noqa: F401 (the old name)
from ..analysis.weighted_clusters import cluster_staircase, normalised_energy  # noqa: F401
from ..dynamics.circle import CircleField


def staircase(theta0, beta: float, *, tol: float, stepper: str, rtol: float, atol: float):
    """:func:`riemattn.analysis.weighted_clusters.cluster_staircase` (this module's former home)."""
    return cluster_staircase(theta0, beta, tol=tol, stepper=stepper, rtol=rtol, atol=atol)


def greedy_merges(theta0, n: int | None = None):
    """The merge sequence of point clusters from ``theta0``: closest pair first, at its weighted centroid.

    Returns a list of (w_a, w_b, gap) -- the large-beta prediction (the merge of gap delta takes a
    rescaled time ~ e^{beta (1 - cos delta)}, so the smallest gap goes first).
    """
    theta = list(np.sort(np.asarray(theta0, dtype=float)))
    w = [1.0] * len(theta)
    out = []
    while len(theta) > 1:
        gaps = np.diff(theta)
        a = int(np.argmin(gaps))
        out.append((w[a], w[a + 1], float(gaps[a])))
        theta[a] = (w[a] * theta[a] + w[a + 1] * theta[a + 1]) / (w[a] + w[a + 1])
        w[a] += w[a + 1]
        del theta[a + 1], w[a + 1]
    return out


def two_cluster_log_time(beta: float, gap: float, W: float, n: int, tol: float) -> float:
    """log of the rescaled time for two point clusters (W particles) to close from ``gap`` to ``tol``.

    The gap obeys d delta/ds = -(W/n) e^{beta (cos delta - 1)} sin delta, so
    s = (n/W) int_tol^gap e^{beta (1 - cos u)} / sin u du (SciPy quad, in the log domain:
    e^{beta (1 - cos gap)} times an integral of size O(1/beta)).
    """
    top = beta * (1.0 - np.cos(gap))
    val, _ = quad(lambda u: np.exp(beta * (1.0 - np.cos(u)) - top) / np.sin(u), tol, gap, limit=200,
                  points=[gap - 1.0 / (beta * np.sin(gap))] if gap - 1.0 / (beta * np.sin(gap)) > tol else None)
    return top + np.log(n / W * val)


def published_iteration(theta0, beta: float, lr: float, iters: int, *, snap: bool = True):
    """The published normalised-gradient iteration, with riemattn's circle field and energy.

    theta <- theta + lr log(beta) F / |F|, F = ``CircleField(beta, "usa", rescaled=True)`` (n times
    the published gradient: the same direction); with ``snap``, after a step whose gradient norm
    (|F| / n) is below 1e-5, every later particle within 1e-3 of an earlier one is set onto it
    (in index order, as published). Returns the normalised energy 2 beta e^{-beta} E_beta
    (``CircleField.energy(rescaled=True)``) after each step, shape (iters,); NaN once every particle
    is snapped onto one (the gradient is exactly 0 and the published step divides 0 by 0).
    """
    field = CircleField(beta, "usa", rescaled=True)
    theta = np.array(theta0, dtype=float)
    n = len(theta)
    h = lr * np.log(beta)
    out = np.empty(iters)
    for i in range(iters):
        F = field(0.0, theta)
        norm = np.linalg.norm(F) / n
        if norm == 0.0:  # all snapped together: the published division gives NaN from here on
            out[i:] = np.nan
            break
        theta = theta + h * F / (n * norm)
        if snap and norm < 1e-5:
            for j in range(n):
                for k in range(j + 1, n):
                    if abs(theta[j] - theta[k]) < 1e-3:
                        theta[k] = theta[j]
        out[i] = 2.0 * beta * field.energy(theta, rescaled=True)
    return out
