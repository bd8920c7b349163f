"""Populations (issue 55: cross-attention where the context moves): against a reference written from the
definition in riemattn/dynamics/populations.py (loops over queries and keys), on the sphere and flat space,
batched, with tensors, integrated (explicit, stiff, gradients), and its bad input named."""

from __future__ import annotations

import math

import numpy as np
import pytest

import riemattn as ra
from riemattn.errors import RiemattnError, UnsupportedByEngine

EPS = np.finfo(float).eps
L, M, D = 5, 4, 3


def softmax_row(s):
    top = max(s)
    e = [math.exp(v - top) for v in s]
    return [v / sum(e) for v in e]


def reference(y, P, U, flat=False, centred=True):
    """Population 0 attends to itself causally (softmax) and to population 1 (softmax, full); population 1
    attends to itself ("mean"); the tangent projection on the sphere, the centred / uncentred update flat."""
    out = np.zeros_like(y)
    A, B = y[:L], y[L:]
    for i in range(L):
        v = np.zeros(D)
        for keys, k in ((A[: i + 1], 0), (B, 1)):
            w = softmax_row([A[i] @ P[k] @ c for c in keys])
            v += sum(wj * (U[k] @ (c - A[i]) if flat and centred else U[k] @ c) for wj, c in zip(w, keys))
        out[i] = v
    for i in range(M):
        w = [math.exp(B[i] @ P[2] @ c) / M for c in B]
        out[L + i] = sum(wj * (U[2] @ (c - B[i]) if flat and centred else U[2] @ c) for wj, c in zip(w, B))
    if not flat:
        out -= np.einsum("ia,ia->i", y, out)[:, None] * y
    return out


def make(P, U, **kw):
    return ra.Populations((L, M), {
        (0, 0): ra.AttentionField(P[0], U[0], normalization="softmax", mask="causal", **kw),
        (0, 1): ra.AttentionField(P[1], U[1], normalization="softmax", **kw),
        (1, 1): ra.AttentionField(P[2], U[2], normalization="mean", **kw)})


def draw(seed, batch=(), flat=False):
    rng = np.random.default_rng(seed)
    P, U = rng.normal(size=(3, D, D)), rng.normal(size=(3, D, D))
    y = rng.normal(size=batch + (L + M, D))
    if not flat:
        y /= np.linalg.norm(y, axis=-1, keepdims=True)
    return P, U, y


def tol(y, U):
    """Each row sums l + m terms, each a few roundings of |U| |y| (|y| <= 4 for the drawn flat tokens),
    and the tangent projection a second rounding of the same size."""
    return 16 * (L + M) * EPS * np.abs(U).sum(axis=(1, 2)).max() * max(1.0, np.abs(y).max()) ** 2 * 2


@pytest.mark.parametrize("flat, update", [(False, "centred"), (True, "centred"), (True, "uncentred")])
def test_populations_match_the_reference(flat, update):
    P, U, y = draw(1, (2,), flat)
    kw = dict(W="flat", update=update) if flat else {}
    field = make(P, U, **kw)
    got = field(0.0, y)
    for b in range(2):
        np.testing.assert_allclose(got[b], reference(y[b], P, U, flat, update == "centred"), rtol=0, atol=tol(y, U))


def test_a_fixed_context_is_a_population_that_does_not_move():
    """Population 1 without a field of its own stays put, and population 0 moves as AttentionField(context=y_1)."""
    P, U, y = draw(2, (3,))
    cross = ra.AttentionField(P[1], U[1])
    field = ra.Populations((L, M), {(0, 1): cross})
    got = field(0.0, y)
    assert np.all(got[:, L:] == 0.0)
    want = ra.AttentionField(P[1], U[1], context=y[:, L:])(0.0, y[:, :L])
    np.testing.assert_allclose(got[:, :L], want, rtol=0, atol=tol(y, U))
    sol = ra.integrate(field, y, (0.0, 0.5), "dopri5", rtol=1e-8, atol=1e-10)
    # a zero velocity, but each accepted step re-normalises the tokens: one rounding (<= eps) per step
    steps = int(np.max(sol.n_steps))
    np.testing.assert_allclose(sol.y[-1][:, L:], y[:, L:], rtol=0, atol=2 * steps * EPS)


def test_tensors_and_an_empty_batch():
    torch = pytest.importorskip("torch")
    P, U, y = draw(3, (2,))
    field = make(P, U)
    got = field(0.0, torch.as_tensor(y))
    assert isinstance(got, torch.Tensor)
    np.testing.assert_allclose(got.numpy(), field(0.0, y), rtol=0, atol=tol(y, U))
    empty = np.zeros((0, L + M, D))
    assert field(0.0, empty).shape == empty.shape


def test_integrated_by_explicit_and_stiff_steppers_to_their_tolerance():
    """dopri5 at rtol 1e-10 is the reference; rk4 (h = 1e-2, error ~ C h^4) and rodas4 (finite-difference
    Jacobians, rtol 1e-8) agree with it to 1e-6, far above both global errors' size (~1e-8) and far below the
    distance the tokens travel (~1e-1, asserted)."""
    P, U, y = draw(4, (2,))
    field = make(0.5 * P, 0.5 * U)
    ref = ra.integrate(field, y, (0.0, 1.0), "dopri5", rtol=1e-10, atol=1e-12)
    assert ref.success and np.abs(ref.y[-1] - y).max() > 1e-1
    for stepper, kw in (("rk4", dict(dt=1e-2)), ("rodas4", dict(rtol=1e-8, atol=1e-10))):
        sol = ra.integrate(field, y, (0.0, 1.0), stepper, **kw)
        np.testing.assert_allclose(sol.y[-1], ref.y[-1], rtol=0, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(ref.y[-1], axis=-1), 1.0, rtol=0, atol=1e-12)  # dopri5 projects


def test_gradient_through_a_solve_matches_finite_differences():
    """d/dy0 of a scalar of the final state by PyTorch's autograd through rk4, along tangent directions v,
    against central differences on the curve normalize(y0 + h v) (whose velocity at h = 0 is v): step 1e-5,
    error ~ h^2 |third derivative| ~ 1e-10 plus rounding eps |loss| / h ~ 1e-11."""
    torch = pytest.importorskip("torch")
    P, U, y = draw(5)
    field = make(0.5 * P, 0.5 * U)
    rng = np.random.default_rng(6)
    w = rng.normal(size=y.shape)

    def loss(y0):
        return (ra.integrate(field, y0, (0.0, 0.5), "rk4", dt=0.05).y[-1] * torch.as_tensor(w)).sum()

    y0 = torch.tensor(y, requires_grad=True)
    loss(y0).backward()
    h = 1e-5
    for _ in range(4):
        v = rng.normal(size=y.shape)
        v -= np.einsum("ia,ia->i", v, y)[:, None] * y  # tangent at each token
        on = lambda z: z / np.linalg.norm(z, axis=-1, keepdims=True)  # noqa: E731
        fd = (float(loss(torch.tensor(on(y + h * v)))) - float(loss(torch.tensor(on(y - h * v))))) / (2 * h)
        assert abs(float((y0.grad.numpy() * v).sum()) - fd) < 1e-8 * max(1.0, abs(fd))


def test_the_compiled_engine_names_what_it_cannot_run():
    P, U, y = draw(7)
    with pytest.raises(UnsupportedByEngine, match="Populations"):
        ra.integrate(make(P, U), y, (0.0, 0.1), "dopri5", engine="compiled")


def test_per_trajectory_weights_and_compaction():
    """One P per trajectory in a cross field: each trajectory of the batch as the field of its own P."""
    rng = np.random.default_rng(8)
    P, U, y = draw(8, (3,))
    Pb = rng.normal(size=(3, 1, D, D))
    field = ra.Populations((L, M), {(0, 1): ra.AttentionField(Pb), (1, 1): ra.AttentionField(P[2])})
    got = field(0.0, y)
    for b in range(3):
        one = ra.Populations((L, M), {(0, 1): ra.AttentionField(Pb[b, 0]), (1, 1): ra.AttentionField(P[2])})
        np.testing.assert_allclose(got[b], one(0.0, y[b]), rtol=0, atol=tol(y, np.eye(D)[None]))
    sol = ra.integrate(field, y, (0.0, 1.0), "dopri5", rtol=1e-9, atol=1e-11)
    for b in range(3):
        one = ra.Populations((L, M), {(0, 1): ra.AttentionField(Pb[b, 0]), (1, 1): ra.AttentionField(P[2])})
        alone = ra.integrate(one, y[b], (0.0, 1.0), "dopri5", rtol=1e-9, atol=1e-11)
        np.testing.assert_allclose(sol.y[-1][b], alone.y[-1], rtol=0, atol=1e-7)  # two adaptive meshes, rtol 1e-9


@pytest.mark.parametrize("args, match", [
    (((0, 4), {}), "positive"),
    (((4, 2.5), {}), "positive"),
    (("45", {}), "sizes"),
    (((4, 2), {}), "nonempty"),
    (((4, 2), {(0, 2): "f"}), "pairs"),
    (((4, 2), {(0, 1): "f"}), "AttentionField"),
    (((4, 2), {(0, 1): ra.AttentionField(np.eye(3), mask="causal")}), "mask"),
    (((4, 2), {(0, 1): ra.AttentionField(np.eye(3), context=np.eye(3))}), "context"),
    (((4, 2), {(0, 0): ra.AttentionField(np.eye(3)), (1, 1): ra.AttentionField(np.eye(3), W="flat")}), "manifold"),
    (((4, 2), {(0, 0): ra.AttentionField(np.eye(3)), (1, 1): ra.AttentionField(np.eye(2))}), "manifold"),
])
def test_bad_populations_are_named(args, match):
    with pytest.raises(RiemattnError, match=match):
        ra.Populations(*args)


def test_tokens_of_the_wrong_count_are_named():
    field = ra.Populations((2, 2), {(0, 1): ra.AttentionField(np.eye(3))})
    with pytest.raises(RiemattnError, match="4 together"):
        field(0.0, np.eye(3))
