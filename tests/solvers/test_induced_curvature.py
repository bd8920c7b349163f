"""The induced metric of Ellipsoid(W, metric="euclidean") (issue 41, item 5 and its shape errors):
curvature from the Gauss equation against the classical Gaussian curvature of an ellipsoid, the
Gauss-Bonnet theorem, the round sphere and totally geodesic sections; exp of long vectors
(bounded: reduced modulo the perimeter in d = 2 against the ellipse's arclength, refused beyond
max_length in d >= 3)."""

import math

import numpy as np
import pytest
import scipy.optimize

import riemattn as ra
from riemattn.errors import ValidationError

from _tolerances import eps_bound


def induced(W):
    return ra.Ellipsoid(np.asarray(W, dtype=float), metric="euclidean")


def rotation(rng, d):
    Q, _ = np.linalg.qr(rng.normal(size=(d, d)))
    return Q


def classical_K(axes, p):
    """Gaussian curvature of x^2/a^2 + y^2/b^2 + z^2/c^2 = 1 at p (do Carmo, Curves and Surfaces, 3-3)."""
    a, b, c = axes
    x, y, z = np.moveaxis(p, -1, 0)
    return 1.0 / (a * a * b * b * c * c * (x * x / a**4 + y * y / b**4 + z * z / c**4) ** 2)


AXES = [(1.0, 2.0, 3.0), (0.5, 0.5, 2.0), (1.0, 1.0, 1.0), (3.0, 0.2, 1.1)]


@pytest.mark.parametrize("axes", AXES)
def test_gaussian_curvature_in_d3_is_the_classical_one(axes):
    """scalar / 2 and the sectional curvature of the tangent plane (the whole T_x in d = 3) equal
    the classical formula, for W diagonal and for W rotated (evaluated at the rotated points)."""
    rng = np.random.default_rng(0)
    W = np.diag(1.0 / np.square(axes))
    Q = rotation(rng, 3)
    cond = max(axes) ** 2 / min(axes) ** 2
    for Wm, R in ((W, np.eye(3)), (Q @ W @ Q.T, Q)):
        E = induced(Wm)
        p = ra.Ellipsoid(W).projection(rng.normal(size=(40, 3)))  # points of the diagonal ellipsoid
        x = p @ R.T
        K = classical_K(axes, p)
        a, b = E.metric.to_tangent(rng.normal(size=(40, 3)), x), E.metric.to_tangent(rng.normal(size=(40, 3)), x)
        # O(d^3) operations on W's entries, relative errors amplified by cond(W) (the shape operator
        # P W P / |W x| and its traces); 1e3 eps cond bounds both sides of the comparison
        tol = eps_bound(1000, cond=cond)
        assert np.abs(E.metric.scalar_curvature(x) / 2 / K - 1).max() <= tol
        assert np.abs(E.metric.sectional_curvature(a, b, x) / K - 1).max() <= tol * 10  # plane from 2 vectors


def test_gauss_bonnet():
    """int K dA = 4 pi over the ellipsoid (Gauss-Bonnet, genus 0), by Gauss-Legendre in theta and the
    trapezoidal rule in phi of the chart W^{-1/2} (sphere's spherical coordinates); both rules
    converge exponentially for this analytic integrand (measured: 4e-15 relative already at 48 x 96
    nodes, 3e-15 at 96 x 192); the bound is the rounding of the 96 x 192-term sum, 2 eps per term."""
    axes = (1.0, 1.7, 2.6)
    W = np.diag(1.0 / np.square(axes))
    E = induced(W)
    u, wu = np.polynomial.legendre.leggauss(96)
    th, wth = (u + 1) * math.pi / 2, wu * math.pi / 2
    ph = np.arange(192) * 2 * math.pi / 192
    T, P = np.meshgrid(th, ph, indexing="ij")
    s = np.stack([np.sin(T) * np.cos(P), np.sin(T) * np.sin(P), np.cos(T)], axis=-1)
    st = np.stack([np.cos(T) * np.cos(P), np.cos(T) * np.sin(P), -np.sin(T)], axis=-1)
    sp = np.stack([-np.sin(T) * np.sin(P), np.sin(T) * np.cos(P), 0 * T], axis=-1)
    a = np.array(axes)
    x, xt, xp = s * a, st * a, sp * a  # W^{-1/2} = diag(axes)
    dA = np.linalg.norm(np.cross(xt, xp), axis=-1)
    K = E.metric.scalar_curvature(x.reshape(-1, 3)).reshape(T.shape) / 2
    total = np.sum(wth[:, None] * K * dA) * (2 * math.pi / 192)
    assert total == pytest.approx(4 * math.pi, rel=eps_bound(2 * 96 * 192))


@pytest.mark.parametrize("d", [2, 3, 5])
@pytest.mark.parametrize("c", [1.0, 4.0])
def test_round_sphere(d, c):
    """W = c I is the sphere of radius c^{-1/2}: K = c on every plane, Ric = (n - 1) c P, scalar
    n (n - 1) c; for W = I every tensor equals the W-metric's closed form (an independent code path)."""
    rng = np.random.default_rng(d)
    E = induced(c * np.eye(d))
    n = d - 1
    x = E.projection(rng.normal(size=(10, d)))
    P = np.eye(d) - x[:, :, None] * x[:, None, :] * c
    assert np.abs(E.metric.scalar_curvature(x) - n * (n - 1) * c).max() <= eps_bound(20 * d, scale=n * n * c)
    assert np.abs(E.metric.ricci_tensor(x) - (n - 1) * c * P).max() <= eps_bound(20 * d, scale=n * c)
    if d > 2:
        a, b = E.metric.to_tangent(rng.normal(size=(10, d)), x), E.metric.to_tangent(rng.normal(size=(10, d)), x)
        assert np.abs(E.metric.sectional_curvature(a, b, x) - c).max() <= eps_bound(200, scale=c)
    if c == 1.0:
        S = ra.Sphere(n)
        for name in ("riemann_tensor", "covariant_riemann_tensor", "ricci_tensor", "scalar_curvature"):
            assert np.abs(getattr(E.metric, name)(x) - getattr(S.metric, name)(x)).max() <= eps_bound(20 * d), name
        u, v, w = (S.to_tangent(rng.normal(size=(10, d)), x) for _ in range(3))
        assert np.abs(E.metric.curvature(u, v, w, x) - S.metric.curvature(u, v, w, x)).max() <= eps_bound(20 * d, scale=10)


def test_totally_geodesic_section_in_d5():
    """For diagonal W the reflections x_k -> -x_k are isometries; their fixed set E_W cap span(e1, e2, e3)
    is totally geodesic, so the sectional curvature of a plane tangent to it is the Gaussian curvature
    of that 3-d ellipsoid (classical formula)."""
    rng = np.random.default_rng(1)
    lam = np.array([1.0, 0.3, 2.5, 0.7, 1.9])
    E = induced(np.diag(lam))
    axes = 1.0 / np.sqrt(lam[:3])
    p = ra.Ellipsoid(np.diag(lam[:3])).projection(rng.normal(size=(30, 3)))
    x = np.concatenate([p, np.zeros((30, 2))], axis=-1)
    g = np.concatenate([rng.normal(size=(30, 2, 3)), np.zeros((30, 2, 2))], axis=-1)
    a, b = E.metric.to_tangent(g[:, 0], x), E.metric.to_tangent(g[:, 1], x)
    K = E.metric.sectional_curvature(a, b, x)
    assert np.abs(K / classical_K(axes, p) - 1).max() <= eps_bound(2000, cond=lam.max() / lam.min())


def test_tensors_agree_with_each_other_and_with_curvature():
    """R(a, b)c from curvature() equals the contraction of riemann_tensor (geomstats' index
    convention R_ijk^l c^i a^j b^k), <R(a, b)b, a> / Gram = sectional_curvature, Ric = trace of R,
    scalar = trace of Ric -- at a point of a general ellipsoid in d = 4."""
    rng = np.random.default_rng(2)
    Q = rotation(rng, 4)
    W = Q @ np.diag([1.0, 2.0, 0.5, 3.0]) @ Q.T
    W = (W + W.T) / 2
    E = induced(W)
    x = E.projection(rng.normal(size=4))
    a, b, c = (E.metric.to_tangent(rng.normal(size=4), x) for _ in range(3))
    R = E.metric.riemann_tensor(x)
    Rabc = np.einsum("ijkl,i,j,k->l", R, c, a, b)
    tol = eps_bound(500, cond=np.linalg.cond(W), scale=10.0)
    assert np.abs(E.metric.curvature(a, b, c, x) - Rabc).max() <= tol
    gram = (a @ a) * (b @ b) - (a @ b) ** 2
    assert E.metric.sectional_curvature(a, b, x) == pytest.approx(E.metric.curvature(a, b, b, x) @ a / gram, rel=1e-12)
    assert np.abs(np.einsum("ijkj->ik", R) - E.metric.ricci_tensor(x)).max() <= tol
    assert E.metric.scalar_curvature(x) == pytest.approx(np.trace(E.metric.ricci_tensor(x)), rel=1e-13)


def test_curvature_bad_inputs():
    E = induced(np.diag([1.0, 2.0, 3.0]))
    x = E.projection(np.array([1.0, 1.0, 1.0]))
    a = E.metric.to_tangent(np.array([1.0, 0.0, 0.0]), x)
    with pytest.raises(ValidationError, match="linearly independent"):
        E.metric.sectional_curvature(a, 2 * a, x)
    with pytest.raises(ValidationError, match="base_point is required"):
        E.metric.scalar_curvature()
    with pytest.raises(ValidationError, match="base_point"):
        E.metric.ricci_tensor(np.ones(3))  # off the ellipsoid
    with pytest.raises(ValidationError, match="tangent_vec_a"):
        E.metric.curvature(np.zeros((4, 3)), a, a, np.stack([x] * 5))


# --- long geodesics ---------------------------------------------------------------------------------
def _speed(t, a=1.0, b=2.0):
    return np.hypot(a * np.sin(t), b * np.cos(t))


def ellipse_reference(tau0, length, a=1.0, b=2.0):
    """The point at arclength ``length`` from p(tau0) along p(tau) = (a cos tau, b sin tau) (tau
    increasing): the arclength by 80-node Gauss-Legendre (analytic integrand, converged to rounding
    for intervals shorter than a turn) and brentq for tau."""
    u, w = np.polynomial.legendre.leggauss(80)

    def arc(t):
        h = (t - tau0) / 2
        return h * np.sum(w * _speed(tau0 + h * (u + 1), a, b))

    tau = scipy.optimize.brentq(lambda t: arc(t) - length, tau0, tau0 + length / min(a, b) + 1, xtol=1e-15)
    return np.array([a * math.cos(tau), b * math.sin(tau)])


def test_d2_exp_of_long_vectors_is_reduced_modulo_the_perimeter():
    """d = 2: exp_x(v) with |v| = s + k L (L the perimeter) equals the point at arclength s; k up to
    1e5 (|v| ~ 1e6 gave no answer in 20 s on main) costs one turn at most."""
    E = induced(np.diag([1.0, 0.25]))  # semi-axes 1 and 2
    # the trapezoidal rule converges exponentially for a periodic analytic integrand (400 nodes: to rounding)
    L = np.sum(_speed(np.arange(400) * 2 * math.pi / 400)) * 2 * math.pi / 400
    assert E.metric.period == pytest.approx(L, rel=1e-14)
    tau0 = 0.4
    x = np.array([math.cos(tau0), 2 * math.sin(tau0)])
    t_hat = np.array([-math.sin(tau0), 2 * math.cos(tau0)])
    t_hat /= np.linalg.norm(t_hat)
    s = 2.3
    ref = ellipse_reference(tau0, s)
    for k in (0, 3, 100_000):
        length = s + k * L
        y = E.metric.exp(length * t_hat, x)
        # geodesic integration (rtol 1e-13) plus the reduction: |v| mod L has error ~|v| eps (|v| and
        # k L each rounded), at unit speed a position error as large
        assert np.abs(y - ref).max() <= 1e-11 + eps_bound(8, scale=length), k


def test_d3_exp_beyond_max_length_is_refused_with_a_clear_error():
    E = induced(np.diag([1.0, 2.0, 3.0]))
    x = np.array([1.0, 0.0, 0.0])
    assert E.metric.max_length == pytest.approx(16 * math.pi)  # 8 turns of length 2 pi a_max, a_max = 1
    for name, call in [
        ("tangent_vec", lambda v: E.metric.exp(v, x)),
        ("tangent_vec", lambda v: E.metric.geodesic_states(v, x, [0.5, 1.0])),
        ("direction", lambda v: E.metric.parallel_transport(np.array([0.0, 0.0, 1.0]), x, v)),
    ]:
        with pytest.raises(ValidationError, match=f"{name} is too long.*max_length"):
            call(np.array([0.0, 1e6, 0.0]))
    y = E.metric.exp(np.array([0.0, 1.0, 0.0]), x)  # within the cap: integrated as before
    assert E.deviation(y) <= 1e-12


def test_induced_shapes_and_empty_batches():
    E = induced(np.diag([1.0, 2.0, 3.0]))
    x = E.projection(np.ones((5, 3)))
    with pytest.raises(ValidationError, match="tangent_vec of shape"):
        E.metric.exp(np.zeros((4, 3)), x)
    with pytest.raises(ValidationError, match="point of shape"):
        E.metric.log(x[:4], x)
    assert E.metric.log(np.zeros((0, 3)), np.zeros((0, 3))).shape == (0, 3)
