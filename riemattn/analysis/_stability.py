"""Linear stability of the uniform density on the circle: growth rates and the critical noise.

Private module of :mod:`riemattn.analysis.meanfield`, which re-exports :func:`uniform_growth_rate`
and :func:`critical_noise` (their documented home; the derivation is in its docstring and in
docs/theory/noise.md).
"""

from __future__ import annotations

import numpy as np
from scipy import special

from .._validation import as_float_array, check_choice, check_finite, check_rescaled
from ..errors import ValidationError

__all__ = ["critical_noise", "uniform_growth_rate"]


def _bessel_ratio(k, beta, model, rescaled=False):
    """(I_{k-1}(beta) - I_{k+1}(beta)) / Z_0 with Z_0 = I_0(beta) (SA) or 1 (USA; e^beta when
    ``rescaled``, finite at every beta); arrays broadcast. Plain USA beyond the float range raises."""
    if model == "sa":
        with np.errstate(invalid="ignore"):
            out = (special.ive(k - 1, beta) - special.ive(k + 1, beta)) / special.ive(0, beta)
        big = np.isnan(out) & (np.asarray(beta) > 0)  # SciPy's ive is NaN beyond beta ~ 1e9 (issue 58)
        if np.any(big):  # there: 2 k I_k / (beta I_0) (the recurrence) with Hankel's expansion
            safe = np.where(big, beta, 1.0)
            out = np.where(big, 2 * k * _ive_hankel(k, safe) / (safe * _ive_hankel(0, safe)), out)
        return out
    if rescaled:  # 2 k e^{-beta} I_k(beta) / beta (the recurrence; no cancellation), 1 at beta = 0
        return np.where(beta > 0, 2 * k * _ive_large(k, beta) / np.where(beta > 0, beta, 1.0), 1.0 * (k == 1))
    with np.errstate(invalid="ignore"):  # inf - inf where I_k overflows: refused below
        out = special.iv(k - 1, beta) - special.iv(k + 1, beta)
    if not np.all(np.isfinite(out)):
        raise ValidationError(
            f"USA's Bessel functions I_k(beta) ~ e^beta exceed the float range at beta = {float(np.max(beta))!r}; use "
            "rescaled=True (e^-beta USA, in the time s = e^beta t)."
        )
    return out


def _ive_hankel(k, beta):
    """e^{-beta} I_k(beta) by Hankel's expansion, 3 terms (relative error O(k^6 / beta^3); beta >= 1e6)."""
    mu, b = 4.0 * np.square(k), np.maximum(beta, 1.0)
    return (1 - (mu - 1) / 8 / b + (mu - 1) * (mu - 9) / 128 / b / b) / np.sqrt(2 * np.pi * b)


def _ive_large(k, beta):
    """e^{-beta} I_k(beta): SciPy's, whose NaN beyond beta ~ 1e9 is replaced by :func:`_ive_hankel`."""
    out = special.ive(k, beta)
    return np.where(np.isnan(out), _ive_hankel(k, beta), out)


def _betas(beta):
    b = check_finite(as_float_array(beta, "beta"), "beta")
    if np.any(b < 0):
        raise ValidationError(f"beta must be >= 0, got a minimum of {b.min()!r}.")
    return b


def uniform_growth_rate(k, beta, sigma, model: str = "sa", *, rescaled: bool = False):
    r"""Growth rate of the Fourier mode k of a perturbation of the uniform density on the circle.

    Linearising the continuity equation about rho = 1/(2 pi) (module docstring), a perturbation
    ``e^{i k theta}`` grows like ``e^{lambda_k t}`` with

    .. math:: \lambda_k = \frac{k}{2} \frac{I_{k-1}(\beta) - I_{k+1}(\beta)}{Z_0} - \frac{\sigma^2 k^2}{2}
                         = k^2 \Bigl(\frac{I_k(\beta)}{\beta Z_0} - \frac{\sigma^2}{2}\Bigr),

    ``Z_0 = I_0(beta)`` for SA (the partition function of the uniform density), ``Z_0 = 1`` for USA;
    ``I_k`` the modified Bessel functions. Noise convention: generator ``(sigma^2/2) d^2/dtheta^2``
    per token.

    ``rescaled=True`` (USA only): the rate in the time s = e^beta t of ``riemattn.usa(beta, d,
    rescaled=True)``, ``sigma`` the noise per unit s: ``k/2 e^{-beta}(I_{k-1} - I_{k+1}) - sigma^2 k^2/2``,
    finite at every beta; e^{-beta} times the plain rate when sigma_s = e^{-beta/2} sigma_t.

    Parameters
    ----------
    k : int or array_like of int, >= 1
    beta, sigma : float or array_like (broadcast), >= 0
    model : {"sa", "usa"}
    rescaled : bool, default False

    Returns
    -------
    ndarray or float

    References
    ----------
    GLPR, eq. (7.1) and Problem 7; derivation in docs/theory/noise.md.
    """
    model = check_choice(model, "model", ("sa", "usa"))
    k = np.asarray(k)
    if k.dtype.kind not in "iu" or np.any(k < 1):
        raise ValidationError(f"k must be integers >= 1, got {k!r}.")
    rescaled = check_rescaled(rescaled, None if model == "usa" else "model='sa'")
    b = _betas(beta)
    s = check_finite(as_float_array(sigma, "sigma"), "sigma")
    out = 0.5 * k * _bessel_ratio(k, b, model, rescaled) - 0.5 * s**2 * k**2
    return float(out) if np.ndim(out) == 0 else out


def critical_noise(beta, model: str = "sa", *, rescaled: bool = False):
    r"""The noise sigma_c(beta) below which the uniform density on the circle is linearly unstable.

    The mode k = 1 is the first to grow as sigma decreases (``I_k(beta)`` decreases in k), so

    .. math:: \sigma_c(\beta)^2 = \frac{I_0(\beta) - I_2(\beta)}{Z_0} = \frac{2 I_1(\beta)}{\beta Z_0},
              \qquad Z_0 = I_0(\beta) \ (\text{SA}), \quad Z_0 = 1 \ (\text{USA}),

    with the noise convention of :func:`uniform_growth_rate` (each angle ``dtheta = v dt + sigma dW``).
    beta = 0 gives the Kuramoto value sigma_c = 1 (coupling K = 1 = sigma_c^2) for both models;
    SA: ``sigma_c^2 ~ 2 / beta`` as beta -> infinity; USA: ``sigma_c^2 ~ sqrt(2 / pi) e^beta beta^{-3/2}``.

    ``rescaled=True`` (USA only): that of rescaled USA in its time s = e^beta t, e^{-beta/2} sigma_c,
    finite at every beta (plain USA raises ValidationError naming beta where e^beta overflows).

    Parameters
    ----------
    beta : float or array_like, >= 0
    model : {"sa", "usa"}
    rescaled : bool, default False

    Returns
    -------
    float or ndarray

    References
    ----------
    GLPR, eq. (7.1) and Problem 7; derivation in docs/theory/noise.md.
    """
    model = check_choice(model, "model", ("sa", "usa"))
    rescaled = check_rescaled(rescaled, None if model == "usa" else "model='sa'")
    b = _betas(beta)
    if rescaled:  # sqrt(2 e^{-beta} I_1 / beta), without the underflow of the ratio at huge beta
        out = np.where(b > 0, np.sqrt(2 * _ive_large(1, b)) / np.sqrt(np.where(b > 0, b, 1.0)), 1.0)
    else:
        out = np.sqrt(_bessel_ratio(1, b, model))
    return float(out) if np.ndim(out) == 0 else out


critical_noise.__module__ = uniform_growth_rate.__module__ = "riemattn.analysis.meanfield"  # documented there
