"""Every checker of riemattn.testing passes exactly-right inputs and fails planted bugs, at the
edges too (issue 34). ``CASES`` maps each public checker (``assert_*``, ``check_*`` of
``riemattn.testing.__all__``, discovered) to a right and a planted-wrong case; a new checker
without cases fails ``test_every_checker_has_cases``.

The degenerate points where the checkers used to fail correct code (issue 34 item 4) are
``test_checkers_at_degenerate_points``.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import riemattn as ra
from riemattn import testing as rt
from riemattn.errors import ValidationError
from riemattn.testing import strategies as rs

from _edge_problems import attention
from _edges import budget

CHECKERS = sorted(n for n in rt.__all__ if n.startswith(("assert_", "check_")))
SMALL = st.integers(2, 3)


def _tangent_atol(field, y, t=0.0):
    """Rounding of the field's projection: relative to the un-projected update (docs/testing.md)."""
    W = field.manifold.W
    return 1e-13 * (1 + np.linalg.norm(field.update(t, y), axis=-1) * np.linalg.norm(W, 2))


# --- each checker: (right, planted); both draw from ``data`` -----------------------------------
def on_manifold_right(data):
    M = data.draw(rs.manifolds(dims=SMALL, kinds=rs.MANIFOLD_KINDS))
    rt.assert_on_manifold(M, data.draw(rs.token_configurations(M, batch_shape=st.sampled_from([(), (2,), (0,)]))))


def on_manifold_planted(data):
    M = data.draw(rs.manifolds(dims=SMALL, kinds=rs.MANIFOLD_KINDS))
    y = data.draw(rs.token_configurations(M, batch_shape=st.sampled_from([(), (2,)])))
    k = data.draw(st.integers(0, y.shape[-2] - 1))
    y[..., k, :] *= np.nan if isinstance(M, ra.Euclidean) else 1 + 1e-6  # off by 2e-6 > atol 1e-10
    rt.assert_on_manifold(M, y)


def tangent_right(data):
    M = data.draw(rs.manifolds(dims=SMALL))
    field = data.draw(attention(M))
    y = data.draw(rs.token_configurations(M, batch_shape=st.sampled_from([(), (2,)])))
    rt.assert_tangent(field, y, atol=_tangent_atol(field, y), rtol=0)


def tangent_planted(data):
    M = data.draw(rs.manifolds(dims=SMALL))
    field = data.draw(attention(M))
    y = data.draw(rs.token_configurations(M))
    bad = ra.VectorField(lambda t, z: field(t, z) + 1e-3 * z, M)  # a normal component of size 1e-3
    rt.assert_tangent(bad, y)


def forward_invariant_right(data):
    M = data.draw(rs.manifolds(dims=SMALL))
    y0, v = data.draw(rs.hemisphere_points(M))
    if data.draw(st.booleans()):
        y0 = np.broadcast_to(y0[..., :1, :], y0.shape).copy()  # coincident: an equilibrium
    d = M.ambient_dim
    field = ra.AttentionField(data.draw(rs.head_matrices(1, d)), W=None if isinstance(M, ra.Sphere) else M.W,
                              beta=data.draw(st.sampled_from([0.0, 1.0])))
    rt.assert_forward_invariant(field, y0, v=v, t_span=(0.0, 0.3), dt=0.1, nondecreasing=True)


def forward_invariant_planted(data):
    M = data.draw(rs.manifolds(dims=SMALL))
    y0, v = data.draw(rs.hemisphere_points(M))
    Winv_v = np.linalg.solve(M.W, v)
    kappa = float(np.sqrt(v @ Winv_v))
    assume(np.min(y0 @ v) < kappa * (1 - 1e-3))  # some token off the pole, where the pull is zero
    # the W-gradient of -v^T y pushed along: d/dt v^T y = (v^T y)^2 - kappa^2 < 0 off the pole
    # (the tangent part of -v itself need not decrease v^T y on an ellipsoid: at W = diag(1, 2),
    # y = (0.578, 0.577), v = (1, 1)/sqrt(2) it increases it)
    away = ra.VectorField(lambda t, z: M.tangent(z, np.broadcast_to(-3.0 * Winv_v, z.shape)), M)
    rt.assert_forward_invariant(away, y0, v=v, t_span=(0.0, 0.3), dt=0.1, nondecreasing=True)


def order_right(data):
    stepper = data.draw(st.sampled_from(["heun", "rk4", "cf4"]))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    field = ra.AttentionField(rng.uniform(-1, 1, (1, 3, 3)), W=np.diag([1.0, 2.0, 3.0]))
    y0 = field.manifold.projection(rng.normal(size=(3, 3)))
    rt.check_order(stepper, field, y0, steps=(4, 8, 16, 32)).assert_slope(tol=0.2)


def order_planted(data):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    field = ra.AttentionField(rng.uniform(-1, 1, (1, 3, 3)))
    y0 = field.manifold.projection(rng.normal(size=(3, 3)))
    # steps outside euler's asymptotic range (local slopes 0.76, 0.90, 0.95 at 4 .. 32) are refused
    # with a ValidationError ("choose other steps"), never passed: follow it, finer
    for steps in ((4, 8, 16, 32), (16, 32, 64, 128), (64, 128, 256, 512)):
        try:
            fit = rt.check_order("euler", field, y0, steps=steps, expected=4)  # order 1
            break
        except ValidationError as error:
            assert "asymptotic range" in str(error)
    else:
        assume(False)  # no steps showed euler's order: refused every time (never passed)
    fit.assert_slope(tol=0.2)


def retraction_right(data):
    M = data.draw(rs.manifolds(dims=SMALL))
    rt.check_retraction(M, against=data.draw(st.sampled_from(["line", "exp"])),
                        seed=data.draw(st.integers(0, 2**16))).assert_slope(tol=0.2)


class _FirstOrder:
    """A manifold whose retraction is off by O(t^2) (a first-order retraction): planted."""

    def __init__(self, M):
        self.M, self.e = M, M.retract(np.ones(M.ambient_dim))

    def __getattr__(self, name):
        return getattr(self.M, name)

    def retract(self, z):
        return self.M.retract(z + (self.M.inner(z, z) - 1.0)[..., None] * self.e)


def retraction_planted(data):
    M = data.draw(rs.manifolds(dims=SMALL))
    rt.check_retraction(_FirstOrder(M), against="exp", seed=data.draw(st.integers(0, 2**16))).assert_slope(tol=0.2)


def _quadratic(M, A):
    """f(y) = sum_i y_i A y_i^T and its Riemannian gradient for <., .>_W: P_y W^-1 2 A y."""
    Winv = np.linalg.inv(M.W)
    return (lambda y: float(np.sum((y @ A) * y)),
            lambda y: M.tangent(y, 2 * (y @ A) @ Winv))


def _gradient_problem(data):
    M = data.draw(rs.manifolds(dims=SMALL))
    A = data.draw(rs.head_matrices(1, M.ambient_dim, symmetric=True))[0] + 3 * np.eye(M.ambient_dim)
    y = data.draw(rs.points(M, tokens=2))
    u = data.draw(rs.tangent_vectors(M, y))
    cost, grad = _quadratic(M, A)
    return M, cost, grad, y, u


def gradient_right(data):
    M, cost, grad, y, u = _gradient_problem(data)
    # not a degenerate point (those are issue 34 item 4, test_checkers_at_degenerate_points): the
    # model's second-order term at t = 1e-2 is far above the rounding of the cost
    t = 1e-2
    second = abs(cost(M.retract(y + t * u)) - cost(y) - t * np.sum(M.inner(grad(y), u)))
    assume(second > 1e-9 * (1 + abs(cost(y))))
    rt.check_riemannian_gradient(M, cost, grad, y, direction=u).assert_slope(tol=0.2)


def gradient_planted(data):
    M, cost, grad, y, u = _gradient_problem(data)
    g = grad(y)
    assume(np.sum(M.inner(g, g)) > 1e-6)  # not a critical point: a wrong factor shows
    rt.check_riemannian_gradient(M, cost, lambda z: 1.5 * grad(z), y, direction=g).assert_slope(tol=0.2)  # slope 1


CASES = {
    "assert_on_manifold": (on_manifold_right, on_manifold_planted),
    "assert_tangent": (tangent_right, tangent_planted),
    "assert_forward_invariant": (forward_invariant_right, forward_invariant_planted),
    "check_order": (order_right, order_planted),
    "check_retraction": (retraction_right, retraction_planted),
    "check_riemannian_gradient": (gradient_right, gradient_planted),
}
#: examples per checker (check_order integrates four times and solves a SciPy reference)
EXAMPLES = {"check_order": 3, "assert_forward_invariant": 15}


def test_every_checker_has_cases():
    assert sorted(CASES) == CHECKERS


@pytest.mark.parametrize("name", CHECKERS)
def test_checker_passes_right_inputs(name):
    @settings(max_examples=budget(EXAMPLES.get(name, 30)))
    @given(data=st.data())
    def run(data):
        CASES[name][0](data)

    run()


@pytest.mark.parametrize("name", CHECKERS)
def test_checker_fails_planted_bugs(name):
    @settings(max_examples=budget(EXAMPLES.get(name, 30)))
    @given(data=st.data())
    def run(data):
        with pytest.raises(AssertionError):
            CASES[name][1](data)

    run()


@pytest.mark.parametrize("case", ["gradient at a critical point", "constant cost", "order at an equilibrium"])
def test_checkers_at_degenerate_points(case):
    """The reproductions of issue 34 item 4: a right gradient at a point where the first-order
    model's second-order term vanishes, a constant cost (exact gradient 0, errors exactly 0), and
    check_order on an equilibrium (error exactly 0) must pass (not fail or raise)."""
    M = ra.Ellipsoid(np.eye(2))
    y = np.array([[1.0, 0.0]])
    if case == "gradient at a critical point":
        cost, grad = _quadratic(M, np.ones((2, 2)))
        rt.check_riemannian_gradient(M, cost, grad, y).assert_slope(tol=0.2)
    elif case == "constant cost":
        rt.check_riemannian_gradient(M, lambda z: 1.0, lambda z: np.zeros_like(z), y).assert_slope(tol=0.2)
    else:
        field = ra.AttentionField(np.eye(2))
        rt.check_order("rk4", field, np.array([[1.0, 0.0], [1.0, 0.0]]))  # coincident tokens: at rest
