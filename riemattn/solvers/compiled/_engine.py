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
from . import _tables
from ._events import CODES, EventData, no_events


def threads() -> int:
    """Threads of a compiled run: numba's setting (``numba.set_num_threads``, ``NUMBA_NUM_THREADS``;
    default: one per core)."""
    import numba

    return max(1, int(numba.get_num_threads()))


def in_threads(fn, B):
    """``fn(start, stride)`` for start = 0 .. n - 1 on n threads (the compiled row loops
    release the GIL): row b is run by thread b mod n, whatever n, with the same arithmetic."""
    n = min(threads(), B)
    if n <= 1:
        fn(0, 1)
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=n) as pool:
        for f in [pool.submit(fn, k, n) for k in range(n)]:
            f.result()

#: crossings stored per trajectory before a run is repeated with room for more
EVENT_CAPACITY = 16


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
            why.append(str(exc))
    return why, pack


def _spec(event):
    spec = getattr(event, "spec", None)
    if spec is None or spec[0] not in CODES:
        return None
    return spec


def fixed_grid(t0, t1, dt, saveat):
    """The NumPy fixed-step loop's grid: step start times, sizes, end times, the save slot after
    each step (-1: none) and the save times (riemattn.solvers.core._loops.run_fixed, the same arithmetic)."""
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


def run(field, step, y0, t0, t1, *, dt, rtol, atol, first_step, saveat, max_steps, events, event_tol, pack):
    """Integrate on the compiled engine (every argument already validated by integrate)."""
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
    events = list(events or ())
    cap = EVENT_CAPACITY
    while True:
        ev = _event_data(events, B, l, d, event_tol, cap)
        Y[...] = y_start
        if t1 == t0:  # nothing to integrate, as on the NumPy engine: the initial state, no step, no call
            zeros = np.zeros(B, dtype=np.int64)
            times = np.array([t0]) if saveat is None else saveat.copy()
            res = (times, np.full((len(times), B, l, d), np.nan), zeros, zeros, zeros, zeros + _loops.REACHED,
                   np.full(B, np.nan))
            break
        if step.adaptive:
            res = _run_adaptive(meth, Y, flat, bool(pack.autonomous), diff, t0, t1, rtol, atol, first_step, saveat,
                                max_steps, ints, floats, per, pack.work, ev, batch)
        else:
            res = _run_fixed(meth, Y, flat, t0, t1, dt, saveat, max_steps, ints, floats, per, pack.work, ev,
                             batch == ())
        if not events or int(ev.rec_n.max(initial=0)) <= cap:
            break
        cap = int(ev.rec_n.max())
    times, saved, nfev, n_steps, n_rej, status, t_fail = res
    if saved.shape[0] and (saveat is None or saveat[0] == t0):
        saved[0] = y_start
    evr = _events_result(events, ev, batch, l, d) if events else None
    ok = (status == _loops.REACHED) | (status == _loops.TERMINAL)
    pt = PerTrajectory(nfev.reshape(batch), n_steps.reshape(batch), n_rej.reshape(batch), status.reshape(batch),
                       ok.reshape(batch), t_fail.reshape(batch))
    y = saved.reshape((saved.shape[0],) + batch + (l, d))
    return Trajectory(
        t=times, y=y, nfev=int(nfev.max(initial=0)), n_steps=int(n_steps.max(initial=0)),
        n_rejected=int(n_rej.max(initial=0)), success=bool(ok.all()),
        message=message(status, t_fail, None if evr is None else evr.t_stop.reshape(-1)),
        per_trajectory=pt, stepper=step.name, events=evr, engine="compiled")


def _run_adaptive(meth, Y, flat, autonomous, diff, t0, t1, rtol, atol, first_step, saveat, max_steps, ints,
                  floats, per, work, ev, batch):
    from ._adaptive import solve_rows

    B, l, d = Y.shape
    h_first = np.full(B, float(first_step) if first_step is not None else np.nan)
    fn = _kernels().evaluate
    if saveat is None:  # a single trajectory without saveat: every accepted step
        stats = np.zeros((1, 4), dtype=np.int64)
        t_fail = np.full(1, np.nan)
        args = [fn, meth, Y, 0, 1, flat, autonomous, diff, DT_FACTOR, t0, t1, rtol, atol, h_first, max_steps, ints,
                floats, per, work, np.zeros(0), np.zeros((0, 1, l, d)), stats, t_fail, True, ev]
        ts, ys, n_rec = _kernels().entry(solve_rows, args)(*args)
        times = np.concatenate([[t0], ts[:n_rec]])
        out = np.concatenate([np.full((1, l, d), np.nan), ys[:n_rec]])
        return (times, out.reshape((len(times), 1, l, d)), stats[:, 0], stats[:, 1], stats[:, 2], stats[:, 3],
                t_fail)
    saved = np.full((len(saveat), B, l, d), np.nan)
    stats = np.zeros((B, 4), dtype=np.int64)
    t_fail = np.full(B, np.nan)
    args = [fn, meth, Y, 0, 1, flat, autonomous, diff, DT_FACTOR, t0, t1, rtol, atol, h_first, max_steps, ints, floats,
            per, work, np.array(saveat, dtype=float), saved, stats, t_fail, False, ev]
    run = _kernels().entry(solve_rows, args)
    in_threads(lambda k, n: run(*args[:3], k, n, *args[5:]), B)
    return saveat.copy(), saved, stats[:, 0], stats[:, 1], stats[:, 2], stats[:, 3], t_fail


def _run_fixed(meth, Y, flat, t0, t1, dt, saveat, max_steps, ints, floats, per, work, ev, single):
    from ._fixed import fixed_rows

    B, l, d = Y.shape
    gt, gh, gtn, slot = fixed_grid(t0, t1, dt, saveat)
    N = len(gt)
    capped = N > max_steps
    if capped:
        gt, gh, gtn, slot = gt[:max_steps], gh[:max_steps], gtn[:max_steps], slot[:max_steps]
    times = np.concatenate([[t0], fixed_grid(t0, t1, dt, None)[2]]) if saveat is None else saveat.copy()
    saved = np.full((len(times), B, l, d), np.nan)
    stats = np.zeros((B, 4), dtype=np.int64)
    t_fail = np.full(B, np.nan)
    args = [_kernels().evaluate, meth, Y, 0, 1, flat, gt, gh, gtn, slot, ints, floats, per, work, saved, stats, t_fail,
            ev]
    run = _kernels().entry(fixed_rows, args)
    in_threads(lambda k, n: run(*args[:3], k, n, *args[5:]), B)
    nfev, n_steps, status, stop = stats[:, 0], stats[:, 1], stats[:, 2].copy(), stats[:, 3]
    if capped:  # riemattn.solvers.core._loops.run_fixed stops the rows still running at max_steps
        alive = stop == 0
        status[alive] = _loops.MAX_STEPS
        t_fail[alive] = gtn[-1] if len(gtn) else t0
    saved, times = saved_layout(saved, times, saveat is None, saveat is None or saveat[0] == t0, single, slot, gtn,
                                stop, status == _loops.TERMINAL, ev.t_stop if ev.n else np.full(B, np.nan))
    return times, saved, nfev, n_steps, np.zeros_like(nfev), status, t_fail


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
