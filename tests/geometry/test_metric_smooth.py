"""The W-metric's closed forms at their degenerate points (issue 41, item 6 and the geometry parts
of item 7): finite and right autograd derivatives at v = 0, y = x, w = 0 (against finite
differences and exact derivatives), exp and transport of huge vectors, sectional curvature of
dependent vectors, and shape errors as riemattn errors naming the arguments."""

import math
import warnings

import numpy as np
import pytest

import riemattn as ra
from riemattn.errors import ValidationError

torch = pytest.importorskip("torch")

from _tolerances import eps_bound  # noqa: E402


def random_spd(rng, d, cond):
    Q, _ = np.linalg.qr(rng.normal(size=(d, d)))
    return (Q * np.geomspace(1.0, cond, d)) @ Q.T


MANIFOLDS = [("sphere", lambda rng: ra.Sphere(2)), ("ellipsoid", lambda rng: ra.Ellipsoid(random_spd(rng, 3, 20.0)))]


def setup(make, seed=0):
    rng = np.random.default_rng(seed)
    M = make(rng)
    x = M.projection(rng.normal(size=3))
    w = M.to_tangent(rng.normal(size=3), x)
    g = rng.normal(size=3)
    return M, x, w, g


def T(a, grad=False):
    return torch.tensor(np.asarray(a, dtype=float), dtype=torch.float64, requires_grad=grad)


def d_dt(f, order=1):
    """Derivatives of the scalar f(t) at t = 0 by autograd (first, or first and second)."""
    t = T(0.0, grad=True)
    y = f(t)
    (g1,) = torch.autograd.grad(y, t, create_graph=order > 1)
    if order == 1:
        return float(g1.detach())
    (g2,) = torch.autograd.grad(g1, t)
    return float(g1.detach()), float(g2)


def geodesic(M, x, w, t):
    """exp_x(t w) written out in torch (|w|_W constant, so no square root at 0 is differentiated)."""
    nw = math.sqrt(float(M.inner(w, w)))
    return torch.cos(t * nw) * T(x) + torch.sin(t * nw) * T(w) / nw


# --- the series branches agree with the closed forms where both are accurate -------------------
def test_series_match_closed_forms():
    from riemattn.geometry._safe import SERIES_BELOW, atan_ratio, cos_sinc

    s = np.geomspace(1e-12, SERIES_BELOW, 200)
    cos, sinc = cos_sinc(s)
    t = np.sqrt(s)
    # each side is a few operations on numbers of size 1: within 8 eps of each other
    assert np.abs(cos - np.cos(t)).max() <= eps_bound(8)
    assert np.abs(sinc - np.sin(t) / t).max() <= eps_bound(8)
    c = np.linspace(0.2, 1.0, 200)
    ss = SERIES_BELOW * c * c * np.linspace(0.01, 0.999, 200)
    ref = np.arctan2(np.sqrt(ss), c) / np.sqrt(ss)
    assert np.abs(atan_ratio(ss, c) - ref).max() <= eps_bound(8, scale=5.0)  # |ref| <= 1 / c = 5


# --- derivatives at the degenerate points (all NaN on main) ------------------------------------
@pytest.mark.parametrize("name, make", MANIFOLDS)
def test_squared_dist_derivatives_at_the_diagonal(name, make):
    """d^2(exp_x(t w), x) = t^2 |w|_W^2: autograd's first derivative at t = 0 is 0 and its second
    is 2 |w|_W^2 (exact); the gradient of squared_dist(x, x) in x is 0 and finite."""
    M, x, w, _ = setup(make)
    g1, g2 = d_dt(lambda t: M.metric.squared_dist(geodesic(M, x, w, t), T(x)), order=2)
    # 0 up to the rounding of x on E_W: u = x(0) - <x, x(0)>_W x is ~eps, and d/dt s = 2 <u, u'>_W
    nw = math.sqrt(float(M.inner(w, w)))
    assert abs(g1) <= eps_bound(16, cond=20.0, scale=max(1.0, nw))
    assert g2 == pytest.approx(2 * nw**2, rel=1e-12)
    xt = T(x, grad=True)
    (gx,) = torch.autograd.grad(M.metric.squared_dist(xt, xt), xt)
    assert torch.isfinite(gx).all() and float(gx.abs().max()) <= eps_bound(16, cond=20.0)
    (gd,) = torch.autograd.grad(M.metric.dist(xt, T(x)), xt)
    assert torch.isfinite(gd).all()  # dist has a kink at a = b: the subgradient 0


@pytest.mark.parametrize("x", [[1.0, 0.0, 0.0], [0.6, 0.8, 0.0]])
def test_squared_dist_gradient_where_u_is_exactly_zero(x):
    """Points where b - <a, b> a is exactly 0 in floating point (NaN gradients on main)."""
    S = ra.Sphere(2)
    xt = T(x, grad=True)
    (gx,) = torch.autograd.grad(S.metric.squared_dist(xt, T(x)), xt)
    assert torch.isfinite(gx).all() and float(gx.abs().max()) == 0.0
    w = np.array([0.0, 0.0, 0.7])
    g1, g2 = d_dt(lambda t: S.metric.squared_dist(geodesic(S, np.array(x), w, t), T(x)), order=2)
    assert g1 == 0.0 and g2 == pytest.approx(2 * 0.49, rel=1e-13)


@pytest.mark.parametrize("name, make", MANIFOLDS)
def test_exp_derivatives_at_zero(name, make):
    """d/dt <g, exp_x(t w)> = <g, w>, d^2/dt^2 = -|w|_W^2 <g, x> at t = 0 (the geodesic equation);
    the first derivative also against a central difference of the NumPy exp."""
    M, x, w, g = setup(make)
    g1, g2 = d_dt(lambda t: (T(g) * M.metric.exp(t * T(w), T(x))).sum(), order=2)
    h = 1e-5
    fd = g @ (M.metric.exp(h * w, x) - M.metric.exp(-h * w, x)) / (2 * h)
    # exact reference; the FD has truncation h^2 |w|^3 |g| / 6 ~ 1e-10 and rounding eps / h ~ 2e-11
    assert g1 == pytest.approx(float(g @ w), rel=1e-13, abs=1e-13)
    assert abs(fd - g1) <= 1e-9
    assert g2 == pytest.approx(-float(M.inner(w, w)) * float(g @ x), rel=1e-12)
    xt, vt = T(x, grad=True), T(np.zeros(3), grad=True)
    gx, gv = torch.autograd.grad((T(g) * M.metric.exp(vt, xt)).sum(), (xt, vt))
    assert torch.isfinite(gx).all() and torch.isfinite(gv).all()
    # d exp_x(v) / dv at v = 0 is the tangent projection P = I - x x^T W: its transpose applied to g
    P = np.eye(3) - np.outer(x, M.W @ x)
    assert np.abs(gv.numpy() - P.T @ g).max() <= eps_bound(16, scale=np.abs(g).max())


@pytest.mark.parametrize("name, make", MANIFOLDS)
def test_log_derivatives_at_the_diagonal(name, make):
    """log_x(exp_x(t w)) = t w: derivative w at t = 0 (second 0); log_{exp_x(t w)}(x) has derivative -w."""
    M, x, w, g = setup(make)
    g1, g2 = d_dt(lambda t: (T(g) * M.metric.log(geodesic(M, x, w, t), T(x))).sum(), order=2)
    assert g1 == pytest.approx(float(g @ w), rel=1e-12, abs=1e-13)
    assert abs(g2) <= 1e-12 * np.abs(g).max() * float(M.inner(w, w))
    g1b = d_dt(lambda t: (T(g) * M.metric.log(T(x), geodesic(M, x, w, t))).sum())
    assert g1b == pytest.approx(-float(g @ w), rel=1e-12, abs=1e-13)
    yt = T(x, grad=True)
    (gy,) = torch.autograd.grad((T(g) * M.metric.log(yt, T(x))).sum(), yt)
    assert torch.isfinite(gy).all()


@pytest.mark.parametrize("name, make", MANIFOLDS)
def test_transport_derivative_at_zero_direction(name, make):
    """PT_{x, t w}(u) = u - t <u, w>_W x + O(t^2): autograd's derivative at t = 0, against that and a
    central difference of the NumPy transport."""
    M, x, w, g = setup(make)
    u = M.to_tangent(np.random.default_rng(5).normal(size=3), x)
    g1 = d_dt(lambda t: (T(g) * M.metric.parallel_transport(T(u), T(x), t * T(w))).sum())
    exact = -float(M.inner(u, w)) * float(g @ x)
    h = 1e-5
    fd = g @ (M.metric.parallel_transport(u, x, h * w) - M.metric.parallel_transport(u, x, -h * w)) / (2 * h)
    assert g1 == pytest.approx(exact, rel=1e-12, abs=1e-13)
    assert abs(fd - g1) <= 1e-9  # truncation ~h^2, rounding ~eps / h
    wt = T(np.zeros(3), grad=True)
    (gw,) = torch.autograd.grad((T(g) * M.metric.parallel_transport(T(u), T(x), wt)).sum(), wt)
    assert torch.isfinite(gw).all()


@pytest.mark.parametrize("name, make", MANIFOLDS)
def test_derivatives_away_from_the_degenerate_points_unchanged(name, make):
    """At a generic pair (distance ~0.6): autograd of squared_dist and log along a geodesic against
    central differences of the NumPy functions."""
    M, x, w, g = setup(make)
    y = M.metric.exp(0.6 * w / math.sqrt(float(M.inner(w, w))), x)
    v = M.to_tangent(np.random.default_rng(7).normal(size=3), y)
    h = 1e-5
    for f_t, f_np in [
        (lambda t: M.metric.squared_dist(geodesic(M, y, v, t), T(x)), lambda z: M.metric.squared_dist(z, x)),
        (lambda t: (T(g) * M.metric.log(geodesic(M, y, v, t), T(x))).sum(), lambda z: g @ M.metric.log(z, x)),
    ]:
        fd = (f_np(M.metric.exp(h * v, y)) - f_np(M.metric.exp(-h * v, y))) / (2 * h)
        assert abs(d_dt(f_t) - fd) <= 1e-8  # FD truncation h^2 * O(1) and rounding eps / h


# --- huge vectors --------------------------------------------------------------------------------
def test_exp_of_a_huge_vector_is_the_exact_exponential_without_warnings():
    """|v| = 1e300 returned NaN with a RuntimeWarning; now exp_x(v) = cos(1e300) x + sin(1e300) e
    (math.cos of the same float as the reference), on the sphere, and no warning."""
    S = ra.Sphere(2)
    x, v = np.array([1.0, 0.0, 0.0]), np.array([0.0, 0.0, 1e300])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y = S.metric.exp(v, x)
        yt = S.metric.exp(T(v), T(x)).numpy()
    ref = np.array([math.cos(1e300), 0.0, math.sin(1e300)])
    assert np.abs(y - ref).max() <= 1e-15 and np.abs(yt - ref).max() <= 1e-15


@pytest.mark.parametrize("scale", [1e160, 1e300, 1e307])
def test_exp_and_transport_of_huge_vectors_on_the_ellipsoid(scale):
    rng = np.random.default_rng(3)
    E = ra.Ellipsoid(random_spd(rng, 4, 50.0))
    x = E.projection(rng.normal(size=(5, 4)))
    v = E.to_tangent(rng.normal(size=(5, 4)), x)
    v = v / np.abs(v).max(axis=-1, keepdims=True) * scale
    u = E.to_tangent(rng.normal(size=(5, 4)), x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y = E.metric.exp(v, x)
        pt = E.metric.parallel_transport(u, x, v)
    assert np.isfinite(y).all() and E.deviation(y) <= eps_bound(16, cond=50.0)
    # the transport is an isometry onto the tangent space at exp_x(v)
    assert np.abs(E.inner(pt, pt) - E.inner(u, u)).max() <= eps_bound(32, cond=50.0, scale=E.inner(u, u).max())
    assert np.abs(E.inner(y, pt)).max() <= eps_bound(32, cond=50.0, scale=np.sqrt(E.inner(u, u).max()))


# --- sectional curvature of dependent vectors ------------------------------------------------------
def test_sectional_curvature_of_dependent_vectors_is_refused():
    """The issue's example returned 0.7 (rounding noise): now a ValidationError naming both vectors."""
    S = ra.Sphere(1)
    with pytest.raises(ValidationError, match="tangent_vec_a and tangent_vec_b must be linearly independent"):
        S.metric.sectional_curvature([-0.8, 0.6], [0.56, -0.42], [0.6, 0.8])
    rng = np.random.default_rng(0)
    for M in (ra.Sphere(2), ra.Ellipsoid(random_spd(rng, 3, 100.0))):
        x = M.projection(rng.normal(size=(50, 3)))
        a = M.to_tangent(rng.normal(size=(50, 3)), x)
        lam = rng.normal(size=(50, 1))
        for b in (lam * a, np.zeros_like(a)):
            for k in range(50):  # every pair alone: each is refused
                with pytest.raises(ValidationError, match="linearly independent"):
                    M.metric.sectional_curvature(a[k], b[k], x[k])
        c = M.to_tangent(rng.normal(size=(50, 3)), x)
        assert np.array_equal(M.metric.sectional_curvature(a, c, x), np.ones(50))


# --- shape errors ---------------------------------------------------------------------------------------
def test_mismatched_batches_and_shapes_are_riemattn_errors():
    E = ra.Ellipsoid(np.diag([1.0, 2.0, 3.0]))
    x = E.projection(np.ones((5, 3)))
    z = np.zeros((4, 3))
    calls = {
        "exp": (lambda: E.metric.exp(z, x), "tangent_vec"),
        "log": (lambda: E.metric.log(x[:4], x), "point"),
        "dist": (lambda: E.metric.dist(x[:4], x), "point_a"),
        "squared_dist": (lambda: E.metric.squared_dist(x[:4], x), "point_a"),
        "parallel_transport": (lambda: E.metric.parallel_transport(z, x, x * 0), "tangent_vec"),
        "inner_product": (lambda: E.metric.inner_product(z, x), "tangent_vec_a"),
        "sectional_curvature": (lambda: E.metric.sectional_curvature(z, x), "tangent_vec_a"),
        "curvature": (lambda: E.metric.curvature(z, x, x), "tangent_vec_a"),
        "is_tangent": (lambda: E.is_tangent(np.ones(3), np.ones(2)), "base_point"),
        "is_tangent batch": (lambda: ra.Sphere(2).is_tangent(z, x), "vector"),
    }
    for name, (call, arg) in calls.items():
        with pytest.raises(ValidationError, match=arg):
            call()
    with pytest.raises(ValidationError, match="W must be a nonempty square matrix"):
        ra.Ellipsoid(np.zeros((0, 0)))
