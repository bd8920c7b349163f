"""Compiled time derivative dG/dt of the attention field (private; see :mod:`riemattn.dynamics.kernels`).

With ``y = pi_W(x)`` and the time derivatives ``P'(t)``, ``U'(t)`` of
:class:`~riemattn.dynamics.schedules.TimeVaryingHeads` weights (constant and piecewise-constant
weights give 0): ``dS_ij = y_i^T beta P'_eta y_j``, ``dalpha_ij = alpha_ij (dS_ij - s sum_m
alpha_im dS_im)``, ``df_i = sum_eta sum_j (dalpha_ij U_eta y_j + alpha_ij U'_eta y_j)`` and
``dG/dt = |x|_W (I - y y^T W) df`` per token (``df`` on flat space).

References
----------
Rodriguez Abella, Silvestre, Tabuada, "Consensus is all you get", ICML 2025, eq. (6).
"""

from __future__ import annotations

import math

from ._kernel_attention import apply_W, jit, norm_scale, offsets, source, tangent_rows
from ._kernel_heads import heads_rate, smooth
from ._kernel_layout import (BETA_LOC, BETA_OFF, D, H, L, MAN_FLAT, MANIFOLD, MASK, MASK_CAUSAL, P_HEADS,
                             P_KIND, P_LOC, P_OFF, P_TERMS, PL_POST, PLACEMENT, U_HEADS, U_KIND,
                             U_LOC, U_OFF, U_TERMS)


@jit
def dtime_start(x, ints, floats, w, out):
    """First half of dG/dt: out = pi_W(x) (flat x, on the manifold or not), |x_i|_W in the
    scratch. Returns False (out = 0, done) when the weights do not depend on t smoothly.

    The caller then runs ``forward`` at out (not called from here: see kernels.evaluate) and
    :func:`dtime_finish`."""
    l, d, h = ints[L], ints[D], ints[H]
    if not (smooth(ints[P_KIND]) or smooth(ints[U_KIND])):
        for m in range(l * d):
            out[m] = 0.0
        return False
    oP, oU, odP, odU, opy, oq, ou, ofh, odfh, oA, odA, of, oWy, oWf, oyn, odf, orow, oc = offsets(l, d, h)
    flat = ints[MANIFOLD] == MAN_FLAT
    for m in range(l * d):  # x into the scratch (its offset is then a run-time value)
        w[oyn + m] = x[m]
    apply_W(ints, floats, w, oyn, w, oWy, l, d)
    for i in range(l):  # pi_W(x), c_i = |x_i|_W
        ci = 1.0
        if not flat:
            acc = 0.0
            for a in range(d):
                acc += x[i * d + a] * w[oWy + i * d + a]
            ci = math.sqrt(acc)
        w[oc + i] = ci
        for a in range(d):
            out[i * d + a] = x[i * d + a] / ci
    return True


@jit
def dtime_finish(t, b, ints, floats, per, w, out):
    """Second half of dG/dt: out (holding y = pi_W(x), with forward run at y) <- dG/dt."""
    l, d, h = ints[L], ints[D], ints[H]
    pk, uk = ints[P_KIND], ints[U_KIND]
    oP, oU, odP, odU, opy, oq, ou, ofh, odfh, oA, odA, of, oWy, oWf, oyn, odf, orow, oc = offsets(l, d, h)
    flat = ints[MANIFOLD] == MAN_FLAT
    yn = out
    beta = source(ints[BETA_LOC], floats, per, b)[ints[BETA_OFF]]
    hP, hU = ints[P_HEADS], ints[U_HEADS]
    ps, us = smooth(pk), smooth(uk)
    if ps:
        heads_rate(t, pk, source(ints[P_LOC], floats, per, b), ints[P_OFF], hP, ints[P_TERMS], d, beta, w, odP)
    if us:
        heads_rate(t, uk, source(ints[U_LOC], floats, per, b), ints[U_OFF], hU, ints[U_TERMS], d, 1.0, w, odU)
    causal = ints[MASK] == MASK_CAUSAL
    s = norm_scale(ints)
    for m in range(l * d):
        w[odf + m] = 0.0
    for e in range(h):
        dPe, dUe = odP + (e if hP > 1 else 0) * d * d, odU + (e if hU > 1 else 0) * d * d
        Ae, dAe, ue = oA + e * l * l, odA + e * l * l, ou + e * l * d
        for i in range(l):
            jmax = i + 1 if causal else l
            if ps:  # dA_ij = A_ij (dS_ij - s sum_m A_im dS_im)
                tot = 0.0
                for j in range(jmax):
                    acc = 0.0
                    for a in range(d):
                        pa = 0.0
                        for c in range(d):
                            pa += w[dPe + a * d + c] * yn[j * d + c]
                        acc += yn[i * d + a] * pa
                    w[dAe + i * l + j] = w[Ae + i * l + j] * acc
                    tot += w[dAe + i * l + j]
                for j in range(jmax):
                    w[dAe + i * l + j] -= s * w[Ae + i * l + j] * tot
                for a in range(d):
                    acc = 0.0
                    for j in range(jmax):
                        acc += w[dAe + i * l + j] * w[ue + j * d + a]
                    w[odf + i * d + a] += acc
            if us:  # A_ij U'_eta y_j
                for a in range(d):
                    acc = 0.0
                    for j in range(jmax):
                        ua = 0.0
                        for c in range(d):
                            ua += w[dUe + a * d + c] * yn[j * d + c]
                        acc += w[Ae + i * l + j] * ua
                    w[odf + i * d + a] += acc
    if flat or ints[PLACEMENT] != PL_POST:  # (a placement finishes from dA/dt: _kernel_layernorm)
        for m in range(l * d):
            out[m] = w[odf + m]
    else:  # out = yn is overwritten element by element after each element is read
        tangent_rows(ints, floats, yn, w, odf, w, oWf, out, l, d)
        for i in range(l):
            for a in range(d):
                out[i * d + a] *= w[oc + i]
