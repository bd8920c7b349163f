r"""Speed factors of the layer-norm placements and their equiangular reduction to an ODE for (rho, r).

For ``n`` tokens whose directions are equiangular, ``<theta_i, theta_j>_W = rho`` for ``i != j``,
with a common radius ``r`` (e.g. pairwise W-orthogonal initial tokens of equal radius), and the
attention of GLPR (``P = beta W``, ``U = I``, weights ``e^{beta <theta_i, theta_j>_W} / Z_i``),
every token sees the same numbers (with ``w_s`` the weight of itself and ``w`` of any other token)::

    c   = <theta_i, A_i>_W = w_s + (n - 1) w rho
    b   = <theta_j, A_i>_W = w_s rho + w (1 + (n - 2) rho)          (j != i)
    |A_i|_W^2 = w_s^2 + 2 (n - 1) w_s w rho + (n - 1) w^2 (1 + (n - 2) rho)
    g   = 2 (b - c rho) = 2 w (1 - rho)(1 + (n - 1) rho)

(softmax: ``w_s = e^beta / Z``, ``w = e^{beta rho} / Z``, ``Z = e^beta + (n - 1) e^{beta rho}``;
"paper": ``Z`` times ``sqrt(d)``; "mean": ``Z = n``). The configuration stays equiangular with a
common radius under every placement, and with the speed factor ``s`` of the placement
(:mod:`riemattn.dynamics.layernorm`)::

    rho' = s g,     post: s = 1, r' = 0          pre:  s = 1/r,        r' = c
                    ngpt: s = alpha/|A|, r' = 0   peri: s = 1/(r |A|),  r' = c/|A|
                    mix:  post for t < switch, then pre

At consensus (rho -> 1, softmax) ``g ~ 2 (1 - rho)`` and ``c, |A| -> 1``: Post-LN and nGPT close
the gap 1 - rho exponentially (rates 2 and 2 alpha), Pre-LN and Peri-LN, whose radius grows like t,
only like t^{-2}. Derivation: docs/theory/layernorm.md. This module shares no code with the
token simulation it is tested against.

References
----------
Karagodin, Ge, Polyanskiy, Rigollet, "Normalization in attention dynamics", NeurIPS 2025,
section 2 (speed factors); Geshkovski, Letrouit, Polyanskiy, Rigollet, "A mathematical perspective
on Transformers", Theorem 6.8 (the equiangular solution of Post-LN).
"""

from __future__ import annotations

import math

import numpy as np
import scipy.integrate as _spi

from .._validation import (as_float_array, check_beta, check_choice, check_finite, check_flag, check_int, check_positive,
                           check_real)
from ..errors import IntegrationError, ValidationError

__all__ = ["PLACEMENTS", "equiangular_attention", "equiangular_rates", "equiangular_placement"]

PLACEMENTS = ("post", "pre", "peri", "ngpt", "mix")
_NORMALIZATIONS = ("softmax", "paper", "mean")


def _weights(rho, beta, n, normalization, d):
    """(w_s, w): the attention weight of a token on itself and on each other token."""
    if normalization == "mean":
        return np.exp(beta) / n + 0.0 * rho, np.exp(beta * rho) / n
    e = np.exp(-beta * (1.0 - rho))  # e^{beta rho} / e^beta, no overflow at large beta
    scale = math.sqrt(d) if normalization == "paper" else 1.0
    w_self = 1.0 / (scale * (1.0 + (n - 1) * e))
    return w_self, e * w_self


def equiangular_attention(rho, beta: float, n: int, normalization: str = "softmax", d: int | None = None):
    r"""c = <theta_i, A_i>, g = 2 (<theta_j, A_i> - c rho) and |A_i| at an equiangular configuration.

    Parameters
    ----------
    rho : float or array_like
        Common inner product <theta_i, theta_j>_W (i != j), in [-1/(n-1), 1].
    beta : float >= 0
        Inverse temperature (P = beta W, U = I).
    n : int >= 2
        Number of tokens.
    normalization : {"softmax", "paper", "mean"}
        As :class:`~riemattn.dynamics.attention.AttentionField`'s.
    d : int, optional
        Dimension (needed for "paper", whose Z carries sqrt(d)).

    Returns
    -------
    c, g, norm_A : ndarray, each of the shape of ``rho``

    References
    ----------
    Karagodin, Ge, Polyanskiy, Rigollet, "Normalization in attention dynamics", NeurIPS 2025,
    section 2; formulas in this module's docstring.
    """
    beta = check_beta(beta)
    n = check_int(n, "n", 2)
    normalization = check_choice(normalization, "normalization", _NORMALIZATIONS)
    if d is not None:
        d = check_int(d, "d", 1)
    if normalization == "paper" and d is None:
        raise ValidationError("normalization='paper' needs d (its Z_i carries sqrt(d)).")
    rho = check_finite(as_float_array(rho, "rho"), "rho")
    lo = -1.0 / (n - 1)
    if rho.size and (rho.min() < lo - 1e-12 or rho.max() > 1.0 + 1e-12):
        raise ValidationError(f"rho must lie in [-1/(n-1), 1] = [{lo:.6g}, 1], got values in "
                              f"[{float(rho.min()):.6g}, {float(rho.max()):.6g}].")
    return _terms(rho, beta, n, normalization, d)


def _terms(rho, beta, n, normalization, d):
    ws, w = _weights(rho, beta, n, normalization, d)
    c = ws + (n - 1) * w * rho
    g = 2.0 * w * (1.0 - rho) * (1.0 + (n - 1) * rho)
    norm2 = ws * ws + 2.0 * (n - 1) * ws * w * rho + (n - 1) * w * w * (1.0 + (n - 2) * rho)
    return c, g, np.sqrt(np.maximum(norm2, 0.0))


def equiangular_rates(rho, r, beta: float, n: int, placement: str, *, normalization: str = "softmax",
                      d: int | None = None, alpha: float = 1.0, late: bool = False):
    r"""(rho', r') of the equiangular reduction under ``placement``.

    ``late`` picks Mix-LN's phase (False: Post-LN, before the switch; True: Pre-LN).
    Parameters otherwise as :func:`equiangular_placement`; returns two arrays of the shape of
    ``rho`` and ``r`` broadcast. Formulas: module docstring.
    """
    placement = check_choice(placement, "placement", PLACEMENTS)
    c, g, a = equiangular_attention(rho, beta, n, normalization, d)
    r = check_finite(as_float_array(r, "r"), "r")
    alpha, late = check_real(alpha, "alpha"), check_flag(late, "late")
    return _rates(c, g, a, r, placement, alpha, late)


def _rates(c, g, a, r, placement, alpha, late):
    if placement == "mix":
        placement = "pre" if late else "post"
    zero = 0.0 * (c + r)
    if placement == "post":
        return g + zero, zero
    if placement == "ngpt":
        return alpha * g / a + zero, zero
    if placement == "pre":
        return g / r, c + zero
    return g / (r * a), c / a + zero  # peri


def equiangular_placement(t, beta: float, n: int, placement: str, *, normalization: str = "softmax",
                          d: int | None = None, alpha: float | None = None, switch: float | None = None,
                          rho0: float = 0.0, r0: float = 1.0, rtol: float = 1e-12, atol: float = 1e-15):
    r"""rho(t) and r(t) of n equiangular tokens under a placement of the layer norm.

    Solves the ODE of the module docstring for the gap u = 1 - rho and the radius r with SciPy's
    DOP853 at tight tolerance.

    Parameters
    ----------
    t : float or array_like
        Times >= 0.
    beta, n, normalization, d :
        As :func:`equiangular_attention`.
    placement : {"post", "pre", "peri", "ngpt", "mix"}
    alpha : float, optional
        nGPT's factor (default 1).
    switch : float
        Mix-LN's switching time (required for "mix").
    rho0, r0 : float
        Initial common inner product (0: pairwise orthogonal tokens) and radius.
    rtol, atol : float
        Tolerances of the solver (atol on u and, times r0, on r).

    Returns
    -------
    rho, r : ndarray of the shape of ``t`` (floats for a float ``t``)

    References
    ----------
    Karagodin, Ge, Polyanskiy, Rigollet, "Normalization in attention dynamics", NeurIPS 2025,
    section 2; GLPR Theorem 6.8 (post).

    Examples
    --------
    Pre-LN at beta = 0: r' = c = 1/n + (1 - 1/n) rho, so r grows, and rho trails Post-LN's:

    >>> from riemattn.analysis.speeds import equiangular_placement
    >>> rho_post, _ = equiangular_placement(1.0, 0.0, 4, "post")
    >>> rho_pre, r_pre = equiangular_placement(1.0, 0.0, 4, "pre")
    >>> bool(rho_pre < rho_post and r_pre > 1.0)
    True
    """
    beta = check_beta(beta)
    n = check_int(n, "n", 2)
    placement = check_choice(placement, "placement", PLACEMENTS)
    normalization = check_choice(normalization, "normalization", _NORMALIZATIONS)
    rho0 = check_real(rho0, "rho0")
    if not -1.0 / (n - 1) <= rho0 <= 1.0:
        raise ValidationError(f"rho0 must be in [-1/(n-1), 1] = [{-1.0 / (n - 1):.6g}, 1], got {rho0!r}.")
    equiangular_attention(rho0, beta, n, normalization, d)  # checks rho0's range, d
    rtol, atol = check_positive(rtol, "rtol"), check_positive(atol, "atol")
    alpha = 1.0 if alpha is None else check_real(alpha, "alpha")
    r0 = check_real(r0, "r0")
    if r0 <= 0:
        raise ValidationError(f"r0 must be > 0, got {r0!r}.")
    if switch is not None:
        switch = check_real(switch, "switch")
    if placement == "mix" and switch is None:
        raise ValidationError("placement='mix' needs switch.")
    t_arr = check_finite(as_float_array(t, "t"), "t")
    if t_arr.size and t_arr.min() < 0:
        raise ValidationError(f"t must be >= 0, got min {float(t_arr.min())}.")
    flat = t_arr.ravel()
    rho_out, r_out = np.full(flat.shape, float(rho0)), np.full(flat.shape, r0)
    uniq = np.unique(flat[flat > 0])

    def rhs(late):
        def f(_, z):
            rho = 1.0 - z[0]
            c, g, a = _terms(rho, beta, n, normalization, d)
            drho, dr = _rates(c, g, a, z[1], placement, alpha, late)
            return [-drho, dr]
        return f

    pieces = [(0.0, np.inf, False)]
    if placement == "mix":
        pieces = [(0.0, max(switch, 0.0), False), (max(switch, 0.0), np.inf, True)]
    z = np.array([1.0 - rho0, r0])
    for lo, hi, late in pieces:
        inside = uniq[(uniq > lo) & (uniq <= hi)]
        end = min(hi, float(uniq.max())) if uniq.size else lo  # a piece ends at the switch or the last time
        if end <= lo:
            continue
        t_eval = np.union1d(inside, [end])
        sol = _spi.solve_ivp(rhs(late), (lo, end), z, method="DOP853", t_eval=t_eval,
                             rtol=rtol, atol=[atol, atol * r0])
        if not sol.success:  # a smooth ODE: the tolerances (atol * r0 on r, e.g. r0 = 1e-300) are out of reach
            raise IntegrationError(f"the equiangular ODE solve failed on ({lo}, {end}): {sol.message} "
                                   f"(rtol = {rtol!r}, atol = {atol!r}, r0 = {r0!r}: the tolerance on r is "
                                   f"atol * r0 = {atol * r0!r}); larger tolerances or r0.")
        z = sol.y[:, -1].copy()
        at = np.searchsorted(t_eval, flat)
        hit = (flat > lo) & (flat <= hi)
        rho_out[hit] = 1.0 - sol.y[0, at[hit]]
        r_out[hit] = sol.y[1, at[hit]]
    rho_res, r_res = rho_out.reshape(t_arr.shape), r_out.reshape(t_arr.shape)
    if np.ndim(t) == 0:
        return float(rho_res), float(r_res)
    return rho_res, r_res
