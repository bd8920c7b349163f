"""Saved values of :func:`riemattn.integrate`: every save time of every trajectory.

:class:`Recorder` stores tokens or ``save_fn`` observables at the ``saveat`` times (fixed steps
land on them; adaptive steps take them from the stepper's dense output), or at every step of the
shared grid when ``saveat`` is None. :class:`_Kind` makes arrays like the tokens (NumPy or torch,
device, dtype); the stepping loops (:mod:`riemattn.solvers.core._loops`) and the events
(:mod:`riemattn.solvers.events`) use it too.
"""

from __future__ import annotations

import math

import numpy as np

from ..._backend import device_of, is_torch, namespace, to_numpy
from ..._validation import as_float_array, call_user, plain
from ...errors import ValidationError


def _where(mask, a, b):
    """Per-trajectory select between two token arrays (mask of the batch shape)."""
    return namespace(a).where(mask[..., None, None], a, b)


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

    def index(self, idx):
        """Host integer indices as an index array of the tokens' kind (NumPy: unchanged)."""
        return idx if self.numpy else self.xp.asarray(idx, dtype=self.xp.int64, device=self.device)

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

    def _allocate(self, values):
        """The store: NaN arrays (n_save, B, ...) for values (name -> array (B or rows, ...))."""
        self.store = {}
        for k, v in values.items():
            shape = (len(self.saveat_host), self.B) + tuple(v.shape[1:])
            if self.kind.numpy:
                self.store[k] = np.full(shape, np.nan, dtype=np.result_type(v.dtype, np.float64))
            else:
                floating = v.dtype.is_floating_point
                self.store[k] = self.kind.full(shape, math.nan, dtype=v.dtype if floating else None)

    def _put(self, rows, values):
        """Store ``values`` (name -> array of shape (len(rows), ...)) of the trajectories ``rows``
        (indices into the flattened batch) at their next save slots."""
        if self.store is None:
            self._allocate(values)
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

    def record_all(self, t, y, alive=None):
        """Save (t, y) for every trajectory at its next save time (fixed steps, or t0).

        ``alive`` (a mask of the batch shape): only those trajectories are saved (the others
        were stopped by a terminal event; their values stay NaN, or are NaN on the every-step grid).
        """
        if self.saveat is None:
            self.times.append(t)
            values = self._values(t, y)
            if alive is not None:
                xp, nb = self.kind.xp, len(self.batch)
                for k, v in values.items():
                    if xp.isdtype(v.dtype, "real floating"):
                        m = xp.reshape(alive, tuple(alive.shape) + (1,) * (v.ndim - nb))
                        values[k] = xp.where(m, v, xp.asarray(math.nan, dtype=v.dtype, device=self.kind.device))
            self.rows.append(values)
            return
        rows = self.kind.arange(self.B)
        if alive is not None:
            rows = rows[alive.reshape(-1)]
        self._put_whole(rows, self._values(t, y))

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

    def result(self, template=None):
        """(t, data): times (m,) and a dict of arrays of shape (m,) + batch + ....

        ``template`` (t0, y0): when no save time was reached at all (every trajectory failed before
        the first one), the saved values are NaN arrays shaped like ``save_fn(t0, y0)`` (or y0).
        """
        if self.saveat is not None and self.store is None and template is not None:
            t0, y0 = template
            values = self._values(self.kind.full(self.batch, float(t0)) if self.batch else t0, y0)
            nb = len(self.batch)
            self._allocate({k: v.reshape((self.B,) + tuple(v.shape[nb:])) for k, v in values.items()})
        if self.saveat is None:
            data = {k: self.kind.xp.stack([r[k] for r in self.rows]) for k in self.rows[0]}
            return np.asarray(self.times, dtype=float), data
        n = len(self.saveat_host)
        data = {k: v.reshape((n,) + tuple(self.batch) + tuple(v.shape[2:])) for k, v in self.store.items()}
        return self.saveat_host.copy(), data


def _span(s) -> str:
    """Times for a message: one time as a number, several as ``[first, last]`` (plain numbers)."""
    return plain(s[0]) if s.size == 1 else f"[{plain(s[0])}, {plain(s[-1])}]"


def check_saveat(saveat, t0, t1):
    if saveat is None:
        return None
    s = np.atleast_1d(as_float_array(saveat, "saveat"))
    if s.ndim != 1 or s.size == 0 or not np.all(np.isfinite(s)):
        raise ValidationError(f"saveat must be a non-empty 1-D array of finite times, got shape {s.shape}.")
    if np.any(np.diff(s) <= 0):
        raise ValidationError("saveat must be strictly increasing.")
    if s[0] < t0 - 1e-12 * max(1, abs(t0)) or s[-1] > t1 + 1e-12 * max(1, abs(t1)):
        raise ValidationError(f"saveat must lie in [t0, t1] = [{t0}, {t1}], "
                              f"got {_span(s)}.")
    return np.clip(s, t0, t1)
