"""The streamed attention kernel (riemattn.dynamics.kernels._kernel_stream) against the NumPy field.

Tolerance (``_bound``). Both codes form, per row i and head, the weights ``e^{s_ij - m} / (s z)``
(or ``e^{s_ij} / l`` for "mean") and the sums ``f_i = sum_j alpha_ij u_j``, in different orders:
the streamed kernel adds the keys in order, one tile at a time, and multiplies what it has summed
by ``e^{m_old - m}`` whenever a tile raises the row's maximum (at most once per tile: ``ceil(l /
TILE_KEYS)`` times, each a relative rounding of about 2 eps of every term summed so far); NumPy
sums with its own order (pairwise / BLAS). A sum of N terms computed in two orders differs by at
most about ``2 N eps`` times the sum of the absolute values of its terms (Higham, *Accuracy and
Stability of Numerical Algorithms*, 2002, eq. 4.4); the weights carry a relative error of eps
times the size of the scores' terms (``exp`` turns the absolute rounding of a score into a
relative error of the weight), ``kappa = d^2 max|beta P| max|y|^2``; the row's normalisation (z, a
sum of l positive terms: l eps relative) scales all of them. So each compared entry gets
``8 eps (N + kappa)`` times the sum of the absolute values of its terms ``sum_j |alpha_ij| |u_j|``
(the conditioning of the row's sum; N = h l + 2 d + 2 ceil(l / TILE_KEYS) + 2), times the
tangent projection's growth ``1 + d |W| |y|^2``. The factor 8: both implementations round, the
projection adds two more products of the same size. Nothing is widened to pass: measured errors
are 10-100 times below.
"""

from __future__ import annotations

import math

import numba
import numpy as np
import pytest

import riemattn as ra
from riemattn.dynamics import kernels as kk
from riemattn.dynamics.kernels import _kernel_layout as K
from riemattn.dynamics.kernels import _kernel_stream as ks
from riemattn.dynamics.schedules import TimeVaryingHeads

EPS = np.finfo(float).eps


def _stream(field, t, y, op=kk.RHS, tiles=1):
    """One streamed evaluation of one trajectory y (l, d); ``tiles`` 1: on this thread, 2: query tiles
    on numba's threads."""
    y = np.ascontiguousarray(y, dtype=float)
    l, d = y.shape
    pack = kk.pack_field(field, y.shape)
    ints = pack.ints.copy()
    ints[K.STREAM_TILES] = tiles
    work = np.full(ks.stream_work_length(ints, l, d), np.nan)  # it must not read scratch it did not write
    out = np.full((l, d), np.nan)
    ks.evaluate_streamed(op, float(t), y, 0, ints, pack.floats, pack.per, work, out)
    return out


def _bound(field, t, y):
    """The error bound of F and f (module docstring)."""
    l, d = y.shape
    A = field.attention(t, y)  # (h, l, l)
    h = A.shape[-3]
    U = np.broadcast_to(field.U(t), (h, d, d))
    u = np.abs(np.einsum("hab,jb->hja", U, y))
    absf = np.einsum("hij,hja->ia", np.abs(A), u)
    Wn = np.max(np.sum(np.abs(field.manifold.W), axis=-1))
    ymax = np.max(np.abs(y))
    kappa = d * d * np.max(np.abs(field.P(t))) * ymax ** 2
    n_terms = l * h + 2 * d + 2 * math.ceil(l / ks.TILE_KEYS) + 2
    return 8 * EPS * (n_terms + kappa) * np.max(absf) * (1.0 + d * Wn * ymax ** 2) + 1e-300


def _check(field, y, t=0.3):
    bound = _bound(field, t, y)
    np.testing.assert_allclose(_stream(field, t, y), field(t, y), rtol=0, atol=bound)
    np.testing.assert_allclose(_stream(field, t, y, kk.UPDATE), field.update(t, y), rtol=0, atol=bound)


@pytest.mark.parametrize("normalization", ["paper", "softmax", "mean"])
@pytest.mark.parametrize("mask", ["full", "causal"])
@pytest.mark.parametrize("l", [1, 7, 8, 33, 300])  # one token, one partial block, one block, tiles of keys
def test_agrees_with_numpy(normalization, mask, l):
    rng = np.random.default_rng(l)
    d = 4
    field = ra.AttentionField(rng.normal(size=(2, d, d)), beta=1.5, mask=mask, normalization=normalization)
    _check(field, field.manifold.projection(rng.normal(size=(l, d))))


@pytest.mark.parametrize("case", ["sa", "U matrix", "U scalar", "ellipsoid", "time-varying", "d=2", "d=9"])
def test_forms(case):
    """Every P and U kind of the packs, an ellipsoid, components not a multiple of four."""
    rng = np.random.default_rng(1)
    l, d = 45, 3
    if case == "sa":
        field = ra.sa(4.0, d)
    elif case == "U matrix":
        field = ra.AttentionField(rng.normal(size=(2, d, d)), rng.normal(size=(2, d, d)), beta=2.0)
    elif case == "U scalar":
        field = ra.AttentionField(np.eye(d), 0.5 * np.eye(d), beta=2.0, mask="causal")
    elif case == "ellipsoid":
        G = rng.normal(size=(d, d))
        field = ra.AttentionField(rng.normal(size=(d, d)), W=G @ G.T + d * np.eye(d), beta=1.0)
    elif case == "time-varying":
        P = TimeVaryingHeads(rng.normal(size=(2, d, d)), rng.normal(size=(2, 2, d, d)), np.array([1.0, 2.0]),
                             np.array([0.0, 1.0]))
        field = ra.AttentionField(P, beta=1.0, normalization="softmax")
    else:
        d = int(case[2:])
        field = ra.AttentionField(rng.normal(size=(d, d)) / np.sqrt(d), beta=3.0)
    _check(field, field.manifold.projection(rng.normal(size=(l, d))))


@pytest.mark.parametrize("normalization, beta", [("softmax", 500.0), ("paper", 2000.0), ("mean", 705.0)])
def test_large_scores(normalization, beta):
    """Scores beyond the polynomial's range (math.exp for those tiles) and "mean" rows whose maximum
    reaches MEAN_DIRECT_MAX (shifted by it)."""
    rng = np.random.default_rng(2)
    field = ra.AttentionField(np.eye(3), beta=beta, normalization=normalization)
    y = field.manifold.projection(rng.normal(size=(150, 3)))
    if normalization == "mean":  # values up to e^705 / l: compared relative to their size
        F, got = field(0.0, y), _stream(field, 0.0, y)
        assert np.all(np.isfinite(got))
        np.testing.assert_allclose(got, F, rtol=0, atol=_bound(field, 0.0, y))
    else:
        _check(field, y)


def test_mean_overflow_gives_inf():
    """A "mean" row whose e^max overflows gives inf (the NumPy field raises), as the generic kernel."""
    field = ra.AttentionField(np.eye(3), beta=800.0, normalization="mean")
    y = field.manifold.projection(np.random.default_rng(3).normal(size=(20, 3)))
    assert not np.all(np.isfinite(_stream(field, 0.0, y)))


@pytest.mark.parametrize("mask", ["full", "causal"])
def test_threads_do_not_change_bits(mask):
    """The same bits on this thread, and with the query tiles on 1 or 2 of numba's threads."""
    rng = np.random.default_rng(4)
    field = ra.AttentionField(rng.normal(size=(3, 3)), beta=2.0, mask=mask)
    y = field.manifold.projection(rng.normal(size=(1000, 3)))
    before = numba.get_num_threads()
    try:
        outs = [_stream(field, 0.0, y, tiles=1)]
        for n in (1, min(2, numba.config.NUMBA_NUM_THREADS)):
            numba.set_num_threads(n)
            outs.append(_stream(field, 0.0, y, tiles=2))
    finally:
        numba.set_num_threads(before)
    assert all(np.array_equal(outs[0], o) for o in outs[1:])


def test_block_and_unstreamed_ops():
    """BLOCK normalises the layer step's end; the Jacobian and time derivative are not streamed (NaN)."""
    field = ra.sa(1.0, 3)
    y = field.manifold.projection(np.random.default_rng(5).normal(size=(10, 3)))
    pack = kk.pack_field(field, y.shape)
    x = y + 0.1 * field.update(0.0, y)
    work = np.empty(ks.stream_work_length(pack.ints, 10, 3))
    out = x.copy()
    ks.evaluate_streamed(kk.BLOCK, 0.0, y, 0, pack.ints, pack.floats, pack.per, work, out)
    np.testing.assert_allclose(out, field.manifold.projection(x), rtol=0, atol=4 * EPS)
    assert np.isnan(_stream(field, 0.0, y, kk.TIME_DERIVATIVE)).all()


def test_scratch_is_linear_in_tokens():
    """No (l, l) array: the scratch of 10^5 tokens on S^2 is O(l d) (a few MB)."""
    pack = kk.pack_field(ra.sa(1.0, 3), (100_000, 3))
    assert ks.stream_work_length(pack.ints, 100_000, 3) * 8 < 8e6
    assert ks.stream_supported(pack.ints)
    assert not ks.stream_supported(kk.pack_field(ra.usa(1.0, 3, rescaled=True), (10, 3)).ints)
