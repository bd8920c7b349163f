"""Tests of riemattn.analysis.diagnostics (Wendel vs Monte Carlo, hemisphere LP, clusters, consensus)."""

from math import comb

import numpy as np
import pytest

import riemattn as ra
from riemattn import diagnostics as dg
from riemattn.errors import InputTypeError, ValidationError

N_MC = 20_000


# ----------------------------------------------------------------------------------------------
# Wendel's theorem against Monte Carlo (Issue 5: 20 000 samples, 4 standard errors, l <= 8, dim <= 4)
# ----------------------------------------------------------------------------------------------
def test_wendel_matches_monte_carlo_using_common_hemisphere():
    rng = np.random.default_rng(20240605)
    icml_far = 0
    for dim in range(1, 5):
        for n in range(1, 9):
            y = rng.standard_normal((N_MC, n, dim + 1))  # Gaussian directions = uniform on S^dim
            hat = float(np.mean(dg.in_common_hemisphere(y)))
            p = dg.wendel_probability(n, dim)
            se = np.sqrt(p * (1 - p) / N_MC)
            assert abs(hat - p) <= 4 * se, (n, dim, hat, p, se)  # se = 0 (p = 1) demands equality
            # ICML Remark 3.4's indexing (sum to dim - 1 for S^dim) is off by one:
            icml = sum(comb(n - 1, k) for k in range(dim)) / 2 ** (n - 1)
            se_hat = max(np.sqrt(hat * (1 - hat) / N_MC), 1.0 / N_MC)
            icml_far += abs(hat - icml) > 20 * se_hat
    assert icml_far >= 20  # the alternative indexing is rejected decisively in most cells


def test_wendel_values_and_broadcasting():
    assert dg.wendel_probability(2, 1) == 1.0  # two points on the circle: always
    assert dg.wendel_probability(3, 1) == 0.75  # three points on the circle: 3/4 (classical)
    assert dg.wendel_probability(4, 2) == 0.875  # four points on S^2: 7/8 (classical)
    assert dg.wendel_probability(5, 0) == 1 / 16  # S^0 = {-1, 1}: all the same sign
    P = dg.wendel_probability(np.arange(1, 9)[:, None], np.arange(5)[None, :])
    assert P.shape == (8, 5)
    assert np.all(P[np.arange(1, 9)[:, None] <= np.arange(5)[None, :] + 1] == 1.0)
    assert np.all(np.diff(P, axis=0) <= 0) and np.all(np.diff(P, axis=1) >= 0)
    with pytest.raises(InputTypeError, match="n_points"):
        dg.wendel_probability(2.5, 1)
    with pytest.raises(ValidationError, match="dim"):
        dg.wendel_probability(3, -1)


def test_wendel_errors_show_the_value_as_passed():
    """The message shows -1, not NumPy's repr np.int64(-1)."""
    with pytest.raises(ValidationError) as err:
        dg.wendel_probability(-1, 2)
    assert str(err.value) == "n_points must be >= 1, got -1."
    with pytest.raises(ValidationError) as err:
        dg.wendel_probability(3, np.int32(-1))
    assert str(err.value) == "dim must be >= 0, got -1."
    with pytest.raises(ValidationError) as err:
        dg.wendel_probability([3, -2, -5], 1)
    assert str(err.value) == "n_points must be >= 1, got -5 (its smallest entry)."


# ----------------------------------------------------------------------------------------------
# common hemisphere
# ----------------------------------------------------------------------------------------------
def test_fast_decision_agrees_with_pure_lp():
    rng = np.random.default_rng(1)
    for d, n in [(2, 3), (3, 5), (3, 8), (4, 6), (5, 8), (3, 2), (6, 12)]:
        y = rng.standard_normal((150, n, d))
        # degenerate members: antipodal pair, repeated token, tokens on a great circle
        y[0, 1] = -y[0, 0]
        y[1, 1] = y[1, 0]
        y[2, :, -1] = 0.0
        assert np.array_equal(dg.in_common_hemisphere(y), dg.in_common_hemisphere(y, method="lp"))


def test_common_hemisphere_known_cases():
    v, m = dg.common_hemisphere(np.eye(3), return_margin=True)
    np.testing.assert_allclose(v, np.ones(3) / np.sqrt(3), atol=1e-12)
    assert abs(m - 1 / np.sqrt(3)) < 1e-12
    assert dg.common_hemisphere(np.array([[1.0, 0.0], [-1.0, 0.0]])) is None  # closed, not open
    circle = np.stack([np.cos(np.linspace(0, 2 * np.pi, 7)[:-1]), np.sin(np.linspace(0, 2 * np.pi, 7)[:-1])], 1)
    assert dg.common_hemisphere(circle) is None
    # one token: v = its direction; tokens off the unit sphere: only directions matter
    np.testing.assert_allclose(dg.common_hemisphere(np.array([[0.0, 3.0]])), [0.0, 1.0])


def test_common_hemisphere_margin_is_maximal_and_batched():
    rng = np.random.default_rng(7)
    y = rng.standard_normal((40, 5, 3))
    y[:, :, 0] = np.abs(y[:, :, 0]) + 0.05 * np.arange(40)[:, None]  # many feasible ones
    V, m = dg.common_hemisphere(y, return_margin=True)
    assert V.shape == (40, 3) and m.shape == (40,)
    feas = dg.in_common_hemisphere(y)
    assert np.array_equal(~np.isnan(V[:, 0]), feas) and np.array_equal(~np.isnan(m), feas)
    u = y / np.linalg.norm(y, axis=-1, keepdims=True)
    np.testing.assert_allclose(np.linalg.norm(V[feas], axis=-1), 1.0, atol=1e-12)
    np.testing.assert_allclose(np.min(np.einsum("bld,bd->bl", u[feas], V[feas]), -1), m[feas], atol=1e-14)
    assert np.all(m[feas] > 0)
    # no direction among 20 000 random ones (plus small perturbations of v) has a larger margin
    dirs = rng.standard_normal((20_000, 3))
    dirs /= np.linalg.norm(dirs, axis=-1, keepdims=True)
    for b in np.flatnonzero(feas)[:10]:
        near = V[b] + 1e-3 * dirs[:2000]
        near /= np.linalg.norm(near, axis=-1, keepdims=True)
        cand = np.concatenate([dirs, near])
        assert np.max(np.min(cand @ u[b].T, axis=-1)) <= m[b] + 1e-12
    # a (2, 3, l, d) batch keeps its leading axes
    assert dg.common_hemisphere(rng.standard_normal((2, 3, 4, 3))).shape == (2, 3, 3)


def test_common_hemisphere_validation():
    with pytest.raises(ValidationError, match="zero token"):
        dg.common_hemisphere(np.array([[0.0, 0.0], [1.0, 0.0]]))
    with pytest.raises(ValidationError, match="shape"):
        dg.common_hemisphere(np.ones(3))
    with pytest.raises(ValidationError, match="NaN"):
        dg.in_common_hemisphere(np.array([[np.nan, 1.0]]))
    with pytest.raises(ValidationError, match="method"):
        dg.in_common_hemisphere(np.eye(2), method="simplex")
    with pytest.raises(ValidationError, match="tol"):
        dg.in_common_hemisphere(np.eye(2), tol=-1.0)


# ----------------------------------------------------------------------------------------------
# clusters, consensus, equilibria, Lyapunov functions
# ----------------------------------------------------------------------------------------------
def test_cluster_count():
    rng = np.random.default_rng(2)
    centers = np.eye(4)[:3]  # pairwise distance sqrt(2)
    y = np.repeat(centers, 4, axis=0) + 1e-3 * rng.standard_normal((12, 4))
    y = y[rng.permutation(12)]
    assert dg.cluster_count(y, 0.05) == 3
    assert dg.cluster_count(y, 2.0) == 1
    assert dg.cluster_count(y, 0.0) == 12
    # single linkage: a chain of points 0.1 apart is one cluster at tol 0.15, all separate at 0.05
    chain = np.stack([np.linspace(0, 1, 11), np.zeros(11)], 1)[rng.permutation(11)]
    assert dg.cluster_count(chain, 0.15) == 1 and dg.cluster_count(chain, 0.05) == 11
    batch = np.stack([y, np.repeat(centers[:1], 12, axis=0)])
    np.testing.assert_array_equal(dg.cluster_count(batch, 0.05), [3, 1])


def test_consensus_and_equilibrium():
    rng = np.random.default_rng(3)
    x = rng.standard_normal(4)
    x /= np.linalg.norm(x)
    cons = np.tile(x, (5, 1))
    field = ra.AttentionField(np.eye(4))
    assert dg.is_consensus(cons) and dg.consensus_distance(cons) == 0.0
    assert dg.is_equilibrium(field, 0.0, cons)
    # (x, -x, x): an equilibrium of the U = I field that is not consensus
    anti = np.stack([x, -x, x])
    assert dg.is_equilibrium(field, 0.0, anti, tol=1e-14) and not dg.is_consensus(anti)
    generic = rng.standard_normal((2, 5, 4))
    generic /= np.linalg.norm(generic, axis=-1, keepdims=True)
    assert not np.any(dg.is_equilibrium(field, 0.0, generic)) and dg.is_equilibrium(field, 0.0, generic).shape == (2,)
    np.testing.assert_allclose(dg.field_norm(field, 0.0, generic),
                               np.max(np.linalg.norm(field(0.0, generic), axis=-1), -1))
    with pytest.raises(InputTypeError, match="field"):
        dg.field_norm(3, 0.0, cons)


def test_lyapunov_functions():
    y = np.array([[[1.0, 0.0], [0.0, 1.0]], [[0.6, 0.8], [0.8, 0.6]]])
    v = np.array([1.0, 0.0])
    np.testing.assert_allclose(dg.hemisphere_lyapunov(y, v), [1.0, 0.4])
    np.testing.assert_allclose(dg.token_lyapunov(y, v), [[0.0, 1.0], [0.4, 0.2]])
    with pytest.raises(ValidationError, match="v"):
        dg.token_lyapunov(y, np.ones(3))
