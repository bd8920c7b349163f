"""The private pieces of the causal-clusters reproduction against independent computations."""

import numpy as np
import pytest
from scipy.integrate import solve_ivp

import riemattn as ra
from riemattn.analysis.events import merge_heights
from riemattn.dynamics.circle import CircleField, to_points
from riemattn.experiments import get
from riemattn.experiments._causal import circle_merge_heights, leader_merge_time, renyi_centres, solve_restarting


def test_renyi_centres_by_hand():
    theta = np.array([0.0, 0.1, 1.0, 0.55, 2.0, 1.45])
    # delta = 0.5: centres 0, 1.0 (far from 0), 0.55 (0.55 from 0 and 0.45 from 1.0: no), 2.0; 1.45 is
    # 0.45 from 1.0: no
    assert renyi_centres(theta, 0.5) == [0, 2, 4]
    # strong: also 0.1 blocks nothing new; 1.0 is 0.9 from every earlier token: yes; 2.0 yes
    assert renyi_centres(theta, 0.5, strong=True) == [0, 2, 4]
    # token 3 (0.55) is 0.55 from centre 0 and 0.45 from centre 2 -> not a centre; at delta 0.4 it is,
    # but not a strong one (0.45 from token 1 at 0.1 ... > 0.4; 0.45 from token 2 > 0.4): strong too
    assert renyi_centres(theta, 0.4) == [0, 2, 3, 4, 5]
    # wrap-around: -3.1 and 3.1 are 0.083 apart on the circle
    assert renyi_centres(np.array([3.1, -3.1]), 0.5) == [0]
    strong = renyi_centres(np.random.default_rng(0).uniform(-np.pi, np.pi, 200), 0.5, strong=True)
    assert set(strong) <= set(renyi_centres(np.random.default_rng(0).uniform(-np.pi, np.pi, 200), 0.5))


def test_circle_merge_heights_equal_the_minimum_spanning_tree_ones():
    rng = np.random.default_rng(1)
    theta = rng.uniform(-10.0, 10.0, (6, 40))
    theta[:, 5] = theta[:, 9]  # coincident tokens
    theta[0] = rng.uniform(0.0, 1.0, 40)  # all in a short arc (one gap > pi)
    # merge_heights goes through |a|^2 + |b|^2 - 2 a.b: absolute error ~ sqrt(eps) for tiny heights
    np.testing.assert_allclose(circle_merge_heights(theta), merge_heights(to_points(theta)), atol=1e-7)


def test_leader_quadrature_equals_the_scalar_ode_solved_by_scipy():
    """Two collapsed clusters: the quadrature vs Radau on the leader ODE, and vs the n-token solve (B a
    lone leader here: later members of B, which also see A, arrive O(1) time units before it)."""
    beta, tol, m = 16.0, 0.05, 3
    theta = np.array([0.0] * m + [1.2])  # A: 3 tokens at 0; B: its leader at 1.2 (index 3)
    T, L, phi = leader_merge_time(theta, beta, tol)
    assert (L, phi) == (3, pytest.approx(1.2))

    def rhs(t, p):
        e = m * np.exp(-beta * (1.0 - np.cos(p)))
        return -e * np.sin(p) / (e + 1.0)

    hit = lambda t, p: p[0] - 2.0 * np.arcsin(tol / 2.0)  # noqa: E731
    hit.terminal = True
    ref = solve_ivp(rhs, (0.0, 10 * T), [phi], method="Radau", rtol=1e-12, atol=1e-14, events=hit)
    assert ref.t_events[0][0] == pytest.approx(T, rel=1e-7)
    # the 4-token causal solve (merge events on the circle) merges at that time
    out, merges, _ = solve_restarting(CircleField(beta, mask="causal"), theta, np.array([0.0, 10 * T]),
                                      stepper="rodas4p", rtol=1e-9, atol=1e-12, tol=tol, counts=[1])
    assert merges[1][0] == pytest.approx(T, rel=1e-5)
    assert np.max(np.abs(out[-1])) < 1e-8  # consensus at theta_1(0) = 0


def test_restarts_reach_merges_beyond_float64_time_resolution():
    """A merge at t ~ 4e18 (beta = 64, gap 1.3 rad) is resolved by restarting in local time (a plain
    solve stops with a step-size underflow there)."""
    beta, tol = 64.0, 0.05
    theta = np.array([0.0, 1.3])
    T, _, _ = leader_merge_time(theta, beta, tol)
    assert T > 1e18
    t_save = np.array([0.0, 1e3 * T])
    plain = ra.integrate(CircleField(beta, mask="causal"), theta[None, :, None], (0.0, t_save[-1]), "rodas4p",
                         rtol=1e-8, atol=1e-12)
    assert plain.per_trajectory.status[0] == -2  # underflow
    out, merges, stats = solve_restarting(CircleField(beta, mask="causal"), theta, t_save, stepper="rodas4p",
                                          rtol=1e-8, atol=1e-12, tol=tol, counts=[1])
    assert stats["segments"] >= 2 and stats["status"] == 0
    assert merges[1][0] == pytest.approx(T, rel=1e-4)
    assert abs(out[-1, 0]) <= 1e-15 and abs(out[-1, 1]) < 1e-8  # token 1: rounding of the linear solves only


def test_causal_clusters_claims_can_fail():
    m = get("causal-clusters")
    import xarray as xr

    t = np.array([0.0, 10.0, 30.0, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9])
    c = np.array([40, 12, 9, 9, 5, 5, 3, 3, 1, 1])  # levels 9, 5, 3, 1, each over a decade
    theta = np.zeros((10, 1, 3))
    ds = xr.Dataset(
        {"theta": (("t_save", "configuration", "token"), theta), "clusters": (("t_save", "configuration"), c[:, None]),
         "distance_to_x1": (("t_save", "configuration"), np.zeros((10, 1))),
         "merge_time": (("configuration", "count"), [[1e8, 1e6]]), "leader_time": (("configuration",), [1e8]),
         "renyi": (("renyi_configuration",), [9, 9, 8]), "strong_renyi": (("renyi_configuration",), [6, 6, 6]),
         "clusters_at": (("count_time", "renyi_configuration"), [[40, 40, 40], [9, 8, 8]])},
        coords={"t_save": t, "count": [1, 2], "count_time": [0.0, 30.0]},
        attrs={"t1": 1e9, "t_early": 30.0, "delta": 0.5, "sphere_token1_drift": 0.0, "sphere_vs_angles": 0.0,
               "sphere_check_t": 30.0, "n": 3, "beta": 64.0})
    assert all(v["passed"] for v in m.claims(ds).values() if v["kind"] == "paper")
    bad = ds.copy(deep=True)
    bad["clusters"][4, 0] = 10  # the count goes up after t_early
    assert not m.claims(bad)["staircase"]["passed"]
    bad = ds.copy(deep=True)
    bad["clusters_at"][1] = [5, 5, 5]  # 4 fewer clusters than Rényi centres
    assert not m.claims(bad)["early_clusters_match_renyi_centres"]["passed"]
    bad = ds.copy(deep=True)
    bad["theta"][3, 0, 0] = 1e-9  # token 1 moved
    assert not m.claims(bad)["first_token_fixed"]["passed"]
    bad = ds.copy(deep=True)
    bad["leader_time"][0] = 1.01e8
    assert not m.claims(bad)["final_merge_matches_leader_ode"]["passed"]
    bad = ds.copy(deep=True)
    bad["distance_to_x1"][-1, 0] = 1e-3
    assert not m.claims(bad)["consensus_at_first_token"]["passed"]
