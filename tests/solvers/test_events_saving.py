"""Terminal events and failures save the same way in the fixed-step and the adaptive loop (issue 34,
item 6; docs/events.md "Saved values")."""

import numpy as np
import pytest

import riemattn as ra
from riemattn.solvers.events import Event
from riemattn.solvers.steppers import get_stepper

FIXED = [s for s in ra.STEPPERS if not get_stepper(s).adaptive]  # "layer" and the Lie ones included
ADAPTIVE = ["dopri5", "rkmk45"]
T_EVENT = 0.55
FIELD = ra.AttentionField(np.eye(3), beta=1.0)  # "layer" needs an attention field
Y0 = ra.Sphere(2).projection(np.array([[1.0, 0.2, 0.1], [0.3, 1.0, -0.2], [0.1, -0.3, 1.0]]))


def at_time(t_event):
    """Terminal when t crosses t_event: the same stop for every stepper, to event_tol."""
    return Event(lambda t, y: np.zeros(y.shape[0]) + (np.asarray(t) - t_event), terminal=True, name="time")


def solve(stepper, y0=Y0, event=None, **kw):
    kw = ({} if get_stepper(stepper).adaptive else {"dt": 0.1}) | kw
    return ra.integrate(FIELD, y0, (0.0, 2.0), stepper, events=event or at_time(T_EVENT), event_tol=1e-12, **kw)


@pytest.mark.parametrize("stepper", FIXED + ADAPTIVE)
def test_single_trajectory_ends_at_the_event(stepper):
    """No saveat, one trajectory: every step, the last one ending at the event with the event state
    (rk4 used to end at the next grid time, 2.8 in the issue, with y[-1] NaN)."""
    sol = solve(stepper)
    assert sol.success and int(sol.per_trajectory.status) == 2
    assert np.all(np.diff(sol.t) > 0) and np.isfinite(sol.y).all()
    assert sol.t[-1] == sol.events.t_stop and abs(sol.t[-1] - T_EVENT) <= 1e-11
    np.testing.assert_array_equal(sol.y[-1], sol.events.y[0])
    assert sol.t[-2] < T_EVENT


@pytest.mark.parametrize("stepper", FIXED + ADAPTIVE)
def test_single_trajectory_save_fn_ends_at_the_event(stepper):
    save_fn = lambda t, y: {"x": y[..., 0, 0], "t": np.asarray(t, dtype=float)}
    sol = solve(stepper, save_fn=save_fn)
    ref = solve(stepper)
    assert sol.y is None and sol.t[-1] == sol.events.t_stop
    np.testing.assert_array_equal(sol.observables["x"], ref.y[:, 0, 0])
    np.testing.assert_array_equal(sol.observables["t"], sol.t)


@pytest.mark.parametrize("stepper", FIXED + ADAPTIVE)
@pytest.mark.parametrize("batched", [False, True])
def test_saveat_values_nan_after_the_stop_event_state_at_it(stepper, batched):
    """saveat: the saved times are saveat for every stepper; values after the stop are NaN, a save
    time equal to the stop time holds the event state (fixed steps land on t = 1.0 exactly, where
    g = t - 1 is exactly 0: the crossing is located there)."""
    y0 = np.stack([Y0, Y0[::-1]]) if batched else Y0
    saveat = [0.0, 0.5, 1.0, 1.5, 2.0]
    sol = solve(stepper, y0, event=at_time(1.0), saveat=saveat)
    np.testing.assert_array_equal(sol.t, saveat)
    assert np.isfinite(sol.y[:3]).all() and np.isnan(sol.y[3:]).all()
    if not get_stepper(stepper).adaptive:  # the event lies on the grid: located exactly
        assert np.all(sol.events.t_stop == 1.0)
        np.testing.assert_array_equal(sol.y[2], sol.events.y[..., 0, :, :])
    obs = solve(stepper, y0, event=at_time(1.0), saveat=saveat, save_fn=lambda t, y: y[..., 0, 0])
    np.testing.assert_array_equal(obs.observables["value"], sol.y[..., 0, 0])


@pytest.mark.parametrize("stepper", FIXED)
def test_batch_grid_ends_where_the_last_trajectory_stops(stepper):
    """No saveat, a batch of fixed steps: the shared grid up to the last grid time at which some
    trajectory is still running; NaN for a trajectory after its own stop (the events hold the
    stop states). Trajectory 1 stops at 0.55, trajectory 0 at 1.25."""
    # the fixed loop hands g the whole batch, in order: one stop time per row
    g = Event(lambda t, y: np.asarray(t) - np.array([1.25, T_EVENT]), terminal=True)
    y0 = np.stack([Y0, Y0[[1, 0, 2]]])
    sol = ra.integrate(FIELD, y0, (0.0, 2.0), stepper, dt=0.1, events=g, event_tol=1e-12)
    np.testing.assert_allclose(sol.events.t_stop, [1.25, T_EVENT], atol=1e-11)
    np.testing.assert_allclose(sol.t, np.arange(13) * 0.1, rtol=0, atol=1e-15)  # 1.2 last: 1.3 > 1.25
    assert np.isfinite(sol.y[:, 0]).all()
    assert np.isfinite(sol.y[:6, 1]).all() and np.isnan(sol.y[6:, 1]).all()  # 0.5 <= 0.55 < 0.6


@pytest.mark.parametrize("stepper", ["rk4", "cf4", "dopri5"])
def test_failed_trajectory_is_nan_after_its_failure_not_frozen(stepper):
    """A trajectory whose field becomes NaN (t > 0.3) has NaN at later save times; the fixed loop
    used to save its frozen last state there. The other trajectory runs on."""
    def f(t, y):
        out = np.cross([0.0, 0.0, 1.0], y)
        t = np.broadcast_to(np.asarray(t, dtype=float), y.shape[:-2])
        bad = (t > 0.3) & (y[..., 0, 2] > 0)  # trajectory 0 only (its token 0 has z > 0)
        return np.where(bad[..., None, None], np.nan, out)
    M = ra.Sphere(2)
    y0 = M.projection(np.array([[[0.6, 0.0, 0.8]], [[0.6, 0.0, -0.8]]]))
    kw = {} if get_stepper(stepper).adaptive else {"dt": 0.1}
    sol = ra.integrate(ra.VectorField(f, M), y0, (0.0, 1.0), stepper, saveat=[0.0, 0.2, 0.6, 1.0], **kw)
    assert list(sol.per_trajectory.status) == [-3, 0]
    assert np.isfinite(sol.y[:2, 0]).all() and np.isnan(sol.y[2:, 0]).all()
    assert np.isfinite(sol.y[:, 1]).all()
    single = ra.integrate(ra.VectorField(f, M), y0[0], (0.0, 1.0), stepper, **kw)
    assert single.t[-1] <= 0.4 and np.isfinite(single.y).all()  # the failed step is not saved
