"""Pieces of the ``causal-clusters`` reproduction: Rényi centres, long solves past float64's time
resolution, the two-cluster leader quadrature.

**Rényi centres** (Karagodin, Polyanskiy, Rigollet 2024, section 5 and Figures 2-3; the definition
as the first author's public notebook computes it, github.com/nikitus20/blog,
``content/post/circle_causal_dynamics-(1)``, functions ``parking`` and ``overlapped_parking``, read,
not copied). Tokens are taken in causal order with an exclusion radius delta (the paper's
delta = 4 beta^{-1/2}), distances geodesic on the circle:

- *Rényi centres* (a Rényi parking in causal order): token 1 is a centre; token k is a centre when
  its distance to every earlier **centre** exceeds delta;
- *strong Rényi centres*: token 1 is one; token k is one when its distance to every earlier
  **token** exceeds delta (no earlier token within delta: nothing pulls it, so it barely moves).

Strong centres are Rényi centres, so there are at most as many.

**Long solves.** At beta = 64 the last merges happen at t ~ 1e15-1e30, and a merge itself lasts
O(10) time units: below the spacing of float64 numbers near t (1e22 * 2.2e-16 ~ 4e6), so a solver
stepping in absolute time fails there with a step-size underflow. The field is autonomous, so
:func:`solve_restarting` integrates in *segments*, each in its own local time from 0: where a
segment stops on a step-size underflow, the next one starts from the last accepted state at local
time 0, where the merge is resolved; absolute times are sums of segment lengths (relative rounding
~1e-16).

**Leader quadrature.** With two collapsed clusters left, A holding token 1 at theta_1(0) and B with
leader L (its first token in causal order), every token before L is in A, so the leader obeys
the scalar ODE (CSA with Q = K = V = I)::

    dphi/dt = - m e^{-beta (1 - cos phi)} sin phi / (m e^{-beta (1 - cos phi)} + 1),   m = L - 1,

phi the leader's angle to theta_1(0): the final merge time is t_2 + int_{phi_end}^{phi(t_2)} dphi /
|dphi/dt| (:func:`leader_merge_time`), an independent check of the 200-token solve.
"""

from __future__ import annotations

import numpy as np
from scipy.integrate import quad

from .._backend import use_device
from ..analysis.events import merge_heights
from ..dynamics.circle import to_points, wrap
from ..solvers.core.events import Event
from ..solvers.core.integrate import integrate
from ..solvers.explicit.steppers import get_stepper

__all__ = ["renyi_centres", "circle_merge_heights", "count_events", "solve_restarting", "leader_merge_time"]


def renyi_centres(theta, delta: float, strong: bool = False) -> list:
    """Indices of the (strong) Rényi centres of the angles ``theta`` (n,) in causal order.

    ``strong=False``: k is a centre when |theta_k - theta_c| > delta (geodesic) for every earlier
    centre c; ``strong=True``: for every earlier token. Token 0 is always a centre.
    """
    theta = np.asarray(theta, dtype=float)
    centres = [0]
    for k in range(1, theta.shape[-1]):
        ref = theta[:k] if strong else theta[centres]
        if np.min(np.abs(wrap(theta[k] - ref))) > delta:
            centres.append(k)
    return centres


def circle_merge_heights(theta) -> np.ndarray:
    """Single-linkage merge heights of the points (cos theta_i, sin theta_i), decreasing, (..., n - 1).

    On a circle the minimum spanning tree of the chord distances is the cycle of consecutive
    points (sorted by angle) less its longest edge, so the heights are the chords 2 sin(g / 2) of
    the n - 1 smallest circular gaps g: the values of :func:`riemattn.analysis.events.merge_heights`
    of the points, in O(n log n).
    """
    theta = np.sort(np.mod(np.asarray(theta, dtype=float), 2.0 * np.pi), axis=-1)
    gaps = np.diff(theta, axis=-1, append=theta[..., :1] + 2.0 * np.pi)
    chords = np.sort(2.0 * np.sin(np.minimum(gaps, np.pi) / 2.0), axis=-1)[..., ::-1]
    return chords[..., 1:]


def count_events(tol: float, counts) -> list:
    """One event per cluster count c: the c-th largest single-linkage merge height of the points
    (cos theta_i, sin theta_i) falls to ``tol`` (as :func:`riemattn.analysis.events.cluster_merges`,
    on the circle's points rather than the unwrapped angles); heights shared per state."""
    cache = [None, None]

    def heights(y):
        if cache[0] is not y:
            cache[0], cache[1] = y, circle_merge_heights(y[..., 0])
        return cache[1]

    def make(c):
        return Event(lambda t, y: heights(y)[..., c - 1] - tol, direction=-1, name=f"merge_to_{c}")

    return [make(int(c)) for c in counts]


def solve_restarting(field, theta0, t_save, *, stepper, rtol, atol, tol, counts, max_segments=100):
    """Angles of one configuration at the absolute times ``t_save`` and its merge times.

    Segments as in the module docstring: a segment ends where the solver reports a step-size
    underflow (a step below 1e-14 |t| needed: the motion is fast on the scale of float64's spacing
    near the local time); the next starts from the last accepted state at local time 0. Returns
    ``(theta, merges, stats)``: ``theta`` (len(t_save), n) (NaN where not reached), ``merges``
    {count c: (time, angles then)} (first crossing), ``stats`` counters (segments, restart times,
    steps, nfev, status of the last segment: 0 reached the end).
    """
    t_save = np.asarray(t_save, dtype=float)
    step = get_stepper(stepper)
    if hasattr(step, "solve_limit"):
        # The causal Jacobian is lower triangular: the Rosenbrock solve is a forward substitution,
        # each row's rounding relative to its own entries, so the slow rows (a far cluster's leader
        # sees only token 1's cluster) stay resolved at steps far beyond the dense-solve limit
        # h gamma eps |J|_inf <= 1 (riemattn.solvers.rosenbrock): the test is off, and the result is
        # checked against the leader's scalar ODE (claim "final merge time").
        step = type(step)(solve_limit=None)
    out = np.full((len(t_save), np.shape(theta0)[-1]), np.nan)
    y = np.asarray(theta0, dtype=float)[None, :, None]
    events = count_events(tol, counts)
    a, merges = 0.0, {}
    stats = {"segments": 0, "restarts": [], "n_steps": 0, "nfev": 0, "status": 0}
    while stats["segments"] < max_segments:
        stats["segments"] += 1
        todo = t_save >= a
        with use_device("cpu"):  # CircleField is NumPy code: on the host under `reproduce --device`
            sol = integrate(field, y, (0.0, float(t_save[-1] - a)), step, rtol=rtol, atol=atol,
                            saveat=t_save[todo] - a, events=events, event_tol=1e-10, dense_output=True)
        pt = sol.per_trajectory
        stats["n_steps"] += int(pt.n_steps[0])
        stats["nfev"] += int(pt.nfev[0])
        stats["status"] = int(pt.status[0])
        got = np.isfinite(sol.y[:, 0, :, 0]).all(axis=-1)
        out[np.flatnonzero(todo)[got]] = sol.y[got, 0, :, 0]
        ev = sol.events
        for k in range(int(ev.count[0])):
            c = int(ev.names[int(ev.which[0, k])].rsplit("_", 1)[1])
            merges.setdefault(c, (a + float(ev.t[0, k]), ev.y[0, k, :, 0].copy()))
        if pt.status[0] != _UNDERFLOW:  # reached the end, or a failure a restart cannot cure
            break
        t_fail = float(pt.t_fail[0])
        y = np.asarray(sol.interpolate(t_fail)).reshape(1, -1, 1)
        if not np.all(np.isfinite(y)) or t_fail <= 0.0:
            break
        a += t_fail
        stats["restarts"].append(a)
    return out, merges, stats


#: PerTrajectory.status of a step-size underflow (riemattn.solvers.integrate)
_UNDERFLOW = -2


def leader_merge_time(theta, beta: float, tol: float) -> tuple:
    """``(T, L, phi)``: the time the two-cluster leader ODE (module docstring) takes to bring the
    leader from its angle ``phi`` (to token 1) to the chord distance ``tol`` of token 1; ``L``
    the leader's index (0-based: m = L tokens before it). ``theta`` (n,) with two clusters: the
    leader is the first token farther than half the largest merge height from token 1.
    """
    theta = np.asarray(theta, dtype=float)
    gap = float(merge_heights(to_points(theta))[0])
    dist = np.abs(2.0 * np.sin(wrap(theta - theta[0]) / 2.0))
    L = int(np.flatnonzero(dist > gap / 2.0)[0])
    phi0 = float(abs(wrap(theta[L] - theta[0])))
    phi1 = 2.0 * np.arcsin(tol / 2.0)
    m = float(L)
    # 1/|dphi/dt| = e^{beta (1 - cos phi)} / (m sin phi) + 1 / sin phi; the first term scaled by
    # its value at phi0 so that quad sees numbers of size <= 1
    s0 = beta * (1.0 - np.cos(phi0))
    big, _ = quad(lambda p: np.exp(beta * (1.0 - np.cos(p)) - s0) / (m * np.sin(p)), phi1, phi0,
                  epsabs=0.0, epsrel=1e-12, limit=200, points=_inner(phi1, phi0 - 10.0 / (beta * np.sin(phi0)), phi0))
    small = np.log(np.tan(phi0 / 2.0) / np.tan(phi1 / 2.0))  # int dphi / sin phi
    return float(np.exp(s0) * big + small), L, phi0


def _inner(lo, p, hi):
    """``[p]`` when lo < p < hi (a break point for quad near the integrand's peak), else None."""
    return [p] if lo < p < hi else None
