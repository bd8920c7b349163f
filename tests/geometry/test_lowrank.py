"""Exact low-rank exponentials (riemattn.geometry.lowrank) against scipy.linalg.expm."""

import numpy as np
import pytest
import scipy.linalg

from riemattn.errors import ValidationError
from riemattn.geometry.lowrank import WOrthoBasis, expm_small_action, lowrank_expm_action, rank2_expm_action


def _spd(d, rng):
    B = rng.standard_normal((d, d)) / np.sqrt(d)
    return B @ B.T + 0.5 * np.eye(d)


def _dense(U, V, W):
    M = np.einsum("...ki,...kj->...ij", U, V)
    return (M - np.swapaxes(M, -1, -2)) @ W


@pytest.mark.parametrize("use_W", [False, True])
@pytest.mark.parametrize("d, s", [(3, 1), (3, 2), (3, 4), (5, 1), (7, 3), (20, 4), (64, 6)])
def test_lowrank_matches_expm(d, s, use_W):
    """Random combinations of s rank-2 generators (rank up to 2s, also beyond d), batched."""
    rng = np.random.default_rng(100 * d + s + use_W)
    worst = 0.0
    for _ in range(4):
        W = _spd(d, rng) if use_W else None
        U = rng.standard_normal((3, 2, s, d)) / np.sqrt(d)
        V = rng.standard_normal((3, 2, s, d)) / np.sqrt(d)
        x = rng.standard_normal((3, 2, d))
        A = _dense(U, V, np.eye(d) if W is None else W)
        ref = np.einsum("...ij,...j->...i", scipy.linalg.expm(A), x)
        out = lowrank_expm_action(U, V, x, W)
        worst = max(worst, float(np.max(np.abs(out - ref)) / max(1.0, np.max(np.abs(x)))))
    assert worst <= 1e-13


@pytest.mark.parametrize("use_W", [False, True])
def test_rank2_closed_form_matches_expm(use_W):
    rng = np.random.default_rng(5)
    d = 6
    W = _spd(d, rng) if use_W else None
    u, v, x = (rng.standard_normal((50, d)) for _ in range(3))
    A = _dense(u[:, None], v[:, None], np.eye(d) if W is None else W)
    ref = np.einsum("...ij,...j->...i", scipy.linalg.expm(A), x)
    np.testing.assert_allclose(rank2_expm_action(u, v, x, W), ref, atol=1e-13 * np.max(np.abs(ref)))
    np.testing.assert_allclose(
        rank2_expm_action(u, v, x, W, increment=True), ref - x, atol=1e-13 * np.max(np.abs(ref))
    )
    # degenerate generators (u parallel to v, or zero) act as the identity (to rounding)
    np.testing.assert_allclose(rank2_expm_action(2 * v, v, x, W), x, rtol=0, atol=1e-14 * np.max(np.abs(x)))
    np.testing.assert_array_equal(rank2_expm_action(0 * u, v, x, W), x)


def test_lie_euler_closed_form_is_geodesic():
    """For u = F tangent at y, v = y, x = y: cos(|F|) y + sin(|F|) F/|F| (great circle)."""
    rng = np.random.default_rng(6)
    y = rng.standard_normal((8, 5))
    y /= np.linalg.norm(y, axis=-1, keepdims=True)
    F = rng.standard_normal((8, 5))
    F -= np.sum(F * y, -1, keepdims=True) * y
    n = np.linalg.norm(F, axis=-1, keepdims=True)
    np.testing.assert_allclose(rank2_expm_action(F, y, y), np.cos(n) * y + np.sin(n) * F / n, atol=1e-15)


@pytest.mark.parametrize("d", [500, 4096])
def test_lowrank_large_d_against_embedded_reference(d):
    """At large d the reference is scipy expm of the k x k block: generators built inside a random
    k-dimensional subspace B, x = B a + x_perp, so exp(A) x = B expm(K) a + x_perp exactly."""
    rng = np.random.default_rng(d)
    s, k, n = 4, 9, 3
    B, _ = np.linalg.qr(rng.standard_normal((d, k)))
    u, v, a = rng.standard_normal((n, s, k)) / 2, rng.standard_normal((n, s, k)) / 2, rng.standard_normal((n, k))
    x_perp = rng.standard_normal((n, d))
    x_perp -= (x_perp @ B) @ B.T
    x = a @ B.T + x_perp
    K = _dense(u, v, np.eye(k))
    ref = np.einsum("nij,nj->ni", scipy.linalg.expm(K), a) @ B.T + x_perp
    out = lowrank_expm_action(u @ B.T, v @ B.T, x)
    assert np.max(np.abs(out - ref)) <= 1e-13 * max(1.0, np.max(np.abs(x)))


def test_expm_small_action_against_expm():
    """Skew generators (what the steppers pass) up to 1-norm ~60 (scaling and squaring) against an
    eigendecomposition of the Hermitian i K, and against scipy expm at moderate norm (scipy's
    expm itself errs by ~1e-13 at norm 6 and ~4e-13 at norm 60); general matrices of moderate norm."""
    rng = np.random.default_rng(8)
    X = rng.standard_normal((5, 6, 6))
    S = X - np.swapaxes(X, -1, -2)
    v = rng.standard_normal((5, 6))
    for scale in (0.0, 1e-3, 0.1, 0.7, 7.0):
        lam, Vec = np.linalg.eigh(1j * scale * S)
        E = (Vec * np.exp(-1j * lam)[:, None, :]) @ np.conj(np.swapaxes(Vec, -1, -2))
        ref = np.einsum("...ij,...j->...i", E, v).real
        out = expm_small_action(scale * S, v)
        assert np.max(np.abs(out - ref)) <= 1e-13, scale
    for M, scales in ((S, (1e-3, 0.1)), (X, (0.0, 0.05, 0.2))):
        for scale in scales:
            ref = np.einsum("...ij,...j->...i", scipy.linalg.expm(scale * M), v)
            out = expm_small_action(scale * M, v)
            assert np.max(np.abs(out - ref)) <= 1e-13 * max(1.0, np.max(np.abs(ref))), scale


def test_expm_small_action_large_generators():
    """1-norms of ~10^3 to 10^5 (a big trial step of an adaptive Lie method, USA at large beta):
    the exponentials are formed instead of 2^s repeated actions; the result is still a rotation of
    v (skew generators) and matches the eigendecomposition to rounding relative to the norm."""
    rng = np.random.default_rng(4)
    X = rng.standard_normal((5, 6, 6))
    S = X - np.swapaxes(X, -1, -2)
    v = rng.standard_normal((5, 6))
    for scale in (100.0, 1e4):
        norm = np.max(np.sum(np.abs(scale * S), axis=-2))
        lam, Vec = np.linalg.eigh(1j * scale * S)
        E = (Vec * np.exp(-1j * lam)[:, None, :]) @ np.conj(np.swapaxes(Vec, -1, -2))
        ref = np.einsum("...ij,...j->...i", E, v).real
        out = expm_small_action(scale * S, v)
        # both sides are backward stable: errors of a few tens of eps |K| |v| (measured: 6.5 eps at 1e2)
        assert np.max(np.abs(out - ref)) <= 1e-14 * norm * np.max(np.abs(v)), scale
        drift = np.abs(np.linalg.norm(out, axis=-1) - np.linalg.norm(v, axis=-1))  # a rotation
        assert np.max(drift) <= 1e-14 * norm * np.max(np.abs(v)), scale


def test_basis_is_w_orthonormal_and_drops_dependent_vectors():
    rng = np.random.default_rng(9)
    d = 4
    W = _spd(d, rng)
    basis = WOrthoBasis((3,), 6, d, W)
    vecs = rng.standard_normal((6, 3, d))
    vecs[5] = 2 * vecs[0] - vecs[2]  # dependent (and 4 < 6: two slots must be dropped)
    coords = [basis.add(v) for v in vecs]
    G = np.einsum("bid,de,bje->bij", basis.Q, W, basis.Q)
    used = np.einsum("bii->bi", G)
    np.testing.assert_allclose(G, np.einsum("bi,ij->bij", used, np.eye(6)), atol=1e-14)
    assert np.all(used.sum(-1) == 4)  # exactly d directions kept
    for v, c in zip(vecs, coords):
        np.testing.assert_allclose(basis.to_ambient(c), v, atol=1e-13)


def test_bad_shapes():
    x = np.ones((2, 3))
    with pytest.raises(ValidationError, match="same shape"):
        lowrank_expm_action(np.ones((2, 1, 3)), np.ones((2, 2, 3)), x)
    with pytest.raises(ValidationError, match="dimension"):
        lowrank_expm_action(np.ones((2, 1, 4)), np.ones((2, 1, 4)), x)
    with pytest.raises(ValidationError, match="W must have shape"):
        lowrank_expm_action(np.ones((2, 1, 3)), np.ones((2, 1, 3)), x, W=np.eye(4))
