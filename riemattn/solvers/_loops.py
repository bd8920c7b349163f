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
manifold. ``save_fn(t, y)`` stores observables instead of tokens.

Array backends: both loops run on NumPy arrays or PyTorch tensors (``riemattn._backend``, docs/performance.md);
with tensors every per-trajectory quantity (times, step sizes, counters, status) lives on the
tokens' device and the step-size decisions are array operations. The host is consulted
(a synchronisation) once per adaptive step, for the number of unfinished trajectories (to stop, and
to compact the batch), and on steps that pass a save time; the fixed-step loop checks for
trajectories that all failed every ``_SYNC_EVERY`` steps only.
"""

from __future__ import annotations

import math

import numpy as np

from .._backend import copy, device_of, is_torch, namespace, to_numpy
from .._validation import call_user

#: status codes of a trajectory
REACHED, RUNNING, MAX_STEPS, UNDERFLOW, NON_FINITE = 0, 1, -1, -2, -3
MESSAGES = {
    REACHED: "reached t1",
    RUNNING: "not finished",
    MAX_STEPS: "reached max_steps",
    UNDERFLOW: "step size underflow (the problem may be stiff or singular)",
    NON_FINITE: "the field or the state became NaN or inf",
}


#: With tensors, the fixed-step loop asks the device whether any trajectory is still alive (a
#: synchronisation) only every this many steps.
_SYNC_EVERY = 64


def _rms(x):
    xp = namespace(x)
    return xp.sqrt(xp.mean(xp.square(x), axis=(-2, -1)))


def _where(mask, a, b):
    """Per-trajectory select between two token arrays (mask of the batch shape)."""
    return namespace(a).where(mask[..., None, None], a, b)


def _finite(y):
    xp = namespace(y)
    return xp.all(xp.isfinite(y), axis=(-2, -1))


def _any(mask) -> bool:
    """``mask.any()`` for NumPy; True for tensors (the caller then applies its masked update
    unconditionally instead of synchronising with the device to decide)."""
    return bool(mask.any()) if type(mask) is np.ndarray else True


class _Kind:
    """How to make arrays like the tokens: namespace, device and float dtype."""

    def __init__(self, y):
        self.xp, self.device, self.dtype = namespace(y), device_of(y), y.dtype
        self.numpy = self.xp is np

    def full(self, shape, value, dtype=None):
        xp = self.xp
        return xp.full(shape, value, dtype=dtype or xp.float64, device=self.device)

    def arange(self, n):
        return self.xp.arange(n, device=self.device)

    def asarray(self, value, dtype=None):
        """Host values (NumPy, floats) as an array on the device (float64 unless ``dtype``)."""
        xp = self.xp
        return xp.asarray(value, dtype=dtype or xp.float64, device=self.device)


class Recorder:
    """Saved values: every save time of every trajectory, tokens or ``save_fn`` observables.

    Trajectories are addressed by their index in the flattened batch (``rows``); ``save_fn`` is
    always called on the whole batch, in its original shape.
    """

    def __init__(self, saveat, batch, save_fn, like=None):
        self.batch, self.save_fn = batch, save_fn
        self.kind = _Kind(np.zeros(0) if like is None else like)
        self.saveat_host = saveat  # NumPy (or None)
        self.saveat = None if saveat is None else self.kind.asarray(saveat)
        self.B = math.prod(batch)
        # index of each trajectory's next save time
        self.next = self.kind.full((self.B,), 0, dtype=self.kind.xp.int64)
        self.store = None  # dict name -> (n_save, B, ...) array
        self.times, self.rows = [], []  # for saveat=None (every step of the shared grid)

    def _array(self, v):
        """A saved value as an array of the tokens' kind (NumPy results of save_fn are moved)."""
        if self.kind.numpy:
            return to_numpy(v)
        if is_torch(v):
            return v
        arr = np.asarray(v)
        return self.kind.xp.asarray(arr, dtype=self.kind.dtype if arr.dtype.kind == "f" else None,
                                    device=self.kind.device)

    def _values(self, t, y) -> dict:
        if self.save_fn is None:
            return {"y": y}
        out = call_user(self.save_fn, "save_fn(t, y)", t, t, y)
        if isinstance(out, dict):
            return {k: self._array(v) for k, v in out.items()}
        return {"value": self._array(out)}

    def _put(self, rows, values):
        """Store ``values`` (name -> array of shape (len(rows), ...)) of the trajectories ``rows``
        (indices into the flattened batch) at their next save slots."""
        if self.store is None:
            self.store = {}
            for k, v in values.items():
                shape = (len(self.saveat_host), self.B) + tuple(v.shape[1:])
                if self.kind.numpy:
                    self.store[k] = np.full(shape, np.nan, dtype=np.result_type(v.dtype, np.float64))
                else:
                    floating = v.dtype.is_floating_point
                    self.store[k] = self.kind.full(shape, math.nan, dtype=v.dtype if floating else None)
        slots = self.next[rows]
        for k, v in values.items():
            store = self.store[k]
            if not self.kind.numpy and v.dtype != store.dtype:  # e.g. bool observables, float64 store
                v = v.to(store.dtype)
            store[slots, rows] = v
        self.next[rows] += 1

    def _put_whole(self, rows, values):
        """:meth:`_put` for values of the whole batch (leading axes: the batch shape)."""
        nb = len(self.batch)
        self._put(rows, {k: v.reshape((self.B,) + tuple(v.shape[nb:]))[rows] for k, v in values.items()})

    def record_all(self, t, y):
        """Save (t, y) for every trajectory at its next save time (fixed steps, or t0)."""
        if self.saveat is None:
            self.times.append(t)
            self.rows.append(self._values(t, y))
            return
        self._put_whole(self.kind.arange(self.B), self._values(t, y))

    def pending(self, rows, t_new, accepted):
        """Which of the trajectories ``rows`` have a save time in their accepted step (..., t_new]."""
        n = len(self.saveat_host)
        nxt = self.next[rows]
        return accepted & (nxt < n) & (self.saveat[self.kind.xp.clip(nxt, 0, n - 1)] <= t_new)

    def record_dense(self, rows, t_old, h, y_new, t_new, accepted, interp, whole):
        """Save every save time passed by the accepted steps of the trajectories ``rows``.

        ``t_old``, ``h``, ``t_new``, ``accepted`` are flat over ``rows``, ``y_new`` has shape
        (len(rows), l, d); ``interp(theta)`` gives the tokens at ``t_old + theta h``;
        ``whole(ys)`` puts tokens of ``rows`` into a copy of the whole batch (original shape).
        """
        xp = self.kind.xp
        n = len(self.saveat_host)
        pend = self.pending(rows, t_new, accepted)
        while bool(pend.any()):  # a host decision (a synchronisation for tensors), on saving steps
            s = self.saveat[xp.clip(self.next[rows], 0, n - 1)]
            at_end = s >= t_new
            between = pend & ~at_end
            ys = y_new
            if bool(between.any()):
                with np.errstate(invalid="ignore", divide="ignore"):
                    theta = xp.where(between, (s - t_old) / xp.where(h > 0, h, 1.0), 1.0)
                ys = _where(at_end, y_new, interp(xp.clip(theta, 0.0, 1.0)))
            if self.save_fn is None:
                self._put(rows[pend], {"y": ys[pend]})
            else:
                # rows not saved now: any valid time
                times = self.kind.full((self.B,), float(self.saveat_host[-1]))
                times[rows] = s
                self._put_whole(rows[pend], self._values(times.reshape(self.batch), whole(ys)))
            pend = self.pending(rows, t_new, pend)

    def result(self):
        """(t, data): times (m,) and a dict of arrays of shape (m,) + batch + ...."""
        if self.saveat is None:
            data = {k: self.kind.xp.stack([r[k] for r in self.rows]) for k in self.rows[0]}
            return np.asarray(self.times, dtype=float), data
        n = len(self.saveat_host)
        data = {k: v.reshape((n,) + tuple(self.batch) + tuple(v.shape[2:])) for k, v in self.store.items()}
        return self.saveat_host.copy(), data


class Stats:
    """Per-trajectory counters and status."""

    def __init__(self, batch, like=None):
        kind = _Kind(np.zeros(0) if like is None else like)
        i64 = kind.xp.int64
        self.nfev = kind.full(batch, 0, i64)
        self.n_steps = kind.full(batch, 0, i64)
        self.n_rejected = kind.full(batch, 0, i64)
        self.status = kind.full(batch, RUNNING, i64)
        self.t_fail = kind.full(batch, math.nan)
        self.calls = 0  # field evaluations of the whole batch

    def host(self) -> dict:
        """The per-trajectory arrays as NumPy arrays (one copy from the device for tensors)."""
        return {k: to_numpy(getattr(self, k)) for k in ("nfev", "n_steps", "n_rejected", "status", "t_fail")}


def run_fixed(field, stepper, y, t0, t1, dt, saveat, rec: Recorder, stats: Stats, max_steps, bar):
    """Shared step size: each interval between save times (and t1) split into equal steps <= dt."""
    t = t0
    targets = [] if saveat is None else [s for s in saveat.tolist() if s > t0]
    if not targets or targets[-1] < t1:
        targets.append(t1)
    save_times = set() if saveat is None else set(saveat.tolist())
    xp = namespace(y)
    alive = xp.ones(tuple(y.shape[:-2]), dtype=xp.bool, device=device_of(y))
    steps = 0
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
            y = _where(alive, res.y, y)
            t_new = target if k == n else start + k * h
            if bar is not None:
                bar.update(t_new - t)
            t = t_new
            if saveat is None:
                rec.record_all(t, y)
            if (xp is np or steps % _SYNC_EVERY == 0) and not bool(alive.any()):
                return y
        if t in save_times:
            rec.record_all(t, y)
    stats.status[...] = xp.where(alive, REACHED, stats.status)
    return y


def initial_step(field, stepper, t0, y0, f0, rtol, atol, t1):
    """Hairer, Norsett & Wanner (1993), II.4 'starting step size', per trajectory (2 evaluations)."""
    xp = namespace(y0)
    scale = atol + xp.abs(y0) * rtol
    d0, d1 = _rms(y0 / scale), _rms(f0 / scale)
    h0 = xp.where((d0 < 1e-5) | (d1 < 1e-5), 1e-6, 0.01 * d0 / xp.where(d1 > 0, d1, 1.0))
    h0 = xp.clip(h0, None, t1 - t0)
    y1 = field.manifold.retract(y0 + h0[..., None, None] * f0)
    f1 = field(t0 + h0, y1)
    d2 = _rms((f1 - f0) / scale) / h0
    dmax = xp.maximum(d1, d2)
    with np.errstate(divide="ignore"):
        h1 = xp.where(dmax <= 1e-15, xp.clip(h0 * 1e-3, 1e-6, None),
                      (0.01 / xp.where(dmax > 0, dmax, 1.0)) ** (1.0 / (stepper.order + 1)))
    return xp.clip(xp.minimum(100 * h0, h1), None, t1 - t0)


#: PI step-size controller (Gustafsson 1991, as in Hairer's DOPRI5 with its default beta = 0.04):
#: h_new = h * safety * err^(-alpha) * err_prev^beta, alpha = 1/k - 0.75 beta, k = error order + 1.
#: The integral term alone (beta = 0) lets the step size oscillate where it is limited by a stiff
#: or contracting mode (large beta attention, near consensus); the small proportional term damps
#: that at no cost elsewhere. After a rejection the step is not allowed to grow.
PI_BETA, SAFETY, FACMIN, FACMAX = 0.04, 0.9, 0.2, 10.0


#: A batch is compacted to its unfinished trajectories when they are fewer than this fraction of
#: the rows being stepped (fields that support it: :meth:`riemattn.dynamics.fields.Field.take`).
COMPACT_BELOW = 0.8


def run_adaptive(field, stepper, y, t0, t1, rtol, atol, h, rec: Recorder, stats: Stats, max_steps, bar):
    """Per-trajectory adaptive steps (PI control) from t0 to t1; returns the final tokens.

    The state is kept flat over the batch: ``w`` holds the (flattened-batch) indices of the rows
    being stepped. Fields with a :meth:`~riemattn.dynamics.fields.Field.take` method are evaluated on the
    unfinished trajectories only (the rows are compacted when fewer than ``COMPACT_BELOW`` of
    them are still running); other fields see the whole batch in its shape, and finished
    trajectories are frozen (masked). Every per-trajectory decision is an array operation; the
    only host decisions per step are the number of unfinished rows and, on steps that pass a
    save time, the saving (see the module docstring).
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
    k1 = None
    if stepper.fsal or h is None:
        k1 = field_w(t0, shaped(y_w))
        stats.calls += 1
        nfev += 1
    if h is None:
        h = initial_step(field_w, stepper, t0, shaped(y_w), k1, rtol, atol, t1)
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
        last = active & (h_try >= remaining - 1e-12 * max(1.0, abs(t1)))
        h_try = xp.where(last, remaining, h_try)
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
        finite = xp.isfinite(err) & _finite(y_new)
        err = xp.where(finite, err, math.inf)
        accept = active & (err <= 1.0)
        t_new = xp.where(last, t1, t_w + h_try)
        if rec.saveat is not None and bool(rec.pending(w, t_new, accept).any()):  # host decision
            interp = stepper.interpolant(field_w, shaped(t_w), shaped(y_w), shaped(h_try), res)
            rec.record_dense(w, t_w, h_try, y_new, t_new, accept,
                             lambda th: interp(shaped(th)).reshape(y_w.shape), whole)
            stats.calls += interp.nfev
            nfev[w] += interp.nfev * active
        # step-size update, per trajectory
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
            grow = SAFETY * xp.where(err > 0, err, 1.0) ** (-alpha) * err_prev ** PI_BETA
            grow = xp.where(err > 0, grow, FACMAX)
            grow = xp.clip(grow, FACMIN, None)
            grow = xp.where(rejected_prev, xp.clip(grow, None, 1.0), xp.clip(grow, None, FACMAX))
            shrink = xp.where(finite & (err > 1.0), xp.clip(SAFETY * err ** (-1.0 / k), FACMIN, None), FACMIN)
        h_new = xp.where(accept, xp.where(last, xp.maximum(h_w, h_try), h_try) * grow, h_try * shrink)
        h_w = xp.where(active, h_new, h_w)
        err_prev = xp.where(accept, xp.clip(err, 1e-4, None), err_prev)
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
        done = done | finished
        tiny = active & ~accept & (h_w < 1e-14 * xp.clip(xp.abs(t_w), 1.0, None))
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
