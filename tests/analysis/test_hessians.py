"""Riemannian Hessians of E_beta and V_P (riemattn.analysis.hessians) against independent references.

References: (1) autodiff in a chart -- the Hessian in coordinates u of the chart
psi(u) = pi_W(x + sum_a u_a X_a), H_ab = d^2(f o psi)/du_a du_b - Gamma^k_ab d(f o psi)/du_k with the
Christoffel symbols of the pulled-back weighted metric, everything by autograd from f and the weights
written here; (2) central finite differences of the Riemannian gradient (induced metric, or any
metric at a critical point where the Hessian's bilinear form is metric-independent).
"""

from __future__ import annotations

import autograd.numpy as anp
import numpy as np
import pytest
from autograd import grad, hessian, jacobian

from riemattn.analysis.hessians import (
    energy_hessian,
    potential_hessian,
    spectrum,
    symmetry_algebra,
)
from riemattn.errors import InputTypeError, ValidationError


def _spd(rng, d):
    A = rng.standard_normal((d, d))
    return A @ A.T / d + np.eye(d)


def _on(x, W):
    return x / np.sqrt(np.einsum("...i,ij,...j->...", x, W, x))[..., None]


def _tangent(rng, x, W, k):
    V = rng.standard_normal((k,) + x.shape)
    return V - np.sum((x @ W) * V, axis=-1, keepdims=True) * x


def chart_hessian(f, weights, x, W, X):
    """Bilinear Hessian of f at x on (E_W)^n, metric sum_i c_i <., .>_W, on the basis X (m, n, d)."""
    m = X.shape[0]

    def psi(u):
        y = x + anp.tensordot(u, X, axes=1)
        return y / anp.sqrt(anp.sum(anp.dot(y, W) * y, axis=-1))[:, None]

    def gmat(u):
        J = jacobian(psi)(u)  # (n, d, m)
        c = weights(psi(u))
        JW = anp.einsum("nda,de->nea", J, W)
        return anp.einsum("n,nda,ndb->ab", c, JW, J)

    F = lambda u: f(psi(u))
    u0 = np.zeros(m)
    g0, dg = gmat(u0), jacobian(gmat)(u0)  # dg[a, b, k] = d g_ab / du_k
    # Gamma_{l a b} = 1/2 (d_a g_lb + d_b g_la - d_l g_ab), indices (l, a, b)
    gamma_low = 0.5 * (np.einsum("lba->lab", dg) + np.einsum("lab->lab", dg)
                       - np.einsum("abl->lab", dg))
    Gam = np.linalg.solve(g0, gamma_low.reshape(m, -1)).reshape(m, m, m)
    return hessian(F)(u0) - np.einsum("kab,k->ab", Gam, grad(F)(u0))


def kernel_f(beta, P, s):
    return lambda y: s / (2 * beta) * anp.sum(anp.exp(beta * anp.dot(anp.dot(y, P), y.T)))


def kernel_w(beta, P, gamma):
    return lambda y: gamma * anp.sum(anp.exp(beta * anp.dot(anp.dot(y, P), y.T)), axis=1)


def const_w(c):
    return lambda y: c * anp.ones(y.shape[0])


CASES = [(model, geom) for model in ("standard", "usa", "sa") for geom in ("sphere", "ellipsoid")]


@pytest.mark.parametrize("model,geom", CASES)
def test_energy_hessian_matches_chart_autodiff(model, geom):
    rng = np.random.default_rng(hash((model, geom)) % 2**32)
    n, d, beta = 4, 3, 1.7
    W = np.eye(d) if geom == "sphere" else _spd(rng, d)
    x = _on(rng.standard_normal((n, d)), W)
    X = _tangent(rng, x, W, n * (d - 1))
    H = energy_hessian(x, beta, model, W=None if geom == "sphere" else W)
    ours = H.inner(X[:, None], H(X)[None])  # (m, m): <X_a, Hess X_b>
    c = {"standard": const_w(1.0), "usa": const_w(1.0 / n), "sa": kernel_w(beta, np.eye(d), 1 / n**2)}
    ref = chart_hessian(kernel_f(beta, np.eye(d), 1 / n**2), c[model], x, W, X)
    assert np.max(np.abs(ours - ref)) <= 1e-7 * np.max(np.abs(ref))
    assert np.max(np.abs(ours - ours.T)) <= 1e-12 * np.max(np.abs(ref))


@pytest.mark.parametrize("normalization", ["paper", "softmax", "none"])
def test_potential_hessian_matches_chart_autodiff(normalization):
    rng = np.random.default_rng(7)
    n, d = 3, 3
    P = _spd(rng, d)
    x = _on(rng.standard_normal((n, d)), P)
    X = _tangent(rng, x, P, n * (d - 1))
    H = potential_hessian(x, P, normalization)
    ours = H.inner(X[:, None], H(X)[None])
    gamma = {"paper": np.sqrt(d), "softmax": 1.0}
    w = const_w(1.0) if normalization == "none" else kernel_w(1.0, P, gamma[normalization])
    ref = chart_hessian(kernel_f(1.0, P, -1.0), w, x, P, X)
    assert np.max(np.abs(ours - ref)) <= 1e-7 * np.max(np.abs(ref))


def _fd_hessian(H_of, x, W, V, h=1e-5):
    """Central differences of the Riemannian gradient along pi_W(x + t V), projected."""
    gp = H_of(_on(x + h * V, W)).grad
    gm = H_of(_on(x - h * V, W)).grad
    D = (gp - gm) / (2 * h)
    return D - np.sum((x @ W) * D, axis=-1, keepdims=True) * x


@pytest.mark.parametrize("geom", ["sphere", "ellipsoid"])
@pytest.mark.parametrize("model", ["standard", "usa"])
def test_energy_hessian_matches_finite_differences(model, geom):
    rng = np.random.default_rng(3)
    n, d, beta = 5, 3, 2.5
    W = np.eye(d) if geom == "sphere" else _spd(rng, d)
    Wk = None if geom == "sphere" else W
    x = _on(rng.standard_normal((n, d)), W)
    H_of = lambda y: energy_hessian(y, beta, model, W=Wk)
    for V in _tangent(rng, x, W, 3):
        ours, fd = H_of(x)(V), _fd_hessian(H_of, x, W, V)
        assert np.max(np.abs(ours - fd)) <= 1e-7 * np.max(np.abs(ours))


def test_sa_hessian_at_critical_point_matches_finite_differences():
    """At a critical point (regular pentagon) the SA Hessian is the round one times n^2 / Z."""
    n, beta = 5, 1.3
    th = 2 * np.pi * np.arange(n) / n
    x = np.stack([np.cos(th), np.sin(th)], -1)
    H = energy_hessian(x, beta, "sa")
    rng = np.random.default_rng(0)
    for V in _tangent(rng, x, np.eye(2), 3):
        fd = _fd_hessian(lambda y: energy_hessian(y, beta, "sa"), x, np.eye(2), V)
        assert np.max(np.abs(H(V) - fd)) <= 1e-7 * np.max(np.abs(H(V)))


def test_matrix_is_orthonormal_basis_representation_and_batched():
    rng = np.random.default_rng(1)
    x = _on(rng.standard_normal((2, 4, 3)), np.eye(3))
    H = energy_hessian(x, 1.0, "sa")
    M, B = H.matrix()
    assert M.shape == (2, 8, 8) and B.shape == (2, 8, 4, 3)
    G = H._gram(B, B)
    assert np.allclose(G, np.eye(8), atol=1e-12)
    for k in range(2):
        Hk = energy_hessian(x[k], 1.0, "sa")
        assert np.allclose(Hk.matrix()[0], M[k], atol=1e-13)


def test_symmetry_modes_consensus_and_stabilizer():
    # consensus on S^2: the stabilizer of a point is SO(2): orbit dimension 3 - 1 = 2
    x = np.tile([0.0, 0.0, 1.0], (3, 1))
    sp = spectrum(energy_hessian(x, 1.0, "usa"))
    assert sp.n_symmetry == 2 and sp.n_positive == 0 and sp.n_zero == 0
    # generic configuration on S^2: orbit dimension 3; not critical, so the modes are not in the kernel
    rng = np.random.default_rng(0)
    y = _on(rng.standard_normal((4, 3)), np.eye(3))
    sp = spectrum(energy_hessian(y, 1.0, "usa"))
    assert sp.n_symmetry == 3 and sp.eigenvalues.size == 4 * 2 - 3
    assert symmetry_algebra(np.eye(4), np.eye(4)).shape == (6, 4, 4)
    rng = np.random.default_rng(2)
    assert symmetry_algebra(_spd(rng, 3), _spd(rng, 3)).shape[0] == 0


def test_bad_input_raises_package_errors():
    x = np.tile([1.0, 0.0], (3, 1))
    with pytest.raises(ValidationError, match="model"):
        energy_hessian(x, 1.0, "nope")
    with pytest.raises(ValidationError, match="not on"):
        energy_hessian(2 * x, 1.0)
    with pytest.raises(ValidationError, match="beta"):
        energy_hessian(x, -1.0)
    with pytest.raises(InputTypeError):
        energy_hessian("x", 1.0)
    with pytest.raises(ValidationError, match="P"):
        energy_hessian(x, 1.0, P=-np.eye(2))
    with pytest.raises(ValidationError, match="W"):
        energy_hessian(x, 1.0, W=np.eye(3))
    with pytest.raises(ValidationError, match="d >= 2"):
        energy_hessian(np.ones((3, 1)), 1.0)
    with pytest.raises(ValidationError, match="one configuration"):
        spectrum(energy_hessian(np.stack([x, x]), 1.0))
    with pytest.raises(ValidationError, match="normalization"):
        potential_hessian(x, np.eye(2), "nope")
    with pytest.raises(ValidationError, match="P"):
        symmetry_algebra(np.eye(2), np.eye(3))
