"""Ellipsoid/Sphere contract: projection, tangent projection, membership, random points, geomstats."""

import geomstats.backend as gs
import numpy as np
import pytest
from geomstats.geometry.hypersphere import Hypersphere
from hypothesis import given
from hypothesis import strategies as st

import riemattn as ra
from riemattn.errors import InputTypeError, ValidationError


def random_spd(rng, d, cond=10.0):
    Q, _ = np.linalg.qr(rng.normal(size=(d, d)))
    return (Q * np.geomspace(1.0, cond, d)) @ Q.T


@given(seed=st.integers(0, 2**32 - 1), d=st.integers(2, 7), batch=st.integers(1, 4), ell=st.integers(1, 6))
def test_ellipsoid_contract(seed, d, batch, ell):
    rng = np.random.default_rng(seed)
    E = ra.Ellipsoid(random_spd(rng, d))
    x = rng.normal(size=(batch, ell, d))
    y = E.projection(x)
    # on the manifold, x^T W x = 1, and projection is idempotent
    assert np.all(E.belongs(y, atol=1e-12))
    assert E.belongs(y).shape == (batch, ell)
    np.testing.assert_allclose(np.einsum("...i,ij,...j->...", y, E.W, y), 1.0, atol=1e-13)
    np.testing.assert_allclose(E.projection(y), y, atol=1e-14)
    # projection is radial: y = x / |x|_W with |x|_W = sqrt(x^T W x)
    np.testing.assert_allclose(y * np.sqrt(np.einsum("...i,ij,...j->...", x, E.W, x))[..., None], x, atol=1e-12)
    # to_tangent: tangent (y^T W v = 0), idempotent, equal to (I - y y^T W) v
    v = rng.normal(size=x.shape)
    tv = E.to_tangent(v, y)
    assert np.all(E.is_tangent(tv, y, atol=1e-12))
    np.testing.assert_allclose(np.einsum("...i,ij,...j->...", y, E.W, tv), 0.0, atol=1e-13)
    np.testing.assert_allclose(E.to_tangent(tv, y), tv, atol=1e-14)
    expected = np.einsum("...ij,...j->...i", np.eye(d) - np.einsum("...i,...j->...ij", y, y @ E.W), v)
    np.testing.assert_allclose(tv, expected, atol=1e-13)
    # a non-tangent vector is detected
    assert not np.any(E.is_tangent(tv + y, y))


def test_random_points_belong():
    gs.random.seed(0)
    rng = np.random.default_rng(1)
    E = ra.Ellipsoid(random_spd(rng, 4))
    pts = E.random_uniform(50)
    assert pts.shape == (50, 4) and np.all(E.belongs(pts, atol=1e-12))
    assert E.random_point(3).shape == (3, 4) and np.all(E.belongs(E.random_point(3), atol=1e-12))
    assert not np.any(E.belongs(2 * pts))


def test_ellipsoid_identity_equals_sphere():
    rng = np.random.default_rng(2)
    d = 4
    E, S = ra.Ellipsoid(np.eye(d)), ra.Sphere(d - 1)
    assert isinstance(S, Hypersphere)
    x = rng.normal(size=(3, 5, d))
    y = S.projection(x)
    v = rng.normal(size=x.shape)
    np.testing.assert_allclose(E.projection(x), y, atol=1e-15)
    np.testing.assert_allclose(E.to_tangent(v, y), S.to_tangent(v, y), atol=1e-14)
    np.testing.assert_array_equal(E.belongs(y), S.belongs(y))
    np.testing.assert_array_equal(E.belongs(1.1 * y), S.belongs(1.1 * y))
    np.testing.assert_array_equal(E.is_tangent(v, y), S.is_tangent(v, y))
    tv = S.to_tangent(v, y)
    np.testing.assert_array_equal(E.is_tangent(tv, y), S.is_tangent(tv, y))
    np.testing.assert_allclose(E.norm(x), S.norm(x), atol=1e-15)
    # metric: inner product, exp, log and distance agree with geomstats' Hypersphere
    np.testing.assert_allclose(E.metric.inner_product(tv, tv, y), S.metric.inner_product(tv, tv, y), atol=1e-13)
    np.testing.assert_allclose(E.metric.exp(0.3 * tv, y), S.metric.exp(0.3 * tv, y), atol=1e-13)
    np.testing.assert_allclose(E.metric.dist(y[0, 0], y[0, 1]), S.metric.dist(y[0, 0], y[0, 1]), atol=1e-13)
    np.testing.assert_allclose(E.metric.log(y[0, 1], y[0, 0]), S.metric.log(y[0, 1], y[0, 0]), atol=1e-12)
    assert E.dim == S.dim == d - 1


def test_ellipsoid_metric_is_w_inner_product_and_exp_stays_on_manifold():
    rng = np.random.default_rng(3)
    E = ra.Ellipsoid(random_spd(rng, 3))
    y = E.projection(rng.normal(size=(4, 3)))
    v = E.to_tangent(rng.normal(size=(4, 3)), y)
    np.testing.assert_allclose(E.metric.inner_product(v, v, y), np.einsum("ni,ij,nj->n", v, E.W, v))
    z = E.metric.exp(v, y)
    assert np.all(E.belongs(z, atol=1e-12))
    # log inverts exp for short vectors, and dist = |v|_W
    np.testing.assert_allclose(E.metric.log(E.metric.exp(0.2 * v, y), y), 0.2 * v, atol=1e-12)
    np.testing.assert_allclose(E.metric.dist(y, E.metric.exp(0.2 * v, y)), 0.2 * E.norm(v), atol=1e-12)


@pytest.mark.parametrize(
    "W, match",
    [
        (np.array([[1.0, 2.0], [0.0, 1.0]]), "symmetric"),
        (np.array([[1.0, 0.0], [0.0, -1.0]]), "positive definite"),
        (np.array([[1.0, np.nan], [np.nan, 1.0]]), "NaN"),
        (np.ones((2, 3)), "square"),
    ],
)
def test_ellipsoid_rejects_bad_W(W, match):
    with pytest.raises(ValidationError, match=match) as info:
        ra.Ellipsoid(W)
    assert "W" in str(info.value)


def test_sphere_rejects_bad_dim():
    with pytest.raises(InputTypeError, match="dim"):
        ra.Sphere(2.5)
    with pytest.raises(ValidationError, match="dim"):
        ra.Sphere(0)


def test_projection_of_zero_raises():
    with pytest.raises(ValidationError, match="zero"):
        ra.Ellipsoid(np.eye(3)).projection(np.zeros((2, 3)))
