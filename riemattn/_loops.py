"""The stepping loops of :func:`riemattn.integrate`: fixed steps, and adaptive steps per trajectory.

Both loops keep the whole batch ``y`` of shape ``batch + (l, d)`` and evaluate the field on all of
it; in the adaptive loop every trajectory has its own time, step size, accept/reject decision,
counters and status, and a finished trajectory is frozen (masked): its values are no longer
changed and its counters stop. (Compacting the batch to the unfinished trajectories instead
would change the field's batch shape, which fields with per-trajectory parameters such as an
array ``beta`` cannot follow.)

Saving: ``saveat`` times are reached exactly by fixed steps; adaptive steps are not shortened for
them, the values come from the stepper's interpolant (its dense output), retracted onto the
manifold. ``save_fn(t, y)`` stores observables instead of tokens.
"""

from __future__ import annotations

import math

import numpy as np

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
    """Saved values: every save time of every trajectory, tokens or ``save_fn`` observables."""

    def __init__(self, saveat, batch, save_fn):
        self.saveat, self.batch, self.save_fn = saveat, batch, save_fn
        self.B = math.prod(batch)
        self.next = np.zeros(batch, dtype=np.int64)  # index of each trajectory's next save time
        self.store = None  # dict name -> (n_save, B, ...) array
        self.times, self.rows = [], []  # for saveat=None (every step of the shared grid)

    def _values(self, t, y) -> dict:
        if self.save_fn is None:
            return {"y": y}
        out = self.save_fn(t, y)
        if isinstance(out, dict):
            return {k: np.asarray(v) for k, v in out.items()}
        return {"value": np.asarray(out)}

    def _put(self, slot_of_flat, mask_flat, values):
        if self.store is None:
            self.store = {}
            for k, v in values.items():
                v = np.asarray(v)
                self.store[k] = np.full((len(self.saveat), self.B) + v.shape[len(self.batch):], np.nan,
                                        dtype=np.result_type(v.dtype, np.float64))
        idx = np.nonzero(mask_flat)[0]
        for k, v in values.items():
            flat = np.asarray(v).reshape((self.B,) + np.shape(v)[len(self.batch):])
            self.store[k][slot_of_flat[idx], idx] = flat[idx]

    def record_all(self, t, y):
        """Save (t, y) for every trajectory at its next save time (fixed steps, or t0)."""
        if self.saveat is None:
            self.times.append(t)
            self.rows.append(self._values(t, y))
            return
        self._put(self.next.reshape(-1), np.ones(self.B, dtype=bool), self._values(t, y))
        self.next += 1

    def pending(self, t_new, accepted):
        """Trajectories with a save time in their accepted step (..., up to t_new)."""
        n = len(self.saveat)
        nxt = np.minimum(self.next, n - 1)
        return accepted & (self.next < n) & (self.saveat[nxt] <= t_new)

    def record_dense(self, t_old, h, y_new, t_new, accepted, interp):
        """Save every save time passed by the accepted steps, from the interpolant."""
        pend = self.pending(t_new, accepted)
        while pend.any():
            s = self.saveat[np.minimum(self.next, len(self.saveat) - 1)]
            at_end = s >= t_new
            with np.errstate(invalid="ignore", divide="ignore"):
                theta = np.where(pend & ~at_end, (s - t_old) / np.where(h > 0, h, 1.0), 1.0)
            theta = np.clip(theta, 0.0, 1.0)
            ys = interp(theta) if (pend & ~at_end).any() else y_new
            ys = _where(at_end, y_new, ys)
            self._put(self.next.reshape(-1), pend.reshape(-1), self._values(s, ys))
            self.next += pend
            pend = self.pending(t_new, pend)

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


def run_adaptive(field, stepper, y, t0, t1, rtol, atol, h, rec: Recorder, stats: Stats, max_steps, bar):
    batch = y.shape[:-2]
    k = (stepper.error_order or stepper.order) + 1
    alpha = 1.0 / k - 0.75 * PI_BETA
    t = np.full(batch, t0)
    done = np.zeros(batch, dtype=bool) if t1 > t0 else np.ones(batch, dtype=bool)
    stats.status[done] = REACHED
    k1 = None
    if stepper.fsal or h is None:
        k1 = field(t0, y)
        stats.calls += 1
        stats.nfev += 1
    if h is None:
        h = initial_step(field, stepper, t0, y, k1, rtol, atol, t1)
        stats.calls += 1
        stats.nfev += 1
        if not stepper.fsal:
            k1 = None
    h = np.broadcast_to(np.asarray(h, dtype=float), batch).copy()
    err_prev = np.ones(batch)
    rejected_prev = np.zeros(batch, dtype=bool)
    nonfinite_prev = np.zeros(batch, dtype=bool)
    while not done.all():
        active = ~done
        over = active & (stats.n_steps + stats.n_rejected >= max_steps)
        if over.any():
            stats.status[over] = MAX_STEPS
            stats.t_fail[over] = t[over]
            done |= over
            active &= ~over
            if not active.any():
                break
        remaining = t1 - t
        h_try = np.where(active, np.minimum(h, remaining), 0.0)
        last = active & (h_try >= remaining - 1e-12 * max(1.0, abs(t1)))
        h_try = np.where(last, remaining, h_try)
        res = stepper.step(field, t, y, h_try, k1)
        stats.calls += res.nfev
        stats.nfev[active] += res.nfev
        scale = atol + rtol * np.maximum(np.abs(y), np.abs(res.y))
        with np.errstate(invalid="ignore", over="ignore"):
            err = stepper.error_norm(res, scale)
        finite = np.isfinite(err) & _finite(res.y)
        err = np.where(finite, err, np.inf)
        accept = active & (err <= 1.0)
        t_new = np.where(last, t1, t + h_try)
        if rec.saveat is not None and rec.pending(t_new, accept).any():
            interp = stepper.interpolant(field, t, y, h_try, res)
            rec.record_dense(t, h_try, res.y, t_new, accept, interp)
            stats.calls += interp.nfev
            stats.nfev[active] += interp.nfev
        # step-size update, per trajectory
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
            grow = SAFETY * np.where(err > 0, err, 1.0) ** (-alpha) * err_prev ** PI_BETA
            grow = np.where(err > 0, grow, FACMAX)
            grow = np.clip(grow, FACMIN, np.where(rejected_prev, 1.0, FACMAX))
            shrink = np.where(finite & (err > 1.0), np.maximum(FACMIN, SAFETY * err ** (-1.0 / k)), FACMIN)
        h_new = np.where(accept, np.where(last, np.maximum(h, h_try), h_try) * grow, h_try * shrink)
        h = np.where(active, h_new, h)
        err_prev = np.where(accept, np.maximum(err, 1e-4), err_prev)
        rejected_prev = np.where(active, ~accept, rejected_prev)
        nonfinite_prev = np.where(active, ~finite, nonfinite_prev)
        if bar is not None:
            bar.update(float(np.min(np.where(accept, t_new, t)) - np.min(t)))
        t = np.where(accept, t_new, t)
        y = _where(accept, res.y, y)
        if k1 is not None:
            k1 = _where(accept, res.k_next, k1)
        stats.n_steps += accept
        stats.n_rejected += active & ~accept
        if rec.saveat is None and accept.all():  # a single trajectory: save every step
            rec.record_all(float(t), y)
        finished = accept & last
        stats.status[finished] = REACHED
        done |= finished
        tiny = active & ~accept & (h < 1e-14 * np.maximum(1.0, np.abs(t)))
        if tiny.any():
            stats.status[tiny] = np.where(nonfinite_prev[tiny], NON_FINITE, UNDERFLOW)
            stats.t_fail[tiny] = t[tiny]
            done |= tiny
    return y
