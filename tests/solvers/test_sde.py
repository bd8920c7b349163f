"""Stochastic attention on the manifold (riemattn.solvers.sde): Brownian motion, weak orders, the manifold.

References used as independent truths: the heat semigroup on S^(d-1) (E <x0, Y_t> =
exp(-(d-1) sigma^2 t / 2), E <x0, Y_t>^2 = 1/d + (1 - 1/d) exp(-d sigma^2 t)); the one-step law of each
method, integrated by quadrature over the chi distribution (for F = 0, E[<x0, Y_{k+1}> | Y_k] =
m_h <x0, Y_k> with m_h = E cos(step angle), so E <x0, Y_N> = m_h^N exactly); a Fourier-Galerkin
solution of the backward Kolmogorov equation on the circle (with a drift).
"""

import math

import numpy as np
import pytest
from scipy import integrate as spi
from scipy import linalg, stats

import riemattn as ra
from riemattn.errors import InputTypeError, ValidationError
from riemattn.geometry.manifolds import Ellipsoid, Euclidean, Sphere
from riemattn.solvers.sde import SDE_METHODS, brownian_mean_cosine, integrate_sde


def north(M, d):
    y0 = np.zeros((M, 1, d))
    y0[..., 0] = 1.0
    return y0


def chain_mean(method, n, sigma, T, N):
    """E <x0, Y_N> of the method's Markov chain for F = 0 on S^n (quadrature, independent of the code)."""
    h = T / N
    if method == "em":  # pi(y + v): cos(angle) = 1 / sqrt(1 + |v|^2)
        g = lambda x: 1.0 / np.sqrt(1.0 + sigma**2 * h * x * x)  # noqa: E731
    else:  # geodesic step of length |v| exp(-(n - 1) sigma^2 h / 12)
        g = lambda x: np.cos(np.exp(-(n - 1) * sigma**2 * h / 12) * sigma * math.sqrt(h) * x)  # noqa: E731
    m = spi.quad(lambda x: g(x) * stats.chi.pdf(x, n), 0, 60, limit=200, epsabs=1e-14)[0]
    return m**N


def mc(method, d, sigma, T, dt, M, seed=0, f=lambda c: c):
    sol = integrate_sde(Sphere(d - 1), north(M, d), (0.0, T), sigma=sigma, dt=dt, method=method, seed=seed,
                        saveat=[0.0, T])
    c = f(sol.y[-1][:, 0, 0])
    return c.mean(), c.std(ddof=1) / math.sqrt(M)


@pytest.mark.parametrize("d", [2, 3, 5])
@pytest.mark.parametrize("method, dt", [("em", 2.0**-8), ("strang", 1 / 8)])
def test_brownian_motion_mean_cosine(d, method, dt):
    """F = 0 on S^(d-1): E <x0, Y_t> = exp(-(d-1) sigma^2 t/2) within 3 standard errors over 1e4 paths
    (steps small enough that the method's bias, from the chain's exact mean, is < 0.5 standard error)."""
    M, sigma, T = 10_000, 0.5, 1.0
    mean, se = mc(method, d, sigma, T, dt, M, seed=d)
    exact = float(brownian_mean_cosine(T, d, sigma))
    assert abs(chain_mean(method, d - 1, sigma, T, round(T / dt)) - exact) < 0.5 * se
    assert abs(mean - exact) < 3 * se, (mean, exact, se)


@pytest.mark.parametrize("d", [3, 4])
def test_brownian_motion_second_harmonic(d):
    """E <x0, Y_t>^2 = 1/d + (1 - 1/d) exp(-d sigma^2 t) (degree-2 harmonic): the weak-order-2 walk."""
    M, sigma, T = 20_000, 1.0, 0.5
    mean, se = mc("strang", d, sigma, T, 1 / 8, M, seed=11, f=np.square)
    exact = 1 / d + (1 - 1 / d) * math.exp(-d * sigma**2 * T)
    assert abs(mean - exact) < 3 * se, (mean, exact, se)


@pytest.mark.parametrize("method, n, steps", [("em", 2, (1, 2)), ("strang", 3, (1, 2))])
def test_simulated_chain_is_the_analysed_chain(method, n, steps):
    """The simulated mean equals the method's exact one-step law iterated (quadrature) within 3 standard
    errors, at step sizes where that law differs from Brownian motion by > 5 standard errors: the
    test sees the step (e.g. a walk without its curvature correction, or a wrong Ito correction)."""
    M, sigma, T = 100_000, math.sqrt(2.0), 1.0
    exact = float(brownian_mean_cosine(T, n + 1, sigma))
    for N in steps:
        mean, se = mc(method, n + 1, sigma, T, T / N, M, seed=N)
        chain = chain_mean(method, n, sigma, T, N)
        assert abs(chain - exact) > 5 * se
        assert abs(mean - chain) < 3 * se, (N, mean, chain, se)


@pytest.mark.parametrize("method, order, steps", [("em", 1, (8, 16, 32)), ("strang", 2, (4, 8, 16))])
@pytest.mark.parametrize("n", [1, 2, 4])
def test_weak_order_of_the_chain(method, order, steps, n):
    """Weak order of each method on S^n, from the exact law of its chain (checked against the simulation
    above): within 0.25 of the claim (1 for em, 2 for strang; strang is exact on the circle, n = 1).
    The direct Monte Carlo measurement at full size: benchmarks/sde_weak_order.py."""
    sigma, T = 1.0, 1.0
    exact = float(brownian_mean_cosine(T, n + 1, sigma))
    err = np.array([chain_mean(method, n, sigma, T, N) - exact for N in steps])
    if method == "strang" and n == 1:
        assert np.abs(err).max() < 1e-12
        return
    p = np.polyfit(np.log(T / np.array(steps)), np.log(np.abs(err)), 1)[0]
    assert abs(p - order) <= 0.25, (p, err)


@pytest.mark.slow
def test_weak_order_em_monte_carlo():
    """Direct Monte Carlo weak order of projected Euler-Maruyama on S^2 with 1e5 paths: within 0.25 of 1
    (the exact chain's slope over these steps is 0.92; the fit's statistical error is ~0.08)."""
    M, sigma, T = 100_000, 1.0, 1.0
    exact = float(brownian_mean_cosine(T, 3, sigma))
    steps = (16, 32, 64)
    err = np.array([mc("em", 3, sigma, T, T / N, M, seed=N)[0] - exact for N in steps])
    p = np.polyfit(np.log(T / np.array(steps)), np.log(np.abs(err)), 1)[0]
    assert abs(p - 1) <= 0.25, (p, err)


def _circle_reference(kappa, sigma, T, theta0, K=40):
    """E cos(theta_T) for dtheta = -kappa sin(theta) dt + sigma dW: backward Kolmogorov equation in the
    Fourier basis e^{ik theta}, |k| <= K, solved with expm (independent of the package)."""
    ks = np.arange(-K, K + 1)
    L = np.diag(-0.5 * sigma**2 * ks.astype(float) ** 2).astype(complex)
    for j, k in enumerate(ks):  # L e^{ik} = -kappa k (e^{i(k+1)} - e^{i(k-1)}) / 2 - sigma^2 k^2 / 2 e^{ik}
        if j + 1 < len(ks):
            L[j + 1, j] += -kappa * k / 2
        if j - 1 >= 0:
            L[j - 1, j] += kappa * k / 2
    f = np.zeros(len(ks), complex)
    f[K + 1] = f[K - 1] = 0.5
    u = linalg.expm(T * L) @ f
    return float(np.real(np.sum(u * np.exp(1j * ks * theta0))))


@pytest.mark.parametrize("method, dt", [("em", 1 / 64), ("strang", 1 / 8)])
def test_drift_on_the_circle(method, dt):
    """One token on S^1 with the drift P_y a (dtheta = -kappa sin theta dt + sigma dW): E <e1, Y_T>
    against the Kolmogorov equation, within 3 standard errors over 2e4 paths."""
    kappa, sigma, T, theta0, M = 1.5, 0.8, 1.0, 2.0, 20_000
    a = np.array([kappa, 0.0])
    field = ra.VectorField(lambda t, y: a - (y @ a)[..., None] * y, Sphere(1))
    y0 = np.broadcast_to(np.array([math.cos(theta0), math.sin(theta0)]), (M, 1, 2)).copy()
    sol = integrate_sde(field, y0, (0.0, T), sigma=sigma, dt=dt, method=method, seed=5, saveat=[0.0, T])
    c = sol.y[-1][:, 0, 0]
    ref = _circle_reference(kappa, sigma, T, theta0)
    assert abs(c.mean() - ref) < 3 * c.std() / math.sqrt(M), (c.mean(), ref)


@pytest.mark.slow
def test_strang_weak_order_with_drift_on_the_circle():
    """With a drift the splitting error remains; on the circle the noise step is exact, so the error is
    deterministic enough to measure with 2e5 common-seed paths: order 2 within 0.25."""
    kappa, sigma, T, theta0, M = 2.0, 0.5, 1.0, 2.5, 200_000
    a = np.array([kappa, 0.0])
    field = ra.VectorField(lambda t, y: a - (y @ a)[..., None] * y, Sphere(1))
    y0 = np.broadcast_to(np.array([math.cos(theta0), math.sin(theta0)]), (M, 1, 2)).copy()
    ref = _circle_reference(kappa, sigma, T, theta0)
    steps = (1, 2, 4)
    err = []
    for N in steps:
        sol = integrate_sde(field, y0, (0.0, T), sigma=sigma, dt=T / N, method="strang", seed=3, saveat=[0.0, T])
        err.append(sol.y[-1][:, 0, 0].mean() - ref)
    p = np.polyfit(np.log(T / np.array(steps)), np.log(np.abs(err)), 1)[0]
    assert abs(p - 2) <= 0.25, (p, err)


@pytest.mark.parametrize("method", sorted(SDE_METHODS))
@pytest.mark.parametrize("W", [None, np.diag([1.0, 2.0, 0.5, 3.0])])
def test_tokens_stay_on_the_manifold_every_step(method, W):
    """SA drift plus noise on the sphere and an ellipsoid: max |y^T W y - 1| <= 1e-12 at every step."""
    field = ra.AttentionField(np.eye(4), W=W, normalization="softmax", beta=2.0)
    m = field.manifold
    y0 = m.projection(np.random.default_rng(0).normal(size=(3, 5, 4)))
    sol = integrate_sde(field, y0, (0.0, 5.0), sigma=0.7, dt=0.05, method=method, seed=1,
                        save_fn=lambda t, y: np.abs(m.inner(y, y) - 1.0).max(axis=-1))
    dev = sol.observables["value"]
    assert dev.shape == (101, 3) and sol.success
    assert dev.max() <= 1e-12


@pytest.mark.parametrize("method, dt", [("em", 2.0**-7), ("strang", 0.25)])
def test_ellipsoid_brownian_motion_is_the_sphere_s_mapped(method, dt):
    """On E_W with the metric X^T W Y, W^{1/2} Y is Brownian motion on the sphere: E <u0, W^{1/2} Y_t> =
    exp(-(d-1) sigma^2 t / 2) within 3 standard errors over 1e4 paths."""
    W = np.diag([1.0, 4.0, 9.0])
    M, sigma, T = 10_000, 0.5, 1.0
    y0 = np.zeros((M, 1, 3))
    y0[..., 0] = 1.0  # W^{-1/2} e1 = e1 here, and u0 = e1
    sol = integrate_sde(Ellipsoid(W), y0, (0.0, T), sigma=sigma, dt=dt, method=method, seed=9, saveat=[0.0, T])
    u = sol.y[-1][:, 0] @ np.sqrt(W)
    assert np.abs(np.sum(u * u, axis=-1) - 1).max() < 1e-12
    c = u[:, 0]
    assert abs(c.mean() - brownian_mean_cosine(T, 3, sigma)) < 3 * c.std() / math.sqrt(M)
    # the other axes: by symmetry of the heat kernel, E u_2 = E u_3 = 0
    assert np.all(np.abs(u[:, 1:].mean(0)) < 3 * u[:, 1:].std(0) / math.sqrt(M))


@pytest.mark.parametrize("method", sorted(SDE_METHODS))
def test_euclidean_brownian_motion(method):
    """On flat R^d the noise is exactly Gaussian: mean y0, variance sigma^2 T per component."""
    M, sigma, T = 20_000, 0.6, 2.0
    sol = integrate_sde(Euclidean(2), np.ones((M, 1, 2)), (0.0, T), sigma=sigma, dt=0.5, method=method, seed=2,
                        saveat=[0.0, T])
    y = sol.y[-1][:, 0]
    se_mean = sigma * math.sqrt(T / M)
    assert np.all(np.abs(y.mean(0) - 1.0) < 3 * se_mean)
    var_se = sigma**2 * T * math.sqrt(2 / M)
    assert np.all(np.abs(y.var(0) - sigma**2 * T) < 3 * var_se)


def test_seeded_reproducible_and_per_trajectory_sigma():
    field = ra.sa(1.0, 3)
    y0 = field.manifold.projection(np.random.default_rng(0).normal(size=(2, 4, 3)))
    run = lambda seed, sigma, method="em": integrate_sde(field, y0, (0, 1), sigma=sigma, dt=0.1, seed=seed,  # noqa: E731
                                                         method=method).y
    assert np.array_equal(run(7, 0.5), run(7, 0.5))
    assert not np.allclose(run(7, 0.5), run(8, 0.5))
    # sigma = 0 for trajectory 0: projected Euler / two projected Heun half-steps (the deterministic steppers)
    for method, stepper, dt in (("em", "euler", 0.1), ("strang", "heun", 0.05)):
        y = run(3, np.array([0.0, 0.5]), method)
        det = ra.integrate(field, y0[:1], (0, 1), stepper=stepper, dt=dt).y
        assert np.allclose(y[-1, 0], det[-1, 0], atol=1e-14)
        assert not np.allclose(y[-1, 1], det[-1, 0], atol=1e-3)


def test_noise_independent_across_tokens_and_trajectories():
    """One step of Brownian motion from one point: the increments of different tokens and trajectories
    are uncorrelated (|corr| < 4 / sqrt(M))."""
    M = 20_000
    sol = integrate_sde(Sphere(2), north(M, 3).repeat(2, axis=1), (0, 0.01), sigma=1.0, dt=0.01, seed=4)
    inc = sol.y[-1][..., 1]  # (M, 2): the x_2 component of two tokens
    assert abs(np.corrcoef(inc[:, 0], inc[:, 1])[0, 1]) < 4 / math.sqrt(M)
    assert abs(np.corrcoef(inc[:-1, 0], inc[1:, 0])[0, 1]) < 4 / math.sqrt(M)


def test_torch_backend():
    torch = pytest.importorskip("torch")
    field = ra.usa(1.0, 3)
    y0 = field.manifold.projection(np.random.default_rng(0).normal(size=(4, 6, 3)))
    yt = torch.as_tensor(y0)
    for method in SDE_METHODS:
        a = integrate_sde(field, yt, (0, 1), sigma=0.5, dt=0.1, seed=3, method=method).y
        b = integrate_sde(field, yt, (0, 1), sigma=0.5, dt=0.1, seed=3, method=method).y
        assert torch.is_tensor(a) and torch.equal(a, b)
        assert float((a.square().sum(-1) - 1).abs().max()) < 1e-12
        g = torch.Generator().manual_seed(3)
        c = integrate_sde(field, yt, (0, 1), sigma=0.5, dt=0.1, seed=g, method=method).y
        assert torch.equal(a, c)
    # statistics agree with NumPy: Brownian motion on S^2, E <x0, Y_t>
    M = 20_000
    sol = integrate_sde(Sphere(2), torch.as_tensor(north(M, 3)), (0, 0.5), sigma=1.0, dt=0.125, seed=1,
                        method="strang", saveat=[0, 0.5])
    c = sol.y[-1][:, 0, 0].numpy()
    assert abs(c.mean() - brownian_mean_cosine(0.5, 3, 1.0)) < 3 * c.std() / math.sqrt(M)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"sigma": -1.0}, ValidationError, "sigma must be >= 0"),
        ({"sigma": np.ones(3)}, ValidationError, "broadcast against the batch"),
        ({"sigma": "big"}, InputTypeError, "sigma"),
        ({"sigma": 1.0, "method": "milstein"}, ValidationError, "method must be one of"),
        ({"sigma": 1.0, "seed": "x"}, InputTypeError, "seed must be"),
        ({"sigma": 1.0, "dt": 0.0}, ValidationError, "dt must be a positive"),
        ({"sigma": 1.0, "t_span": (1.0, 0.0)}, ValidationError, "backward"),
    ],
)
def test_bad_inputs(kwargs, error, match):
    kw = {"dt": 0.1, "t_span": (0.0, 1.0), **kwargs}
    with pytest.raises(error, match=match):
        integrate_sde(ra.sa(1.0, 3), north(2, 3), **kw)


def test_bad_field():
    with pytest.raises(InputTypeError, match="field must be"):
        integrate_sde(lambda t, y: y, north(2, 3), (0, 1), sigma=1.0, dt=0.1)
    with pytest.raises(ValidationError, match="not on"):
        integrate_sde(Ellipsoid(np.diag([1.0, 2.0, 3.0])), 2 * north(2, 3), (0, 1), sigma=1.0, dt=0.1)
