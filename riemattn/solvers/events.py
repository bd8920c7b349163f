r"""Events of :func:`riemattn.integrate`: when a function of the state crosses zero, per trajectory.

An event is a function ``g(t, y)`` of the time and the tokens whose zero crossings are wanted
(consensus reached, two clusters merging, a token leaving a hemisphere: see
:mod:`riemattn.analysis.events` for ready-made ones). Pass :class:`Event` objects, or plain
callables with SciPy's optional attributes ``g.terminal`` and ``g.direction``, as
``integrate(..., events=...)``.

Semantics (the same for fixed and adaptive steppers, projected and Lie, NumPy and torch):

* ``g`` is evaluated on *accepted* steps only, at the step's end (one call per accepted step,
  vectorised over the trajectories being stepped) and, with ``samples = k > 0``, at ``k``
  equally spaced interior points of the step on the stepper's dense output
  (:meth:`riemattn.solvers.steppers.Stepper.interpolant`: native for ``dopri5``/``dop853``, a
  fresh step of size theta h for the others; both on the manifold).
* A crossing is a sign change between consecutive sample points ``a < b`` of a step: *up* when
  ``g(a) < 0 <= g(b)``, *down* when ``g(a) > 0 >= g(b)``. ``direction`` +1 keeps up crossings,
  -1 down crossings, 0 both. A zero at a sample point is counted once (in the step or interval
  that ends on it). A tangential touch (``g`` reaches 0 without changing sign) is found only when
  a sample point lands on the zero exactly; an even number of crossings between two sample
  points cancel and are not found (with ``samples = k`` each sub-interval is h / (k + 1) long).
* Each crossing is located by a safeguarded Illinois (regula falsi) iteration on
  ``theta -> g(t + theta h, u(theta))``, ``u`` the dense output, until the bracket is at most
  ``event_tol`` long in t. The reported time is the bracket's end *after* the crossing, so the
  reported state has crossed (``g`` has its new sign or is 0); it is within ``event_tol`` of the
  dense output's zero (the dense output itself carries the stepper's error).
* ``terminal = k`` (``True`` means 1) stops a trajectory at its k-th crossing of that event: its
  time and state are those of the event, its status is :data:`TERMINAL` (2), it costs no further
  work in the adaptive loop (compaction), and crossings after it in the same step are dropped.

Cost: one ``g`` call per accepted step and event (plus ``samples`` dense-output evaluations and
``g`` calls); a step with a crossing adds the root finding (typically 5-15 dense-output
evaluations on the rows being stepped, each one stepper step for steppers without a native dense
output) and, for tensors, a few synchronisations with the device.

References
----------
E. Hairer, S. P. Norsett, G. Wanner, *Solving Ordinary Differential Equations I*, 2nd ed.,
section II.6 (dense output, event location). M. Dowell, P. Jarratt, "A modified regula falsi
method for computing the root of an equation", BIT 11 (1971) (the Illinois method).
L. F. Shampine, S. Thompson, "Event location for ordinary differential equations", Comput. Math.
Appl. 39 (2000).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Integral, Real
from typing import Callable

import numpy as np

from .._backend import is_torch, to_numpy
from .._validation import call_user
from ..errors import InputTypeError, ValidationError
from ._recorder import _Kind, _where

__all__ = ["Event", "Events", "TERMINAL", "as_events"]

#: status code of a trajectory stopped by a terminal event
TERMINAL = 2

_DIRECTIONS = {"up": 1, "down": -1, "both": 0, 1: 1, -1: -1, 0: 0}

#: iteration cap of the root finding (each iteration shrinks the bracket; every third bisects)
MAX_ITER = 200


@dataclass(frozen=True)
class Event:
    """A zero crossing of ``g(t, y)`` to detect during :func:`riemattn.integrate`.

    Parameters
    ----------
    g : callable
        ``g(t, y)``: ``y`` tokens of shape (m, l, d) (m trajectories, flattened; a sub-batch of
        the solve), ``t`` a float or an array (m,) of their times; returns an array (m,) (NumPy
        or a tensor like ``y``). It must treat the trajectories independently.
    direction : {0, 1, -1, "both", "up", "down"}
        Which crossings count: up (from negative to non-negative), down, or both.
    terminal : bool or int
        ``k >= 1`` (``True``: 1): stop the trajectory at its k-th crossing; ``False``: never.
    name : str, optional
        Label in the results (default: ``g.__name__`` or ``"event<i>"``).
    samples : int
        Interior sample points per accepted step (0: the step's ends only). Two crossings more
        than h / (samples + 1) apart inside one step are both found.

    References
    ----------
    SciPy ``solve_ivp(events=...)`` (attributes ``terminal``, ``direction``), single trajectory.
    """

    g: Callable
    direction: int | str = 0
    terminal: bool | int = False
    name: str | None = None
    samples: int = 0

    def __post_init__(self):
        if not callable(self.g):
            raise InputTypeError(f"an event's g must be callable as g(t, y), got {type(self.g).__name__}.")
        d = self.direction
        key = d if isinstance(d, str) else (int(np.sign(d)) if isinstance(d, Real) and math.isfinite(d) else None)
        if key not in _DIRECTIONS:
            raise ValidationError(f"direction must be one of 'up', 'down', 'both', 1, -1, 0, got {d!r}.")
        object.__setattr__(self, "direction", _DIRECTIONS[key])
        t = self.terminal
        if isinstance(t, bool) or t is None:
            k = int(bool(t))
        elif isinstance(t, Integral) and t >= 0:
            k = int(t)
        elif isinstance(t, Real) and float(t).is_integer() and t >= 0:
            k = int(t)
        else:
            raise ValidationError(f"terminal must be a bool or an integer >= 0 (stop at that crossing), got {t!r}.")
        object.__setattr__(self, "terminal", k)
        s = self.samples
        if isinstance(s, bool) or not isinstance(s, Integral) or s < 0:
            raise ValidationError(f"samples must be an integer >= 0, got {s!r}.")
        object.__setattr__(self, "samples", int(s))


def as_events(events) -> tuple:
    """``events`` (None, an :class:`Event`, a callable or a list of them) as a tuple of Events
    with unique names; plain callables keep SciPy's ``terminal`` / ``direction`` attributes."""
    if events is None:
        return ()
    items = [events] if (isinstance(events, Event) or callable(events)) else events
    try:
        items = list(items)
    except TypeError:
        raise InputTypeError(f"events must be an Event, a callable g(t, y) or a list of them, got "
                             f"{type(events).__name__}.") from None
    out = []
    for i, e in enumerate(items):
        if not isinstance(e, Event):
            if not callable(e):
                raise InputTypeError(f"events[{i}] must be an Event or a callable g(t, y), got {type(e).__name__}.")
            e = Event(e, getattr(e, "direction", 0), getattr(e, "terminal", False), None)
        if e.name is None:
            name = getattr(e.g, "__name__", "")
            e = Event(e.g, e.direction, e.terminal, name if name and name != "<lambda>" else f"event{i}", e.samples)
        out.append(e)
    names = [e.name for e in out]
    if len(set(names)) != len(names):
        raise ValidationError(f"event names must be unique, got {names}.")
    return tuple(out)


@dataclass
class Events:
    """The crossings found by :func:`riemattn.integrate`, per trajectory (padded arrays).

    Attributes
    ----------
    names : tuple of str
        The events, in the order given; ``which`` indexes it.
    count : ndarray of int, shape batch
        Number of crossings recorded per trajectory (all events together).
    t : ndarray, shape batch + (m,)
        Their times in increasing order, ``m = count.max()``; NaN beyond ``count``.
    which : ndarray of int, shape batch + (m,)
        Index into ``names`` of the event of each crossing; -1 beyond ``count``.
    y : ndarray, shape batch + (m, l, d), or None
        Tokens at the crossings (NaN beyond ``count``); None when ``save_fn`` was given.
    observables : dict
        With ``save_fn``: its values at the crossings, name -> batch + (m, ...).
    t_stop : ndarray of float, shape batch
        Time at which a terminal event stopped the trajectory (NaN where none did).
    """

    names: tuple
    count: np.ndarray
    t: np.ndarray
    which: np.ndarray
    y: object
    observables: dict
    t_stop: np.ndarray

    def of(self, name) -> np.ndarray:
        """Times of the crossings of one event: batch + (m,), NaN-padded (m: its largest count)."""
        if name not in self.names:
            raise ValidationError(f"no event named {name!r}; events: {list(self.names)}.")
        k = self.names.index(name)
        mask = self.which == k
        n = mask.sum(axis=-1)
        m = int(n.max(initial=0))
        out = np.full(self.count.shape + (m,), np.nan)
        idx = np.cumsum(mask, axis=-1) - 1
        b = np.nonzero(mask)
        out[b[:-1] + (idx[b],)] = self.t[b]
        return out


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
