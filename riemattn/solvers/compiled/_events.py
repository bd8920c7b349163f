"""Events in the compiled loops: the built-in event functions and the semantics of
:mod:`riemattn.solvers.core._event_tracker` for one trajectory.

An :class:`riemattn.solvers.events.Event` made by :mod:`riemattn.analysis.events` carries a
declarative ``spec`` (``(name, *numbers)``); the compiled loop evaluates these ``g``:

=====================  ==================================================  ======
spec name              g(t, y)                                             params
=====================  ==================================================  ======
"misalignment"         1 - (1/l) sum_i <u_1, u_i> - threshold, u = y/|y|  threshold
"distance"             max_i |y_i - y_1| - threshold                       threshold
"leave_hemisphere"     min_i <v, y_i> / |y_i|                              v
"lyapunov_level"       max_i (1 - <v, y_i>) - value                        value, v
"merge"                h_c(y) - tol (c-th largest single-linkage height)   tol, c
=====================  ==================================================  ======

Detection (sign changes between the step's sample points on accepted steps), location (the
safeguarded Illinois iteration, bracket end after the crossing), ordering of the crossings of a
step, terminal counts and the stop are those of :class:`riemattn.solvers.core._event_tracker.Tracker`,
row by row. Events without a spec (user functions, :func:`riemattn.analysis.events.level`,
``energy_level``, ``leave_common_hemisphere``) stay on the NumPy engine.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from ...dynamics.kernels._kernel_cache import njit
import numpy as np

from ..core._event_tracker import MAX_ITER
from ._interp import interp

_JIT = dict(error_model="numpy")

#: spec name -> (code, number of parameters after the name)
CODES = {"misalignment": (0, 1), "distance": (1, 1), "leave_hemisphere": (2, None),
         "lyapunov_level": (3, None), "merge": (4, 2)}


class EventData(NamedTuple):
    n: int  # number of events (0: none)
    kinds: np.ndarray  # (n,) codes
    dirs: np.ndarray  # (n,) +1 up, -1 down, 0 both
    term: np.ndarray  # (n,) terminal count (0: never)
    samp: np.ndarray  # (n,) samples > 0
    params: np.ndarray  # (n, P)
    samples: int  # the largest samples
    tol: float
    g_prev: np.ndarray  # (B, n)
    count: np.ndarray  # (B, n)
    rec_n: np.ndarray  # (B,) crossings recorded (may exceed the capacity: then re-run)
    rec_t: np.ndarray  # (B, cap)
    rec_w: np.ndarray  # (B, cap)
    rec_y: np.ndarray  # (B, cap, l, d)
    t_stop: np.ndarray  # (B,)
    y_stop: np.ndarray  # (B, l, d)


def no_events(B, l, d) -> EventData:
    z1, z2 = np.zeros(0), np.zeros((1, 0))
    i1 = np.zeros(0, dtype=np.int64)
    return EventData(0, i1, i1, i1, i1, np.zeros((0, 1)), 0, 1.0, z2, np.zeros((1, 0), dtype=np.int64),
                     np.zeros(1, dtype=np.int64), np.zeros((1, 1)), np.zeros((1, 1), dtype=np.int64),
                     np.zeros((1, 1, l, d)), z1 + np.zeros(1), np.zeros((1, l, d)))


@njit(**_JIT)
def g_value(kind, p, t, y):
    l, d = y.shape
    if kind == 0 or kind == 1:
        n1 = 0.0
        for a in range(d):
            n1 += y[0, a] * y[0, a]
        n1 = math.sqrt(n1)
        if kind == 0:
            acc = 0.0
            for i in range(l):
                ni = 0.0
                dot = 0.0
                for a in range(d):
                    ni += y[i, a] * y[i, a]
                for a in range(d):
                    dot += (y[0, a] / n1) * (y[i, a] / math.sqrt(ni))
                acc += dot
            return 1.0 - acc / l - p[0]
        m = -np.inf
        for i in range(l):
            s = 0.0
            for a in range(d):
                v = y[i, a] - y[0, a]
                s += v * v
            s = math.sqrt(s)
            if s > m:
                m = s
        return m - p[0]
    if kind == 2:
        m = np.inf
        for i in range(l):
            dot = 0.0
            ni = 0.0
            for a in range(d):
                dot += y[i, a] * p[a]
                ni += y[i, a] * y[i, a]
            v = dot / math.sqrt(ni)
            if v < m or math.isnan(v):
                m = v
        return m
    if kind == 3:
        m = -np.inf
        for i in range(l):
            dot = 0.0
            for a in range(d):
                dot += y[i, a] * p[1 + a]
            v = 1.0 - dot
            if v > m or math.isnan(v):
                m = v
        return m - p[0]
    # merge heights: Prim's algorithm on squared distances (sqrt at the end), sorted decreasing
    c = int(p[1])
    sq = np.empty(l)
    for i in range(l):
        s = 0.0
        for a in range(d):
            s += y[i, a] * y[i, a]
        sq[i] = s
    D = np.empty((l, l))
    for i in range(l):
        for j in range(l):
            g = 0.0
            for a in range(d):
                g += y[i, a] * y[j, a]
            D[i, j] = max(sq[i] + sq[j] - 2.0 * g, 0.0)
    best = D[0].copy()
    used = np.zeros(l, dtype=np.bool_)
    used[0] = True
    H = np.empty(max(l - 1, 1))
    for q in range(l - 1):
        j = -1
        bv = np.inf
        for i in range(l):
            if not used[i] and (j < 0 or best[i] < bv):
                bv = best[i]
                j = i
        H[q] = math.sqrt(bv)
        used[j] = True
        for i in range(l):
            if D[j, i] < best[i]:
                best[i] = D[j, i]
    Hs = np.sort(H[: l - 1])[::-1]
    return Hs[c - 1] - p[0]


@njit(**_JIT)
def start_events(ev, b, t0, y):
    for k in range(ev.n):
        ev.g_prev[b, k] = g_value(ev.kinds[k], ev.params[k], t0, y)


@njit(**_JIT)
def _crossed(ga, gb, direction):
    up = ga < 0 and gb >= 0
    down = ga > 0 and gb <= 0
    if direction > 0:
        return up
    if direction < 0:
        return down
    return up or down


@njit(**_JIT)
def check_events(fn, ev, b, m, mode, flat, native, t, y, h, t_new, y_new, K, Us, x1, Fd, Kx, r_new, k_next,
                 prep, ints, floats, per, work, x, X, r, K2, r2, e2, u):
    """The events of row b in its accepted step (t, t_new]; returns (stopped, t_stop, evaluations).
    Crossings are appended to the row's records; a stop's state is left in ev.y_stop[b]."""
    n_ev = ev.n
    nfev = 0
    ns = ev.samples
    npts = ns + 2
    thetas = np.empty(npts)
    thetas[0] = 0.0
    for j in range(1, ns + 1):
        thetas[j] = j / (ns + 1)
    thetas[npts - 1] = 1.0
    vals = np.empty((n_ev, npts))
    for k in range(n_ev):
        vals[k, 0] = ev.g_prev[b, k]
        vals[k, npts - 1] = g_value(ev.kinds[k], ev.params[k], t_new, y_new)
    if ns:
        for j in range(1, ns + 1):
            nfev += interp(fn, m, mode, flat, native, t, y, h, K, Us, x1, Fd, Kx, r_new, k_next, prep, b, ints,
                           floats, per, work, x, X, r, K2, r2, e2, thetas[j], u)
            tj = t + thetas[j] * h
            for k in range(n_ev):
                if ev.samp[k]:
                    vals[k, j] = g_value(ev.kinds[k], ev.params[k], tj, u)
    # crossings: (theta, event)
    f_th = np.empty(n_ev * npts)
    f_ev = np.empty(n_ev * npts, dtype=np.int64)
    nf = 0
    tol = ev.tol
    habs = abs(h)
    half = 0.5 * tol / (habs if habs > 0 else 1.0)
    for k in range(n_ev):
        if ev.samp[k]:
            idx = np.arange(npts)
        else:
            idx = np.array([0, npts - 1])
        for q in range(idx.shape[0] - 1):
            ja, jb = idx[q], idx[q + 1]
            ga, gb = vals[k, ja], vals[k, jb]
            if not _crossed(ga, gb, ev.dirs[k]):
                continue
            s = 1.0 if ga < 0 else -1.0
            a0, b0 = thetas[ja], thetas[jb]
            fa, fb = s * ga, s * gb
            last = 0
            w_ref = b0 - a0
            for it in range(MAX_ITER):
                if not ((b0 - a0) * habs > tol and fb != 0):
                    break
                c = b0 - fb * (b0 - a0) / (fb - fa)
                mid = 0.5 * (a0 + b0)
                if not math.isfinite(c) or c <= a0 or c >= b0:
                    c = mid
                if c - a0 < half:
                    c = min(a0 + half, mid)
                if b0 - c < half:
                    c = max(b0 - half, mid)
                if it % 3 == 2:
                    if b0 - a0 > 0.5 * w_ref:
                        c = mid
                    w_ref = b0 - a0
                nfev += interp(fn, m, mode, flat, native, t, y, h, K, Us, x1, Fd, Kx, r_new, k_next, prep, b, ints,
                               floats, per, work, x, X, r, K2, r2, e2, c, u)
                fc = s * g_value(ev.kinds[k], ev.params[k], t + c * h, u)
                if fc >= 0:
                    if last > 0:
                        fa = 0.5 * fa
                    b0, fb = c, fc
                    last = 1
                else:
                    if last < 0:
                        fb = 0.5 * fb
                    a0, fa = c, fc
                    last = -1
            f_th[nf] = b0
            f_ev[nf] = k
            nf += 1
        ev.g_prev[b, k] = vals[k, npts - 1]
    if nf == 0:
        return False, 0.0, nfev
    # time order (ties: event index), terminal counts, records
    order = np.argsort(f_th[:nf], kind="mergesort")  # stable: equal times keep the event order
    stop = False
    stop_theta = 0.0
    cap = ev.rec_t.shape[1]
    for q in range(nf):
        i = order[q]
        th = f_th[i]
        k = f_ev[i]
        if stop and th > stop_theta:
            continue
        ev.count[b, k] += 1
        is_stop = False
        if ev.term[k] and ev.count[b, k] == ev.term[k] and not stop:
            stop = True
            stop_theta = th
            is_stop = True
        if th >= 1.0:
            t_ev = t_new
            u[:, :] = y_new
        else:
            t_ev = t + th * h
            nfev += interp(fn, m, mode, flat, native, t, y, h, K, Us, x1, Fd, Kx, r_new, k_next, prep, b, ints,
                           floats, per, work, x, X, r, K2, r2, e2, th, u)
        slot = ev.rec_n[b]
        if slot < cap:
            ev.rec_t[b, slot] = t_ev
            ev.rec_w[b, slot] = k
            ev.rec_y[b, slot] = u
        ev.rec_n[b] = slot + 1
        if is_stop:
            ev.y_stop[b] = u
            ev.t_stop[b] = t_ev
    if stop:
        return True, ev.t_stop[b], nfev
    return False, 0.0, nfev
