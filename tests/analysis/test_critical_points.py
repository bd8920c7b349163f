"""Critical points of E_beta: closed forms on the circle, the search, the certificate, deduplication.

Closed form (derived by hand in angles, independent of the extrinsic code): on the circle
E_beta(theta) = 1/(2 beta n^2) sum_{i,j} exp(beta cos(theta_i - theta_j)) and the round-metric Hessian
is H = L / n^2 with L the Laplacian with edge weights w(phi) = e^{beta cos phi}(beta sin^2 phi - cos phi),
phi = theta_i - theta_j. For k equally spaced clusters of q tokens (n = k q; k = n: the regular n-gon)
the cluster-circulant structure gives the eigenvalues

    (q/n^2) sum_{j=1}^{k-1} w(2 pi j/k) (1 - cos(2 pi j m/k)),   m = 0..k-1   (m = 0: the rotation)
    (q/n^2) sum_{j=0}^{k-1} w(2 pi j/k),                          multiplicity k (q - 1) (splitting a cluster).

For USA (weights 1/n) multiply by n; for SA (weights Z/n^2, Z = q sum_j e^{beta cos(2 pi j/k)}) by n^2/Z.
"""

from __future__ import annotations

import numpy as np
import pytest

from riemattn.analysis.critical_points import (
    certify,
    circle_cluster_spectrum,
    clusters,
    deduplicate,
    invariants,
    k_clusters,
    newton_search,
    regular_simplex,
    search,
    structured_starts,
)
from riemattn.analysis.hessians import energy_hessian
from riemattn.errors import ValidationError


def w(phi, beta):
    return np.exp(beta * np.cos(phi)) * (beta * np.sin(phi) ** 2 - np.cos(phi))


def closed_form(n, k, beta, drop_rotation=False):
    q = n // k
    phis = 2 * np.pi * np.arange(k) / k
    lam = [q / n**2 * sum(w(phis[j], beta) * (1 - np.cos(2 * np.pi * j * m / k)) for j in range(1, k))
           for m in range(1 if drop_rotation else 0, k)]
    lam += [q / n**2 * sum(w(p, beta) for p in phis)] * (k * (q - 1))
    return np.sort(lam)


CLUSTERS = [(4, 1), (4, 2), (4, 4), (6, 2), (6, 3), (6, 6), (5, 5), (8, 4)]


@pytest.mark.parametrize("n,k", CLUSTERS)
@pytest.mark.parametrize("beta", [0.4, 3.0])
def test_equally_spaced_clusters_are_critical_with_closed_form_spectrum(n, k, beta):
    x = k_clusters(n, 2, k)
    ref = closed_form(n, k, beta)
    H = energy_hessian(x, beta, "standard")
    scale = np.max(np.abs(ref))
    assert np.linalg.norm(H.grad) <= 1e-14 * scale
    assert np.max(np.abs(np.linalg.eigvalsh(H.matrix()[0]) - ref)) <= 1e-8 * scale
    # USA (c = 1/n) and SA (c = Z/n^2): the same bilinear form relative to the scaled metrics
    usa = np.linalg.eigvalsh(energy_hessian(x, beta, "usa").matrix()[0])
    assert np.max(np.abs(usa - n * ref)) <= 1e-8 * n * scale
    Z = (n // k) * np.sum(np.exp(beta * np.cos(2 * np.pi * np.arange(k) / k)))
    sa = np.linalg.eigvalsh(energy_hessian(x, beta, "sa").matrix()[0])
    assert np.max(np.abs(sa - n**2 / Z * ref)) <= 1e-8 * n**2 / Z * scale


@pytest.mark.parametrize("n,beta,n_random", [(4, 1.0, 48), (5, 2.0, 48), (6, 2.0, 300)])
def test_random_starts_find_the_closed_form_configurations(n, beta, n_random):
    """No structured start: random, ascended-random and random-clustering starts only."""
    points, stats = search(n, 2, beta, n_random=n_random, seed=1, structured=False)
    assert stats["n_converged"] >= 0.9 * stats["n_starts"]
    found = np.array([p.invariants for p in points])
    for k in [k for k in range(1, n + 1) if n % k == 0]:
        x = k_clusters(n, 2, k)
        hit = np.flatnonzero(np.max(np.abs(found - invariants(x)), axis=1) <= 1e-6)
        assert hit.size == 1, (n, k)
        p = points[hit[0]]
        ref = closed_form(n, k, beta, drop_rotation=True)
        assert p.n_symmetry == 1
        assert np.max(np.abs(p.eigenvalues - ref)) <= 1e-8 * np.max(np.abs(ref))
        assert p.index == int(np.sum(ref > 0)) and p.n_clusters == k


def test_consensus_is_the_only_local_maximum_where_glpr_prove_it():
    """d = 3 (GLPR Theorem 6.1, every beta) and the circle at beta = n^2, the order of Theorem 5.1's
    threshold (n = 3, so that the saddles' positive eigenvalues, ~e^{-2 beta} relative to the largest,
    are resolved)."""
    for n, d, beta in [(4, 3, 1.0), (5, 3, 6.0), (3, 2, 9.0)]:
        points, _ = search(n, d, beta, n_random=32, seed=2)
        assert points[0].is_consensus and points[0].index == 0
        for p in points[1:]:
            assert p.n_zero == 0 and p.index > 0, (n, d, beta, p.shape)


def test_newton_converges_superlinearly_to_a_saddle():
    """The damped steps (mu / 10 per accepted step) converge superlinearly: each step's contraction
    |g_{k+1}| / |g_k| is smaller than the last, and 4 steps reach the rounding floor. (Until issue 58
    each call here continued from where the previous one left ``y``, newton_search having
    overwritten it: that sequence, 2e-4, 3e-7, 1e-12, 1e-20, looked quadratic. From the same start
    the iterates are 2.1e-4, 3.4e-7, 1.7e-10, 9.5e-15, 4.3e-20: contractions 1.6e-3, 5.2e-4, 5.5e-5.)"""
    n, beta = 4, 1.0
    x = k_clusters(n, 2, 2)
    rng = np.random.default_rng(0)
    y = x + 1e-3 * rng.standard_normal(x.shape)
    y /= np.linalg.norm(y, axis=-1, keepdims=True)
    y0 = y.copy()
    norms = [float(newton_search(y, beta, max_iter=it, gtol=1e-300)[1]) for it in range(5)]
    assert np.array_equal(y, y0)  # the start is not overwritten (issue 58)
    ratios = [b / a for a, b in zip(norms, norms[1:4])]
    assert ratios[0] > ratios[1] > ratios[2] and ratios[0] < 1e-2 and norms[4] < 1e-18, norms
    z, _, ok = newton_search(y, beta)
    assert ok and np.max(np.abs(invariants(z) - invariants(x))) < 1e-8


def test_certificate_clusters_and_deduplication_modulo_symmetry():
    rng = np.random.default_rng(3)
    x = k_clusters(6, 3, 3)
    Q, _ = np.linalg.qr(rng.standard_normal((3, 3)))
    y = (x @ Q.T)[rng.permutation(6)]
    p, q = certify(x, 2.0), certify(y, 2.0)
    assert p.shape == "2+2+2" and p.n_clusters == 3 and p.n_symmetry == 3
    assert np.isclose(p.energy, q.energy) and p.index == q.index
    merged = deduplicate([p, q, certify(k_clusters(6, 3, 2), 2.0)])
    assert len(merged) == 2 and merged[1].hits == 2
    assert list(clusters(np.array([[1.0, 0], [1.0, 0], [0, 1.0]]))) == [0, 0, 1]
    s = regular_simplex(4, 3)
    assert np.allclose(s @ s.T, np.where(np.eye(4) > 0, 1.0, -1 / 3))
    assert structured_starts(6, 3).shape[1:] == (6, 3)


def test_bad_input():
    with pytest.raises(ValidationError, match="sizes"):
        k_clusters(4, 2, 2, sizes=[1, 2])
    with pytest.raises(ValidationError, match="simplex"):
        regular_simplex(5, 3)
    with pytest.raises(ValidationError, match="x0"):
        newton_search(np.ones((3, 2)), 1.0)
    with pytest.raises(ValidationError, match="n"):
        search(0, 2, 1.0)


# ---------------------------------------------------------------------------------------------
# rescaled: e^{-beta} E_beta (issue 35 item 1)
def closed_form_rescaled(n, k, beta):
    """e^{-beta} x closed_form (drop the rotation), with the weights written as
    e^{beta (cos phi - 1)} (beta sin^2 phi - cos phi) -- this test's own formula, finite at every beta."""
    q = n // k
    phis = 2 * np.pi * np.arange(k) / k
    with np.errstate(over="ignore"):
        wr = np.exp(beta * (np.cos(phis) - 1.0)) * (beta * np.sin(phis) ** 2 - np.cos(phis))
    lam = [q / n**2 * sum(wr[j] * (1 - np.cos(2 * np.pi * j * m / k)) for j in range(1, k)) for m in range(1, k)]
    return np.sort(lam + [q / n**2 * wr.sum()] * (k * (q - 1)))


@pytest.mark.parametrize("n,k,d", [(6, 3, 2), (6, 2, 3), (4, 4, 2), (5, 1, 3)])
def test_rescaled_certificate_is_exp_minus_beta_times_plain(n, k, d):
    """At beta = 5 every rescaled quantity is e^{-beta} times the plain one: the spectrum of the
    same Hessian computed twice (rescaled vs plain kernel), closed forms, and the energy."""
    beta = 5.0
    x = k_clusters(n, d, k) + 1e-3 * np.random.default_rng(n).standard_normal((n, d))
    x /= np.linalg.norm(x, axis=-1, keepdims=True)
    x = newton_search(x, beta)[0]
    p, r = certify(x, beta), certify(x, beta, rescaled=True)
    e = np.exp(-beta)
    assert r.rescaled and not p.rescaled and (r.index, r.n_zero, r.shape) == (p.index, p.n_zero, p.shape)
    scale = np.max(np.abs(p.eigenvalues))
    assert np.max(np.abs(r.eigenvalues - e * p.eigenvalues)) <= 1e-12 * e * scale
    assert abs(r.energy - e * p.energy) <= 1e-12 * e * p.energy
    # the Hessian itself: rescaled kernel vs plain kernel, independent computations
    Mr = energy_hessian(x, beta, "standard", rescaled=True).matrix()[0]
    Mp = energy_hessian(x, beta, "standard").matrix()[0]
    assert np.max(np.abs(Mr - e * Mp)) <= 1e-12 * e * scale
    # closed forms, where x is k equal clusters on the circle
    if d == 2 and n % k == 0:
        ref = closed_form(n, k, beta, drop_rotation=True)
        assert np.max(np.abs(circle_cluster_spectrum(n, k, beta, rescaled=True)[-len(ref):] - e * ref)) \
            <= 1e-12 * e * np.max(np.abs(ref))


@pytest.mark.parametrize("beta", [800.0, 1e5, 1e300])
def test_rescaled_tools_are_finite_and_exact_at_any_beta(beta):
    """k equal clusters (exactly coincident tokens) on the circle, rotated in R^3: the certificate at
    beta = 800, 1e5, 1e300 equals this test's closed form of the rescaled spectrum (the splitting
    eigenvalue -q/n^2 and eigenvalues e^{-beta (1 - cos phi)} ~ 0). Before the difference form of
    the Hessian's beta term the computed spectrum at 1e300 was of size 1e266."""
    n, k = 6, 3
    Q, _ = np.linalg.qr(np.random.default_rng(0).standard_normal((3, 3)))
    x = k_clusters(n, 3, k) @ Q.T
    p = certify(x, beta, rescaled=True)
    ref = closed_form_rescaled(n, k, beta)
    # on S^2 the splitting of a cluster has 2 directions per token (the closed form: 1 on the circle)
    assert np.all(np.isfinite(p.eigenvalues)) and p.shape == "2+2+2"
    assert np.max(np.abs(p.eigenvalues[:2 * k * (n // k - 1)] - ref[0])) <= 1e-14
    assert np.max(np.abs(p.eigenvalues[2 * k * (n // k - 1):])) <= 1e-14 and p.grad_norm <= 1e-14
    got = circle_cluster_spectrum(n, k, beta, rescaled=True)
    assert np.all(np.isfinite(got)) and np.max(np.abs(got - ref)) <= 1e-15
    z, gn, ok = newton_search(x, beta, rescaled=True)
    # a critical point already: only the polishing steps (moves at the rounding of the gradient) act
    assert ok and np.isfinite(gn) and gn <= 1e-14 and np.max(np.abs(z - x)) <= 1e-13
    points, stats = search(3, 2, beta, n_random=6, seed=0, rescaled=True)
    assert stats["n_converged"] > 0 and all(np.isfinite(q.energy) and np.isfinite(q.eigenvalues).all() for q in points)


def test_plain_beyond_the_float_range_names_beta():
    x = k_clusters(4, 2, 2)
    for call in (lambda: certify(x, 800.0), lambda: newton_search(x, 800.0), lambda: search(3, 2, 800.0),
                 lambda: circle_cluster_spectrum(4, 2, 800.0)):
        with pytest.raises(ValidationError, match="beta = 800.*rescaled=True"):
            call()


def test_rescaled_search_finds_the_plain_points():
    """The search runs on the rescaled energy either way: rescaled and plain give the same points,
    energies e^{-beta} apart."""
    beta = 4.0
    pp, _ = search(4, 2, beta, n_random=12, seed=5)
    pr, _ = search(4, 2, beta, n_random=12, seed=5, rescaled=True)
    assert [q.shape for q in pp] == [q.shape for q in pr] and [q.index for q in pp] == [q.index for q in pr]
    e = np.exp(-beta)
    assert np.allclose([q.energy * e for q in pp], [q.energy for q in pr], rtol=1e-12, atol=0)
