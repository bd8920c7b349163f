"""Dense output of a whole solve: ``Trajectory.interpolate(t)`` (``integrate(..., dense_output=True)``).

The loops record, for every accepted step of every trajectory, its start ``(t, y)`` and size
``h``. The solution at a time ``s`` inside that step is a fresh step of size ``s - t`` from
``(t, y)`` with the same stepper and field (the method's full order, on the manifold; the same
construction as :meth:`riemattn.solvers.steppers.Stepper.interpolant` for steppers without a
native dense output), computed for the whole batch at once, one query time at a time. Memory:
one token array per accepted step, as saving every step.
"""

from __future__ import annotations

import math

import numpy as np

from ..._backend import to_numpy
from ..._validation import plain
from ...errors import ValidationError
from ._recorder import _Kind, _where


class StepLog:
    """Accepted steps of every trajectory: rows (flat batch index), start time, size, start tokens."""

    def __init__(self, batch, like):
        self.batch, self.kind = tuple(batch), _Kind(like)
        self.parts = []

    def add(self, rows, t, h, y, mask):
        """The steps of ``rows`` (flat indices) where ``mask``: start times ``t``, sizes ``h`` (arrays
        over the rows, or floats), start tokens ``y`` (rows, l, d)."""
        m = to_numpy(mask).astype(bool)
        if not m.any():
            return
        n = m.shape[0]
        t_h = np.broadcast_to(to_numpy(t) if not np.isscalar(t) else t, (n,))[m]
        h_h = np.broadcast_to(to_numpy(h) if not np.isscalar(h) else h, (n,))[m]
        idx = np.flatnonzero(m)
        sel = idx if self.kind.numpy else self.kind.asarray(idx, dtype=self.kind.xp.int64)
        self.parts.append((to_numpy(rows)[m], t_h.astype(float), h_h.astype(float), y[sel]))

    def finish(self, field, stepper, t_span) -> DenseOutput:
        return DenseOutput(self, field, stepper, t_span)


class DenseOutput:
    """``u(t)``: the solution of every trajectory at times ``t`` (see the module docstring)."""

    def __init__(self, log: StepLog, field, stepper, t_span):
        self.field, self.stepper, self.batch, self.kind = field, stepper, log.batch, log.kind
        B = math.prod(self.batch)
        xp = self.kind.xp
        if log.parts:
            rows = np.concatenate([p[0] for p in log.parts])
            t0 = np.concatenate([p[1] for p in log.parts])
            h = np.concatenate([p[2] for p in log.parts])
            ys = xp.concat([p[3] for p in log.parts]) if not self.kind.numpy else np.concatenate([p[3] for p in log.parts])
        else:
            rows, t0, h = np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0)
            ys = None
        order = np.lexsort((t0, rows))
        rows, t0, h = rows[order], t0[order], h[order]
        counts = np.bincount(rows, minlength=B)
        S = int(counts.max(initial=0))
        slot = np.arange(len(rows)) - np.repeat(np.cumsum(counts) - counts, counts)
        self.lo = np.full((B, S), np.inf)
        self.hi = np.full((B, S), -np.inf)
        self.t0 = np.zeros((B, S))
        self.h = np.zeros((B, S))
        self.index = np.full((B, S), -1, dtype=np.int64)  # into ys
        self.lo[rows, slot] = np.minimum(t0, t0 + h)
        self.hi[rows, slot] = np.maximum(t0, t0 + h)
        self.t0[rows, slot], self.h[rows, slot] = t0, h
        self.index[rows, slot] = order
        self.ys = ys
        self.span = (float(min(t_span)), float(max(t_span)))

    def __call__(self, t):
        """Tokens at the times ``t`` (a float or a 1-D array of k times): shape batch + (l, d) for a
        float, (k,) + batch + (l, d) for an array; NaN for a trajectory whose steps do not cover a time
        (it stopped or failed before it)."""
        tq = np.asarray(t, dtype=float)
        if tq.ndim > 1 or not np.all(np.isfinite(tq)):
            raise ValidationError(f"t must be a finite float or 1-D array of times, got shape {tq.shape}.")
        if self.ys is None:
            raise ValidationError("the solve recorded no step: nothing to interpolate.")
        lo, hi = self.span
        if tq.size and (tq.min() < lo - 1e-12 * max(1.0, abs(lo)) or tq.max() > hi + 1e-12 * max(1.0, abs(hi))):
            got = plain(tq) if tq.size <= 1 else f"[{plain(tq.min())}, {plain(tq.max())}]"
            raise ValidationError(f"t must lie in the solved interval [{lo}, {hi}], got {got}.")
        out = [self._at(float(s)) for s in np.atleast_1d(tq)]
        if tq.ndim == 0:
            return out[0]
        xp = self.kind.xp
        return xp.stack(out) if not self.kind.numpy else np.stack(out)

    def _at(self, s):
        kind, xp = self.kind, self.kind.xp
        B = self.lo.shape[0]
        inside = (self.lo <= s) & (s <= self.hi)
        ok = inside.any(axis=-1)
        j = np.argmax(inside, axis=-1)
        b = np.arange(B)
        idx = np.where(ok, self.index[b, j], self.index[b, 0].clip(0))
        idx = np.where(idx >= 0, idx, 0)
        t0 = np.where(ok, self.t0[b, j], 0.0)
        dt = np.where(ok, s - self.t0[b, j], 0.0)
        y = self.ys[idx if kind.numpy else kind.asarray(idx, dtype=xp.int64)]
        tail = tuple(y.shape[1:])
        shape = self.batch + tail
        arr = kind.asarray if not kind.numpy else (lambda v: v)
        res = self.stepper.step(self.field, arr(t0.reshape(self.batch)) if self.batch else float(t0[0]),
                                y.reshape(shape), arr(dt.reshape(self.batch)) if self.batch else float(dt[0]))
        u = res.y.reshape((B,) + tail)
        nan = kind.full((B,) + tail, math.nan, dtype=kind.dtype)
        return _where(kind.asarray(ok, dtype=xp.bool) if not kind.numpy else ok, u, nan).reshape(shape)
