"""The vectorised row operations of the compiled attention kernel (riemattn.dynamics.kernels._kernel_rows)
against NumPy: exp, the scores, the weighted sums of the values and q_i = P^T y_i.

Tolerances: ``exp_shifted``'s polynomial is a fixed sequence of IEEE operations (no fused multiply-add,
no reassociation: the same bits on every CPU); measured at most 2.2 ulp from ``numpy.exp`` on [-708, 0]
(the module docstring). NumPy's own ``exp`` is within 1 ulp of the exact value and differs between
CPUs (SIMD or scalar), so the test allows 4 ulp. The sums are compared with NumPy's products (BLAS,
another summation order): a sum of N products in two orders differs by at most 2 N eps times the
sum of the absolute values of its terms.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from riemattn.dynamics.kernels import _kernel_rows as R

EPS = np.finfo(float).eps


def _exp_row(values, shift):
    """exp_shifted on a copy of ``values``, given their minimum and maximum (NaN if one is NaN)."""
    row = np.array(values, dtype=float)
    lo, hi = (math.nan, math.nan) if np.isnan(row).any() else (row.min(), row.max())
    z = R.exp_shifted(row, row.size, float(shift), lo, hi)
    return row, z


@pytest.mark.parametrize("lo, hi", [(-708.0, 0.0), (-1.0, 0.0), (-700.0, 700.0), (-1e-300, 1e-300)])
def test_exp_row_is_within_4_ulp_of_numpy(lo, hi):
    x = np.linspace(lo, hi, 20001)
    row, z = _exp_row(x, 0.0)
    ref = np.exp(x)
    assert np.all(np.abs(row - ref) <= 4 * EPS * ref)
    # the returned sum is the stored values added in index order
    acc = 0.0
    for v in row:
        acc += v
    assert z == acc


def test_exp_row_shift_and_short_rows():
    x = np.array([3.0, 1.5, -2.0, 0.25] * 8)  # 32 values: the vectorised path
    row, _ = _exp_row(x, 3.0)
    assert np.all(np.abs(row - np.exp(x - 3.0)) <= 4 * EPS * np.exp(x - 3.0))
    assert row[0] == 1.0  # exp(0) is exact: k = 0, r = 0
    short, _ = _exp_row(x[:13], 3.0)  # shorter than EXP_VECTOR_MIN = 16: math.exp
    assert short.tolist() == [math.exp(v - 3.0) for v in x[:13]]
    mixed, _ = _exp_row(x[:21], 3.0)  # two vectors of 8 by the polynomial, the 5 after them by math.exp
    assert mixed[16:].tolist() == [math.exp(v - 3.0) for v in x[16:21]]
    assert np.all(np.abs(mixed[:16] - np.exp(x[:16] - 3.0)) <= 4 * EPS * np.exp(x[:16] - 3.0))


@pytest.mark.parametrize("bad", [-709.0, -800.0, -np.inf, np.inf, np.nan, 710.0])
def test_exp_row_outside_the_fast_range_is_math_exp(bad):
    """An argument whose 2^k would leave the normal range (or inf, NaN): the whole row through
    math.exp, so subnormal results, 0, inf and NaN are those of exp."""
    x = np.concatenate([np.linspace(-3.0, 0.0, 31), [bad]])
    row, z = _exp_row(x, 0.0)
    # libm's exp, as numba calls it (Python's math.exp raises where it overflows to inf)
    expected = [math.nan if math.isnan(v) else math.inf if v > 709.8 else math.exp(v) for v in x]
    np.testing.assert_array_equal(row, expected)
    acc = 0.0
    for v in expected:
        acc += v
    assert z == acc or (math.isnan(z) and math.isnan(acc))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("l, d", [(1, 1), (5, 3), (32, 16), (17, 40)])
def test_scores_weighted_rows_and_transposed_rows_equal_numpy(l, d, causal):
    rng = np.random.default_rng(l * 100 + d)
    y = rng.standard_normal((l, d))
    P = rng.standard_normal((d, d))
    # q_i = P^T y_i, with P stored after 3 unrelated numbers (an offset as in the scratch vector)
    M = np.concatenate([[7.0, 7.0, 7.0], P.ravel()])
    q = np.full(2 + l * d, 9.0)
    R.transposed_rows(M, 3, y.ravel(), q, 2, l, d)
    assert q[:2].tolist() == [9.0, 9.0]
    q_ref = y @ P
    bound = 2 * d * EPS * (np.abs(y) @ np.abs(P))
    assert np.all(np.abs(q[2:].reshape(l, d) - q_ref) <= bound)
    # q transposed from the tokens transposed: the same sums in the same order, the same bits
    yT = np.concatenate([[5.0], y.T.ravel()])
    qT = np.full(1 + l * d, 3.0)
    R.transposed_cols(M, 3, yT, 1, qT, 1, l, d)
    np.testing.assert_array_equal(qT[1:].reshape(d, l), q[2:].reshape(l, d).T)
    # scores A_ij = q_i . y_j for j < jmax(i), 0 beyond, from q as rows or transposed
    A = np.full(1 + l * l, 4.0)
    R.scores(q, 2, d, 1, yT, 1, A, 1, l, d, causal)
    AT = np.full(1 + l * l, 4.0)
    R.scores(qT, 1, 1, l, yT, 1, AT, 1, l, d, causal)
    np.testing.assert_array_equal(A, AT)
    Q = q[2:].reshape(l, d)
    S_ref, S_abs = Q @ y.T, np.abs(Q) @ np.abs(y.T)
    keep = np.tril(np.ones((l, l), bool)) if causal else np.ones((l, l), bool)
    S = A[1:].reshape(l, l)
    assert A[0] == 4.0 and np.all(S[~keep] == 0.0)
    assert np.all(np.abs(S - S_ref)[keep] <= 2 * d * EPS * S_abs[keep])
    # f_i = sum_{j < jmax(i)} A_ij u_j; the masked entries are never read (NaN there)
    W = np.where(keep, rng.random((l, l)), 0.0)
    Aw = np.concatenate([[1.0], np.where(keep, W, np.nan).ravel()])
    f = np.full(3 + l * d, 2.0)
    R.weighted_rows(Aw, 1, y.ravel(), 0, f, 3, l, d, causal)
    f_ref, f_abs = W @ y, W @ np.abs(y)
    assert f[:3].tolist() == [2.0, 2.0, 2.0]
    assert np.all(np.abs(f[3:].reshape(l, d) - f_ref) <= 2 * l * EPS * f_abs)


@pytest.mark.parametrize("mean", [False, True])
@pytest.mark.parametrize("jmax, l", [(1, 1), (3, 7), (32, 32), (40, 40)])
def test_normalize_row_is_the_softmax_or_the_mean_row(mean, jmax, l):
    rng = np.random.default_rng(jmax)
    s = 1.7
    x = rng.standard_normal(jmax) * 5
    row = x.copy()
    R.normalize_row(row, jmax, mean, s, l, 700.0)
    if mean:
        ref = np.exp(x) / l
    else:
        e = np.exp(x - x.max())
        ref = e / (s * e.sum())
    # exp within 4 ulp (above), the sum of jmax terms, the division and the product: (4 + jmax + 2) eps
    assert np.all(np.abs(row - ref) <= (6 + jmax) * EPS * ref)


def test_normalize_row_mean_overflow_gives_inf():
    """"mean" rows whose exp(max) overflows: exp(max) / l is inf, the maximum's weight inf and the
    others 0 * inf = NaN (as before the vectorised exp; the NumPy field raises, the engines then
    report the failure)."""
    row = np.array([800.0, 0.0] + [1.0] * 30)
    R.normalize_row(row, 32, True, 0.0, 32, 700.0)
    assert row[0] == np.inf and np.isnan(row[1:]).all()


@pytest.mark.parametrize("l", [1, 3, 10, 16, 32, 33])
def test_softmax_rows_is_normalize_row_for_every_row(l):
    """One exp over the shifted matrix: the softmax of every row (NumPy's, to exp's 4 ulp and the
    row's sum); rows of 16 or more whose length is a multiple of 8 take the polynomial for every
    value, alone or in the matrix, so they agree bit for bit."""
    rng = np.random.default_rng(l)
    s = 1.3
    A = rng.standard_normal((l, l)) * 4
    got = np.concatenate([[2.5], A.ravel()])
    R.softmax_rows(got, 1, l, s)
    assert got[0] == 2.5
    got = got[1:].reshape(l, l)
    e = np.exp(A - A.max(axis=1, keepdims=True))
    ref = e / (s * e.sum(axis=1, keepdims=True))
    assert np.all(np.abs(got - ref) <= (6 + l) * EPS * ref)
    if l >= 16 and l % 8 == 0:
        for i in range(l):
            row = A[i].copy()
            R.normalize_row(row, l, False, s, l, 700.0)
            np.testing.assert_array_equal(got[i], row)


@pytest.mark.parametrize("bad", [-1e4, np.inf, -np.inf, np.nan])
def test_softmax_rows_with_extreme_scores_is_the_row_by_row_math_exp(bad):
    """A score far below its row's maximum, an infinity or NaN: the whole matrix through math.exp,
    each row as normalize_row computes it alone (exp(x - m), the sum in order, 1 / (s z))."""
    l = 20
    A = np.random.default_rng(3).standard_normal((l, l))
    A[7, 3] = bad
    got = A.copy().ravel()
    with np.errstate(invalid="ignore"):
        R.softmax_rows(got, 0, l, 1.0)
    for i in range(l):
        m = np.nan if np.isnan(A[i]).any() else A[i].max()
        with np.errstate(invalid="ignore"):
            ex = [math.nan if math.isnan(v - m) else math.exp(v - m) for v in A[i]]
        z = 0.0
        for v in ex:
            z += v
        want = [v * (1.0 / (1.0 * z)) for v in ex]
        np.testing.assert_array_equal(got[i * l:(i + 1) * l], want)


@pytest.mark.parametrize("l", [1, 3, 6, 10, 16, 32, 33])
def test_mean_rows_is_the_mean_row_for_every_row(l):
    """One exp over the whole "mean" matrix: exp(score) / l for every row (NumPy's, to exp's 4 ulp
    and the product by 1 / l, whose rounding 1 / l itself adds: 6 eps); rows of 16 or more whose
    length is a multiple of 8 take the polynomial for every value, alone or in the matrix, so they
    agree bit for bit with normalize_row."""
    rng = np.random.default_rng(l)
    A = rng.standard_normal((l, l)) * 4
    got = np.concatenate([[2.5], A.ravel()])
    assert R.mean_rows(got, 1, l, 700.0)
    assert got[0] == 2.5
    got = got[1:].reshape(l, l)
    ref = np.exp(A) / l
    assert np.all(np.abs(got - ref) <= 6 * EPS * ref)
    if l >= 16 and l % 8 == 0:
        for i in range(l):
            row = A[i].copy()
            R.normalize_row(row, l, True, 0.0, l, 700.0)
            np.testing.assert_array_equal(got[i], row)


@pytest.mark.parametrize("big", [700.0, 800.0, np.inf, np.nan])
def test_mean_rows_leaves_a_row_that_needs_its_shift(big):
    """A score at or above the direct limit (or NaN): False, the matrix untouched, so that the rows one
    by one shift that row (an overflow of exp(max) then gives inf, test above)."""
    l = 6
    A = np.random.default_rng(4).standard_normal(l * l)
    A[13] = big
    got = A.copy()
    assert not R.mean_rows(got, 0, l, 700.0)
    np.testing.assert_array_equal(got, A)


@pytest.mark.parametrize("low", [-1e4, -np.inf])
def test_mean_rows_with_a_score_out_of_the_fast_range_is_the_row_by_row_math_exp(low):
    """A score below the polynomial's range: every value through math.exp, exp(x - 0) * (1 / l), as
    normalize_row computes a short "mean" row alone (the same bits)."""
    l = 6
    A = np.random.default_rng(5).standard_normal((l, l))
    A[2, 4] = low
    got = A.copy().ravel()
    assert R.mean_rows(got, 0, l, 700.0)
    for i in range(l):
        row = A[i].copy()
        R.normalize_row(row, l, True, 0.0, l, 700.0)
        np.testing.assert_array_equal(got[i * l:(i + 1) * l], row)
