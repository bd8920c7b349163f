"""CircleField(evaluation="fourier"): the O(n K) sums through Fourier moments against the direct
O(n^2) sums written out here in plain NumPy, the truncation bound, and the engine's refusal."""

import numpy as np
import pytest
from scipy import special

import riemattn as ra
from riemattn.dynamics._circle_fourier import modes, truncation_bound
from riemattn.dynamics.circle import CircleField
from riemattn.errors import UnsupportedByEngine, ValidationError

EPS = np.finfo(float).eps
CASES = [("sa", False), ("usa", False), ("usa", True)]


def direct(theta, beta, model, rescaled, causal):
    """GLPR eq. (7.1) summed pairwise in plain NumPy; also e^{-beta} Z_i / n_i and the row counts n_i."""
    n = theta.shape[-1]
    D = theta[..., None, :] - theta[..., :, None]  # [i, j] = theta_j - theta_i
    E = np.exp(beta * (np.cos(D) - 1.0))  # e^{-beta} e^{beta cos D}
    if causal:
        E = np.tril(E)
    rows = np.arange(1, n + 1) if causal else np.full(n, n)
    num, Z = np.sum(E * np.sin(D), axis=-1), np.sum(E, axis=-1)
    if model == "sa":
        out = num / Z
    else:
        out = num / n * (1.0 if rescaled else np.exp(beta))
    return out, Z / rows, rows


def tolerance(theta, beta, model, rescaled, causal):
    """Bound on |fourier - direct| per particle (the reasoning of each term in the comments).

    In units of e^beta / n_i per term (the largest weight): the truncation bounds of the module
    (numerator and normaliser); the rounding of the Fourier sums: e^{i k theta} by k products
    (k + 1 roundings), the moment M_k a sum of n unit terms (log2 n + 1 relative, pairwise
    summation), the product with e^{-i k theta_i} (2 more), times the coefficient 2 k I_k / beta
    (numerator) or 2 I_k (normaliser) summed over k, plus the K additions of the final dot product;
    the rounding of the direct sums: theta_j - theta_i (|theta| eps), its cosine and beta (cos - 1)
    (beta (|D| + 2) eps in the exponent, the same relative in e^{...}), the exponential and the
    product with sin (4 eps), and the pairwise sum over j (log2 n + 1). Four times that for the
    constants left out. SA divides by Z_i / n_i (>= e^-beta ... computed directly here): the bound
    of the quotient is (err_num + |F_i| err_Z) / (Z_i / n_i).
    """
    n = theta.shape[-1]
    K = modes(beta)
    k = np.arange(1, K + 1)
    ik = special.ive(k, beta) if beta > 0 else np.zeros(K)
    ck = 2 * k * ik / beta if beta > 0 else (k == 1).astype(float)
    L = float(np.max(np.abs(theta))) if theta.size else 0.0
    log_n = np.log2(max(n, 2)) + 1
    t_num, t_z = truncation_bound(beta, K)
    r_num = EPS * (np.sum(ck * (k + 3 + log_n)) + K * ck.max())
    r_z = EPS * (np.sum(2 * ik * (k + 3 + log_n)) + K * max(ik.max(initial=0), 1.0))
    r_direct = EPS * (beta * (2 * L + 2) + 2 * L + 4 + log_n)
    err_num = 4 * (t_num + r_num + r_direct)
    err_z = 4 * (t_z + r_z + r_direct)
    F, Zn, _ = direct(theta, beta, model, rescaled, causal)
    if model == "sa":
        return (err_num + np.abs(F) * err_z) / Zn
    return np.full(theta.shape, err_num * (1.0 if rescaled else np.exp(beta)))


@pytest.mark.parametrize("model, rescaled", CASES)
@pytest.mark.parametrize("mask", ["full", "causal"])
@pytest.mark.parametrize("beta", [0.0, 1e-3, 0.5, 5.0, 14.0, 60.0])
def test_fourier_equals_direct(model, rescaled, mask, beta):
    """Random, unwrapped (|theta| up to 40), clustered and single-particle configurations, batched:
    the Fourier field equals the plain pairwise sums within :func:`tolerance`."""
    rng = np.random.default_rng(44)
    cases = [
        rng.uniform(-np.pi, np.pi, (3, 57)),
        rng.uniform(-40.0, 40.0, (2, 200)),
        np.concatenate([0.3 + 1e-6 * rng.normal(size=(2, 30)), 2.0 + 1e-3 * rng.normal(size=(2, 30))], axis=-1),
        np.array([[0.7]]),
    ]
    causal = mask == "causal"
    field = CircleField(beta, model, rescaled=rescaled, mask=mask, evaluation="fourier")
    for theta in cases:
        got = field(0.0, theta)
        ref = direct(theta, beta, model, rescaled, causal)[0]
        tol = tolerance(theta, beta, model, rescaled, causal)
        assert got.shape == theta.shape
        assert np.all(np.abs(got - ref) <= tol), float(np.max(np.abs(got - ref) / tol))
    # the Field state (..., n, 1) keeps its shape
    theta = cases[0][..., None]
    assert np.array_equal(field(0.0, theta), field(0.0, cases[0])[..., None])


@pytest.mark.parametrize("beta", [1e-3, 0.5, 2.0, 5.0, 14.0, 40.0, 150.0])
def test_truncation_bound_holds(beta):
    """The tails sum_{k>K} k I_k and sum_{k>K} I_k (summed here term by term with scipy, k up to
    K + 400, where the terms are far below the double range of the sum) are below the module's
    bounds (K + 2) I_K and I_K, and the bounds at modes(beta) are at most eps (relative to e^beta);
    the ratio bound I_{k+1} <= beta / (2 (k + 1)) I_k behind them holds."""
    K = modes(beta)
    assert K >= max(1, np.ceil(beta))
    kk = np.arange(K + 1, K + 401)
    tail = special.ive(kk, beta)
    iK = special.ive(K, beta)
    assert np.sum(kk * tail) <= (K + 2) * iK * (1 + 1e-12)
    assert np.sum(tail) <= iK * (1 + 1e-12)
    assert max(truncation_bound(beta, K)) <= EPS
    if K > max(1, np.ceil(beta)):  # K is the least such: one fewer mode is not enough
        assert max(truncation_bound(beta, K - 1)) > EPS
    k = np.arange(0, K + 50)
    a, b = special.ive(k, beta), special.ive(k + 1, beta)
    ok = a > 1e-300
    assert np.all(b[ok] <= beta / (2 * (k[ok] + 1)) * a[ok] * (1 + 1e-13))


def test_measured_dynamics_do_not_depend_on_the_evaluation():
    """200 particles, plain USA at beta = 5 (the mode-selection model), dopri5 to t = 0.4 (past
    clustering): the two evaluations give the same cluster count at distance 1e-3 at every saved
    time, and trajectories within 1e-8 (the rtol 1e-10 integrations differ by rounding only)."""
    rng = np.random.default_rng(5)
    theta0 = rng.uniform(0, 2 * np.pi, 200)[:, None]
    ts = np.linspace(0, 0.4, 9)
    out = {}
    for ev in ("direct", "fourier"):
        sol = ra.integrate(CircleField(5.0, "usa", evaluation=ev), theta0, (0.0, 0.4), "dopri5", rtol=1e-10,
                           atol=1e-12, saveat=ts, engine="numpy")
        out[ev] = sol.y[..., 0]
    counts = {ev: ra.analysis.diagnostics.cluster_count(ra.circle.to_points(y), 1e-3) for ev, y in out.items()}
    assert np.array_equal(counts["direct"], counts["fourier"]), counts
    assert counts["direct"][-1] < 20  # clustered by then: the comparison is not of uniform noise
    assert np.max(np.abs(out["direct"] - out["fourier"])) <= 1e-8


def test_bad_evaluation_and_engine_refusal():
    with pytest.raises(ValidationError, match="evaluation"):
        CircleField(1.0, evaluation="fft")
    with pytest.raises(ValidationError, match="beta"):  # plain USA's e^beta overflows
        CircleField(800.0, "usa", evaluation="fourier")(0.0, np.array([0.0, 1.0]))
    field = CircleField(2.0, "sa", evaluation="fourier")
    theta0 = np.array([[0.0], [0.5], [2.0]])
    with pytest.raises(UnsupportedByEngine, match="evaluation='fourier'"):
        ra.integrate(field, theta0, (0.0, 0.1), "rk4", dt=0.01, engine="compiled")
    auto = ra.integrate(field, theta0, (0.0, 0.1), "rk4", dt=0.01, engine="auto")
    ref = ra.integrate(field, theta0, (0.0, 0.1), "rk4", dt=0.01, engine="numpy")
    assert np.array_equal(auto.y, ref.y)
    assert "evaluation='fourier'" in repr(field)
