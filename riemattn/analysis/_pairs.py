"""Sums over pairs of tokens in tiles: the double sums of the diagnostics in O(l) memory.

Private module of :mod:`riemattn.analysis` (used by ``_energy``, ``gradients`` and
``diagnostics``). A double sum sum_{i,j} f(<a_i, b_j>) over l tokens is taken over tiles of
``TILE`` rows by ``TILE`` columns, so no l x l array exists: at most ``TILE**2`` entries per
configuration, and ``_BLOCK`` entries for the configurations of a batch together. Up to ``TILE``
tokens there is one tile, which is the whole l x l matrix: the same computation as an untiled sum.

Order (fixed, so results do not depend on the batch or on anything but l): the row tiles in
order, within each the column tiles in order; a tile's sum is the library's sum of that tile.
A symmetric kernel (f(<a_i, b_j>) = f(<a_j, b_i>), e.g. b = a or b = a P with P symmetric) is
summed over the tiles on and above the diagonal, those above counted twice: half the work, the
same sum up to rounding (<a_i, b_j> and <a_j, b_i> are equal in exact arithmetic).

Written with the namespace of the tokens (autograd.numpy for NumPy arrays and autograd's boxes,
torch's for tensors), so the sums stay differentiable; no in-place updates.
"""

from __future__ import annotations

import autograd.numpy as anp
import numpy as np

from .._backend import is_torch, namespace

__all__ = ["FLUSH_BOUND", "TILE", "chunked", "flush", "pair_logsumexp", "pair_sum", "row_sums"]

#: Rows and columns of a tile (a 512 kB float64 block, in L2; measured at l = 20 000 on S^2: 256 took
#: 0.7 s for energy, 1024 0.8-3 s, 512 7-12 s -- BLAS on 512-row blocks, shared cores).
TILE = 256
#: Entries of the largest block (configurations x rows x columns) made at once.
_BLOCK = 1 << 18


#: NumPy's exp leaves its vector path for exponents below about -708 (subnormal results) and slows
#: from about -706 on (measured: 4 ns per element for exponents clamped at -708, 1.3 ns at -705 and
#: -700, 0.85 ns in [-8, 0]). Exponents below -700 are raised to -700 (e^-700 = 9.9e-305 < 2^-1008).
SUBNORMAL_EXPONENT = -700.0
#: Raising an exponent to SUBNORMAL_EXPONENT changes its term by less than 2^-1008: a sum of N terms
#: above N * FLUSH_BOUND (= N 2^-1008 / eps = 1.6e-288 N) changes by less than its rounding.
FLUSH_BOUND = 2.0**-1008 / 2.0**-52


def flush(S):
    """Exponents below SUBNORMAL_EXPONENT raised to it (NumPy tiles only, in place): no slow exp.

    Without it the rescaled energy at beta = 400 on S^2 (exponents down to -800) was 3x slower than
    at beta = 4. Each term moves by less than 2^-1008, so a sum above N * FLUSH_BOUND (N terms)
    changes by less than its rounding; callers recompute without this below that.
    """
    if type(S) is np.ndarray:
        np.maximum(S, SUBNORMAL_EXPONENT, out=S)
    return S


def ops(x):
    """The namespace for ``x``: autograd.numpy (NumPy arrays, autograd boxes) or torch's."""
    return namespace(x) if is_torch(x) else anp


def _mT(x):
    return x.transpose(-1, -2) if is_torch(x) else anp.swapaxes(x, -1, -2)


def chunked(fn, *arrays):
    """``fn(*chunks)`` over chunks of configurations of ``arrays`` (each of shape (..., l, d)),
    the results (shape (k,) or (k, l) per chunk of k configurations) joined and given the batch
    shape back: shape (...) or (..., l)."""
    x = arrays[0]
    batch, l = tuple(x.shape[:-2]), x.shape[-2]
    m = 1
    for s in batch:
        m *= s
    xp = ops(x)
    flat = [xp.reshape(a, (m, l, a.shape[-1])) for a in arrays]
    k = max(1, _BLOCK // (min(l, TILE) ** 2))
    parts = [fn(*(a[c:c + k] for a in flat)) for c in range(0, max(m, 1), k)]
    out = parts[0] if len(parts) == 1 else (xp.concat(parts) if is_torch(x) else anp.concatenate(parts))
    return xp.reshape(out, batch + tuple(out.shape[1:]))


def _tiles(l: int):
    """The tiles on and above the diagonal, row tiles in order, then column tiles: (rows, columns,
    whether on the diagonal)."""
    for i in range(0, l, TILE):
        for j in range(i, l, TILE):
            yield slice(i, i + TILE), slice(j, j + TILE), i == j


def pair_sum(a, b, term, *, strict: bool = False):
    """sum_{i,j} term(<a_i, b_j>) for a symmetric kernel, per configuration: shape (k,).

    ``a``, ``b`` : shape (k, l, d); ``term`` maps a block of inner products (k, r, c) to the
    block of terms. With ``strict``, the pairs i < j only (each once) instead of every (i, j).
    """
    xp = ops(a)
    total = 0.0
    for I, J, diag in _tiles(a.shape[-2]):
        T = term(a[:, I] @ _mT(b[:, J]))
        if diag and strict:
            r = T.shape[-1]
            T = T * (anp.arange(r)[:, None] < anp.arange(r)[None, :]) if not is_torch(T) else \
                T * (xp.arange(r, device=T.device)[:, None] < xp.arange(r, device=T.device)[None, :])
        s = xp.sum(T, axis=(-2, -1))
        total = total + (s if diag or strict else 2.0 * s)
    return total


def pair_logsumexp(a, b, exponent):
    """log sum_{i,j} exp(exponent(<a_i, b_j>)) for a symmetric kernel, per configuration, shape
    (k,): an online log-sum-exp (running maximum M and sum s of exp(S - M)) over the tiles."""
    xp = ops(a)
    M = s = None
    for I, J, diag in _tiles(a.shape[-2]):
        S = exponent(a[:, I] @ _mT(b[:, J]))
        mt = xp.max(xp.max(S, axis=-1), axis=-1)
        # exp(S - M) <= 1 and the final sum >= 1 (its largest term is e^0): flush moves it below rounding
        if M is None:
            M, s = mt, xp.sum(xp.exp(flush(S - mt[..., None, None])), axis=(-2, -1))
            continue
        new = xp.maximum(M, mt)
        st = xp.sum(xp.exp(flush(S - new[..., None, None])), axis=(-2, -1))
        s = s * xp.exp(M - new) + (1.0 if diag else 2.0) * st
        M = new
    return M + xp.log(s)


def row_sums(a, b, term):
    """sum_j term(<a_i, b_j>) for each row i, for a symmetric kernel, per configuration: shape
    (k, l). The tiles on and above the diagonal, each giving its row sums to its rows and its
    column sums to its columns' rows (half the work); a row's parts are added in a fixed order (the
    tiles of its column, then of its row)."""
    xp = ops(a)
    l = a.shape[-2]
    acc = [0.0] * (-(-l // TILE))
    for I, J, diag in _tiles(l):
        T = term(a[:, I] @ _mT(b[:, J]))
        acc[I.start // TILE] = acc[I.start // TILE] + xp.sum(T, axis=-1)
        if not diag:
            acc[J.start // TILE] = acc[J.start // TILE] + xp.sum(T, axis=-2)
    if len(acc) == 1:
        return acc[0]
    return xp.concat(acc, axis=-1) if is_torch(a) else anp.concatenate(acc, axis=-1)
