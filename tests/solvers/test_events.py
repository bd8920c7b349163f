"""Events of integrate(): crossing times against independent references, terminal stops, direction,
several crossings in one step, results layout, bad input; ready-made theory events."""

import numpy as np
import pytest
import torch
from scipy.cluster.hierarchy import linkage
from scipy.integrate import solve_ivp
from scipy.linalg import expm
from scipy.optimize import brentq
from scipy.spatial.distance import pdist

import riemattn as ra
from riemattn.analysis import events as aev
from riemattn.analysis.diagnostics import cluster_count, in_common_hemisphere, misalignment
from riemattn.analysis.gradients import energy
from riemattn.analysis.theory import equiangular_rate
from riemattn.dynamics.glpr import sa
from riemattn.dynamics.fields import LinearField
from riemattn.errors import InputTypeError, ValidationError
from riemattn.geometry.manifolds import Sphere
from riemattn.solvers.events import TERMINAL, Event

TOL = 1e-8  # event_tol of the accuracy tests
STEPPERS = {"rk4": {"dt": 0.01}, "cf4": {"dt": 0.02}, "dopri5": {"rtol": 1e-11, "atol": 1e-13},
            "dop853": {"rtol": 1e-11, "atol": 1e-13}, "rkmk45": {"rtol": 1e-11, "atol": 1e-13}}
BACKENDS = ["numpy", "torch"]

# a rotation about a generic axis: y(t) = expm(t A) y0 exactly
_axis = np.array([1.0, 2.0, 2.0]) / 3.0
A_ROT = 1.3 * np.array([[0, -_axis[2], _axis[1]], [_axis[2], 0, -_axis[0]], [-_axis[1], _axis[0], 0]])
Y0_ROT = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
A_VEC = np.array([0.2, -0.9, 0.3])
LEVEL = 0.1


def _as(backend, y):
    return torch.tensor(y) if backend == "torch" else y


def _rotation_crossings(t1):
    """Times in (0, t1) where <a, token 0 of expm(t A) y0> = LEVEL, by brentq on the exact flow."""
    def h(t):
        return A_VEC @ (expm(t * A_ROT) @ Y0_ROT[0]) - LEVEL
    grid = np.linspace(0.0, t1, 2001)
    vals = np.array([h(t) for t in grid])
    idx = np.flatnonzero(np.sign(vals[:-1]) != np.sign(vals[1:]))
    return np.array([brentq(h, grid[i], grid[i + 1], xtol=1e-15) for i in idx])


def _rot_event(**kw):
    return Event(lambda t, y: y[..., 0, :] @ _as("torch" if torch.is_tensor(y) else "numpy", A_VEC) - LEVEL, **kw)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("stepper", list(STEPPERS))
def test_linear_field_crossings_match_exact_flow(stepper, backend):
    field = LinearField(A_ROT, Sphere(2))
    exact = _rotation_crossings(6.0)
    assert len(exact) >= 2
    # rkmk45 is exact on a linear field and takes steps longer than the gap between two crossings:
    # interior samples find them (the others step finely enough without)
    samples = 3 if stepper == "rkmk45" else 0
    sol = ra.integrate(field, _as(backend, Y0_ROT), (0.0, 6.0), stepper, events=_rot_event(samples=samples),
                       event_tol=TOL, **STEPPERS[stepper])
    ev = sol.events
    assert int(ev.count) == len(exact)
    assert np.max(np.abs(ev.t - exact)) <= 10 * TOL
    # the reported state has crossed, and is the exact flow at the reported time
    y_ev = np.asarray(ev.y)
    for k, t in enumerate(ev.t):
        assert np.allclose(y_ev[k], (expm(t * A_ROT) @ Y0_ROT.T).T, atol=1e-7)


def _equiangular_reference(beta, n, level):
    def rhs(t, r):
        return [equiangular_rate(min(r[0], 1.0), beta, n)]

    def ev(t, r):
        return r[0] - level
    ev.direction = 1
    sol = solve_ivp(rhs, (0.0, 10.0), [0.0], method="DOP853", events=ev, rtol=1e-13, atol=1e-15)
    return float(sol.t_events[0][0])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("stepper", list(STEPPERS))
def test_equiangular_level_crossing_matches_scipy_events(stepper, backend):
    n, beta, level = 4, 1.0, 0.5
    ref = _equiangular_reference(beta, n, level)

    def rho(t, y):
        return (y[..., 0, :] * y[..., 1, :]).sum(-1) - level

    sol = ra.integrate(sa(beta, n), _as(backend, np.eye(n)), (0.0, 1.5), stepper,
                       events=Event(rho, direction="up", terminal=True), event_tol=TOL, **STEPPERS[stepper])
    assert sol.success and int(sol.per_trajectory.status) == TERMINAL
    assert abs(float(sol.events.t_stop) - ref) <= 10 * TOL
    assert abs(float(sol.events.t[0]) - ref) <= 10 * TOL


@pytest.fixture(scope="module")
def consensus_batch():
    """1000 trajectories, each its own beta, 4 tokens on S^2, a terminal consensus event."""
    rng = np.random.default_rng(3)
    B, n, d = 1000, 4, 3
    betas = rng.uniform(0.0, 4.0, B)
    y0 = rng.standard_normal((B, n, d))
    y0 /= np.linalg.norm(y0, axis=-1, keepdims=True)
    field = ra.AttentionField(np.eye(d)[None], beta=betas)
    kw = {"rtol": 1e-8, "atol": 1e-10, "event_tol": 1e-9}
    event = aev.consensus(1e-3)
    with_ev = ra.integrate(field, y0, (0.0, 60.0), "dopri5", events=event, **kw)
    without = ra.integrate(field, y0, (0.0, 60.0), "dopri5", **kw)
    return {"betas": betas, "y0": y0, "event": event, "kw": kw, "with_ev": with_ev, "without": without, "d": d}


def test_batch_terminal_consensus_each_stops_at_its_own_time(consensus_batch):
    c = consensus_batch
    sol = c["with_ev"]
    status = sol.per_trajectory.status
    stopped = status == TERMINAL
    assert stopped.mean() > 0.8 and np.all(status[~stopped] == 0)
    # those that ran to t1 never reached the threshold (checked on the solve without the event)
    assert np.all(misalignment(c["without"].y[-1][~stopped]) > 1e-3)
    t_stop = sol.events.t_stop
    assert np.all(np.isnan(t_stop[~stopped]))
    assert np.ptp(t_stop[stopped]) > 1.0  # the trajectories stop at different times
    # the final states: misalignment at the threshold (the located crossing, down to event_tol)
    y_end = sol.events.y[np.arange(1000), 0]
    assert np.allclose(misalignment(y_end[stopped]), 1e-3, atol=1e-6)
    # equal to the same trajectory solved alone (8 of them, spread over beta)
    for i in np.argsort(c["betas"])[:: 1000 // 8][:8]:
        if not stopped[i]:
            continue
        alone = ra.integrate(ra.AttentionField(np.eye(c["d"])[None], beta=float(c["betas"][i])), c["y0"][i],
                             (0.0, 60.0), "dopri5", events=c["event"], **c["kw"])
        assert abs(float(alone.events.t_stop) - t_stop[i]) <= 1e-9
    # less work than without the event: stopped trajectories cost nothing after their stop
    n_with = int(sol.per_trajectory.nfev.sum())
    n_without = int(c["without"].per_trajectory.nfev.sum())
    assert n_with < 0.8 * n_without, (n_with, n_without)


def test_direction_filters_crossings():
    field = LinearField(A_ROT, Sphere(2))
    exact = _rotation_crossings(6.0)
    g0 = A_VEC @ Y0_ROT[0] - LEVEL
    signs = [(-1) ** k * (1 if g0 < 0 else -1) for k in range(len(exact))]  # +1: up
    for direction, want in (("up", 1), ("down", -1)):
        sol = ra.integrate(field, Y0_ROT, (0.0, 6.0), "dop853", rtol=1e-11, atol=1e-13,
                           events=_rot_event(direction=direction, samples=3), event_tol=TOL)
        expected = exact[np.array(signs) == want]
        assert int(sol.events.count) == len(expected) >= 1
        assert np.max(np.abs(sol.events.t - expected)) <= 10 * TOL


def _two_crossings_case():
    """Token 0 rotates in the (x, y) plane from angle -0.5: x(t) = cos(t - 0.5) equals cos(0.4) at
    t = 0.1 (up) and t = 0.9 (down), both inside the first step of size 1."""
    A = np.array([[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    y0 = np.array([[np.cos(-0.5), np.sin(-0.5), 0.0]])
    return LinearField(A, Sphere(2)), y0, lambda t, y: y[..., 0, 0] - np.cos(0.4)


def test_two_crossings_in_one_fixed_step():
    field, y0, g = _two_crossings_case()
    # known limit: without interior samples the two crossings cancel (g < 0 at both ends)
    sol = ra.integrate(field, y0, (0.0, 1.0), "cf4", dt=1.0, events=Event(g), event_tol=TOL)
    assert int(sol.events.count) == 0
    # with 3 interior samples (sub-intervals of 1/4) both are found, in time order, with direction
    sol = ra.integrate(field, y0, (0.0, 1.0), "cf4", dt=1.0, events=[Event(g, samples=3, name="x")],
                       event_tol=TOL)
    assert int(sol.events.count) == 2 and sol.n_steps == 1
    assert np.allclose(sol.events.t, [0.1, 0.9], atol=10 * TOL)  # cf4 is exact on a linear field
    up = ra.integrate(field, y0, (0.0, 1.0), "cf4", dt=1.0, events=Event(g, samples=3, direction=1),
                      event_tol=TOL)
    assert np.allclose(up.events.t, [0.1], atol=10 * TOL)
    # rk4 (dense output: a fresh step of size theta h) finds both too; its state at t is one rk4
    # step of size t on y' = A y, pi(sum_k (tA)^k / k! y0): the crossings of that, by brentq
    sol = ra.integrate(field, y0, (0.0, 1.0), "rk4", dt=1.0, events=Event(g, samples=3), event_tol=TOL)

    def h(t):
        M = sum(np.linalg.matrix_power(t * field.A, k) / np.prod(np.arange(1, k + 1)) for k in range(5))
        y = M @ y0[0]
        return y[0] / np.linalg.norm(y) - np.cos(0.4)
    ref = [brentq(h, 0.0, 0.5, xtol=1e-14), brentq(h, 0.5, 1.0, xtol=1e-14)]
    assert int(sol.events.count) == 2 and np.allclose(sol.events.t, ref, atol=10 * TOL)


@pytest.mark.parametrize("stepper", ["cf4", "dopri5"])
def test_terminal_kth_crossing_truncates_saves_and_drops_later_crossings(stepper):
    field = LinearField(A_ROT, Sphere(2))
    exact = _rotation_crossings(6.0)
    y0 = np.stack([Y0_ROT, Y0_ROT])
    kw = {"dt": 0.1} if stepper == "cf4" else STEPPERS[stepper]  # cf4: exact on a linear field
    ev = [_rot_event(terminal=2, samples=3, name="a"), _rot_event(samples=3, name="b")]
    save = np.linspace(0.0, 6.0, 13)
    sol = ra.integrate(field, y0, (0.0, 6.0), stepper, saveat=save, events=ev, event_tol=TOL, **kw)
    assert list(sol.per_trajectory.status) == [TERMINAL, TERMINAL] and sol.success
    assert np.allclose(sol.events.t_stop, exact[1], atol=10 * TOL)
    # both events recorded at both crossings (at equal times in the order of the events), the
    # later crossings of b dropped: they come after the stop
    assert list(sol.events.count) == [4, 4]
    assert np.array_equal(sol.events.which[0], [0, 1, 0, 1])
    assert np.allclose(sol.events.of("b")[0], exact[:2], atol=10 * TOL)
    after = save > exact[1]
    assert np.all(np.isnan(sol.y[after])) and np.all(np.isfinite(sol.y[~after]))
    assert "stopped by a terminal event" in sol.message
    ds = sol.to_xarray()
    assert list(ds.event.values) == ["a", "b"] and ds.event_t.dims == ("batch", "crossing")
    assert ds.event_y.shape == (2, 4, 2, 3)


def test_save_fn_observables_at_events():
    field = LinearField(A_ROT, Sphere(2))
    sol = ra.integrate(field, Y0_ROT, (0.0, 6.0), "dop853", rtol=1e-10, atol=1e-12,
                       events=_rot_event(samples=3), event_tol=TOL,
                       save_fn=lambda t, y: {"g": y[..., 0, :] @ A_VEC, "t": t})
    ev = sol.events
    assert ev.y is None and set(ev.observables) == {"g", "t"}
    assert np.allclose(ev.observables["g"], LEVEL, atol=1e-7)
    assert np.array_equal(ev.observables["t"], ev.t)


def test_events_that_never_fire_change_nothing():
    field = LinearField(A_ROT, Sphere(2))
    plain = ra.integrate(field, Y0_ROT, (0.0, 3.0), "dopri5", saveat=[0, 1, 2, 3])
    ev = ra.integrate(field, Y0_ROT, (0.0, 3.0), "dopri5", saveat=[0, 1, 2, 3],
                      events=Event(lambda t, y: y[..., 0, 0] + 2.0))
    assert np.array_equal(plain.y, ev.y) and plain.nfev == ev.nfev and int(ev.events.count) == 0
    assert ev.events.t.shape == (0,) and ev.message == plain.message


def test_scipy_style_callable_and_bad_input():
    field = LinearField(A_ROT, Sphere(2))

    def g(t, y):
        return y[..., 0, :] @ A_VEC - LEVEL
    g.terminal, g.direction = True, -1.0
    sol = ra.integrate(field, Y0_ROT, (0.0, 6.0), "dop853", events=g, event_tol=TOL)
    assert sol.events.names == ("g",) and int(sol.per_trajectory.status) == TERMINAL
    with pytest.raises(InputTypeError, match="events"):
        ra.integrate(field, Y0_ROT, (0.0, 1.0), "dop853", events=3)
    with pytest.raises(ValidationError, match="direction"):
        Event(g, direction="sideways")
    with pytest.raises(ValidationError, match="terminal"):
        Event(g, terminal=-1)
    with pytest.raises(ValidationError, match="samples"):
        Event(g, samples=1.5)
    with pytest.raises(ValidationError, match="event_tol"):
        ra.integrate(field, Y0_ROT, (0.0, 1.0), "dop853", events=g, event_tol=-1.0)
    with pytest.raises(ValidationError, match="one value per trajectory"):
        ra.integrate(field, Y0_ROT, (0.0, 1.0), "dop853", events=lambda t, y: y[..., 0, :])
    with pytest.raises(ValidationError, match="unique"):
        ra.integrate(field, Y0_ROT, (0.0, 1.0), "dop853", events=[Event(g, name="a"), Event(g, name="a")])


# ---------------------------------------------------------------------------------------------
# ready-made events (riemattn.analysis.events)
# ---------------------------------------------------------------------------------------------
def test_merge_heights_match_scipy_single_linkage_and_cluster_count():
    rng = np.random.default_rng(0)
    y = rng.standard_normal((20, 7, 3))
    y /= np.linalg.norm(y, axis=-1, keepdims=True)
    H = aev.merge_heights(y)
    ref = np.array([np.sort(linkage(pdist(x), "single")[:, 2])[::-1] for x in y])
    assert np.allclose(H, ref, atol=1e-12)
    assert np.allclose(aev.merge_heights(torch.tensor(y)).numpy(), H, atol=1e-12)
    for tol in (0.3, 0.8, 1.2):
        assert np.array_equal(1 + (H > tol).sum(-1), cluster_count(y, tol))


def test_cluster_merge_events_locate_count_changes():
    """Merge times from the events agree with the cluster count on a fine saved grid."""
    rng = np.random.default_rng(1)
    y0 = rng.standard_normal((6, 2))
    y0 /= np.linalg.norm(y0, axis=-1, keepdims=True)
    tol = np.sqrt(2e-3)
    events = [aev.cluster_merge(tol, c) for c in range(1, 6)]
    save = np.linspace(0.0, 30.0, 3001)
    sol = ra.integrate(sa(4.0, 2), y0, (0.0, 30.0), "dop853", rtol=1e-10, atol=1e-12, saveat=save,
                       events=events, event_tol=1e-9)
    counts = cluster_count(sol.y, tol)
    for c, name in zip(range(1, 6), sol.events.names):
        times = sol.events.of(name)
        first = save[np.argmax(counts <= c)] if (counts <= c).any() else None
        if first is None:
            assert times.size == 0
            continue
        assert times.size == 1  # merges are permanent here
        assert first - 0.01 - 1e-9 <= times[0] <= first + 1e-9


def test_consensus_hemisphere_energy_lyapunov_events():
    rng = np.random.default_rng(2)
    y0 = rng.standard_normal((5, 3)) + np.array([0.0, 0.0, 3.0])
    y0 /= np.linalg.norm(y0, axis=-1, keepdims=True)
    field = sa(1.0, 3)
    v = np.array([0.0, 0.0, 1.0])
    E0, V0 = float(energy(y0, 1.0)), float(np.max(1 - y0 @ v))
    events = [aev.consensus(1e-4, measure="distance", terminal=False), aev.leave_hemisphere(v),
              aev.leave_common_hemisphere(), aev.energy_level(1.0, E0 + 0.01),
              aev.lyapunov_level(v, 0.5 * V0)]
    sol = ra.integrate(field, y0, (0.0, 20.0), "dop853", rtol=1e-10, atol=1e-12, events=events,
                       event_tol=1e-9)
    ev = sol.events
    # tokens start in the hemisphere of v and stay in it (hemisphere theorem): those never fire
    assert in_common_hemisphere(y0) and np.all(y0 @ v > 0)
    assert ev.of("leave_hemisphere").size == 0 and ev.of("leave_common_hemisphere").size == 0
    for name, fn, value in (("consensus_distance", lambda y: np.max(np.linalg.norm(y - y[:1], axis=-1)), 1e-4),
                            ("energy_level", lambda y: energy(y, 1.0), E0 + 0.01),
                            ("lyapunov_level", lambda y: np.max(1 - y @ v), 0.5 * V0)):
        k = ev.names.index(name)
        (i,) = np.flatnonzero(ev.which == k)
        assert abs(float(fn(ev.y[i])) - value) < 1e-6


def test_leave_hemisphere_fires_for_a_tilted_direction():
    field = LinearField(A_ROT, Sphere(2))
    v = np.array([1.0, 0.0, 0.0])
    sol = ra.integrate(field, Y0_ROT[:1] * 0 + np.array([[1.0, 0.0, 0.0]]), (0.0, 6.0), "dop853",
                       rtol=1e-11, atol=1e-13, events=aev.leave_hemisphere(v, terminal=True), event_tol=TOL)
    t = float(sol.events.t_stop)
    y = expm(t * A_ROT) @ np.array([1.0, 0.0, 0.0])
    assert abs(y[0]) < 1e-7 and int(sol.per_trajectory.status) == TERMINAL
    with pytest.raises(ValidationError, match="v must"):
        aev.leave_hemisphere(np.zeros((2, 2)))
    with pytest.raises(ValidationError, match="threshold"):
        aev.consensus(0.0)
    with pytest.raises(ValidationError, match="clusters"):
        aev.cluster_merge(0.1, 0)


# ---------------------------------------------------------------------------------------------
# Trajectory.interpolate (dense output of the whole solve)
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("stepper", ["rk4", "dop853", "rkmk45"])
def test_interpolate_matches_exact_flow_and_stops_with_terminal_events(stepper, backend):
    field = LinearField(A_ROT, Sphere(2))
    y0 = np.stack([Y0_ROT, Y0_ROT[::-1]])
    kw = STEPPERS[stepper]
    stop = Event(lambda t, y: y[..., 0, 0] - 0.5, terminal=True)  # first token's x falls to 1/2
    sol = ra.integrate(field, _as(backend, y0), (0.0, 4.0), stepper, dense_output=True, events=stop,
                       event_tol=TOL, **kw)
    ts = np.linspace(0.0, 4.0, 9)
    u = np.asarray(sol.interpolate(ts))
    assert u.shape == (9, 2, 2, 3)
    exact = np.stack([np.einsum("ij,blj->bli", expm(t * A_ROT), y0) for t in ts])
    t_stop = sol.events.t_stop
    for b in range(2):
        before = ts <= t_stop[b]
        assert np.max(np.abs(u[before, b] - exact[before, b])) < 1e-8
        assert np.all(np.isnan(u[~before, b]))
    assert np.asarray(sol.interpolate(0.5)).shape == (2, 2, 3)


def test_interpolate_errors():
    field = LinearField(A_ROT, Sphere(2))
    sol = ra.integrate(field, Y0_ROT, (0.0, 1.0), "rk4", dt=0.1)
    with pytest.raises(ValidationError, match="dense_output=True"):
        sol.interpolate(0.5)
    sol = ra.integrate(field, Y0_ROT, (0.0, 1.0), "rk4", dt=0.1, dense_output=True)
    with pytest.raises(ValidationError, match="solved interval"):
        sol.interpolate(1.5)
    att = ra.AttentionField(np.eye(3)[None])
    sol = ra.integrate(att, Y0_ROT, (0.0, 1.0), "layer", dt=0.5, dense_output=True)
    with pytest.raises(ValidationError, match="no dense output"):
        sol.interpolate(0.5)


def test_to_numpy_converts_event_states_and_dense_output():
    field = LinearField(A_ROT, Sphere(2))
    sol = ra.integrate(field, torch.tensor(Y0_ROT), (0.0, 6.0), "dop853", rtol=1e-10, atol=1e-12,
                       events=_rot_event(), dense_output=True).to_numpy()
    assert isinstance(sol.events.y, np.ndarray) and isinstance(sol.interpolate(1.0), np.ndarray)


def test_fixed_steps_2d_batch_each_trajectory_stops_at_its_own_time():
    """A (2, 3) batch of tokens at angles a on the rotating circle: x = cos(t + a) falls to 0.3 at
    t = arccos(0.3) - a; saves after the stop are NaN, the dense output too."""
    A = np.array([[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    a = np.linspace(0.0, 1.0, 6).reshape(2, 3)
    y0 = np.stack([np.cos(a), np.sin(a), 0 * a], -1)[..., None, :]
    sol = ra.integrate(LinearField(A, Sphere(2)), y0, (0.0, 3.0), "rk4", dt=0.01, saveat=[0, 1, 2, 3],
                       dense_output=True, events=Event(lambda t, y: y[..., 0, 0] - 0.3, terminal=True),
                       event_tol=TOL)
    exact = np.arccos(0.3) - a
    assert np.allclose(sol.events.t_stop, exact, atol=10 * TOL)
    assert np.array_equal(np.isnan(sol.y[..., 0, 0]), np.array([0, 1, 2, 3])[:, None, None] > exact)
    u = sol.interpolate([0.5, 1.2])
    assert np.array_equal(np.isnan(u[..., 0, 0]), np.array([0.5, 1.2])[:, None, None] > exact)
