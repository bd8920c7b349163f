"""AttentionField against an independent loop-based implementation of the attention field (ICML eq. 6), and structure."""

import itertools

import numpy as np
import pytest

import riemattn as ra
from riemattn.errors import InputTypeError, ValidationError


def random_spd(rng, d, cond=5.0):
    Q, _ = np.linalg.qr(rng.normal(size=(d, d)))
    return (Q * np.geomspace(1.0, cond, d)) @ Q.T


def loop_field(y, P, U, W, mask, normalization):
    """Textbook ICML eq. (6), one token, head and neighbour at a time (no vectorization)."""
    ell, d = y.shape
    h = P.shape[0]
    W = np.eye(d) if W is None else W
    out = np.zeros_like(y)
    for i in range(ell):
        for eta in range(h):
            js = range(ell) if mask == "full" else range(i + 1)
            weights = {j: np.exp(y[i] @ P[eta] @ y[j]) for j in js}
            if normalization == "paper":
                Z = np.sqrt(d) * sum(weights.values())
            elif normalization == "softmax":
                Z = sum(weights.values())
            else:
                Z = ell
            for j, w in weights.items():
                Uy = U[eta] @ y[j]
                out[i] += (w / Z) * (Uy - (y[i] @ W @ Uy) * y[i])
    return out


CASES = list(itertools.product(["full", "causal"], [1, 2, 3], ["paper", "softmax", "mean"], [False, True], [False, True]))


@pytest.mark.parametrize("case", range(len(CASES)))
def test_field_matches_loop_formula_and_is_tangent(case):
    mask, h, normalization, ellipsoid, with_U = CASES[case]
    rng = np.random.default_rng(1000 + case)  # one fixed seed per case: a failure can be replayed
    d, ell = 4, 5
    W = random_spd(rng, d) if ellipsoid else None
    P = rng.uniform(-1, 1, (h, d, d))
    U = rng.uniform(-1, 1, (h, d, d)) if with_U else None
    field = ra.AttentionField(P, U, W=W, mask=mask, normalization=normalization)
    y = field.manifold.projection(rng.normal(size=(3, ell, d)))
    F = field(0.0, y)
    Umat = np.broadcast_to(np.eye(d), (h, d, d)) if U is None else U
    for b in range(3):
        np.testing.assert_allclose(F[b], loop_field(y[b], P, Umat, W, mask, normalization), rtol=1e-12, atol=1e-14)
    Wm = np.eye(d) if W is None else W
    np.testing.assert_allclose(np.einsum("...i,ij,...j->...", y, Wm, F), 0.0, atol=1e-13)


def test_time_dependent_matrices_and_beta():
    rng = np.random.default_rng(5)
    d, ell = 3, 4
    P0, U0 = rng.normal(size=(2, d, d)), rng.normal(size=(2, d, d))
    field = ra.AttentionField(lambda t: np.cos(t) * P0, lambda t: (1 + t) * U0, beta=2.5)
    y = field.manifold.projection(rng.normal(size=(ell, d)))
    t = 0.7
    expected = loop_field(y, 2.5 * np.cos(t) * P0, (1 + t) * U0, None, "full", "paper")
    np.testing.assert_allclose(field(t, y), expected, rtol=1e-12)
    np.testing.assert_allclose(field.P(t), 2.5 * np.cos(t) * P0)


def test_attention_rows_and_causal_structure():
    rng = np.random.default_rng(6)
    d, ell = 5, 6
    P = rng.normal(size=(2, d, d))
    y = ra.Sphere(d - 1).projection(rng.normal(size=(7, ell, d)))
    for normalization, total in (("paper", 1 / np.sqrt(d)), ("softmax", 1.0)):
        A = ra.AttentionField(P, mask="causal", normalization=normalization).attention(0.0, y)
        assert A.shape == (7, 2, ell, ell)
        np.testing.assert_allclose(A.sum(-1), total, rtol=1e-14)
        lower = np.tril(np.ones((ell, ell), dtype=bool))
        assert np.all(A[..., ~lower] == 0.0) and np.all(A[..., lower] > 0)
    A = ra.AttentionField(P, normalization="mean").attention(0.0, y)
    np.testing.assert_allclose(A, np.exp(np.einsum("bid,hde,bje->bhij", y, P, y)) / ell, rtol=1e-13)


def test_causal_identity_U_leaves_first_token_fixed():
    rng = np.random.default_rng(7)
    field = ra.AttentionField(rng.normal(size=(3, 4, 4)), mask="causal")
    y0 = field.manifold.projection(rng.normal(size=(2, 6, 4)))
    # F_1 = alpha_11 (y_1 - |y_1|^2 y_1): zero up to the rounding of |y_1|^2 = 1
    assert np.max(np.abs(field(0.0, y0)[:, 0])) <= 4e-16
    sol = ra.integrate(field, y0, (0, 5), stepper="rk4", dt=0.005)
    assert np.max(np.abs(sol.y[:, :, 0] - y0[:, 0])) <= 1e-15
    assert np.max(np.abs(sol.y[-1, :, 1:] - sol.y[0, :, 1:])) > 0.1  # the other tokens do move


def test_full_attention_is_permutation_equivariant():
    rng = np.random.default_rng(8)
    d, ell = 4, 7
    field = ra.AttentionField(rng.normal(size=(2, d, d)), rng.normal(size=(2, d, d)), W=random_spd(rng, d))
    y = field.manifold.projection(rng.normal(size=(ell, d)))
    perm = rng.permutation(ell)
    np.testing.assert_allclose(field(0.0, y[perm]), field(0.0, y)[perm], rtol=1e-12, atol=1e-15)


def test_sa_usa_match_glpr_formulas():
    rng = np.random.default_rng(9)
    n, d, beta = 6, 3, 4.0
    x = ra.Sphere(d - 1).projection(rng.normal(size=(n, d)))
    G = np.exp(beta * x @ x.T)
    proj = lambda v: v - np.sum(x * v, -1, keepdims=True) * x  # noqa: E731
    sa_expected = proj((G / G.sum(1, keepdims=True)) @ x)
    usa_expected = proj((G / n) @ x)
    np.testing.assert_allclose(ra.sa(beta, d)(0.0, x), sa_expected, rtol=1e-13)
    np.testing.assert_allclose(ra.usa(beta, d)(0.0, x), usa_expected, rtol=1e-13)


def test_stable_softmax_at_huge_beta():
    rng = np.random.default_rng(10)
    x = ra.Sphere(2).projection(rng.normal(size=(5, 3)))
    F = ra.sa(5000.0, 3)(0.0, x)
    assert np.all(np.isfinite(F))
    # at beta -> infinity each token attends only to itself: the field vanishes
    np.testing.assert_allclose(F, 0.0, atol=1e-12)
    with pytest.raises(ValidationError, match="overflow"):
        ra.usa(5000.0, 3)(0.0, x)


def test_layer_is_one_layer_step():
    rng = np.random.default_rng(11)
    h, w, d, ell, tau = 2, 3, 4, 6, 0.37
    Q, K, V = (rng.normal(size=(h, w, d)) for _ in range(3))
    Wo = rng.normal(size=(h, d, w))
    for W, mask in ((None, "full"), (random_spd(rng, d), "causal")):
        layer = ra.TransformerLayer(Q, K, tau * V, Wo, W=W, mask=mask)
        y = layer.manifold.projection(rng.normal(size=(3, ell, d)))
        # the continuous field with V = tau V' ...
        field = ra.AttentionField(np.swapaxes(Q, 1, 2) @ K, Wo @ V, W=W, mask=mask)
        step = ra.integrate(field, y, (0.0, tau), stepper="layer", dt=tau).y[-1]
        np.testing.assert_allclose(layer(y), step, rtol=0, atol=1e-14)
        # ... and the textbook layer (ICML eq. 1 and 4), written out here independently
        Wm = np.eye(d) if W is None else W
        for b in range(3):
            nxt = []
            for i in range(ell):
                acc = y[b, i].copy()
                for eta in range(h):
                    js = range(ell) if mask == "full" else range(i + 1)
                    e = np.array([np.exp(y[b, i] @ Q[eta].T @ K[eta] @ y[b, j]) for j in js])
                    Z = np.sqrt(d) * e.sum()
                    for j, ej in zip(js, e):
                        acc += Wo[eta] @ (tau * V[eta]) @ y[b, j] * ej / Z
                nxt.append(acc / np.sqrt(acc @ Wm @ acc))
            np.testing.assert_allclose(layer(y)[b], np.array(nxt), rtol=0, atol=1e-14)


def test_layer_and_euler_agree_to_first_order():
    """Over a fixed horizon, n "layer" steps and n projected Euler steps (tangent field) differ by
    O(1/n): the layer is an Euler step of size h / (1 + h <y, f>_W)."""
    rng = np.random.default_rng(12)
    d, ell, T = 4, 5, 0.5
    field = ra.AttentionField(rng.normal(size=(2, d, d)), rng.normal(size=(2, d, d)),
                              W=random_spd(rng, d), mask="causal")
    y0 = field.manifold.projection(rng.normal(size=(ell, d)))
    ns = np.array([20, 40, 80, 160])
    gaps = [np.max(np.abs(ra.integrate(field, y0, (0, T), stepper="layer", dt=T / n).y[-1]
                          - ra.integrate(field, y0, (0, T), stepper="euler", dt=T / n).y[-1]))
            for n in ns]
    slope = np.polyfit(np.log(T / ns), np.log(gaps), 1)[0]
    assert abs(slope - 1) <= 0.2, (slope, gaps)
    assert gaps[0] > 1e-4  # they do differ (the radial part of the update is not small here)


def test_update_is_the_unprojected_field_and_drive_is_deprecated():
    rng = np.random.default_rng(13)
    d = 3
    W = random_spd(rng, d)
    field = ra.AttentionField(rng.normal(size=(2, d, d)), rng.normal(size=(2, d, d)), W=W)
    y = field.manifold.projection(rng.normal(size=(4, d)))
    f = field.update(0.0, y)
    np.testing.assert_allclose(field(0.0, y), f - np.einsum("li,ij,lj->l", y, W, f)[:, None] * y,
                               rtol=1e-13, atol=1e-15)
    with pytest.warns(DeprecationWarning, match="update"):
        np.testing.assert_array_equal(field.drive(0.0, y), f)


def test_array_beta_is_one_beta_per_trajectory():
    """sa/usa with an array beta equal the scalar-beta fields trajectory by trajectory."""
    rng = np.random.default_rng(14)
    betas = np.array([0.0, 0.7, 3.0, 9.0])
    x = ra.Sphere(3).projection(rng.normal(size=(4, 2, 6, 4)))  # (beta, configuration, l, d)
    for make in (ra.sa, ra.usa):
        got = make(betas[:, None], 4)(0.0, x)
        for k, beta in enumerate(betas):
            np.testing.assert_allclose(got[k], make(float(beta), 4)(0.0, x[k]), rtol=1e-12, atol=1e-15)
    # general P, with U, on an ellipsoid, causal: against the loop formula
    d = 3
    W = random_spd(rng, d)
    P, U = rng.normal(size=(2, d, d)), rng.normal(size=(2, d, d))
    field = ra.AttentionField(P, U, W=W, mask="causal", beta=betas)
    y = field.manifold.projection(rng.normal(size=(4, 5, d)))
    F = field(0.0, y)
    for k, beta in enumerate(betas):
        np.testing.assert_allclose(F[k], loop_field(y[k], beta * P, U, W, "causal", "paper"),
                                   rtol=1e-12, atol=1e-14)
    with pytest.raises(ValidationError, match="beta of shape"):
        field(0.0, y[:3])


@pytest.mark.parametrize("vectorized", [False, True])
def test_one_time_per_trajectory(vectorized):
    """field(t, y) with t of the batch shape equals field(t_b, y_b) for each trajectory b."""
    rng = np.random.default_rng(15)
    d, ell = 3, 4
    P0, U0 = rng.normal(size=(2, d, d)), rng.normal(size=(2, d, d))
    if vectorized:
        field = ra.AttentionField(lambda t: np.cos(t)[:, None, None, None] * P0,
                                  lambda t: (1 + np.asarray(t))[:, None, None, None] * U0,
                                  time_vectorized=True)
    else:
        field = ra.AttentionField(lambda t: np.cos(t) * P0, lambda t: (1 + t) * U0)
    y = field.manifold.projection(rng.normal(size=(3, 2, ell, d)))
    t = np.array([[0.1, 0.1], [0.5, 2.0], [0.1, 3.0]])
    F = field(t, y)
    for a in range(3):
        for b in range(2):
            expected = loop_field(y[a, b], np.cos(t[a, b]) * P0, (1 + t[a, b]) * U0, None, "full", "paper")
            np.testing.assert_allclose(F[a, b], expected, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(field.P(t)[1, 1], np.cos(2.0) * P0, rtol=1e-15)


@pytest.mark.parametrize(
    "kwargs, exc, words",
    [
        (dict(P=np.eye(3), mask="diagonal"), ValidationError, ["mask", "causal"]),
        (dict(P=np.eye(3), normalization="l2"), ValidationError, ["normalization", "softmax"]),
        (dict(P=np.ones((3, 2))), ValidationError, ["P", "(d, d)"]),
        (dict(P=np.ones((2, 2, 3, 4))), ValidationError, ["P", "(..., h, d, d)", "(2, 2, 3, 4)"]),
        (dict(P=np.eye(3), U=np.eye(4)), ValidationError, ["U", "R^3"]),
        (dict(P=np.eye(3), W=np.eye(4)), ValidationError, ["W must have shape (3, 3)", "P", "(4, 4)"]),
        (dict(P=np.eye(3), W=-np.eye(3)), ValidationError, ["W", "positive definite"]),
        (dict(P=np.eye(3), W=np.array([[1, 1, 0], [0, 1, 0], [0, 0, 1.0]])), ValidationError, ["W", "symmetric"]),
        (dict(P=np.full((3, 3), np.inf)), ValidationError, ["P", "NaN or infinite"]),
        (dict(P=np.eye(3), U=np.full((3, 3), np.nan)), ValidationError, ["U", "NaN"]),
        (dict(P="identity"), InputTypeError, ["P", "str"]),
        (dict(P=np.eye(3), beta="large"), InputTypeError, ["beta"]),
        (dict(P=np.ones((2, 3, 3)), U=np.ones((3, 3, 3))), ValidationError, ["U has 3 heads", "P has 2"]),
    ],
)
def test_field_construction_errors(kwargs, exc, words):
    with pytest.raises(exc) as info:
        ra.AttentionField(**kwargs)
    for word in words:
        assert word in str(info.value)


def test_callable_returning_wrong_shape_is_reported():
    field = ra.AttentionField(lambda t: np.eye(3) if t < 1 else np.eye(4))
    y = field.manifold.projection(np.ones((2, 3)))
    field(0.5, y)
    with pytest.raises(ValidationError, match=r"P\(t\) returned shape \(1, 4, 4\) at t = 2"):
        field(2.0, y)
    nan_field = ra.AttentionField(lambda t: np.eye(3) * (np.nan if t > 1 else 1.0))
    with pytest.raises(ValidationError, match=r"P\(t\) returned NaN"):
        nan_field(2.0, y)


def test_field_rejects_tokens_of_wrong_dimension():
    field = ra.AttentionField(np.eye(3))
    with pytest.raises(ValidationError, match=r"y must have shape \(\.\.\., l, 3\)"):
        field(0.0, np.ones((4, 5)))


def test_tokens_in_r1_on_the_sphere_are_refused_naming_p_and_the_flat_option():
    """d = 1: the unit sphere of R^1 is {-1, 1}, with no tangent directions. The error names the
    user's P (not an internal ``dim``) and the way to keep such tokens (W='flat'), which works."""
    with pytest.raises(ValidationError, match=r"P of shape \(1, 1\) puts the tokens in R\^1.*W='flat'"):
        ra.AttentionField(np.eye(1))
    field = ra.AttentionField(np.eye(1), W="flat")
    y = np.array([[1.0], [3.0]])
    # flat space: field_i = sum_j alpha_ij (y_j - y_i), alpha = softmax_j(y_i y_j / sqrt(1)) (paper)
    a = np.exp(np.outer(y[:, 0], y[:, 0]))
    a /= a.sum(axis=1, keepdims=True)
    expected = (a * (y[:, 0][None, :] - y[:, 0][:, None])).sum(axis=1)[:, None]
    # each entry: 2 terms alpha (y_j - y_i), |y_j - y_i| <= 2, alpha <= 1, a few roundings each
    np.testing.assert_allclose(field(0.0, y), expected, rtol=0, atol=16 * np.finfo(float).eps * 2)


def test_work_buffers_never_leak_into_results_and_threads_do_not_share_them():
    """The field reuses work arrays between calls (per thread): a returned array must not change
    when the field is called again, and concurrent calls from threads must equal serial ones."""
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(11)
    for U in (None, rng.normal(size=(2, 3, 3))):
        field = ra.AttentionField(lambda t: np.cos(t) * np.ones((2, 3, 3)), U, beta=np.array([[1.0], [3.0]]))
        ys = [field.manifold.projection(rng.normal(size=(2, 5, 4, 3))) for _ in range(8)]
        first = [(field(0.3, y), field.update(0.3, y), field.attention(0.3, y)) for y in ys]
        again = [(field(0.3, y).copy(), field.update(0.3, y).copy(), field.attention(0.3, y).copy()) for y in ys]
        for a, b in zip(first, again):
            for u, v in zip(a, b):
                np.testing.assert_array_equal(u, v)
        with ThreadPoolExecutor(4) as pool:
            threaded = list(pool.map(lambda y: field(0.3, y), ys * 8))
        for k, out in enumerate(threaded):
            np.testing.assert_array_equal(out, again[k % len(ys)][0])
