"""Compiled field kernels (riemattn.dynamics.kernels) against the NumPy field and finite differences.

Every kernel is compiled once per session (numba's on-disk cache makes later sessions cheap): all
tests call the same few entry points with run-time data.

Tolerances (``_scales``): a sum of N products computed in two different orders differs by at most
about ``2 N eps`` times the sum of the absolute values of its terms; the attention weights carry a
relative error of about ``eps`` times the size of the scores' terms (``exp`` turns the absolute
rounding of a score into a relative error of the weight), ``kappa = d^2 max|beta P| max|y|^2``.
So each compared quantity gets ``8 eps (N + kappa)`` times the sum of the absolute values of its
terms (the factor 8: both implementations round, and the projection and the lifting add two
more products of the same size).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import riemattn as ra
from riemattn.dynamics.kernels import _kernel_layout as K
from riemattn.dynamics import kernels as kk
from riemattn.dynamics.circle import CircleField
from riemattn.dynamics.jacobians import lifted_attention_jacobian
from riemattn.dynamics.schedules import PiecewiseConstantHeads, TimeVaryingHeads
from riemattn.errors import UnsupportedByEngine, ValidationError
from riemattn.testing import strategies as rst

EPS = np.finfo(float).eps


def _eval(pack, op, t, y, b=0):
    """One kernel operation on one trajectory y (l, d)."""
    y = np.ascontiguousarray(y, dtype=float)
    l, d = y.shape
    out = np.empty((l * d, l * d) if op == kk.LIFTED_JAC else (l, d))
    work = np.full(pack.work, np.nan)  # the kernels must not read scratch they did not write
    kk.evaluate(op, float(t), y, b, pack.ints, pack.floats, pack.per, work, out)
    return out


def _G(pack, t, x, b=0):
    """The lifted field |x|_W F(t, pi_W x) through the kernels (project, wnorm, rhs)."""
    xn, r = np.empty_like(x), np.empty(x.shape[0])
    kk.project(x, pack.ints, pack.floats, xn)
    kk.wnorm(x, pack.ints, pack.floats, r)
    return r[:, None] * _eval(pack, kk.RHS, t, xn, b)


def _scales(field, t, y, exact_weights=False):
    """(error bound of F and f, error bound of J_G) for the tokens y (..., l, d), the largest over
    the batch; see the module docstring. ``exact_weights``: every weight is exactly 0 or 1 / l in
    both implementations (the rescaled form where every exponent is 0 or below -1e3), so the
    scores' rounding does not enter (kappa = 0)."""
    l, d = y.shape[-2:]
    A = field.attention(t, y)  # (..., h, l, l)
    h = A.shape[-3]
    Pmax = np.max(np.abs(field.P(t)))  # beta included
    U = np.broadcast_to(field.U(t), y.shape[:-2] + (h, d, d))
    u = np.abs(np.einsum("...hab,...jb->...hja", U, y))
    absf = np.einsum("...hij,...hja->...ia", A, u)  # sum of |terms| of f
    Wn = np.max(np.sum(np.abs(field.manifold.W), axis=-1))
    ymax = np.max(np.abs(y))
    kappa = 0.0 if exact_weights else d * d * Pmax * ymax ** 2
    n_terms = l * h + 2 * d
    proj = 1.0 + d * Wn * ymax ** 2  # the tangent projection's terms
    bound_f = 8 * EPS * (n_terms + kappa) * np.max(absf) * proj + 1e-300
    s = {"paper": math.sqrt(d), "softmax": 1.0, "mean": 0.0}[field.normalization]
    pq = d * Pmax * ymax  # bounds |P y_j| and |P^T y_i|
    rows = np.max(np.sum(A, axis=(-3, -1)))  # largest sum of alpha over heads and neighbours
    termsJ = rows * (pq * (np.max(u) + s * np.max(absf)) + np.max(np.abs(U)) + np.max(u) * pq) + Wn * np.max(absf)
    bound_J = 8 * EPS * (n_terms * d + kappa) * termsJ * proj ** 2 + 1e-300
    return bound_f, bound_J


def _check_against_numpy(field, t, y, exact_weights=False):
    """F, f and J_G of every trajectory of y (..., l, d) equal the NumPy engine's."""
    pack = kk.pack_field(field, y.shape)
    F, f = field(t, y), field.update(t, y)
    J = lifted_attention_jacobian(field, t, y)
    bound_f, bound_J = _scales(field, t, y, exact_weights)
    yb, Fb, fb, Jb = (a.reshape((-1,) + a.shape[-2:]) for a in (y, F, f, J))
    for b in range(yb.shape[0]):
        np.testing.assert_allclose(_eval(pack, kk.RHS, t, yb[b], b), Fb[b], rtol=0, atol=bound_f)
        np.testing.assert_allclose(_eval(pack, kk.UPDATE, t, yb[b], b), fb[b], rtol=0, atol=bound_f)
        np.testing.assert_allclose(_eval(pack, kk.LIFTED_JAC, t, yb[b], b), Jb[b], rtol=0, atol=bound_J)
    return pack


def _fd_jacobian(pack, t, x, b=0):
    """Central differences of the lifted field G (kernels) in every ambient direction."""
    l, d = x.shape
    delta = np.cbrt(EPS)
    J = np.empty((l * d, l * d))
    for m in range(l * d):
        e = np.zeros(l * d)
        e[m] = delta
        e = e.reshape(l, d)
        J[:, m] = ((_G(pack, t, x + e, b) - _G(pack, t, x - e, b)) / (2 * delta)).reshape(-1)
    return J


# ---------------------------------------------------------------------------------------------
# every supported combination, drawn
@settings(max_examples=120)
@given(data=st.data())
def test_value_update_and_jacobian_equal_the_numpy_engine(data):
    field = data.draw(rst.attention_fields(dims=st.integers(2, 4), heads=st.integers(1, 3),
                                           values=("identity", "matrices")), label="field")
    y = data.draw(rst.points(field.manifold, tokens=st.integers(1, 5)), label="y")
    t = data.draw(st.floats(-2.0, 2.0), label="t")
    _check_against_numpy(field, t, y)


@settings(max_examples=40)
@given(data=st.data())
def test_lifted_jacobian_matches_finite_differences(data):
    field = data.draw(rst.attention_fields(dims=st.integers(2, 4), heads=st.integers(1, 2)), label="field")
    y = data.draw(rst.points(field.manifold, tokens=st.integers(1, 4)), label="y")
    pack = kk.pack_field(field, y.shape)
    J = _eval(pack, kk.LIFTED_JAC, 0.3, y)
    # truncation delta^2 / 6 |G'''| with every derivative of exp(y^T beta P y) bringing a factor
    # up to 2 |beta P|_2 max|y| (at most ~ 20 here); rounding eps |G| / delta
    growth = 1.0 + 2.0 * np.max(np.linalg.norm(field.P(0.3), ord=2, axis=(-2, -1))) * np.max(np.abs(y))
    _, bound_J = _scales(field, 0.3, y)
    scale = bound_J / (8 * EPS) / 100 + np.max(np.abs(J)) + 1.0  # the size of J's terms
    tol = (np.cbrt(EPS) ** 2 * growth ** 3 + 10 * np.cbrt(EPS) ** 2) * scale
    np.testing.assert_allclose(J, _fd_jacobian(pack, 0.3, y), rtol=0, atol=tol)


@settings(max_examples=40)
@given(data=st.data())
def test_time_derivative_matches_finite_differences(data):
    field = data.draw(rst.attention_fields(dims=st.integers(2, 3), heads=st.integers(1, 2), time_varying=True),
                      label="field")
    y = data.draw(rst.points(field.manifold, tokens=st.integers(1, 4)), label="y")
    pack = kk.pack_field(field, y.shape)
    assert pack.autonomous is False
    t, dt = 0.7, np.cbrt(EPS)
    fd = (_G(pack, t + dt, y) - _G(pack, t - dt, y)) / (2 * dt)
    # third t-derivatives: omega <= 6 per sinusoid, times the growth of the weights
    growth = (1.0 + 6.0) * (1.0 + 2.0 * np.max(np.abs(field.P(t))) * field.d)
    scale = 1.0 + np.max(np.abs(fd))
    np.testing.assert_allclose(_eval(pack, kk.TIME_DERIVATIVE, t, y), fd, rtol=0,
                               atol=(dt ** 2 * growth ** 3 + 10 * dt ** 2) * scale)


# ---------------------------------------------------------------------------------------------
# explicit edges
def _sphere_points(rng, l, d):
    y = rng.normal(size=(l, d))
    return y / np.linalg.norm(y, axis=-1, keepdims=True)


@pytest.mark.parametrize("normalization", ["paper", "softmax", "mean"])
@pytest.mark.parametrize("mask", ["full", "causal"])
@pytest.mark.parametrize("tokens", ["coincident", "antipodal"])
def test_coincident_and_antipodal_tokens(normalization, mask, tokens):
    rng = np.random.default_rng(1)
    v = _sphere_points(rng, 1, 3)[0]
    y = np.stack([v, v, v]) if tokens == "coincident" else np.stack([v, -v, v, -v])
    P, U = rng.normal(size=(2, 3, 3)), rng.normal(size=(2, 3, 3))
    for field in (ra.AttentionField(P, U, mask=mask, normalization=normalization, beta=1.3),
                  ra.AttentionField(np.eye(3), mask=mask, normalization=normalization, beta=1.3)):
        _check_against_numpy(field, 0.0, y)


def test_zero_weights_zero_beta_and_identity_W():
    rng = np.random.default_rng(2)
    y = _sphere_points(rng, 4, 3)
    P = rng.normal(size=(3, 3))
    fields = [ra.AttentionField(np.zeros((3, 3))), ra.AttentionField(P, np.zeros((3, 3))),
              ra.AttentionField(P, beta=0.0), ra.usa(0.0, 3), ra.AttentionField(P, W=np.eye(3)),
              ra.AttentionField(P, 0.5 * np.eye(3))]
    for field in fields:
        _check_against_numpy(field, 0.0, y)
    pack = kk.pack_field(fields[-2], y.shape)
    assert pack.ints[K.MANIFOLD] == K.MAN_SPHERE  # W = I: the sphere's path
    # the ellipsoid path itself at W = I gives the same numbers
    ints = pack.ints.copy()
    ints[K.MANIFOLD], ints[K.W_OFF] = K.MAN_ELLIPSOID, pack.floats.size
    pack_e = pack._replace(ints=ints, floats=np.concatenate([pack.floats, np.eye(3).ravel()]))
    bound_f, bound_J = _scales(fields[-2], 0.0, y)
    np.testing.assert_allclose(_eval(pack_e, kk.RHS, 0.0, y), fields[-2](0.0, y), rtol=0, atol=bound_f)
    np.testing.assert_allclose(_eval(pack_e, kk.LIFTED_JAC, 0.0, y),
                               lifted_attention_jacobian(fields[-2], 0.0, y), rtol=0, atol=bound_J)


@pytest.mark.parametrize("beta", [700.0, 1e4])
@pytest.mark.parametrize("normalization", ["paper", "softmax", "mean"])
def test_large_beta_near_overflow(beta, normalization):
    rng = np.random.default_rng(3)
    y = _sphere_points(rng, 5, 3)
    y[1] = y[0] * np.array([1.0, 1.0, 1.0])  # a coincident pair: the largest possible score beta
    field = ra.AttentionField(np.eye(3), normalization=normalization, beta=beta)
    if normalization == "mean" and beta > 709:  # e^beta / l overflows: NumPy raises, the kernel gives inf
        with pytest.raises(ValidationError, match="overflow"):
            field(0.0, y)
        pack = kk.pack_field(field, y.shape)
        assert not np.all(np.isfinite(_eval(pack, kk.RHS, 0.0, y)))
        return
    _check_against_numpy(field, 0.0, y)


def test_beta_per_trajectory_and_batches():
    rng = np.random.default_rng(4)
    beta = np.array([[0.0], [0.5], [3.0]])  # broadcasts against the batch (3, 2)
    y = np.stack([[_sphere_points(rng, 4, 3) for _ in range(2)] for _ in range(3)])
    for norm in ("paper", "mean"):
        field = ra.AttentionField(rng.normal(size=(2, 3, 3)), rng.normal(size=(3, 3)), beta=beta,
                                  normalization=norm, mask="causal")
        pack = _check_against_numpy(field, 0.2, y)
        assert pack.per.shape == (6, 1)


def test_per_trajectory_weights_from_packed_rows():
    """One P and U per trajectory (the data layout of batched weights): rows of ``per``."""
    rng = np.random.default_rng(5)
    B, h, l, d = 3, 2, 4, 3
    Ps, Us = rng.normal(size=(B, h, d, d)), rng.normal(size=(B, h, d, d))
    betas = np.array([0.5, 1.0, 2.0])
    W = np.diag([1.0, 2.0, 0.5])
    fields = [ra.AttentionField(Ps[b], Us[b], W=W, beta=betas[b], normalization="softmax") for b in range(B)]
    y = np.stack([fields[0].manifold.projection(rng.normal(size=(l, d))) for _ in range(B)])
    pack = kk.pack_field(fields[0], (l, d))
    ints = pack.ints.copy()
    ints[K.BETA_LOC], ints[K.BETA_OFF] = K.LOC_PER, 0
    ints[K.P_LOC], ints[K.P_OFF] = K.LOC_PER, 1
    ints[K.U_LOC], ints[K.U_OFF] = K.LOC_PER, 1 + h * d * d
    per = np.ascontiguousarray(np.concatenate([betas[:, None], Ps.reshape(B, -1), Us.reshape(B, -1)], axis=1))
    packed = pack._replace(ints=ints, per=per)
    for b in range(B):
        bound_f, bound_J = _scales(fields[b], 0.0, y[b])
        np.testing.assert_allclose(_eval(packed, kk.RHS, 0.0, y[b], b), fields[b](0.0, y[b]), rtol=0, atol=bound_f)
        np.testing.assert_allclose(_eval(packed, kk.LIFTED_JAC, 0.0, y[b], b),
                                   lifted_attention_jacobian(fields[b], 0.0, y[b]), rtol=0, atol=bound_J)


def test_piecewise_constant_weights():
    rng = np.random.default_rng(6)
    stacks = rng.normal(size=(3, 2, 3, 3))
    P = PiecewiseConstantHeads([0.0, 1.0, 2.5], stacks)
    U = PiecewiseConstantHeads([0.0, 2.0], rng.normal(size=(2, 3, 3)))
    field = ra.AttentionField(P, U, normalization="paper")
    y = _sphere_points(rng, 4, 3)
    pack = kk.pack_field(field, y.shape)
    assert pack.autonomous is False and pack.breaks.tolist() == [1.0, 2.0, 2.5]
    for t in (-1.0, 0.0, 0.99, 1.0, 2.2, 2.5, 9.0):
        _check_against_numpy(field, t, y)
        const = ra.AttentionField(stacks[P.index(t)], U(t), normalization="paper")
        np.testing.assert_array_equal(field(t, y), const(t, y))  # the NumPy engine takes it too
        np.testing.assert_array_equal(_eval(pack, kk.TIME_DERIVATIVE, t, y), 0.0)


def test_time_varying_heads_and_its_derivative():
    rng = np.random.default_rng(7)
    tv = TimeVaryingHeads(rng.normal(size=(2, 3, 3)), rng.normal(size=(2, 2, 3, 3)), np.array([1.0, 3.0]),
                          np.array([0.2, 1.0]))
    dt = 1e-6
    np.testing.assert_allclose(tv.derivative(0.4), (tv(0.4 + dt) - tv(0.4 - dt)) / (2 * dt), atol=1e-8)
    field = ra.AttentionField(tv, tv, W=np.diag([2.0, 1.0, 1.0]), mask="causal", normalization="mean", beta=0.8)
    y = field.manifold.projection(rng.normal(size=(2, 4, 3)))
    for t in (0.0, 1.7):
        _check_against_numpy(field, t, y)


def test_flat_space_attention_is_its_update():
    """MAN_FLAT (the residual stream of the pre-norm placements): F = f and J_G = Df."""
    rng = np.random.default_rng(8)
    field = ra.AttentionField(rng.normal(size=(2, 3, 3)), normalization="softmax")
    y = rng.normal(size=(4, 3))
    pack = kk.pack_field(field, y.shape)
    ints = pack.ints.copy()
    ints[K.MANIFOLD] = K.MAN_FLAT
    flat = pack._replace(ints=ints)
    f = field.update(0.0, y)
    bound_f, bound_J = _scales(field, 0.0, y)
    np.testing.assert_allclose(_eval(flat, kk.RHS, 0.0, y), f, rtol=0, atol=bound_f)
    J = _eval(flat, kk.LIFTED_JAC, 0.0, y)
    delta, fd = np.cbrt(EPS), np.empty_like(J)
    for m in range(y.size):
        e = np.zeros(y.size)
        e[m] = delta
        fd[:, m] = ((field.update(0.0, y + e.reshape(y.shape)) - field.update(0.0, y - e.reshape(y.shape)))
                    / (2 * delta)).ravel()
    np.testing.assert_allclose(J, fd, rtol=0, atol=1e-8 * (1 + np.max(np.abs(J))))


def test_geometry_kernels():
    rng = np.random.default_rng(9)
    for field in (ra.AttentionField(np.eye(3)), ra.AttentionField(np.eye(3), W=np.diag([3.0, 1.0, 0.5]))):
        M = field.manifold
        x, v = rng.normal(size=(4, 3)), rng.normal(size=(4, 3))
        pack = kk.pack_field(field, x.shape)
        out, r = np.empty_like(x), np.empty(4)
        kk.project(x, pack.ints, pack.floats, out)
        np.testing.assert_allclose(out, M.projection(x), rtol=4 * EPS)
        kk.wnorm(x, pack.ints, pack.floats, r)
        np.testing.assert_allclose(r, M.norm(x), rtol=4 * EPS)
        y = M.projection(x)
        kk.to_tangent(v, y, pack.ints, pack.floats, out)
        np.testing.assert_allclose(out, M.to_tangent(v, y), rtol=0, atol=32 * EPS * np.max(np.abs(v)))


@pytest.mark.parametrize("model", ["sa", "usa"])
@pytest.mark.parametrize("beta", [0.0, 2.0, 40.0])
def test_circle_form(model, beta):
    rng = np.random.default_rng(10)
    theta = rng.uniform(-np.pi, np.pi, size=6)
    theta[1] = theta[0]  # coincident
    theta[2] = theta[0] + np.pi  # antipodal
    field = CircleField(beta, model)
    pack = kk.pack_field(field, (6, 1))
    y = theta[:, None]
    ref = field(0.0, theta)
    scale = np.max(np.sum(np.exp(beta * np.cos(theta[None] - theta[:, None])), axis=-1))
    scale = scale / 6 if model == "usa" else 1.0
    atol = 8 * EPS * (6 + beta) * scale
    np.testing.assert_allclose(_eval(pack, kk.RHS, 0.0, y)[:, 0], ref, rtol=0, atol=atol)
    J = _eval(pack, kk.LIFTED_JAC, 0.0, y)
    delta, fd = np.cbrt(EPS), np.empty((6, 6))
    for k in range(6):
        e = np.zeros(6)
        e[k] = delta
        fd[:, k] = (field(0.0, theta + e) - field(0.0, theta - e)) / (2 * delta)
    np.testing.assert_allclose(J, fd, rtol=0, atol=delta ** 2 * (1 + beta) ** 3 * scale + 10 * delta ** 2 * scale)
    np.testing.assert_array_equal(_eval(pack, kk.TIME_DERIVATIVE, 0.0, y), 0.0)


def test_unsupported_fields_are_named():
    rng = np.random.default_rng(11)
    P = rng.normal(size=(3, 3))
    with pytest.raises(UnsupportedByEngine, match="VectorField"):
        kk.pack_field(ra.VectorField(lambda t, y: y, ra.Sphere(2)), (2, 3))
    with pytest.raises(UnsupportedByEngine, match="callable P"):
        kk.pack_field(ra.AttentionField(lambda t: np.cos(t) * P), (2, 3))

    class Sub(ra.AttentionField):
        pass

    with pytest.raises(UnsupportedByEngine, match="Sub"):
        kk.pack_field(Sub(P), (2, 3))
    with pytest.raises(ValidationError, match="y_shape"):
        kk.pack_field(ra.AttentionField(P), (2, 4))
    with pytest.raises(ValidationError, match="beta"):
        kk.pack_field(ra.AttentionField(P, beta=np.ones(3)), (2, 2, 3))
    # a placement of the layer norm around an attention field of another class: refused
    with pytest.raises(UnsupportedByEngine, match="LayerNormField around a Sub"):
        kk.pack_field(ra.layernorm(Sub(P), "pre"), (2, 3))
    with pytest.raises(UnsupportedByEngine, match="callable P"):
        kk.pack_field(ra.layernorm(ra.AttentionField(lambda t: np.cos(t) * P), "ngpt"), (2, 3))
    # the rescaled forms and the placements are packed (they were refused before their kernels)
    assert kk.pack_field(ra.usa(800.0, 3, rescaled=True), (2, 3)).ints[K.RESCALED] == 1
    assert kk.pack_field(CircleField(800.0, "usa", rescaled=True), (5, 1)).ints[K.RESCALED] == 1
    with pytest.raises(UnsupportedByEngine, match="causal"):  # the circle kernel is full attention
        kk.pack_field(CircleField(4.0, mask="causal"), (5, 1))
    assert kk.pack_field(ra.layernorm(ra.usa(1.0, 3), "pre"), (2, 3)).ints[K.PLACEMENT] == K.PL_PRE


def test_unsupported_torch_parameters():
    torch = pytest.importorskip("torch")
    P = torch.eye(3, dtype=torch.float64, requires_grad=True)
    with pytest.raises(UnsupportedByEngine, match="gradient"):
        kk.pack_field(ra.AttentionField(P), (2, 3))


def test_cache_is_keyed_on_every_engine_source(tmp_path):
    """A cached kernel embeds the code of the helpers it calls: its stamp covers all engine files."""
    from riemattn.dynamics.kernels import _kernel_cache as kc

    assert kc.INSTALLED
    assert isinstance(kk.evaluate._cache._impl.locator, kc._EngineStamp)
    names = {p.name for p in kc.engine_sources()}
    assert {"__init__.py", "_kernel_attention.py", "_kernel_circle.py", "_kernel_dtime.py"} <= names
    (tmp_path / "dynamics" / "kernels").mkdir(parents=True)
    for name in ("kernels/__init__.py", "kernels/_kernel_attention.py", "other.py"):
        (tmp_path / "dynamics" / name).write_text("x = 1\n")
    before = kc.engine_stamp(tmp_path)
    (tmp_path / "dynamics" / "other.py").write_text("x = 2\n")  # not an engine file
    assert kc.engine_stamp(tmp_path) == before
    (tmp_path / "dynamics" / "kernels" / "_kernel_attention.py").write_text("x = 2\n")
    assert kc.engine_stamp(tmp_path) != before


def test_per_trajectory_weights_packed_from_batched_stacks():
    """pack_field on weights with leading batch axes (constant, and TimeVaryingHeads with batch
    axes on B and A), as AttentionField holds them with per-trajectory weights: HeadMatrices
    ``const`` / ``fn`` of shape batch + (h, d, d), here set by hand."""
    from types import SimpleNamespace

    rng = np.random.default_rng(12)
    nb, h, l, d, n_terms = 3, 2, 4, 3, 2
    Ps = rng.normal(size=(nb, 1, h, d, d))  # batch (3, 1) against y's batch (3, 2)
    omega, phi = np.array([1.0, 2.5]), np.array([0.3, -0.4])
    Bs, As = rng.normal(size=(nb, 1, h, d, d)), rng.normal(size=(n_terms, nb, 1, h, d, d))
    y = np.stack([[_sphere_points(rng, l, d) for _ in range(2)] for _ in range(nb)])
    field = ra.AttentionField(Ps[0, 0], TimeVaryingHeads(Bs[0, 0], As[:, 0, 0], omega, phi), mask="causal")
    field._P = SimpleNamespace(fn=None, const=Ps, param=None, shape=Ps.shape, batch=Ps.shape[:-3], name="P")
    field._U = SimpleNamespace(fn=TimeVaryingHeads(Bs, As, omega, phi), const=None, param=None, shape=Bs.shape,
                               batch=Bs.shape[:-3], name="U")
    pack = kk.pack_field(field, y.shape)
    assert pack.per.shape[0] == 6 and pack.ints[K.P_LOC] == K.LOC_PER == pack.ints[K.U_LOC]
    t = 0.8
    for b in range(6):
        i, j = divmod(b, 2)
        single = ra.AttentionField(Ps[i, 0], TimeVaryingHeads(Bs[i, 0], As[:, i, 0], omega, phi), mask="causal")
        bound_f, bound_J = _scales(single, t, y[i, j])
        np.testing.assert_allclose(_eval(pack, kk.RHS, t, y[i, j], b), single(t, y[i, j]), rtol=0, atol=bound_f)
        np.testing.assert_allclose(_eval(pack, kk.LIFTED_JAC, t, y[i, j], b),
                                   lifted_attention_jacobian(single, t, y[i, j]), rtol=0, atol=bound_J)
        one = kk.pack_field(single, (l, d))
        np.testing.assert_allclose(_eval(pack, kk.TIME_DERIVATIVE, t, y[i, j], b),
                                   _eval(one, kk.TIME_DERIVATIVE, t, y[i, j]), rtol=0, atol=bound_f)


# ---------------------------------------------------------------------------------------------
# the rescaled low-temperature forms (issue 35): exponents beta (y_i^T P y_j - 1)
@st.composite
def _rescaled_fields(draw, max_beta=50.0):
    """A rescaled "mean" attention field drawn from riemattn.testing's strategies."""
    manifold = draw(rst.manifolds(dims=st.integers(2, 4)), label="manifold")
    d, h = manifold.ambient_dim, draw(st.integers(1, 3), label="h")
    P = draw(rst.head_matrices(h, d, time_varying=draw(st.booleans(), label="time-varying")), label="P")
    U = draw(st.one_of(st.none(), rst.head_matrices(h, d)), label="U")
    beta = draw(rst.betas(max_value=max_beta), label="beta")
    W = None if isinstance(manifold, ra.Sphere) else manifold.W
    return ra.AttentionField(P, U, W=W, mask=draw(st.sampled_from(["full", "causal"])), normalization="mean",
                             beta=beta, rescaled=True)


@settings(max_examples=60)
@given(data=st.data())
def test_rescaled_mean_equals_the_numpy_engine(data):
    field = data.draw(_rescaled_fields(), label="field")
    y = data.draw(rst.points(field.manifold, tokens=st.integers(1, 5)), label="y")
    _check_against_numpy(field, data.draw(st.floats(-2.0, 2.0), label="t"), y)


def _clusters(d=3):
    """Tokens in two antipodal clusters (one token perturbed by 1e-9, within the rounding rule),
    and a generic one: y_i^T y_j - 1 is within 64 eps of 0 or below -0.1 (exact rescaled weights
    1 / l or 0 at huge beta)."""
    rng = np.random.default_rng(13)
    v = _sphere_points(rng, 1, d)[0]
    w = v + 1e-9 * _sphere_points(rng, 1, d)[0]
    u = np.linalg.qr(np.stack([v, rng.normal(size=d)], axis=1))[0][:, 1]  # orthogonal to v
    return np.stack([v, v, w / np.linalg.norm(w), -v, -v, u])


@pytest.mark.parametrize("beta", [800.0, 1e5, 1e300])
def test_rescaled_at_huge_beta(beta):
    y = _clusters()
    l = y.shape[0]
    exact = beta == 1e300
    for field in (ra.usa(beta, 3, rescaled=True), ra.usa(beta, 3, rescaled=True, mask="causal")):
        pack = _check_against_numpy(field, 0.0, y, exact_weights=exact)
        J = _eval(pack, kk.LIFTED_JAC, 0.0, y)
        assert np.all(np.isfinite(J))
        if exact:  # the weights are 1 / l within a cluster (j <= i when causal), 0 across: f exactly known
            G = y @ y.T
            A = np.where(np.abs(G - 1.0) <= 64 * EPS, 1.0 / l, 0.0)
            if field.mask == "causal":
                A = np.tril(A)
            np.testing.assert_allclose(_eval(pack, kk.UPDATE, 0.0, y), A @ y, rtol=0, atol=8 * l * EPS)
    # the ellipsoid with P = W: y_i^T W y_j <= 1 (Cauchy-Schwarz in the W inner product)
    W = np.diag([4.0, 1.0, 0.25])
    field = ra.AttentionField(W, np.eye(3), W=W, normalization="mean", beta=beta, rescaled=True)
    ye = field.manifold.projection(_clusters() * np.array([0.5, 1.0, 2.0]))
    _check_against_numpy(field, 0.0, ye, exact_weights=exact)
    # beta per trajectory, one of them huge
    betas = np.array([800.0, 1e5, 1e300])
    field = ra.AttentionField(np.eye(3), beta=betas, normalization="mean", rescaled=True)
    yb = np.stack([y, y[::-1], y[[0, 3, 5, 1, 2, 4]]])
    pack = kk.pack_field(field, yb.shape)
    for b in range(3):
        one = ra.usa(betas[b], 3, rescaled=True)
        bound_f, _ = _scales(one, 0.0, yb[b], exact_weights=betas[b] == 1e300)
        np.testing.assert_allclose(_eval(pack, kk.RHS, 0.0, yb[b], b), one(0.0, yb[b]), rtol=0, atol=bound_f)


def test_rescaled_overflow_where_the_numpy_form_raises():
    """Positive exponents beyond the float range (|P| > 1 at beta = 1e300): NumPy raises, the
    kernel returns non-finite values (a non-finite trajectory of the compiled loops)."""
    y = _clusters()
    field = ra.AttentionField(2.0 * np.eye(3), normalization="mean", beta=1e300, rescaled=True)
    with pytest.raises(ValidationError, match="overflow"):
        field(0.0, y)
    assert not np.all(np.isfinite(_eval(kk.pack_field(field, y.shape), kk.RHS, 0.0, y)))


@pytest.mark.parametrize("model", ["sa", "usa"])
@pytest.mark.parametrize("beta", [0.0, 2.0, 40.0, 800.0, 1e5, 1e300])
def test_circle_form_column_layout_and_rescaled(model, beta):
    """Angles as a column (B, n, 1), main's CircleField state on Euclidean(1), against the
    NumPy field called on that column; the rescaled USA (e^{-beta} USA) at every beta."""
    rng = np.random.default_rng(14)
    theta = rng.uniform(-np.pi, np.pi, size=(2, 6))
    theta[:, 1] = theta[:, 0]  # coincident
    theta[:, 2] = theta[:, 0] + np.pi  # antipodal
    y = theta[..., None]
    field = CircleField(beta, model, rescaled=model == "usa")  # (plain USA overflows past beta ~ 709)
    pack = kk.pack_field(field, y.shape)
    assert pack.ints[K.MANIFOLD] == K.MAN_FLAT and pack.l == 6 and pack.d == 1
    ref = field(0.0, y)
    assert ref.shape == y.shape
    # weights in [0, 1] (rescaled / SA): sums of 6 terms; the exponent beta (cos - 1) carries an
    # absolute rounding ~ 2 eps beta, a relative error of its weight -- unless the exponent is
    # exactly 0 (coincident angles) or the weight underflows in both (exponent < -745)
    expo = beta * (np.cos(theta[:, None, :] - theta[:, :, None]) - 1.0)
    kappa = beta if np.any((expo < 0) & (expo > -745)) else 0.0
    atol = 8 * EPS * (6 + kappa)
    for b in range(2):
        np.testing.assert_allclose(_eval(pack, kk.RHS, 0.0, y[b], b), ref[b], rtol=0, atol=atol)
        J = _eval(pack, kk.LIFTED_JAC, 0.0, y[b], b)
        assert np.all(np.isfinite(J))
        if beta <= 40.0:
            delta, fd = np.cbrt(EPS), np.empty((6, 6))
            for k in range(6):
                e = np.zeros((6, 1))
                e[k] = delta
                fd[:, k] = ((field(0.0, y[b] + e) - field(0.0, y[b] - e)) / (2 * delta))[:, 0]
            np.testing.assert_allclose(J, fd, rtol=0, atol=delta ** 2 * (1 + beta) ** 3 + 10 * delta ** 2)
        out = y[b] + 0.1 * _eval(pack, kk.UPDATE, 0.0, y[b], b)
        before = out.copy()
        kk.evaluate(kk.BLOCK, 0.0, y[b], b, pack.ints, pack.floats, pack.per, np.empty(pack.work), out)
        np.testing.assert_array_equal(out, before)  # flat: the block is the Euler step
    # the flat geometry kernels: copies and unit norms
    out, r = np.empty((6, 1)), np.empty(6)
    kk.project(y[0] * 3.0, pack.ints, pack.floats, out)
    np.testing.assert_array_equal(out, y[0] * 3.0)
    kk.wnorm(y[0], pack.ints, pack.floats, r)
    np.testing.assert_array_equal(r, 1.0)
    if model == "usa" and beta == 2.0:  # rescaled = e^{-beta} USA
        plain = kk.pack_field(CircleField(beta, "usa"), y.shape)
        np.testing.assert_allclose(math.exp(beta) * _eval(pack, kk.RHS, 0.0, y[0]),
                                   _eval(plain, kk.RHS, 0.0, y[0]), rtol=0, atol=64 * EPS * math.exp(beta))


# ---------------------------------------------------------------------------------------------
# the layer-norm placements (issue 36): RHS, UPDATE + BLOCK, Jacobian, dG/dt
PLACEMENTS = ("post", "pre", "peri", "ngpt", "mix")


def _ln(field, placement, alpha=0.7, switch=0.5):
    kw = {"alpha": alpha} if placement == "ngpt" else {"switch": switch} if placement == "mix" else {}
    return ra.layernorm(field, placement, **kw)


def _ln_state(g, theta, radii):
    """The state of g from directions theta (..., l, d) on E_W: theta itself on E_W (post, ngpt),
    theta_i times radii_i in R^d (pre, peri, mix)."""
    return theta if g.placement in ("post", "ngpt") else theta * np.asarray(radii)[..., None]


def _block(pack, t, y, h, b=0):
    """The layer step through the kernels: z = y + h UPDATE(t, y), then BLOCK in place."""
    z = y + h * _eval(pack, kk.UPDATE, t, y, b)
    kk.evaluate(kk.BLOCK, float(t), np.ascontiguousarray(y), b, pack.ints, pack.floats, pack.per,
                np.full(pack.work, np.nan), z)
    return z


def _ln_bounds(g, t, y, h):
    """Error bounds (RHS, block) of one trajectory y (l, d) of g, from those of the attention
    update A at x (the directions, or y for ngpt): delta_A = the update's bound plus the rounding
    of x (a few eps, times the update's Jacobian, bounded by bound_J); N(v) = v / |v|_W divides an
    absolute error by |v|_W and adds ~d eps; the tangent projection multiplies by ``proj``."""
    f = g.field
    x = y if g.placement in ("post", "ngpt") else g.directions(y)
    bound_f, bound_J = _scales(f, t, x)
    dA = bound_f + bound_J * np.max(np.abs(x))
    A = f.update(t, x)
    d = y.shape[-1]
    sW = math.sqrt(d * np.max(np.sum(np.abs(f.manifold.W), axis=-1)))
    proj = 1.0 + sW ** 2 * np.max(np.abs(x)) ** 2
    r = g.radii(y)

    def unit(err, v):  # error of N_W(v) from an absolute error err of v
        vmin, vmax = np.min(f.manifold.norm(v)), np.max(np.abs(v))
        return np.inf if vmin == 0 else 2 * (err * (1 + sW * vmax / vmin) + 4 * d * EPS * vmax) / vmin

    p = g.placement
    early = p == "mix" and t < g.switch
    if p in ("pre", "mix") and not early:
        tol_u = tol_F = dA
    elif early:
        tol_u, tol_F = np.max(r) * (dA + 2 * EPS * np.max(np.abs(A))), np.max(r) * proj * (dA + 8 * EPS * np.max(np.abs(A)))
    elif p == "post":
        tol_u, tol_F = bound_f, bound_f
    else:
        tol_n = 0.0 if np.all(A == 0) else unit(dA, A)
        alpha = g.alpha if p == "ngpt" else 1.0
        tol_u, tol_F = alpha * (tol_n + 2 * EPS), alpha * (tol_n + 8 * EPS) * proj
    err_z = h * tol_u + 4 * EPS * (np.max(np.abs(y)) + h * np.max(np.abs(A)) + 1.0)
    if p in ("post", "ngpt") or early:
        zz = y + h * (_eval(kk.pack_field(g, y.shape), kk.UPDATE, t, y))
        tol_block = unit(err_z, zz) * (np.max(r) if early else 1.0) + 4 * EPS * np.max(r)
    else:
        tol_block = err_z
    return tol_F + 1e-300, tol_block + 1e-300


def _ln_G(g, t, x):
    """The field the compiled loops integrate, from the NumPy model: |x|_W F(t, pi_W x) on E_W
    (post, ngpt), F itself on a flat state."""
    if g.placement in ("post", "ngpt"):
        r = g.field.manifold.norm(x)[..., None]
        return r * g(t, x / r)
    return g(t, x)


def _ln_check(g, t, y, h=0.3, jac=True):
    """RHS and the block of every trajectory of y equal the NumPy model's; the Jacobian its finite
    differences. Returns the pack."""
    pack = kk.pack_field(g, y.shape)
    F, Z = g(t, y), g.block(t, y, h)
    yb, Fb, Zb = (a.reshape((-1,) + a.shape[-2:]) for a in (y, F, Z))
    for b in range(yb.shape[0]):
        one = g if yb.shape[0] == 1 else _ln_one(g, b, y.shape[:-2])
        tol_F, tol_B = _ln_bounds(one, t, yb[b], h)
        np.testing.assert_allclose(_eval(pack, kk.RHS, t, yb[b], b), Fb[b], rtol=0, atol=tol_F)
        np.testing.assert_allclose(_block(pack, t, yb[b], h, b), Zb[b], rtol=0, atol=tol_B)
        if jac:
            _ln_check_jacobian(one, pack, t, yb[b], b)
    return pack


def _ln_one(g, b, batch):
    """g for trajectory b alone (its beta)."""
    f = g.field
    if isinstance(f.beta, float):
        return g
    beta = float(np.broadcast_to(f.beta, batch).reshape(-1)[b])
    one = ra.AttentionField(f._P.const, None if f._U is None else f._U.const,
                            W=None if isinstance(f.manifold, ra.Sphere) else f.manifold.W, mask=f.mask,
                            normalization=f.normalization, beta=beta, rescaled=f.rescaled)
    return _ln(one, g.placement, g.alpha, g.switch)


def _ln_check_jacobian(g, pack, t, y, b=0):
    """LIFTED_JAC against central differences of the NumPy model (``_ln_G``): truncation delta^2
    |G'''| / 6 with every derivative bringing a factor ``growth`` (the exponentials' 2 |beta P|
    |x|, 1 / r of the directions, 1 / |A|_W of N), rounding eps |G| / delta."""
    J = _eval(pack, kk.LIFTED_JAC, t, y, b)
    assert np.all(np.isfinite(J))
    l, d = y.shape
    delta = np.cbrt(EPS)
    fd = np.empty_like(J)
    for m in range(l * d):
        e = np.zeros(l * d)
        e[m] = delta
        e = e.reshape(l, d)
        fd[:, m] = ((_ln_G(g, t, y + e) - _ln_G(g, t, y - e)) / (2 * delta)).reshape(-1)
    f = g.field
    x = y if g.placement in ("post", "ngpt") else g.directions(y)
    growth = (1.0 + 2.0 * np.max(np.abs(f.P(t))) * d * np.max(np.abs(x))) / min(1.0, np.min(g.radii(y)))
    A = f.update(t, x)
    if g.placement in ("peri", "ngpt") and np.any(A != 0):  # (A = 0 everywhere: N(A) = 0, constant)
        growth *= 1.0 + np.max(np.abs(A)) / np.min(f.manifold.norm(A))
    scale = 1.0 + np.max(np.abs(fd)) + np.max(np.abs(_ln_G(g, t, y)))
    np.testing.assert_allclose(J, fd, rtol=0, atol=(delta ** 2 * growth ** 3 + 10 * delta ** 2) * scale)


def _draw_placed(data, t, time_varying, switch=None):
    """(a LayerNormField drawn with riemattn.testing's strategies, its state y, min |A_i|_W)."""
    field = data.draw(rst.attention_fields(dims=st.integers(2, 4), heads=st.integers(1, 2),
                                           time_varying=time_varying), label="field")
    placement = data.draw(st.sampled_from(PLACEMENTS), label="placement")
    switch = data.draw(st.floats(-1.0, 1.0), label="switch") if switch is None else switch
    g = _ln(field, placement, data.draw(st.floats(0.1, 2.0), label="alpha"), switch)
    l = data.draw(st.integers(1, 4), label="l")
    theta = data.draw(rst.points(field.manifold, tokens=l), label="theta")
    y = _ln_state(g, theta, data.draw(st.lists(st.floats(0.5, 2.0), min_size=l, max_size=l), label="radii"))
    A = field.update(t, y if placement in ("post", "ngpt") else g.directions(y))
    return g, y, np.min(field.manifold.norm(A))


@settings(max_examples=60)
@given(data=st.data())
def test_placements_equal_the_numpy_models(data):
    t = data.draw(st.floats(-1.0, 1.0), label="t")
    g, y, amin = _draw_placed(data, t, time_varying=False)
    # the Jacobian of N at A = 0 does not exist: finite differences only away from it
    jac = g.placement not in ("peri", "ngpt") or amin > 0.05
    _ln_check(g, t, y, h=data.draw(st.floats(0.01, 1.0), label="h"), jac=jac)


@settings(max_examples=30)
@given(data=st.data())
def test_placements_time_derivative_matches_finite_differences(data):
    switch = 5.0 if data.draw(st.booleans(), label="early") else -5.0
    g, y, amin = _draw_placed(data, 0.7, time_varying=True, switch=switch)
    field, placement = g.field, g.placement
    if placement in ("peri", "ngpt") and amin < 0.05:
        return  # N is not differentiable at A = 0
    A = field.update(0.7, y if placement in ("post", "ngpt") else g.directions(y))
    pack = kk.pack_field(g, y.shape)
    assert pack.autonomous is False
    t, dt = 0.7, np.cbrt(EPS)
    fd = (_ln_G(g, t + dt, y) - _ln_G(g, t - dt, y)) / (2 * dt)
    growth = (1.0 + 6.0) * (1.0 + 2.0 * np.max(np.abs(field.P(t))) * field.d)
    if placement in ("peri", "ngpt"):
        growth *= 1.0 + np.max(np.abs(A)) / amin
    scale = 1.0 + np.max(np.abs(fd)) + np.max(np.abs(_ln_G(g, t, y)))
    np.testing.assert_allclose(_eval(pack, kk.TIME_DERIVATIVE, t, y), fd, rtol=0,
                               atol=(dt ** 2 * growth ** 3 + 10 * dt ** 2) * scale)


@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize("normalization", ["paper", "softmax", "mean"])
def test_placements_causal_ellipsoid_array_beta(placement, normalization):
    """Every placement with every normalization: causal mask, an ellipsoid, one beta per
    trajectory, the rescaled form for "mean"; mix on both sides of its switch (and at it)."""
    rng = np.random.default_rng(15)
    W = np.diag([2.0, 1.0, 0.5])
    field = ra.AttentionField(rng.normal(size=(2, 3, 3)) / 2, rng.normal(size=(3, 3)), W=W, mask="causal",
                              normalization=normalization, beta=np.array([0.5, 3.0]),
                              rescaled=normalization == "mean")
    g = _ln(field, placement, switch=0.5)
    theta = field.manifold.projection(rng.normal(size=(2, 4, 3)))
    y = _ln_state(g, theta, rng.uniform(0.5, 2.0, size=(2, 4)))
    for t in ((0.0, 0.5, 1.0) if placement == "mix" else (0.0,)):
        pack = _ln_check(g, t, y)
    assert pack.ints[K.PLACEMENT] == {"post": 0, "pre": 1, "peri": 2, "ngpt": 3, "mix": 4}[placement]
    assert (pack.ints[K.MANIFOLD] == K.MAN_FLAT) == (placement in ("pre", "peri", "mix"))
    assert pack.breaks.tolist() == ([0.5] if placement == "mix" else [])
    assert pack.autonomous is (placement != "mix")
    np.testing.assert_array_equal(_eval(pack, kk.TIME_DERIVATIVE, 0.2, y[0]), 0.0)  # constant weights


@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize("tokens", ["coincident", "antipodal"])
def test_placements_at_coincident_and_antipodal_tokens(placement, tokens):
    rng = np.random.default_rng(16)
    v = _sphere_points(rng, 1, 3)[0]
    theta = np.stack([v, v, v]) if tokens == "coincident" else np.stack([v, -v, v, -v])
    P, U = rng.normal(size=(2, 3, 3)), rng.normal(size=(2, 3, 3))
    for field in (ra.AttentionField(P, U, normalization="softmax"), ra.usa(1e5, 3, rescaled=True)):
        g = _ln(field, placement)
        A = field.update(0.0, theta)
        jac = placement not in ("peri", "ngpt") or np.min(field.manifold.norm(A)) > 0.05
        jac = jac and field.beta < 10  # finite differences resolve moderate beta only
        _ln_check(g, 0.0, _ln_state(g, theta, np.linspace(0.5, 2.0, theta.shape[0])), jac=jac)


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_placements_with_zero_values(placement):
    """U = 0: A = 0, N(0) = 0 -- peri and ngpt move nothing; their Jacobians are 0 (the models
    are constant); nGPT's block keeps the tokens (N(y - alpha h y) = y)."""
    rng = np.random.default_rng(17)
    field = ra.AttentionField(rng.normal(size=(3, 3)), np.zeros((3, 3)), W=np.diag([1.0, 2.0, 3.0]))
    g = _ln(field, placement)
    theta = field.manifold.projection(rng.normal(size=(4, 3)))
    y = _ln_state(g, theta, rng.uniform(0.5, 2.0, size=4))
    pack = _ln_check(g, 0.0, y)
    for t in (0.0, 1.0):  # (mix: before and after its switch)
        np.testing.assert_array_equal(_eval(pack, kk.RHS, t, y), 0.0)
        np.testing.assert_array_equal(_eval(pack, kk.LIFTED_JAC, t, y), 0.0)
    if placement == "ngpt":
        np.testing.assert_allclose(_block(pack, 0.0, y, 0.4), y, rtol=0, atol=4 * EPS)


@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize("t", [0.2, 1.3])
def test_placements_time_derivative_off_the_unit_radius(placement, t):
    """dG/dt of every placement (mix before and after its switch at 1) at tokens of radii != 1
    (off E_W for post and ngpt: the lifted field |x|_W F(t, pi_W x)), against finite differences
    in t of the NumPy model."""
    rng = np.random.default_rng(18)
    tv = TimeVaryingHeads(rng.normal(size=(2, 3, 3)) / 2, rng.normal(size=(1, 2, 3, 3)) / 2, np.array([2.0]),
                          np.array([0.3]))
    field = ra.AttentionField(tv, tv, W=np.diag([2.0, 1.0, 0.5]), normalization="softmax", beta=1.5)
    g = _ln(field, placement, switch=1.0)
    y = field.manifold.projection(rng.normal(size=(4, 3))) * rng.uniform(0.5, 2.0, size=(4, 1))
    pack = kk.pack_field(g, y.shape)
    dt = np.cbrt(EPS)
    fd = (_ln_G(g, t + dt, y) - _ln_G(g, t - dt, y)) / (2 * dt)
    # truncation dt^2 |d^3G/dt^3| / 6: omega = 2 and weights growing by 2 |beta P| per derivative
    growth = (1.0 + 2.0) * (1.0 + 2.0 * np.max(np.abs(field.P(t))) * 3)
    scale = 1.0 + np.max(np.abs(fd))
    np.testing.assert_allclose(_eval(pack, kk.TIME_DERIVATIVE, t, y), fd, rtol=0,
                               atol=(dt ** 2 * growth ** 3 / 6 + 10 * dt ** 2) * scale)
# the difference form of the stiff steps (op RHS_DIFF, riemattn.dynamics._tangent)
@settings(max_examples=60)
@given(data=st.data())
def test_difference_form_equals_the_numpy_stiff_steppers_form(data):
    """RHS_DIFF is ``_tangent.on_manifold``: the form (D) where it applies (U = I, sphere or
    ellipsoid), the field itself elsewhere (bitwise RHS)."""
    from riemattn.dynamics._tangent import applies, on_manifold

    field = data.draw(rst.attention_fields(dims=st.integers(2, 4), heads=st.integers(1, 3),
                                           values=("identity", "matrices")), label="field")
    y = data.draw(rst.points(field.manifold, tokens=st.integers(1, 5)), label="y")
    pack = kk.pack_field(field, y.shape)
    D = _eval(pack, kk.RHS_DIFF, 0.4, y)
    if applies(field, y):
        # (D)'s terms alpha_ij |y_j - y_i| are at most twice f's alpha_ij |y_j| + alpha_ij |y_i|
        np.testing.assert_allclose(D, on_manifold(field, 0.4, y), rtol=0, atol=2 * _scales(field, 0.4, y)[0])
    else:
        np.testing.assert_array_equal(D, _eval(pack, kk.RHS, 0.4, y))


def test_difference_form_has_relative_rounding_on_a_plateau():
    """A collapsed cluster (3 bitwise-equal tokens) and far tokens at beta = 1000 (SA on S^1): the
    field's tangent parts are e^{-beta delta^2 / 2}-small, below the absolute rounding eps |f_i| of
    RHS; RHS_DIFF carries a relative rounding. Reference: the angle equations of CircleField (sines
    of exact angle differences), mapped to the tangent lines."""
    th = np.array([0.0708, 0.0708, 0.0708, 0.3399, 0.5948])
    y = np.stack([np.cos(th), np.sin(th)], -1)
    field = ra.AttentionField(1000.0 * np.eye(2), normalization="softmax")
    tang = np.stack([-np.sin(th), np.cos(th)], -1)
    ref = CircleField(1000.0, "sa")(0.0, th[:, None])[:, 0]
    assert np.max(np.abs(ref[:3])) < 1e-16  # the cluster's drift, 2e-17: below RHS's rounding eps |f_i|
    pack = kk.pack_field(field, y.shape)
    D = _eval(pack, kk.RHS_DIFF, 0.0, y)
    # rounding: cos/sin of the angles and the far weights, a few eps relative to |ref| (RHS: 24 %)
    np.testing.assert_allclose(np.sum(D * tang, -1), ref, rtol=1e-12, atol=0)
    assert np.max(np.abs(np.sum(D * y, -1))) <= 4 * EPS * np.max(np.abs(ref))  # no normal part
