r"""Row operations of the compiled attention kernel, written so that LLVM vectorises them (private).

Each inner loop runs over a slice taken from the scratch vector with an index from ``range(n)``
(an index known to be non-negative: numba adds no wrap-around of negative indices, and the loop
reads and writes consecutive addresses). Every element is still computed by the same sequence of
IEEE operations, in a fixed order, vector lanes or not (no ``fastmath``: no reassociation, no
contraction into fused multiply-adds): the results do not depend on the CPU's vector width.

Every function here is inlined by numba into its caller (``inline="always"``, on numba's IR, before
typing): a call per row operation cost about a fifth of a small field's evaluation, and in the
kernels specialised to the tokens' shape (:mod:`riemattn.dynamics.kernels._kernel_shaped`) their
callers' constants reach the loops. Measured on the 2-core development machine (2026-11-27, the
code before and after alternated four times in fresh processes, best of 300 calls each): one
hemisphere trajectory (10 x 3, two time-varying heads, dopri5, 241 steps) 3.71-3.90 -> 3.28-3.54 ms
a call, ``usa(9, 3)`` with ``"auto"`` 3.65-3.86 -> 3.42-3.57 ms; the generic kernel's compilation
20 -> 23 s, a shape's 8 -> 11 s. (Inlining :func:`~riemattn.dynamics.kernels._kernel_attention.forward` as well,
at its three call sites, gained another 3 % for a compilation of 150 s: not done.)

:func:`exp_shifted` evaluates ``exp`` in the loop itself, with the classical reduction
``x = k ln 2 + r``, ``k = floor(x / ln 2 + 1/2)``, ``|r| <= ln 2 / 2`` (``ln 2`` split in two
parts, Cody & Waite, so that ``k ln2_hi`` is exact for ``|k| < 2^21``), the Taylor polynomial of
degree 13 in Horner form (truncation ``|r|^14 / 14! < 5e-18`` relative) and ``2^k`` added to the
exponent bits. Measured against ``numpy.exp`` on 2e5 points of [-708, 0]: at most 2.2 ulp,
1.5 ulp on [-1, 0]. PyPI's llvmlite has no vector math library (SVML), so ``math.exp`` in a loop
stays a scalar call (about 4.5 ns each; the polynomial, vectorised, about 1.9 ns on 32 values).
The values after the last whole vector of 8, rows shorter than 16 (unless a whole matrix of rows is
exponentiated at once: :func:`softmax_rows`, :func:`mean_rows`), and rows with an argument outside
[-708, 708] (where ``2^k`` leaves the normal range), an infinity or NaN go through ``math.exp``.

References
----------
W. J. Cody, W. Waite, *Software Manual for the Elementary Functions*, Prentice-Hall, 1980, ch. 6.
"""

from __future__ import annotations

import math

import numpy as np

from ._kernel_cache import jit_inline

LN2_HI = 6.93147180369123816490e-01  # ln 2 to 32 bits: k * LN2_HI is exact for |k| < 2^21
LN2_LO = 1.90821492927058770002e-10  # ln 2 - LN2_HI
INV_LN2 = 1.44269504088896338700e+00
EXP_FAST_MAX = 708.0  # |x| <= this: 2^k is a normal number for k = floor(x / ln 2 + 1/2)
EXP_LANES = 8  # the polynomial runs on whole vectors of 8 values (the loop's scalar remainder would cost
# 13 ns a value against math.exp's 4.5; measured on the development machine: 1.9 ns a value on 32 values)
EXP_VECTOR_MIN = 16  # shorter rows: math.exp (measured there: 8 values by the polynomial in 4 ns each,
# 10 or 12 values (8 + the rest by math.exp) slower than math.exp on all; 16 or more faster)


@jit_inline
def exp_shifted(row, n, shift, lo, hi):
    """row[:n] <- exp(row[:n] - shift); returns their sum (the stored values added in index order).

    ``row`` is a contiguous slice; ``lo`` and ``hi`` are its minimum and maximum (``hi`` NaN if a
    value is NaN), which the callers' own scans of the row (for its maximum) give."""
    z = 0.0
    if n < EXP_VECTOR_MIN or not (lo - shift >= -EXP_FAST_MAX and hi - shift <= EXP_FAST_MAX):
        for j in range(n):  # (the comparisons are False for NaN and inf - inf)
            x = math.exp(row[j] - shift)
            row[j] = x
            z += x
        return z
    nv = n - n % EXP_LANES  # whole vectors: the polynomial; the rest (< 8 values): math.exp
    for j in range(nv, n):
        row[j] = math.exp(row[j] - shift)
    bits = row.view(np.int64)
    for j in range(nv):
        v = row[j] - shift
        k = math.floor(v * INV_LN2 + 0.5)
        r = (v - k * LN2_HI) - k * LN2_LO
        p = 1.0 / 6227020800.0
        p = 1.0 / 479001600.0 + r * p
        p = 1.0 / 39916800.0 + r * p
        p = 1.0 / 3628800.0 + r * p
        p = 1.0 / 362880.0 + r * p
        p = 1.0 / 40320.0 + r * p
        p = 1.0 / 5040.0 + r * p
        p = 1.0 / 720.0 + r * p
        p = 1.0 / 120.0 + r * p
        p = 1.0 / 24.0 + r * p
        p = 1.0 / 6.0 + r * p
        p = 0.5 + r * p
        p = 1.0 + r * p
        row[j] = 1.0 + r * p
        bits[j] += np.int64(k) << 52
    for j in range(n):
        z += row[j]
    return z


@jit_inline
def transposed_rows(M, om, y, out, oo, l, d):
    """out[oo + i d + c] = (M^T y_i)_c = sum_a M[a, c] y_i[a] (a in order): M (d, d) row-major at
    M[om:], y flat (l d). Rows a .. a + 3 of M times y_i[a..a+3] are added, in order, to every q_i
    before row a + 4 (for each element the same sum, in the same order, as one row at a time)."""
    for m in range(l * d):
        out[oo + m] = 0.0
    a = 0
    while a + 4 <= d:
        M0 = M[om + a * d:om + a * d + d]
        M1 = M[om + (a + 1) * d:om + (a + 1) * d + d]
        M2 = M[om + (a + 2) * d:om + (a + 2) * d + d]
        M3 = M[om + (a + 3) * d:om + (a + 3) * d + d]
        for i in range(l):
            b = i * d + a
            y0, y1, y2, y3 = y[b], y[b + 1], y[b + 2], y[b + 3]
            qi = out[oo + i * d:oo + i * d + d]
            for c in range(d):
                qi[c] = (((qi[c] + M0[c] * y0) + M1[c] * y1) + M2[c] * y2) + M3[c] * y3
        a += 4
    while a < d:
        Ma = M[om + a * d:om + a * d + d]
        for i in range(l):
            yia = y[i * d + a]
            qi = out[oo + i * d:oo + i * d + d]
            for c in range(d):
                qi[c] += Ma[c] * yia
        a += 1


@jit_inline
def transposed_cols(M, om, yT, oyT, qT, oqT, l, d):
    """qT[oqT + c l + i] = (M^T y_i)_c = sum_a M[a, c] y_i[a] (a in order): q transposed (d, l),
    from the tokens transposed (d, l) at yT[oyT:] -- the same values as :func:`transposed_rows`
    with the loop over the tokens vectorised (longer than the one over the components for l > d)."""
    for m in range(l * d):
        qT[oqT + m] = 0.0
    a = 0
    while a + 4 <= d:
        y0 = yT[oyT + a * l:oyT + a * l + l]
        y1 = yT[oyT + (a + 1) * l:oyT + (a + 1) * l + l]
        y2 = yT[oyT + (a + 2) * l:oyT + (a + 2) * l + l]
        y3 = yT[oyT + (a + 3) * l:oyT + (a + 3) * l + l]
        for c in range(d):
            b = om + a * d + c
            m0, m1, m2, m3 = M[b], M[b + d], M[b + 2 * d], M[b + 3 * d]
            qc = qT[oqT + c * l:oqT + c * l + l]
            for i in range(l):
                qc[i] = (((qc[i] + m0 * y0[i]) + m1 * y1[i]) + m2 * y2[i]) + m3 * y3[i]
        a += 4
    while a < d:
        ya = yT[oyT + a * l:oyT + a * l + l]
        for c in range(d):
            mac = M[om + a * d + c]
            qc = qT[oqT + c * l:oqT + c * l + l]
            for i in range(l):
                qc[i] += mac * ya[i]
        a += 1


@jit_inline
def scores(q, oq, si, sc, yT, oyT, A, oA, l, d, causal):
    """A[oA + i l + j] = q_i . y_j = sum_c q_i[c] y_j[c] (c in order) for j < jmax(i) (i + 1 if
    ``causal``, else l), 0 beyond; q_i[c] = q[oq + i si + c sc] (rows: si = d, sc = 1; transposed:
    si = 1, sc = l), yT the tokens transposed (d, l) at yT[oyT:]. Components c .. c + 3 are added,
    in order, to every score before c + 4 (no chain of dependent additions in the inner loop, and a
    quarter of the passes over the matrix); three components left are added in one pass."""
    for m in range(l * l):
        A[oA + m] = 0.0
    c = 0
    while c + 4 <= d:
        y0 = yT[oyT + c * l:oyT + c * l + l]
        y1 = yT[oyT + (c + 1) * l:oyT + (c + 1) * l + l]
        y2 = yT[oyT + (c + 2) * l:oyT + (c + 2) * l + l]
        y3 = yT[oyT + (c + 3) * l:oyT + (c + 3) * l + l]
        for i in range(l):
            b = oq + i * si + c * sc
            q0, q1, q2, q3 = q[b], q[b + sc], q[b + 2 * sc], q[b + 3 * sc]
            jmax = i + 1 if causal else l
            row = A[oA + i * l:oA + i * l + jmax]
            for j in range(jmax):
                row[j] = (((row[j] + q0 * y0[j]) + q1 * y1[j]) + q2 * y2[j]) + q3 * y3[j]
        c += 4
    if d - c == 3:  # three components left: in one pass
        y0 = yT[oyT + c * l:oyT + c * l + l]
        y1 = yT[oyT + (c + 1) * l:oyT + (c + 1) * l + l]
        y2 = yT[oyT + (c + 2) * l:oyT + (c + 2) * l + l]
        for i in range(l):
            b = oq + i * si + c * sc
            q0, q1, q2 = q[b], q[b + sc], q[b + 2 * sc]
            jmax = i + 1 if causal else l
            row = A[oA + i * l:oA + i * l + jmax]
            for j in range(jmax):
                row[j] = ((row[j] + q0 * y0[j]) + q1 * y1[j]) + q2 * y2[j]
        c += 3
    while c < d:
        yc = yT[oyT + c * l:oyT + c * l + l]
        for i in range(l):
            qc = q[oq + i * si + c * sc]
            jmax = i + 1 if causal else l
            row = A[oA + i * l:oA + i * l + jmax]
            for j in range(jmax):
                row[j] += qc * yc[j]
        c += 1


@jit_inline
def max_min(row, n):
    """(maximum, minimum) of row[:n] (a contiguous slice); the maximum is NaN once a NaN is met."""
    m, lo = -math.inf, math.inf
    for j in range(n):
        acc = row[j]
        if acc > m or acc != acc:  # NaN stays the maximum once met
            m = acc
        if acc < lo:
            lo = acc
    return m, lo


@jit_inline
def normalize_row(row, jmax, mean, s, l, direct_max):
    """The attention row from its scores row[:jmax]: softmax rows (``mean`` False) divided by
    ``s`` after the shift by their maximum; "mean" rows exp(score) / l, shifted by the maximum
    only where it is at least ``direct_max`` (so that an overflow of exp(max) gives inf)."""
    m, lo = max_min(row, jmax)
    if mean and jmax < EXP_VECTOR_MIN:  # a short row: libm's exp and the factor in one pass
        shift, em = (0.0, 1.0 / l) if m < direct_max else (m, math.exp(m) / l)
        for j in range(jmax):
            row[j] = math.exp(row[j] - shift) * em
        return
    if mean:
        if m < direct_max:
            exp_shifted(row, jmax, 0.0, lo, m)
            em = 1.0 / l
        else:
            em = math.exp(m) / l
            exp_shifted(row, jmax, m, lo, m)
        for j in range(jmax):
            row[j] *= em
        return
    z = exp_shifted(row, jmax, m, lo, m)
    r = 1.0 / (s * z)
    for j in range(jmax):
        row[j] *= r


@jit_inline
def mean_rows(A, oA, l, direct_max):
    """:func:`normalize_row` ("mean") for every row of a full (not causal) matrix A[oA:oA + l l]:
    exp(score) / l with one ``exp`` over the whole matrix (no row is shifted when every score is below
    ``direct_max``, so the values are those of the rows one by one; a matrix of at least
    :data:`EXP_VECTOR_MIN` values runs the vectorised polynomial, however short its rows). Returns
    False, the matrix untouched, where a score reaches ``direct_max`` or is NaN (the rows one by one
    then shift that row)."""
    n = l * l
    M = A[oA:oA + n]
    hi, lo = max_min(M, n)
    if not hi < direct_max:
        return False
    exp_shifted(M, n, 0.0, lo, hi)
    em = 1.0 / l
    for m in range(n):
        M[m] *= em
    return True


@jit_inline
def softmax_rows(A, oA, l, s):
    """:func:`normalize_row` (softmax) for every row of a full (not causal) matrix A[oA:oA + l l], with
    one ``exp`` over the whole matrix after each row is shifted by its maximum in place (the same
    values, ``x - m`` then ``exp(. - 0)``): rows shorter than :data:`EXP_VECTOR_MIN` also run the
    vectorised polynomial."""
    lo, hi = math.inf, 0.0
    for i in range(l):
        row = A[oA + i * l:oA + i * l + l]
        m, rlo = max_min(row, l)
        for j in range(l):
            row[j] -= m
        if rlo - m < lo or rlo - m != rlo - m:
            lo = rlo - m  # (NaN where m is NaN or infinite: every row then goes through math.exp)
    exp_shifted(A[oA:oA + l * l], l * l, 0.0, lo, hi)
    for i in range(l):
        row = A[oA + i * l:oA + i * l + l]
        z = 0.0
        for j in range(l):
            z += row[j]
        r = 1.0 / (s * z)
        for j in range(l):
            row[j] *= r


@jit_inline
def weighted_rows(A, oA, u, ou, f, of_, l, d, causal):
    """f[of_ + i d:][:d] = sum_{j < jmax(i)} A[oA + i l + j] u_j (j in order), u_j = u[ou + j d:][:d];
    jmax(i) = i + 1 if ``causal``, else l (the entries beyond are not read). Tokens are added four
    at a time, in order, to every f_i (for each element the same sum, in the same order)."""
    for m in range(l * d):
        f[of_ + m] = 0.0
    j = 0
    while j + 4 <= l:
        u0 = u[ou + j * d:ou + j * d + d]
        u1 = u[ou + (j + 1) * d:ou + (j + 1) * d + d]
        u2 = u[ou + (j + 2) * d:ou + (j + 2) * d + d]
        u3 = u[ou + (j + 3) * d:ou + (j + 3) * d + d]
        i0 = 0
        if causal:  # rows j .. j + 2 take only the block's tokens up to themselves
            for i in range(j, j + 3):
                fi = f[of_ + i * d:of_ + i * d + d]
                for k in range(j, i + 1):
                    a_ik = A[oA + i * l + k]
                    uk = u[ou + k * d:ou + k * d + d]
                    for a in range(d):
                        fi[a] += a_ik * uk[a]
            i0 = j + 3
        for i in range(i0, l):
            r = oA + i * l + j
            a0, a1, a2, a3 = A[r], A[r + 1], A[r + 2], A[r + 3]
            fi = f[of_ + i * d:of_ + i * d + d]
            for a in range(d):
                fi[a] = (((fi[a] + a0 * u0[a]) + a1 * u1[a]) + a2 * u2[a]) + a3 * u3[a]
        j += 4
    while j < l:
        uj = u[ou + j * d:ou + j * d + d]
        for i in range(j if causal else 0, l):
            a_ij = A[oA + i * l + j]
            fi = f[of_ + i * d:of_ + i * d + d]
            for a in range(d):
                fi[a] += a_ij * uj[a]
        j += 1
