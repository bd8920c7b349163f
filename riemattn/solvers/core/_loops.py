"""The stepping loops of :func:`riemattn.integrate`: fixed steps, and adaptive steps per trajectory.

The fixed-step loop keeps the whole batch ``y`` of shape ``batch + (l, d)`` and evaluates the
field on all of it. In the adaptive loop every trajectory has its own time, step size,
accept/reject decision, counters and status. Trajectories that have finished stop costing work:
for fields that can be restricted to a sub-batch (:meth:`riemattn.dynamics.fields.Field.take`; e.g.
``AttentionField``, with its per-trajectory beta taken along) the batch is flattened and
compacted to the unfinished trajectories whenever fewer than ``COMPACT_BELOW`` of the rows being
stepped are still running; other fields see the whole batch in its shape and finished
trajectories are frozen (masked). On the 100-trajectory hemisphere ensemble (dop853, tol 1e-9,
mean 137 and max 241 steps) compaction cut the wall time by 12 % against masking.

Saving: ``saveat`` times are reached exactly by fixed steps; adaptive steps are not shortened for
them, the values come from the stepper's interpolant (its dense output), retracted onto the
manifold. ``save_fn(t, y)`` stores observables instead of tokens. Both loops save the same
layout around terminal events and failures (:func:`run_fixed`; docs/events.md "Saved values").

Events (:mod:`riemattn.solvers.events`, tracked by :mod:`riemattn.solvers.core._event_tracker`) are
checked on accepted steps before saving; a terminal one truncates the trajectory's step at the
event (its time and state), so saving and dense output (:mod:`riemattn.solvers.core._dense`) stop there.

Array backends: both loops run on NumPy arrays or PyTorch tensors (``riemattn._backend``, docs/performance.md);
with tensors every per-trajectory quantity (times, step sizes, counters, status) lives on the
tokens' device and the step-size decisions are array operations. The host is consulted
(a synchronisation) once per adaptive step, for the number of unfinished trajectories (to stop, and
to compact the batch), and on steps that pass a save time; the fixed-step loop checks for
trajectories that all failed every ``_SYNC_EVERY`` steps only.

Differentiation (PyTorch tensors that require a gradient; docs/autodiff.md): the loops are
differentiated as they ran (discretize-then-differentiate). The step-size decisions of the
adaptive loop -- the error estimates, hence acceptance and every step size, and the initial
step -- are detached: the gradient is that of the same sequence of steps taken as a fixed grid
(as torchdiffeq and diffrax do).
"""

from __future__ import annotations

import math

import numpy as np

from ..._backend import copy, device_of, is_torch, namespace
from ._control import (ERR_PREV_FLOOR, FACMAX, FACMIN, LAST_STEP_RTOL, PI_BETA, SAFETY,  # noqa: F401
                       UNDERFLOW_RTOL, initial_step)
from ._recorder import Recorder, _Kind, _where
from ._status import (MAX_STEPS, MESSAGES, NON_FINITE, REACHED, RUNNING, TERMINAL, UNDERFLOW, Stats,  # noqa: F401
                      message)


#: With tensors, the fixed-step loop asks the device whether any trajectory is still alive (a
#: synchronisation) only every this many steps.
_SYNC_EVERY = 64


def _finite(y):
    xp = namespace(y)
    return xp.all(xp.isfinite(y), axis=(-2, -1))


def _any(mask) -> bool:
    """``mask.any()`` for NumPy; True for tensors (the caller then applies its masked update
    unconditionally instead of synchronising with the device to decide)."""
    return bool(mask.any()) if type(mask) is np.ndarray else True


def run_fixed(field, stepper, y, t0, t1, dt, saveat, rec: Recorder, stats: Stats, max_steps, bar, events=None,
              dense=None):
    """Shared step size: each interval between save times (and t1) split into equal steps <= dt.

    ``events`` (a :class:`riemattn.solvers.events.Tracker`): checked on every step; trajectories
    stopped by a terminal event are frozen (masked) at the event's state.

    Saving (the same layout as :func:`run_adaptive`'s, docs/events.md "Saved values"): a
    trajectory has a value at a saved time only if it was running there -- NaN after its terminal
    stop or failure, the event's state at a save time equal to its stop time. Without ``saveat``,
    a single trajectory (batch shape ``()``) saves every step, the last one ending at its
    terminal event ``(t_stop, y_stop)``; a step that failed (NaN or inf) is not saved. A batch
    saves the shared grid up to the last grid time at which some trajectory has a value.
    """
    t = t0
    targets = [] if saveat is None else [s for s in saveat.tolist() if s > t0]
    if not targets or targets[-1] < t1:
        targets.append(t1)
    save_times = set() if saveat is None else set(saveat.tolist())
    xp = namespace(y)
    alive = xp.ones(tuple(y.shape[:-2]), dtype=xp.bool, device=device_of(y))
    steps = 0
    masked = False  # some trajectory stopped or failed (host; always True once tensors may have)
    kind, batch, tail = _Kind(y), tuple(y.shape[:-2]), tuple(y.shape[-2:])
    B = math.prod(batch)
    rows = kind.arange(B)
    if events is not None:
        events.start(t0, y.reshape((B,) + tail))
    for target in targets:
        n = max(1, math.ceil((target - t) / dt - 1e-9))
        start, h = t, (target - t) / n
        for k in range(1, n + 1):
            if steps >= max_steps:
                stats.status[...] = xp.where(alive, MAX_STEPS, stats.status)
                stats.t_fail[...] = xp.where(alive, t, stats.t_fail)
                return y
            res = stepper.step(field, t, y, h)
            steps += 1
            stats.calls += res.nfev
            stats.nfev += res.nfev * alive
            stats.n_steps += alive
            bad = alive & ~_finite(res.y)
            if _any(bad):
                stats.status[...] = xp.where(bad, NON_FINITE, stats.status)
                stats.t_fail[...] = xp.where(bad, t, stats.t_fail)
                alive = alive & ~bad
                masked = True
            t_new = target if k == n else start + k * h
            y_new, h_eff = res.y, t_new - t
            has_value = alive  # trajectories with a value at t_new
            hit = t_stop = None
            if events is not None:
                stop = _check_fixed(field, stepper, events, kind, rows, t, h, t_new, y, res, alive, stats)
                if stop is not None:
                    hit, t_stop, y_stop = stop
                    y_new = _where(hit, y_stop, y_new)
                    h_eff = xp.where(hit, t_stop - t, h_eff)
                    if dense is not None:
                        dense.add(rows, t, h_eff.reshape(-1), y.reshape((B,) + tail), hit.reshape(-1),
                                  t_end=t_stop.reshape(-1), y_end=y_new.reshape((B,) + tail))
                    y = _where(hit, y_new, y)
                    stats.status[...] = xp.where(hit, TERMINAL, stats.status)
                    alive = alive & ~hit
                    has_value = alive | (hit & (t_stop >= t_new))  # an event exactly at t_new
                    masked = True
            if dense is not None:
                dense.add(rows, t, h_eff if np.ndim(h_eff) == 0 else h_eff.reshape(-1),
                          y.reshape((B,) + tail), alive.reshape(-1), t_end=t_new,
                          y_end=y_new.reshape((B,) + tail))
            y = _where(alive, y_new, y)
            if bar is not None:
                bar.update(t_new - t)
            t = t_new
            if saveat is None:
                _save_step(rec, batch, t, y, has_value if masked else None, hit, t_stop)
            if (xp is np or steps % _SYNC_EVERY == 0 or masked) and not bool(alive.any()):
                if saveat is not None and t in save_times:
                    rec.record_all(t, y, has_value)
                return y
        if t in save_times:
            rec.record_all(t, y, has_value if masked else None)
    stats.status[...] = xp.where(alive, REACHED, stats.status)
    return y


def _save_step(rec, batch, t, y, has_value, hit, t_stop):
    """Save the step ending at ``t`` without ``saveat`` (see :func:`run_fixed`): a single
    trajectory saves its terminal stop ``(t_stop, y_stop)``, ``(t, y)`` if it is running, nothing
    if the step failed; a batch saves ``t`` if some trajectory has a value there (NaN for the
    others). ``has_value`` None: every trajectory is running."""
    if has_value is None:
        rec.record_all(t, y)
    elif not batch:
        if hit is not None and bool(hit):
            rec.record_all(float(t_stop), y)
        elif bool(has_value):
            rec.record_all(t, y)
    elif bool(has_value.any()):
        rec.record_all(t, y, has_value)


def _lazy_interpolant(stepper, field, t, y, h, res, shaped, shape):
    """The step's dense output ``interp(theta)`` (flat theta -> flat tokens of ``shape``), built
    on first use (steppers without a native dense output re-step; building dop853's costs 3
    evaluations); ``box`` holds the Interpolant once built (its ``nfev``)."""
    box = []

    def interp(theta):
        if not box:
            box.append(stepper.interpolant(field, t, y, h, res))
        return box[0](shaped(theta)).reshape(shape)

    return interp, box


def _check_fixed(field, stepper, events, kind, rows, t, h, t_new, y, res, alive, stats):
    """The events of a fixed step of the whole batch (flattened for the tracker)."""
    batch, tail = tuple(y.shape[:-2]), tuple(y.shape[-2:])
    B = rows.shape[0]
    interp, box = _lazy_interpolant(stepper, field, t, y, h, res, lambda th: th.reshape(batch), (B,) + tail)
    accept = (alive & _finite(res.y)).reshape(-1)
    stop = events.check(rows, kind.full((B,), t), kind.full((B,), h), kind.full((B,), t_new),
                        res.y.reshape((B,) + tail), accept, interp)
    if box:
        stats.calls += box[0].nfev
        stats.nfev += box[0].nfev * alive
    if stop is None:
        return None
    return stop[0].reshape(batch), stop[1].reshape(batch), stop[2].reshape(batch + tail)


#: A batch is compacted to its unfinished trajectories when they are fewer than this fraction of
#: the rows being stepped (fields that support it: :meth:`riemattn.dynamics.fields.Field.take`).
COMPACT_BELOW = 0.8


def run_adaptive(field, stepper, y, t0, t1, rtol, atol, h, rec: Recorder, stats: Stats, max_steps, bar,
                 events=None, dense=None):
    """Per-trajectory adaptive steps (PI control) from t0 to t1; returns the final tokens.

    The state is kept flat over the batch: ``w`` holds the (flattened-batch) indices of the rows
    being stepped. Fields with a :meth:`~riemattn.dynamics.fields.Field.take` method are evaluated on the
    unfinished trajectories only (the rows are compacted when fewer than ``COMPACT_BELOW`` of
    them are still running); other fields see the whole batch in its shape, and finished
    trajectories are frozen (masked). Every per-trajectory decision is an array operation; the
    only host decisions per step are the number of unfinished rows and, on steps that pass a
    save time, the saving (see the module docstring). ``events`` (a
    :class:`riemattn.solvers.events.Tracker`) are checked on the accepted steps before saving; a
    trajectory stopped by a terminal event finishes there (status ``TERMINAL``).
    """
    kind = _Kind(y)
    xp = kind.xp
    batch, tail = tuple(y.shape[:-2]), tuple(y.shape[-2:])
    B = math.prod(batch)
    sub = field.take(kind.arange(B), batch) if B > 1 and callable(getattr(field, "take", None)) else None
    compact = sub is not None
    field_w = sub if compact else field

    def shaped(a):  # flat per-row arrays as the field and stepper see them
        return a if compact else a.reshape(batch + tuple(a.shape[1:]))

    k = (stepper.error_order or stepper.order) + 1
    alpha = 1.0 / k - 0.75 * PI_BETA
    nfev, n_steps, n_rej = stats.nfev.reshape(-1), stats.n_steps.reshape(-1), stats.n_rejected.reshape(-1)
    status, t_fail = stats.status.reshape(-1), stats.t_fail.reshape(-1)
    y_out = copy(y.reshape((B,) + tail))
    w = kind.arange(B)
    y_w = copy(y_out)
    if events is not None:
        events.start(t0, y_w)
    k1 = None
    if stepper.fsal or h is None:
        k1 = field_w(t0, shaped(y_w))
        stats.calls += 1
        nfev += 1
    if h is None:
        h = initial_step(field_w, stepper, t0, shaped(y_w), k1, rtol, atol, t1)
        if not kind.numpy:
            h = h.detach()  # autograd: step sizes are constants (see the module docstring)
        stats.calls += 1
        nfev += 1
        if not stepper.fsal:
            k1 = None
    if k1 is not None:
        k1 = k1.reshape((B,) + tail)
    if np.ndim(h):
        h_w = copy(xp.broadcast_to(h.reshape(-1) if is_torch(h) else kind.asarray(np.reshape(h, -1)), (B,)))
        h_w = h_w.to(xp.float64) if is_torch(h_w) else h_w
    else:
        h_w = kind.full((B,), float(h))
    t_w = kind.full((B,), t0)
    done = kind.full((B,), not t1 > t0, dtype=xp.bool)
    status[...] = xp.where(done, REACHED, status)
    err_prev = kind.full((B,), 1.0)
    rejected_prev = kind.full((B,), False, dtype=xp.bool)
    nonfinite_prev = kind.full((B,), False, dtype=xp.bool)
    progress = t0
    n_rows = B  # len(w), known on the host
    state = None  # per-row state a stepper carries across steps (StepResult.state), compacted with the rows

    def whole(ys):  # tokens of the rows w inside the whole batch (for save_fn)
        out = copy(y_out)
        out[w] = ys
        return out.reshape(batch + tail)

    while True:
        # the one host decision of every step: how many rows are unfinished
        n_active = n_rows - int(xp.count_nonzero(done))
        if compact and n_active < COMPACT_BELOW * n_rows:
            y_out[w] = _where(done, y_w, y_out[w])
            keep = ~done
            w, y_w, t_w, h_w = w[keep], y_w[keep], t_w[keep], h_w[keep]
            err_prev, rejected_prev, nonfinite_prev = err_prev[keep], rejected_prev[keep], nonfinite_prev[keep]
            k1 = None if k1 is None else k1[keep]
            state = None if state is None else state[keep]
            done = done[keep]
            n_rows = n_active
            if n_rows:
                field_w = field.take(w, batch)
        if n_active == 0:
            break
        active = ~done
        over = active & (n_steps[w] + n_rej[w] >= max_steps)
        if _any(over):
            status[w] = xp.where(over, MAX_STEPS, status[w])
            t_fail[w] = xp.where(over, t_w, t_fail[w])
            done = done | over
            if kind.numpy:  # recount (and maybe stop) before stepping; tensors step on, masked
                continue
            active = ~done
        remaining = t1 - t_w
        h_try = xp.where(active, xp.minimum(h_w, remaining), 0.0)
        last = active & (h_try >= remaining - LAST_STEP_RTOL * max(1.0, abs(t1)))
        h_try = xp.where(last, remaining, h_try)
        state_in = state  # the state this step starts from (the dense output re-steps with it)
        extra = {} if state is None else {"state": shaped(state)}
        res = stepper.step(field_w, shaped(t_w), shaped(y_w), shaped(h_try), None if k1 is None else shaped(k1), **extra)
        if res.state is not None:  # shape batch + (m,): one row of m numbers per trajectory
            state = res.state.reshape((y_w.shape[0], -1))
        stats.calls += res.nfev
        nfev[w] += res.nfev * active
        y_new = res.y.reshape(y_w.shape)
        scale = atol + rtol * xp.maximum(xp.abs(shaped(y_w)), xp.abs(res.y))
        with np.errstate(invalid="ignore", over="ignore"):
            err = stepper.error_norm(res, scale).reshape(-1)
        if not kind.numpy:
            err = err.detach()  # autograd: accept/reject and step sizes are constants
        finite = xp.isfinite(err) & _finite(y_new)
        err = xp.where(finite, err, math.inf)
        accept = active & (err <= 1.0)
        t_new = xp.where(last, t1, t_w + h_try)
        interp, box = _lazy_interpolant(stepper, field_w, shaped(t_w), shaped(y_w), shaped(h_try), res,
                                        shaped, y_w.shape)
        hit = None
        if events is not None:
            stop = events.check(w, t_w, h_try, t_new, y_new, accept, interp)
            if stop is not None:
                hit, t_stop, y_stop = stop
                t_new = xp.where(hit, t_stop, t_new)
                y_new = _where(hit, y_stop, y_new)
        if dense is not None:  # the accepted steps (truncated at terminal events), for Trajectory.interpolate
            dense.add(w, t_w, h_try, y_w, accept, state=state_in, t_end=t_new, y_end=y_new)
        if rec.saveat is not None and bool(rec.pending(w, t_new, accept).any()):  # host decision
            rec.record_dense(w, t_w, h_try, y_new, t_new, accept, interp, whole)
        if box:
            stats.calls += box[0].nfev
            nfev[w] += box[0].nfev * active
        # step-size update, per trajectory
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
            grow = SAFETY * xp.where(err > 0, err, 1.0) ** (-alpha) * err_prev ** PI_BETA
            grow = xp.where(err > 0, grow, FACMAX)
            grow = xp.clip(grow, FACMIN, None)
            grow = xp.where(rejected_prev, xp.clip(grow, None, 1.0), xp.clip(grow, None, FACMAX))
            shrink = xp.where(finite & (err > 1.0), xp.clip(SAFETY * err ** (-1.0 / k), FACMIN, None), FACMIN)
        h_new = xp.where(accept, xp.where(last, xp.maximum(h_w, h_try), h_try) * grow, h_try * shrink)
        h_w = xp.where(active, h_new, h_w)
        err_prev = xp.where(accept, xp.clip(err, ERR_PREV_FLOOR, None), err_prev)
        rejected_prev = xp.where(active, ~accept, rejected_prev)
        nonfinite_prev = xp.where(active, ~finite, nonfinite_prev)
        t_w = xp.where(accept, t_new, t_w)
        y_w = _where(accept, y_new, y_w)
        if k1 is not None:
            k1 = _where(accept, res.k_next.reshape(y_w.shape), k1)
        n_steps[w] += accept
        n_rej[w] += active & ~accept
        if rec.saveat is None and not batch and bool(accept.all()):  # a single trajectory: every step
            rec.record_all(float(t_w[0]), shaped(y_w))
        finished = accept & last
        status[w] = xp.where(finished, REACHED, status[w])
        if hit is not None:
            status[w] = xp.where(hit, TERMINAL, status[w])
            finished = finished | hit
        done = done | finished
        tiny = active & ~accept & (h_w < UNDERFLOW_RTOL * xp.clip(xp.abs(t_w), 1.0, None))
        if _any(tiny):
            status[w] = xp.where(tiny, xp.where(nonfinite_prev, NON_FINITE, UNDERFLOW), status[w])
            t_fail[w] = xp.where(tiny, t_w, t_fail[w])
            done = done | tiny
        if bar is not None:
            running = t_w[~done]
            now = float(running.min()) if running.shape[0] else t1
            bar.update(now - progress)
            progress = now
    y_out[w] = y_w
    return y_out.reshape(batch + tail)
