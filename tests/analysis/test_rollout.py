"""Attention rollout: products written out, the layer dynamics it describes, and the matrix ODE of a
continuous solve against the solve itself (on flat space the centred update is y' = G(t) y, so the
tokens are y(t) = R(t) y(t0))."""

from __future__ import annotations

import numpy as np
import pytest

import riemattn as ra
from riemattn.analysis._rollout import generator
from riemattn.errors import RiemattnError

EPS = np.finfo(float).eps


def stochastic(rng, *shape):
    A = rng.uniform(size=shape)
    return A / A.sum(-1, keepdims=True)


def test_products_written_out_and_the_residual_form():
    rng = np.random.default_rng(0)
    A = stochastic(rng, 5, 3, 4, 4)  # 5 layers, batch 3
    R = ra.diagnostics.rollout(A)
    for k in range(5):
        for b in range(3):
            want = A[0, b] if k == 0 else np.linalg.multi_dot([A[j, b] for j in range(k, -1, -1)])
            # k products of row-stochastic 4 x 4 matrices: a few roundings of numbers <= 1 each
            np.testing.assert_allclose(R[k, b], want, rtol=0, atol=8 * (k + 1) * 4 * EPS)
    tau = 0.3
    Rt = ra.diagnostics.rollout(A, tau=tau)
    M = (1 - tau) * np.eye(4) + tau * A  # row-stochastic: the residual form of one layer
    np.testing.assert_allclose(Rt[1], M[1] @ M[0], rtol=0, atol=32 * EPS)
    np.testing.assert_allclose(Rt.sum(-1), 1.0, rtol=0, atol=64 * EPS)  # rows stay stochastic


def test_residual_rollout_maps_the_initial_tokens_to_the_layers_output():
    """Flat space, two heads, identity values: one layer is y <- (I + tau G) y with G from the layer's
    attention, so the rollout of the run's attention maps y0 to the run's tokens."""
    rng = np.random.default_rng(1)
    field = ra.AttentionField(rng.normal(size=(2, 3, 3)), W="flat", normalization="softmax", mask="causal")
    y0 = rng.normal(size=(4, 6, 3))
    tau, K = 0.2, 12
    ys = ra.integrate(field, y0, (0.0, K * tau), "layer", dt=tau, saveat=np.arange(K + 1) * tau).y
    A = np.stack([field.attention(k * tau, ys[k]).sum(-3) for k in range(K)])  # heads summed: the update's G
    R = ra.diagnostics.rollout(A, tau=tau)
    np.testing.assert_allclose(R[-1] @ y0, ys[-1], rtol=0, atol=1e-13 * np.abs(y0).max())
    # the attention-only product of a causal mask keeps token 0 on itself
    P = ra.diagnostics.rollout(A / 2)  # two heads: each row of A sums to 2
    assert np.all(P[:, :, 0, 1:] == 0.0) and np.allclose(P[:, :, 0, 0], 1.0)


def test_rollout_ode_maps_y0_to_the_solution_and_is_the_limit_of_layers():
    rng = np.random.default_rng(2)
    field = ra.AttentionField(lambda t: np.cos(t) * np.eye(3), W="flat", normalization="softmax")
    y0 = rng.normal(size=(2, 5, 3))
    ts = np.linspace(0.0, 2.0, 5)
    sol = ra.integrate(field, y0, (0.0, 2.0), "dop853", rtol=1e-12, atol=1e-12, saveat=ts, dense_output=True)
    R = ra.diagnostics.rollout_ode(field, sol, ts[1:], rtol=1e-11, atol=1e-13)
    assert R.shape == (4, 2, 5, 5)
    # two solves at 1e-11..1e-12 of an O(1) linear system over t = 2 (G bounded by 2 l)
    np.testing.assert_allclose(R @ y0, sol.y[1:], rtol=0, atol=1e-8)
    np.testing.assert_allclose(R.sum(-1), 1.0, rtol=0, atol=1e-9)
    # tau -> 0: the residual rollout of layers converges to R(2) at first order in tau
    errs = []
    for n in (50, 100, 200):
        tau = 2.0 / n
        ys = ra.integrate(field, y0, (0.0, 2.0), "layer", dt=tau, saveat=np.arange(n + 1) * tau).y
        A = np.stack([field.attention(k * tau, ys[k]).sum(-3) for k in range(n)])
        errs.append(np.abs(ra.diagnostics.rollout(A, tau=tau)[-1] - R[-1]).max())
    orders = np.log2(np.array(errs[:-1]) / np.array(errs[1:]))
    assert np.all(np.abs(orders - 1.0) <= 0.2), orders  # Euler: order 1


def test_generator_rows_sum_to_zero():
    rng = np.random.default_rng(3)
    A = stochastic(rng, 2, 3, 4, 4)
    np.testing.assert_allclose(generator(A).sum(-1), 0.0, atol=16 * EPS)


@pytest.mark.parametrize("bad, match", [
    (dict(attention=np.ones((3, 4))), "attention"),
    (dict(attention=np.ones((2, 3, 4))), "attention"),
    (dict(attention=np.full((2, 2, 2), np.nan)), "attention"),
    (dict(attention=np.ones((2, 2, 2)), tau=0.0), "tau"),
    (dict(attention=np.ones((2, 2, 2)), tau="x"), "tau"),
])
def test_bad_input_is_named(bad, match):
    with pytest.raises(RiemattnError, match=match):
        ra.diagnostics.rollout(**bad)


def test_rollout_ode_bad_input():
    field = ra.AttentionField(np.eye(3), W="flat")
    sol = ra.integrate(field, np.eye(3), (0.0, 1.0), "rk4", dt=0.1, dense_output=True)
    with pytest.raises(RiemattnError, match="t must be"):
        ra.diagnostics.rollout_ode(field, sol, [0.5, 2.0])
    with pytest.raises(RiemattnError, match="start"):
        ra.diagnostics.rollout_ode(field, sol, [0.5], start=0.7)
    with pytest.raises(RiemattnError, match="field"):
        ra.diagnostics.rollout_ode(object(), sol, [0.5])
