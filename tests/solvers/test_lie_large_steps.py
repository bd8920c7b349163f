"""Lie-group steppers at step sizes up to the whole horizon (issue 34, item 3): the tokens stay on
E_W to rounding, or the trajectory is reported failed (status -3, a message) -- never a raised
exception or a NumPy warning."""

import warnings

import numpy as np
import pytest
import scipy.linalg

import riemattn as ra
from riemattn.errors import IntegrationError
from riemattn.geometry._skew import skew_expm_action
from riemattn.geometry.lowrank import expm_small_action

LIE = ["lie-euler", "cg3", "rkmk4", "cf4", "rkmk45"]
EPS = np.finfo(float).eps
A_VEC = np.array([0.0, 0.0, 3.0])
MANIFOLDS = {"sphere": ra.Sphere(2), "ellipsoid": ra.Ellipsoid(np.diag([1.0, 2.0, 4.0]))}


def issue_field(M):
    """F = a x y + a, projected: on S^2 the issue's a x y + a - <y, a> y."""
    return ra.VectorField(lambda t, y: np.cross(A_VEC, y) + A_VEC, M, project=True)


def tokens(M):
    """Two trajectories of three tokens: coincident and antipodal tokens, a token on the axis a."""
    y = np.array([[[1, 0.2, -0.5], [1, 0.2, -0.5], [-1, -0.2, 0.5]], [[0, 0, 1.0], [1, 1, 1], [0, 1, 0]]])
    return M.projection(y)


def tolerance(M, n_steps):
    """|y^T W y - 1| after n_steps: each step adds the rounding of one exponential (at most 2^5
    Taylor repetitions of a few terms, or an eigendecomposition and an SVD of a matrix of size
    <= 7), a few hundred eps relative, times cond(W) for the transformation to W-orthonormal
    coordinates; measured at most 5.7e-14 over these cases."""
    return 2**10 * EPS * np.linalg.cond(M.W) * (n_steps + 1)


def solve_quietly(*args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no raw NumPy/SciPy warning may reach the user
        return ra.integrate(*args, **kwargs)


@pytest.mark.parametrize("dt, T", [(10.0, 50.0), (20.0, 100.0), (50.0, 50.0)])
def test_issue_reproduction_rkmk4_stays_on_the_sphere(dt, T):
    """Was: dt = 10 ended 1.9e-3 off the sphere with success=True, dt = 20 raised ValidationError
    from expm_small_action (and a SciPy overflow warning), dt = 50 returned success=False."""
    M = ra.Sphere(2)
    y0 = M.projection(np.array([[1.0, 0.2, -0.5]]))
    sol = solve_quietly(issue_field(M), y0, (0.0, T), "rkmk4", dt=dt)
    assert sol.success, sol.message
    assert M.deviation(sol.y) <= tolerance(M, sol.n_steps)


@pytest.mark.parametrize("stepper", LIE)
@pytest.mark.parametrize("manifold", sorted(MANIFOLDS))
@pytest.mark.parametrize("dt", [0.5, 5.0, 20.0, 50.0])
def test_every_step_size_up_to_the_horizon_stays_on_the_manifold(stepper, manifold, dt):
    """dt from small to the whole horizon T = 50 (|F| ~ 3: rotation angles up to 150 per step;
    for rkmk45 dt is the first trial step)."""
    M = MANIFOLDS[manifold]
    sol = solve_quietly(issue_field(M), tokens(M), (0.0, 50.0), stepper, dt=dt, saveat=[0.0, 25.0, 50.0])
    assert sol.success, sol.message
    assert M.deviation(sol.y) <= tolerance(M, int(sol.per_trajectory.n_steps.max()))


@pytest.mark.parametrize("stepper", ["lie-euler", "cg3", "rkmk4", "cf4"])
@pytest.mark.parametrize("manifold", sorted(MANIFOLDS))
def test_generator_fields_stay_on_the_manifold_for_huge_steps(stepper, manifold):
    """LinearField (the dense path, lie_generator): one step of h |A| ~ 1e3 ... 1e10 used to leave
    the sphere by 6e-11 ... 6e-5 (scaling and squaring) and the ellipsoid by up to 1e-2."""
    M = MANIFOLDS[manifold]
    rng = np.random.default_rng(0)
    X = rng.normal(size=(3, 3))
    A = np.linalg.solve(M.W, X - X.T)  # W A skew: A in o(W)
    field = ra.LinearField(A, M)
    y0 = tokens(M)
    for T in (10.0, 1e3, 1e6, 1e10):
        sol = solve_quietly(field, y0, (0.0, T), stepper, dt=T)
        assert sol.success, sol.message
        assert M.deviation(sol.y) <= tolerance(M, 1), T
    # still exact at a moderate step: expm(T A) y0 (cond of expm(10 A) ~ 1)
    sol = solve_quietly(field, y0, (0.0, 10.0), stepper, dt=10.0)
    exact = y0 @ scipy.linalg.expm(10.0 * A).T
    np.testing.assert_allclose(sol.y[-1], exact, rtol=0, atol=1e-12)


@pytest.mark.parametrize("stepper", LIE)
def test_overflowing_steps_are_reported_per_trajectory_not_raised(stepper):
    """h = 1e300: the algebra elements overflow. Each trajectory ends with status -3 and the
    message says so; nothing is raised (unless raise_on_failure) and no warning escapes."""
    M = ra.Sphere(2)
    sol = solve_quietly(issue_field(M), tokens(M), (0.0, 1e300), stepper, dt=1e300, max_steps=50)
    if stepper == "rkmk45":  # rejects and shrinks the step instead: max_steps on this horizon
        assert list(sol.per_trajectory.status) == [-1, -1], sol.message
        return
    assert list(sol.per_trajectory.status) == [-3, -3] and not sol.success
    assert "NaN or inf" in sol.message
    with pytest.raises(IntegrationError, match="NaN or inf"):
        solve_quietly(issue_field(M), tokens(M), (0.0, 1e300), stepper, dt=1e300, raise_on_failure=True)


def test_skew_exponential_is_a_rotation_at_every_norm():
    """skew_expm_action against the eigendecomposition reference at moderate norm, and a rotation
    (|exp(K) v| = |v|) up to |K| = 1e17, where the real part of U e^{-i lambda} U^H alone shrank
    v by 5.7 % (eigenvalue errors ~ eps |K| break the +-lambda pairing)."""
    rng = np.random.default_rng(1)
    X = rng.normal(size=(4, 5, 5))
    S = X - np.swapaxes(X, -1, -2)
    S[:, 3:, :] = S[:, :, 3:] = 0.0  # unused slots, as in a low-rank basis
    v = rng.normal(size=(4, 5))
    lam, U = np.linalg.eigh(1j * 70.0 * S)
    ref = np.einsum("...ij,...j->...i", (U * np.exp(-1j * lam)[:, None, :]) @ np.conj(np.swapaxes(U, -1, -2)), v).real
    norm = np.max(np.sum(np.abs(70.0 * S), axis=-2))
    np.testing.assert_allclose(skew_expm_action(70.0 * S, v), ref, rtol=0, atol=64 * EPS * norm * np.abs(v).max())
    for scale in (1e2, 1e6, 1e12, 1e17):
        out = skew_expm_action(scale * S, v)
        inc = skew_expm_action(scale * S, v, increment=True)
        length = np.linalg.norm(v, axis=-1)
        np.testing.assert_allclose(np.linalg.norm(out, axis=-1), length, rtol=32 * EPS)
        np.testing.assert_allclose(np.linalg.norm(v + inc, axis=-1), length, rtol=32 * EPS)


def test_non_finite_generators_give_nan_for_their_own_matrices_only():
    """expm_small_action: a NaN or inf matrix in a batch gives NaN for that matrix only (the
    stepping loops then fail that trajectory); it used to raise ValidationError for the batch."""
    rng = np.random.default_rng(2)
    X = rng.normal(size=(3, 4, 4))
    K = X - np.swapaxes(X, -1, -2)
    v = rng.normal(size=(3, 4))
    good = expm_small_action(K, v, skew=True)
    K[1, 0, 1] = np.inf
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = expm_small_action(K, v, skew=True)
    assert np.isnan(out[1]).all() and np.isfinite(out[[0, 2]]).all()
    np.testing.assert_allclose(out[[0, 2]], good[[0, 2]], rtol=0, atol=64 * EPS * np.abs(v).max())
