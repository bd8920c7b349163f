"""Tests of riemattn.analysis.theory against independent references.

* the equiangular ODE against the particle simulation of SA / USA from pairwise orthogonal points
  (Issue 5: to 1e-8 at t = 1, 5, 10 for beta in {0.5, 2, 5});
* its right-hand side against d/dt <x_1, x_2> computed from the attention field at equiangular
  configurations (a check of the derivation for every rho, not only along one solution);
* the closed form at beta = 0; the quadrature clustering time; the phase boundary's defining property;
* Theorem 4.5's consensus points against the eigen-equation.
"""

import re

import numpy as np
import pytest

import riemattn as ra
from riemattn import theory as th
from riemattn.errors import InputTypeError, ValidationError


def _orthonormal_rows(n, d, seed):
    q, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((d, n)))
    return q.T  # (n, d), pairwise orthogonal unit rows


@pytest.mark.parametrize("model", ["sa", "usa"])
@pytest.mark.parametrize("beta", [0.5, 2.0, 5.0])
def test_equiangular_rho_matches_particle_simulation(model, beta):
    n, d = 4, 6
    field = (ra.sa if model == "sa" else ra.usa)(beta, d)
    y0 = _orthonormal_rows(n, d, seed=int(10 * beta))
    # RK4 with dt = 5e-3: halving dt from 1e-2 reduces the error 16x (measured), and the remaining
    # discretization error is < 1e-9 for all six cases.
    sol = ra.integrate(field, y0, (0.0, 10.0), stepper="rk4", dt=5e-3, saveat=[1.0, 5.0, 10.0])
    G = sol.y @ np.swapaxes(sol.y, -1, -2)
    iu = np.triu_indices(n, 1)
    rho_sim = G[:, iu[0], iu[1]]  # (3, n(n-1)/2): all pairs
    rho = th.equiangular_rho(np.array([1.0, 5.0, 10.0]), beta, n, model)
    assert np.max(np.abs(rho_sim - rho[:, None])) < 1e-8


def _equiangular_config(rho, n, d, seed=0):
    """n unit vectors in R^d with all pairwise inner products rho (Cholesky of the Gram matrix)."""
    G = np.full((n, n), rho) + (1 - rho) * np.eye(n)
    L = np.linalg.cholesky(G)  # rows of L realise G
    Q, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((d, n)))
    return L @ Q.T


def field_update(model, beta, d, x):
    return (ra.sa if model == "sa" else ra.usa)(beta, d).update(0.0, x)


@pytest.mark.parametrize("model", ["sa", "usa"])
@pytest.mark.parametrize("n", [2, 3, 5])
def test_rate_equals_derivative_of_inner_product_from_the_field(model, n):
    d = n + 1
    for beta in (0.0, 0.7, 3.0, 9.0):
        for rho in (-0.9 / (n - 1), -0.1, 0.0, 0.3, 0.8, 0.999):
            x = _equiangular_config(rho, n, d, seed=n)
            F = (ra.sa if model == "sa" else ra.usa)(beta, d)(0.0, x)
            # d/dt <x_i, x_j> = <F_i, x_j> + <x_i, F_j> for every pair
            D = F @ x.T + x @ F.T
            off = D[~np.eye(n, dtype=bool)]
            expected = th.equiangular_rate(rho, beta, n, model)
            # rounding of F = f - <x, f> x is relative to the update |f| (~ e^beta for USA)
            scale = np.max(np.abs(field_update(model, beta, d, x)))
            np.testing.assert_allclose(off, expected, rtol=1e-12, atol=1e-14 * scale)


@pytest.mark.parametrize("model", ["sa", "usa"])
@pytest.mark.parametrize("n", [2, 4, 32])
def test_beta_zero_closed_form(model, n):
    # beta = 0: rho' = (2/n)(1 - rho)(1 + (n-1) rho)  =>  rho = (e^{2t} - 1) / (e^{2t} + n - 1)
    t = np.array([[0.0, 0.1, 0.5], [1.0, 3.0, 7.0]])
    exact = np.expm1(2 * t) / (np.exp(2 * t) + n - 1)
    np.testing.assert_allclose(th.equiangular_rho(t, 0.0, n, model), exact, rtol=0, atol=1e-10)


def test_rho_shape_scalar_and_monotone():
    assert isinstance(th.equiangular_rho(2.0, 1.0, 3), float)
    assert th.equiangular_rho(0.0, 1.0, 3) == 0.0
    t = np.linspace(0, 20, 41)[::-1]  # unsorted input is fine
    r = th.equiangular_rho(t, 3.0, 8, "sa")
    assert r.shape == t.shape
    assert np.all(np.diff(r[::-1]) > 0) and r[0] < 1.0
    # SA is slower for larger beta, USA faster (the monotonicity phase_boundary relies on)
    assert th.equiangular_rho(5.0, 1.0, 8, "sa") > th.equiangular_rho(5.0, 4.0, 8, "sa")
    assert th.equiangular_rho(1.0, 1.0, 8, "usa") < th.equiangular_rho(1.0, 4.0, 8, "usa")


@pytest.mark.parametrize("model", ["sa", "usa"])
def test_clustering_time_is_hitting_time(model):
    eps = 1e-3
    for beta in (0.0, 1.5, 6.0):
        T = th.clustering_time(beta, 16, eps, model)
        assert abs(th.equiangular_rho(T, beta, 16, model) - (1 - eps)) < 1e-9


def test_phase_boundary_sa_defining_property():
    n, eps = 32, 1e-3
    t = np.array([6.0, 10.0, 20.0, 30.0])
    b = th.phase_boundary(t, n, eps)
    assert b.shape == t.shape and np.all(np.isfinite(b)) and np.all(np.diff(b) > 0)
    for tk, bk in zip(t, b):
        assert abs(th.equiangular_rho(tk, bk, n) - (1 - eps)) < 1e-9
        assert th.equiangular_rho(tk, 0.98 * bk, n) > 1 - eps > th.equiangular_rho(tk, 1.02 * bk, n)
    # before beta = 0 clusters there is no admissible beta
    T0 = th.clustering_time(0.0, n, eps)
    assert np.isnan(th.phase_boundary(0.9 * T0, n, eps))


def test_phase_boundary_usa_is_lower_boundary():
    n, eps = 8, 1e-3
    t = np.array([0.5, 1.0, 2.0])
    b = th.phase_boundary(t, n, eps, model="usa")
    for tk, bk in zip(t, b):
        assert abs(th.equiangular_rho(tk, bk, n, "usa") - (1 - eps)) < 1e-9
        assert th.equiangular_rho(tk, 1.02 * bk, n, "usa") > 1 - eps
    assert th.phase_boundary(50.0, n, eps, model="usa") == 0.0


def test_consensus_points_eigen_equation():
    rng = np.random.default_rng(3)
    A = rng.standard_normal((5, 5))
    U = A + A.T + 20 * np.outer(np.ones(5), np.ones(5)) / 5
    pts = th.consensus_points(U)
    v = pts[0]
    lam = np.linalg.eigvalsh(U)[-1]
    np.testing.assert_allclose(U @ v, lam * v, atol=1e-10)
    assert abs(np.linalg.norm(v) - 1) < 1e-14 and np.array_equal(pts[1], -v)
    y0 = np.array([[v + 0.1 * rng.standard_normal(5) for _ in range(3)]])
    y0 /= np.linalg.norm(y0, axis=-1, keepdims=True)
    pred = th.predicted_consensus(U, np.stack([y0[0], -y0[0], np.stack([y0[0, 0], -y0[0, 1], y0[0, 2]])]))
    np.testing.assert_allclose(pred[0], v)
    np.testing.assert_allclose(pred[1], -v)
    assert np.all(np.isnan(pred[2]))


def test_theory_validation():
    with pytest.raises(ValidationError, match="model"):
        th.equiangular_rho(1.0, 1.0, 3, model="xx")
    with pytest.raises(ValidationError, match="beta"):
        th.equiangular_rho(1.0, -1.0, 3)
    with pytest.raises(InputTypeError, match="n"):
        th.equiangular_rho(1.0, 1.0, 3.5)
    with pytest.raises(ValidationError, match="n"):
        th.equiangular_rho(1.0, 1.0, 1)
    with pytest.raises(ValidationError, match="t"):
        th.equiangular_rho([-1.0, 1.0], 1.0, 3)
    with pytest.raises(ValidationError, match="eps"):
        th.phase_boundary(1.0, 3, eps=1.5)
    with pytest.raises(ValidationError, match="symmetric"):
        th.consensus_points(np.array([[1.0, 2.0], [0.0, 1.0]]))
    with pytest.raises(ValidationError, match="simple"):
        th.consensus_points(np.eye(3))
    with pytest.raises(ValidationError, match="positive"):
        th.consensus_points(-np.eye(3) - np.diag([0, 1, 2]))


# ---------------------------------------------------------------------------------------------
# rescaled USA (issue 35 item 1): e^{-beta} times the field, the time s = e^beta t
def test_rescaled_predictions_are_the_time_changed_plain_ones():
    """At beta = 5: the rate is e^{-beta} times USA's (a closed form, to rounding); rho_rescaled(s) =
    rho(e^{-beta} s) and the clustering time is e^beta times USA's (both from tight solves of the same
    scalar ODE / quadrature: agreement to 1e-11, the solver's rtol 1e-12 with a margin); the noise
    predictions are e^{-beta} (rate, with sigma_s = e^{-beta/2} sigma) and e^{-beta/2} (sigma_c)."""
    beta, n = 5.0, 4
    e = np.exp(-beta)
    rho = np.linspace(-1 / (n - 1), 1.0, 9)
    np.testing.assert_allclose(th.equiangular_rate(rho, beta, n, "usa", rescaled=True),
                               e * th.equiangular_rate(rho, beta, n, "usa"), rtol=1e-14, atol=0)
    s = np.array([0.0, 1.0, 10.0, 50.0, 300.0])
    np.testing.assert_allclose(th.equiangular_rho(s, beta, n, "usa", rescaled=True),
                               th.equiangular_rho(e * s, beta, n, "usa"), rtol=1e-11, atol=1e-14)
    assert abs(th.clustering_time(beta, n, 1e-3, "usa", rescaled=True) / (th.clustering_time(beta, n, 1e-3, "usa") / e) - 1) <= 1e-12
    k = np.array([1, 2, 3])
    np.testing.assert_allclose(th.uniform_growth_rate(k, beta, 0.3 * np.sqrt(e), "usa", rescaled=True),
                               e * th.uniform_growth_rate(k, beta, 0.3, "usa"), rtol=1e-12)
    assert abs(th.critical_noise(beta, "usa", rescaled=True) / (np.sqrt(e) * th.critical_noise(beta, "usa")) - 1) <= 1e-12
    # the boundary in rescaled time is the largest beta that clusters by s (T_s increases in beta)
    b = th.phase_boundary(1e4, n, 1e-3, "usa", rescaled=True)
    assert abs(th.clustering_time(b, n, 1e-3, "usa", rescaled=True) / 1e4 - 1) <= 1e-10
    assert th.clustering_time(b - 0.1, n, 1e-3, "usa", rescaled=True) < 1e4 < th.clustering_time(b + 0.1, n, 1e-3, "usa", rescaled=True)


@pytest.mark.parametrize("beta", [800.0, 1e5, 1e300])
def test_rescaled_predictions_finite_at_any_beta_and_errors_name_beta(beta):
    n = 4
    r = th.equiangular_rate(np.linspace(0, 1, 5), beta, n, "usa", rescaled=True)
    assert np.all(np.isfinite(r)) and r[-1] == 0.0 and r[0] <= 1e-300  # e^{-beta} at rho = 0
    assert np.all(th.equiangular_rho([1.0, 1e300], beta, n, "usa", rescaled=True) <= 1e-40)  # e^{-beta} s < 1e-40
    assert np.all(np.isfinite(th.equiangular_rho([1.0, 1e300], beta, n, "sa")))
    # Hankel: sigma_c(rescaled)^2 = 2 e^{-beta} I_1 / beta ~ 2 / (beta sqrt(2 pi beta)) (1 - 3 / (8 beta))
    ref = np.sqrt(2 / np.sqrt(2 * np.pi * beta)) / np.sqrt(beta) * np.sqrt(1 - 3 / (8 * beta))
    assert abs(th.critical_noise(beta, "usa", rescaled=True) / ref - 1) <= 1e-5
    assert np.isfinite(th.uniform_growth_rate([1, 2], beta, 0.1, "usa", rescaled=True)).all()
    assert 0 < th.clustering_time(beta, n, 1e-3, "usa") < n / beta  # plain USA: about n / (2 beta), finite
    with pytest.raises(ValidationError, match=f"beta = {re.escape(str(beta))}.*rescaled=True"):
        th.equiangular_rho(1.0, beta, n, "usa")
    with pytest.raises(ValidationError, match=f"beta = {re.escape(str(beta))}.*rescaled=True"):
        th.critical_noise(beta, "usa")
    for model, kw in (("usa", {"rescaled": True}), ("sa", {})):
        with pytest.raises(ValidationError, match=f"beta = {re.escape(str(beta))}.*float range"):
            th.clustering_time(beta, n, 1e-3, model, **kw)


def test_rescaled_refused_for_sa_and_hankel_matches_scipy():
    from riemattn.analysis._stability import _ive_hankel

    for call in (lambda: th.equiangular_rate(0.5, 1.0, 3, "sa", rescaled=True),
                 lambda: th.equiangular_rho(1.0, 1.0, 3, "sa", rescaled=True),
                 lambda: th.critical_noise(1.0, "sa", rescaled=True)):
        with pytest.raises(ValidationError, match="rescaled"):
            call()
    from scipy import special
    for k in (0, 1, 2):  # where SciPy is finite (beta <= ~1e9), the expansion's O(k^6 / beta^3) is below eps
        b = np.array([1e6, 1e8])
        np.testing.assert_allclose(_ive_hankel(k, b), special.ive(k, b), rtol=1e-14)
