"""Detecting, locating and recording the events of :func:`riemattn.integrate` during a solve.

The semantics (accepted steps, sample points, crossing rule, location tolerance, terminal stops)
are stated in :mod:`riemattn.solvers.events` and docs/events.md; this module implements them for
the stepping loops (:mod:`riemattn.solvers.core._loops`).

References
----------
M. Dowell, P. Jarratt, "A modified regula falsi method for computing the root of an equation",
BIT 11 (1971) (the Illinois method). R. P. Brent, *Algorithms for Minimization without
Derivatives* (1973), ch. 4 (the minimal step that closes a bracket).
"""

from __future__ import annotations

import math

import numpy as np

from ..._backend import is_torch, to_numpy
from ..._validation import call_user
from ...errors import ValidationError
from ._recorder import _Kind, _where
from .events import Events

#: iteration cap of the root finding (each iteration shrinks the bracket; a bisection every third
#: iteration where three did not halve it)
MAX_ITER = 200


class Tracker:
    """Detects, locates and records the events during a solve (used by the stepping loops).

    Rows are trajectories addressed by their index in the flattened batch; the loops pass the
    rows being stepped (``rows``), flat per-row arrays and a dense output ``interp(theta)``
    (theta of shape (n,), tokens (n, l, d)).
    """

    def __init__(self, events, batch, like, tol):
        self.events, self.batch, self.tol = events, tuple(batch), float(tol)
        self.kind = _Kind(like)
        self.B = math.prod(self.batch)
        self.g_prev = [None] * len(events)  # per event, (B,)
        self.count = np.zeros((len(events), self.B), dtype=np.int64)  # host
        self.records = []  # (rows (host), which (host), t (host), y (tokens of rows))
        self.t_stop = np.full(self.B, np.nan)
        self.samples = max((e.samples for e in events), default=0)

    def _g(self, e, k, t, y):
        """g of event k at (t, y): a float array (n,) like the tokens."""
        n = y.shape[0]
        out = call_user(e.g, f"event {e.name!r} g(t, y)", t, t, y)
        kind = self.kind
        # always a copy: g may return a view of y (e.g. y[..., 0, 1]), and g values are updated in place
        if kind.numpy:
            out = np.array(to_numpy(out) if is_torch(out) else out, dtype=float)
        elif not is_torch(out):
            out = kind.asarray(np.array(out, dtype=float))
        else:
            out = out.to(kind.xp.float64) if not out.is_floating_point() else out.clone()
        if tuple(out.shape) != (n,):
            raise ValidationError(f"event {e.name!r}: g(t, y) must return one value per trajectory, shape "
                                  f"({n},), for y of shape {tuple(y.shape)}; got shape {tuple(out.shape)}.")
        return out

    def start(self, t0, y_flat):
        for k, e in enumerate(self.events):
            self.g_prev[k] = self._g(e, k, t0, y_flat)

    def _crossed(self, ga, gb, direction):
        up, down = (ga < 0) & (gb >= 0), (ga > 0) & (gb <= 0)
        return up if direction > 0 else down if direction < 0 else up | down

    def check(self, rows, t_old, h, t_new, y_new, accept, interp):
        """Events in the accepted steps (t_old, t_new] of ``rows``; returns None (no terminal stop)
        or ``(stop, t_stop, y_stop)``: per-row mask, times and tokens of terminal stops."""
        xp, kind = self.kind.xp, self.kind
        n = y_new.shape[0]
        g_new = [self._g(e, k, t_new, y_new) for k, e in enumerate(self.events)]
        thetas = [0.0] + [j / (self.samples + 1) for j in range(1, self.samples + 1)] + [1.0]
        g_mid = {}  # (k, j) -> g at interior theta_j (events with samples > 0)
        if self.samples:
            for j in range(1, len(thetas) - 1):
                th = kind.full((n,), thetas[j])
                u, tj = interp(th), t_old + th * h
                for k, e in enumerate(self.events):
                    if e.samples:
                        g_mid[k, j] = self._g(e, k, tj, u)
        found = []  # (k, local rows (host), theta (host), flat theta bracket end)
        for k, e in enumerate(self.events):
            ga_all = self.g_prev[k][rows]
            if e.samples:  # every event with samples > 0 uses the largest samples of the events
                vals = [ga_all] + [g_mid[k, j] for j in range(1, len(thetas) - 1)] + [g_new[k]]
                th_pts = thetas
            else:
                vals, th_pts = [ga_all, g_new[k]], [0.0, 1.0]
            for j in range(len(vals) - 1):
                mask = accept & self._crossed(vals[j], vals[j + 1], e.direction)
                if not bool(mask.any()):  # host decision, one per event and sub-interval
                    continue
                theta = self._locate(k, e, mask, th_pts[j], th_pts[j + 1], vals[j], vals[j + 1],
                                     t_old, h, interp)
                local = np.flatnonzero(to_numpy(mask))
                found.append((k, local, to_numpy(theta)[local]))
            self.g_prev[k][rows] = xp.where(accept, g_new[k], self.g_prev[k][rows])
        if not found:
            return None
        return self._record(found, rows, t_old, h, t_new, y_new, interp, n)

    def _locate(self, k, e, mask, a0, b0, ga, gb, t_old, h, interp):
        """Safeguarded Illinois iteration, all rows of ``mask`` at once; returns theta (n,): the
        bracket end after the crossing."""
        xp, kind = self.kind.xp, self.kind
        n = mask.shape[0]
        s = xp.where(ga < 0, kind.full((n,), 1.0), kind.full((n,), -1.0))  # +1: up crossing
        a, b = kind.full((n,), a0), kind.full((n,), b0)
        fa, fb = s * ga, s * gb  # fa < 0 <= fb on the rows of mask
        last = kind.full((n,), 0, dtype=xp.int64)  # -1: a moved last, +1: b moved last
        habs = xp.abs(h)
        with np.errstate(divide="ignore"):
            half = 0.5 * self.tol / xp.where(habs > 0, habs, 1.0)  # half the tolerance, in theta
        w_ref = b - a
        for it in range(MAX_ITER):
            open_ = mask & ((b - a) * habs > self.tol) & (fb != 0)
            if not bool(open_.any()):
                break
            with np.errstate(divide="ignore", invalid="ignore"):
                c = b - fb * (b - a) / (fb - fa)
            mid = 0.5 * (a + b)
            c = xp.where(~xp.isfinite(c) | (c <= a) | (c >= b), mid, c)
            # closing step: an estimate within tol/2 of an end is moved tol/2 inside, so that the
            # next bracket is likely tol/2 wide (Brent's minimal step)
            c = xp.where(c - a < half, xp.minimum(a + half, mid), c)
            c = xp.where(b - c < half, xp.maximum(b - half, mid), c)
            if it % 3 == 2:  # safeguard: bisect where three iterations did not halve the bracket
                c = xp.where(b - a > 0.5 * w_ref, mid, c)
                w_ref = b - a
            c = xp.where(open_, c, b)
            gc = self._g(e, k, t_old + c * h, interp(c))
            fc = s * gc
            right = open_ & (fc >= 0)
            left = open_ & (fc < 0)
            fa = xp.where(right & (last > 0), 0.5 * fa, fa)  # Illinois: halve the stale end
            fb = xp.where(left & (last < 0), 0.5 * fb, fb)
            b, fb = xp.where(right, c, b), xp.where(right, fc, fb)
            a, fa = xp.where(left, c, a), xp.where(left, fc, fa)
            last = xp.where(right, 1, xp.where(left, -1, last))
        return b

    def _record(self, found, rows, t_old, h, t_new, y_new, interp, n):
        """Order the crossings of each row in time, apply terminal counts, store times and states."""
        xp, kind = self.kind.xp, self.kind
        rows_h = to_numpy(rows)
        loc = np.concatenate([f[1] for f in found])
        th = np.concatenate([f[2] for f in found])
        ev = np.concatenate([np.full(len(f[1]), f[0]) for f in found])
        order = np.lexsort((ev, th, loc))
        loc, th, ev = loc[order], th[order], ev[order]
        keep = np.ones(len(loc), dtype=bool)
        is_stop = np.zeros(len(loc), dtype=bool)
        stop_theta = {}
        for i in range(len(loc)):  # crossings are few: a host loop in time order per row
            r = loc[i]
            if r in stop_theta and th[i] > stop_theta[r]:  # after the stop: dropped (same time: kept)
                keep[i] = False
                continue
            g = rows_h[r]
            self.count[ev[i], g] += 1
            term = self.events[ev[i]].terminal
            if term and self.count[ev[i], g] == term and r not in stop_theta:
                stop_theta[r] = th[i]
                is_stop[i] = True
        loc, th, ev, is_stop = loc[keep], th[keep], ev[keep], is_stop[keep]
        t_old_h, h_h, t_new_h = (np.broadcast_to(to_numpy(v), (n,)) for v in (t_old, h, t_new))
        t_ev = np.where(th >= 1.0, t_new_h[loc], t_old_h[loc] + th * h_h[loc])
        # states: one dense-output evaluation per rank of crossing within its row
        rank = np.zeros(len(loc), dtype=np.int64)
        for i in range(1, len(loc)):
            rank[i] = rank[i - 1] + 1 if loc[i] == loc[i - 1] else 0
        y_ev = [None] * len(loc)
        stop_mask = np.zeros(n, dtype=bool)
        y_stop = None
        for q in range(int(rank.max(initial=-1)) + 1):
            sel = np.flatnonzero(rank == q)
            theta = np.ones(n)
            theta[loc[sel]] = th[sel]
            u = interp(kind.asarray(theta))
            u = _where(kind.asarray(theta >= 1.0, dtype=xp.bool), y_new, u)
            for i in sel:
                y_ev[i] = u[int(loc[i])]
            stops = sel[is_stop[sel]]
            if len(stops):
                m = np.zeros(n, dtype=bool)
                m[loc[stops]] = True
                stop_mask |= m
                y_stop = _where(kind.asarray(m, dtype=xp.bool), u, y_new if y_stop is None else y_stop)
        if len(loc):
            self.records.append((rows_h[loc], ev, t_ev, xp.stack(y_ev)))
        if not stop_mask.any():
            return None
        t_stop = np.full(n, np.nan)
        for r, v in stop_theta.items():
            t_stop[r] = t_new_h[r] if v >= 1.0 else t_old_h[r] + v * h_h[r]
        self.t_stop[rows_h[stop_mask]] = t_stop[stop_mask]
        return kind.asarray(stop_mask, dtype=xp.bool), kind.asarray(np.where(stop_mask, t_stop, 0.0)), y_stop

    def result(self, save_fn, tail) -> Events:
        """The recorded crossings as an :class:`Events` (host arrays; tokens keep their kind)."""
        names = tuple(e.name for e in self.events)
        kind, xp = self.kind, self.kind.xp
        count = self.count.sum(axis=0)
        m = int(count.max(initial=0))
        t = np.full((self.B, m), np.nan)
        which = np.full((self.B, m), -1, dtype=np.int64)
        if self.records:
            rows = np.concatenate([r[0] for r in self.records])
            ev = np.concatenate([r[1] for r in self.records])
            tt = np.concatenate([r[2] for r in self.records])
            ys = xp.concat([r[3] for r in self.records]) if not kind.numpy else np.concatenate([r[3] for r in self.records])
        else:
            rows, ev, tt = (np.zeros(0, dtype=np.int64),) * 2 + (np.zeros(0),)
            ys = kind.full((0,) + tuple(tail), 0.0, dtype=kind.dtype)
        order = np.lexsort((tt, rows))  # records are in time order per row already; stable
        rows, ev, tt = rows[order], ev[order], tt[order]
        slot = np.zeros(len(rows), dtype=np.int64)
        for i in range(1, len(rows)):
            slot[i] = slot[i - 1] + 1 if rows[i] == rows[i - 1] else 0
        t[rows, slot], which[rows, slot] = tt, ev
        idx = kind.asarray(order, dtype=xp.int64) if not kind.numpy else order
        ys = ys[idx]
        bshape = self.batch
        y, observables = None, {}
        if save_fn is None:
            y = kind.full((self.B, m) + tuple(tail), math.nan, dtype=kind.dtype)
            y[kind.asarray(rows, xp.int64) if not kind.numpy else rows,
              kind.asarray(slot, xp.int64) if not kind.numpy else slot] = ys
            y = y.reshape(bshape + (m,) + tuple(tail))
        elif len(rows):  # no crossing: no save_fn call (and no observables)
            tv = tt if kind.numpy else kind.asarray(tt)
            out = call_user(save_fn, "save_fn(t, y) at the events", tt, tv, ys)
            out = out if isinstance(out, dict) else {"value": out}
            for name, v in out.items():
                v = np.asarray(to_numpy(v) if is_torch(v) else v)
                dtype = np.result_type(v.dtype, np.float64)
                full = np.full((self.B, m) + v.shape[1:], np.nan, dtype=dtype)
                full[rows, slot] = v
                observables[name] = full.reshape(bshape + (m,) + v.shape[1:])
        return Events(names=names, count=count.reshape(bshape), t=t.reshape(bshape + (m,)),
                      which=which.reshape(bshape + (m,)), y=y, observables=observables,
                      t_stop=self.t_stop.reshape(bshape))
