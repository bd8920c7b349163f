"""The fixed-step loop of the compiled engine: one trajectory over the shared grid, and the batch.

:func:`fixed_rows` is :func:`riemattn.solvers.core._loops.run_fixed` row by row: the grid (step start
times, sizes, end times and save slots) is computed once in Python exactly as the NumPy loop
computes it (:func:`riemattn.solvers.compiled._engine.fixed_grid`), so both engines step at the
same times. A row whose state becomes non-finite stops there (status -3, frozen at its last
finite state, as the NumPy loop masks it); a terminal event stops it at the event. The batch-wide
rules of the NumPy loop (values after a terminal stop anywhere in the batch, the early return
when every row has stopped, ``max_steps``) are applied in Python from the rows' stop steps.
"""

from __future__ import annotations

import math

from ...dynamics.kernels._kernel_cache import njit
import numpy as np

from ._events import check_events, start_events
from ._steps import rk_step

_JIT = dict(error_model="numpy")
REACHED, RUNNING, NON_FINITE, TERMINAL = 0, 1, -3, 2


@njit(**_JIT)
def fixed_rows(fn, m, Y, start, stride, flat, gt, gh, gtn, gslot, ints, floats, per, work_len, saved, stats,
               t_fail_out, ev, halt):
    """Step rows start, start + stride, ... of Y (B, l, d) over the grid (one thread's share, the
    GIL released); Y is overwritten by the final states, ``saved`` (n_save, B, l, d) filled at the
    grid's save slots; stats[b] = (nfev, n_steps, status, stop step (1-based; 0: none)),
    t_fail_out[b]. ``halt[0] != 0`` (Ctrl-C): each row stops before its next step (status RUNNING,
    the stop step the last one run + 1, so that its values so far are saved)."""
    l, d = Y.shape[1], Y.shape[2]
    s = max(m.ints[1], 1)
    work = np.empty(max(work_len, 1))
    K = np.zeros((s, l, d))
    K2 = np.zeros((s, l, d))
    x = np.empty((l, d))
    X = np.empty((l, d))
    r = np.empty(l)
    r2 = np.empty(l)
    r_new = np.empty(l)
    y_new = np.empty((l, d))
    err = np.zeros((l, d))
    e2 = np.zeros((l, d))
    u = np.empty((l, d))
    dummy3 = np.zeros((1, l, d))
    prep = np.zeros(1, dtype=np.int64)
    no = m.ints[0] < 0  # False and 0, typed as data: literal constants would compile other versions
    zero = m.ints[0] * 0
    for b in range(start, Y.shape[0], stride):
        if halt[0] != 0:
            break
        y = Y[b]
        nfev = 0
        n_steps = 0
        status = RUNNING
        t_fail = np.nan
        stop = 0
        alive = True
        start_events(ev, b, gt[0] if gt.shape[0] else 0.0, y)
        for k in range(gt.shape[0]):
            if alive and halt[0] != 0:  # Ctrl-C: not finished, the steps so far saved
                t_fail = gt[k]
                alive = False
                stop = k + 1
                status = RUNNING
            if alive:
                t, h, t_new = gt[k], gh[k], gtn[k]
                nfev += rk_step(fn, m, m.ints[0] == 1, flat, t, y, h, K, no, b, ints, floats, per, work, x, X, r,
                                y_new, r_new, err)
                n_steps += 1
                finite = True
                for i in range(l):
                    for a in range(d):
                        if not math.isfinite(y_new[i, a]):
                            finite = False
                if not finite:
                    status = NON_FINITE
                    t_fail = t
                    alive = False
                    stop = k + 1
                else:
                    if ev.n > 0:
                        hit, t_stop, nf = check_events(fn, ev, b, m, zero, flat, no, t, y, h, t_new, y_new, K, dummy3,
                                                       x, dummy3, dummy3, r_new, y_new, prep, ints, floats, per,
                                                       work, x, X, r, K2, r2, e2, u)
                        nfev += nf
                        if hit:
                            y_new[:, :] = ev.y_stop[b]
                            status = TERMINAL
                            alive = False
                            stop = k + 1
                    y[:, :] = y_new
            if gslot[k] >= 0:
                saved[gslot[k], b, :, :] = y
        if alive and status == RUNNING:
            status = REACHED
        stats[b, 0] = nfev
        stats[b, 1] = n_steps
        stats[b, 2] = status
        stats[b, 3] = stop
        t_fail_out[b] = t_fail
