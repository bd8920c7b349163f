"""riemattn.testing: every strategy's guarantee as a property test (ci profile), the checkers on
right and planted-wrong inputs, the slope checks against theory, and the mutation checks (a
field with a sign error in its attention weights, a non-tangent field: both caught within
Hypothesis's default 100 examples, and shrunk to l <= 3, d <= 3).
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import riemattn as ra
from riemattn import testing as rt
from riemattn.errors import MissingDependencyError, ValidationError
from riemattn.testing import strategies as rs

ROUND = 1e-12


def _wnorm2(y, W):
    return np.einsum("...i,ij,...j->...", y, W, y)


# ----------------------------------------------------------------------------------------------
# the optional dependency
def test_import_without_hypothesis_names_the_extra():
    code = ("import sys; sys.modules['hypothesis'] = None\n"
            "try:\n    import riemattn.testing\nexcept ImportError as e:\n"
            "    print(type(e).__name__, '|', e)\nelse:\n    print('imported')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.startswith("MissingDependencyError |"), out
    assert "pip install 'riemattn[testing]'" in out
    assert issubclass(MissingDependencyError, ImportError) and issubclass(MissingDependencyError, ra.RiemattnError)


# ----------------------------------------------------------------------------------------------
# strategies: their guarantees
@given(Q=rs.orthogonal_matrices(rs.DIMS))
def test_orthogonal_matrices_are_orthogonal(Q):
    np.testing.assert_allclose(Q.T @ Q, np.eye(len(Q)), atol=ROUND)


@given(data=st.data(), max_condition=st.floats(1.0, 1e3))
def test_spd_condition_number_within_bound(data, max_condition):
    W = data.draw(rs.spd_matrices(rs.DIMS, max_condition=max_condition))
    assert np.array_equal(W, W.T)
    lam = np.linalg.eigvalsh(W)
    assert lam[0] >= 1 - ROUND and lam[-1] <= max_condition * (1 + ROUND)
    assert lam[-1] / lam[0] <= max_condition * (1 + 2 * ROUND)
    ra.Ellipsoid(W)  # accepted by the package's own SPD check


@given(data=st.data())
def test_points_on_the_manifold(data):
    M = data.draw(rs.manifolds(kinds=rs.MANIFOLD_KINDS))
    batch = data.draw(hnp.array_shapes(min_dims=0, max_dims=2, max_side=3))
    y = data.draw(rs.points(M, batch_shape=batch))
    assert y.shape[:-2] == batch and y.shape[-1] == M.ambient_dim and 1 <= y.shape[-2] <= 5
    assert np.all(np.isfinite(y))
    if not isinstance(M, ra.Euclidean):
        assert np.max(np.abs(_wnorm2(y, M.W) - 1), initial=0) <= ROUND


@given(data=st.data(), margin=st.floats(1e-6, 0.3))
def test_hemisphere_points_margin(data, margin):
    M = data.draw(rs.manifolds())
    batch = data.draw(hnp.array_shapes(min_dims=0, max_dims=1, max_side=3))
    given_v = data.draw(st.booleans())
    v_in = data.draw(rs.unit_vectors(M.ambient_dim)) * 2.0 if given_v else None
    y, v = data.draw(rs.hemisphere_points(M, v=v_in, batch_shape=batch, min_margin=margin))
    assert y.shape[:-2] == batch
    if given_v:
        assert np.array_equal(v, v_in)
    else:
        assert abs(np.linalg.norm(v) - 1) <= ROUND
    assert np.max(np.abs(_wnorm2(y, M.W) - 1), initial=0) <= ROUND
    assert np.all(y @ v >= margin * (1 - ROUND))


def test_hemisphere_margin_above_the_maximum_is_an_error():
    M = ra.Ellipsoid(np.diag([1.0, 4.0]))  # max of e_2^T y on E_W is 1/2
    with pytest.raises(ValidationError, match="min_margin"):
        find(rs.hemisphere_points(M, v=[0.0, 1.0], min_margin=0.5), lambda _: True)


@given(data=st.data(), scale=st.floats(1e-3, 1e3))
def test_tangent_vectors_are_tangent(data, scale):
    M = data.draw(rs.manifolds())
    y = data.draw(rs.points(M, batch_shape=data.draw(st.sampled_from([(), (2,)]))))
    u = data.draw(rs.tangent_vectors(M, y, scale=scale))
    assert u.shape == y.shape
    W = M.W
    assert np.all(np.abs(np.einsum("...i,ij,...j->...", y, W, u)) <= 1e-14 * M.ambient_dim * np.linalg.norm(W, 2) * scale)


@given(data=st.data(), scale=st.floats(0.01, 10.0), symmetric=st.booleans(),
       times=st.lists(st.floats(-100, 100), min_size=1, max_size=4))
def test_head_matrices_bounds(data, scale, symmetric, times):
    h, d = data.draw(rs.HEADS), data.draw(rs.DIMS)
    P = data.draw(rs.head_matrices(h, d, symmetric=symmetric, time_varying=None, scale=scale))
    if isinstance(P, np.ndarray):
        assert P.shape == (h, d, d) and np.all(np.abs(P) <= scale)
        mats = P[None]
    else:
        assert np.all(P.entry_bound <= scale)
        mats = np.stack([P(t) for t in times])
        # one time per call or all at once: the same sums, up to the rounding of K + 1 terms of size <= scale
        np.testing.assert_allclose(P(np.array(times)), mats, rtol=0, atol=4 * np.finfo(float).eps * scale)
        # the spectral norm, computed by an SVD: rounding relative to the norm (d^2 eps, d <= 5)
        assert np.all(np.linalg.norm(mats, 2, axis=(-2, -1)) <= P.bound * (1 + 32 * np.finfo(float).eps))
    assert mats.shape[-3:] == (h, d, d)
    assert np.all(np.abs(mats) <= scale)  # the documented entry bound, exactly (at every time)
    if symmetric:
        assert np.array_equal(mats, np.swapaxes(mats, -1, -2))


@pytest.mark.parametrize("d, h", [(3, 2), (3, 3), (5, 2)])
def test_time_varying_heads_symmetric_bit_for_bit(d, h):
    """Issue 34 item 1: B = 0, A all 3, omega = (0, 1), phi = (2, 2) at t = 1 rounded mirrored
    entries of sin(...) @ A differently under NumPy's AVX-512 kernels; symmetric=True must give
    exactly symmetric matrices (for one time and for many) on every CPU."""
    P = rs.TimeVaryingHeads(np.zeros((h, d, d)), np.full((2, h, d, d), 3.0), np.array([0.0, 1.0]),
                            np.array([2.0, 2.0]), symmetric=True)
    for M in (P(1.0), P(np.array([1.0, 0.3, -7.0]))):
        assert np.array_equal(M, np.swapaxes(M, -1, -2))
    with pytest.raises(ValidationError, match="symmetric"):
        rs.TimeVaryingHeads(np.zeros((1, 2, 2)), np.array([[[[0.0, 1.0], [0.0, 0.0]]]]), np.ones(1), np.ones(1),
                            symmetric=True)


@given(pair=rs.symmetric_with_top_eigenvector(rs.DIMS, dominant=None))
def test_symmetric_with_top_eigenvector(pair):
    U, v = pair
    lam = np.linalg.eigvalsh(U)
    np.testing.assert_allclose(U @ v, lam[-1] * v, atol=1e-12)
    assert 0.5 - ROUND <= lam[-1] <= 2 + ROUND and (len(lam) == 1 or lam[-2] <= 0.7 * lam[-1] + ROUND)


@given(beta=rs.betas(min_value=0.5, max_value=3.0))
def test_betas_within_bounds(beta):
    assert np.isfinite(beta) and 0.5 <= beta <= 3.0


@given(data=st.data())
def test_attention_fields_and_their_points(data):
    field = data.draw(rs.attention_fields(heads=st.integers(1, 2), masks=("causal",)))
    assert isinstance(field, ra.AttentionField) and field.mask == "causal" and field.h <= 2
    assert 0 <= field.beta <= 2
    y = data.draw(rs.points(field.manifold, batch_shape=(2,)))
    t = data.draw(st.floats(0, 10))
    rt.assert_tangent(field, y, t=t, atol=1e-13 * (1 + np.linalg.norm(field.update(t, y), axis=-1)
                                                     * np.linalg.norm(field.manifold.W, 2)), rtol=0)


def test_strategies_shrink_toward_small_sizes():
    y = find(rs.points(rs.manifolds()), lambda y: True)
    assert y.shape == (1, 2) and np.array_equal(y, [[1.0, 0.0]])
    field = find(rs.attention_fields(), lambda f: True)
    assert field.d == 2 and field.h == 1 and isinstance(field.manifold, ra.Sphere) and field.beta == 0
    assert find(rs.spd_matrices(3), lambda W: True).tolist() == np.eye(3).tolist()
    # a property that fails only for l >= 3 tokens in d >= 3 shrinks to exactly that size
    y = find(rs.points(rs.spheres()), lambda y: y.shape[0] >= 3 and y.shape[1] >= 3)
    assert y.shape == (3, 3)


# ----------------------------------------------------------------------------------------------
# checkers
def test_assert_on_manifold_names_time_trajectory_token():
    M = ra.Ellipsoid(np.diag([1.0, 2.0, 3.0]))
    y = M.projection(np.random.default_rng(0).normal(size=(4, 2, 5, 3)))
    rt.assert_on_manifold(M, y)
    y[2, 1, 3] *= 1.001
    with pytest.raises(AssertionError, match=r"t = 0.5 \(save index 2\), trajectory \(1,\), token 3: "
                                             r"\|y\^T W y - 1\| = 2.00\de-03"):
        rt.assert_on_manifold(M, y, times=[0.0, 0.25, 0.5, 0.75])
    with pytest.raises(AssertionError, match=r"trajectory \(2, 1\), token 3"):
        rt.assert_on_manifold(M, y)


def _softmax_field(W, P, *, sign=1.0, tangent=True):
    """A user's attention field, written from ICML eq. (6) with one head and U = I; ``sign=-1``
    plants a sign error in the attention weights, ``tangent=False`` drops the projection."""
    M = ra.Sphere(len(P) - 1) if W is None else ra.Ellipsoid(W)

    def f(t, y):
        S = y @ P @ np.swapaxes(y, -1, -2)
        A = sign * np.exp(S - S.max(axis=-1, keepdims=True))
        A /= np.abs(A).sum(axis=-1, keepdims=True)
        F = A @ y
        return M.tangent(y, F) if tangent else F

    return ra.VectorField(f, M)


def test_assert_tangent_and_forward_invariance_pass_and_fail():
    rng = np.random.default_rng(1)
    W, P = np.diag([1.0, 2.0, 3.0]), rng.uniform(-1, 1, (3, 3))
    v = np.array([0.0, 0.0, 1.0])
    y0 = ra.Ellipsoid(W).projection(rng.normal(size=(2, 4, 3)) * [1, 1, 0.1] + [0, 0, 0.3])
    assert np.all(y0 @ v > 0)
    good = _softmax_field(W, P)
    rt.assert_tangent(good, y0, t=0.3)
    rt.assert_forward_invariant(good, y0, v=v, t_span=(0, 2), nondecreasing=True)
    rt.assert_forward_invariant(good, y0, region=lambda t, y: (y @ v).min(axis=-1), stepper="dopri5")
    with pytest.raises(AssertionError, match=r"field not tangent at t = 0.3, trajectory \(\d,\), token \d: \|y\^T W F\|"):
        rt.assert_tangent(_softmax_field(W, P, tangent=False), y0, t=0.3)
    with pytest.raises(AssertionError, match=r"left the region \(rk4 dt = 0.05 on \[0, 20\]\) at t = .*"
                                             r"trajectory \(\d,\), token \d: v\^T y_i = -?\d"):
        rt.assert_forward_invariant(_softmax_field(W, P, sign=-1.0), y0, v=v, t_span=(0, 20))
    with pytest.raises(ValidationError, match="not inside the region"):
        rt.assert_forward_invariant(good, y0, v=-v)


# ----------------------------------------------------------------------------------------------
# slopes
@pytest.mark.parametrize("stepper", ["heun", "rk4", "rkmk4", "cf4"])
def test_check_order_gives_declared_order(stepper):
    """Against SciPy's DOP853 at rtol 2.5e-14 (reference_solution): a two-head time-varying
    attention field on an ellipsoid, 2 trajectories of 4 tokens."""
    rng = np.random.default_rng(0)
    B = rng.uniform(-1, 1, (2, 3, 3))
    field = ra.AttentionField(lambda t: B * (1 + 0.5 * np.sin(3 * t)), W=np.diag([1.0, 2.0, 3.0]))
    y0 = field.manifold.projection(rng.normal(size=(2, 4, 3)))
    fit = rt.check_order(stepper, field, y0).assert_slope(tol=0.2)
    assert fit.expected == ra.STEPPERS[stepper].order and abs(fit.order - fit.expected) <= 0.2


@pytest.mark.parametrize("manifold", [ra.Sphere(3), ra.Ellipsoid(np.diag([1.0, 2.0, 5.0, 9.0]))], ids=repr)
def test_check_retraction_slopes(manifold):
    assert abs(rt.check_retraction(manifold).slope - 2) <= 0.2  # a retraction
    assert abs(rt.check_retraction(manifold, against="exp").slope - 3) <= 0.2  # a second-order one
    y = manifold.projection(np.random.default_rng(2).normal(size=(3, 4)))
    fit = rt.check_retraction(manifold, base_point=y, tangent_vector=manifold.to_tangent(np.ones(4), y))
    fit.assert_slope()
    with pytest.raises(AssertionError, match="measured slope 2.0"):
        fit.assert_slope(3.0)


def test_check_riemannian_gradient_right_and_wrong():
    """f(y) = sum_i a^T y_i on the sphere: grad f = (I - y y^T) a per token (by hand)."""
    M = ra.Sphere(2)
    a = np.array([0.3, -1.0, 2.0])
    y = M.projection(np.random.default_rng(3).normal(size=(4, 3)))
    cost = lambda y: float(np.sum(y @ a))
    assert abs(rt.check_riemannian_gradient(M, cost, lambda y: M.tangent(y, a + 0 * y), y).slope - 2) <= 0.2
    wrong = rt.check_riemannian_gradient(M, cost, lambda y: 0.5 * M.tangent(y, a + 0 * y), y)
    assert abs(wrong.slope - 1) <= 0.2, wrong
    with pytest.raises(AssertionError, match="gradient not tangent"):
        rt.check_riemannian_gradient(M, cost, lambda y: a + 0 * y, y)


def test_check_riemannian_gradient_of_the_arxiv_potential():
    """The package's g-gradient of V (ARXIV eqs. 9, 10), computed by autograd, against the slope
    of its first-order model in the metric g."""
    from riemattn.analysis import gradients as gr

    rng = np.random.default_rng(4)
    Bm = rng.normal(size=(3, 3))
    P = Bm @ Bm.T / 3 + np.eye(3)
    M = ra.Ellipsoid(P)
    y = M.projection(rng.normal(size=(5, 3)))
    fit = rt.check_riemannian_gradient(M, lambda x: gr.potential(x, P), lambda x: gr.riemannian_gradient(
        lambda z: gr.potential(z, P), x, P), y, metric=lambda x, X, Y: gr.metric(x, X, Y, P))
    assert abs(fit.slope - 2) <= 0.2, fit


# ----------------------------------------------------------------------------------------------
# mutation checks: the planted bugs are caught and shrunk
def _first_failure(prop):
    """Run a Hypothesis property with the default 100 examples (no "explain" phase, whose line
    tracing is slow); return (error, shrunk example's shape, number of the first failing call)."""
    seen, failed = [], []

    def body(data):
        try:
            prop(data, seen)
        except AssertionError:
            failed.append(len(seen))
            raise

    test = settings(max_examples=100, derandomize=True, database=None, deadline=None, report_multiple_bugs=False,
                    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
                    suppress_health_check=[HealthCheck.too_slow])(given(data=st.data())(body))
    with pytest.raises(AssertionError) as info:
        test()
    return info.value, seen[-1], failed[0]  # Hypothesis replays the shrunk example last


def test_mutation_sign_error_in_attention_weights_is_caught_and_shrunk():
    def prop(data, seen):
        M = data.draw(rs.manifolds())
        P = data.draw(rs.head_matrices(1, M.ambient_dim))[0]
        y, v = data.draw(rs.hemisphere_points(M))
        seen.append(y.shape)
        field = _softmax_field(None if isinstance(M, ra.Sphere) else M.W, P, sign=-1.0)
        rt.assert_forward_invariant(field, y, v=v, t_span=(0.0, 0.2), dt=0.05)

    err, (l, d), first = _first_failure(prop)
    print(f"sign error: first failing example {first}, shrunk to l = {l}, d = {d}: {err}")
    assert "left the region" in str(err) and first <= 100 and l <= 3 and d <= 3


def test_mutation_non_tangent_field_is_caught_and_shrunk():
    def prop(data, seen):
        M = data.draw(rs.manifolds())
        P = data.draw(rs.head_matrices(1, M.ambient_dim))[0]
        y = data.draw(rs.points(M))
        seen.append(y.shape)
        rt.assert_tangent(_softmax_field(None if isinstance(M, ra.Sphere) else M.W, P, tangent=False), y)

    err, (l, d), first = _first_failure(prop)
    print(f"non-tangent: first failing example {first}, shrunk to l = {l}, d = {d}: {err}")
    assert "not tangent" in str(err) and first <= 100 and l <= 3 and d <= 3


def test_bad_arguments_raise_the_package_errors():
    from riemattn.errors import InputTypeError

    S = ra.Sphere(2)
    y = S.projection(np.random.default_rng(5).normal(size=(3, 3)))
    field = ra.AttentionField(np.eye(3))
    with pytest.raises(InputTypeError, match="field must be a riemattn Field"):
        rt.assert_tangent(lambda t, y: y, y)
    with pytest.raises(ValidationError, match="steps must be at least two positive integers"):
        rt.check_order("rk4", field, y, steps=(8,))
    with pytest.raises(ValidationError, match="stepper must be one of"):
        rt.check_order("rk5", field, y)
    with pytest.raises(ValidationError, match="against must be 'line' or 'exp'"):
        rt.check_retraction(S, against="geodesic")
    with pytest.raises(ValidationError, match="region must be 'hemisphere' or a callable"):
        rt.assert_forward_invariant(field, y, region="cube")
    with pytest.raises(ValidationError, match=r"d = 4 components"):
        rt.assert_on_manifold(ra.Sphere(3), y)
    with pytest.raises(InputTypeError, match="tokens must be an int or a Hypothesis strategy"):
        find(rs.points(S, tokens=2.5), lambda _: True)
    with pytest.raises(ValidationError, match="kinds must be a nonempty subset"):
        find(rs.manifolds(kinds=("torus",)), lambda _: True)
    with pytest.raises(ValidationError, match="max_condition must be >= 1"):
        find(rs.spd_matrices(2, max_condition=0.5), lambda _: True)


def test_checkers_accept_an_empty_batch():
    """Found by tests/suites/test_edges.py: assert_on_manifold and assert_tangent raised ValueError
    (argmax of an empty sequence) on an empty batch, which integrate returns for y0 of shape (0, l, d)."""
    S = ra.Sphere(2)
    empty = np.zeros((0, 2, 3))
    rt.assert_on_manifold(S, empty)
    rt.assert_on_manifold(S, np.zeros((3, 0, 2, 3)), times=np.arange(3.0))
    rt.assert_tangent(ra.AttentionField(np.eye(3)), empty)


@given(data=st.data())
def test_token_configurations_guarantees(data):
    M = data.draw(rs.manifolds(kinds=rs.MANIFOLD_KINDS))
    kinds = data.draw(st.lists(st.sampled_from(rs.CONFIGURATIONS), min_size=1, unique=True))
    batch = data.draw(st.sampled_from([(), (3,), (2, 2), (0,)]))
    y = data.draw(rs.token_configurations(M, batch_shape=batch, kinds=kinds))
    assert y.shape[:-2] == batch and y.shape[-1] == M.ambient_dim and np.all(np.isfinite(y))
    if not isinstance(M, ra.Euclidean):
        assert np.max(np.abs(_wnorm2(y, M.W) - 1), initial=0) <= ROUND
    for config in y.reshape((-1,) + y.shape[-2:]):
        same = np.all(config == config[0])
        anti = np.all((config == config[0]) | (config == -config[0]))
        if kinds == ["coincident"]:
            assert same
        if kinds == ["antipodal"]:
            assert anti and np.array_equal(config[1::2], -np.broadcast_to(config[0], config[1::2].shape))


@given(data=st.data(), T=st.floats(1e-12, 1e3), max_steps=st.integers(1, 40))
def test_step_sizes_from_the_whole_horizon_down(data, T, max_steps):
    dt = data.draw(rs.step_sizes((1.0, 1.0 + T), max_steps=max_steps))
    span = (1.0 + T) - 1.0
    assert span / max_steps * (1 - ROUND) <= dt <= 4 * span * (1 + ROUND)


def test_step_sizes_shrink_to_one_step_over_the_span():
    assert find(rs.step_sizes((0.0, 2.5)), lambda _: True) == 2.5
    assert find(rs.step_sizes((2.0, 2.0)), lambda _: True) == 1.0
