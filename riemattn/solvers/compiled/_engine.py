"""The compiled engine's Python side: what it supports, the run, and the result.

:func:`unsupported` lists what in a call the compiled engine cannot run (each item names it);
:func:`run` packs the field (the kernels' ``pack_field``), the stepper's arrays
(:mod:`riemattn.solvers.compiled._tables`), the save times and the events, calls the compiled
loop once for the whole batch and builds the same :class:`~riemattn.solvers.integrate.Trajectory`
as the NumPy engine.
"""

from __future__ import annotations

import math

import numpy as np

from ...errors import UnsupportedByEngine, ValidationError
from ..core import _loops
from ...dynamics._tangent import applies
from ..stiff.rosenbrock import DT_FACTOR
from . import _stream, _tables
from ._events import CODES, EventData, no_events
from ._threads import in_threads, threads


#: crossings stored per trajectory (at least; up to :data:`EVENT_MEMORY` float64 states for the batch);
#: a trajectory with more is run again alone with room for all of its crossings
EVENT_CAPACITY, EVENT_MEMORY = 16, 2 ** 20


def _kernels():
    from . import _kernel
    return _kernel


def unsupported(field, step, y0, *, save_fn=None, events=(), progress=False, dense_output=False):
    """What the compiled engine cannot run in this call: (reasons, pack or None)."""
    from ..._backend import is_torch

    why = []
    if is_torch(y0):
        why.append("torch tensors (the compiled engine runs NumPy float64 arrays)")
    entry = _tables.SUPPORTED.get(getattr(step, "name", None))
    if entry is None or type(step) is not entry[0]:
        why.append(f"the stepper {getattr(step, 'name', step)!r} (compiled: {', '.join(_tables.SUPPORTED)})")
    limit = getattr(step, "solve_limit", _tables.rosenbrock.SOLVE_LIMIT)
    if limit != _tables.rosenbrock.SOLVE_LIMIT:
        why.append(f"a Rosenbrock stepper with solve_limit={limit} (compiled: the default "
                   f"{_tables.rosenbrock.SOLVE_LIMIT})")
    if save_fn is not None:
        why.append("a save_fn")
    user = [e.name for e in events if _spec(e) is None]
    if user:
        why.append(f"events without a compiled form ({', '.join(map(str, user))}; the built-in events of "
                   "riemattn.analysis.events other than level, energy_level and leave_common_hemisphere "
                   "are compiled)")
    if progress:
        why.append("progress=True")
    if dense_output:
        why.append("dense_output=True")
    pack = None
    if not is_torch(y0):
        try:
            pack = _kernels().pack_field(field, tuple(y0.shape))
        except UnsupportedByEngine as exc:
            why.append(getattr(exc, "reason", None) or str(exc))
    import numba

    if numba.config.DISABLE_JIT:
        why.append("NUMBA_DISABLE_JIT=1 (numba's JIT is off, so there is no compiled code to run)")
    return why, pack


def _spec(event):
    spec = getattr(event, "spec", None)
    if spec is None or spec[0] not in CODES:
        return None
    return spec


def fixed_grid(t0, t1, dt, saveat, limit=None):
    """The NumPy fixed-step loop's grid: step start times, sizes, end times and the save slot after
    each step (-1: none) (riemattn.solvers.core._loops.run_fixed, the same arithmetic), its first
    ``limit`` steps at most (max_steps: the grid beyond is never built), and whether it was cut."""
    t = t0
    targets = [] if saveat is None else [s for s in saveat.tolist() if s > t0]
    if not targets or targets[-1] < t1:
        targets.append(t1)
    save_times = set() if saveat is None else set(saveat.tolist())
    gt, gh, gtn, slot = [], [], [], []
    nxt = 1 if (saveat is None or saveat[0] == t0) else 0
    n_save = None if saveat is None else len(saveat)
    for target in targets:
        n = max(1, math.ceil((target - t) / dt - 1e-9))
        start, h = t, (target - t) / n
        for k in range(1, n + 1):
            if limit is not None and len(gt) >= limit:
                return _arrays(gt, gh, gtn, slot) + (True,)
            t_new = target if k == n else start + k * h
            gt.append(t)
            gh.append(h)
            gtn.append(t_new)
            slot.append(-1)
            t = t_new
            if saveat is None:
                slot[-1] = nxt
                nxt += 1
        if t in save_times and nxt < n_save:
            slot[-1] = nxt
            nxt += 1
    return _arrays(gt, gh, gtn, slot) + (False,)


def _arrays(gt, gh, gtn, slot):
    return (np.array(gt, dtype=float), np.array(gh, dtype=float), np.array(gtn, dtype=float),
            np.array(slot, dtype=np.int64))


def _event_data(events, B, l, d, tol, cap):
    if not events:
        return no_events(B, l, d)
    n = len(events)
    P = max(1 + d, 2)
    kinds = np.zeros(n, dtype=np.int64)
    params = np.zeros((n, P))
    for k, e in enumerate(events):
        name, *nums = e.spec
        kinds[k] = CODES[name][0]
        vals = []
        for v in nums:
            vals.extend(np.ravel(np.asarray(v, dtype=float)).tolist())
        if name in ("leave_hemisphere", "lyapunov_level") and len(vals) != (d if name == "leave_hemisphere" else d + 1):
            raise ValidationError(f"v must have shape ({d},) to match the tokens, got {len(vals) - (name != 'leave_hemisphere')} entries.")
        if name == "merge" and int(vals[1]) >= l:
            raise ValidationError(f"cluster_merge(clusters={int(vals[1])}) needs more than {int(vals[1])} tokens, got l = {l}.")
        params[k, :len(vals)] = vals
    return EventData(
        n, kinds, np.array([e.direction for e in events], dtype=np.int64),
        np.array([e.terminal for e in events], dtype=np.int64),
        np.array([e.samples for e in events], dtype=np.int64), params,
        max(e.samples for e in events), float(tol), np.zeros((B, n)), np.zeros((B, n), dtype=np.int64),
        np.zeros(B, dtype=np.int64), np.full((B, cap), np.nan), np.full((B, cap), -1, dtype=np.int64),
        np.full((B, cap, l, d), np.nan), np.full(B, np.nan), np.zeros((B, l, d)))


def _events_result(events, ev, batch, l, d):
    from ..core.events import Events

    m = int(ev.rec_n.max(initial=0))
    t = ev.rec_t[:, :m]
    which = ev.rec_w[:, :m]
    y = ev.rec_y[:, :m]
    return Events(names=tuple(e.name for e in events), count=ev.count.sum(axis=1).reshape(batch),
                  t=t.reshape(batch + (m,)), which=which.reshape(batch + (m,)),
                  y=y.reshape(batch + (m, l, d)), observables={}, t_stop=ev.t_stop.reshape(batch))


def _capacity(B, l, d):
    """Crossings stored per trajectory: :data:`EVENT_CAPACITY`, more where the batch is small."""
    return int(max(EVENT_CAPACITY, min(1024, EVENT_MEMORY // max(1, B * l * d))))


def run(field, step, y0, t0, t1, *, dt, rtol, atol, first_step, saveat, max_steps, events, event_tol, pack,
        lanes=False):
    """Integrate on the compiled engine (every argument already validated by integrate). Ctrl-C
    (KeyboardInterrupt, or another exception of a signal handler) stops every trajectory before
    its next step and is raised again with the result so far as its ``trajectory`` attribute.
    ``lanes``: run eight trajectories at a time (the same bits; the caller decides, with
    :func:`lanes_apply`); False: one at a time."""
    from ..core._loops import message
    from ..core._trajectory import PerTrajectory, Trajectory  # not integrate: it imports us

    batch = tuple(y0.shape[:-2])
    l, d = y0.shape[-2:]
    B = math.prod(batch)
    Y = np.ascontiguousarray(np.array(y0, dtype=float).reshape(B, l, d))
    y_start = Y.copy()
    meth = _tables.method(step.name)
    flat = bool(field.manifold.normalize(np.ones((1, d)))[1] is None)  # Euclidean: no lifting
    diff = bool(applies(field, Y))  # the stiff steps evaluate the difference form (NumPy's rule)
    # writeable C-contiguous copies: numba types read-only or strided arrays differently (a new compilation)
    ints, floats, per = (np.array(a, dtype=dt, order="C") for a, dt in
                         ((pack.ints, np.int64), (pack.floats, float), (pack.per, float)))
    tiles = _stream.streamed(step, pack, B, threads())
    if tiles:  # many tokens: the streamed kernel, O(l d) scratch (riemattn.solvers.compiled._stream)
        ints[_stream.STREAM_TILES] = tiles
        pack = pack._replace(work=_stream.work_length(ints, l, d))
    events = list(events or ())
    halt = np.zeros(1, dtype=np.int64)
    pending = None
    cap = _capacity(B, l, d)
    ev = _event_data(events, B, l, d, event_tol, cap)
    if t1 == t0:  # nothing to integrate, as on the NumPy engine: the initial state, no step, no call
        zeros = np.zeros(B, dtype=np.int64)
        times = np.array([t0]) if saveat is None else saveat.copy()
        res = (times, np.full((len(times), B, l, d), np.nan), zeros, zeros, zeros, zeros + _loops.REACHED,
               np.full(B, np.nan), None)
    else:
        def solve(Y, per, ev, batch):
            if lanes:
                return _run_lanes(meth, Y, t0, t1, rtol, atol, first_step, saveat, max_steps, ints, floats, per,
                                  pack.work, halt)
            if step.adaptive:
                return _run_adaptive(meth, Y, flat, bool(pack.autonomous), diff, t0, t1, rtol, atol, first_step,
                                     saveat, max_steps, ints, floats, per, pack.work, ev, batch, halt)
            return _run_fixed(meth, Y, flat, t0, t1, dt, saveat, max_steps, ints, floats, per, pack.work, ev, halt)

        res, pending = solve(Y, per, ev, batch)
        over = np.flatnonzero(ev.rec_n > cap) if events and pending is None else ()
        if len(over):  # rows with more crossings than room: those rows again, alone, with room for all
            sub = (len(over),) if batch else ()
            ev2 = _event_data(events, len(over), l, d, event_tol, int(ev.rec_n.max()))
            res2, pending = solve(y_start[over].copy(), per[over] if per.shape[0] > 1 else per, ev2, sub)
            res, ev = _merge(res, ev, res2, ev2, over)
    times, saved, nfev, n_steps, n_rej, status, t_fail, layout = res
    if layout is not None:  # fixed steps: the NumPy loop's saving rule applied to the rows' stops
        slot, gtn, stop = layout
        saved, times = saved_layout(saved, times, saveat is None, saveat is None or saveat[0] == t0, batch == (),
                                    slot, gtn, stop, status == _loops.TERMINAL,
                                    ev.t_stop if ev.n else np.full(B, np.nan))
    if saved.shape[0] and (saveat is None or saveat[0] == t0):
        saved[0] = y_start
    if pending is None and (status == _loops.NON_FINITE).any():
        _numpy_error(field, Y, status, t_fail, batch)
    evr = _events_result(events, ev, batch, l, d) if events else None
    ok = (status == _loops.REACHED) | (status == _loops.TERMINAL)
    pt = PerTrajectory(nfev.reshape(batch), n_steps.reshape(batch), n_rej.reshape(batch), status.reshape(batch),
                       ok.reshape(batch), t_fail.reshape(batch))
    y = saved.reshape((saved.shape[0],) + batch + (l, d))
    sol = Trajectory(
        t=times, y=y, nfev=int(nfev.max(initial=0)), n_steps=int(n_steps.max(initial=0)),
        n_rejected=int(n_rej.max(initial=0)), success=bool(ok.all()),
        message=message(status, t_fail, None if evr is None else evr.t_stop.reshape(-1)),
        per_trajectory=pt, stepper=step.name, events=evr, engine="compiled")
    if pending is not None:
        pending.trajectory = sol  # what was computed before Ctrl-C (docs/performance.md)
        raise pending
    return sol


def _numpy_error(field, Y, status, t_fail, batch):
    """Where the NumPy field raises at the batch's last states (an overflow of the scores or weights,
    e.g. a large beta: the NumPy engine stops with that ValidationError, the kernels give inf), raise
    that error; else return (the trajectories are reported as non-finite, as on the NumPy engine)."""
    bad = status == _loops.NON_FINITE
    t = float(np.nanmin(t_fail[bad])) if np.isfinite(t_fail[bad]).any() else 0.0
    try:
        field(t, Y.reshape(tuple(batch) + Y.shape[1:]))
    except ValidationError:
        raise
    except Exception:  # noqa: BLE001 -- only the field's own errors of bad values are raised here
        return


def _merge(res, ev, res2, ev2, rows):
    """The result of a run with rows ``rows`` replaced by those of a second run (res2, ev2)."""
    times, saved, nfev, n_steps, n_rej, status, t_fail, layout = res
    t2, saved2, nfev2, steps2, rej2, status2, fail2, layout2 = res2
    if len(rows) == len(status):  # every row ran again
        return res2, ev2
    saved[:, rows] = saved2
    for a, b in ((nfev, nfev2), (n_steps, steps2), (n_rej, rej2), (status, status2), (t_fail, fail2)):
        a[rows] = b
    if layout is not None:
        layout[2][rows] = layout2[2]
    cap2 = ev2.rec_t.shape[1]
    grown = {}
    for name in ("rec_t", "rec_w", "rec_y"):
        old, new = getattr(ev, name), getattr(ev2, name)
        full = np.full((old.shape[0], cap2) + old.shape[2:], -1 if name == "rec_w" else np.nan, dtype=old.dtype)
        full[:, :old.shape[1]] = old
        full[rows] = new
        grown[name] = full
    for name in ("g_prev", "count", "rec_n", "t_stop", "y_stop"):
        getattr(ev, name)[rows] = getattr(ev2, name)
    return (times, saved, nfev, n_steps, n_rej, status, t_fail, layout), ev._replace(**grown)


def _run_adaptive(meth, Y, flat, autonomous, diff, t0, t1, rtol, atol, first_step, saveat, max_steps, ints,
                  floats, per, work, ev, batch, halt):
    from ._adaptive import solve_rows

    B, l, d = Y.shape
    h_first = np.full(B, float(first_step) if first_step is not None else np.nan)
    fn = _kernels().field_kernel(ints, l, d)
    every = saveat is None  # a single trajectory without saveat: every accepted step
    saved = np.full((0 if every else len(saveat), B, l, d), np.nan)
    stats = np.zeros((B, 4), dtype=np.int64)
    stats[:, 3] = _loops.RUNNING  # (rows a Ctrl-C stops before they start)
    t_fail = np.full(B, np.nan)
    args = [fn, meth, Y, 0, 1, flat, autonomous, diff, DT_FACTOR, t0, t1, rtol, atol, h_first, max_steps, ints,
            floats, per, work, np.zeros(0) if every else np.array(saveat, dtype=float), saved, stats, t_fail, every,
            ev, halt]
    run = _kernels().entry(solve_rows, args)
    out, pending = in_threads(lambda k, n: run(*args[:3], k, n, *args[5:]), B, halt, _stream.most(ints))
    if every:
        ts, ys, n_rec = out[0]
        times = np.concatenate([[t0], ts[:n_rec]])
        saved = np.concatenate([np.full((1, l, d), np.nan), ys[:n_rec]]).reshape((len(times), 1, l, d))
    else:
        times = saveat.copy()
    return (times, saved, stats[:, 0], stats[:, 1], stats[:, 2], stats[:, 3], t_fail, None), pending


#: ensembles of at least this many trajectories per thread run dopri5 or dop853 eight at a time, in vector
#: lanes (riemattn.solvers.compiled._lanes; the same bits) -- for tokens of at most LANES_MAX_SIZE
#: numbers (l d), or of at most LANES_ANY_L_D components: measured at B = 100 (docs/performance.md),
#: lanes/one-at-a-time time 0.42 at 10 x 3 (two heads), 0.75 at 32 x 8, 0.75 at 16 x 16, 0.63 at
#: 8 x 32, 0.73 at 200 x 2; 1.2 at 64 x 16, 1.3 at 32 x 32, 3.9 at 64 x 64 (eight lanes of a large
#: attention matrix leave the cache, where one trajectory's kernel vectorises over tokens anyway)
LANES_MIN_PER_THREAD = 8
#: the steppers the lanes run (each lane the per-trajectory loop's bits; FSAL ones: _lanes.solve_lanes
#: carries each lane's last evaluation into its next step)
LANE_STEPPERS = ("dopri5", "dop853")
LANES_MAX_SIZE, LANES_ANY_L_D = 256, 4


def lanes_apply(step, pack, y0, saveat, events) -> bool:
    """Whether a call runs eight trajectories at a time (:mod:`riemattn.solvers.compiled._lanes`):
    a stepper of :data:`LANE_STEPPERS` on a form of the lane kernel (``lanes_supported``), saving
    at ``saveat``, no events, tokens of at most :data:`LANES_MAX_SIZE` numbers or
    :data:`LANES_ANY_L_D` components, and at least :data:`LANES_MIN_PER_THREAD` trajectories per
    thread; not where the attention is streamed (many tokens)."""
    from ...dynamics.kernels._kernel_lanes import lanes_supported

    l, d = y0.shape[-2:]
    return (step.name in LANE_STEPPERS and saveat is not None and not events and lanes_supported(pack.ints)
            and (l * d <= LANES_MAX_SIZE or d <= LANES_ANY_L_D) and not _stream.applies(step, pack)
            and math.prod(y0.shape[:-2]) >= max(1, LANES_MIN_PER_THREAD * threads()))


def _run_lanes(meth, Y, t0, t1, rtol, atol, first_step, saveat, max_steps, ints, floats, per, work, halt):
    from ...dynamics.kernels._kernel_lanes import lanes_work
    from ._lanes import solve_lanes

    B, l, d = Y.shape
    h_first = np.full(B, float(first_step) if first_step is not None else np.nan)
    saved = np.full((len(saveat), B, l, d), np.nan)
    stats = np.zeros((B, 4), dtype=np.int64)
    stats[:, 3] = _loops.RUNNING  # (rows a Ctrl-C stops before they start)
    t_fail = np.full(B, np.nan)
    lane_rows, lane_len = lanes_work(ints)
    args = [_kernels().evaluate, meth, Y, 0, 1, t0, t1, rtol, atol, h_first, max_steps, ints, floats, per, work,
            lane_rows, lane_len, np.array(saveat, dtype=float), saved, stats, t_fail, halt]
    run = _kernels().entry(solve_lanes, args)
    _, pending = in_threads(lambda k, n: run(*args[:3], k, n, *args[5:]), B, halt)
    return (saveat.copy(), saved, stats[:, 0], stats[:, 1], stats[:, 2], stats[:, 3], t_fail, None), pending


def _run_fixed(meth, Y, flat, t0, t1, dt, saveat, max_steps, ints, floats, per, work, ev, halt):
    from ._fixed import fixed_rows

    B, l, d = Y.shape
    gt, gh, gtn, slot, capped = fixed_grid(t0, t1, dt, saveat, limit=max_steps)
    times = np.concatenate([[t0], gtn]) if saveat is None else saveat.copy()
    saved = np.full((len(times), B, l, d), np.nan)
    stats = np.zeros((B, 4), dtype=np.int64)
    stats[:, 2] = _loops.RUNNING  # (rows a Ctrl-C stops before they start)
    t_fail = np.full(B, np.nan)
    args = [_kernels().field_kernel(ints, l, d), meth, Y, 0, 1, flat, gt, gh, gtn, slot, ints, floats, per, work,
            saved, stats, t_fail, ev, halt]
    run = _kernels().entry(fixed_rows, args)
    _, pending = in_threads(lambda k, n: run(*args[:3], k, n, *args[5:]), B, halt, _stream.most(ints))
    nfev, n_steps, status, stop = stats[:, 0], stats[:, 1], stats[:, 2].copy(), stats[:, 3]
    if capped:  # riemattn.solvers.core._loops.run_fixed stops the rows still running at max_steps
        alive = (stop == 0) & (status == _loops.REACHED)
        status[alive] = _loops.MAX_STEPS
        t_fail[alive] = gtn[-1] if len(gtn) else t0
    stop[(stop == 0) & (status == _loops.RUNNING)] = 1  # (not started: no value after t0)
    return (times, saved, nfev, n_steps, np.zeros_like(nfev), status, t_fail, (slot, gtn, stop)), pending


def saved_layout(saved, times, every, at_t0, single, slot, gtn, stop, hit, t_stop):
    """The saving rule of the NumPy fixed-step loop (:func:`riemattn.solvers.core._loops.run_fixed`,
    docs/events.md "Saved values") applied to the rows' stops: ``saved`` (n_save, B, l, d) holds
    each row's state after the grid step of each slot (frozen after its stop); ``stop[b]`` the
    1-based step at which row b stopped (0: it did not), ``hit`` its terminal event, ``t_stop``
    the event's time. A row has a value at the slot of step k while it runs, and at its stop step
    only when the event lies at the step's end (t_stop >= t_k). ``every`` (no saveat): the steps
    run are the slots; a single trajectory keeps the steps at which it has a value, its stop saved
    at ``(t_stop, y_stop)``; a batch keeps the steps at which some row has a value. Returns
    (saved, times)."""
    n_run = len(slot)  # the steps run (max_steps may have cut the grid)
    step_of = np.full(len(times), n_run + 1, dtype=np.int64)  # n_run + 1: never reached
    step_of[slot[slot >= 0]] = np.flatnonzero(slot >= 0) + 1
    if at_t0:
        step_of[0] = 0
    k = step_of[:, None]
    t_end = np.concatenate([[-np.inf], gtn, [np.inf]])[np.minimum(step_of, n_run + 1)][:, None]
    at_stop = hit[None, :] & (stop[None, :] == k)
    has_value = (k <= n_run) & ((stop[None, :] == 0) | (stop[None, :] > k) | (at_stop & (t_stop[None, :] >= t_end)))
    if not every:
        saved[~has_value] = np.nan
        return saved, times
    if single:  # (the stop's own step is saved at the event)
        keep = has_value[:, 0] | at_stop[:, 0]
        return saved[keep], np.where(at_stop[:, 0], t_stop[0], times)[keep]
    saved[~has_value] = np.nan
    keep = has_value.any(axis=1)
    return saved[keep], times[keep]
