"""Gradient structure (docs/gradient_flow.md): ARXIV Lemma 3.1, 3.2, Theorem 3.1; GLPR E_beta, eq. 3.11-3.12.

Independent references: riemattn's AttentionField / sa / usa (attention.py, no autograd), explicit
double loops, finite differences, and null spaces from scipy.
"""

import autograd.numpy as anp
import numpy as np
import pytest
import scipy.linalg
from hypothesis import given
from hypothesis import strategies as st

import riemattn as ra
from riemattn import gradient_flow as gf
from riemattn.errors import InputTypeError, ValidationError

SEEDS = st.integers(0, 2**32 - 1)
ELLS = st.integers(2, 8)
DIMS = st.integers(2, 6)
BETAS = (0.1, 1.0, 5.0)


def random_spd(rng, d):
    """Q diag(lam) Q^T with eigenvalues in [0.2, 3] and a random orthogonal Q."""
    Q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    return (Q * rng.uniform(0.2, 3.0, d)) @ Q.T


def random_config(rng, l, d, P=None):
    x = rng.standard_normal((l, d))
    W = np.eye(d) if P is None else P
    return x / np.sqrt(np.einsum("...i,ij,...j->...", x, W, x))[..., None]


def rel(a, b, scale=None):
    """|a - b| / |b|, or / scale when given."""
    return np.linalg.norm(a - b) / (np.linalg.norm(b) if scale is None else scale)


def fd_derivative(fun, eps=1e-3):
    """d/de fun(e) at e = 0 by the 5-point stencil (truncation error O(eps^4))."""
    return (8 * (fun(eps) - fun(-eps)) - (fun(2 * eps) - fun(-2 * eps))) / (12 * eps)


def V_of(P):
    return lambda x: gf.potential(x, P)


# --------------------------------------------------------------------------------------------
# definitions against explicit loops
def test_metric_and_potential_match_explicit_sums():
    rng = np.random.default_rng(0)
    l, d = 4, 3
    P = random_spd(rng, d)
    x, X, Y = (rng.standard_normal((l, d)) for _ in range(3))
    e = np.array([[np.exp(x[i] @ P @ x[j]) for j in range(l)] for i in range(l)])
    Z = np.sqrt(d) * e.sum(axis=1)
    g = sum(Z[i] * X[i] @ P @ Y[i] for i in range(l))
    assert gf.metric(x, X, Y, P) == pytest.approx(g, rel=1e-13)
    assert gf.metric(x, X, Y, P, "softmax") == pytest.approx(g / np.sqrt(d), rel=1e-13)
    assert gf.metric(x, X, Y, P, "none") == pytest.approx(
        sum(X[i] @ P @ Y[i] for i in range(l)), rel=1e-13
    )
    assert gf.potential(x, P) == pytest.approx(-0.5 * e.sum(), rel=1e-13)
    # batched over leading axes
    xb = np.stack([x, 2 * x])
    np.testing.assert_allclose(
        gf.potential(xb, P), [gf.potential(x, P), gf.potential(2 * x, P)], rtol=1e-13
    )


def test_energy_matches_explicit_sum_and_limits():
    rng = np.random.default_rng(1)
    n, d, beta = 5, 3, 2.5
    x = random_config(rng, n, d)
    E = sum(np.exp(beta * x[i] @ x[j]) for i in range(n) for j in range(n)) / (2 * beta * n * n)
    assert gf.energy(x, beta) == pytest.approx(E, rel=1e-13)
    assert gf.energy(x, beta, centered=True) == pytest.approx(E - 1 / (2 * beta), rel=1e-12)
    # beta -> 0: the centered energy tends to |mean x|^2 / 2
    E0 = 0.5 * np.sum(x.mean(axis=0) ** 2)
    assert gf.energy(x, 0.0) == pytest.approx(E0, rel=1e-14)
    assert gf.energy(x, 1e-7, centered=True) == pytest.approx(E0, rel=1e-5)
    # consensus maximizes: E = e^beta / (2 beta)
    cons = np.repeat(x[:1], n, axis=0)
    assert gf.energy(cons, beta) == pytest.approx(np.exp(beta) / (2 * beta), rel=1e-14)
    assert gf.energy(x, beta) < gf.energy(cons, beta)


# --------------------------------------------------------------------------------------------
# ARXIV section 3
@given(l=ELLS, d=DIMS, seed=SEEDS)
def test_theorem_3_1_gradient_of_potential_is_minus_attention(l, d, seed):
    rng = np.random.default_rng(seed)
    P = random_spd(rng, d)
    y = random_config(rng, l, d, P)
    Y = ra.AttentionField(P, W=P)(0.0, y)
    G = gf.riemannian_gradient(V_of(P), y, P)
    assert rel(G, -Y) <= 1e-10


@given(l=ELLS, d=DIMS, seed=SEEDS)
def test_theorem_3_1_needs_matching_normalization(l, d, seed):
    """Z_i without sqrt(d) matches the softmax field; against the paper field it is off by sqrt(d)."""
    rng = np.random.default_rng(seed)
    P = random_spd(rng, d)
    y = random_config(rng, l, d, P)
    G = gf.riemannian_gradient(V_of(P), y, P, normalization="softmax")
    assert rel(G, -ra.AttentionField(P, W=P, normalization="softmax")(0.0, y)) <= 1e-10
    Y_paper = ra.AttentionField(P, W=P)(0.0, y)
    assert rel(G, -Y_paper) == pytest.approx(np.sqrt(d) - 1.0, rel=1e-8)


@given(l=ELLS, d=DIMS, seed=SEEDS, scale=st.floats(0.3, 2.0))
def test_lemma_3_2_ambient_gradient_is_minus_unprojected_field(l, d, seed, scale):
    rng = np.random.default_rng(seed)
    P = random_spd(rng, d)
    x = scale * rng.standard_normal((l, d))  # off the manifold
    X_P = ra.AttentionField(P, W=P).update(0.0, x)
    assert rel(gf.ambient_gradient(V_of(P), x, P), -X_P) <= 1e-10


@given(l=ELLS, d=DIMS, seed=SEEDS)
def test_lemma_3_1_projection_is_g_orthogonal(l, d, seed):
    rng = np.random.default_rng(seed)
    P = random_spd(rng, d)
    y = random_config(rng, l, d, P)
    X = rng.standard_normal((l, d))
    PX = gf.tangent_projection(y, X, P)
    # tangent: y_i^T P (PX)_i = 0, and idempotent
    assert np.max(np.abs(np.sum((y @ P) * PX, axis=-1))) <= 1e-12 * np.linalg.norm(X)
    np.testing.assert_allclose(gf.tangent_projection(y, PX, P), PX, atol=1e-12 * np.linalg.norm(X))
    # g-orthogonal: <X - PX, T>_g = 0 for every tangent T; tangent bases from scipy's null_space
    bases = [scipy.linalg.null_space((P @ y[i])[None, :]) for i in range(l)]  # (d, d-1) each
    for _ in range(3):
        T = np.stack([B @ rng.standard_normal(d - 1) for B in bases])
        g = gf.metric(y, X - PX, T, P)
        scale = np.sqrt(gf.metric(y, X, X, P) * gf.metric(y, T, T, P))
        assert abs(g) <= 1e-12 * scale
    # and the residual X - PX is not trivially zero: the projection does something
    assert np.linalg.norm(X - PX) > 1e-3 * np.linalg.norm(X)


@given(l=st.integers(2, 5), d=st.integers(2, 4), seed=SEEDS)
def test_riemannian_gradient_represents_differential(l, d, seed):
    """<grad f, T>_{g_P} = d/de f(pi_P(y + e T)) for a generic f, by central finite differences."""
    rng = np.random.default_rng(seed)
    P = random_spd(rng, d)
    y = random_config(rng, l, d, P)
    c = rng.standard_normal(d)

    def f(x):
        return anp.sum(anp.sin(anp.dot(x, c))) + 0.1 * gf.potential(x, P)

    G = gf.riemannian_gradient(f, y, P)
    T = gf.tangent_projection(y, rng.standard_normal((l, d)), P)
    proj = ra.Ellipsoid(P).projection
    fd = fd_derivative(lambda e: f(proj(y + e * T)))
    # scale of the terms: |Euclidean gradient| |T| (the Riemannian one may be much smaller)
    e = np.exp(y @ P @ y.T)
    egrad = np.cos(y @ c)[:, None] * c - 0.1 * e @ y @ P
    assert abs(gf.metric(y, G, T, P) - fd) <= 1e-8 * np.linalg.norm(egrad) * np.linalg.norm(T)


def test_riemannian_gradient_batched():
    rng = np.random.default_rng(2)
    P = random_spd(rng, 3)
    y = np.stack([random_config(rng, 4, 3, P) for _ in range(5)])
    G = gf.riemannian_gradient(V_of(P), y, P)
    assert G.shape == y.shape
    assert rel(G, -ra.AttentionField(P, W=P)(0.0, y)) <= 1e-12


@given(l=ELLS, d=DIMS, seed=SEEDS)
def test_potential_non_increasing_along_rk4(l, d, seed):
    rng = np.random.default_rng(seed)
    P = random_spd(rng, d)
    y0 = random_config(rng, l, d, P)
    sol = ra.integrate(gf.arxiv_field(P), y0, (0.0, 1.0), stepper="rk4", dt=0.05)
    V = gf.potential(sol.y, P)
    steps = np.diff(V)
    assert np.all(steps <= 1e-13 * np.abs(V[1:]))  # only rounding may go up
    assert V[-1] < V[0]  # and it really decreases (random points are not equilibria)


def test_gradient_field_is_attention_field_for_every_stepper():
    """The field built from V and g by autograd integrates like the AttentionField, any stepper."""
    rng = np.random.default_rng(3)
    P = random_spd(rng, 3)
    y0 = np.stack([random_config(rng, 5, 3, P) for _ in range(2)])
    grad_field, attn_field = gf.potential_field(P), gf.arxiv_field(P)
    assert isinstance(grad_field, ra.Field) and isinstance(attn_field, ra.AttentionField)
    for name, cls in ra.STEPPERS.items():
        if name == "layer":  # steps with AttentionField.update, which a gradient field does not have
            continue
        kw = {"rtol": 1e-8, "atol": 1e-10} if cls.adaptive else {"dt": 0.1}
        a = ra.integrate(grad_field, y0, (0.0, 1.0), stepper=name, **kw)
        b = ra.integrate(attn_field, y0, (0.0, 1.0), stepper=name, **kw)
        assert a.success and b.success, name
        np.testing.assert_allclose(a.y[-1], b.y[-1], atol=1e-10, err_msg=name)


# --------------------------------------------------------------------------------------------
# GLPR: E_beta, SA and USA
@given(
    n=ELLS, d=DIMS, seed=SEEDS, beta=st.sampled_from(BETAS), model=st.sampled_from(["sa", "usa"])
)
def test_energy_non_decreasing_along_sa_usa(n, d, seed, beta, model):
    rng = np.random.default_rng(seed)
    x0 = random_config(rng, n, d)
    field = ra.sa(beta, d) if model == "sa" else ra.usa(beta, d)
    sol = ra.integrate(field, x0, (0.0, 0.2), stepper="rk4", dt=0.01)
    E = gf.energy(sol.y, beta)
    assert np.all(np.diff(E) >= -1e-13 * np.abs(E[1:]))
    assert E[-1] > E[0]


@pytest.mark.parametrize("beta", BETAS)
@given(n=ELLS, d=DIMS, seed=SEEDS)
def test_usa_is_n_times_standard_gradient(beta, n, d, seed):
    """Errors are relative to |un-projected update|: the tangent field is update - <x, update> x, and at
    beta = 5 it can be 1e6 times smaller than the update, whose rounding both computations inherit."""
    rng = np.random.default_rng(seed)
    x = random_config(rng, n, d)
    usa = ra.usa(beta, d)
    USA, scale = usa(0.0, x), np.linalg.norm(usa.update(0.0, x))
    G = gf.riemannian_gradient(lambda z: gf.energy(z, beta), x, np.eye(d), normalization="none")
    assert rel(n * G, USA, scale) <= 1e-12
    assert rel(gf.energy_field(beta, d, "usa")(0.0, x), USA, scale) <= 1e-12
    # the factor n matters: the standard gradient alone misses USA by (n - 1)/n
    assert rel(G, USA) == pytest.approx((n - 1) / n, rel=1e-4)


@pytest.mark.parametrize("beta", BETAS)
@given(n=ELLS, d=DIMS, seed=SEEDS)
def test_sa_is_gradient_in_derived_metric(beta, n, d, seed):
    """SA = grad E_beta for weights c_i = Z_{beta,i}/n^2; GLPR's Z_{beta,i}/n gives SA = n grad."""
    rng = np.random.default_rng(seed)
    x = random_config(rng, n, d)
    sa = ra.sa(beta, d)
    SA, scale = sa(0.0, x), np.linalg.norm(sa.update(0.0, x))  # scale: see the USA test
    sphere = ra.Sphere(d - 1)
    E = lambda z: gf.energy(z, beta)
    c = gf.energy_weights(x, beta)
    Z = np.array([sum(np.exp(beta * x[i] @ x[j]) for j in range(n)) for i in range(n)])
    np.testing.assert_allclose(c, Z / n**2, rtol=1e-13)
    G = gf.GradientField(E, sphere, lambda z: gf.energy_weights(z, beta), ascent=True)(0.0, x)
    assert rel(G, SA, scale) <= 1e-12
    G_glpr = gf.GradientField(E, sphere, lambda z: n * gf.energy_weights(z, beta), ascent=True)(
        0.0, x
    )
    assert rel(n * G_glpr, SA, scale) <= 1e-12
    assert rel(G_glpr, SA) == pytest.approx((n - 1) / n, rel=1e-4)  # Z/n alone: off by the factor n
    assert rel(gf.energy_field(beta, d, "sa")(0.0, x), SA, scale) <= 1e-12
    # G is the gradient for that metric: sum_i c_i <G_i, T_i> = dE(T) (finite differences)
    T = sphere.to_tangent(rng.standard_normal((n, d)), x)
    fd = fd_derivative(lambda e: E(sphere.projection(x + e * T)))
    lhs = np.sum(c * np.sum(G * T, axis=-1))
    egrad = np.exp(beta * x @ x.T) @ x / n**2  # dE/dx_i, written out
    assert abs(lhs - fd) <= 1e-8 * np.linalg.norm(egrad) * np.linalg.norm(T)


# --------------------------------------------------------------------------------------------
# errors
def test_errors_name_the_argument():
    P = np.diag([1.0, 2.0, 3.0])
    y = ra.Ellipsoid(P).projection(np.ones((2, 3)))
    with pytest.raises(ValidationError, match="P must be positive definite"):
        gf.potential(y, np.diag([1.0, -1.0, 1.0]))
    with pytest.raises(ValidationError, match="P must be symmetric"):
        gf.metric(y, y, y, np.array([[1.0, 1.0, 0], [0, 1.0, 0], [0, 0, 1.0]]))
    with pytest.raises(ValidationError, match="R\\^2 but P is 3 x 3"):
        gf.potential(np.ones((2, 2)), P)
    with pytest.raises(ValidationError, match="x must lie on E_P"):
        gf.riemannian_gradient(V_of(P), 2 * y, P)
    with pytest.raises(ValidationError, match="X must have the shape of x"):
        gf.metric(y, y[:1], y, P)
    with pytest.raises(ValidationError, match="normalization must be one of"):
        gf.metric(y, y, y, P, normalization="bogus")
    with pytest.raises(InputTypeError, match="f must be a callable"):
        gf.riemannian_gradient(3.0, y, P)
    with pytest.raises(ValidationError, match="autograd could not differentiate f"):
        gf.riemannian_gradient(lambda x: float(np.sum(x)), y, P)
    with pytest.raises(ValidationError, match="beta must be >= 0"):
        gf.energy(y, -1.0)
    with pytest.raises(InputTypeError, match="beta must be a finite real"):
        gf.energy(y, "1")
    with pytest.raises(ValidationError, match="energy overflowed"):
        gf.energy(ra.Sphere(2).projection(np.ones((2, 3))), 1000.0)
    with pytest.raises(ValidationError, match="energy_weights overflowed"):
        gf.energy_weights(ra.Sphere(2).projection(np.ones((2, 3))), 1000.0)
    with pytest.raises(InputTypeError, match="manifold must be"):
        gf.GradientField(V_of(P), "sphere")
    with pytest.raises(ValidationError, match="model must be one of"):
        gf.energy_field(1.0, 3, "xx")


def test_one_on_manifold_tolerance():
    """E_P's check uses the package's tolerance (one constant, re-exported where it is public)."""
    from riemattn import _validation, gradients
    from riemattn.integrate import ON_MANIFOLD_ATOL

    assert gradients.ON_MANIFOLD_ATOL is _validation.ON_MANIFOLD_ATOL
    assert gf.ON_MANIFOLD_ATOL is ON_MANIFOLD_ATOL is _validation.ON_MANIFOLD_ATOL
    P = np.diag([1.0, 2.0, 3.0])
    y = ra.Ellipsoid(P).projection(np.ones((2, 3)))
    gf.riemannian_gradient(V_of(P), y * (1 + 0.4 * _validation.ON_MANIFOLD_ATOL), P)  # inside: accepted
    with pytest.raises(ValidationError, match="x must lie on E_P"):
        gf.riemannian_gradient(V_of(P), y * (1 + 2 * _validation.ON_MANIFOLD_ATOL), P)


# --------------------------------------------------------------------------------------------
# reproduction: ARXIV Figure 1
def test_arxiv_fig1_quick(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    from riemattn.experiments import arxiv_fig1 as fig1
    from riemattn.experiments._papers import P_FIG1

    cfg = fig1.config(quick=True)
    assert cfg["tokens"] == 10 and np.allclose(cfg["P"], P_FIG1)
    ds = fig1.run(cfg)
    # tokens stay on E_P; claims are computed from the data and all hold
    y = ds.y.values
    np.testing.assert_allclose(np.einsum("...i,ij,...j->...", y, P_FIG1, y), 1.0, atol=1e-12)
    result = fig1.claims(ds)
    assert set(result) >= {
        "potential_non_increasing",
        "converges_to_equilibrium",
        "equilibrium_is_consensus",
    }
    assert all(c["passed"] for c in result.values()), result
    # the same seed gives the same data; NetCDF3 (scipy) round trip
    ds.to_netcdf(tmp_path / "fig1.nc", engine="scipy")
    assert fig1.plot(ds).axes
    # claims can fail: a trajectory whose V goes up is flagged
    bad = ds.copy(deep=True)
    bad["V"][5] = bad["V"][4] + 1.0
    assert not fig1.claims(bad)["potential_non_increasing"]["passed"]
