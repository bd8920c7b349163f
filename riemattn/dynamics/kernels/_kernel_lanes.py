r"""The attention field on :data:`LANES` trajectories at once, one per vector lane (private).

The compiled engine's ensembles step several trajectories together (``riemattn.solvers.compiled._lanes``):
the tokens of lane w are ``X[i, a, w]`` (lanes innermost), and every loop of this kernel runs over
the lanes innermost, where it vectorises whatever the shape (l, d) -- the per-trajectory kernel
(:mod:`riemattn.dynamics.kernels._kernel_attention`) vectorises over tokens, and for the small
shapes of ensembles (10 tokens in R^3) its loops are mostly remainders.

Each lane's value is the per-trajectory kernel's ``RHS``, bit for bit: every sum runs over the
same terms in the same order (tokens, components and heads in index order, each from 0.0), the
softmax rows are shifted by their own maximum, and ``exp`` is the same Cody--Waite polynomial
(:func:`~riemattn.dynamics.kernels._kernel_rows.exp_shifted`) on the same entries (the first
``l^2 - l^2 mod 8`` of a head's matrix when it holds at least 16 values and its shifted scores lie
in [-708, 0]; ``math.exp`` for the rest, per lane). The forms covered are those of
:func:`lanes_supported`: attention on the sphere, no layer-norm placement, the full mask,
"paper" or "softmax" rows, U = I, any source of P (constant, scalar, sines, steps; per trajectory
or shared) and of beta.

.. math::

    F_i = f_i - (y_i \cdot f_i)\, y_i, \qquad
    f_i = \sum_\eta \sum_j \alpha^\eta_{ij} y_j, \qquad
    \alpha^\eta_{ij} = \frac{e^{\beta\, y_i^T P_\eta y_j - m_i}}{s \sum_k e^{\beta\, y_i^T P_\eta y_k - m_i}},

with ``m_i`` the row's maximum and ``s`` = sqrt(d) ("paper") or 1 ("softmax").

References
----------
Geshkovski, Letrouit, Polyanskiy, Rigollet, "A mathematical perspective on Transformers", (SA).
Rodriguez Abella, Silvestre, Tabuada, "Consensus is all you get", ICML 2025, eq. (6).
"""

from __future__ import annotations

import math

from ._kernel_attention import norm_scale, source
from ._kernel_cache import jit
from ._kernel_heads import heads_at
from ._kernel_layout import (BETA_LOC, BETA_OFF, D, H, KIND, KIND_ATTENTION, L, MAN_SPHERE, MANIFOLD, MASK,
                             MASK_FULL, NORM, NORM_MEAN, P_HEADS, P_KIND, P_LOC, P_OFF, P_TERMS, PL_POST,
                             PLACEMENT, RESCALED, SRC_CONST, SRC_IDENTITY, SRC_SCALAR, SRC_SINES, U_KIND,
                             W_OFF, LOC_FLOATS)
from ._kernel_rows import EXP_FAST_MAX, EXP_LANES, EXP_VECTOR_MIN
from ._kernel_simd import (LANES, v_add, v_axpy, v_dots1, v_dots4, v_dots8, v_exp_poly, v_exp_row, v_exp_run, v_fill, v_mul,
                           v_muladd, v_rowmaxmin, v_rowsum, v_sub, v_submul)



def lanes_supported(ints) -> bool:
    """Whether the packed field (its ``ints``) is a form :func:`lanes_rhs` evaluates."""
    return bool(int(ints[KIND]) == KIND_ATTENTION and int(ints[PLACEMENT]) == PL_POST
                and int(ints[MANIFOLD]) == MAN_SPHERE and int(ints[W_OFF]) < 0
                and int(ints[MASK]) == MASK_FULL and int(ints[NORM]) != NORM_MEAN
                and int(ints[RESCALED]) == 0 and int(ints[U_KIND]) == SRC_IDENTITY
                and int(ints[H]) == max(int(ints[P_HEADS]), 1))  # (U = I: the heads are P's)


def lanes_work(ints) -> tuple[int, int]:
    """Shapes of the scratch of :func:`lanes_rhs`: rows of LANES values (see :func:`_offsets`) and
    the length of the per-lane vector of head matrices."""
    l, d = int(ints[L]), int(ints[D])
    hp = max(int(ints[P_HEADS]), 1)
    return hp * d * d + 3 * l * d + l * l + l + 7 + max(int(ints[P_TERMS]), 0), LANES * hp * d * d


@jit
def _offsets(l, d, hp):
    """Rows of the scratch (LANES values each): P in lanes (hp d d), q, fh, f (l d), A (l l), the
    rows' maxima (then the rows' 1 / (s sum)) (l), then one row each: a row's sum, the row minimum,
    the matrix's lowest shifted score, the lanes' exp choice, ones, c of a scalar P, beta; then one
    row per sine term of P(t)."""
    oPl = 0 * l
    oq = oPl + hp * d * d
    ofh = oq + l * d
    of = ofh + l * d
    oA = of + l * d
    omx = oA + l * l
    om = omx + l
    return oPl, oq, ofh, of, oA, omx, om, om + 1, om + 2, om + 3, om + 4, om + 5


@jit
def _exp_lanes(A, oA, n, fast, every, tmp):
    """A[(oA + m) W + w] <- exp(A[(oA + m) W + w]) for m < n: the polynomial on the first
    n - n mod 8 entries (none if n < 16) of the lanes where A[fast W + w] != 0 (their shifted
    scores lie in [-708, 0]; ``every``: in all lanes), ``math.exp`` elsewhere: the per-trajectory
    kernel's choice, per lane. The row ``tmp`` (W values) is scratch."""
    W = LANES
    nv = n - n % EXP_LANES if n >= EXP_VECTOR_MIN else 0
    if every:
        v_exp_run(A, oA * W, nv)
    else:
        for m in range(oA, oA + nv):  # (a lane with a score below -708 or NaN: math.exp there)
            for w in range(W):
                if A[fast * W + w] == 0.0:
                    A[tmp * W + w] = math.exp(A[m * W + w])
            v_exp_poly(A, m * W)
            for w in range(W):
                if A[fast * W + w] == 0.0:
                    A[m * W + w] = A[tmp * W + w]
    for m in range((oA + nv) * W, (oA + n) * W):
        A[m] = math.exp(A[m])


@jit
def lanes_rhs(t, X, rows, ints, floats, per, wk, wp, out):
    """F at (t[w], X[:, w]) for the LANES lanes into ``out``: X, out flat (l d, LANES) (token i's
    component a of lane w at (i d + a) LANES + w); ``rows[w]`` the trajectory of lane w (its row
    of ``per``); ``wk`` (rows LANES) and ``wp`` the scratch of :func:`lanes_work`."""
    W = LANES
    l, d, h = ints[L], ints[D], ints[H]
    hp, pk = ints[P_HEADS], ints[P_KIND]
    dd = d * d
    oPl, oq, ofh, of, oA, omx, om, orlo, olo, ofast, one, ocP = _offsets(l, d, hp)
    obeta, osin = ocP + 1, ocP + 2
    s = norm_scale(ints)
    shared = ints[P_LOC] == LOC_FLOATS and (pk == SRC_CONST or pk == SRC_SINES)
    for w in range(W):  # P(t) (beta folded in) per lane, as the per-trajectory kernel computes it
        b = rows[w]
        beta = source(ints[BETA_LOC], floats, per, b)[ints[BETA_OFF]]
        wk[obeta * W + w] = beta
        srcP = source(ints[P_LOC], floats, per, b)
        if pk == SRC_SCALAR:
            wk[ocP * W + w] = beta * srcP[ints[P_OFF]]
        elif not shared:
            heads_at(t[w], pk, srcP, ints[P_OFF], hp, ints[P_TERMS], d, beta, wp, w * hp * dd)
    if shared:  # heads_at's sums, in its order, with the lanes together
        _shared_heads(t, pk, floats, ints[P_OFF], hp * dd, ints[P_TERMS], wk, oPl, obeta, osin)
    elif pk != SRC_SCALAR:
        for m in range(hp * dd):
            for w in range(W):
                wk[(oPl + m) * W + w] = wp[w * hp * dd + m]
    for m in range(of, of + l * d):
        v_fill(wk, m * W, 0.0)
    v_fill(wk, one * W, 1.0)
    for e in range(h):  # (U = I: the heads are P's, h = hp)
        _head(X, wk, oPl + e * dd, pk, oq, oA, ofh, omx, om, orlo, olo, ofast, one, ocP, l, d, s)
        for m in range(l * d):
            v_add(wk, (of + m) * W, wk, (ofh + m) * W)
    for i in range(l):  # F_i = f_i - (y_i . f_i) y_i
        v_fill(wk, om * W, 0.0)
        for a in range(d):
            v_muladd(wk, om * W, X, (i * d + a) * W, wk, (of + i * d + a) * W)
        for a in range(d):
            v_submul(out, (i * d + a) * W, wk, (of + i * d + a) * W, wk, om * W, X, (i * d + a) * W)


@jit
def _shared_heads(t, pk, src, off, m, terms, wk, oP, obeta, osin):
    """Rows oP.. = beta M(t) for a source shared by the lanes: constant (``beta * M``) or sines
    (``(B + sum_k sin(omega_k t + phi_k) A_k) beta``, k in order), as
    :func:`~riemattn.dynamics.kernels._kernel_attention.heads_at` computes each lane's."""
    W = LANES
    if pk == SRC_CONST:
        for e in range(m):
            v_fill(wk, (oP + e) * W, src[off + e])
            v_mul(wk, (oP + e) * W, wk, obeta * W)
        return
    a_off = off + m
    w_off = a_off + terms * m
    for k in range(terms):
        for w in range(W):
            wk[(osin + k) * W + w] = math.sin(src[w_off + k] * t[w] + src[w_off + terms + k])
    for e in range(m):
        v_fill(wk, (oP + e) * W, src[off + e])
        for k in range(terms):
            v_axpy(wk, (oP + e) * W, src[a_off + k * m + e], wk, (osin + k) * W)
        v_mul(wk, (oP + e) * W, wk, obeta * W)


@jit
def _head(X, wk, oP, pk, oq, oA, ofh, omx, om, orlo, olo, ofast, one, ocP, l, d, s):
    """One head's update fh_i = sum_j alpha_ij y_j into the rows ofh.., for every lane."""
    W = LANES
    for i in range(l):  # q_i = P^T y_i (c P: c y_i), each component summed over a in order
        if pk == SRC_SCALAR:
            for c in range(d):
                v_fill(wk, (oq + i * d + c) * W, 0.0)
                v_muladd(wk, (oq + i * d + c) * W, wk, ocP * W, X, (i * d + c) * W)
            continue
        _dots(wk, (oq + i * d) * W, W, X, (i * d) * W, W, wk, oP * W, W, d * W, d, d, wk, one * W)
    for i in range(l):  # scores q_i . y_j, summed over c in order
        _dots(wk, (oA + i * l) * W, W, wk, (oq + i * d) * W, W, X, 0 * W, d * W, W, d, l, wk, one * W)
    v_fill(wk, olo * W, math.inf)
    for i in range(l):  # each row's maximum (NaN stays the maximum once met) and minimum
        v_fill(wk, (omx + i) * W, -math.inf)
        v_fill(wk, orlo * W, math.inf)
        v_rowmaxmin(wk, (oA + i * l) * W, W, l, wk, (omx + i) * W, wk, orlo * W)
        for w in range(W):
            g = wk[orlo * W + w] - wk[(omx + i) * W + w]
            if g < wk[olo * W + w] or g != g:
                wk[olo * W + w] = g
    every = True
    for w in range(W):
        fast = wk[olo * W + w] >= -EXP_FAST_MAX
        wk[ofast * W + w] = 1.0 if fast else 0.0
        every = every and fast
    n = l * l
    whole = every and n >= EXP_VECTOR_MIN and n % EXP_LANES == 0  # the polynomial on every entry
    if not whole:
        for i in range(l):  # each row shifted by its maximum, then exp over the matrix
            for j in range(l):
                v_sub(wk, (oA + i * l + j) * W, wk, (omx + i) * W)
        _exp_lanes(wk, oA, n, ofast, every, orlo)
    for i in range(l):  # each row's 1 / (s times its sum) (summed in order) into the row omx + i
        v_fill(wk, om * W, 0.0)
        if whole:  # shift, exp and sum in one pass over the row
            v_exp_row(wk, (oA + i * l) * W, l, wk, (omx + i) * W, wk, om * W)
        else:
            v_rowsum(wk, om * W, wk, (oA + i * l) * W, W, l)
        for w in range(W):
            wk[(omx + i) * W + w] = 1.0 / (s * wk[om * W + w])
    for i in range(l):  # fh_i = sum_j alpha_ij y_j, summed over j in order, alpha_ij = e_ij (1 / (s sum_i))
        _dots(wk, (ofh + i * d) * W, W, wk, (oA + i * l) * W, W, X, 0 * W, W, d * W, l, d, wk, (omx + i) * W)


@jit
def _dots(D, rd, dj, A, ra, ac, Bm, rb, bj, bc, n, count, S, rs):
    """For k < count: D[rd + k dj] = sum_{c < n} (A[ra + c ac] S[rs]) Bm[rb + k bj + c bc] (vectors
    of LANES; each sum from 0.0 in the order of c; S[rs] a row of scales, ones where A is taken as
    it is), eight or four k at a time with the sums in registers."""
    k = 0
    while k + 8 <= count:
        v_dots8(D, rd + k * dj, dj, A, ra, ac, Bm, rb + k * bj, bj, bc, n, S, rs)
        k += 8
    while k + 4 <= count:
        v_dots4(D, rd + k * dj, dj, A, ra, ac, Bm, rb + k * bj, bj, bc, n, S, rs)
        k += 4
    while k < count:
        v_dots1(D, rd + k * dj, dj, A, ra, ac, Bm, rb + k * bj, bj, bc, n, S, rs)
        k += 1
