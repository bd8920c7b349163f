"""Per-trajectory weights: P and U with batch axes against one field (and one solve) per system.

The reference of every test is independent of the batching: B fields with the systems' own
(h, d, d) weights, evaluated or integrated one at a time.
"""

import numpy as np
import pytest

import riemattn as ra
from riemattn.dynamics.jacobians import jacobian, lifted_attention_jacobian
from riemattn.errors import ValidationError
from riemattn.solvers.events import Event
from riemattn.testing._heads import TimeVaryingHeads


def _tokens(rng, shape, W=None):
    y = rng.standard_normal(shape)
    M = ra.Sphere(shape[-1] - 1) if W is None else ra.Ellipsoid(W)
    return M.projection(y)


def _spd(rng, d):
    Q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    return (Q * np.geomspace(1.0, 4.0, d)) @ Q.T


# ------------------------------------------------------------------------------------------------
# the field: value, update, attention, Jacobians


@pytest.mark.parametrize("mask", ["full", "causal"])
@pytest.mark.parametrize("normalization", ["paper", "softmax", "mean"])
def test_field_update_attention_equal_the_systems_own(mask, normalization):
    rng = np.random.default_rng(1)
    B, n, d, h = 4, 5, 3, 2
    W = _spd(rng, d)  # one ellipsoid shared by every system
    P = rng.standard_normal((B, h, d, d))
    U = rng.standard_normal((B, h, d, d))  # one U per head and per system
    beta = rng.uniform(0.5, 2.0, B)  # per-trajectory beta together with per-trajectory P
    y = _tokens(rng, (B, n, d), W)
    field = ra.AttentionField(P, U, W=W, mask=mask, normalization=normalization, beta=beta)
    assert field.weights_batch == (B,)
    F, f, A = field(0.3, y), field.update(0.3, y), field.attention(0.3, y)
    for b in range(B):
        own = ra.AttentionField(P[b], U[b], W=W, mask=mask, normalization=normalization, beta=beta[b])
        # the same products in another grouping: rounding of a few operations of size 1
        np.testing.assert_allclose(F[b], own(0.3, y[b]), rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(f[b], own.update(0.3, y[b]), rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(A[b], own.attention(0.3, y[b]), rtol=1e-12, atol=1e-13)


def test_batch_axes_broadcast_right_aligned_and_shared_u_per_system():
    rng = np.random.default_rng(2)
    n, d = 4, 3
    P = rng.standard_normal((3, 2, d, d))  # batch (3,): aligned with the last batch axis of y
    U = rng.standard_normal((2, 1, 1, d, d))  # batch (2, 1): one U per row, shared by both heads
    y = _tokens(rng, (2, 3, n, d))
    field = ra.AttentionField(P, U, normalization="softmax")
    assert field.weights_batch == (2, 3)
    F = field(0.0, y)
    for a in range(2):
        for b in range(3):
            own = ra.AttentionField(P[b], U[a, 0], normalization="softmax")
            np.testing.assert_allclose(F[a, b], own(0.0, y[a, b]), rtol=1e-12, atol=1e-13)


def test_jacobians_equal_the_systems_own():
    rng = np.random.default_rng(3)
    B, n, d, h = 3, 4, 3, 2
    P, U = rng.standard_normal((B, h, d, d)), rng.standard_normal((B, h, d, d))
    y = _tokens(rng, (B, n, d))
    field = ra.AttentionField(P, U, mask="causal", normalization="softmax")
    J, JG = jacobian(field, 0.0, y), lifted_attention_jacobian(field, 0.0, y)
    for b in range(B):
        own = ra.AttentionField(P[b], U[b], mask="causal", normalization="softmax")
        np.testing.assert_allclose(J[b], jacobian(own, 0.0, y[b]), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(JG[b], lifted_attention_jacobian(own, 0.0, y[b][None])[0], rtol=1e-12, atol=1e-12)


def test_time_dependent_per_system_heads_at_per_trajectory_times():
    rng = np.random.default_rng(4)
    B, n, d, h, K = 4, 3, 3, 2, 2
    base, amp = rng.standard_normal((B, h, d, d)), rng.standard_normal((K, B, h, d, d))
    omega, phi = rng.uniform(1, 3, K), rng.uniform(0, 3, K)
    tv = TimeVaryingHeads(base, amp, omega, phi)  # (B, h, d, d) at a float t, (k, B, h, d, d) at k times
    y = _tokens(rng, (B, n, d))
    t = np.array([0.0, 0.5, 0.5, 2.0])

    def scalar(s):  # a callable that is not vectorised
        return tv(float(s))

    for field in (ra.AttentionField(tv), ra.AttentionField(tv, time_vectorized=True),
                  ra.AttentionField(scalar, time_vectorized=False)):
        F = field(t, y)
        for b in range(B):
            own = ra.AttentionField(TimeVaryingHeads(base[b], amp[:, b], omega, phi))
            np.testing.assert_allclose(F[b], own(t[b], y[b]), rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(field.P(t)[2], tv(0.5)[2], rtol=1e-15)


# ------------------------------------------------------------------------------------------------
# one batched solve equals B separate solves


SOLVES = [("dopri5", dict(rtol=1e-7, atol=1e-9)), ("dop853", dict(rtol=1e-7, atol=1e-9)),
          ("rodas4p", dict(rtol=1e-6, atol=1e-8)), ("auto", dict(rtol=1e-6, atol=1e-8)),
          ("rk4", dict(dt=0.05)), ("layer", dict(dt=0.05))]


@pytest.mark.parametrize("stepper, opts", SOLVES, ids=[s for s, _ in SOLVES])
def test_batched_solve_equals_separate_solves(stepper, opts, monkeypatch):
    taken = []
    original = ra.AttentionField.take
    monkeypatch.setattr(ra.AttentionField, "take", lambda self, index, batch: taken.append(len(index))
                        or original(self, index, batch))
    rng = np.random.default_rng(5)
    B, n, d, h = 6, 5, 3, 2
    P = rng.standard_normal((B, h, d, d)) * rng.uniform(0.5, 3.0, (B, 1, 1, 1))
    U = rng.standard_normal((B, h, d, d))
    beta = rng.uniform(1.0, 4.0, B)
    y0 = _tokens(rng, (B, n, d))
    t1 = 3.0
    field = ra.AttentionField(P, U, normalization="softmax", beta=beta)
    sol = ra.integrate(field, y0, (0.0, t1), stepper=stepper, engine="numpy", **opts)  # (its batching is spied on)
    assert sol.success
    for b in range(B):
        own = ra.integrate(ra.AttentionField(P[b], U[b], normalization="softmax", beta=beta[b]), y0[b],
                           (0.0, t1), stepper=stepper, engine="numpy", **opts)
        # the same arithmetic per trajectory but for the grouping of BLAS products: the steps are
        # the same, and the states agree far inside the tolerance (the bound: 10 x tol)
        assert sol.per_trajectory.n_steps[b] == own.per_trajectory.n_steps
        assert sol.per_trajectory.n_rejected[b] == own.per_trajectory.n_rejected
        tol = 10 * (opts.get("atol", 0.0) + opts.get("rtol", 0.0)) if "rtol" in opts else 1e-12
        np.testing.assert_allclose(sol.y[-1][b], own.y[-1], rtol=0, atol=tol)
    if opts.get("rtol"):  # trajectories finished at different steps: the loop compacted the batch
        assert min(taken) < B


def test_auto_switches_on_some_systems_only(monkeypatch):
    """Stiffness differs per system (the scale of P): auto's mixed steps take rows of P along."""
    from riemattn.solvers.auto import AutoSwitch

    mixed = []
    original = AutoSwitch._mixed

    def spy(self, field, t, y, h, k1, mode):
        mixed.append(y.shape[:-2])
        return original(self, field, t, y, h, k1, mode)

    monkeypatch.setattr(AutoSwitch, "_mixed", spy)
    rng = np.random.default_rng(6)
    B, n, d = 4, 8, 3
    P = np.eye(d) * np.array([1.0, 1.0, 12.0, 12.0])[:, None, None, None]
    P = P + 0.1 * rng.standard_normal((B, 1, d, d))
    y0 = _tokens(rng, (B, n, d))
    field = ra.AttentionField(P, normalization="mean")
    opts = dict(stepper="auto", rtol=1e-3, atol=1e-5)
    sol = ra.integrate(field, y0, (0.0, 40.0), engine="numpy", **opts)  # (the NumPy engine's mixed steps)
    assert mixed, "no step held explicit and stiff rows at once"
    for b in range(B):
        # (the same engine: at rtol 1e-3 system 2 amplifies rounding into other steps and another
        # end state, e.g. between the NumPy and compiled engines' roundings)
        own = ra.integrate(ra.AttentionField(P[b], normalization="mean"), y0[b], (0.0, 40.0), engine="numpy",
                           **opts)
        assert sol.per_trajectory.n_steps[b] == own.per_trajectory.n_steps
        np.testing.assert_allclose(sol.y[-1][b], own.y[-1], rtol=0, atol=10 * (1e-3 + 1e-5))


def test_terminal_events_per_system():
    rng = np.random.default_rng(7)
    B, n, d = 5, 4, 3
    P = rng.standard_normal((B, 1, d, d)) + 2 * np.eye(d)
    y0 = _tokens(rng, (B, n, d))
    ev = Event(lambda t, y: ra.diagnostics.misalignment(y) - 0.05, terminal=True)
    opts = dict(stepper="dopri5", rtol=1e-8, atol=1e-10, events=[ev])
    sol = ra.integrate(ra.AttentionField(P), y0, (0.0, 50.0), **opts)
    for b in range(B):
        own = ra.integrate(ra.AttentionField(P[b]), y0[b], (0.0, 50.0), **opts)
        np.testing.assert_allclose(sol.events.t_stop[b], own.events.t_stop, rtol=1e-7)


# ------------------------------------------------------------------------------------------------
# edges


def test_one_system_zero_weights_and_the_empty_batch():
    rng = np.random.default_rng(8)
    n, d = 4, 3
    P = rng.standard_normal((1, 2, d, d))
    y0 = _tokens(rng, (1, n, d))
    sol = ra.integrate(ra.AttentionField(P), y0, (0.0, 1.0), stepper="dopri5")
    own = ra.integrate(ra.AttentionField(P[0]), y0[0], (0.0, 1.0), stepper="dopri5")
    np.testing.assert_allclose(sol.y[-1][0], own.y[-1], rtol=0, atol=1e-14)
    # P = 0 for one system (uniform attention), U = 0 for another (no motion)
    P = rng.standard_normal((3, 1, d, d))
    P[0] = 0.0
    U = np.broadcast_to(np.eye(d), (3, 1, d, d)).copy()
    U[1] = 0.0
    y0 = _tokens(rng, (3, n, d))
    field = ra.AttentionField(P, U, normalization="softmax")
    F = field(0.0, y0)
    mean = y0[0].mean(axis=0)
    np.testing.assert_allclose(F[0], mean - (y0[0] @ mean)[:, None] * y0[0], atol=1e-15)
    assert np.all(F[1] == 0.0)
    sol = ra.integrate(field, y0, (0.0, 2.0), stepper="dop853")
    np.testing.assert_array_equal(sol.y[-1][1], y0[1])
    empty = ra.integrate(ra.AttentionField(np.zeros((0, 1, d, d))), np.zeros((0, n, d)), (0.0, 1.0),
                         stepper="dopri5")
    assert empty.y.shape == (2, 0, n, d)


@pytest.mark.parametrize("P_shape, U_shape, batch, names", [
    ((3, 1, 3, 3), None, (4,), ["P of shape (3, 1, 3, 3)", "(3,)", "(4,)"]),
    ((1, 1, 3, 3), None, (), ["P of shape (1, 1, 3, 3)", "()"]),
    ((2, 3, 1, 3, 3), None, (3,), ["P of shape (2, 3, 1, 3, 3)", "(3,)"]),
    (None, (5, 1, 3, 3), (4,), ["U of shape (5, 1, 3, 3)", "(4,)"]),
])
def test_mismatched_batch_shapes_name_the_argument(P_shape, U_shape, batch, names):
    rng = np.random.default_rng(9)
    P = rng.standard_normal(P_shape or (3, 3))
    U = None if U_shape is None else rng.standard_normal(U_shape)
    field = ra.AttentionField(P, U)
    y0 = _tokens(rng, batch + (4, 3))
    for call in (lambda: field(0.0, y0), lambda: ra.integrate(field, y0, (0, 1), stepper="dopri5"),
                 lambda: ra.integrate(field, y0, (0, 1), stepper="rk4", dt=0.1)):
        with pytest.raises(ValidationError) as info:
            call()
        for word in names:
            assert word in str(info.value)


def test_p_and_u_batches_must_broadcast_against_each_other():
    with pytest.raises(ValidationError, match=r"P of shape \(2, 1, 3, 3\) and U of shape \(3, 1, 3, 3\)"):
        ra.AttentionField(np.ones((2, 1, 3, 3)), np.ones((3, 1, 3, 3)))


# ------------------------------------------------------------------------------------------------
# tensors and gradients

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("stepper", ["dopri5", "rodas4p"])
def test_gradient_wrt_per_system_p_equals_separate_solves(stepper):
    rng = np.random.default_rng(10)
    B, n, d = 3, 4, 3
    P0, U0 = rng.standard_normal((B, 1, d, d)), rng.standard_normal((B, 1, d, d))
    y0 = torch.tensor(_tokens(rng, (B, n, d)))
    opts = dict(stepper=stepper, rtol=1e-6, atol=1e-8)
    P, U = torch.tensor(P0, requires_grad=True), torch.tensor(U0, requires_grad=True)
    sol = ra.integrate(ra.AttentionField(P, U, normalization="softmax"), y0, (0.0, 1.0), **opts)
    (sol.y[-1] ** 3).sum().backward()
    for b in range(B):
        Pb, Ub = torch.tensor(P0[b], requires_grad=True), torch.tensor(U0[b], requires_grad=True)
        own = ra.integrate(ra.AttentionField(Pb, Ub, normalization="softmax"), y0[b], (0.0, 1.0), **opts)
        (own.y[-1] ** 3).sum().backward()
        # the same steps; the gradients are the same sums in another grouping
        torch.testing.assert_close(P.grad[b], Pb.grad, rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(U.grad[b], Ub.grad, rtol=1e-10, atol=1e-12)


def test_gradient_wrt_per_system_p_matches_finite_differences_with_fixed_steps():
    rng = np.random.default_rng(11)
    B, n, d = 2, 3, 3
    P0 = rng.standard_normal((B, 2, d, d))
    y0 = _tokens(rng, (B, n, d))
    target = _tokens(rng, (B, n, d))

    def loss(P):
        sol = ra.integrate(ra.AttentionField(P), torch.tensor(y0), (0.0, 1.0), stepper="rk4", dt=0.1)
        return ((sol.y[-1] - torch.tensor(target)) ** 2).sum()

    P = torch.tensor(P0, requires_grad=True)
    loss(P).backward()
    eps = 1e-6
    for idx in [(0, 0, 1, 2), (1, 1, 0, 0), (1, 0, 2, 1)]:
        E = np.zeros_like(P0)
        E[idx] = eps
        fd = (loss(torch.tensor(P0 + E)) - loss(torch.tensor(P0 - E))).item() / (2 * eps)
        # central difference: error O(eps^2 |d^3 loss|) + rounding eps_mach |loss| / eps ~ 1e-10
        assert abs(P.grad[idx].item() - fd) <= 1e-7 * max(1.0, abs(fd))


def test_tensor_tokens_with_compaction_equal_numpy():
    rng = np.random.default_rng(12)
    B, n, d = 5, 4, 3
    P0 = rng.standard_normal((B, 2, d, d)) * rng.uniform(0.5, 3.0, (B, 1, 1, 1))
    y0 = _tokens(rng, (B, n, d))
    opts = dict(stepper="dopri5", rtol=1e-7, atol=1e-9)
    ref = ra.integrate(ra.AttentionField(P0), y0, (0.0, 3.0), **opts)
    sol = ra.integrate(ra.AttentionField(torch.tensor(P0)), torch.tensor(y0), (0.0, 3.0), **opts)
    np.testing.assert_array_equal(sol.per_trajectory.n_steps, ref.per_trajectory.n_steps)
    np.testing.assert_allclose(sol.y[-1].numpy(), ref.y[-1], rtol=0, atol=1e-12)


def test_transformer_layer_with_one_layer_per_system():
    rng = np.random.default_rng(13)
    B, n, d, w, h = 3, 4, 3, 2, 2
    Q, K, V = (rng.standard_normal((B, h, w, d)) for _ in range(3))
    Wo = rng.standard_normal((h, d, w))  # shared by the systems
    y = _tokens(rng, (B, n, d))
    out = ra.TransformerLayer(Q, K, V, Wo)(y)
    for b in range(B):
        np.testing.assert_allclose(out[b], ra.TransformerLayer(Q[b], K[b], V[b], Wo)(y[b]), rtol=1e-13, atol=1e-14)
    Qt = torch.tensor(Q, requires_grad=True)
    ra.TransformerLayer(Qt, K, V, Wo)(torch.tensor(y)).sum().backward()
    for b in range(B):
        Qb = torch.tensor(Q[b], requires_grad=True)
        ra.TransformerLayer(Qb, K[b], V[b], Wo)(torch.tensor(y[b])).sum().backward()
        torch.testing.assert_close(Qt.grad[b], Qb.grad, rtol=1e-12, atol=1e-13)
    with pytest.raises(ValidationError, match="batch axes of Q, K, V and Wo"):
        ra.TransformerLayer(Q, K[:2], V, Wo)


@pytest.mark.parametrize("time_vectorized", [None, True, False])
def test_time_dependent_per_system_heads_on_tensors_equal_numpy(time_vectorized):
    rng = np.random.default_rng(14)
    B, n, d, h, K = 4, 3, 3, 2, 2
    tv = TimeVaryingHeads(rng.standard_normal((B, h, d, d)), rng.standard_normal((K, B, h, d, d)),
                          rng.uniform(1, 3, K), rng.uniform(0, 3, K))
    y0 = _tokens(rng, (B, n, d))
    opts = dict(stepper="dopri5", rtol=1e-8, atol=1e-10)
    ref = ra.integrate(ra.AttentionField(tv), y0, (0.0, 2.0), **opts)
    sol = ra.integrate(ra.AttentionField(tv, time_vectorized=time_vectorized), torch.tensor(y0), (0.0, 2.0), **opts)
    np.testing.assert_array_equal(sol.per_trajectory.n_steps, ref.per_trajectory.n_steps)
    np.testing.assert_allclose(sol.y[-1].numpy(), ref.y[-1], rtol=0, atol=1e-12)
