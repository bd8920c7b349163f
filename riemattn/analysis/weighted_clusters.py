"""The low-temperature reduction: clusters of coincident particles as weighted particles.

Rescaled USA on the circle (docs/low_temperature.md; GLPR eq. 7.1 times e^{-beta}) for k clusters
at angles theta_c with w_c particles each (sum w_c = n), the exact dynamics of n particles on the
invariant set where each cluster's particles coincide::

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

:func:`cluster_staircase` runs particles to one cluster this way, one terminal merge event per
cluster count; :class:`WeightedClusterField` is the field; :func:`normalised_energy` the energy
(1/n^2) sum_{c,e} w_c w_e e^{beta (cos - 1)} = 2 beta e^{-beta} E_beta. The reproduction
``meta-staircase`` uses them (docs/low_temperature.md, "The energy staircase").

References
----------
B. Geshkovski, H. Koubbi, Y. Polyanskiy, P. Rigollet, "Dynamic metastability in the self-attention
model", arXiv 2410.06833 (2024). Geshkovski, Letrouit, Polyanskiy, Rigollet, "A mathematical
perspective on Transformers", eq. (7.1).
"""

from __future__ import annotations

import numpy as np

from .._backend import use_device
from .._validation import as_float_array, check_beta, check_finite, check_int, check_positive
from ..dynamics.fields import Field
from ..errors import IntegrationError, ValidationError
from ..geometry.manifolds import Euclidean
from ..solvers.core.events import Event
from ..solvers.core.integrate import integrate
from .events import merge_heights

__all__ = ["WeightedClusterField", "cluster_staircase", "normalised_energy"]


def normalised_energy(theta, w, beta: float, n: int):
    """(1/n^2) sum_{c,e} w_c w_e e^{beta (cos(theta_c - theta_e) - 1)} = 2 beta e^{-beta} E_beta, shape (...)."""
    theta = check_finite(as_float_array(theta, "theta"), "theta")
    if theta.ndim < 1 or theta.shape[-1] < 1:
        raise ValidationError(f"theta must have shape (..., k) with k >= 1 angles, got shape {theta.shape}.")
    w = _weights(w, "w", theta.shape[-1])
    beta = check_beta(beta)
    n = _total(n)
    d = theta[..., None, :] - theta[..., :, None]
    return np.einsum("...ij,i,j->...", np.exp(beta * (np.cos(d) - 1.0)), w, w) / n**2


def _weights(w, name, k=None):
    """Positive finite weights, shape (k,) (any k >= 1 when k is None)."""
    w = check_finite(as_float_array(w, name), name)
    if w.ndim != 1 or w.shape[0] < 1 or (k is not None and w.shape[0] != k) or np.any(w <= 0):
        want = "k >= 1" if k is None else f"{k} (one per angle of theta)"
        raise ValidationError(f"{name} must be a 1-D array of {want} positive numbers (particles per cluster), "
                              f"got shape {w.shape}.")
    if not np.isfinite(float(np.sum(w)) * float(np.sum(w))):
        raise ValidationError(f"{name} is too large: (sum {name})^2 overflows (got sum {float(np.sum(w)):.3g}).")
    return w


def _total(n):
    """The particle count n > 0 (a real: the total weight) with n^2 finite."""
    n = check_positive(n, "n")
    if not np.isfinite(n * n):
        raise ValidationError(f"n is too large: n^2 overflows (got {n:.3g}).")
    return n


def _cross(theta, w, beta):
    d = theta[..., None, :] - theta[..., :, None]
    K = np.exp(beta * (np.cos(d) - 1.0))
    off = np.outer(w, w) * (1.0 - np.eye(len(w)))  # the diagonal left out: no cancellation
    return K, d, np.einsum("...ij,ij->...", K, off)


class WeightedClusterField(Field):
    """The weighted-cluster dynamics on the clock sigma (module docstring), a riemattn Field.

    State (..., k + 2, 1) on ``Euclidean(1)``: rows the k cluster angles theta_c, then r (with
    s = s_0 + r / c0) and tau (the arclength of the n-particle path), all as functions of sigma.

    Parameters
    ----------
    beta : float
        Inverse temperature (rescaled USA: any beta, e.g. 1000-4000).
    w : array_like, shape (k,)
        Particles per cluster (positive; sum n).
    n : float
        Number of particles, the total weight sum(w) (> 0; a real number: weights need not be integers).
    c0 : float
        The cross energy c at the start (the clock's unit: r' = c0 / c).
    """

    manifold = Euclidean(1)
    autonomous = True

    def __init__(self, beta: float, w, n: int, c0: float):
        self.beta, self.w = check_beta(beta), _weights(w, "w")
        self.n, self.c0 = _total(n), check_positive(c0, "c0")

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


def cluster_staircase(theta0, beta: float, *, tol: float = 1e-6, stepper: str = "dopri5", rtol: float = 1e-10,
                      atol: float = 1e-12, weights=None, max_steps: int = 100_000):
    """Rescaled USA on the circle run to one cluster through the weighted-cluster reduction.

    The particles (angles ``theta0``, ``weights`` particles each, default 1) are integrated as
    weighted particles on the clock sigma (:class:`WeightedClusterField`) with
    :func:`riemattn.integrate` and a terminal event per merge: the single-linkage merge height
    (:func:`riemattn.analysis.events.merge_heights`) of the k clusters falling to ``tol``. At the
    event the two closest clusters become one particle of the summed weight at their weighted
    centroid (conserved by the flow) and the integration continues with k - 1 clusters. The
    merges are thus placed by events in the rescaled time s = e^beta t (no ``saveat`` to tune),
    at any beta: the last merge of the published 5-particle configuration at beta = 4000 comes
    at s ~ 1e132, beyond any step in s.

    Parameters
    ----------
    theta0 : array_like, shape (n,)
        Initial angles (sorted internally; n >= 2, finite, within one half-turn for the
        single-linkage order of neighbours on the line: max - min < pi, else ValidationError).
    beta : float
        Inverse temperature, > 0.
    tol : float, default 1e-6
        The gap at which two clusters merge.
    stepper, rtol, atol :
        Passed to :func:`riemattn.integrate` (in sigma every rate is O(1): ``"dopri5"``).
    weights : array_like, shape (n,), optional
        Particles per initial cluster (positive); default one each.
    max_steps : int, default 100_000
        Steps of each merge's integration (:func:`riemattn.integrate`'s ``max_steps``): the work
        is at most ``(n - 1) * max_steps`` steps, whatever ``rtol`` and ``atol`` (beyond it
        IntegrationError).

    Returns
    -------
    merges : list of dict
        One per merge, in order: ``s`` (rescaled time), ``tau`` (arclength), ``w_a``, ``w_b``
        (the weights merged), ``energy`` (the normalised energy just before the merge). Clusters
        already within ``tol`` when a stage starts (gaps closing together) merge at once, at the
        same s.
    path : dict
        Arrays over the accepted steps: ``s``, ``tau``, ``energy`` (:func:`normalised_energy`),
        and ``steps`` (their number).

    Raises
    ------
    ValidationError
        For bad arguments (named).
    IntegrationError
        When a merge does not come by sigma = 1e4.

    References
    ----------
    Geshkovski, Koubbi, Polyanskiy, Rigollet, "Dynamic metastability in the self-attention
    model", arXiv 2410.06833 (2024), the staircase; GLPR eq. (7.1).
    """
    theta = check_finite(as_float_array(theta0, "theta0"), "theta0")
    if theta.ndim != 1 or theta.shape[0] < 2:
        raise ValidationError(f"theta0 must be a 1-D array of n >= 2 angles, got shape {theta.shape}.")
    if not np.ptp(theta) < np.pi:  # the documented precondition: neighbours on the line are those on the circle
        raise ValidationError(f"theta0 must lie within one half-turn (max - min < pi), got a spread of "
                              f"{float(np.ptp(theta))!r}.")
    beta = check_positive(beta, "beta")
    max_steps = check_int(max_steps, "max_steps", 1)
    tol = check_positive(tol, "tol")
    n0 = theta.shape[0]
    w = np.ones(n0) if weights is None else _weights(weights, "weights", n0)
    order = np.argsort(theta)
    theta, w = theta[order], w[order]
    n = float(w.sum())
    s0 = tau0 = 0.0
    merges, S, T, E = [], [], [], []
    steps = 0
    # a gap is already merged (two gaps closing together) within the accuracy the last merge event
    # left its own gap at tol: twice its excess over tol, at least 1e-9 tol (measured: that excess
    # is 1.1e-9 tol and the twin gap differs from it by 2e-13 tol with AVX2 kernels)
    slack = 1e-9 * tol
    while len(theta) > 1:
        k = len(theta)
        a = int(np.argmin(np.diff(theta)))
        if theta[a + 1] - theta[a] <= tol + slack:  # already merged (e.g. two equal gaps closing together)
            merges.append({"s": s0, "tau": tau0, "w_a": w[a], "w_b": w[a + 1],
                           "energy": float(normalised_energy(theta, w, beta, n))})
            theta, w = _merge(theta, w, a)
            continue
        c0 = float(_cross(theta, w, beta)[2]) / n**2
        if not c0 > 0:
            raise ValidationError(f"the cross energy of the clusters underflows to 0 at beta = {beta} (gaps "
                                  f"{np.diff(theta).min():.3g} and more): beta is too large for theta0.")
        field = WeightedClusterField(beta, w, n, c0)
        event = Event(lambda t, y, k=k: merge_heights(y[..., :-2, :])[..., k - 2] - tol, direction=-1,
                      terminal=True, name=f"merge_to_{k - 1}")
        try:
            with use_device("cpu"):  # ClusterClock is NumPy code: on the host whatever `reproduce --device` says
                sol = integrate(field, np.concatenate([theta, [0.0, tau0]])[:, None], (0.0, 1e4), stepper,
                                rtol=rtol, atol=atol, events=[event], event_tol=1e-12, max_steps=max_steps,
                                raise_on_failure=True)
        except IntegrationError as exc:  # say which arguments set the work
            raise IntegrationError(f"the merge to {k - 1} clusters did not come within max_steps = {max_steps} "
                                   f"(rtol = {rtol!r}, atol = {atol!r}): {exc}") from None
        if not sol.events.t.shape[-1]:
            raise IntegrationError(f"no merge by sigma = 1e4 at beta = {beta} ({k} clusters): check theta0 "
                                   "(angles of moderate size), beta, and the integration tolerances rtol, atol.")
        steps += int(sol.n_steps)
        Y = sol.y[..., 0]
        S.append(s0 + Y[:, -2] / c0)
        T.append(Y[:, -1])
        E.append(normalised_energy(Y[:, :-2], w, beta, n))
        th, r, tau = Y[-1, :-2], Y[-1, -2], Y[-1, -1]
        a = int(np.argmin(np.diff(th)))
        slack = max(1e-9 * tol, 2.0 * abs(float(th[a + 1] - th[a]) - tol))
        merges.append({"s": s0 + r / c0, "tau": tau, "w_a": w[a], "w_b": w[a + 1],
                       "energy": float(E[-1][-1])})
        theta, w = _merge(th, w, a)
        s0, tau0 = merges[-1]["s"], tau
    if not S:  # every gap within tol at the start: all merges at s = 0, no step taken
        S = T = E = [np.zeros(0)]
    path = {"s": np.concatenate(S), "tau": np.concatenate(T), "energy": np.concatenate(E), "steps": steps}
    return merges, path


def _merge(theta, w, a: int):
    """Clusters a and a + 1 as one particle of the summed weight at their weighted centroid."""
    centre = (w[a] * theta[a] + w[a + 1] * theta[a + 1]) / (w[a] + w[a + 1])  # conserved by the flow
    return (np.concatenate([theta[:a], [centre], theta[a + 2:]]),
            np.concatenate([w[:a], [w[a] + w[a + 1]], w[a + 2:]]))
