"""GLPR's interaction energy E_beta and its SA metric weights, plain, rescaled and in log form.

Private module of :mod:`riemattn.analysis.gradients` (which re-exports :func:`energy` and
:func:`energy_weights`; their documented home is there). With G_ij = <x_i, x_j>::

    E_beta(x)            = 1/(2 beta n^2) sum_{i,j} exp(beta G_ij)                (GLPR eq. 3.5)
    e^{-beta} E_beta(x)  = 1/(2 beta n^2) sum_{i,j} exp(beta (G_ij - 1))          (rescaled=True)
    log E_beta(x)        = beta + log sum_{i,j} exp(beta (G_ij - 1)) - log(2 beta n^2)   (log=True)

The rescaled exponents beta (G_ij - 1) are those of the rescaled attention field (defined, with
their rounding rule, in :mod:`riemattn.dynamics._softmax`): on the unit sphere they are <= 0, so
the rescaled energy lies in (0, 1/(2 beta)] and its log is finite at every beta > 0. Rescaled
USA is n times the gradient of the rescaled energy, as USA is of E_beta (GLPR eq. 3.11).
Everything is written with autograd.numpy (or torch for tensors), so it can be differentiated.
"""

from __future__ import annotations

import autograd.numpy as anp
import numpy as np
from autograd.tracer import isbox

from .._backend import to_numpy
from .._validation import check_beta, check_flag, check_rescaled, check_token_array
from ..dynamics._softmax import RESCALED_ROUNDING
from ..errors import InputTypeError, ValidationError
from ._pairs import FLUSH_BOUND, chunked, flush, ops, pair_logsumexp, pair_sum, row_sums

__all__ = ["energy", "energy_weights", "kernel_exponent"]


def _setup(x, beta, rescaled):
    beta = check_beta(beta)
    check_rescaled(rescaled)
    if not isbox(x):
        x = check_token_array(x, "x", allow_d0=True)
    return beta, x, x.shape[-2]


def _max_square(x) -> float:
    """max_{i,j} <x_i, x_j> = max_i |x_i|^2 (Cauchy-Schwarz; attained at i = j), in O(l) memory."""
    return float(np.max(np.sum(to_numpy(x) ** 2, axis=-1)))


def kernel_exponent(G, beta: float, rescaled: bool, xp=anp):
    """beta G_ij, or with ``rescaled`` beta (G_ij - 1) with the rounding rule of
    :mod:`riemattn.dynamics._softmax` (|G_ij - 1| <= RESCALED_ROUNDING gives exactly 0)."""
    if not rescaled:
        return beta * G
    D = G - 1.0
    with np.errstate(over="ignore"):  # -inf: a weight of 0
        if type(D) is np.ndarray:  # in place (the same values): fewer temporaries per tile
            zero = np.abs(D) <= RESCALED_ROUNDING
            D *= beta
            D[zero] = 0.0
            return D
        return xp.where(xp.abs(D) <= RESCALED_ROUNDING, 0.0 * D, beta * D)


def energy(x, beta, *, centered: bool = False, rescaled: bool = False, log: bool = False):
    """GLPR's interaction energy E_beta(x) = 1/(2 beta n^2) sum_{i,j} exp(beta <x_i, x_j>).

    Parameters
    ----------
    x : array_like, shape (..., n, d)
        Particles (on the sphere for the dynamics; any points are accepted).
    beta : float, >= 0
    centered : bool, default False
        Return E_beta - 1/(2 beta) = 1/(2 beta n^2) sum_{i,j} expm1(beta <x_i, x_j>) instead, which is
        continuous at beta = 0. Both have the same gradient.
    rescaled : bool, default False
        Return e^{-beta} times the energy, 1/(2 beta n^2) sum_{i,j} exp(beta (<x_i, x_j> - 1)): the
        energy of the rescaled USA (``riemattn.usa(beta, d, rescaled=True)`` is n times its
        gradient), finite at every beta for points on the sphere (in (0, 1/(2 beta)]).
    log : bool, default False
        Return the natural log of the (plain or rescaled) energy, computed from the rescaled sum
        (finite at every beta > 0 on the sphere; ``log E_beta = beta + log(e^{-beta} E_beta)``).

    Returns
    -------
    ndarray, shape (...)

    Notes
    -----
    E_beta diverges like 1/(2 beta) as beta -> 0; ``beta = 0`` returns the limit of the centered
    energy, E_0 = 1/(2 n^2) sum_{i,j} <x_i, x_j> = |mean of x|^2 / 2 (the Kuramoto energy on the
    circle), whatever ``centered`` and ``rescaled`` are (e^0 = 1); ``log`` at beta = 0 and ``log``
    with ``centered`` raise (infinite / possibly negative). Written with autograd.numpy, so it can
    be differentiated. Overflow of the plain energy (beta <x_i, x_j> > ~709) raises
    ValidationError naming beta and pointing to ``rescaled`` and ``log``.

    Memory: the double sum runs over tiles of 256 x 256 pairs (``riemattn.analysis._pairs``; the
    tiles on and above the diagonal, those above counted twice; ``log`` by an online log-sum-exp),
    so no n x n array is formed: O(n) memory, 10^5 tokens on S^2 in a few MB. Up to 256 tokens the
    one tile is the whole matrix; beyond, the values differ from one n x n sum by rounding only, and
    a configuration gives the same bits alone or in a batch.

    References
    ----------
    GLPR (Geshkovski, Letrouit, Polyanskiy, Rigollet), eq. (3.5), Remark 3.8, eq. (7.4).
    """
    beta, x, n = _setup(x, beta, rescaled)
    centered = check_flag(centered, "centered")
    if not isinstance(log, (bool, np.bool_)):
        raise InputTypeError(f"log must be True or False, got {type(log).__name__}.")
    if log and (centered or beta == 0.0):
        raise ValidationError("energy(log=True) needs beta > 0 and centered=False: E_beta - 1/(2 beta) may be "
                              f"<= 0 and E_beta = +inf at beta = 0 (got beta = {beta}, centered={centered}).")
    xp = ops(x)
    if beta == 0.0:  # sum_{i,j} <x_i, x_j> = |sum_i x_i|^2: O(l d)
        m = xp.sum(x, axis=-2)
        return xp.sum(m * m, axis=-1) / (2.0 * n * n)
    if log:
        lse = chunked(lambda a: pair_logsumexp(a, a, lambda G: kernel_exponent(G, beta, True, ops(G))), x)
        return lse - np.log(2.0 * n * n) - np.log(beta) + (0.0 if rescaled else beta)

    def terms(G, drop=True):
        S = kernel_exponent(G, beta, rescaled, ops(G))
        S = flush(S) if drop else S
        if centered:
            return (ops(G).exp(S) - np.exp(-beta)) if rescaled else ops(G).expm1(S)
        return ops(G).exp(S)

    with np.errstate(over="ignore"):
        total = chunked(lambda a: pair_sum(a, a, terms), x)
        if type(total) is np.ndarray and np.any(np.abs(total) < n * n * FLUSH_BOUND):  # (see _pairs.flush)
            total = chunked(lambda a: pair_sum(a, a, lambda G: terms(G, False)), x)
        out = total / (2.0 * n * n) / beta  # (2 beta n^2 may overflow)
    if not isbox(out) and not bool(xp.all(xp.isfinite(out))):
        raise ValidationError(
            f"energy overflowed at beta = {beta}: beta <x_i, x_j> reaches {beta * _max_square(x):.4g}; "
            "use rescaled=True (e^-beta E_beta) or log=True (log E_beta)."
        )
    return out


def energy_weights(x, beta, *, rescaled: bool = False) -> np.ndarray:
    """Per-particle weights Z_{beta,i}(x)/n^2 of the metric in which (SA) is the gradient of E_beta.

    Derivation (GLPR section 3.4, eq. 3.12). dE_beta/dx_i = (1/n^2) sum_j e^{beta <x_i,x_j>} x_j
    (the 1/2 cancels the two equal halves of the double sum, beta cancels 1/beta). In the metric
    <a, b>_x = sum_i c_i(x) <a_i, b_i> on (S^(d-1))^n the gradient is P^perp_{x_i}(dE/dx_i) / c_i,
    which equals (SA)'s right-hand side P^perp_{x_i}((1/Z_i) sum_j e^{beta <x_i,x_j>} x_j) iff

        c_i = Z_{beta,i} / n^2,       Z_{beta,i} = sum_j exp(beta <x_i, x_j>).

    GLPR's eq. (3.12) uses the weights Z_{beta,i}/n, with which SA = n grad E_beta -- the same factor n
    as USA = n grad E_beta for the standard metric (c_i = 1, GLPR eq. 3.11). At beta = 0,
    Z_{0,i} = n and c_i = 1/n (SA = USA = n grad E_0).

    Parameters
    ----------
    x : array_like, shape (..., n, d)
    beta : float, >= 0
    rescaled : bool, default False
        e^{-beta} times the weights (finite at every beta on the sphere): with them SA is the
        gradient of the rescaled energy (``energy(x, beta, rescaled=True)``), the same field.

    Returns
    -------
    ndarray, shape (..., n)
        Row sums over tiles of 256 columns: O(n) memory.

    References
    ----------
    GLPR, section 3.4.1, eq. (3.12); Remark 3.8, eq. (3.11).
    """
    beta, x, n = _setup(x, beta, rescaled)
    xp = ops(x)
    with np.errstate(over="ignore"):
        Z = chunked(lambda a: row_sums(a, a, lambda G: ops(G).exp(flush(kernel_exponent(G, beta, rescaled, ops(G))))), x)
        if type(Z) is np.ndarray and np.any(Z < n * FLUSH_BOUND):  # (see _pairs.flush)
            Z = chunked(lambda a: row_sums(a, a, lambda G: ops(G).exp(kernel_exponent(G, beta, rescaled, ops(G)))), x)
        c = Z / (n * n)
    if not isbox(c) and not bool(xp.all(xp.isfinite(c))):
        raise ValidationError(
            f"energy_weights overflowed at beta = {beta}: exp(beta <x_i, x_j>) exceeds the float range; "
            "use rescaled=True."
        )
    return c


energy.__module__ = energy_weights.__module__ = "riemattn.analysis.gradients"  # documented there
