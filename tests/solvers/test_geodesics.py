"""The ellipsoid with the induced (ambient dot product) metric: numerical geodesics checked against
closed forms (W = I: the sphere), first integrals (Clairaut on spheroids, Joachimsthal on triaxial
ellipsoids), the constraint and the speed, and log/exp inverse to each other."""

import numpy as np
import pytest
from geomstats.geometry.hypersphere import Hypersphere

import riemattn as ra
from riemattn.errors import ValidationError
from riemattn.solvers.geodesics import InducedEllipsoidMetric

from _tolerances import eps_bound


def random_spd(rng, d, cond):
    Q, _ = np.linalg.qr(rng.normal(size=(d, d)))
    return (Q * np.geomspace(1.0, cond, d)) @ Q.T


def test_identity_agrees_with_sphere_closed_forms():
    E, S = ra.Ellipsoid(np.eye(3), metric="euclidean"), Hypersphere(2)
    assert isinstance(E.metric, InducedEllipsoidMetric)
    rng = np.random.default_rng(0)
    x, y = S.projection(rng.normal(size=(3, 3))), S.projection(rng.normal(size=(3, 3)))
    v = S.to_tangent(rng.normal(size=(3, 3)), x)
    np.testing.assert_allclose(E.metric.exp(v, x), S.metric.exp(v, x), atol=1e-12)
    np.testing.assert_allclose(E.metric.log(y, x), S.metric.log(y, x), atol=1e-10)
    np.testing.assert_allclose(E.metric.dist(x, y), S.metric.dist(x, y), atol=1e-10)
    np.testing.assert_allclose(E.metric.parallel_transport(v, x, direction=v[::-1] - (v[::-1] * x).sum(-1)[:, None] * x),
                               S.metric.parallel_transport(v, x, direction=v[::-1] - (v[::-1] * x).sum(-1)[:, None] * x),
                               atol=1e-12)
    np.testing.assert_allclose(E.metric.inner_product(v, v, x), (v * v).sum(-1))


@pytest.mark.parametrize("a", [0.5, 2.0])  # oblate and prolate spheroids x^2 + y^2 + z^2 / a^2 = 1
def test_spheroid_geodesic_clairaut_over_a_full_circuit(a):
    E = ra.Ellipsoid(np.diag([1.0, 1.0, a ** -2]), metric="euclidean")
    x0 = E.projection(np.array([1.0, 0.0, 0.3 * a]))
    v0 = E.metric.to_tangent(np.array([0.0, 1.0, 0.8]), x0)
    v0 /= np.linalg.norm(v0)
    times = np.linspace(0.0, 2 * np.pi * max(1.0, a) * 1.3, 120)
    X, V = E.metric.geodesic_states(v0, x0, times)
    lon = np.unwrap(np.arctan2(X[:, 1], X[:, 0]))
    assert lon[-1] - lon[0] > 2 * np.pi  # a full circuit around the axis
    assert np.ptp(X[:, 2]) > 0.3 * a  # oscillating in latitude, not an equator
    # Clairaut: rho sin(psi) = (x v_y - y v_x) / |v| is constant
    clairaut = (X[:, 0] * V[:, 1] - X[:, 1] * V[:, 0]) / np.linalg.norm(V, axis=-1)
    assert np.abs(clairaut - clairaut[0]).max() < 1e-9
    # On the ellipsoid and at constant speed, unprojected. At rtol 1e-13 DOP853's truncation
    # error is below rounding here, so both invariants drift by rounding only. Each of the n
    # accepted steps forms y + h sum_i b_i k_i, a sum of 13 terms per component (12 stages): at
    # most 13 eps |y_j| (1 + O(h)) per component, sqrt(d) |y|_inf in norm. The position moves
    # g(x) = x^T W x by 2 (W x) . dx, |W x| <= |W|_2 |x|; the speed |v| by |dv|. Worst case, linear
    # in n: |g - 1| <= n 13 sqrt(d) 2 |W|_2 max|x|^2 eps and ||v| - 1| <= n 13 sqrt(d) max|v| eps.
    # Measured (a = 2, n = 185): 1.0e-12 and 4.8e-13 with AVX-512 kernels (bounds 3.2e-12, 9.2e-13).
    n, d = _dop853_steps(E, x0, v0, times[-1]), 3
    rx, rv, wn = float(np.abs(X).max()), float(np.abs(V).max()), float(np.linalg.norm(E.W, 2))
    assert np.abs(np.einsum("ti,ij,tj->t", X, E.W, X) - 1.0).max() <= eps_bound(n * 13 * np.sqrt(d), 2 * wn, rx ** 2)
    assert np.abs(np.linalg.norm(V, axis=-1) - 1.0).max() <= eps_bound(n * 13 * np.sqrt(d), 1.0, rv)

def _dop853_steps(E, x0, v0, t1):
    """The number of accepted DOP853 steps of the geodesic integration behind geodesic_states."""
    from riemattn.solvers.integrate import integrate

    M = E.metric
    sol = integrate(M._field, np.stack([x0, v0], axis=-2), (0.0, t1), stepper="dop853", rtol=M.rtol, atol=M.atol,
                    saveat=[t1])
    return sol.n_steps


@pytest.mark.slow
@pytest.mark.parametrize("d, cond", [(3, 10.0), (4, 30.0)])
def test_triaxial_geodesics_keep_joachimsthal_integral_and_constraint(d, cond):
    rng = np.random.default_rng(1)
    E = ra.Ellipsoid(random_spd(rng, d, cond), metric="euclidean")
    x0 = E.projection(rng.normal(size=(2, d)))
    v0 = E.metric.to_tangent(rng.normal(size=(2, d)), x0)
    v0 /= np.linalg.norm(v0, axis=-1, keepdims=True)
    times = np.linspace(0.0, 1.5, 16)
    X, V = E.metric.geodesic_states(v0, x0, times)
    W = E.W
    # Joachimsthal's first integral of geodesics on quadrics: |W x|^2 (v^T W v)
    joach = np.einsum("...i,...i->...", X @ W, X @ W) * np.einsum("...i,...i->...", V, V @ W)
    assert np.abs(joach - joach[0]).max() < 1e-9 * np.abs(joach[0]).max()
    # rounding accumulated over the DOP853 steps, as in the Clairaut test: 13 sqrt(d) eps per step and
    # component, times 2 |W|_2 max|x|^2 for the constraint and max|v| for the speed
    n = _dop853_steps(E, x0, v0, times[-1])
    rx, wn = float(np.abs(X).max()), float(np.linalg.norm(W, 2))
    assert np.abs(np.einsum("...i,ij,...j->...", X, W, X) - 1.0).max() <= eps_bound(n * 13 * np.sqrt(d), 2 * wn, rx ** 2)
    speed = np.linalg.norm(V, axis=-1)
    assert np.abs(speed - speed[0]).max() <= eps_bound(n * 13 * np.sqrt(d), 1.0, float(np.abs(V).max()))
    np.testing.assert_allclose(E.metric.exp(v0, x0), E.metric.geodesic_states(v0, x0, [0.0, 1.0])[0][-1], atol=1e-14)
    # the stated accuracy: an independent integrator (scipy's DOP853) of the same equation
    import scipy.integrate

    sol = scipy.integrate.solve_ivp(lambda t, s: E.metric._rhs(t, s.reshape(2, 2, d)).ravel(), (0.0, 1.5),
                                    np.stack([x0, v0], -2).ravel(), method="DOP853", rtol=1e-13, atol=1e-14)
    assert np.abs(sol.y[:, -1].reshape(2, 2, d)[:, 0] - X[-1]).max() < 1e-11


@pytest.mark.parametrize("d, cond", [(3, 1.0), (3, 10.0), (4, 10.0)])
def test_log_inverts_exp_inside_the_documented_domain(d, cond):
    rng = np.random.default_rng(2)
    W = random_spd(rng, d, cond) * (2.0 if cond == 1.0 else 1.0)
    E = ra.Ellipsoid(W, metric="euclidean")
    M = E.metric
    x = E.projection(rng.normal(size=(3, d)))
    v = M.to_tangent(rng.normal(size=(3, d)), x)
    v *= (0.95 * M.log_radius * np.array([0.2, 0.6, 1.0]) / np.linalg.norm(v, axis=-1))[:, None]
    y = M.exp(v, x)
    np.testing.assert_allclose(M.log(y, x), v, atol=1e-9)
    np.testing.assert_allclose(M.dist(x, y), np.linalg.norm(v, axis=-1), atol=1e-9)


def test_parallel_transport_along_a_geodesic_is_an_isometry():
    rng = np.random.default_rng(3)
    E = ra.Ellipsoid(random_spd(rng, 3, 10.0), metric="euclidean")
    M = E.metric
    x = E.projection(rng.normal(size=(2, 3)))
    w, u, z = (M.to_tangent(rng.normal(size=(2, 3)), x) for _ in range(3))
    pu, pz = M.parallel_transport(u, x, direction=w), M.parallel_transport(z, x, direction=w)
    end = M.exp(w, x)
    np.testing.assert_allclose((pu * pz).sum(-1), (u * z).sum(-1), atol=1e-12)
    np.testing.assert_allclose((pu * (end @ E.W)).sum(-1), 0.0, atol=1e-12)
    # the velocity of a geodesic is parallel along it
    _, V = M.geodesic_states(w, x, [0.0, 1.0])
    np.testing.assert_allclose(M.parallel_transport(w, x, direction=w), V[-1], atol=1e-12)
    with pytest.raises(ValidationError, match="base_point"):
        M.exp(w, 2 * x)
    with pytest.raises(ValidationError, match="metric"):
        ra.Ellipsoid(np.eye(3), metric="round")
