"""pymanopt's optimizers on riemattn's manifolds: the Rayleigh quotient x^T A x on E_W is minimized
by the generalized eigenvector of (A, W) with the smallest eigenvalue (scipy.linalg.eigh)."""

import numpy as np
import pytest
import scipy.linalg

import riemattn as ra
from riemattn.errors import InputTypeError

pymanopt = pytest.importorskip("pymanopt")
from riemattn.geometry.pymanopt_adapter import to_pymanopt


def problem(M, A):
    @pymanopt.function.numpy(M)
    def cost(x):
        return float(np.sum(x * (x @ A)))

    @pymanopt.function.numpy(M)
    def egrad(x):
        return 2 * x @ A

    @pymanopt.function.numpy(M)
    def ehess(x, u):
        return 2 * u @ A

    return pymanopt.Problem(M, cost, euclidean_gradient=egrad, euclidean_hessian=ehess)


def setup(d=5, cond=20.0, seed=0):
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.normal(size=(d, d)))
    W = (Q * np.geomspace(1.0, cond, d)) @ Q.T
    B = rng.normal(size=(d, d))
    return W, B + B.T


@pytest.mark.parametrize("metric", ["W", "euclidean"])
def test_trust_regions_find_the_generalized_eigenvector(metric):
    W, A = setup()
    M = to_pymanopt(ra.Ellipsoid(W, metric=metric))
    np.random.seed(1)
    res = pymanopt.optimizers.TrustRegions(verbosity=0, min_gradient_norm=1e-11).run(problem(M, A))
    lam, V = scipy.linalg.eigh(A, W)
    v, x = V[:, 0], res.point  # eigh normalizes v^T W v = 1: v is on E_W
    assert min(np.abs(x - v).max(), np.abs(x + v).max()) < 1e-9
    assert abs(res.cost - lam[0]) < 1e-12 * max(1.0, abs(lam[0]))
    assert res.iterations < 30  # superlinear convergence: the Hessian is right


def test_products_of_ellipsoids_the_token_configuration_space():
    W, A = setup(d=4, seed=2)
    M = to_pymanopt(ra.Ellipsoid(W), tokens=3)
    assert M.dim == 9 and M.random_point().shape == (3, 4)
    np.random.seed(3)
    res = pymanopt.optimizers.TrustRegions(verbosity=0, min_gradient_norm=1e-11).run(problem(M, A))
    lam, V = scipy.linalg.eigh(A, W)
    for x in res.point:  # every token at +-v
        assert min(np.abs(x - V[:, 0]).max(), np.abs(x + V[:, 0]).max()) < 1e-9
    np.testing.assert_allclose(res.cost, 3 * lam[0], rtol=1e-12)


def test_sphere_gradient_matches_pymanopt_sphere_and_bad_input():
    from pymanopt.manifolds import Sphere as PSphere

    rng = np.random.default_rng(4)
    M, P = to_pymanopt(ra.Sphere(3)), PSphere(4)
    x = P.random_point()
    g, h, u = rng.normal(size=4), rng.normal(size=4), P.random_tangent_vector(x)
    np.testing.assert_allclose(M.euclidean_to_riemannian_gradient(x, g), P.euclidean_to_riemannian_gradient(x, g),
                               atol=1e-15)
    np.testing.assert_allclose(M.euclidean_to_riemannian_hessian(x, g, h, u),
                               P.euclidean_to_riemannian_hessian(x, g, h, u), atol=1e-15)
    np.testing.assert_allclose(M.exp(x, u), P.exp(x, u), atol=1e-15)
    np.testing.assert_allclose(M.retraction(x, u), P.retraction(x, u), atol=1e-15)
    with pytest.raises(InputTypeError, match="manifold"):
        to_pymanopt(np.eye(3))
