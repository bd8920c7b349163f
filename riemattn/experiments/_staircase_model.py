"""The pieces of ``meta-staircase``: clusters as weighted particles on a clock that follows them.

Rescaled USA on the circle (docs/low_temperature.md; GLPR eq. 7.1 times e^{-beta}) for k clusters
at angles theta_c with w_c particles each (sum w_c = n), the exact dynamics of n particles on the
invariant set where each cluster's particles coincide:

    dtheta_c/ds = (1/n) sum_e w_e e^{beta (cos(theta_e - theta_c) - 1)} sin(theta_e - theta_c).

Why clusters and a clock. Merges at beta = 4000 happen at s ~ 1e132; no step in s can resolve a
merge (Delta s ~ 10) at s ~ 1e32 (the spacing of floats there is 1e16), and an implicit step in s
longer than ~1e16 forms I/(h gamma) - J below the rounding of J's O(1) in-cluster rates. Two
changes remove both limits. (1) A merged cluster is one weighted particle (its particles coincide
to rounding long before the next merge; the centroid sum w_c theta_c is conserved, so the merged
particle sits at the weighted centroid). (2) The independent variable is sigma with
ds = dsigma / c(theta), c = (1/n^2) sum_{c != e} w_c w_e e^{beta (cos - 1)} the cross part of the
normalised energy: every rate is O(1) in sigma; s is recovered from a bounded row
r' = c_0 / c in [0, 1] (c never decreases: the energy is non-decreasing and its self part is
constant), s = s_0 + r / c_0, and the arclength tau of the n-particle path from
tau' = |ds theta / ds|_w / c, |v|_w^2 = sum_c w_c v_c^2.

The published iteration (Geshkovski, Koubbi, Polyanskiy, Rigollet, code of arXiv 2410.06833,
``staircase.py``, final loop): theta <- theta + lr log(beta) g / |g|, g the rescaled USA
gradient, and when |g| < 1e-5 every pair within 1e-3 snapped together; it plots
(1/n^2) sum_ij e^{beta (cos - 1)} against lr x iteration, i.e. arclength / log(beta).
"""

from __future__ import annotations

import numpy as np
from scipy.integrate import quad

from .._backend import use_device
from ..analysis.events import merge_heights
from ..dynamics.circle import CircleField
from ..dynamics.fields import Field
from ..geometry.manifolds import Euclidean
from ..solvers.core.events import Event
from ..solvers.core.integrate import integrate


def normalised_energy(theta, w, beta: float, n: int):
    """(1/n^2) sum_{c,e} w_c w_e e^{beta (cos(theta_c - theta_e) - 1)} = 2 beta e^{-beta} E_beta, shape (...)."""
    theta = np.asarray(theta, dtype=float)
    d = theta[..., None, :] - theta[..., :, None]
    return np.einsum("...ij,i,j->...", np.exp(beta * (np.cos(d) - 1.0)), w, w) / n**2


def _cross(theta, w, beta):
    d = theta[..., None, :] - theta[..., :, None]
    K = np.exp(beta * (np.cos(d) - 1.0))
    off = np.outer(w, w) * (1.0 - np.eye(len(w)))  # the diagonal left out: no cancellation
    return K, d, np.einsum("...ij,ij->...", K, off)


class ClusterClock(Field):
    """Rows: k cluster angles, r, tau (state (..., k + 2, 1) on Euclidean(1)); see the module docstring."""

    manifold = Euclidean(1)
    autonomous = True

    def __init__(self, beta: float, w, n: int, c0: float):
        self.beta, self.w, self.n, self.c0 = float(beta), np.asarray(w, dtype=float), int(n), float(c0)

    def take(self, index, batch_shape: tuple):
        return self

    def __call__(self, t, y):
        th = y[..., :-2, 0]
        K, d, cross = _cross(th, self.w, self.beta)
        c = np.maximum(cross / self.n**2, np.finfo(float).tiny)
        F = np.sum(K * self.w * np.sin(d), axis=-1) / self.n
        speed = np.sqrt(np.sum(self.w * F * F, axis=-1))
        out = np.concatenate([F / c[..., None], (self.c0 / c)[..., None], (speed / c)[..., None]], axis=-1)
        return out[..., None]


def staircase(theta0, beta: float, *, tol: float, stepper: str, rtol: float, atol: float):
    """Run n particles to one cluster, merging at gap ``tol``; return merges and the saved path.

    Returns ``(merges, path)``: ``merges`` a list of dicts (s, tau, w_a, w_b, energy at the
    event, cluster weights after), ``path`` a dict of arrays over the accepted steps: s, tau,
    the normalised energy.
    """
    theta = np.sort(np.asarray(theta0, dtype=float))
    n = len(theta)
    w = np.ones(n)
    s0 = tau0 = 0.0
    merges, S, T, E = [], [], [], []
    steps = 0
    while len(theta) > 1:
        k = len(theta)
        c0 = float(_cross(theta, w, beta)[2]) / n**2
        field = ClusterClock(beta, w, n, c0)
        event = Event(lambda t, y, k=k: merge_heights(y[..., :-2, :])[..., k - 2] - tol, direction=-1,
                      terminal=True, name=f"merge_to_{k - 1}")
        with use_device("cpu"):  # ClusterClock is NumPy code: on the host whatever `reproduce --device` says
            sol = integrate(field, np.concatenate([theta, [0.0, tau0]])[:, None], (0.0, 1e4), stepper,
                            rtol=rtol, atol=atol, events=[event], event_tol=1e-12, max_steps=100_000,
                            raise_on_failure=True)
        if not sol.events.t.shape[-1]:
            raise RuntimeError(f"no merge by sigma = 1e4 at beta = {beta} ({k} clusters)")
        steps += int(sol.n_steps)
        Y = sol.y[..., 0]
        S.append(s0 + Y[:, -2] / c0)
        T.append(Y[:, -1])
        E.append(normalised_energy(Y[:, :-2], w, beta, n))
        th, r, tau = Y[-1, :-2], Y[-1, -2], Y[-1, -1]
        a = int(np.argmin(np.diff(th)))
        merges.append({"s": s0 + r / c0, "tau": tau, "w_a": w[a], "w_b": w[a + 1],
                       "energy": float(E[-1][-1])})
        centre = (w[a] * th[a] + w[a + 1] * th[a + 1]) / (w[a] + w[a + 1])  # the conserved centroid
        theta = np.concatenate([th[:a], [centre], th[a + 2:]])
        w = np.concatenate([w[:a], [w[a] + w[a + 1]], w[a + 2:]])
        s0, tau0 = merges[-1]["s"], tau
    path = {"s": np.concatenate(S), "tau": np.concatenate(T), "energy": np.concatenate(E), "steps": steps}
    return merges, path


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
