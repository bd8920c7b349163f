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

Rescaled scores (``normalization="mean", rescaled=True``; the one place this form is defined, so
that a compiled kernel can mirror it). The field is e^{-beta} times USA, whose weights are

    alpha_ij = exp(beta (y_i^T P y_j - 1)) / l                                       (R)

computed from the *unscaled* Gram entries ``G_ij = y_i^T P y_j`` as ``beta * (G_ij - 1)`` (first
the difference, exact for G_ij in [1/2, 2] by Sterbenz's lemma, then the product; beta is never
folded into P, so ``beta P`` cannot overflow even at beta = 1.7e308). On the unit sphere with
|P|_2 <= 1 the exponent is <= 0 and every weight lies in [0, 1/l]: finite at every beta. The only
rounding that matters is that of G_ij itself (a few eps for unit tokens, up to ``d eps``), which
beta amplifies: exponents of size at most beta * :data:`RESCALED_ROUNDING` are set to 0 (they are 0
within their rounding error; at beta = 1e300 an unrounded +2e-16 would give exp(2e284) = inf and a
token's weight on itself, -2e-16, exp(-2e284) = 0 instead of 1). Larger positive exponents are kept (tokens off the manifold at a stepper's stage points are the ambient
extension's business); one beyond the float range raises through ``overflow`` (the mathematics
has no finite answer there: e.g. P = 2 I, where e^{-beta} USA itself grows like e^{beta}).
The field, its Jacobian (which uses alpha and beta P) and the rescaled energy
``e^{-beta} E_beta = 1/(2 beta n^2) sum_ij exp(beta (G_ij - 1))`` all use (R). Per-trajectory
beta: (R) with each trajectory's beta.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import ValidationError
from .._backend import namespace, to_numpy

__all__ = ["GLOBAL_SHIFT_SPREAD", "MEAN_DIRECT_MAX", "RESCALED_ROUNDING", "overflow_message", "rescaled_scores",
           "weights", "weights_device"]

#: Largest spread max(S) - min(S) of the scores for which one shift by the global maximum is
#: used in the softmax (exp(-600) ~ 1e-261 is still a normal float, so no row underflows and
#: every row sum keeps full relative precision); beyond it, each row's maximum is subtracted.
GLOBAL_SHIFT_SPREAD = 600.0

#: Largest score for which "mean" computes ``exp(S) / l`` directly (exp(700) ~ 1e304 is finite);
#: beyond it each row is shifted by its maximum and the overflow of ``exp(max)`` is reported.
MEAN_DIRECT_MAX = 700.0

#: Relative size (to beta) of the positive rescaled exponents beta (G_ij - 1) that are rounding
#: of the Gram entries of unit tokens and are set to 0: 64 eps covers d-term dot products up to
#: d = 64 with |P| <= 1 (see the module docstring).
RESCALED_ROUNDING = 64 * 2.0**-52


def rescaled_scores(G, beta):
    """The rescaled exponents beta (G - 1) of (R) from the Gram entries G (NumPy: in place).

    ``beta`` is a float or an array broadcasting against G (one beta per trajectory)."""
    if type(G) is np.ndarray and isinstance(beta, (float, np.ndarray)):
        G -= 1.0
        small = np.abs(G) <= RESCALED_ROUNDING
        with np.errstate(over="ignore"):  # -inf (weight 0) is right; +inf is reported by weights()
            G *= beta
        G[small] = 0.0
        return G
    xp = namespace(G)
    S = G - 1.0
    return xp.where(xp.abs(S) <= RESCALED_ROUNDING, xp.zeros_like(S), S * beta)


def overflow_message(beta, p_max: float, rescaled: bool, smax=None) -> str:
    """The error of a score or a weight beyond the float range, naming beta (see the module docstring)."""
    b = f"= {beta:.4g}" if isinstance(beta, float) else f"up to {float(np.max(np.abs(to_numpy(beta)))):.4g}"
    what = ("attention scores y_i^T (beta P) y_j overflow float64 (" if smax is None else
            f"attention weights exp(score) overflow float64 (largest score {smax:.4g}, ")
    if rescaled:
        return (f"{what}beta {b}, largest |P| entry {p_max:.4g}): the rescaled weights exp(beta (y_i^T P y_j - 1)) "
                "are finite only where y_i^T P y_j <= 1 (e.g. unit tokens with |P| <= 1); reduce beta or the scale of P.")
    hint = "; for normalization='mean' use rescaled=True (e^{-beta} times the field: the same trajectories in the time s = e^beta t)" \
        if smax is not None else ""
    return f"{what}beta {b}, largest |P| entry {p_max:.4g}); reduce beta or the scale of P{hint}."


def weights(S: np.ndarray, n: int, normalization: str, scale: float, tril, overflow):
    """(E, r) for NumPy scores S (modified in place); ``tril`` the causal mask [i, 1, j] or None;
    ``overflow()`` is called when a row's largest score is not finite, ``overflow(smax)`` when
    the "mean" weight exp(smax) of a finite largest score ``smax`` is not."""
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
    if normalization == "mean":  # a query with no key (mask strict_causal()): its weights are 0
        m[np.isneginf(m)] = 0.0
    if not np.isfinite(m).all():  # (a sum of finite maxima can overflow: not a reason to stop)
        overflow()
    with np.errstate(invalid="ignore", over="ignore"):  # a score below its row's maximum by more than the
        E = np.exp(S - m)  # float range: -inf, a weight of 0 (the exact limit)
    if normalization == "mean":
        with np.errstate(over="raise"):
            try:
                return E * (np.exp(m) / n), None
            except FloatingPointError:
                overflow(float(np.max(m)))
                raise ValidationError(
                    "normalization='mean' overflowed: exp(y_i^T P y_j) exceeds the float range "
                    f"(max score {float(np.max(m)):.4g}); reduce beta, use rescaled=True or 'softmax'."
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
    if normalization == "mean":  # a query with no key (mask strict_causal()): its weights are 0
        m = xp.where(xp.isneginf(m), xp.zeros_like(m), m)
    if S.requires_grad:  # autograd: no in-place operations (exp saves its result)
        E = xp.exp(S - m)
        if normalization == "mean":
            return E * (xp.exp(m) / n), None
        return E, 1.0 / (scale * xp.sum(E, axis=-1))
    E = (S - m).exp_()  # one temporary, exponentiated in place
    if normalization == "mean":
        return E.mul_(xp.exp(m) / n), None
    return E, 1.0 / (scale * xp.sum(E, axis=-1))
