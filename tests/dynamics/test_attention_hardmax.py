"""Hardmax attention (normalization="hardmax") against a plainly written NumPy reference, ties,
causal masks, flat space, the steppers across a switch of the maximiser, the engines."""

import itertools
import zlib

import numpy as np
import pytest

import riemattn as ra
from riemattn.dynamics.attention import AttentionField
from riemattn.errors import UnsupportedByEngine, ValidationError

EPS = np.finfo(float).eps


def reference(y, P, U, *, W=None, flat=False, mask="full", beta=1.0, rtol=2.0**-40, alibi=None):
    """Hardmax field, one token, head and neighbour at a time: the maximisers M_i of the scores
    beta y_i^T P y_j - m |i - j| (ties within rtol * max |score|), alpha = 1 / |M_i| on them;
    flat: sum_j alpha_ij U (y_j - y_i), else (I - y_i y_i^T W) sum_j alpha_ij U y_j."""
    ell, d = y.shape
    W = np.eye(d) if W is None else W
    out = np.zeros_like(y)
    for i in range(ell):
        f = np.zeros(d)
        for eta in range(P.shape[0]):
            js = list(range(ell)) if mask == "full" else list(range(i + 1))
            m = 0.0 if alibi is None else alibi[eta]
            s = {j: beta * (y[i] @ P[eta] @ y[j]) - m * abs(i - j) for j in js}
            top, size = max(s.values()), max(abs(v) for v in s.values())
            M = [j for j in js if s[j] >= top - rtol * size]
            Ue = U[eta] if U.shape[0] > 1 else U[0]
            for j in M:
                f += (Ue @ (y[j] - y[i]) if flat else Ue @ y[j]) / len(M)
        out[i] = f if flat else f - (y[i] @ W @ f) * y[i]
    return out


def spd(rng, d):
    Q, _ = np.linalg.qr(rng.normal(size=(d, d)))
    return (Q * np.geomspace(1.0, 4.0, d)) @ Q.T


def tokens(rng, ell, d, W=None, flat=False):
    y = rng.normal(size=(ell, d))
    if flat:
        return y
    W = np.eye(d) if W is None else W
    return y / np.sqrt(np.einsum("ia,ab,ib->i", y, W, y))[:, None]


@pytest.mark.parametrize("space,mask,h,values", list(itertools.product(
    ["sphere", "ellipsoid", "flat"], ["full", "causal"], [1, 2], ["identity", "matrices"])))
def test_hardmax_field_matches_reference(space, mask, h, values):
    rng = np.random.default_rng(zlib.crc32(f"{space}{mask}{h}{values}".encode()))
    d, ell = 3, 7
    W = spd(rng, d) if space == "ellipsoid" else None
    P = rng.normal(size=(h, d, d))
    U = np.eye(d)[None] if values == "identity" else rng.normal(size=(h, d, d))
    y = tokens(rng, ell, d, W, space == "flat")
    field = AttentionField(P, None if values == "identity" else U, W="flat" if space == "flat" else W,
                           mask=mask, normalization="hardmax", beta=1.7)
    expect = reference(y, P, U, W=W, flat=space == "flat", mask=mask, beta=1.7)
    # alpha is exact (indicator / count); the mixing sums l h terms of size |U| |y|^2: l h d eps each
    scale = np.abs(U).max() * np.abs(y).max() ** 2 * d
    np.testing.assert_allclose(field(0.0, y), expect, rtol=0, atol=ell * h * d * 8 * EPS * scale)


def test_hardmax_attention_by_hand_with_exact_ties():
    # flat R^2, P = I: row 0 has scores [1, 2, 2, 0] (an exact tie of tokens 1 and 2)
    x = np.array([[1.0, 0.0], [2.0, 1.0], [2.0, -1.0], [0.0, 0.5]])
    field = AttentionField(np.eye(2), W="flat", normalization="hardmax")
    A = field.attention(0.0, x)[0]
    expect = np.array([[0, 0.5, 0.5, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 1, 0, 0]])
    np.testing.assert_array_equal(A, expect)
    # causal: row 1 sees tokens 0, 1 (scores 2, 5); row 3 sees 0..3 (0, 0.5, -0.5, 0.25)
    Ac = AttentionField(np.eye(2), W="flat", normalization="hardmax", mask="causal").attention(0.0, x)[0]
    np.testing.assert_array_equal(Ac, [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 1, 0, 0]])
    # the field: token 0 moves to the mean of tokens 1 and 2, (2, 0) - (1, 0)
    np.testing.assert_array_equal(field(0.0, x)[0], [1.0, 0.0])


def test_hardmax_ties_within_the_relative_tolerance():
    # query `far` with P = -I: scores -far.k = 0.1 + 0.2 + 0.3 and 0.3 + 0.2 + 0.1, equal up to
    # rounding (the two sums round differently in float64), and -far.far = -3 for itself
    far = np.array([-1.0, -1.0, -1.0])
    k1, k2 = np.array([0.1, 0.2, 0.3]), np.array([0.3, 0.2, 0.1])
    hard = lambda **kw: AttentionField(-np.eye(3), W="flat", normalization="hardmax", **kw)  # noqa: E731
    np.testing.assert_array_equal(hard().attention(0.0, np.stack([far, k1, k2]))[0, 0], [0.0, 0.5, 0.5])
    # a relative gap above the default tolerance (2^-40 ~ 9e-13) is no tie; one below it is
    for gap, tie in [(1e-10, False), (1e-14, True)]:
        A = hard().attention(0.0, np.stack([far, k1, k2 * (1.0 + gap)]))[0, 0]
        np.testing.assert_array_equal(A, [0.0, 0.5, 0.5] if tie else [0.0, 0.0, 1.0])
    # tie_rtol = 1e-8 makes the 1e-10 gap a tie; tie_rtol = 0 keeps exact ties only
    A = hard(tie_rtol=1e-8).attention(0.0, np.stack([far, k1, k2 * (1 + 1e-10)]))[0, 0]
    np.testing.assert_array_equal(A, [0.0, 0.5, 0.5])
    exact = np.stack([far, k1, k1.copy()])
    np.testing.assert_array_equal(hard(tie_rtol=0.0).attention(0.0, exact)[0, 0], [0.0, 0.5, 0.5])


def test_hardmax_beta_and_alibi():
    rng = np.random.default_rng(3)
    y = tokens(rng, 6, 3)
    P = rng.normal(size=(3, 3))
    A1 = AttentionField(P, normalization="hardmax", beta=1.0).attention(0.0, y)
    A7 = AttentionField(P, normalization="hardmax", beta=7.0).attention(0.0, y)
    np.testing.assert_array_equal(A1, A7)  # beta > 0 keeps the maximisers
    A0 = AttentionField(P, normalization="hardmax", beta=0.0, mask="causal").attention(0.0, y)[0]
    np.testing.assert_allclose(A0, np.tril(np.ones((6, 6))) / np.arange(1, 7)[:, None], rtol=0, atol=EPS)
    U = np.eye(3)[None]
    for m in (0.05, 0.5, 5.0):  # the bias (after beta) moves the maximisers towards the diagonal
        field = AttentionField(P, normalization="hardmax", alibi=m)
        np.testing.assert_allclose(field(0.0, y), reference(y, P[None], U, alibi=[m]), rtol=0, atol=1e-14)
    A = AttentionField(P, normalization="hardmax", alibi=100.0).attention(0.0, y)[0]
    np.testing.assert_array_equal(A, np.eye(6))  # |score| <= |P|_2 < 100: every token attends to itself


def alcalde_layers(x, tau, steps, P):
    """Alcalde et al.'s discrete hardmax model, written out: x_i <- x_i + tau (mean_{M_i} x_j - x_i),
    and the number of times a maximiser set changed."""
    switches, last = 0, None
    for _ in range(steps):
        S = x @ P @ x.T
        M = [tuple(np.flatnonzero(S[i] >= S[i].max() - 2.0**-40 * np.abs(S[i]).max())) for i in range(len(x))]
        switches += last is not None and M != last
        last = M
        x = x + tau * np.stack([x[list(m)].mean(0) - x[i] for i, m in enumerate(M)])
    return x, switches


@pytest.mark.parametrize("stepper", ["layer", "euler"])
def test_fixed_steps_cross_maximiser_switches(stepper):
    x0 = np.random.default_rng(3).normal(size=(8, 2))
    P = np.array([[1.0, 2.0], [-1.0, 0.5]])  # not symmetric: the maximisers keep switching (11 times)
    tau, steps = 0.1, 40
    expect, switches = alcalde_layers(x0, tau, steps, P)
    assert switches >= 5  # the run crosses switches of the maximiser sets
    field = AttentionField(P, W="flat", normalization="hardmax")
    sol = ra.integrate(field, x0, (0.0, steps * tau), stepper, dt=tau)
    # 40 steps, each adding tau times a mean of O(1) tokens: rounding ~ steps * l * eps * |x|
    np.testing.assert_allclose(sol.y[-1], expect, rtol=0, atol=steps * 8 * 16 * EPS * np.abs(x0).max())


def test_layer_on_the_sphere_matches_the_written_layer():
    rng = np.random.default_rng(5)
    y = tokens(rng, 6, 3)
    P = rng.normal(size=(3, 3))
    field = AttentionField(P, normalization="hardmax", mask="causal")
    sol = ra.integrate(field, y, (0.0, 2.0), "layer", dt=0.25)
    x = y.copy()
    for _ in range(8):
        f = np.zeros_like(x)
        for i in range(6):
            s = [x[i] @ P @ x[j] for j in range(i + 1)]
            M = [j for j in range(i + 1) if s[j] >= max(s) - 2.0**-40 * max(map(abs, s))]
            f[i] = x[M].mean(0)
        x = x + 0.25 * f
        x /= np.linalg.norm(x, axis=1, keepdims=True)
    np.testing.assert_allclose(sol.y[-1], x, rtol=0, atol=1e-13)


@pytest.mark.parametrize("stepper", ["dopri5", "dop853", "rodas4"])
def test_adaptive_steppers_refuse_the_discontinuous_field(stepper):
    field = AttentionField(np.eye(3), normalization="hardmax")
    y = tokens(np.random.default_rng(0), 4, 3)
    with pytest.raises(ValidationError, match="discontinuous"):
        ra.integrate(field, y, (0.0, 1.0), stepper)
    with pytest.raises(ValidationError, match="discontinuous"):
        ra.integrate(ra.layernorm(field, "pre"), y, (0.0, 1.0), stepper)


@pytest.mark.parametrize("normalization", ["hardmax", "sinkhorn"])
def test_compiled_engine_names_the_normalization(normalization):
    rng = np.random.default_rng(2)
    y = tokens(rng, 5, 3)
    field = AttentionField(rng.normal(size=(3, 3)), normalization=normalization)
    with pytest.raises(UnsupportedByEngine, match=normalization):
        ra.integrate(field, y, (0.0, 0.5), "rk4", dt=0.1, engine="compiled")
    auto = ra.integrate(field, y, (0.0, 0.5), "rk4", dt=0.1, engine="auto")
    ref = ra.integrate(field, y, (0.0, 0.5), "rk4", dt=0.1, engine="numpy")
    np.testing.assert_array_equal(auto.y, ref.y)


def test_hardmax_on_torch_tensors_matches_numpy():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    y = tokens(rng, 6, 3)
    field = AttentionField(rng.normal(size=(2, 3, 3)), normalization="hardmax", mask="causal", alibi=[0.1, 0.3])
    out = field(0.0, torch.tensor(y)).numpy()
    np.testing.assert_allclose(out, field(0.0, y), rtol=0, atol=1e-14)


@pytest.mark.parametrize("kwargs,match", [
    (dict(tie_rtol=-1.0), "tie_rtol"), (dict(sinkhorn_iters=0), "sinkhorn_iters"),
    (dict(sinkhorn_tol=0.0), "sinkhorn_tol"), (dict(alibi=-0.5), "alibi"), (dict(alibi=[1.0, 2.0]), "alibi"),
    (dict(rope=[1.0, 2.0]), "rope"), (dict(rope_key=np.eye(3)), "rope_key"),
    (dict(rope=[1.0], rope_key=np.eye(2)), "rope_key"),
    (dict(normalization="sinkhorn", mask="causal"), "sinkhorn"), (dict(normalization="argmax"), "normalization"),
])
def test_bad_options_name_the_argument(kwargs, match):
    with pytest.raises(ValidationError, match=match):
        AttentionField(np.eye(3), **kwargs)


def test_layernorm_refuses_a_flat_field():
    with pytest.raises(ValidationError, match="flat"):
        ra.layernorm(AttentionField(np.eye(3), W="flat"), "pre")
