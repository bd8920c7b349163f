"""Trajectory.interpolate (issue 41, "Found" 1-3): the dense output after "auto", at t0 for the
Rosenbrock steppers, and the cost of many query times.

References: SciPy's DOP853 at its tightest tolerances on the lifted field (tests/problems.py), a
scalar count of field calls, and the stepper's own single-time evaluation.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import riemattn as ra
from riemattn.errors import UnsupportedByEngine

from problems import lifted_reference

EPS = np.finfo(float).eps


def _usa9():
    y0 = ra.Sphere(2).projection(np.random.default_rng(0).normal(size=(8, 3)))
    return ra.usa(9.0, 3), y0


def test_auto_dense_output_follows_the_method_of_each_step():
    """Found 1: usa(9, 3), 8 tokens, t in (0, 20): "auto" takes most steps with RODAS4P; the dense
    output re-stepped them with DOPRI5 (interpolate(20) was 1.45 away from y(20)). Now: exact at
    the step ends, and inside every step as accurate as the solve itself against a tight
    reference."""
    field, y0 = _usa9()
    sol = ra.integrate(field, y0, (0.0, 20.0), "auto", rtol=1e-8, atol=1e-10, dense_output=True, engine="numpy")
    np.testing.assert_array_equal(sol.interpolate(20.0), sol.y[-1])
    np.testing.assert_array_equal(sol.interpolate(sol.t), sol.y)
    assert (sol.dense.states[:, 0] > 0.5).sum() > sol.n_steps / 4  # RODAS4P steps are there to test
    # inside the steps: the midpoints of every 8th step against SciPy's DOP853 at 2.5e-14
    mid = 0.5 * (sol.t[1:] + sol.t[:-1])[::8]
    ref_ends = lifted_reference(field, y0, 20.0, t_eval=sol.t[::8])
    ref_mid = lifted_reference(field, y0, 20.0, t_eval=mid)
    err_ends = np.abs(sol.y[::8] - ref_ends).max()  # the solve's own global error
    err_mid = np.abs(sol.interpolate(mid) - ref_mid).max()
    # the dense output adds at most a local error (<= the tolerance, 1e-8 relative) to the error
    # the solve carries at the step's start: 2 x the worst error at the ends + 10 (atol + rtol)
    assert err_mid <= 2 * err_ends + 10 * (1e-10 + 1e-8), (err_mid, err_ends)


@pytest.mark.parametrize("stepper", ["rodas4", "rodas4p"])
def test_rosenbrock_dense_output_at_t0_is_y0_without_warnings(stepper):
    """Found 2: interpolate(t0) was NaN with a divide-by-zero warning (a step of h = 0)."""
    field, y0 = _usa9()
    sol = ra.integrate(field, y0, (0.0, 2.0), stepper, rtol=1e-6, atol=1e-8, dense_output=True, engine="numpy")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(sol.interpolate(0.0), y0)
        np.testing.assert_array_equal(sol.interpolate(np.array([0.0, 2.0])), sol.y[[0, -1]])


@pytest.mark.parametrize("name", sorted(ra.STEPPERS))
def test_a_step_of_size_zero_is_the_identity(name):
    """Every registered stepper: a step of h = 0 returns y (to rounding, finite, no warning) --
    what a dense output at a step's start asks of it."""
    field, y0 = _usa9()
    st = ra.STEPPERS[name]()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = st.step(field, 0.0, y0, 0.0)
    np.testing.assert_allclose(res.y, y0, rtol=0, atol=8 * EPS)


def test_many_query_times_cost_a_bounded_number_of_field_calls():
    """Found 3: 84 000 query times took one whole-batch step each (64 s). Now the steps that
    contain queries are taken again as one batch: the field is called a number of times that does
    not grow with the number of queries (a VectorField counts the calls of its function)."""
    field, y0 = _usa9()
    counted = ra.VectorField(lambda t, y: field(t, y), ra.Sphere(2))
    sol = ra.integrate(counted, y0, (0.0, 2.0), "dopri5", rtol=1e-8, atol=1e-10, dense_output=True, engine="numpy")
    times = np.linspace(0.0, 2.0, 84_000)
    before = counted.n_calls
    got = sol.interpolate(times)
    calls = counted.n_calls - before
    # DOPRI5: 7 evaluations for one batched re-take of the steps (one chunk at this size); the
    # old loop made 84 000 x 6
    assert calls <= 7 * 2, calls
    assert np.isfinite(got).all()
    # the batched evaluation equals one query at a time (the same step, other batch sizes: rounding)
    pick = np.arange(0, len(times), 7919)
    one = np.stack([sol.interpolate(s) for s in times[pick]])
    np.testing.assert_allclose(got[pick], one, rtol=0, atol=64 * EPS)


def test_the_compiled_engine_refuses_dense_output():
    """The compiled engine keeps no step log: engine="compiled" with dense_output raises
    UnsupportedByEngine naming it, and "auto" runs such a call on the NumPy engine."""
    field, y0 = _usa9()
    with pytest.raises(UnsupportedByEngine, match="dense_output"):
        ra.integrate(field, y0, (0.0, 1.0), "auto", dense_output=True, engine="compiled")
    sol = ra.integrate(field, y0, (0.0, 1.0), "auto", dense_output=True, engine="auto")
    assert sol.engine == "numpy" and math.isfinite(float(sol.interpolate(0.5).sum()))


@pytest.mark.parametrize("stepper", ["auto", "rk4"])
def test_a_field_without_take_is_interpolated_on_its_whole_batch(stepper):
    """A field that cannot be restricted to some trajectories (``take`` None: a time-vectorized
    VectorField) is stepped on its whole batch per query time: the same values as the restricted
    evaluation of the same solve (``take`` self), to rounding."""
    field, y0 = _usa9()
    y0 = np.stack([y0, y0[::-1]])  # a batch of 2
    kw = dict(rtol=1e-8, atol=1e-10) if stepper == "auto" else dict(dt=0.05)
    times = np.linspace(0.0, 1.0, 23)
    out = []
    for tv in (False, True):
        vf = ra.VectorField(lambda t, y: field(t, y), ra.Sphere(2), time_vectorized=tv)
        assert (vf.take(np.arange(2), (2,)) is None) == tv
        sol = ra.integrate(vf, y0, (0.0, 1.0), stepper, dense_output=True, engine="numpy", **kw)
        out.append(sol.interpolate(times))
    assert np.isfinite(out[0]).all()
    np.testing.assert_allclose(out[1], out[0], rtol=0, atol=64 * EPS)
