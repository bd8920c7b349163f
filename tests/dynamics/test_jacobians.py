"""Jacobians of fields (riemattn.dynamics.jacobians) against central finite differences."""

from __future__ import annotations

import numpy as np
import pytest

import riemattn as ra
from riemattn.dynamics.jacobians import is_autonomous, jacobian, jvp, lifted_attention_jacobian
from riemattn.errors import InputTypeError, ValidationError


def _fd(field, t, y, delta=1e-5):
    """Central differences, one ambient direction at a time (independent of the module's code)."""
    l, d = y.shape[-2:]
    J = np.zeros(y.shape[:-2] + (l, d, l, d))
    for k in range(l):
        for b in range(d):
            e = np.zeros_like(y)
            e[..., k, b] = delta
            J[..., k, b] = (field(t, y + e) - field(t, y - e)) / (2 * delta)
    return J


def _layouts(rng, d):
    return {
        "one head, U=I": (rng.normal(size=(d, d)), None),
        "two heads, U per head": (rng.normal(size=(2, d, d)), rng.normal(size=(2, d, d))),
        "two heads, shared U": (rng.normal(size=(2, d, d)), rng.normal(size=(d, d))),
        "one P, two U heads": (rng.normal(size=(d, d)), rng.normal(size=(2, d, d))),
    }


@pytest.mark.parametrize("normalization", ["paper", "softmax", "mean"])
@pytest.mark.parametrize("mask", ["full", "causal"])
@pytest.mark.parametrize("manifold", ["sphere", "ellipsoid"])
def test_attention_jacobian_matches_finite_differences(normalization, mask, manifold):
    rng = np.random.default_rng(hash((normalization, mask, manifold)) % 2**32)
    d, l = 3, 4
    W = None if manifold == "sphere" else np.diag([1.0, 2.0, 0.5]) + 0.1
    for name, (P, U) in _layouts(rng, d).items():
        field = ra.AttentionField(P, U, W=W, mask=mask, normalization=normalization,
                                  beta=np.array([0.7, 2.0]))
        y = field.manifold.projection(rng.normal(size=(2, l, d)))
        J = jacobian(field, 0.0, y)
        J_fd = _fd(field, 0.0, y)
        assert np.max(np.abs(J - J_fd)) <= 1e-7 * np.max(np.abs(J)), name
        v = rng.normal(size=y.shape)
        assert np.allclose(jvp(field, 0.0, y, v), np.einsum("...iakb,...kb->...ia", J, v), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("normalization", ["paper", "softmax", "mean"])
@pytest.mark.parametrize("mask", ["full", "causal"])
@pytest.mark.parametrize("manifold", ["sphere", "ellipsoid"])
def test_lifted_attention_jacobian_matches_finite_differences_of_the_lifted_field(normalization, mask, manifold):
    """The one-pass Jacobian of G(x) = |x|_W F(t, pi_W x) (what the stiff steppers linearise)
    against central differences of G written here from its definition."""
    rng = np.random.default_rng(hash((normalization, mask, manifold, "lifted")) % 2**32)
    d, l = 3, 4
    W = None if manifold == "sphere" else np.diag([1.0, 2.0, 0.5]) + 0.1
    for name, (P, U) in _layouts(rng, d).items():
        field = ra.AttentionField(P, U, W=W, mask=mask, normalization=normalization,
                                  beta=np.array([0.7, 2.0]))
        M = field.manifold

        def lifted(t, x):
            r = np.sqrt(np.einsum("...a,ab,...b->...", x, M.W, x))[..., None]
            return r * field(t, x / r)

        y = M.projection(rng.normal(size=(2, l, d)))
        J = lifted_attention_jacobian(field, 0.0, y)
        J_fd = _fd(lifted, 0.0, y).reshape(J.shape)
        assert np.max(np.abs(J - J_fd)) <= 1e-7 * np.max(np.abs(J)), name


def test_jacobian_time_dependent_heads_and_per_trajectory_times():
    rng = np.random.default_rng(3)
    P0, U0 = rng.normal(size=(2, 3, 3)), rng.normal(size=(2, 3, 3))
    field = ra.AttentionField(lambda t: np.cos(t) * P0, lambda t: U0 + np.sin(t), beta=1.5)
    y = field.manifold.projection(rng.normal(size=(3, 5, 3)))
    t = np.array([0.0, 0.4, 1.1])
    J = jacobian(field, t, y)
    assert np.max(np.abs(J - _fd(field, t, y))) <= 1e-7 * np.max(np.abs(J))
    assert not is_autonomous(field) and is_autonomous(ra.usa(2.0, 3))


def test_jacobian_of_a_user_field_by_finite_differences_is_exact_for_a_linear_field():
    rng = np.random.default_rng(4)
    A = rng.normal(size=(3, 3))
    field = ra.VectorField(lambda t, y: y @ A.T, ra.Euclidean(3))
    y = rng.normal(size=(2, 4, 3))
    J = jacobian(field, 0.0, y)
    expect = np.einsum("ik,ab->iakb", np.eye(4), A)
    assert np.allclose(J, np.broadcast_to(expect, J.shape), atol=1e-9)
    # a nonlinear field on the sphere: the attention field wrapped as a user field
    att = ra.AttentionField(rng.normal(size=(3, 3)), normalization="softmax", beta=1.3)
    user = ra.VectorField(lambda t, y: att(t, y), att.manifold)
    ys = att.manifold.projection(rng.normal(size=(4, 3)))
    assert np.max(np.abs(jacobian(user, 0.0, ys) - jacobian(att, 0.0, ys))) <= 1e-8
    v = rng.normal(size=ys.shape)
    assert np.allclose(jvp(user, 0.0, ys, v), jvp(att, 0.0, ys, v), atol=1e-8)


def test_jacobian_bad_input():
    field = ra.usa(1.0, 3)
    with pytest.raises(InputTypeError, match="field"):
        jacobian(lambda t, y: y, 0.0, np.ones((2, 3)))
    with pytest.raises(ValidationError, match="shape"):
        jacobian(field, 0.0, np.ones((2, 4)))
    with pytest.raises(ValidationError, match="v must have"):
        jvp(field, 0.0, np.eye(3), np.ones((2, 3)))
