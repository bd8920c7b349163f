r"""Streamed attention: the field of many tokens in O(l d) memory, query tiles on all cores (private).

:func:`evaluate_streamed` has :func:`~riemattn.dynamics.kernels.evaluate`'s signature and the
attention field's values (``RHS``, ``UPDATE``, ``RHS_DIFF`` as ``RHS``, ``BLOCK``), without the
(h, l, l) attention matrix: each query row's scores, exponentials and weighted sums are formed a
tile of :data:`TILE_KEYS` keys at a time (a few kilobytes that stay in the L1 cache), with a
running maximum and sum per row (online softmax, Milakov & Gimelshein 2018; FlashAttention, Dao et
al. 2022):

.. math::

    m \leftarrow \max(m, \max_{j \in T} s_{ij}), \quad
    z \leftarrow z\, e^{m_{old} - m} + \sum_{j \in T} e^{s_{ij} - m}, \quad
    a \leftarrow a\, e^{m_{old} - m} + \sum_{j \in T} e^{s_{ij} - m} u_j,

and at the end ``f_i = a / (s z)`` ("paper": s = sqrt(d); "softmax": s = 1), or for "mean" rows
``f_i = a e^m / l`` where the shift m is 0 while every score is below ``MEAN_DIRECT_MAX`` (the
weights ``e^{s_ij} / l`` of :mod:`riemattn.dynamics._softmax`, unshifted) and the running maximum
once a score reaches it (so that ``e^{max}`` overflows to inf where the NumPy field raises). A row's
rescaling factor is exactly 1 while its maximum does not change. Masks "full" and "causal" (keys j
<= i: the block's diagonal keys are masked with -inf scores, whose weights are exactly 0); every
normalization, head layout, P and U kind and manifold of the generic kernel except the rescaled
"mean" form (:func:`stream_supported`).

The queries go eight at a time, one per vector lane (``_kernel_stream_simd``: scores and weighted
sums; ``_kernel_simd``: row maxima, the exponentials by the polynomial of
:func:`~riemattn.dynamics.kernels._kernel_rows.exp_shifted` where every argument of the tile lies in
[-708, 708], else ``math.exp``), blocks of :data:`QUERY_TILE_BLOCKS` of them form a query tile, and
with ``ints[STREAM_TILES] = 2`` the query tiles run on numba's threads (``prange``; the tiles ``k``
and ``n - 1 - k`` together, so that a causal mask's triangle is shared evenly). Every row's sums add
their terms in the order of the keys, whatever thread runs it: the results do not depend on the
number of threads. They differ from the generic kernel's by rounding (the rescaling, the order of
the final scale).

References
----------
M. Milakov, N. Gimelshein, "Online normalizer calculation for softmax", arXiv:1805.02867, 2018.
T. Dao, D. Fu, S. Ermon, A. Rudra, C. Re, "FlashAttention", NeurIPS 2022, Algorithm 1.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from ._kernel_attention import norm_scale, rows_times, source, tangent_rows
from ._kernel_cache import njit
from ._kernel_heads import load_heads
from ._kernel_layernorm import ln_block
from ._kernel_layout import (BETA_LOC, H, KIND, KIND_ATTENTION, MAN_FLAT, MANIFOLD, MASK, MASK_CAUSAL,
                             MEAN_DIRECT_MAX, NORM, NORM_MEAN, OP_BLOCK, OP_RHS, OP_RHS_DIFF, OP_UPDATE, P_HEADS,
                             P_KIND, P_LOC, PL_POST, PLACEMENT, RESCALED, SRC_IDENTITY, SRC_SCALAR,
                             STREAM_TILES, U_HEADS, U_KIND, U_LOC)
from ._kernel_rows import EXP_FAST_MAX
from ._kernel_simd import v_exp_row, v_fill, v_rowmaxmin
from ._kernel_stream_simd import v_scores, v_wsum1, v_wsum2, v_wsum3, v_wsum4

#: keys per tile: the tile's scores, 8 TILE_KEYS float64 (8 KiB), stay in the L1 cache
TILE_KEYS = 128
#: blocks of eight queries per task of the parallel loop
QUERY_TILE_BLOCKS = 4
LANES = 8


def stream_supported(ints) -> bool:
    """Whether a pack (its ``ints``) has a streamed form: the attention field without a layer-norm
    placement, not the rescaled "mean" form (any mask the packs hold: full, causal)."""
    return (int(ints[KIND]) == KIND_ATTENTION and int(ints[PLACEMENT]) == PL_POST
            and int(ints[RESCALED]) == 0)


def stream_work_length(ints, l: int, d: int) -> int:
    """Length of the float64 scratch vector of :func:`evaluate_streamed` for tokens (l, d):
    P(t), U(t) (h d d each), the values u, the update f and W f (l d each) -- O(l d), no (l, l)."""
    h = max(int(ints[H]), 1)
    return 2 * h * d * d + 3 * l * d


@njit(parallel=True)
def evaluate_streamed(op, t, y, b, ints, floats, per, work, out):
    """:func:`~riemattn.dynamics.kernels.evaluate` of the attention field, streamed (module docstring):
    ``op`` RHS (F, (l, d)), UPDATE (f), RHS_DIFF (F, as RHS), BLOCK (the ``"layer"`` step's end); the
    Jacobian and the time derivative are not streamed (``out`` is set to NaN: the engine runs this
    kernel for explicit steppers only). ``work``: float64 of :func:`stream_work_length`."""
    l, d = y.shape
    n = l * d
    y1 = y.reshape(n)
    o1 = out.reshape(n)
    if op == OP_BLOCK:
        ln_block(t, y1, ints, floats, o1)
        return
    if op != OP_RHS and op != OP_UPDATE and op != OP_RHS_DIFF:
        for m in range(n):
            o1[m] = np.nan
        return
    h = max(ints[H], 1)
    dd = d * d
    oP, oU = 0 * h, h * dd
    ou, of = 2 * h * dd, 2 * h * dd + n
    pk, uk, hP, hU = ints[P_KIND], ints[U_KIND], ints[P_HEADS], ints[U_HEADS]
    # (not the rescaled form, stream_supported: P's scale is beta)
    cP, cU, beta, pscale = load_heads(t, ints, source(ints[BETA_LOC], floats, per, b),
                                      source(ints[P_LOC], floats, per, b), source(ints[U_LOC], floats, per, b),
                                      pk, uk, hP, hU, ints[RESCALED] != 0, d, work, oP, work, oU)
    causal = ints[MASK] == MASK_CAUSAL
    mean = ints[NORM] == NORM_MEAN
    s = norm_scale(ints)
    parallel = ints[STREAM_TILES] == 2  # (riemattn.solvers.compiled._stream.TILES)
    nb = (l + LANES - 1) // LANES
    nt = (nb + QUERY_TILE_BLOCKS - 1) // QUERY_TILE_BLOCKS
    npair = (nt + 1) // 2
    for m in range(n):
        work[of + m] = 0.0
    for e in range(h):
        Pe = oP + (e if hP > 1 else 0) * dd
        if uk == SRC_IDENTITY:
            for m in range(n):
                work[ou + m] = y1[m]
        elif uk == SRC_SCALAR:
            for m in range(n):
                work[ou + m] = cU * y1[m]
        else:
            rows_times(work, oU + (e if hU > 1 else 0) * dd, y1, 0 * l, work, ou, l, d)
        if parallel:
            for k in numba.prange(npair):
                _tile_pair(k, nt, y1, work, Pe, ou, of, l, d, pk == SRC_SCALAR, cP, causal, mean, s)
        else:
            for k in range(npair):
                _tile_pair(k, nt, y1, work, Pe, ou, of, l, d, pk == SRC_SCALAR, cP, causal, mean, s)
    if op == OP_UPDATE or ints[MANIFOLD] == MAN_FLAT:
        for m in range(n):
            o1[m] = work[of + m]
    else:  # F = (I - y y^T W) f, W f into the slot after f
        tangent_rows(ints, floats, y1, work, of, work, of + n, o1, l, d)


@njit()
def _tile_pair(k, nt, y, w, Pe, ou, of, l, d, scalar, cP, causal, mean, s):
    """Query tiles k and nt - 1 - k (one task of the parallel loop): their rows' head update added to
    w[of:] (rows of other tiles untouched). Scratch of its own (the tasks run on several threads)."""
    S = np.empty(LANES * TILE_KEYS)
    st = np.empty(LANES * (6 + d))  # q (d vectors), then the running max, shift, sum, tile max, tile min
    acc = np.empty(LANES * d)
    _query_tile(k, y, w, Pe, ou, of, l, d, scalar, cP, causal, mean, s, S, st, acc)
    if nt - 1 - k != k:
        _query_tile(nt - 1 - k, y, w, Pe, ou, of, l, d, scalar, cP, causal, mean, s, S, st, acc)


@njit()
def _query_tile(tile, y, w, Pe, ou, of, l, d, scalar, cP, causal, mean, s, S, st, acc):
    """The blocks of eight queries of one query tile (see :func:`evaluate_streamed`)."""
    oq, om, osh, oz = 0 * d, LANES * d, LANES * d + 8, LANES * d + 16  # q, running max, shift, sum
    vals = w[ou:ou + l * d]
    nb = (l + LANES - 1) // LANES
    for blk in range(tile * QUERY_TILE_BLOCKS, min(nb, (tile + 1) * QUERY_TILE_BLOCKS)):
        i0 = blk * LANES
        nr = min(LANES, l - i0)
        for r in range(LANES):  # q_i = P^T y_i (beta folded in), lanes past the last token repeat it
            i = min(i0 + r, l - 1)
            for c in range(d):
                if scalar:
                    qc = cP * y[i * d + c]
                else:
                    qc = 0.0
                    for a in range(d):
                        qc += w[Pe + a * d + c] * y[i * d + a]
                st[oq + c * LANES + r] = qc
            st[om + r] = -math.inf
            st[osh + r] = 0.0 if mean else -math.inf
            st[oz + r] = 0.0
        for m in range(LANES * d):
            acc[m] = 0.0
        jend = i0 if causal else l
        for j0 in range(0, jend, TILE_KEYS):
            nk = min(TILE_KEYS, jend - j0)
            v_scores(S, 0 * nk, st, oq, y, j0 * d, d, nk)
            _keys(S, nk, j0, st, acc, vals, d, mean)
        if causal:  # the block's own keys i0 .. i0 + nr - 1; lane r takes keys <= i0 + r
            v_scores(S, 0 * nr, st, oq, y, i0 * d, d, nr)
            for jj in range(nr):
                for r in range(jj):
                    S[jj * LANES + r] = -math.inf
            _keys(S, nr, i0, st, acc, vals, d, mean)
        for r in range(nr):
            sh = st[osh + r]
            if mean:
                scale = 1.0 / l if sh == 0.0 else math.exp(sh) / l
            else:
                scale = 1.0 / (s * st[oz + r])
            for c in range(d):
                w[of + (i0 + r) * d + c] += acc[c * LANES + r] * scale


@njit()
def _keys(S, nk, j0, st, acc, vals, d, mean):
    """One tile of nk keys from key j0, its scores in S (key-major, eight lanes): the running maximum,
    shift, sum and weighted sums of the block's eight rows (in st and acc) updated."""
    om, osh, oz, omx, omn = LANES * d, LANES * d + 8, LANES * d + 16, LANES * d + 24, LANES * d + 32
    v_fill(st, omx, -math.inf)
    v_fill(st, omn, math.inf)
    v_rowmaxmin(S, 0 * nk, LANES + 0 * nk, nk, st, omx, st, omn)
    fast = True
    for r in range(LANES):
        m = st[om + r]
        x = st[omx + r]
        if x > m or x != x:  # NaN stays the maximum once met
            m = x
        st[om + r] = m
        shift = m
        if mean and m < MEAN_DIRECT_MAX:
            shift = 0.0
        old = st[osh + r]
        if shift != old:  # (a NaN shift: NaN from here on)
            alpha = math.exp(old - shift)
            st[oz + r] *= alpha
            for c in range(d):
                acc[c * LANES + r] *= alpha
            st[osh + r] = shift
        if not (st[omn + r] - shift >= -EXP_FAST_MAX and x - shift <= EXP_FAST_MAX):
            fast = False
    if fast:
        v_exp_row(S, 0 * nk, nk, st, osh, st, oz)
    else:
        for j in range(nk):
            for r in range(LANES):
                e = math.exp(S[j * LANES + r] - st[osh + r])
                S[j * LANES + r] = e
                st[oz + r] += e
    c = 0 * d
    while c + 4 <= d:
        v_wsum4(acc, 0 * c, S, 0 * c, vals, j0 * d, c, d, nk)
        c += 4
    if d - c == 3:
        v_wsum3(acc, 0 * c, S, 0 * c, vals, j0 * d, c, d, nk)
    elif d - c == 2:
        v_wsum2(acc, 0 * c, S, 0 * c, vals, j0 * d, c, d, nk)
    elif d - c == 1:
        v_wsum1(acc, 0 * c, S, 0 * c, vals, j0 * d, c, d, nk)
