"""The public low-temperature reduction (riemattn.analysis.weighted_clusters) against a scalar
quadrature (two clusters) and the full n-particle circle system run with merge events."""

import numpy as np
import pytest
from scipy.integrate import quad

import riemattn as ra
from riemattn.analysis.events import cluster_merges
from riemattn.analysis.weighted_clusters import cluster_staircase, normalised_energy
from riemattn.dynamics.circle import CircleField


def two_cluster_time(beta, gap, W, n, tol):
    """s = (n / W) int_tol^gap e^{beta (1 - cos u)} / sin u du: the gap of two point clusters
    obeys d delta / ds = -(W / n) e^{beta (cos delta - 1)} sin delta."""
    val, _ = quad(lambda u: np.exp(beta * (1 - np.cos(u))) / np.sin(u), tol, gap, limit=200, epsabs=0, epsrel=1e-12)
    return n / W * val


@pytest.mark.parametrize("weights", [None, (2.0, 1.0), (1.0, 3.5)])
def test_two_clusters_merge_at_the_quadrature_time(weights):
    beta, gap, tol = 40.0, 0.3, 1e-6
    merges, path = cluster_staircase([0.1, 0.1 + gap], beta, tol=tol, weights=weights)
    w = (1.0, 1.0) if weights is None else weights
    assert len(merges) == 1 and (merges[0]["w_a"], merges[0]["w_b"]) == w
    expect = two_cluster_time(beta, gap, sum(w), sum(w), tol)
    # dopri5 at rtol 1e-10 in sigma, the event located to 1e-12 in sigma: measured 2.4e-7 relative
    # in s (8e-8 at rtol 1e-12, so the integration, not the reduction, sets it)
    assert merges[0]["s"] == pytest.approx(expect, rel=1e-6)
    # the energy before the merge is the two-cluster plateau sum w^2 / n^2 plus the cross term
    cross = 2 * w[0] * w[1] * np.exp(beta * (np.cos(tol) - 1)) / sum(w) ** 2
    assert merges[0]["energy"] == pytest.approx((w[0] ** 2 + w[1] ** 2) / sum(w) ** 2 + cross, rel=1e-9)
    assert np.all(np.diff(path["s"]) >= 0) and np.all(np.diff(path["energy"]) >= -1e-15)


def test_merges_match_the_full_particle_system():
    # two pairs (gaps 0.02, 0.03) collapse long before the pairs meet (gap ~0.5, s ~ 1e2) and the
    # last particle joins (s ~ 8e6): the regime of the reduction, where merged pairs are points
    beta, tol = 100.0, 1e-4
    theta0 = np.array([0.0, 0.02, 0.5, 0.53, 0.9])
    merges, _ = cluster_staircase(theta0, beta, tol=tol)
    s = np.array([m["s"] for m in merges])
    field = CircleField(beta, "usa", rescaled=True)
    sol = ra.integrate(field, theta0[:, None], (0.0, 10 * s[-1]), "rodas4p", rtol=1e-10, atol=1e-13,
                       event_tol=1e-10 * s[0], events=cluster_merges(tol, [4, 3, 2, 1], terminal_at=1))
    full = np.asarray(sol.events.t)
    assert full.shape == (4,) and s[-1] > 1e6
    # measured 2.5e-8 relative (both solves at rtol 1e-10; merged pairs within tol * e^{-s w/n})
    np.testing.assert_allclose(s, full, rtol=1e-6)


def test_gaps_closing_together_merge_at_once():
    merges, _ = cluster_staircase([0.0, 0.02, 0.5, 0.52], 100.0, tol=1e-4)  # two equal gaps
    assert len(merges) == 3 and merges[1]["s"] == pytest.approx(merges[0]["s"], rel=1e-6)  # (raised before)


def test_normalised_energy_levels():
    w = np.array([2.0, 3.0])
    # far apart (cross term e^{-2 beta}) the energy is the plateau sum w^2 / n^2; coincident, 1
    assert normalised_energy(np.array([0.0, np.pi]), w, 50.0, 5) == pytest.approx(13 / 25, rel=1e-12)
    assert normalised_energy(np.array([0.3, 0.3]), w, 50.0, 5) == pytest.approx(1.0, rel=1e-15)


@pytest.mark.parametrize("kwargs,match", [
    (dict(theta0=[0.0]), "theta0"), (dict(theta0=[0.0, np.nan]), "theta0"), (dict(beta=0.0), "beta"),
    (dict(tol=-1.0), "tol"), (dict(weights=[1.0, 0.0]), "weights"), (dict(weights=[1.0]), "weights"),
])
def test_bad_arguments_are_named(kwargs, match):
    args = dict(theta0=[0.0, 0.1], beta=10.0) | kwargs
    with pytest.raises(ra.errors.ValidationError, match=match):
        cluster_staircase(args.pop("theta0"), args.pop("beta"), **args)
