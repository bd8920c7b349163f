"""Stiff steppers: RODAS4 (projected Rosenbrock) and "auto" (per-trajectory switching); P(t) without
the time_vectorized flag; attention scores at low temperature (beta up to the float limit)."""

from __future__ import annotations

import functools
import math
import warnings

import numpy as np
import pytest
from scipy.integrate import solve_ivp

import riemattn as ra
from riemattn.errors import ValidationError
from riemattn.solvers.rosenbrock_tableaux import RODAS4, RosenbrockTableau, rosenbrock_residuals, stability_function

from problems import lifted_reference


def _tokens(rng, shape):
    y = rng.normal(size=shape)
    return y / np.linalg.norm(y, axis=-1, keepdims=True)


# --- the tableau ----------------------------------------------------------------------------
def test_rodas4_order_conditions_and_L_stability():
    T = RODAS4
    assert max(abs(r) for _, r in rosenbrock_residuals(T.alpha, T.Gamma, T.b, 4)) < 1e-12
    b_hat = T.m_hat @ T.Gamma
    assert max(abs(r) for _, r in rosenbrock_residuals(T.alpha, T.Gamma, b_hat, 3)) < 1e-12
    # the embedded method is of order 3 exactly (some order-4 condition fails)
    assert max(abs(r) for _, r in rosenbrock_residuals(T.alpha, T.Gamma, b_hat, 4)) > 1e-3
    assert abs(stability_function(T.alpha, T.Gamma, T.b, -1e10)) < 1e-8
    assert np.all(np.abs(stability_function(T.alpha, T.Gamma, T.b, -np.geomspace(1e-2, 1e8, 50))) <= 1.0)


def test_a_corrupted_rosenbrock_tableau_is_rejected():
    a = RODAS4.a.copy()
    a[3, 1] += 1e-6
    with pytest.raises(ValidationError, match="order condition|row sums"):
        RosenbrockTableau(gamma=RODAS4.gamma, a=a, C=RODAS4.C, c=RODAS4.c, d=RODAS4.d, m=RODAS4.m,
                          m_hat=RODAS4.m_hat, H=RODAS4.H, order=4, embedded_order=3)


# --- convergence on a non-stiff problem ------------------------------------------------------
def _fixed_steps(name, field, y0, T, n):
    """n steps of size T / n of a stepper (integrate's adaptive loop would choose its own)."""
    stepper, y, h = ra.STEPPERS[name](), y0, T / n
    for k in range(n):
        y = stepper.step(field, k * h, y, h).y
    return y


@pytest.mark.parametrize("name", ["rodas4", "rodas4p"])
@pytest.mark.parametrize("time_dependent", [False, True])
def test_rosenbrock_measured_order_is_4(name, time_dependent):
    rng = np.random.default_rng(1)
    P0 = rng.normal(size=(3, 3))
    P = (lambda t: (1.0 + 0.5 * np.sin(2.0 * t)) * P0) if time_dependent else P0
    field = ra.AttentionField(P, normalization="softmax", beta=1.0)
    y0 = _tokens(rng, (2, 5, 3))
    T = 1.0
    ref = lifted_reference(field, y0, T)
    ns = [8, 16, 32]
    errs = [np.abs(_fixed_steps(name, field, y0, T, n) - ref).max() for n in ns]
    orders = -np.diff(np.log(errs)) / np.diff(np.log(ns))
    assert np.all(np.abs(orders - 4.0) <= 0.2), orders


@pytest.mark.parametrize("name", ["rodas4", "rodas4p"])
def test_rosenbrock_dense_output_has_local_error_of_order_4(name):
    """Dense output of order 3: inside a step the interpolant's distance to the exact solution
    through the step's start is O(h^4)."""
    rng = np.random.default_rng(2)
    field = ra.usa(2.0, 3)
    y0 = _tokens(rng, (4, 3))
    stepper = ra.STEPPERS[name]()
    errs, hs = [], [0.025, 0.0125, 0.00625]
    for h in hs:
        res = stepper.step(field, 0.0, y0, h)
        u = stepper.interpolant(field, 0.0, y0, h, res)
        errs.append(max(np.abs(u(th) - lifted_reference(field, y0, th * h)).max() for th in (0.3, 0.5, 0.8)))
    orders = np.diff(np.log(errs)) / np.diff(np.log(hs))
    assert np.all(np.abs(orders - 4.0) <= 0.2), orders


# --- stiff cases -----------------------------------------------------------------------------
def _radau_reference(field, y0, T, t_eval=None):
    shape = y0.shape
    sol = solve_ivp(lambda t, x: field(t, x.reshape(shape)).ravel(), (0, T), y0.ravel(), method="Radau",
                    rtol=1e-11, atol=1e-11, t_eval=t_eval)
    assert sol.success
    out = sol.y.T.reshape((-1,) + shape)
    return out / np.linalg.norm(out, axis=-1, keepdims=True)


@functools.lru_cache(maxsize=None)
def _usa9():
    field = ra.usa(9.0, 3)
    y0 = _tokens(np.random.default_rng(1), (6, 3))
    saveat = np.array([0.5, 1.1, 1.5])
    return field, y0, saveat, _radau_reference(field, y0, saveat[-1], t_eval=saveat)


@pytest.mark.slow
@pytest.mark.parametrize("stepper", ["rodas4", "rodas4p", "auto"])
def test_stiff_usa_beta_9_error_within_10_tol_on_the_sphere(stepper):
    field, y0, saveat, ref = _usa9()
    T, tol = saveat[-1], 1e-6
    r = ra.integrate(field, y0, (0, T), stepper=stepper, rtol=tol, atol=tol, saveat=saveat)
    assert r.success
    assert np.abs(r.y - ref).max() <= 10 * tol
    assert np.abs(np.linalg.norm(r.y, axis=-1) - 1.0).max() <= 1e-12


def _prothero_robinson(lam):
    """x' = -lam (x - cos t) (stiff, slowly moving equilibrium) and y' = -y, on R^2."""
    return ra.VectorField(lambda t, y: np.concatenate([-lam * (y[..., :1] - np.cos(t)), -y[..., 1:]], axis=-1),
                          ra.Euclidean(2))


def test_auto_switches_to_the_stiff_method_on_a_stiff_problem():
    """dopri5 is limited to h < 3.3e-3 by stability at lam = 1000; auto switches and takes far
    fewer steps, with the exact solution's accuracy."""
    lam, T = 1000.0, 3.0
    field = _prothero_robinson(lam)
    y0 = np.array([[1.0, 1.0]])
    exact_1 = lam * (lam * np.cos(T) + np.sin(T)) / (lam ** 2 + 1) + (1 - lam ** 2 / (lam ** 2 + 1)) * np.exp(-lam * T)
    explicit = ra.integrate(field, y0, (0, T), stepper="dopri5", rtol=1e-8, atol=1e-8)
    auto = ra.integrate(field, y0, (0, T), stepper="auto", rtol=1e-8, atol=1e-8)
    assert auto.success and explicit.n_steps > 0.9 * T * lam / 3.3
    assert auto.n_steps < explicit.n_steps / 5
    assert abs(auto.y[-1, 0, 0] - exact_1) <= 1e-7 and abs(auto.y[-1, 0, 1] - math.exp(-T)) <= 1e-7


def test_auto_switch_rule_per_trajectory():
    """Two trajectories in one batch: the stiff one (lam = 1000) switches to the stiff method
    after SWITCH_AFTER stability-limited steps; in stiff mode at a step where h |J| < 0.6
    a trajectory goes back after SWITCH_AFTER steps."""
    from riemattn.solvers.auto import SWITCH_AFTER, AutoSwitch

    stepper = AutoSwitch()
    field = ra.VectorField(lambda t, y: -np.array([1000.0, 1.0])[:, None, None] * y, ra.Euclidean(1))
    y = np.ones((2, 1, 1))
    state = None
    for k in range(SWITCH_AFTER):
        res = stepper.step(field, 0.0, y, 2e-3, state=state)  # h lam = 2 and 0.002
        state = res.state
        assert np.array_equal(state[:, 0], [float(k == SWITCH_AFTER - 1), 0.0])
    for k in range(SWITCH_AFTER):  # lam h = 0.3 in stiff mode: counts as non-stiff
        res = stepper.step(field, 0.0, y, 3e-4, state=np.array([[1.0, 0.0, 0.0]] * 2) if k == 0 else state)
        state = res.state
    assert np.array_equal(state[:, 0], [0.0, 0.0])


def test_auto_probes_the_stiff_method_after_many_elevated_explicit_steps():
    """Explicit steps with 0.5 < rho <= 1.2 are not stability-limited by the test, but after
    PROBE_AFTER of them the trajectory tries the stiff method (lam h = 0.8 here: rho ~ 0.8); one
    with rho ~ 0.3 (lam h = 0.3) never does."""
    from riemattn.solvers.auto import PROBE_AFTER, SWITCH_AFTER, AutoSwitch

    stepper = AutoSwitch()
    field = ra.VectorField(lambda t, y: -np.array([800.0, 300.0])[:, None, None] * y, ra.Euclidean(1))
    y = np.ones((2, 1, 1))
    state = None
    for k in range(PROBE_AFTER):
        state = stepper.step(field, 0.0, y, 1e-3, state=state).state
        assert np.all(state[:, 1] < SWITCH_AFTER)  # never a stability-limited step in a row
        assert np.array_equal(state[:, 0], [float(k == PROBE_AFTER - 1), 0.0]), k


def test_auto_does_not_stay_explicit_on_a_stiff_problem_at_a_loose_tolerance():
    """USA beta = 16, 16 causal tokens, tolerance 1e-2: the explicit steps sit just below the
    stability limit with rho ~ 0.3-1.3, so the in-a-row test alone never fired (dopri5 needs
    about 2.5e5 steps per unit time here); the probe switches it."""
    rng = np.random.default_rng(2)
    y0 = _tokens(rng, (16, 3))
    sol = ra.integrate(ra.usa(16.0, 3, mask="causal"), y0, (0.0, 0.5), stepper="auto", rtol=1e-2,
                       atol=1e-2, max_steps=3000)
    assert sol.success


def test_auto_equals_dopri5_while_nothing_is_stiff():
    rng = np.random.default_rng(5)
    field = ra.AttentionField(rng.normal(size=(3, 3)), beta=1.0)
    y0 = _tokens(rng, (3, 4, 3))
    a = ra.integrate(field, y0, (0, 2.0), stepper="auto", rtol=1e-8, atol=1e-8)
    b = ra.integrate(field, y0, (0, 2.0), stepper="dopri5", rtol=1e-8, atol=1e-8)
    assert np.array_equal(a.y, b.y) and a.n_steps == b.n_steps


@pytest.mark.slow
def test_auto_mixed_beta_batch_each_trajectory_accurate():
    rng = np.random.default_rng(6)
    betas = np.array([1.0, 9.0, 2.0, 10.0])
    field = ra.usa(betas, 3)
    y0 = _tokens(rng, (4, 4, 3))
    T, tol = 1.0, 1e-6
    r = ra.integrate(field, y0, (0, T), stepper="auto", rtol=tol, atol=tol, saveat=[0.5, T])
    assert r.success
    for k, b in enumerate(betas):
        ref = _radau_reference(ra.usa(b, 3), y0[k], T, t_eval=[0.5, T])
        assert np.abs(r.y[:, k] - ref).max() <= 10 * tol, b


def test_stiff_steppers_on_tensors_step_on_the_host_with_the_same_result():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    y0 = _tokens(rng, (2, 3, 3))
    field = ra.usa(np.array([1.0, 9.0]), 3)
    for name in ("rodas4p", "auto"):
        a = ra.integrate(field, y0, (0, 0.5), stepper=name, rtol=1e-6, atol=1e-6, saveat=[0.25, 0.5])
        b = ra.integrate(field, torch.as_tensor(y0), (0, 0.5), stepper=name, rtol=1e-6, atol=1e-6, saveat=[0.25, 0.5])
        assert torch.is_tensor(b.y) and np.abs(b.y.numpy() - a.y).max() <= 1e-11  # see test_backends.STIFF_TOL
        assert np.array_equal(a.per_trajectory.n_steps, b.per_trajectory.n_steps)


# --- P(t) without the flag -------------------------------------------------------------------
class _Counting:
    def __init__(self, fn):
        self.fn, self.calls = fn, 0

    def __call__(self, t):
        self.calls += 1
        return self.fn(t)


def test_scalar_P_of_t_is_detected_as_vectorisable_and_called_once_per_evaluation():
    rng = np.random.default_rng(7)
    P0 = rng.normal(size=(3, 3))
    natural = _Counting(lambda t: np.cos(t) * P0)  # broadcasts over a (k, 1, 1, 1) array of times
    field = ra.AttentionField(natural)
    assert field._P.mode == "column"
    y = _tokens(rng, (5, 4, 3))
    t = np.array([0.1, 0.2, 0.3, 0.4, 0.5])
    natural.calls = 0
    out = field(t, y)
    assert natural.calls == 1
    flagged = ra.AttentionField(lambda t: np.cos(t)[:, None, None] * P0, time_vectorized=True)
    per_time = ra.AttentionField(lambda t: np.cos(t) * P0, time_vectorized=False)
    assert per_time._P.mode is None
    assert np.allclose(out, flagged(t, y), rtol=1e-14, atol=1e-15)
    assert np.allclose(out, per_time(t, y), rtol=1e-14, atol=1e-15)


def test_P_of_t_that_does_not_broadcast_gives_the_same_results():
    rng = np.random.default_rng(8)
    P0 = rng.normal(size=(2, 3, 3))
    scalar_only = _Counting(lambda t: math.cos(t) * P0)  # raises on arrays
    field = ra.AttentionField(scalar_only, beta=2.0)
    assert field._P.mode is None
    y = _tokens(rng, (4, 3, 3))
    t = np.array([0.0, 0.3, 0.3, 0.9])
    scalar_only.calls = 0
    out = field(t, y)
    assert scalar_only.calls == 3  # once per distinct time
    ref = np.stack([ra.AttentionField(math.cos(tk) * P0, beta=2.0)(0.0, y[k]) for k, tk in enumerate(t)])
    assert np.allclose(out, ref, rtol=1e-13, atol=1e-15)
    # a callable right at the probe times but not of the right shape for others falls back
    tricky = lambda t: np.cos(t) * P0[0] if np.ndim(t) == 0 or np.size(t) == 3 else np.zeros(3)  # noqa: E731
    f2 = ra.AttentionField(tricky)
    assert f2._P.mode is not None
    out2 = f2(t, y)
    assert f2._P.mode is None
    ref2 = np.stack([ra.AttentionField(math.cos(tk) * P0[0])(0.0, y[k]) for k, tk in enumerate(t)])
    assert np.allclose(out2, ref2, rtol=1e-13, atol=1e-15)


# --- low temperature -------------------------------------------------------------------------
BETAS = [1.0, 1e3, 1e10, 1e100, 1e300, np.finfo(float).max]


@pytest.mark.parametrize("normalization", ["paper", "softmax", "mean"])
@pytest.mark.parametrize("mask", ["full", "causal"])
def test_beta_up_to_the_float_limit_is_finite_or_raises_naming_beta(normalization, mask):
    """Either a finite tangent field or the ValidationError naming beta, and no RuntimeWarning on
    the way (scores beyond the float range are reported by that error; a score below its row's
    maximum by more than the float range is a weight of 0, the exact limit)."""
    rng = np.random.default_rng(9)
    y = _tokens(rng, (2, 5, 3))
    for P in (np.eye(3), 2.0 * np.eye(3), rng.normal(size=(2, 3, 3)), np.full((3, 3), 1e308)):
        for beta in BETAS:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("error", RuntimeWarning)
                    field = ra.AttentionField(P, mask=mask, normalization=normalization, beta=beta)
                    out = field(0.0, y)
            except ValidationError as exc:
                assert "beta" in str(exc), str(exc)
                continue
            assert np.isfinite(out).all(), (beta, P.ravel()[:2])
            assert np.abs(np.einsum("...i,...i->...", out, y)).max() <= 1e-12 * max(1.0, np.abs(out).max())


def test_softmax_at_huge_beta_is_the_hardmax_limit():
    """beta = 1e300 with P = I: each token attends to itself only (y_i^T y_i = 1 is the largest
    score), so the field vanishes -- finite, not NaN."""
    rng = np.random.default_rng(10)
    y = _tokens(rng, (4, 3))
    out = ra.sa(1e300, 3)(0.0, y)
    assert np.abs(out).max() <= 1e-15  # zero up to the rounding of y_i - (y_i^T y_i) y_i
