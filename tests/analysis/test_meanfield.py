"""The continuity equation on the circle (riemattn.analysis.meanfield) and the critical noise."""

import math

import numpy as np
import pytest
from scipy import integrate as spi

from riemattn import theory
from riemattn.analysis.meanfield import (
    CircleDensity, critical_noise, fourier_moments, order_parameter, uniform, uniform_growth_rate,
)
from riemattn.dynamics.circle import CircleField
from riemattn.errors import ValidationError

MODELS = ["sa", "usa"]


def bump(theta):
    rho = np.exp(np.cos(theta) + 0.5 * np.sin(2 * theta))
    return rho / (rho.mean() * 2 * math.pi)


@pytest.mark.parametrize("model", MODELS)
def test_mass_conserved(model):
    cd = CircleDensity(2.0, model, sigma=0.4, N=64)
    sol = cd.solve(bump(cd.theta), (0.0, 20.0), dt=0.02, saveat=np.linspace(0, 20, 11))
    mass = sol.rho.mean(-1) * 2 * math.pi
    assert np.abs(mass - 1).max() < 1e-12


@pytest.mark.parametrize("model", MODELS)
def test_spectral_convergence_in_resolution(model):
    """Error of the Fourier moments k = 1..3 at t = 2 against N = 128 decays exponentially in N:
    > 1e-4 at N = 12, < 1e-6 at N = 32, < 1e-12 at N = 48 (each 16 modes gain > 5 digits)."""
    err = {}
    ref = None
    for N in (128, 12, 32, 48):
        cd = CircleDensity(1.0, model, sigma=0.3, N=N)
        m = fourier_moments(cd.solve(bump(cd.theta), (0.0, 2.0), dt=0.01).rho[-1], 3)
        if ref is None:
            ref = m
        else:
            err[N] = np.abs(m - ref).max()
    assert err[12] > 1e-4 and err[32] < 1e-6 and err[48] < 1e-12, err


@pytest.mark.parametrize("model", MODELS)
def test_time_order_four(model):
    """ETDRK4: error at t = 2 against dt = 1e-3 has order 4 +- 0.2."""
    cd = CircleDensity(1.0, model, sigma=0.3, N=32)
    rho0 = bump(cd.theta)
    ref = cd.solve(rho0, (0, 2), dt=1e-3).rho[-1]
    dts = np.array([0.05, 0.025, 0.0125])
    err = [np.abs(cd.solve(rho0, (0, 2), dt=dt).rho[-1] - ref).max() for dt in dts]
    p = np.polyfit(np.log(dts), np.log(err), 1)[0]
    assert abs(p - 4) <= 0.2, (p, err)


def test_critical_noise_closed_form_against_quadrature():
    """sigma_c^2 = (1/pi) int e^{beta cos phi} sin^2 phi dphi / Z_0 (the k = 1 linearisation, written as an
    integral and evaluated by quadrature, independent of the Bessel functions)."""
    for beta in (0.0, 0.5, 1.0, 3.0, 10.0):
        num = spi.quad(lambda p: math.exp(beta * math.cos(p)) * math.sin(p) ** 2, 0, 2 * math.pi)[0] / math.pi
        z0 = spi.quad(lambda p: math.exp(beta * math.cos(p)), 0, 2 * math.pi)[0] / (2 * math.pi)
        assert critical_noise(beta, "usa") == pytest.approx(math.sqrt(num), rel=1e-12)
        assert critical_noise(beta, "sa") == pytest.approx(math.sqrt(num / z0), rel=1e-12)
    assert critical_noise(0.0, "sa") == critical_noise(0.0, "usa") == 1.0  # Kuramoto: K_c = 2 D = sigma^2
    assert theory.critical_noise is critical_noise
    np.testing.assert_allclose(critical_noise([0.0, 1.0], "sa"), [1.0, critical_noise(1.0, "sa")])


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("beta", [0.0, 1.0, 4.0])
def test_growth_rates_match_the_discretisation(model, beta):
    """The closed-form lambda_k equal the eigenvalues of the spectral solver's linearisation about the
    uniform density (finite differences of its right-hand side), k = 1..4, to 1e-7."""
    sigma = 0.6
    num = CircleDensity(beta, model, sigma=sigma, N=64).growth_rates(4)
    np.testing.assert_allclose(num, uniform_growth_rate(np.arange(1, 5), beta, sigma, model), atol=1e-7)


@pytest.mark.parametrize("model", MODELS)
def test_mode_one_changes_stability_at_sigma_c(model):
    """A small cos(theta) perturbation of the uniform density grows below sigma_c and decays above, at the
    predicted rate (measured from the solver over t in [0, 10])."""
    beta = 1.5
    sc = critical_noise(beta, model)
    for f in (0.9, 1.1):
        cd = CircleDensity(beta, model, sigma=f * sc, N=32)
        rho0 = uniform(32) * (1 + 1e-6 * np.cos(cd.theta))
        sol = cd.solve(rho0, (0, 10), dt=0.05)
        a0, a1 = (order_parameter(r) for r in sol.rho)
        rate = math.log(a1 / a0) / 10
        assert rate == pytest.approx(uniform_growth_rate(1, beta, f * sc, model), rel=1e-4)
        assert (rate > 0) == (f < 1)


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("beta", [0.0, 2.0])
def test_stationary_states_direct_and_long_time_agree(model, beta):
    """The self-consistent state (Newton; |d rho/dt| < 1e-11) and the state reached by integrating
    t in [0, 200] from a perturbed uniform density agree to 1e-9 (relative) at sigma = 0.9 sigma_c,
    order parameter > 0.3 (ETDRK4's fixed points are those of the spatial discretisation)."""
    sc = critical_noise(beta, model)
    cd = CircleDensity(beta, model, sigma=0.9 * sc, N=64)
    direct = cd.stationary_state()
    assert np.abs(cd.rhs(direct)).max() < 1e-11
    rho0 = uniform(64) * (1 + 0.1 * np.cos(cd.theta))
    late = cd.solve(rho0, (0, 200), dt=0.1).rho[-1]
    assert order_parameter(direct) > 0.3
    assert np.abs(direct - late).max() < 1e-9 * direct.max()


def test_stationary_state_above_sigma_c_is_uniform():
    cd = CircleDensity(1.0, "sa", sigma=1.1 * critical_noise(1.0, "sa"), N=32)
    assert order_parameter(cd.stationary_state()) < 1e-10


def test_noiseless_density_matches_particles():
    """sigma = 0: the Fourier moments k = 1, 2 of n i.i.d. particles from rho0 (GLPR eq. 7.1, SciPy DOP853)
    approach the PDE's at t = 3; the mean error over 6 draws falls with n (~ n^{-1/2}: slope in
    [-0.8, -0.3] over n = 16, 64, 256)."""
    beta, model = 1.0, "sa"
    cd = CircleDensity(beta, model, N=64)
    rho0 = bump(cd.theta)
    pde = fourier_moments(cd.solve(rho0, (0, 3), dt=0.01).rho[-1], 2)
    fine = np.linspace(0, 2 * math.pi, 4097)
    cdf = np.concatenate([[0], np.cumsum(bump(fine[1:]) + bump(fine[:-1])) / 2 * (fine[1] - fine[0])])
    rng = np.random.default_rng(0)
    ns, errs = (16, 64, 256), []
    for n in ns:
        theta0 = np.interp(rng.uniform(0, cdf[-1], (6, n)), cdf, fine)
        _, th = CircleField(beta, model).solve(theta0, (0, 3), rtol=1e-7, atol=1e-9)
        part = np.stack([np.exp(1j * th[-1]).mean(-1), np.exp(2j * th[-1]).mean(-1)], axis=-1)
        errs.append(np.abs(part - pde).mean())
    p = np.polyfit(np.log(ns), np.log(errs), 1)[0]
    assert -0.8 <= p <= -0.3, (p, errs)
    assert errs[0] > errs[1] > errs[2]


@pytest.mark.parametrize(
    "kwargs, match",
    [({"N": 4}, "N must be"), ({"sigma": -1.0}, "sigma"), ({"model": "x"}, "model"),
     ({"beta": -1.0}, "beta"), ({"beta": 800.0, "model": "usa"}, "overflows")],
)
def test_bad_inputs(kwargs, match):
    with pytest.raises(ValidationError, match=match):
        CircleDensity(**kwargs)


def test_bad_solve_inputs():
    cd = CircleDensity(1.0, "sa", N=16)
    with pytest.raises(ValidationError, match="shape"):
        cd.solve(np.ones(8), (0, 1))
    with pytest.raises(ValidationError, match="needs sigma > 0"):
        cd.stationary_state()
    with pytest.raises(ValidationError, match="k must be"):
        uniform_growth_rate(0, 1.0, 0.5)
    with pytest.raises(ValidationError, match="beta"):
        critical_noise(-1.0)


# --- issue 41, item 9: the moments' meaning and sign, particles, odd N -----------------------------
def test_fourier_moments_sign_convention_against_von_mises():
    """The von Mises density e^{kappa cos(theta - m)} / (2 pi I_0(kappa)) has int e^{+i k theta} rho =
    I_k(kappa) / I_0(kappa) e^{+i k m} (a closed form): fourier_moments returns that, not its conjugate;
    particle_moments of one particle at m gives e^{+i k m}."""
    from scipy import special

    from riemattn.analysis.meanfield import particle_moments

    kappa, m, N = 2.0, 0.7, 64
    theta = 2 * math.pi * np.arange(N) / N
    rho = np.exp(kappa * np.cos(theta - m)) / (2 * math.pi * special.i0(kappa))
    k = np.arange(1, 5)
    exact = special.iv(k, kappa) / special.i0(kappa) * np.exp(1j * k * m)
    # trapezoidal rule on an analytic periodic integrand: exact to rounding at N = 64 for kappa = 2
    assert np.abs(fourier_moments(rho, 4) - exact).max() <= 1e-14
    assert np.abs(particle_moments([m], 4) - np.exp(1j * k * m)).max() <= 1e-15


def test_particle_moments_and_the_density_check():
    """fourier_moments given particle angles returned grid values (order 0.862 where the particles'
    is 0.072): now a ValidationError pointing to particle_moments, which returns mean_i e^{i k theta_i}."""
    from riemattn.analysis.meanfield import particle_moments

    th = np.random.default_rng(1).uniform(0, 2 * math.pi, 50)
    with pytest.raises(ValidationError, match="particle_moments"):
        fourier_moments(th)
    loop = np.array([sum(complex(math.cos(k * t), math.sin(k * t)) for t in th) / len(th) for k in (1, 2, 3)])
    assert np.abs(particle_moments(th, 3) - loop).max() <= 1e-14
    batch = np.stack([th, th[::-1] + 1.0])
    out = particle_moments(batch.T, 2, axis=0)
    assert out.shape == (2, 2) and np.abs(out[0] - loop[:2]).max() <= 1e-14
    # k equally spaced particles: mu_j = 0 for j < k, mu_k = e^{i k phase}
    eq = 0.3 + 2 * math.pi * np.arange(5) / 5
    mu = particle_moments(eq, 5)
    assert np.abs(mu[:4]).max() <= 1e-15 and abs(mu[4] - np.exp(5j * 0.3)) <= 1e-14
    with pytest.raises(ValidationError, match="theta"):
        particle_moments(np.zeros((3, 0)))


@pytest.mark.parametrize("model", MODELS)
def test_odd_N_converges_to_the_same_solution(model):
    """N = 49 (odd: no Nyquist mode) agrees with N = 128 as even N = 48 does (< 1e-12 at t = 2), and
    the stationary state of odd N is that of even N."""
    ref = None
    for N in (128, 49):
        cd = CircleDensity(1.0, model, sigma=0.3, N=N)
        m = fourier_moments(cd.solve(bump(cd.theta), (0.0, 2.0), dt=0.01).rho[-1], 3)
        ref = m if ref is None else ref
    assert np.abs(m - ref).max() < 1e-12
    sc = critical_noise(1.0, model)
    r = [order_parameter(CircleDensity(1.0, model, sigma=0.8 * sc, N=N).stationary_state()) for N in (48, 49)]
    assert r[0] > 0.3 and abs(r[0] - r[1]) < 1e-10
