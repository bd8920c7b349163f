"""Normalisation of attention scores: shifted exponentials, row factors, overflow.

Private helper of :mod:`riemattn.dynamics.attention`. Scores ``S[..., i, eta, j] = y_i^T beta
P_eta y_j`` become unnormalised weights ``E = exp(S - shift)`` and per-row factors ``r`` with
``alpha = E * r[..., None]`` ("paper": ``r_i = 1 / (sqrt(d) sum_j E_ij)``, "softmax": ``1 /
sum_j E_ij``); for "mean" ``r`` is None and ``E = exp(S) / l`` is alpha itself.

Overflow: the shift makes every finite score safe for "paper" and "softmax". A score that is
itself not finite (``beta P`` or ``y_i^T beta P y_j`` beyond the float range, e.g. beta = 1e308
with P = 2 I) would give NaN rows; the caller's ``overflow`` callback is invoked instead (the
attention field raises :class:`~riemattn.errors.ValidationError` naming beta and P when the
tokens are finite, and lets NaN tokens propagate so that ``integrate`` reports them).
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import ValidationError
from .._backend import namespace

__all__ = ["GLOBAL_SHIFT_SPREAD", "MEAN_DIRECT_MAX", "weights", "weights_device"]

#: Largest spread max(S) - min(S) of the scores for which one shift by the global maximum is
#: used in the softmax (exp(-600) ~ 1e-261 is still a normal float, so no row underflows and
#: every row sum keeps full relative precision); beyond it, each row's maximum is subtracted.
GLOBAL_SHIFT_SPREAD = 600.0

#: Largest score for which "mean" computes ``exp(S) / l`` directly (exp(700) ~ 1e304 is finite);
#: beyond it each row is shifted by its maximum and the overflow of ``exp(max)`` is reported.
MEAN_DIRECT_MAX = 700.0


def weights(S: np.ndarray, n: int, normalization: str, scale: float, tril, overflow):
    """(E, r) for NumPy scores S (modified in place); ``tril`` the causal mask [i, 1, j] or None;
    ``overflow()`` is called when a row's largest score is not finite."""
    if normalization == "mean":
        smax = float(S.max())
        if smax < MEAN_DIRECT_MAX:  # False for NaN and inf: exp(S) / l cannot overflow, no shift needed
            E = np.exp(S, out=S)
            if tril is not None:
                E *= tril
            E *= 1.0 / n
            return E, None
    else:
        smax, smin = S.max(), S.min()
        if float(smax) - float(smin) < GLOBAL_SHIFT_SPREAD:  # False for NaN and inf (no warning): per-row path
            S -= smax
            E = np.exp(S, out=S)
            if tril is not None:
                E *= tril
            return E, 1.0 / (scale * np.einsum("...j->...", E))
    if tril is not None:
        S = np.where(tril, S, -np.inf)
    m = np.max(S, axis=-1, keepdims=True)
    if not math.isfinite(np.add.reduce(m, axis=None)):
        overflow()
    with np.errstate(invalid="ignore"):
        E = np.exp(S - m)
    if normalization == "mean":
        with np.errstate(over="raise"):
            try:
                return E * (np.exp(m) / n), None
            except FloatingPointError:
                raise ValidationError(
                    "normalization='mean' overflowed: exp(y_i^T P y_j) exceeds the float range "
                    f"(max score {float(np.max(m)):.4g}); reduce beta or use 'softmax'."
                ) from None
    return E, 1.0 / (scale * np.sum(E, axis=-1))


def weights_device(S, n: int, normalization: str, scale: float, tril):
    """:func:`weights` for tensors, without a host synchronisation: every row is shifted by its
    own maximum (no data-dependent branch); an overflow gives inf or NaN, which ``integrate``
    reports as a non-finite trajectory instead of raising."""
    xp = namespace(S)
    if tril is not None:
        S = xp.where(tril > 0, S, -math.inf)
    m = xp.max(S, axis=-1, keepdims=True)
    if S.requires_grad:  # autograd: no in-place operations (exp saves its result)
        E = xp.exp(S - m)
        if normalization == "mean":
            return E * (xp.exp(m) / n), None
        return E, 1.0 / (scale * xp.sum(E, axis=-1))
    E = (S - m).exp_()  # one temporary, exponentiated in place
    if normalization == "mean":
        return E.mul_(xp.exp(m) / n), None
    return E, 1.0 / (scale * xp.sum(E, axis=-1))
