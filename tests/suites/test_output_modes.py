"""Every output of a solve agrees with every other: the output-mode consistency suite (issue 41).

The product is enumerated from the registries, so a stepper, engine or field family added later
is covered without editing this file:

* steppers: :data:`riemattn.STEPPERS` (projected RK, DOPRI, Rosenbrock, ``"auto"``, Lie, layer)
  and the SDE methods :data:`riemattn.solvers.sde.SDE_METHODS` (``integrate_sde``);
* engines: :data:`riemattn.solvers.compiled._dispatch.ENGINES` (``"numpy"``, ``"compiled"``);
* field families: :data:`tests._output_families.FAMILIES` (sphere, ellipsoid, flat, causal,
  time-varying heads, per-trajectory beta and weights, layer norm, circle; and the attention parts,
  enumerated from the edges suite's registries -- every mask, bias and normalization outside the
  softmax family but hardmax, the uncentred update, a context, populations -- each on one stepper
  of every kind, :data:`ONE_PER_KIND`);
* output modes, all checked on every (stepper, family) cell: ``saveat``, ``dense_output`` +
  ``interpolate``, events (a non-terminal and a terminal one), ``save_fn`` and the
  ``per_trajectory`` counters.

Invariants (NumPy engine, :func:`test_output_modes_agree`): ``interpolate`` at every stored step
end equals the stored tokens and ``interpolate(t0)`` equals ``y0``; ``interpolate`` at the
``saveat`` times equals the values the solve saved there (tokens through ``save_fn``); the
observables of ``save_fn`` are its function of those tokens; every event time is a root of the
event function on the interpolant and the stored event state is the interpolant there; after a
terminal stop every output is NaN and before it everything is finite; the per-trajectory
counters have the batch's shape and their maxima are the scalar counters. On the compiled engine
(:func:`test_engines_agree`) the same call gives the NumPy engine's steps, saved values and event
times, or raises :class:`~riemattn.errors.UnsupportedByEngine` (dense output and ``save_fn``
always do; so do steppers and fields it does not compile). SDE methods
(:func:`test_sde_output_modes_agree`): saved tokens and ``save_fn`` observables of the same
seed agree, and there is no dense output.

Size: the full product is run, not sampled: 14 steppers x 8 families plus the stiff family for
the 3 steppers that declare ``stiff`` (115 cells; each 3 NumPy solves, and 2 compiled solves
where the compiled engine runs the cell) and 2 SDE methods x 8 families: 246 tests, on problems
of a few tokens and a few dozen steps (the stiff one: 175), so that the file stays within the
minute of one core it is allowed (14 s of CPU time, warm numba cache, on a loaded 2-core
machine). The compiled engine's loops are compiled once per machine, in numba's cache, and shared
with tests/solvers/test_compiled.py; a first run compiles them.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest

import riemattn as ra
from riemattn.analysis.events import _consensus_distance
from riemattn.dynamics.jacobians import is_autonomous
from riemattn.errors import UnsupportedByEngine
from riemattn.dynamics import kernels as kk
from riemattn.solvers.compiled import _engine
from riemattn.solvers.compiled._dispatch import ENGINES
from riemattn.solvers.compiled._threads import threads
from riemattn.solvers.events import Event
from riemattn.solvers.sde import SDE_METHODS

from _output_families import FAMILIES, PART_FAMILIES, STIFF_ONLY

EPS = np.finfo(float).eps
RTOL, ATOL, DT = 1e-7, 1e-9, 0.05
STEPPERS = sorted(ra.STEPPERS)


def _kind(stepper):
    """A stepper's kind: its module (explicit RK, Dormand-Prince, Lie group, Rosenbrock, auto, layer) and
    whether it is adaptive (rkmk45 is the adaptive Lie stepper)."""
    st = ra.STEPPERS[stepper]
    return st.__module__.rsplit(".", 1)[-1], bool(st.adaptive)


#: one stepper of each kind (the first by name): what the families of parts run on -- a part changes the
#: field, not the stepper, and every stepper runs on the other families
ONE_PER_KIND = sorted({_kind(s): s for s in reversed(STEPPERS)}.values())
CELLS = [(s, f) for s in STEPPERS for f in FAMILIES
         if (f not in STIFF_ONLY or getattr(ra.STEPPERS[s], "stiff", False))
         and (f not in PART_FAMILIES or s in ONE_PER_KIND)]


def _options(stepper):
    st = ra.STEPPERS[stepper]
    return dict(rtol=RTOL, atol=ATOL) if st.adaptive else dict(dt=DT)


def _events(thr, terminal=True):
    """The consensus distance crossing thr[0] (either way, non-terminal) and thr[1] (terminal;
    left out with ``terminal=False``), with the declarative spec that the compiled engine
    evaluates itself."""
    def g(value):
        return lambda t, y: _consensus_distance(y) - value

    return [Event(g(thr[0]), direction=0, name="pass", spec=("distance", thr[0])),
            Event(g(thr[1]), direction=0, terminal=True, name="stop", spec=("distance", thr[1]))][:1 + terminal]


def _save_fn(t, y):
    return {"y": y.copy(), "distance": _consensus_distance(y)}


def _refused(stepper, case):
    try:
        ra.STEPPERS[stepper]().check_field(case.field)
    except ra.RiemattnError:
        return True
    return False


@functools.cache
def _numpy_runs(stepper, name):
    """(case, thresholds, run1: every step + dense + both events, run2: saveat + dense + save_fn +
    the non-terminal event -- a terminal stop would leave the save times after it untested)."""
    case = FAMILIES[name]()
    kw = _options(stepper)
    run0 = ra.integrate(case.field, case.y0, case.t_span, stepper, engine="numpy", **kw)
    d0, d1 = _consensus_distance(run0.y[0]).reshape(-1)[0], _consensus_distance(run0.y[-1]).reshape(-1)[0]
    thr = (d0 + 0.3 * (d1 - d0), d0 + 0.7 * (d1 - d0))
    run1 = ra.integrate(case.field, case.y0, case.t_span, stepper, engine="numpy", dense_output=True,
                        events=_events(thr), **kw)
    # every 4 DT: a fixed-step solve then has the same grid with and without saveat
    t0, t1 = case.t_span
    saveat = np.append(t0 + 4 * DT * np.arange(math.ceil((t1 - t0) / (4 * DT) - 1e-9)), t1)
    run2 = ra.integrate(case.field, case.y0, case.t_span, stepper, engine="numpy", dense_output=True,
                        saveat=saveat, save_fn=_save_fn, events=_events(thr, False), **kw)
    return case, thr, run1, run2


def _rounding(y):
    """What "equal to rounding" allows for tokens like ``y``: the stored values and the
    interpolant come from the same step taken twice, in batches of other sizes (BLAS blocking,
    FSAL's k1 reused or recomputed), so they differ by a few roundings of each of the s stages'
    contributions h |K| <= |y| + h |F|: 2^10 eps max(1, |y|) covers 13 stages x 64 roundings (the
    largest difference measured on these problems is about 50 eps)."""
    return 1024 * EPS * max(1.0, float(np.nanmax(np.abs(y))))


def _retake(stepper, case, sol):
    """What re-taking a step may add to :func:`_rounding`: Rosenbrock steppers differentiate a
    non-autonomous field in t by a forward difference of step sqrt(eps) max(1, |t|), which turns
    the field's rounding (eps |F|, different for a batch of other times) into sqrt(eps) |F| in
    the time derivative, entering the step times h: sqrt(eps) h_max |F|_max."""
    if not getattr(ra.STEPPERS[stepper], "stiff", False) or is_autonomous(case.field):
        return 0.0
    t, y = sol.t, sol.y
    h = float(np.max(np.diff(t)))
    F = max(float(np.max(np.abs(case.field(s, y[k])))) for k, s in enumerate(t) if np.isfinite(y[k]).all())
    return math.sqrt(EPS) * h * F


def _iterated(case, sol):
    """What re-taking a step may add for a field that is itself an iteration stopped at a tolerance:
    Sinkhorn attention stops when the batch's worst column sum is within ``sinkhorn_tol`` of 1, so the
    same trajectory in a batch of another size may stop after other sweeps or Newton steps. Both results
    meet the marginals to tol, so their entries differ by about 2 tol, F = sum_j alpha_ij U y_j by
    2 tol l max|y| (U = I), and a step (weights sum |b| <= 2, a Rosenbrock solve's amplification a few)
    by 16 tol l max|y| h_max. (Measured: 2.7e-12 without AVX-512, the portability run; the rounding
    bound alone allowed 2.3e-13.)"""
    field = case.field
    if getattr(field, "normalization", None) != "sinkhorn":
        return 0.0
    h = float(np.max(np.diff(sol.t))) if len(sol.t) > 1 else 0.0
    return 16 * field.sinkhorn_tol * case.y0.shape[-2] * max(1.0, float(np.nanmax(np.abs(sol.y)))) * h


@pytest.mark.parametrize("stepper,name", CELLS, ids=[f"{s}-{f}" for s, f in CELLS])
def test_output_modes_agree(stepper, name):
    case = FAMILIES[name]()
    if _refused(stepper, case):
        with pytest.raises(ra.RiemattnError):
            ra.integrate(case.field, case.y0, case.t_span, stepper, **_options(stepper))
        return
    case, thr, run1, run2 = _numpy_runs(stepper, name)
    batch = case.y0.shape[:-2]
    t0 = case.t_span[0]
    if stepper == "layer":  # discrete layers: no dense output, documented
        with pytest.raises(ra.ValidationError, match="no dense output"):
            run1.interpolate(t0)
        return
    # interpolate(t0) is y0, and interpolate at the stored step ends is the stored state
    assert np.array_equal(run1.interpolate(t0), case.y0)
    stored = run1.y
    tol = _rounding(stored) + _retake(stepper, case, run1) + _iterated(case, run1)
    got = run1.interpolate(run1.t)
    assert np.array_equal(np.isnan(got), np.isnan(stored))
    np.testing.assert_allclose(got, stored, rtol=0, atol=tol)
    # saveat: interpolate at the save times is what the solve saved there (through save_fn)
    saved = run2.observables["y"]
    got = run2.interpolate(run2.t)
    assert np.array_equal(np.isnan(got), np.isnan(saved)), "NaN (after a terminal stop) in one output only"
    np.testing.assert_allclose(got, saved, rtol=0, atol=tol)
    np.testing.assert_allclose(run2.observables["distance"], _consensus_distance(saved), rtol=0,
                               atol=64 * EPS * max(1.0, np.nanmax(np.abs(saved))))
    # events: the same crossings with and without saveat/save_fn (up to run1's terminal stop);
    # each a root on the interpolant
    ev1, ev2 = run1.events, run2.events
    stop = ev1.t_stop.reshape(-1)
    # (located to event_tol each: fixed steps land on the save times, a grid equal to rounding)
    event_tol = 1e-10 * max(1.0, *map(abs, case.t_span))
    for b in range(len(stop)):
        np.testing.assert_allclose(_passes(ev1, b, stop[b]), _passes(ev2, b, stop[b]), rtol=0, atol=tol + event_tol)
    flat_t, flat_w = ev1.t.reshape((-1, ev1.t.shape[-1])), ev1.which.reshape((-1, ev1.t.shape[-1]))
    for b in range(flat_t.shape[0]):
        for k in range(int(ev1.count.reshape(-1)[b])):
            te, value = flat_t[b, k], thr[flat_w[b, k]]
            u = run1.interpolate(te).reshape((-1,) + case.y0.shape[-2:])[b]
            g = _consensus_distance(u) - value
            # the event is located to event_tol (1e-10 max(1, |t0|, |t1|)) in time on the step's own
            # dense output, which interpolate re-evaluates: |g| <= |dg/dt| event_tol, with dg/dt
            # from a central difference of g on the interpolant (+ the rounding of g)
            dlt = 1e-6 * (case.t_span[1] - case.t_span[0])
            end = ev1.t_stop.reshape(-1)[b]
            lo_, hi_ = max(te - dlt, t0), min(te + dlt, case.t_span[1] if np.isnan(end) else end)
            gl, gh = (_consensus_distance(run1.interpolate(s).reshape((-1,) + case.y0.shape[-2:])[b]) for s in (lo_, hi_))
            slope = abs(gh - gl) / (hi_ - lo_)
            assert abs(g) <= 2 * slope * event_tol + 64 * EPS, (b, k, te, g, slope)
            np.testing.assert_allclose(ev1.y.reshape((-1,) + ev1.y.shape[len(batch):])[b, k], u, rtol=0, atol=tol)
    # everything finite, except after a terminal stop: NaN there
    assert np.isfinite(saved).all() and np.isfinite(run2.observables["distance"]).all()
    grid = np.linspace(*case.t_span, 9)
    dense = run1.interpolate(grid).reshape((len(grid), -1) + case.y0.shape[-2:])
    for b in range(len(stop)):
        ok = grid <= (stop[b] if np.isfinite(stop[b]) else math.inf)
        assert np.isfinite(dense[ok, b]).all() and np.isnan(dense[~ok, b]).all()
    # per-trajectory counters: the batch's shape, the scalar counters their maxima
    for sol in (run1, run2):
        pt = sol.per_trajectory
        for arr in (pt.nfev, pt.n_steps, pt.n_rejected, pt.status, pt.success):
            assert arr.shape == batch
        assert sol.n_steps == pt.n_steps.max() and sol.n_rejected == pt.n_rejected.max()
        assert sol.success == bool(pt.success.all()) and pt.success.all()


def _passes(ev, b, until):
    """Times of trajectory b's crossings of the non-terminal event, up to ``until`` (NaN: all)."""
    t, w = ev.t.reshape((-1, ev.t.shape[-1]))[b], ev.which.reshape((-1, ev.t.shape[-1]))[b]
    keep = (w == 0) & (t <= (until if np.isfinite(until) else math.inf))
    return t[keep]


def _compiled(stepper, name, **kw):
    case = FAMILIES[name]()
    return ra.integrate(case.field, case.y0, case.t_span, stepper, engine="compiled", **_options(stepper), **kw)


@pytest.mark.parametrize("stepper,name", CELLS, ids=[f"{s}-{f}" for s, f in CELLS])
def test_engines_agree(stepper, name):
    assert set(ENGINES) >= {"numpy", "compiled"}
    case = FAMILIES[name]()
    if _refused(stepper, case):
        return
    _, thr, run1, run2 = _numpy_runs(stepper, name)
    try:
        c1 = _compiled(stepper, name, events=_events(thr))
    except UnsupportedByEngine:  # a stepper or field the compiled engine does not run: refused as a whole
        with pytest.raises(UnsupportedByEngine):
            _compiled(stepper, name)
        return
    for extra in (dict(dense_output=True), dict(save_fn=_save_fn, saveat=run2.t)):
        with pytest.raises(UnsupportedByEngine):
            _compiled(stepper, name, **extra)
    c2 = _compiled(stepper, name, saveat=run2.t, events=_events(thr, False))
    assert c1.engine == c2.engine == "compiled"
    # the same steps (their count and status, per trajectory) and the same solution. Step times
    # are not compared to rounding: the controller divides the error estimate's rounding by the
    # tolerance (and by err itself, far below 1 on DOP853's large steps), so the engines' step
    # sizes differ by up to 1e-4 relative (measured: dop853 on the causal family). Compared
    # instead: the compiled engine's values at its own step ends and save times against the
    # NumPy solve's interpolant there -- the same solution to rounding, accumulated over the steps
    np.testing.assert_array_equal(c1.per_trajectory.n_steps, run1.per_trajectory.n_steps)
    np.testing.assert_array_equal(c1.per_trajectory.status, run1.per_trajectory.status)
    tol = max(1, run1.n_steps) * _rounding(run1.y) + _retake(stepper, case, run1)
    # (a single trajectory's last saved time is its terminal stop, located by each engine to
    # event_tol: there the NumPy stop state, which differs by at most |F| 2 event_tol)
    event_tol = 1e-10 * max(1.0, *map(abs, case.t_span))
    if case.y0.ndim == 2 and stepper != "layer":
        stop = np.nanmin(np.append(run1.events.t_stop.reshape(-1), np.inf))
        late = c1.t > stop
        np.testing.assert_allclose(c1.y[~late], run1.interpolate(c1.t[~late]), rtol=0, atol=tol)
        if late.any():
            F = float(np.max(np.abs(case.field(run1.t[-1], run1.y[-1]))))
            np.testing.assert_allclose(c1.y[late], run1.y[-1:], rtol=0, atol=tol + 2 * event_tol * F)
    else:  # a batch saves (t0, t1) only; "layer" has no interpolant but one grid on both engines
        np.testing.assert_allclose(c1.t, run1.t, rtol=0, atol=2 * event_tol)
        last = np.isfinite(run1.y[-1]).all() and case.y0.ndim == 2
        F = float(np.max(np.abs(case.field(run1.t[-1], run1.y[-1])))) if last else 0.0
        np.testing.assert_allclose(c1.y, run1.y, rtol=0, atol=tol + 2 * event_tol * F)
    np.testing.assert_allclose(c2.y, run2.observables["y"], rtol=0, atol=tol)
    np.testing.assert_array_equal(c1.events.count, run1.events.count)
    # event times: each engine locates the root to event_tol on its own dense output
    np.testing.assert_allclose(c1.events.t, run1.events.t, rtol=0, atol=2 * event_tol + tol)
    np.testing.assert_array_equal(c2.events.count, run2.events.count)
    np.testing.assert_allclose(c2.events.t, run2.events.t, rtol=0, atol=2 * event_tol + tol)


LANE_CELLS = [(s, f) for s in _engine.LANE_STEPPERS for f in FAMILIES if f not in STIFF_ONLY]


def _lane_case(stepper, name):
    """(field, y0 of LANES_MIN_PER_THREAD x threads + 3 trajectories, saveat) where the compiled
    engine runs the family's field in lanes, else None: the family's tokens tiled and jittered
    (a batch not a multiple of eight), saving at the family's save times."""
    case = FAMILIES[name]()
    y0 = case.y0.reshape((-1,) + case.y0.shape[-2:])
    B = _engine.LANES_MIN_PER_THREAD * threads() + 3
    rng = np.random.default_rng(17)
    y = case.field.manifold.projection(np.resize(y0, (B,) + y0.shape[1:]) + 0.05 * rng.standard_normal((B,) + y0.shape[1:]))
    try:
        pack = kk.pack_field(case.field, y.shape)
    except (ra.RiemattnError, ValueError):  # per-trajectory data of the family's own batch
        return None
    saveat = np.linspace(*case.t_span, 5)
    if not _engine.lanes_apply(ra.STEPPERS[stepper](), pack, y, saveat, None):
        return None
    return case.field, y, saveat, case


@pytest.mark.parametrize("stepper,name", LANE_CELLS, ids=[f"{s}-{f}" for s, f in LANE_CELLS])
def test_engines_agree_on_the_lane_path(monkeypatch, stepper, name):
    """Ensembles the compiled engine runs eight trajectories at a time (its vector lanes) give the
    NumPy engine's steps and solution, to the rounding accumulated over the steps, as in
    :func:`test_engines_agree`; families the lanes do not run are skipped here (every stepper of
    the lanes must have at least one family that they run: test_every_lane_stepper_has_a_family)."""
    got = _lane_case(stepper, name)
    if got is None:
        return
    field, y0, saveat, case = got
    ran = []
    real = _engine._run_lanes
    monkeypatch.setattr(_engine, "_run_lanes", lambda *a: ran.append(1) or real(*a))
    kw = dict(_options(stepper), saveat=saveat)
    num = ra.integrate(field, y0, case.t_span, stepper, engine="numpy", **kw)
    com = ra.integrate(field, y0, case.t_span, stepper, engine="compiled", **kw)
    assert ran and com.engine == "compiled"
    np.testing.assert_array_equal(com.per_trajectory.n_steps, num.per_trajectory.n_steps)
    np.testing.assert_array_equal(com.per_trajectory.status, num.per_trajectory.status)
    tol = max(1, num.n_steps) * _rounding(num.y)
    np.testing.assert_allclose(com.y, num.y, rtol=0, atol=tol)


def test_every_lane_stepper_has_a_family():
    for stepper in _engine.LANE_STEPPERS:
        assert any(_lane_case(stepper, name) is not None for name in FAMILIES if name not in STIFF_ONLY), stepper


SDE_CELLS = [(m, f) for m in sorted(SDE_METHODS) for f in FAMILIES if f not in STIFF_ONLY]


@pytest.mark.parametrize("method,name", SDE_CELLS, ids=[f"{m}-{f}" for m, f in SDE_CELLS])
def test_sde_output_modes_agree(method, name):
    case = FAMILIES[name]()
    saveat = np.linspace(*case.t_span, 7)
    kw = dict(sigma=0.3, dt=DT, method=method, saveat=saveat, seed=5)
    a = ra.integrate_sde(case.field, case.y0, case.t_span, **kw)
    b = ra.integrate_sde(case.field, case.y0, case.t_span, save_fn=_save_fn, **kw)
    assert np.isfinite(a.y).all() and a.success
    np.testing.assert_array_equal(b.observables["y"], a.y)  # the same seed: the same path
    np.testing.assert_allclose(b.observables["distance"], _consensus_distance(a.y), rtol=0, atol=64 * EPS)
    assert a.per_trajectory.n_steps.shape == case.y0.shape[:-2]
    with pytest.raises(ra.ValidationError, match="dense_output"):
        a.interpolate(case.t_span[0])
