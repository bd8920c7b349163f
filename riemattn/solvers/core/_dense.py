"""Dense output of a whole solve: ``Trajectory.interpolate(t)`` (``integrate(..., dense_output=True)``).

The loops record, for every accepted step of every trajectory, its start ``(t, y)``, the step
size ``h`` the stepper took, where the step ended (``t_end``: ``t + h``, or a terminal event
inside it), the state the stepper carried into it (``StepResult.state``: which method ``"auto"``
used for that step) and, per trajectory, the last step's end tokens. The solution at a time ``s``
is then:

* at the start of an accepted step, that step's start tokens, exactly (so at every interior step
  end the stored state, and ``y0`` at ``t0``); at a trajectory's last step end, its stored end
  tokens, exactly;
* inside a step, the step's own dense output (:meth:`riemattn.solvers.steppers.Stepper.interpolant`)
  at ``theta = (s - t) / h``: the step is taken again from ``(t, y)`` with the same ``h``, field
  and carried state (so the same method: RODAS4P where ``"auto"`` stepped stiffly), which
  reproduces it to rounding, and its continuous extension is evaluated -- the values the solve
  itself saved at ``saveat`` times and located events on. Steppers without a native dense output
  (``dense_order`` None) take a fresh step of size ``s - t`` instead (their full order).

Evaluation is vectorised: the steps that contain query times are re-taken as one batch (the
field restricted to their trajectories with :meth:`~riemattn.dynamics.fields.Field.take`), each
repeated so that about ``sqrt(k)`` calls of the batch's interpolant cover the k (query,
trajectory) pairs; fresh steps are one batched step over all pairs. Batches are cut into chunks
that bound the memory. A field that cannot be restricted (``take`` None) is stepped on its whole
batch once per query time. Memory: one token array per accepted step, as saving every step.
"""

from __future__ import annotations

import math

import numpy as np

from ..._backend import to_numpy
from ..._validation import plain
from ...errors import ValidationError
from ._recorder import _Kind

#: Rows of one batched step are bounded so that its largest arrays (a Rosenbrock step's Jacobians,
#: (rows, l d, l d), or about 16 stage arrays of tokens) stay near this many floats.
CHUNK_FLOATS = 1 << 22


class StepLog:
    """Accepted steps of every trajectory (rows: flat batch indices): start time, step size, end
    time, start tokens, carried stepper state; and each trajectory's latest step end."""

    def __init__(self, batch, like):
        self.batch, self.kind = tuple(batch), _Kind(like)
        self.parts = []
        self.t_end = np.full(math.prod(self.batch), np.nan)
        self.y_end = None

    def add(self, rows, t, h, y, mask, state=None, t_end=None, y_end=None):
        """The steps of ``rows`` (flat indices) where ``mask``: start times ``t`` and the sizes
        ``h`` the stepper took (arrays over the rows, or floats), start tokens ``y`` (rows, l, d),
        the state carried into the step (rows, m) or None; ``t_end`` where the step ended (default
        ``t + h``; earlier at a terminal event) and ``y_end`` its tokens there (rows, l, d)."""
        m = to_numpy(mask).astype(bool)
        if not m.any():
            return
        n = m.shape[0]

        def host(a):
            return np.broadcast_to(to_numpy(a) if not np.isscalar(a) else a, (n,))[m].astype(float)

        t_h, h_h = host(t), host(h)
        e_h = t_h + h_h if t_end is None else host(t_end)
        idx = np.flatnonzero(m)
        sel = self.kind.index(idx)
        st = None if state is None else state.reshape((n, -1))[sel]
        r = to_numpy(rows)[m]
        self.parts.append((r, t_h, h_h, e_h, y[sel], st))
        if y_end is not None:
            if self.y_end is None:
                self.y_end = self.kind.full((len(self.t_end),) + tuple(y.shape[1:]), math.nan, dtype=self.kind.dtype)
            self.t_end[r] = e_h
            self.y_end[self.kind.index(r)] = y_end[sel]

    def finish(self, field, stepper, t_span) -> DenseOutput:
        return DenseOutput(self, field, stepper, t_span)


class DenseOutput:
    """``u(t)``: the solution of every trajectory at times ``t`` (see the module docstring)."""

    def __init__(self, log: StepLog, field, stepper, t_span):
        self.field, self.stepper, self.batch, self.kind = field, stepper, log.batch, log.kind
        self.B = B = math.prod(self.batch)
        self.t_end, self.y_end = log.t_end, log.y_end
        parts, kind = log.parts, log.kind
        cat = np.concatenate if kind.numpy else kind.xp.concat
        self.ys = None
        rows, t0, h, e = (np.zeros(0, dtype=np.int64),) + (np.zeros(0),) * 3
        if parts:
            rows, t0, h, e = (np.concatenate([p[i] for p in parts]) for i in range(4))
            self.ys = cat([p[4] for p in parts])
            self.has_state = np.concatenate([np.full(len(p[0]), p[5] is not None) for p in parts])
            widths = {p[5].shape[-1] for p in parts if p[5] is not None}
            w = max(widths, default=0)
            self.states = cat([p[5] if p[5] is not None else kind.full((len(p[0]), w), 0.0) for p in parts])
        lo = np.minimum(t0, e)
        order = np.lexsort((lo, rows))  # by trajectory, then time
        self.order, self.t0, self.h = order, t0[order], h[order]
        self.lo, self.hi = lo[order], np.maximum(t0, e)[order]
        counts = np.bincount(rows, minlength=B)
        self.start, self.count = np.cumsum(counts) - counts, counts  # each trajectory's steps, sorted
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
        s = np.clip(np.atleast_1d(tq), lo, hi)
        out = self._values(s)
        out = out.reshape((len(s),) + self.batch + tuple(out.shape[2:]))
        return out[0] if tq.ndim == 0 else out

    def _locate(self, s):
        """For every (query, trajectory): the index of the sorted step containing s[q] (-1: none)."""
        j = np.full((len(s), self.B), -1, dtype=np.int64)
        for b in range(self.B):  # a trajectory's steps are sorted by time: one search per trajectory
            a, n = self.start[b], self.count[b]
            if n:
                i = np.searchsorted(self.lo[a:a + n], s, side="right") - 1
                ok = (i >= 0) & (s <= self.hi[a:a + n][i.clip(0)])
                j[:, b] = np.where(ok, a + i, -1)
        return j

    def _values(self, s):
        kind, ix = self.kind, self.kind.index
        out = kind.full((len(s), self.B) + tuple(self.ys.shape[1:]), math.nan, dtype=kind.dtype)
        j = self._locate(s)
        q, b = np.nonzero(j >= 0)
        js = j[q, b]
        at_end = (s[q] == self.t_end[b]) if self.y_end is not None else np.zeros(len(q), dtype=bool)
        if at_end.any():  # a trajectory's last step end: its stored end tokens
            out[ix(q[at_end]), ix(b[at_end])] = self.y_end[ix(b[at_end])]
        start = (s[q] == self.t0[js]) & ~at_end  # a step's start: its tokens (an interior step end, t0)
        if start.any():
            out[ix(q[start]), ix(b[start])] = self.ys[ix(self.order[js[start]])]
        inner = ~(at_end | start)
        for stated in (False, True):
            g = inner & (self.has_state[self.order[js]] == stated)
            if g.any():
                if self.stepper.dense_order is None:
                    self._fresh(out, q[g], b[g], js[g], s[q[g]], stated)
                else:
                    self._native(out, q[g], b[g], js[g], s[q[g]], stated)
        return out

    def _sub(self, b):
        """The field for the trajectories ``b`` (flat, repeats allowed), or None (``take`` None)."""
        take = getattr(self.field, "take", None)
        return take(b, self.batch) if callable(take) else None

    def _chunk(self):
        ld = math.prod(self.ys.shape[1:])
        stiff = getattr(self.stepper, "stiff", False)
        return max(1, CHUNK_FLOATS // max(16 * ld, 3 * ld * ld if stiff else 0))

    def _take_step(self, sub, js, h, stated):
        """The logged steps ``js`` (sorted indices) taken again with sizes ``h``."""
        kind = self.kind
        src = kind.index(self.order[js])
        extra = {"state": self.states[src]} if stated else {}
        return self.stepper.step(sub, kind.asarray(self.t0[js]), self.ys[src], kind.asarray(h), **extra)

    def _fresh(self, out, q, b, js, s, stated):
        """Steppers without a native dense output: a fresh step of size s - t per pair, batched."""
        if self._sub(b[:1]) is None:
            return self._whole(out, q, b, js, s, stated)
        rows = self._chunk()
        for a in range(0, len(q), rows):
            sl = slice(a, a + rows)
            res = self._take_step(self._sub(b[sl]), js[sl], s[sl] - self.t0[js[sl]], stated)
            out[self.kind.index(q[sl]), self.kind.index(b[sl])] = res.y

    def _native(self, out, q, b, js, s, stated):
        """The step's continuous extension: each step with queries taken again (repeated so that
        about sqrt(pairs) calls of the interpolant cover every pair), then evaluated at theta."""
        if self._sub(b[:1]) is None:
            return self._whole(out, q, b, js, s, stated)
        kind = self.kind
        steps, inv, per = np.unique(js, return_inverse=True, return_counts=True)
        calls = max(1, math.isqrt(len(js)))
        reps = -(-per // calls)  # copies of each step
        rank = np.empty(len(js), dtype=np.int64)  # the pair's rank among its step's pairs
        order = np.argsort(inv, kind="stable")
        rank[order] = np.arange(len(js)) - np.repeat(np.cumsum(per) - per, per)
        copy_first = np.cumsum(reps) - reps
        row = copy_first[inv] + rank % reps[inv]  # the copy that serves the pair, and its call
        call = rank // reps[inv]
        cjs = np.repeat(steps, reps)  # the copies' steps
        cb = np.repeat(b[order][np.cumsum(per) - per], reps)  # their trajectories
        n_calls = int(call.max()) + 1
        chunk = self._chunk()
        for a in range(0, len(cjs), chunk):
            sl = slice(a, a + chunk)
            sub = self._sub(cb[sl])
            h = self.h[cjs[sl]]
            res = self._take_step(sub, cjs[sl], h, stated)
            src = kind.index(self.order[cjs[sl]])
            u = self.stepper.interpolant(sub, kind.asarray(self.t0[cjs[sl]]), self.ys[src], kind.asarray(h), res)
            mine = np.flatnonzero((row >= a) & (row < a + chunk))
            mine = mine[np.argsort(call[mine], kind="stable")]
            bounds = np.searchsorted(call[mine], np.arange(n_calls + 1))
            for c in range(n_calls):
                pick = mine[bounds[c]:bounds[c + 1]]
                if not pick.size:
                    continue
                theta = np.zeros(len(h))
                local = row[pick] - a
                with np.errstate(divide="ignore", invalid="ignore"):
                    theta[local] = np.where(h[local] != 0, (s[pick] - self.t0[js[pick]]) / h[local], 0.0)
                vals = u(kind.asarray(np.clip(theta, 0.0, 1.0)))
                out[kind.index(q[pick]), kind.index(b[pick])] = vals[kind.index(local)]

    def _whole(self, out, q, b, js, s, stated):
        """A field that needs its whole batch: per query time, the batch's steps taken again (the
        rows not asked for: any logged step, discarded) and their dense output evaluated."""
        kind, ix, B = self.kind, self.kind.index, self.B
        tail = tuple(self.ys.shape[1:])
        native = self.stepper.dense_order is not None
        for qq in np.unique(q):
            m = q == qq
            bb, jj = b[m], np.full(B, js[m][0])
            jj[bb] = js[m]
            src = ix(self.order[jj])
            tt = self.t0[jj]
            hh = self.h[jj] if native else np.where(np.isin(np.arange(B), bb), s[m][0] - tt, 0.0)
            extra = {"state": self.states[src].reshape(self.batch + (-1,))} if stated else {}
            shape = (lambda v: kind.asarray(v.reshape(self.batch))) if self.batch else (lambda v: float(v[0]))
            y = self.ys[src].reshape(self.batch + tail)
            res = self.stepper.step(self.field, shape(tt), y, shape(hh), **extra)
            val = res.y
            if native:
                with np.errstate(divide="ignore", invalid="ignore"):
                    theta = np.clip(np.where(hh != 0, (s[m][0] - tt) / hh, 0.0), 0.0, 1.0)
                val = self.stepper.interpolant(self.field, shape(tt), y, shape(hh), res)(shape(theta))
            out[ix(np.full(len(bb), qq)), ix(bb)] = val.reshape((B,) + tail)[ix(bb)]
