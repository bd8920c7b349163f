r"""Closed-form and scalar-ODE predictions of the theory.

* :func:`equiangular_rho` -- the common inner product rho(t) of GLPR's equiangular solution
  (GLPR Theorem 6.8, eqs. 6.9-6.10) for (SA) and (USA).
* :func:`clustering_time` -- the time at which rho reaches 1 - eps (a quadrature of the same ODE).
* :func:`phase_boundary` -- for each t the largest beta with rho(t) >= 1 - eps (GLPR eq. 6.12).
* :func:`consensus_points` / :func:`predicted_consensus` -- the attractive consensus points
  (v, ..., v) of ICML Theorem 4.5 (causal attention, symmetric U): v is the unit eigenvector of
  the simple, positive top eigenvalue of U.
* :func:`critical_noise` / :func:`uniform_growth_rate` -- the noise below which the uniform density
  on the circle loses stability, for SA and USA (from :mod:`riemattn.analysis.meanfield`).

Derivation of the equiangular ODE (checked against GLPR eqs. 6.9-6.10)
--------------------------------------------------------------------------
Let the n points satisfy <x_i, x_j> = rho for all i != j (true for all t by permutation
equivariance if it holds at t = 0, GLPR Thm 6.8). For (SA) every point has the same partition
function Z = e^beta + (n - 1) e^{beta rho} and drive f_1 = (e^beta x_1 + e^{beta rho} sum_{j>1} x_j)/Z,
so <f_1, x_1> = (e^beta + (n-1) rho e^{beta rho})/Z and <f_1, x_2> = (e^beta rho + e^{beta rho}(1 + (n-2) rho))/Z.
With xdot_1 = f_1 - <f_1, x_1> x_1 and d/dt <x_1, x_2> = 2 <xdot_1, x_2> (symmetry),

.. math::

    \dot\rho = \frac{2 e^{\beta\rho}}{Z}\bigl(1 + (n-2)\rho - (n-1)\rho^2\bigr)
             = \frac{2 e^{\beta\rho}(1-\rho)((n-1)\rho + 1)}{e^{\beta} + (n-1) e^{\beta\rho}} .

For (USA) Z is replaced by n: :math:`\dot\rho = (2/n) e^{\beta\rho}(1-\rho)((n-1)\rho+1)`.
Rescaled USA (``rescaled=True``; e^{-beta} times the field, the same trajectories in the time
s = e^beta t): :math:`d\rho/ds = (2/n) e^{-\beta(1-\rho)}(1-\rho)((n-1)\rho+1)`, finite at every beta;
times are then rescaled times s. SA is finite at every beta as it is (``rescaled`` is refused there).
The code integrates the equivalent equation for u = 1 - rho (so rho close to 1 keeps full relative
precision) and writes the (SA) rate as ``2 (1-rho)((n-1)rho+1) / (e^{beta(1-rho)} + n - 1)`` (no
overflow for large beta).

References
----------
Geshkovski, Letrouit, Polyanskiy, Rigollet, "A mathematical perspective on Transformers",
Theorem 6.8 (eqs. 6.9, 6.10) and section 6.3 (eq. 6.12, Figure 3).
Rodriguez Abella, Silvestre, Tabuada, "Consensus is all you get", ICML 2025, Theorem 4.5
(= ARXIV Theorem 6.1).
"""

from __future__ import annotations

import numpy as np
from scipy import integrate as _spi
from scipy import optimize as _spo

from .._validation import (as_float_array, check_beta, check_choice, check_finite, check_int, check_positive,
                           check_real, check_rescaled)
from ..errors import ValidationError
from ._consensus import consensus_points, predicted_consensus
from .meanfield import critical_noise, uniform_growth_rate

__all__ = [
    "equiangular_rate",
    "equiangular_rho",
    "clustering_time",
    "phase_boundary",
    "consensus_points",
    "predicted_consensus",
    "critical_noise",
    "uniform_growth_rate",
]

MODELS = ("sa", "usa")


def _check_model(model, rescaled=False):
    """(model, rescaled): ``rescaled`` is for USA only (SA is finite at every beta as it is)."""
    model = check_choice(model, "model", MODELS)
    return model, check_rescaled(rescaled, None if model == "usa" else "model='sa'")


def _check_n(n) -> int:
    return check_int(n, "n", 2, " (number of particles)")


def _check_eps(eps) -> float:
    eps = check_real(eps, "eps")
    if not 0.0 < eps < 1.0:
        raise ValidationError(f"eps must be a number in (0, 1), got {eps!r}.")
    if not 1.0 - eps < 1.0:  # the integrals run to rho = 1 - eps: 1 - eps must differ from 1
        raise ValidationError(f"eps = {eps!r} is too small: 1 - eps rounds to 1 in float64 (eps must exceed "
                              "about 5.6e-17).")
    return float(eps)


def _check_times(t, name="t") -> np.ndarray:
    t = check_finite(as_float_array(t, name), name)
    if np.any(t < 0):
        raise ValidationError(f"{name} must be >= 0 (the ODE starts at rho(0) = 0), got min {float(t.min())!r}.")
    return t


def equiangular_rate(rho, beta: float, n: int, model: str = "sa", *, rescaled: bool = False):
    r"""Right-hand side of the equiangular ODE, :math:`\dot\rho = r(\rho)`.

    Parameters
    ----------
    rho : float or ndarray
        Common inner product(s), in [-1/(n-1), 1].
    beta : float
        Inverse temperature, >= 0.
    n : int
        Number of particles (GLPR's n; the token count l elsewhere in riemattn).
    model : {"sa", "usa"}
    rescaled : bool, default False
        ("usa" only) e^{-beta} times the USA rate, d rho/ds in the time s = e^beta t, finite at
        every beta. Plain USA where e^{beta rho} overflows raises ValidationError naming beta.

    Returns
    -------
    ndarray, same shape as ``rho``
        SA: ``2 (1 - rho)((n-1) rho + 1) / (e^{beta (1 - rho)} + n - 1)``;
        USA: ``(2/n) e^{beta rho} (1 - rho)((n-1) rho + 1)`` (rescaled: ``e^{-beta (1 - rho)}``).

    References
    ----------
    GLPR, Theorem 6.8, eqs. (6.9)-(6.10); derivation in this module's docstring.
    """
    beta = check_beta(beta)
    n = _check_n(n)
    model, rescaled = _check_model(model, rescaled)
    rho = check_finite(as_float_array(rho, "rho"), "rho")
    lo = -1.0 / (n - 1)
    if rho.size and (rho.min() < lo - RHO_TOL or rho.max() > 1.0 + RHO_TOL):
        raise ValidationError(
            f"rho must lie in [-1/(n-1), 1] = [{lo:.6g}, 1] (the common inner product of n = {n} unit "
            f"vectors), got values in [{float(rho.min()):.6g}, {float(rho.max()):.6g}]."
        )
    return _rate(rho, beta, n, model, rescaled)


#: Slack on the range [-1/(n-1), 1] of rho accepted by :func:`equiangular_rate`.
RHO_TOL = 1e-12


def _rate(rho, beta: float, n: int, model: str, rescaled: bool = False):
    """:func:`equiangular_rate` for checked arguments."""
    poly = (1.0 - rho) * ((n - 1) * rho + 1.0)
    with np.errstate(over="ignore"):  # SA: e^{beta (1 - rho)} = inf is a rate of 0
        if model == "sa":
            return 2.0 * poly / (np.exp(beta * (1.0 - rho)) + (n - 1))
        if rescaled:
            return (2.0 / n) * np.exp(-beta * (1.0 - rho)) * poly
        out = (2.0 / n) * np.exp(beta * rho) * poly
    if not np.all(np.isfinite(out)):
        raise ValidationError(f"USA's equiangular rate (2/n) e^(beta rho) (...) overflows at beta = {beta}; use "
                              "rescaled=True (the rate in the time s = e^beta t, finite at every beta).")
    return out


def _inv_rate(rho, beta: float, n: int, model: str, rescaled: bool):
    """1 / rate, written without overflow where it is finite; beyond the float range ValidationError."""
    poly = (1.0 - rho) * ((n - 1) * rho + 1.0)
    with np.errstate(over="ignore"):
        if model == "usa" and not rescaled:
            return 0.5 * n * np.exp(-beta * rho) / poly
        grow = np.exp(beta * (1.0 - rho))
        out = (grow + (n - 1)) / (2.0 * poly) if model == "sa" else 0.5 * n * grow / poly
    if not np.all(np.isfinite(out)):
        raise ValidationError(
            f"the clustering time at beta = {beta} (of size e^beta / (2 beta)"
            + (" in the rescaled time s = e^beta t" if rescaled else "")
            + ") exceeds the float range; smaller beta"
            + (", or model='usa' in the time t (rescaled=False)." if rescaled else ".")
        )
    return out


def equiangular_rho(t, beta: float, n: int, model: str = "sa", *, rtol: float = 1e-12, atol: float = 1e-15,
                    rescaled: bool = False):
    r"""Common pairwise inner product rho(t) of n initially orthogonal particles under (SA) or (USA).

    Solves the scalar ODE of GLPR Thm 6.8 (derived in the module docstring) with :func:`scipy.integrate.solve_ivp`
    (DOP853) at tight tolerance, for the gap u = 1 - rho, from rho(0) = 0.

    Parameters
    ----------
    t : float or array_like, any shape
        Times >= 0 (in any order; one ODE solve serves all of them).
    beta : float
        Inverse temperature beta >= 0.
    n : int
        Number of particles, >= 2 (the initial points need d >= n to be pairwise orthogonal).
    model : {"sa", "usa"}
        GLPR's self-attention (softmax) or unnormalized self-attention (1/n).
    rtol, atol : float
        Tolerances of the solver on u = 1 - rho (the absolute tolerance is on u, so rho near 1 is
        resolved to about ``rtol * (1 - rho) + atol``).
    rescaled : bool, default False
        ("usa" only) ``t`` is the time s = e^beta t of rescaled USA (``riemattn.usa(beta, d,
        rescaled=True)``): rho_rescaled(s) = rho(e^{-beta} s), finite at every beta. Plain USA
        raises ValidationError naming beta where its rate e^{beta rho} overflows (beta > ~709).

    Returns
    -------
    rho : float or ndarray, shape of ``t``

    Notes
    -----
    The ODE was re-derived from the symmetric configuration (module docstring)
    and agrees with GLPR eqs. (6.9)-(6.10). rho increases monotonically from 0 to 1.

    References
    ----------
    Geshkovski, Letrouit, Polyanskiy, Rigollet, "A mathematical perspective on Transformers",
    Theorem 6.8, eqs. (6.9)-(6.10).

    Examples
    --------
    At beta = 0 the ODE has the closed form rho = (e^{2t} - 1) / (e^{2t} + n - 1):

    >>> import numpy as np
    >>> from riemattn.analysis.theory import equiangular_rho
    >>> rho = equiangular_rho([0.0, 1.0], beta=0.0, n=4)
    >>> bool(np.allclose(rho, (np.exp([0.0, 2.0]) - 1) / (np.exp([0.0, 2.0]) + 3)))
    True
    """
    beta = check_beta(beta)
    n = _check_n(n)
    model, rescaled = _check_model(model, rescaled)
    t_arr = _check_times(t)
    rtol, atol = check_positive(rtol, "rtol"), check_positive(atol, "atol")
    flat = t_arr.ravel()
    if flat.size == 0:
        return t_arr.copy()
    t_max = float(flat.max())
    out = np.zeros_like(flat)
    if t_max > 0.0:
        uniq = np.unique(flat)

        def rhs(_, u):
            return -_rate(1.0 - u, beta, n, model, rescaled)

        sol = _spi.solve_ivp(rhs, (0.0, t_max), [1.0], method="DOP853", t_eval=uniq, rtol=rtol, atol=atol)
        if not sol.success:  # pragma: no cover - smooth scalar ODE
            raise RuntimeError(f"equiangular ODE solve failed: {sol.message}")
        out = 1.0 - sol.y[0][np.searchsorted(uniq, flat)]
    res = out.reshape(t_arr.shape)
    return float(res) if np.ndim(t) == 0 else res


def clustering_time(beta: float, n: int, eps: float = 1e-3, model: str = "sa", *, rescaled: bool = False) -> float:
    r"""Time T(beta) at which the equiangular rho(t) reaches 1 - eps.

    The equiangular ODE is autonomous and separable, so
    :math:`T(\beta) = \int_0^{1-\varepsilon} d\rho / r(\rho)` (adaptive quadrature,
    :func:`scipy.integrate.quad`); this is independent of the time stepping in
    :func:`equiangular_rho`.

    Parameters
    ----------
    beta : float
        Inverse temperature >= 0.
    n : int
        Number of particles >= 2.
    eps : float in (0, 1)
        Large enough that 1 - eps < 1 in float64 (eps > ~5.6e-17; ValidationError otherwise).
    model : {"sa", "usa"}
    rescaled : bool, default False
        ("usa" only) the time in s = e^beta t (e^beta times the plain one). SA, and rescaled USA,
        take of the order of e^beta / (2 beta): beyond the float range (beta > ~715) ValidationError
        names beta; plain USA (about n / (2 beta)) is finite at every beta.

    Returns
    -------
    float

    References
    ----------
    GLPR, Theorem 6.8 and section 6.3.
    """
    beta = check_beta(beta)
    n = _check_n(n)
    eps = _check_eps(eps)
    model, rescaled = _check_model(model, rescaled)
    return _clustering_time(beta, n, eps, model, rescaled)


def _clustering_time(beta, n, eps, model, rescaled):
    """:func:`clustering_time` for checked arguments."""

    def inv_rate(rho):
        return _inv_rate(rho, beta, n, model, rescaled)

    # The SA integrand grows like e^{beta (1 - rho)} near rho = 0: tell quad where the action is.
    pts = None
    if beta > 1.0 and 1.0 / beta < 1.0 - eps:
        pts = [1.0 / beta]
    val, _ = _spi.quad(inv_rate, 0.0, 1.0 - eps, epsabs=0.0, epsrel=1e-13, limit=400, points=pts)
    return float(val)


def phase_boundary(t, n: int, eps: float = 1e-3, model: str = "sa", *, beta_max: float = 500.0,
                   rescaled: bool = False):
    r"""Phase-transition curve of GLPR eq. (6.12): for each t the largest beta with rho(t) >= 1 - eps.

    Parameters
    ----------
    t : float or array_like, any shape
        Times >= 0.
    n : int
        Number of particles >= 2.
    eps : float in (0, 1), default 1e-3
        Large enough that 1 - eps < 1 in float64 (eps > ~5.6e-17; ValidationError otherwise).
    model : {"sa", "usa"}
    beta_max : float
        Upper end of the search interval.
    rescaled : bool, default False
        ("usa" only) ``t`` is the rescaled time s = e^beta t. There the clustering time
        e^beta T(beta) increases in beta, and the boundary is that of SA: the largest beta.

    Returns
    -------
    beta_star : float or ndarray, shape of ``t``
        SA: rho(t; beta) decreases in beta (the SA rate ``2(1-rho)((n-1)rho+1)/(e^{beta(1-rho)}+n-1)``
        decreases in beta for rho < 1), so {beta >= 0 : rho(t) >= 1 - eps} = [0, beta*(t)], and
        beta*(t) is the root of T(beta) = t (:func:`clustering_time`, found with
        :func:`scipy.optimize.brentq`). NaN where even beta = 0 has not clustered by time t;
        ``inf`` where beta_max still clusters.
        USA: rho(t; beta) *increases* in beta, the clustered set is [beta*(t), inf) and "the
        largest beta" does not exist; the function returns the boundary beta*(t) of that set
        (0 where beta = 0 already clusters, NaN where beta_max does not).

    References
    ----------
    Geshkovski, Letrouit, Polyanskiy, Rigollet, "A mathematical perspective on Transformers",
    section 6.3, eq. (6.12), Figure 3.
    """
    n = _check_n(n)
    eps = _check_eps(eps)
    model, rescaled = _check_model(model, rescaled)
    t_arr = _check_times(t)
    beta_max = check_beta(beta_max, "beta_max")
    T0 = _clustering_time(0.0, n, eps, model, rescaled)
    try:
        Tmax = _clustering_time(beta_max, n, eps, model, rescaled)
    except ValidationError as exc:  # the search interval's end: say which argument sets it
        raise ValidationError(f"beta_max = {beta_max!r} (the end of the search interval): {exc}") from None
    largest = model == "sa" or rescaled  # T(beta) increases: the clustered set is [0, beta*]
    flat = t_arr.ravel()
    out = np.empty_like(flat)
    for k, tk in enumerate(flat):
        if largest:
            if tk < T0:
                out[k] = np.nan
                continue
            if tk >= Tmax:
                out[k] = np.inf
                continue
        else:
            if tk >= T0:
                out[k] = 0.0
                continue
            if tk < Tmax:
                out[k] = np.nan
                continue
        out[k] = _spo.brentq(lambda b: _clustering_time(b, n, eps, model, rescaled) - tk, 0.0, beta_max,
                             xtol=1e-13, rtol=1e-13, maxiter=200)
    res = out.reshape(t_arr.shape)
    return float(res) if np.ndim(t) == 0 else res
