"""VectorField in an adaptive batch: how ``func`` gets the times (detection), and ``nfev`` counting
the user's calls (issue 34, item 2)."""

import math

import numpy as np
import pytest

import riemattn as ra
from riemattn.solvers.steppers import get_stepper

S2 = ra.Sphere(2)
_rng = np.random.default_rng(3)
P = _rng.uniform(-1, 1, size=(3, 3))
Y0 = S2.projection(np.abs(_rng.normal(size=(12, 4, 3))) + 0.1)  # 12 trajectories, adaptive steps differ


def attention(t, y):
    """Time-independent (sigmoid attention, docs/testing.md)."""
    A = 1.0 / (1.0 + np.exp(-(y @ P @ np.swapaxes(y, -1, -2)))) / y.shape[-2]
    return S2.tangent(y, A @ y)


def counted(func):
    calls = []

    def f(t, y):
        calls.append(np.shape(t))
        return func(t, y)
    return f, calls


def _solve(func, stepper="dopri5", **kw):
    field = ra.VectorField(func, S2, **kw)
    sol = ra.integrate(field, Y0, (0.0, 2.0), stepper, rtol=1e-9, atol=1e-9)
    assert sol.success, sol.message
    return field, sol


# func(t, y) written three ways: broadcasting t as y.shape[:-2] would be wrong (t of shape (k,)
# against (k, l, d)) for the second, which needs t[..., None, None]; the third takes floats only.
def modulated_column(t, y):
    return (1.0 + 0.5 * np.cos(3.0 * t)) * attention(t, y)


def modulated_scalar(t, y):
    return (1.0 + 0.5 * math.cos(3.0 * t)) * attention(t, y)


def test_time_independent_func_is_called_once_per_stage():
    """The issue's reproduction (B trajectories, dopri5): the default called ``func`` once per
    trajectory and stage (thousands of calls for a few hundred batch evaluations) while
    ``sol.nfev`` reported the batch evaluations. Detected, it costs the flag's calls plus the
    detection's 3 reference calls and 1 probe; nfev is the calls."""
    f, calls = counted(attention)
    field, sol = _solve(f)
    ref_f, ref_calls = counted(attention)
    _, ref = _solve(ref_f, time_vectorized=True)
    assert field.time_mode == "array"
    assert len(calls) == len(ref_calls) + 4 and sol.nfev == len(calls)
    # the same solution: the per-row arithmetic is the same (rounding of batched products aside)
    np.testing.assert_allclose(sol.y, ref.y, rtol=0, atol=1e-12)


@pytest.mark.parametrize("func, mode", [(modulated_column, "column"), (modulated_scalar, "per-time")])
def test_time_dependent_func_detected_or_called_per_time(func, mode):
    """``np.cos(3 t) * y`` needs t of shape (k, 1, 1): detected as "column"; ``math.cos(t)``
    raises on arrays: called per time. Both give the per-time solution (time_vectorized=False)."""
    f, calls = counted(func)
    field, sol = _solve(f)
    assert field.time_mode == mode
    assert sol.nfev == len(calls)
    _, ref = _solve(func, time_vectorized=False)
    np.testing.assert_allclose(sol.y, ref.y, rtol=0, atol=1e-12)
    arrays = [s for s in calls if s != ()]
    assert arrays[0] == (3,)  # the probe with t of shape (3,) (raises or differs), then (3, 1, 1)
    if mode == "column":
        assert all(len(s) == 3 and s[1:] == (1, 1) for s in arrays[1:])
    else:
        assert arrays == [(3,), (3, 1, 1)]  # both probes raised


def test_vectorised_call_that_later_raises_falls_back_per_time():
    """A func that accepts array times at first and raises on them later (t > 1) is then called per
    time, for good, and the solve is the per-time one."""
    def picky(t, y):
        if np.ndim(t) and np.max(t) > 1.0:
            raise ValueError("scalar t only beyond t = 1")
        return attention(t, y)
    field, sol = _solve(picky)
    assert field.time_mode == "per-time"
    _, ref = _solve(attention, time_vectorized=False)
    np.testing.assert_allclose(sol.y, ref.y, rtol=0, atol=1e-12)


@pytest.mark.parametrize("time_vectorized", [None, False, True])
@pytest.mark.parametrize("stepper", [s for s in ra.STEPPERS if s != "layer"])
def test_nfev_counts_the_users_calls(stepper, time_vectorized):
    """``sol.nfev`` is the number of calls of the user's func for every stepper (stages, initial
    step, Jacobians of the stiff steppers, dense output), whichever way the times are passed."""
    f, calls = counted(modulated_column)
    field = ra.VectorField(f, S2, time_vectorized=time_vectorized)
    if time_vectorized is True:  # the whole batch with an array of times: t of shape (B,)
        field = ra.VectorField(lambda t, y: f(np.asarray(t)[..., None, None] if np.ndim(t) else t, y), S2,
                               time_vectorized=True)
    kw = {} if get_stepper(stepper).adaptive else {"dt": 0.25}
    sol = ra.integrate(field, Y0[:4], (0.0, 1.0), stepper, saveat=[0.0, 0.3, 1.0], **kw)
    assert sol.success and sol.nfev == len(calls) == field.n_calls > 0


def test_docs_testing_example_uses_the_fast_default():
    """docs/testing.md's sigmoid-attention field (time-independent) is detected as taking arrays."""
    field = ra.VectorField(attention, S2)
    ra.integrate(field, Y0[:3], (0.0, 1.0), "dopri5")
    assert field.time_mode == "array"
