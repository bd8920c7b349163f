"""The head matrices of a packed field at t (private; the sources of :mod:`._kernel_layout`).

:func:`heads_at` (M(t)) and :func:`heads_rate` (dM/dt) read one source, P or U, of kind
``SRC_CONST``, ``SRC_SINES``, ``SRC_ROWSINES`` (the row-separable sines, compact) or ``SRC_STEPS``; :func:`load_heads` loads both of a pack at t
(beta, its scale of P, the ``SRC_SCALAR`` / ``SRC_IDENTITY`` cases) -- the one loader of the
generic CPU kernel (``_kernel_attention.forward``), the streamed kernel (``_kernel_stream``) and
the CUDA field (``riemattn.solvers.compiled.cuda._fast.make_rhs``).

These functions are compiled twice: by numba for the CPU and, from their Python bodies, by
numba-cuda as device functions (``riemattn.solvers.compiled.cuda._field.device_functions``), where
the per-trajectory data is the trajectory's row itself and a device function may return only an
array it was passed. So they take the source arrays already resolved by the caller (through
``source``, whichever its compilation), write the matrices into the arrays they are given and
return scalars only.
"""

from __future__ import annotations

import math

from ._kernel_cache import jit
from ._kernel_layout import (BETA_OFF, P_OFF, P_TERMS, SRC_IDENTITY, SRC_ROWSINES, SRC_SCALAR, SRC_SINES, SRC_STEPS,
                             U_OFF, U_TERMS)


# SRC_ROWSINES has the values of SRC_SINES. Entry e of row rho: the dense form computes
# v = B_e, then v += w_k A_k,e for k = 0..K-1 (w_k = sin(omega_k t + phi_k)), then v *= scale;
# the compact form v = B_e (+0.0 when B is not stored: all its entries are +0.0), v += w_rho P'_e
# (P'_e = A_k*,e for the one term k* on row rho, w_rho = w_k*; a row without a term has omega =
# phi = 0 and P' = 0: w_rho P'_e = +0), v *= scale. Every other product is w_k A_k,e = w_k (+-0) =
# +-0 exactly (|w_k| <= 1), and in IEEE arithmetic x + (+-0) = x for every x but -0 (-0 + +0 =
# +0), also as a fused multiply-add (the GPU's contraction of both forms' v += w A). The running
# value is -0 only while it is B_e = -0 (a nonzero sum that cancels is +0 under rounding to
# nearest), so the two forms agree bit for bit where B has no -0.0 entry, and otherwise may differ
# only in the sign of such a zero. (A w_k that is NaN -- omega_k t + phi_k overflowing to inf --
# makes every entry NaN in the dense form, row rho's in the compact one.) The rates likewise: both
# start at +0.0 and add the same w'_k A_k*,e (and +-0), bit for bit. The loops run over the heads
# d rows, not over data-dependent indices, and whether B is stored is the pack's ``terms``: with
# the sizes and the pack's ints fixed at compile time (the generated CUDA kernels) every index is a
# constant and the branch folds.
@jit
def heads_at(t, kind, src, off, nh, terms, d, scale, out, oo):
    """out[oo:oo + nh d d] = scale M(t) for a source of kind SRC_CONST, SRC_SINES, SRC_ROWSINES or
    SRC_STEPS."""
    m = nh * d * d
    if kind == SRC_ROWSINES:  # [B (terms = 1)], omega, phi (nh d), P' (nh d d); _kernel_layout
        n = nh * d
        o = off
        if terms != 0:
            for e in range(m):
                out[oo + e] = src[o + e]
            o += m
        else:
            for e in range(m):
                out[oo + e] = 0.0
        for r in range(n):
            w = math.sin(src[o + r] * t + src[o + n + r])
            for c in range(d):
                out[oo + r * d + c] += w * src[o + 2 * n + r * d + c]
        for e in range(m):
            out[oo + e] *= scale
        return
    if kind == SRC_SINES:
        a_off = off + m
        w_off = a_off + terms * m
        for e in range(m):
            out[oo + e] = src[off + e]
        for k in range(terms):
            w = math.sin(src[w_off + k] * t + src[w_off + terms + k])
            base = a_off + k * m
            for e in range(m):
                out[oo + e] += w * src[base + e]
        for e in range(m):
            out[oo + e] *= scale
        return
    base = off
    if kind == SRC_STEPS:
        k = 0
        for j in range(1, terms):
            if src[off + j] <= t:
                k = j
            else:
                break
        base = off + terms + k * m
    for e in range(m):
        out[oo + e] = scale * src[base + e]


@jit
def heads_rate(t, kind, src, off, nh, terms, d, scale, out, oo):
    """out[oo:oo + nh d d] = scale dM/dt (0 unless SRC_SINES or SRC_ROWSINES)."""
    m = nh * d * d
    for e in range(m):
        out[oo + e] = 0.0
    if kind == SRC_ROWSINES:
        n = nh * d
        o = off + (m if terms != 0 else 0)
        for r in range(n):
            w = scale * src[o + r] * math.cos(src[o + r] * t + src[o + n + r])
            for c in range(d):
                out[oo + r * d + c] += w * src[o + 2 * n + r * d + c]
        return
    if kind != SRC_SINES:
        return
    a_off = off + m
    w_off = a_off + terms * m
    for k in range(terms):
        w = scale * src[w_off + k] * math.cos(src[w_off + k] * t + src[w_off + terms + k])
        base = a_off + k * m
        for e in range(m):
            out[oo + e] += w * src[base + e]


@jit
def smooth(kind):
    """Whether a source of this kind varies smoothly in t (dM/dt from :func:`heads_rate`)."""
    return kind == SRC_SINES or kind == SRC_ROWSINES


@jit
def load_heads(t, ints, srcB, srcP, srcU, pk, uk, hP, hU, rescaled, d, outP, oP, outU, oU):
    """P(t) (times beta unless ``rescaled``) into outP[oP:], U(t) into outU[oU:], for the pack
    ``ints`` whose beta, P and U live in the arrays srcB, srcP, srcU (each ``source(ints[*_LOC],
    ...)``), of kinds pk, uk with hP, hU heads (``ints[P_KIND]``, ... or their compile-time values).
    Returns (cP, cU, beta, pscale): the factors c of a scalar P (times pscale) and U (``SRC_SCALAR``,
    M = c I; nothing written then, nor for U = I), beta, and P's scale (1 for the rescaled scores,
    whose beta is applied to the scores, else beta)."""
    beta = srcB[ints[BETA_OFF]]
    pscale = 1.0 if rescaled else beta
    cP = 0.0
    if pk == SRC_SCALAR:
        cP = pscale * srcP[ints[P_OFF]]
    else:
        heads_at(t, pk, srcP, ints[P_OFF], hP, ints[P_TERMS], d, pscale, outP, oP)
    cU = 0.0
    if uk == SRC_SCALAR:
        cU = srcU[ints[U_OFF]]
    elif uk != SRC_IDENTITY:
        heads_at(t, uk, srcU, ints[U_OFF], hU, ints[U_TERMS], d, 1.0, outU, oU)
    return cP, cU, beta, pscale
