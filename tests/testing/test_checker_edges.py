"""riemattn.testing's checkers at degenerate inputs (issue 34, item 4): exactly-right inputs pass,
planted bugs fail, degenerate inputs (zero vectors, equilibria, W = I, exact methods, empty
batches) give a clear verdict.

The independent facts used: on the unit circle f(y) = (y_1 + y_2)^2 = 1 + sin 2θ, whose second
derivative vanishes at θ = 0 (y = (1, 0)), so the first-order model's error there is O(t^3)
(2 t^3 / (1 + t^2) exactly for a unit direction and the radial retraction); a constant or linear
cost has an exact first-order model; an equilibrium is reproduced exactly by every stepper.
"""

from __future__ import annotations

import numpy as np
import pytest

import riemattn as ra
from riemattn import testing as rt
from riemattn.errors import ValidationError

A = np.ones((2, 2))
CIRCLE = ra.Ellipsoid(np.eye(2))  # W = I: the unit circle as an ellipsoid


def _cost(y):
    return float(np.sum((y @ A) * y))


def _grad(y):  # the Riemannian gradient: the tangent part of the Euclidean one, 2 y A
    return CIRCLE.tangent(y, 2.0 * (y @ A))


def test_gradient_check_passes_where_the_second_order_term_vanishes():
    """The issue's example: slope 2.62 and a failing assert_slope before the fix."""
    y = np.array([[1.0, 0.0]])
    fit = rt.check_riemannian_gradient(CIRCLE, _cost, _grad, y).assert_slope()
    assert fit.at_least and fit.slope >= 2.8  # O(t^3): the errors above the floor have slope 3
    assert not fit.used.all() and "left out of the fit" in fit.note  # the smallest t: at rounding level


@pytest.mark.parametrize("y", [np.array([[1.0, 0.0]]), np.array([[0.6, 0.8], [-0.8, 0.6]])], ids=["degenerate", "generic"])
@pytest.mark.parametrize("bug", ["factor 2", "sign", "half", "zero"])
def test_gradient_check_fails_planted_bugs(y, bug):
    wrong = {"factor 2": lambda z: 2.0 * _grad(z), "sign": lambda z: -_grad(z),
             "half": lambda z: CIRCLE.tangent(z, z @ A), "zero": lambda z: 0.0 * z}[bug]
    fit = rt.check_riemannian_gradient(CIRCLE, _cost, wrong, y)
    assert abs(fit.slope - 1.0) <= 0.05, fit
    with pytest.raises(AssertionError, match=r"measured slope (0.9|1.0)\d\d, expected >= 2.0 - 0.2"):
        fit.assert_slope()


def test_gradient_check_fails_a_normal_component_naming_the_token():
    y = np.array([[0.6, 0.8], [1.0, 0.0]])
    with pytest.raises(AssertionError, match=r"gradient not tangent at token \(1,\): \|y\^T W g\| = 3.000e-01"):
        rt.check_riemannian_gradient(CIRCLE, _cost, lambda z: _grad(z) + 0.3 * z * [[0.0], [1.0]], y)


@pytest.mark.parametrize("manifold", [ra.Sphere(2), ra.Ellipsoid(np.diag([1.0, 2.0, 5.0])), ra.Euclidean(3)], ids=repr)
def test_gradient_check_accepts_exact_first_order_models(manifold):
    rng = np.random.default_rng(7)
    y = manifold.projection(rng.normal(size=(5, 3))) if not isinstance(manifold, ra.Euclidean) else rng.normal(size=(5, 3))
    zero = lambda z: 0.0 * z  # noqa: E731
    # a constant cost (exact zeros before: "errors must be finite and > 0")
    assert rt.check_riemannian_gradient(manifold, lambda z: 3.0, zero, y).assert_slope().exact
    if not isinstance(manifold, ra.Euclidean):  # constant on the manifold, but only up to rounding
        fit = rt.check_riemannian_gradient(manifold, lambda z: float(np.sum(manifold.inner(z, z))) - 5.0, zero, y)
        assert fit.assert_slope().exact, fit
        with pytest.raises(AssertionError, match="measured slope 1"):  # its gradient claimed nonzero
            rt.check_riemannian_gradient(manifold, lambda z: float(np.sum(manifold.inner(z, z))),
                                         lambda z: manifold.tangent(z, np.ones_like(z)), y).assert_slope()
    else:  # a linear cost: its first-order model is exact; twice its gradient is not
        a = np.array([0.5, -1.0, 2.0])
        assert rt.check_riemannian_gradient(manifold, lambda z: float(np.sum(z @ a)), lambda z: a + 0 * z, y).assert_slope().exact
        with pytest.raises(AssertionError, match="measured slope 1"):
            rt.check_riemannian_gradient(manifold, lambda z: float(np.sum(z @ a)), lambda z: 2 * a + 0 * z, y).assert_slope()


def test_gradient_check_at_a_critical_point_has_slope_two():
    """f = sum_i e_3^T y_i at the north pole: zero gradient, nonzero Hessian (O(t^2) error)."""
    S = ra.Sphere(2)
    e3 = np.array([0.0, 0.0, 1.0])
    fit = rt.check_riemannian_gradient(S, lambda z: float(np.sum(z @ e3)), lambda z: S.tangent(z, e3 + 0 * z), e3[None])
    assert abs(fit.assert_slope().slope - 2.0) <= 0.05


def test_gradient_check_rejects_degenerate_arguments():
    S = ra.Sphere(2)
    y = S.projection(np.random.default_rng(0).normal(size=(4, 3)))
    zero = lambda z: 0.0 * z  # noqa: E731
    with pytest.raises(ValidationError, match="direction must be nonzero"):
        rt.check_riemannian_gradient(S, lambda z: 1.0, zero, y, direction=0 * y)
    with pytest.raises(ValidationError, match="direction must be tangent"):
        rt.check_riemannian_gradient(S, lambda z: 1.0, zero, y, direction=y)
    with pytest.raises(ValidationError, match="base_point must lie on Sphere"):
        rt.check_riemannian_gradient(S, lambda z: 1.0, zero, 2 * y)
    with pytest.raises(ValidationError, match="base_point is empty"):
        rt.check_riemannian_gradient(S, lambda z: 1.0, zero, np.zeros((0, 3)))
    with pytest.raises(AssertionError, match=r"gradient not finite at token \(0,\)"):
        rt.check_riemannian_gradient(S, lambda z: 1.0, lambda z: np.nan * z, y)
    with pytest.raises(AssertionError, match="cost not finite at base_point"):
        rt.check_riemannian_gradient(S, lambda z: np.nan, zero, y)
    # a base point drawn from default_rng(seed) still gets a tangent direction that is not zero
    y0 = S.projection(np.random.default_rng(0).normal(size=(4, 3)))
    assert rt.check_riemannian_gradient(S, lambda z: float(np.sum(z[:, 0])),
                                        lambda z: S.tangent(z, np.eye(3)[0] + 0 * z), y0, seed=0).slope > 1.8


# ----------------------------------------------------------------------------------------------
# check_order
def test_check_order_passes_an_equilibrium_with_a_note():
    """Coincident tokens are an equilibrium of attention: error exactly 0 at every step count
    (before: ValidationError "at the reference's accuracy: use fewer steps")."""
    field = ra.AttentionField(np.eye(3)[None])
    y0 = np.tile(ra.Sphere(2).projection(np.array([1.0, 2.0, 2.0])), (3, 1))
    fit = rt.check_order("rk4", field, y0).assert_slope()
    assert fit.exact and fit.order == np.inf and np.all(fit.errors <= 1e-15)
    assert "exact to the floor at every step" in fit.note and "use fewer steps" in fit.note


def test_check_order_exact_method_and_planted_wrong_order():
    """Euler on a constant flat field dy/dt = c is exact (to rounding); heun declared 4 (a planted
    wrong order) fails; one error above the floor: an error."""
    c = np.array([0.5, -1.0, 2.0])
    fit = rt.check_order("euler", ra.VectorField(lambda t, y: c + 0 * y, ra.Euclidean(3)), np.ones((2, 3)))
    assert fit.assert_slope().exact and np.all(fit.errors <= 1e-14)
    with pytest.raises(AssertionError, match=r"global error of euler: measured slope (0.9|1.0)\d\d"):  # not exact
        rt.check_order("euler", ra.VectorField(lambda t, y: 0.5 * c * y, ra.Euclidean(3)), np.ones((2, 3))).assert_slope(2)
    field = ra.AttentionField(np.eye(3)[None])
    y1 = ra.Sphere(2).projection(np.random.default_rng(1).normal(size=(4, 3)) + [0, 0, 2.5])
    with pytest.raises(AssertionError, match=r"global error of heun: measured slope 2.0\d\d, expected 4 \+- 0.2"):
        rt.check_order("heun", field, y1, expected=4).assert_slope()
    with pytest.raises(ValidationError, match="only one error is above the floor of the reference's accuracy"):
        rt.check_order("rk4", field, y1, steps=(16, 128, 1024))
    with pytest.raises(ValidationError, match="t_span must have t1 != t0"):
        rt.check_order("rk4", field, y1, t_span=(1.0, 1.0))
    with pytest.raises(ValidationError, match="y0 is empty"):
        rt.check_order("rk4", field, np.zeros((0, 4, 3)))


# ----------------------------------------------------------------------------------------------
# check_retraction
class _BadSphere(ra.Sphere):
    """A planted bug: R(x) = (x + s e) / |x + s e| with s = sqrt(|x|^2 - 1) (= t |u| on the tangent
    line): R(y) = y but dR_y != id, so |R(y + t u) - (y + t u)| = O(t)."""

    def retract(self, x):
        x = np.asarray(x, dtype=float)
        s = np.sqrt(np.maximum(np.sum(x * x, axis=-1, keepdims=True) - 1.0, 0.0))
        z = x + s * np.eye(x.shape[-1])[0]
        return z / np.linalg.norm(z, axis=-1, keepdims=True)


def test_check_retraction_edges_and_a_planted_bug():
    S = ra.Sphere(2)
    # steps down to 1e-9: the errors below rounding are left out, the slope stays 2 (line), 3 (exp)
    fit = rt.check_retraction(S, ts=np.logspace(-9, -1, 13)).assert_slope()
    assert abs(fit.slope - 2) <= 0.05 and not fit.used.all()
    assert abs(rt.check_retraction(S, against="exp", ts=np.logspace(-7, -1, 13)).assert_slope().slope - 3) <= 0.05
    assert abs(rt.check_retraction(ra.Ellipsoid(np.eye(3)), against="exp").assert_slope().slope - 3) <= 0.05
    with pytest.raises(AssertionError, match=r"measured slope (0.9|1.0)\d\d, expected >= 2.0"):
        rt.check_retraction(_BadSphere(2)).assert_slope()
    y = S.projection(np.random.default_rng(2).normal(size=(3, 3)))
    with pytest.raises(ValidationError, match="tangent_vector must be nonzero at every point"):
        rt.check_retraction(S, base_point=y, tangent_vector=S.tangent(y, np.ones((3, 3))) * [[1], [0], [1]])


# ----------------------------------------------------------------------------------------------
# the assertions: empty batches, coincident and antipodal tokens
def test_assertions_on_empty_batches_and_degenerate_configurations():
    S = ra.Sphere(2)
    field = ra.AttentionField(np.eye(3)[None])
    empty = np.zeros((0, 4, 3))
    rt.assert_on_manifold(S, empty)  # nothing to be off the manifold (before: a raw ValueError)
    rt.assert_tangent(field, empty)
    x = S.projection(np.array([1.0, 2.0, 2.0]))
    rt.assert_tangent(field, np.stack([x, x, -x]))  # coincident and antipodal: F tangent (zero or not)
    sol = rt.assert_forward_invariant(field, np.stack([x, x]), nondecreasing=True)  # an equilibrium
    assert np.allclose(sol.y[-1], np.stack([x, x]), atol=1e-15)
    with pytest.raises(ValidationError, match="no open hemisphere"):
        rt.assert_forward_invariant(field, np.stack([x, -x]))
