"""Positional scores of the attention field (ALiBi decay bias, RoPE) against a plain NumPy
reference: with causal masks, heads, time-varying weights, per-trajectory beta, every normalization."""

import itertools

import numpy as np
import pytest

import riemattn as ra
from riemattn.dynamics.attention import AttentionField

EPS = np.finfo(float).eps


def rotation(d, phi, theta):
    """R(phi): cos/sin blocks on the coordinate pairs (2k, 2k + 1), angle phi * theta_k."""
    R = np.eye(d)
    for k, th in enumerate(theta):
        c, s = np.cos(phi * th), np.sin(phi * th)
        R[2 * k:2 * k + 2, 2 * k:2 * k + 2] = [[c, -s], [s, c]]
    return R


def reference_attention(y, P, beta, mask="full", normalization="softmax", alibi=None, rope=None, K=None):
    """alpha[eta, i, j] from scores y_i^T beta P_eta R((j - i) theta) K_eta y_j - m_eta |i - j|."""
    ell, d = y.shape
    h = P.shape[0]
    A = np.zeros((h, ell, ell))
    for eta in range(h):
        S = np.full((ell, ell), -np.inf)
        for i in range(ell):
            for j in range(ell if mask == "full" else i + 1):
                R = np.eye(d) if rope is None else rotation(d, j - i, rope)
                Ke = np.eye(d) if K is None else K[eta]
                S[i, j] = y[i] @ (beta * P[eta]) @ R @ Ke @ y[j] - (0 if alibi is None else alibi[eta] * abs(i - j))
        for i in range(ell):
            js = [j for j in range(ell) if np.isfinite(S[i, j])]
            if normalization == "softmax":
                w = np.exp(S[i, js] - S[i, js].max())
                A[eta, i, js] = w / w.sum()
            elif normalization == "hardmax":
                top = S[i, js].max()
                M = [j for j in js if S[i, j] >= top - 2.0**-40 * np.abs(S[i, js]).max()]
                A[eta, i, M] = 1.0 / len(M)
        if normalization == "sinkhorn":
            K_ = np.exp(S)
            for _ in range(5000):
                K_ /= K_.sum(1, keepdims=True)
                K_ /= K_.sum(0, keepdims=True)
            A[eta] = K_ / K_.sum(1, keepdims=True)
    return A


def tokens(rng, ell, d):
    y = rng.normal(size=(ell, d))
    return y / np.linalg.norm(y, axis=1, keepdims=True)


CASES = list(itertools.product(["full", "causal"], [1, 2], ["alibi", "rope", "both"], [False, True]))


@pytest.mark.parametrize("mask,h,kind,key", CASES)
def test_positional_softmax_matches_reference(mask, h, kind, key):
    rng = np.random.default_rng(len(str((mask, h, kind, key))) + 10 * h)
    d, ell, beta = 5, 6, 1.4
    P = rng.normal(size=(h, d, d))
    K = rng.normal(size=(h, d, d)) if key else None
    alibi = rng.uniform(0.1, 1.0, size=h) if kind in ("alibi", "both") else None
    rope = np.array([0.3, 1.1]) if kind in ("rope", "both") else None
    if rope is None:
        K = None
    y = tokens(rng, ell, d)
    field = AttentionField(P, mask=mask, normalization="softmax", beta=beta, alibi=alibi, rope=rope,
                           rope_key=K)
    expect = reference_attention(y, P, beta, mask, "softmax", alibi, rope, K)
    # scores: d^2-term products of O(beta |P| |K|) entries; softmax is 1-Lipschitz in them
    tol = 16 * d * d * EPS * beta * np.abs(P).max() * (1 if K is None else np.abs(K).max() * d)
    np.testing.assert_allclose(field.attention(0.0, y), expect, rtol=0, atol=tol)


def test_rope_depends_on_relative_positions_only():
    # the rotation with theta = 0 is the identity; with one frequency on d = 2 the score of
    # (i, j) is y_i^T P R((j - i) theta) y_j: tokens equal to a common vector give a Toeplitz matrix
    P = np.array([[0.5, 0.2], [-0.1, 0.7]])
    y = np.tile([[0.6, 0.8]], (5, 1))
    base = AttentionField(P, normalization="softmax").attention(0.0, y)
    np.testing.assert_array_equal(AttentionField(P, normalization="softmax", rope=[0.0]).attention(0.0, y), base)
    field = AttentionField(P, normalization="mean", rope=[0.9])
    S = np.log(field.attention(0.0, y)[0] * 5)  # "mean": alpha = exp(S) / l
    for k in range(-4, 5):
        diag = np.diagonal(S, offset=k)
        np.testing.assert_allclose(diag, diag[0], rtol=0, atol=1e-14)
    assert np.ptp(np.diagonal(S, 1)) < 1e-14 < abs(S[0, 1] - S[1, 0])  # relative, and not symmetric


@pytest.mark.parametrize("normalization", ["hardmax", "sinkhorn", "paper", "mean"])
def test_positional_other_normalizations(normalization):
    rng = np.random.default_rng(21)
    d, ell = 4, 5
    P = rng.normal(size=(2, d, d))
    y = tokens(rng, ell, d)
    mask = "full" if normalization == "sinkhorn" else "causal"
    field = AttentionField(P, mask=mask, normalization=normalization, beta=0.9, alibi=[0.2, 0.6], rope=[0.4, 1.3],
                           sinkhorn_tol=1e-14)
    A = field.attention(0.0, y)
    ref_norm = {"paper": "softmax", "mean": "softmax"}.get(normalization, normalization)
    expect = reference_attention(y, P, 0.9, mask, ref_norm, [0.2, 0.6], [0.4, 1.3])
    if normalization == "paper":
        expect = expect / np.sqrt(d)
    if normalization == "mean":  # alpha = exp(S) / l: compare the softmax of it
        A = A / A.sum(-1, keepdims=True)
    np.testing.assert_allclose(A, expect, rtol=0, atol=1e-12)


def test_positional_with_time_varying_weights_and_array_beta():
    rng = np.random.default_rng(8)
    d, ell = 4, 5
    P0, P1 = rng.normal(size=(2, d, d)), rng.normal(size=(2, d, d))
    betas = np.array([0.5, 2.0])
    field = AttentionField(lambda t: P0 + np.sin(t) * P1, mask="causal", normalization="softmax", beta=betas,
                           alibi=[0.3, 0.1], rope=[0.5, 0.25])
    y = np.stack([tokens(rng, ell, d) for _ in range(2)])
    t = np.array([0.3, 1.7])  # one time per trajectory
    A = field.attention(t, y)
    for b in range(2):
        expect = reference_attention(y[b], P0 + np.sin(t[b]) * P1, betas[b], "causal", "softmax", [0.3, 0.1],
                                     [0.5, 0.25])
        np.testing.assert_allclose(A[b], expect, rtol=0, atol=1e-13)
    # the field integrates with per-trajectory times (adaptive steps) and agrees with one-by-one runs
    sol = ra.integrate(field, y, (0.0, 1.0), "dopri5", rtol=1e-9, atol=1e-11)
    for b in range(2):
        one = AttentionField(lambda t: P0 + np.sin(t) * P1, mask="causal", normalization="softmax",
                             beta=float(betas[b]), alibi=[0.3, 0.1], rope=[0.5, 0.25])
        sb = ra.integrate(one, y[b], (0.0, 1.0), "dopri5", rtol=1e-9, atol=1e-11)
        np.testing.assert_allclose(sol.y[-1, b], sb.y[-1], rtol=0, atol=1e-12)


def test_positional_torch_matches_numpy():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(9)
    y = tokens(rng, 6, 4)
    field = AttentionField(rng.normal(size=(2, 4, 4)), rng.normal(size=(4, 4)), mask="causal",
                           normalization="softmax", alibi=[0.1, 0.4], rope=[0.7, 0.2],
                           rope_key=rng.normal(size=(4, 4)))
    np.testing.assert_allclose(field(0.0, torch.tensor(y)).numpy(), field(0.0, y), rtol=0, atol=1e-13)


def test_positional_jacobian_falls_back_to_differences():
    rng = np.random.default_rng(10)
    y = tokens(rng, 4, 3)
    field = AttentionField(rng.normal(size=(3, 3)), normalization="softmax", alibi=0.5, rope=[0.8])
    assert not field.closed_form
    J = ra.dynamics.jacobians.jacobian(field, 0.0, y)
    v = rng.normal(size=y.shape)
    h = 1e-6
    fd = (field(0.0, y + h * v) - field(0.0, y - h * v)) / (2 * h)
    np.testing.assert_allclose(np.einsum("iakb,kb->ia", J, v), fd, rtol=0, atol=1e-7)
    # Rosenbrock (stiff, lifted Jacobian) integrates it; compare with a tight dopri5 run
    a = ra.integrate(field, y, (0.0, 1.0), "rodas4", rtol=1e-8, atol=1e-10)
    b = ra.integrate(field, y, (0.0, 1.0), "dop853", rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(a.y[-1], b.y[-1], rtol=0, atol=1e-6)


def test_alibi_slopes_at_the_float_limit_give_the_limit_without_warnings():
    """m |i - j| overflows for m ~ 1e308: the bias is -inf off the diagonal (each token attends to
    itself only), so f_i = y_i and F_i = y_i - (y_i . y_i) y_i, zero up to the rounding of the
    product y_i . y_i (d + 1 roundings of a unit vector's entries); no RuntimeWarning escapes."""
    import warnings

    rng = np.random.default_rng(3)
    y = rng.normal(size=(5, 3))
    y /= np.linalg.norm(y, axis=-1, keepdims=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        F = ra.AttentionField(np.eye(3), alibi=[1e308])(0.0, y)
    assert np.max(np.abs(F)) <= (3 + 1) * np.finfo(float).eps
