"""The circle field through Fourier moments: O(n K) instead of O(n^2) (``CircleField(evaluation="fourier")``).

Private module of :mod:`riemattn.dynamics.circle` (documented there and in docs/manifolds.md).

The generating function of the modified Bessel functions I_k,

    e^{beta cos D} = I_0(beta) + 2 sum_{k>=1} I_k(beta) cos(k D),

differentiated in D (d/dD e^{beta cos D} = -beta sin D e^{beta cos D}) gives

    e^{beta cos D} sin D = (2 / beta) sum_{k>=1} k I_k(beta) sin(k D)

(at beta = 0 the limit: sin D, the k = 1 term with 2 k I_k(beta) / beta -> 1). With the moments
M_k = sum_j e^{i k theta_j} (prefix sums over j <= i under the causal mask),

    sum_j sin(k (theta_j - theta_i)) = Im(e^{-i k theta_i} M_k),
    sum_j cos(k (theta_j - theta_i)) = Re(e^{-i k theta_i} M_k),

so the numerator sum_j e^{beta cos(theta_j - theta_i)} sin(theta_j - theta_i) of GLPR eq. (7.1) and
SA's normaliser Z_i = sum_j e^{beta cos(theta_j - theta_i)} = n_i I_0 + 2 sum_k I_k Re(...) (n_i the
terms of row i) cost O(n K) for K modes. The series is cut at K; every Bessel function is used as
e^{-beta} I_k(beta) (``scipy.special.ive``), times e^{beta} for plain USA.

Truncation bound. From the power series I_k(x) = (x/2)^k sum_m (x^2/4)^m / (m! (m + k)!) and
1/(m + k + 1)! <= 1/((k + 1) (m + k)!), termwise I_{k+1}(x) <= x / (2 (k + 1)) I_k(x). For
K >= beta every later ratio is at most rho = beta / (2 (K + 1)) <= 1/2, so

    sum_{k>K} k I_k <= I_K sum_{m>=1} (K + m) rho^m <= (K + 2) I_K,    sum_{k>K} I_k <= I_K,

and with |sum_j sin(...)| <= n_i, |sum_j cos(...)| <= n_i the truncation error of the numerator
divided by n_i is at most (2 / beta) (K + 2) I_K(beta), that of Z_i / n_i at most 2 I_K(beta).
:func:`modes` takes the least K >= max(1, ceil(beta)) at which both are at most eps e^beta (eps the
float64 spacing at 1): below the rounding of the largest weight e^beta that the direct sum itself
carries: K = 25 at beta = 5, 36 at beta = 14, 61 at beta = 50, and ceil(beta) from beta ~ 100 on (the
bound needs K >= beta), so the Fourier sums pay off for n well above beta.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import special

from ..errors import ValidationError

__all__ = ["modes", "truncation_bound", "fourier_field"]

_EPS = float(np.finfo(float).eps)


def truncation_bound(beta: float, K: int) -> tuple[float, float]:
    """(numerator, normaliser) truncation bounds per term, relative to e^beta (module docstring)."""
    if beta == 0.0:
        return 0.0, 0.0  # the series is the single term k = 1 (numerator) and I_0 = 1 (Z)
    iK = float(special.ive(K, beta))
    return 2.0 / beta * (K + 2) * iK, 2.0 * iK


def modes(beta: float) -> int:
    """The number K of Fourier modes kept at ``beta`` (module docstring): the least K >= max(1,
    ceil(beta)) with both truncation bounds at most eps e^beta."""
    if beta == 0.0:
        return 1
    K = max(1, math.ceil(beta))
    while max(truncation_bound(beta, K)) > _EPS:
        K += 1
    return K


def fourier_field(theta: np.ndarray, beta: float, model: str, rescaled: bool, causal: bool) -> np.ndarray:
    """dtheta/dt of GLPR eq. (7.1) (SA or USA, full or causal) by the Fourier moments, shape (..., n)."""
    n = theta.shape[-1]
    K = modes(beta)
    k = np.arange(1, K + 1)
    if beta == 0.0:
        ck = np.zeros(K)
        ck[0] = 1.0  # lim 2 k I_k(beta) / beta
        i0, ik = 1.0, np.zeros(K)
    else:
        ik = special.ive(k, beta)  # e^{-beta} I_k
        ck, i0 = 2.0 * k * ik / beta, float(special.ive(0, beta))
    z = np.exp(1j * theta)
    P = np.cumprod(np.broadcast_to(z[..., None], theta.shape + (K,)), axis=-1)  # e^{i k theta_j}, (..., n, K)
    M = np.cumsum(P, axis=-2) if causal else np.sum(P, axis=-2, keepdims=True)  # (..., n or 1, K)
    R = np.conjugate(P, out=P)  # in place: a fresh (n, K) temporary per call costs page faults
    R *= M  # e^{-i k theta_i} M_k
    num = R.imag @ ck  # e^{-beta} sum_j e^{beta cos} sin
    if model == "sa":
        terms = np.arange(1, n + 1) if causal else n
        Z = terms * i0 + 2.0 * (R.real @ ik)
        return num / Z
    if rescaled:
        return num / n
    with np.errstate(over="raise"):
        try:
            scale = math.exp(beta)
        except OverflowError:
            raise ValidationError(f"USA weights overflow at beta = {beta} (e^beta > 1.8e308); use rescaled=True "
                                  "(e^-beta times it) or model='sa'.") from None
    return num * (scale / n)
