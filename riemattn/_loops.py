"""The stepping loops of :func:`riemattn.integrate`: fixed steps, and adaptive steps per trajectory.

The fixed-step loop keeps the whole batch ``y`` of shape ``batch + (l, d)`` and evaluates the
field on all of it. In the adaptive loop every trajectory has its own time, step size,
accept/reject decision, counters and status. Trajectories that have finished stop costing work:
for fields that can be restricted to a sub-batch (:meth:`riemattn.fields.Field.take`; e.g.
``AttentionField``, with its per-trajectory beta taken along) the batch is flattened and
compacted to the unfinished trajectories whenever fewer than ``COMPACT_BELOW`` of the rows being
stepped are still running; other fields see the whole batch in its shape and finished
trajectories are frozen (masked). On the 100-trajectory hemisphere ensemble (dop853, tol 1e-9,
mean 137 and max 241 steps) compaction cut the wall time by 12 % against masking.

Saving: ``saveat`` times are reached exactly by fixed steps; adaptive steps are not shortened for
them, the values come from the stepper's interpolant (its dense output), retracted onto the
manifold. ``save_fn(t, y)`` stores observables instead of tokens.
"""

from __future__ import annotations

import math

import numpy as np

from ._validation import call_user

#: status codes of a trajectory
REACHED, RUNNING, MAX_STEPS, UNDERFLOW, NON_FINITE = 0, 1, -1, -2, -3
MESSAGES = {
    REACHED: "reached t1",
    RUNNING: "not finished",
    MAX_STEPS: "reached max_steps",
    UNDERFLOW: "step size underflow (the problem may be stiff or singular)",
    NON_FINITE: "the field or the state became NaN or inf",
}


def _rms(x):
    return np.sqrt(np.mean(np.square(x), axis=(-2, -1)))


def _where(mask, a, b):
    """Per-trajectory select between two token arrays (mask of the batch shape)."""
    return np.where(mask[..., None, None], a, b)


def _finite(y):
    return np.isfinite(y).all(axis=(-2, -1))


class Recorder:
    """Saved values: every save time of every trajectory, tokens or ``save_fn`` observables.

    Trajectories are addressed by their index in the flattened batch (``rows``); ``save_fn`` is
    always called on the whole batch, in its original shape.
    """

    def __init__(self, saveat, batch, save_fn):
        self.saveat, self.batch, self.save_fn = saveat, batch, save_fn
        self.B = math.prod(batch)
        self.next = np.zeros(self.B, dtype=np.int64)  # index of each trajectory's next save time
        self.store = None  # dict name -> (n_save, B, ...) array
        self.times, self.rows = [], []  # for saveat=None (every step of the shared grid)

    def _values(self, t, y) -> dict:
        if self.save_fn is None:
            return {"y": y}
        out = call_user(self.save_fn, "save_fn(t, y)", t, t, y)
        if isinstance(out, dict):
            return {k: np.asarray(v) for k, v in out.items()}
        return {"value": np.asarray(out)}

    def _put(self, rows, values):
        """Store ``values`` (name -> array of shape (len(rows), ...)) of the trajectories ``rows``
        (indices into the flattened batch) at their next save slots."""
        if self.store is None:
            self.store = {k: np.full((len(self.saveat), self.B) + v.shape[1:], np.nan,
                                     dtype=np.result_type(v.dtype, np.float64)) for k, v in values.items()}
        slots = self.next[rows]
        for k, v in values.items():
            self.store[k][slots, rows] = v
        self.next[rows] += 1

    def _put_whole(self, rows, values):
        """:meth:`_put` for values of the whole batch (leading axes: the batch shape)."""
        nb = len(self.batch)
        self._put(rows, {k: np.reshape(v, (self.B,) + np.shape(v)[nb:])[rows] for k, v in values.items()})

    def record_all(self, t, y):
        """Save (t, y) for every trajectory at its next save time (fixed steps, or t0)."""
        if self.saveat is None:
            self.times.append(t)
            self.rows.append(self._values(t, y))
            return
        self._put_whole(np.arange(self.B), self._values(t, y))

    def pending(self, rows, t_new, accepted):
        """Which of the trajectories ``rows`` have a save time in their accepted step (..., t_new]."""
        n = len(self.saveat)
        nxt = self.next[rows]
        return accepted & (nxt < n) & (self.saveat[np.minimum(nxt, n - 1)] <= t_new)

    def record_dense(self, rows, t_old, h, y_new, t_new, accepted, interp, whole):
        """Save every save time passed by the accepted steps of the trajectories ``rows``.

        ``t_old``, ``h``, ``t_new``, ``accepted`` are flat over ``rows``, ``y_new`` has shape
        (len(rows), l, d); ``interp(theta)`` gives the tokens at ``t_old + theta h``;
        ``whole(ys)`` puts tokens of ``rows`` into a copy of the whole batch (original shape).
        """
        n = len(self.saveat)
        pend = self.pending(rows, t_new, accepted)
        while pend.any():
            s = self.saveat[np.minimum(self.next[rows], n - 1)]
            at_end = s >= t_new
            between = pend & ~at_end
            ys = y_new
            if between.any():
                with np.errstate(invalid="ignore", divide="ignore"):
                    theta = np.where(between, (s - t_old) / np.where(h > 0, h, 1.0), 1.0)
                ys = _where(at_end, y_new, interp(np.clip(theta, 0.0, 1.0)))
            if self.save_fn is None:
                self._put(rows[pend], {"y": ys[pend]})
            else:
                times = np.full(self.B, self.saveat[-1])  # rows not saved now: any valid time
                times[rows] = s
                self._put_whole(rows[pend], self._values(times.reshape(self.batch), whole(ys)))
            pend = self.pending(rows, t_new, pend)

    def result(self):
        """(t, data): times (m,) and a dict of arrays of shape (m,) + batch + ...."""
        if self.saveat is None:
            data = {k: np.stack([r[k] for r in self.rows]) for k in self.rows[0]}
            return np.asarray(self.times, dtype=float), data
        data = {k: v.reshape((len(self.saveat),) + self.batch + v.shape[2:]) for k, v in self.store.items()}
        return self.saveat.copy(), data


class Stats:
    """Per-trajectory counters and status."""

    def __init__(self, batch):
        self.nfev = np.zeros(batch, dtype=np.int64)
        self.n_steps = np.zeros(batch, dtype=np.int64)
        self.n_rejected = np.zeros(batch, dtype=np.int64)
        self.status = np.full(batch, RUNNING, dtype=np.int64)
        self.t_fail = np.full(batch, np.nan)
        self.calls = 0  # field evaluations of the whole batch


def run_fixed(field, stepper, y, t0, t1, dt, saveat, rec: Recorder, stats: Stats, max_steps, bar):
    """Shared step size: each interval between save times (and t1) split into equal steps <= dt."""
    t = t0
    targets = [] if saveat is None else [s for s in saveat.tolist() if s > t0]
    if not targets or targets[-1] < t1:
        targets.append(t1)
    save_times = set() if saveat is None else set(saveat.tolist())
    alive = np.ones(y.shape[:-2], dtype=bool)
    for target in targets:
        n = max(1, math.ceil((target - t) / dt - 1e-9))
        start, h = t, (target - t) / n
        for k in range(1, n + 1):
            if stats.n_steps.max(initial=0) >= max_steps:
                stats.status[alive] = MAX_STEPS
                stats.t_fail[alive] = t
                return y
            res = stepper.step(field, t, y, h)
            stats.calls += res.nfev
            stats.nfev[alive] += res.nfev
            stats.n_steps[alive] += 1
            bad = alive & ~_finite(res.y)
            if bad.any():
                stats.status[bad] = NON_FINITE
                stats.t_fail[bad] = t
                alive &= ~bad
            y = _where(alive, res.y, y)
            t_new = target if k == n else start + k * h
            if bar is not None:
                bar.update(t_new - t)
            t = t_new
            if saveat is None:
                rec.record_all(t, y)
            if not alive.any():
                return y
        if t in save_times:
            rec.record_all(t, y)
    stats.status[alive] = REACHED
    return y


def initial_step(field, stepper, t0, y0, f0, rtol, atol, t1):
    """Hairer, Norsett & Wanner (1993), II.4 'starting step size', per trajectory (2 evaluations)."""
    scale = atol + np.abs(y0) * rtol
    d0, d1 = _rms(y0 / scale), _rms(f0 / scale)
    h0 = np.where((d0 < 1e-5) | (d1 < 1e-5), 1e-6, 0.01 * d0 / np.where(d1 > 0, d1, 1.0))
    h0 = np.minimum(h0, t1 - t0)
    y1 = field.manifold.retract(y0 + h0[..., None, None] * f0)
    f1 = field(t0 + h0, y1)
    d2 = _rms((f1 - f0) / scale) / h0
    dmax = np.maximum(d1, d2)
    with np.errstate(divide="ignore"):
        h1 = np.where(dmax <= 1e-15, np.maximum(1e-6, h0 * 1e-3),
                      (0.01 / np.where(dmax > 0, dmax, 1.0)) ** (1.0 / (stepper.order + 1)))
    return np.minimum(np.minimum(100 * h0, h1), t1 - t0)


#: PI step-size controller (Gustafsson 1991, as in Hairer's DOPRI5 with its default beta = 0.04):
#: h_new = h * safety * err^(-alpha) * err_prev^beta, alpha = 1/k - 0.75 beta, k = error order + 1.
#: The integral term alone (beta = 0) lets the step size oscillate where it is limited by a stiff
#: or contracting mode (large beta attention, near consensus); the small proportional term damps
#: that at no cost elsewhere. After a rejection the step is not allowed to grow.
PI_BETA, SAFETY, FACMIN, FACMAX = 0.04, 0.9, 0.2, 10.0


#: A batch is compacted to its unfinished trajectories when they are fewer than this fraction of
#: the rows being stepped (fields that support it: :meth:`riemattn.fields.Field.take`).
COMPACT_BELOW = 0.8


def run_adaptive(field, stepper, y, t0, t1, rtol, atol, h, rec: Recorder, stats: Stats, max_steps, bar):
    """Per-trajectory adaptive steps (PI control) from t0 to t1; returns the final tokens.

    The state is kept flat over the batch: ``w`` holds the (flattened-batch) indices of the rows
    being stepped. Fields with a :meth:`~riemattn.fields.Field.take` method are evaluated on the
    unfinished trajectories only (the rows are compacted when fewer than ``COMPACT_BELOW`` of
    them are still running); other fields see the whole batch in its shape, and finished
    trajectories are frozen (masked).
    """
    batch, tail = y.shape[:-2], y.shape[-2:]
    B = math.prod(batch)
    sub = field.take(np.arange(B), batch) if B > 1 and callable(getattr(field, "take", None)) else None
    compact = sub is not None
    field_w = sub if compact else field

    def shaped(a):  # flat per-row arrays as the field and stepper see them
        return a if compact else a.reshape(batch + a.shape[1:])

    k = (stepper.error_order or stepper.order) + 1
    alpha = 1.0 / k - 0.75 * PI_BETA
    nfev, n_steps, n_rej = stats.nfev.reshape(-1), stats.n_steps.reshape(-1), stats.n_rejected.reshape(-1)
    status, t_fail = stats.status.reshape(-1), stats.t_fail.reshape(-1)
    y_out = y.reshape((B,) + tail).copy()
    w = np.arange(B)
    y_w = y_out.copy()
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
    h_w = np.broadcast_to(np.asarray(h, dtype=float).reshape(-1) if np.ndim(h) else float(h), (B,)).copy()
    t_w = np.full(B, t0)
    done = np.full(B, not t1 > t0)
    status[done] = REACHED
    err_prev = np.ones(B)
    rejected_prev = np.zeros(B, dtype=bool)
    nonfinite_prev = np.zeros(B, dtype=bool)
    progress = t0

    def whole(ys):  # tokens of the rows w inside the whole batch (for save_fn)
        out = y_out.copy()
        out[w] = ys
        return out.reshape(batch + tail)

    while True:
        n_active = w.size - np.count_nonzero(done)
        if compact and n_active < COMPACT_BELOW * w.size:
            y_out[w[done]] = y_w[done]
            keep = ~done
            w, y_w, t_w, h_w = w[keep], y_w[keep], t_w[keep], h_w[keep]
            err_prev, rejected_prev, nonfinite_prev = err_prev[keep], rejected_prev[keep], nonfinite_prev[keep]
            k1 = None if k1 is None else k1[keep]
            done = done[keep]
            if w.size:
                field_w = field.take(w, batch)
        if n_active == 0:
            break
        active = ~done
        over = active & (n_steps[w] + n_rej[w] >= max_steps)
        if over.any():
            status[w[over]] = MAX_STEPS
            t_fail[w[over]] = t_w[over]
            done |= over
            continue
        remaining = t1 - t_w
        h_try = np.where(active, np.minimum(h_w, remaining), 0.0)
        last = active & (h_try >= remaining - 1e-12 * max(1.0, abs(t1)))
        h_try = np.where(last, remaining, h_try)
        res = stepper.step(field_w, shaped(t_w), shaped(y_w), shaped(h_try), None if k1 is None else shaped(k1))
        stats.calls += res.nfev
        rows = w[active]
        nfev[rows] += res.nfev
        y_new = res.y.reshape(y_w.shape)
        scale = atol + rtol * np.maximum(np.abs(shaped(y_w)), np.abs(res.y))
        with np.errstate(invalid="ignore", over="ignore"):
            err = np.reshape(stepper.error_norm(res, scale), -1)
        finite = np.isfinite(err) & _finite(y_new)
        err = np.where(finite, err, np.inf)
        accept = active & (err <= 1.0)
        t_new = np.where(last, t1, t_w + h_try)
        if rec.saveat is not None and rec.pending(w, t_new, accept).any():
            interp = stepper.interpolant(field_w, shaped(t_w), shaped(y_w), shaped(h_try), res)
            rec.record_dense(w, t_w, h_try, y_new, t_new, accept,
                             lambda th: interp(shaped(th)).reshape(y_w.shape), whole)
            stats.calls += interp.nfev
            nfev[rows] += interp.nfev
        # step-size update, per trajectory
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
            grow = SAFETY * np.where(err > 0, err, 1.0) ** (-alpha) * err_prev ** PI_BETA
            grow = np.where(err > 0, grow, FACMAX)
            grow = np.clip(grow, FACMIN, np.where(rejected_prev, 1.0, FACMAX))
            shrink = np.where(finite & (err > 1.0), np.maximum(FACMIN, SAFETY * err ** (-1.0 / k)), FACMIN)
        h_new = np.where(accept, np.where(last, np.maximum(h_w, h_try), h_try) * grow, h_try * shrink)
        h_w = np.where(active, h_new, h_w)
        err_prev = np.where(accept, np.maximum(err, 1e-4), err_prev)
        rejected_prev = np.where(active, ~accept, rejected_prev)
        nonfinite_prev = np.where(active, ~finite, nonfinite_prev)
        t_w = np.where(accept, t_new, t_w)
        y_w = _where(accept, y_new, y_w)
        if k1 is not None:
            k1 = _where(accept, res.k_next.reshape(y_w.shape), k1)
        n_steps[w] += accept
        n_rej[w] += active & ~accept
        if rec.saveat is None and accept.all():  # a single trajectory: save every step
            rec.record_all(float(t_w[0]), shaped(y_w))
        finished = accept & last
        status[w[finished]] = REACHED
        done |= finished
        tiny = active & ~accept & (h_w < 1e-14 * np.maximum(1.0, np.abs(t_w)))
        if tiny.any():
            status[w[tiny]] = np.where(nonfinite_prev[tiny], NON_FINITE, UNDERFLOW)
            t_fail[w[tiny]] = t_w[tiny]
            done |= tiny
        if bar is not None:
            running = t_w[~done]
            now = float(running.min()) if running.size else t1
            bar.update(now - progress)
            progress = now
    y_out[w] = y_w
    return y_out.reshape(batch + tail)
