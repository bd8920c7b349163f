"""The adaptive loop of the compiled engine: one trajectory run to its end, and the parallel batch.

:func:`solve_row` is :func:`riemattn.solvers.core._loops.run_adaptive` for one row of the batch (the
same initial step, PI controller, acceptance, last-step rule, statuses and save rule), with the
steps of :mod:`riemattn.solvers.compiled._steps`; :func:`run_rows` runs rows to its end,
one share of the rows per thread (:func:`riemattn.solvers.compiled._threads.in_threads`; each row's
arithmetic is independent of the others and of the thread that runs it, so the results do not
depend on the number of threads).
"""

from __future__ import annotations


from ...dynamics.kernels._kernel_cache import njit
import numpy as np

from ._events import check_events, start_events
from ._interp import interp
from ._kernel import RHS
from ._rosenbrock import explicit_signal, ros_step, stiff_signal
from ._steps import dop853_extra, fsal_next, next_h, normalize, rk_step, rms_norm, step_error

_JIT = dict(error_model="numpy")

RK, LAYER, DOP853, ROSENBROCK, AUTO = 0, 1, 2, 3, 4
REACHED, RUNNING, MAX_STEPS, UNDERFLOW, NON_FINITE, TERMINAL = 0, 1, -1, -2, -3, 2


@njit(**_JIT)
def initial_step(fn, order, flat, t0, t1, y0, f0, rtol, atol, b, ints, floats, per, work, scale, x, y1, f1, r):
    """Hairer, Norsett & Wanner (1993), II.4, as riemattn.solvers.core._loops.initial_step (one evaluation)."""
    l, d = y0.shape
    for i in range(l):
        for a in range(d):
            scale[i, a] = atol + abs(y0[i, a]) * rtol
    d0 = rms_norm(y0, scale)
    d1 = rms_norm(f0, scale)
    if d0 < 1e-5 or d1 < 1e-5:
        h0 = 1e-6
    else:
        h0 = 0.01 * d0 / (d1 if d1 > 0 else 1.0)
    h0 = min(h0, t1 - t0)
    for i in range(l):
        for a in range(d):
            x[i, a] = y0[i, a] + h0 * f0[i, a]
    normalize(x, flat, ints, floats, y1, r)
    fn(RHS, t0 + h0, y1, b, ints, floats, per, work, f1)
    for i in range(l):
        for a in range(d):
            x[i, a] = f1[i, a] - f0[i, a]
    d2 = rms_norm(x, scale) / h0
    dmax = max(d1, d2)
    if dmax <= 1e-15:
        h1 = max(h0 * 1e-3, 1e-6)
    else:
        h1 = (0.01 / dmax) ** (1.0 / (order + 1))
    return min(min(100 * h0, h1), t1 - t0)


@njit(**_JIT)
def solve_rows(fn, m, Y, start, stride, flat, autonomous, diff, dt_factor, t0, t1, rtol, atol, h_first, max_steps,
               ints, floats, per, work_len, saveat, saved, stats, t_fail_out, every, ev, halt):
    """Integrate rows start, start + stride, ... of Y (B, l, d) from t0 to t1 (one thread's share
    of the batch; the GIL is released); Y is overwritten by the final states.

    ``saved`` (n_save, B, l, d): the values at ``saveat`` (NaN where not reached; slot 0 is filled
    by the caller when saveat[0] == t0); ``stats[b]`` = (nfev, n_steps, n_rejected, status),
    ``t_fail_out[b]``. ``every``: also return every accepted step (times, tokens, count) of the
    last row -- a single trajectory without saveat. ``ev``: the events' arrays
    (:mod:`riemattn.solvers.compiled._events`). ``halt[0] != 0`` (set by the caller on Ctrl-C):
    each row stops before its next step, status RUNNING ("not finished") at its time t, the rows not
    started are left as they are. The row loop is inside this function (no
    separate per-row function: numba re-optimises a callee's code in every caller).
    """
    l, d = Y.shape[1], Y.shape[2]
    kind = m.ints[0]
    s = max(m.ints[1], 1)
    fsal = m.ints[4] != 0
    last_rtol, under_rtol = m.ctrl[4], m.ctrl[5]  # (the controller's constants: _steps.next_h)
    work = np.empty(max(work_len, 1))
    K = np.zeros((s, l, d))
    Kx = np.zeros((16 if kind == DOP853 else 1, l, d))
    Fd = np.zeros((7 if kind == DOP853 else 1, l, d))
    n = l * d
    ros = kind == ROSENBROCK or kind == AUTO
    nr = n if ros else 1
    J = np.zeros((nr, nr))
    M = np.zeros((nr, nr))
    piv = np.zeros(nr, dtype=np.int64)
    Us = np.zeros((6 if ros else 1, l, d))
    Ft = np.zeros((l, d))
    F0 = np.zeros((l, d))
    x = np.empty((l, d))
    X = np.empty((l, d))
    x1 = np.empty((l, d))
    r = np.empty(l)
    r_new = np.empty(l)
    y_new = np.empty((l, d))
    err = np.zeros((l, d))
    e3 = np.zeros((l, d))
    k1 = np.zeros((l, d))
    k_next = np.zeros((l, d))
    scale = np.empty((l, d))
    u = np.empty((l, d))
    K2 = np.zeros((1, l, d))
    r2 = np.empty(l)
    e2 = np.empty((l, d))
    prep = np.zeros(1, dtype=np.int64)
    cap = 64 if every else 1
    ts = np.empty(cap)
    ys = np.empty((cap, l, d))
    n_rec = 0
    B = Y.shape[0]
    for b in range(start, B, stride):
        if halt[0] != 0:
            break
        y = Y[b]
        srow = saved[:, b]
        h_row = h_first[b]
        n_rec = 0
        nfev = 0
        n_steps = 0
        n_rej = 0
        status = RUNNING
        t_fail = np.nan
        n_save = saveat.shape[0]
        nxt = 1 if (n_save and saveat[0] == t0) else 0
        yes = kind >= 0  # True, typed as data (a literal would compile other versions of the callees)
        has_k1 = kind < 0
        if fsal or not h_row > 0:
            fn(RHS, t0, y, b, ints, floats, per, work, k1)
            nfev += 1
            has_k1 = yes
        if h_row > 0:
            h = h_row
        else:
            h = initial_step(fn, m.ints[2], flat, t0, t1, y, k1, rtol, atol, b, ints, floats, per, work, scale, x,
                             y_new, k_next, r)
            nfev += 1
            if not fsal:
                has_k1 = kind < 0
        start_events(ev, b, t0, y)
        t = t0
        done = not t1 > t0
        if done:
            status = REACHED
        err_prev = 1.0
        rejected_prev = False
        nonfinite_prev = False
        mode = kind * 0  # auto: 0 explicit, 1 stiff (an int64: see yes); count of steps calling for the other method; elevated
        count = 0
        elevated = 0
        while not done:
            if halt[0] != 0:  # Ctrl-C: the row stops where it is, not finished
                t_fail = t
                break
            if n_steps + n_rej >= max_steps:
                status = MAX_STEPS
                t_fail = t
                break
            remaining = t1 - t
            h_try = min(h, remaining)
            last = h_try >= remaining - last_rtol * max(1.0, abs(t1))
            if last:
                h_try = remaining
            step_mode = mode
            # ---- the step
            if kind == RK or kind == LAYER or kind == DOP853 or (kind == AUTO and mode == 0):
                if has_k1:
                    K[0, :, :] = k1
                nfev += rk_step(fn, m, kind == LAYER, flat, t, y, h_try, K, has_k1, b, ints, floats, per, work,
                                x, X, r, y_new, r_new, err)
                if kind == DOP853:
                    nfev += dop853_extra(fn, m, flat, t, h_try, y_new, r_new, K, b, ints, floats, per, work, x, e3,
                                         k_next)
                elif fsal:
                    fsal_next(K, m.ints[1], r_new, k_next)
                signal = explicit_signal(m, h_try, K, x) if kind == AUTO else 0.0
            else:
                nfev += ros_step(fn, m, flat, autonomous, diff, dt_factor, t, y, h_try, k1, has_k1, b, ints, floats,
                                 per, work, J, M, piv, Us, Ft, F0, x, X, r, x1, y_new, r_new, err, k_next)
                signal = stiff_signal(m, h_try, J) if kind == AUTO else 0.0
            e, finite = step_error(err, e3, y, y_new, atol, rtol, kind == DOP853, scale)
            accept = e <= 1.0
            t_new = t1 if last else t + h_try
            if kind == AUTO:  # the switching rule of riemattn.solvers.auto, on every attempted step
                stiff_now = signal >= 2.0
                other = (not stiff_now) if mode == 1 else stiff_now
                count = count + 1 if other else 0
                if mode == 0 and signal >= 1.0:
                    elevated += 1
                if count >= m.ints[7] or (mode == 0 and elevated >= m.ints[8]):
                    mode = 1 - mode
                    count = 0
                    elevated = 0
            # ---- events and saving on the accepted step (dense output built on first use)
            prep[0] = 0
            hit = False
            if accept and ev.n > 0:
                hit, t_stop, nf = check_events(fn, ev, b, m, step_mode, flat, yes, t, y, h_try, t_new, y_new, K, Us, x1,
                                               Fd, Kx, r_new, k_next, prep, ints, floats, per, work, x, X, r, K2,
                                               r2, e2, u)
                nfev += nf
                if hit:
                    t_new = t_stop
                    y_new[:, :] = ev.y_stop[b]
            if accept:
                while nxt < n_save and saveat[nxt] <= t_new:
                    sv = saveat[nxt]
                    if sv >= t_new:
                        srow[nxt, :, :] = y_new
                    else:
                        theta = (sv - t) / (h_try if h_try > 0 else 1.0)
                        theta = min(max(theta, 0.0), 1.0)
                        nfev += interp(fn, m, step_mode, flat, yes, t, y, h_try, K, Us, x1, Fd, Kx, r_new, k_next, prep,
                                       b, ints, floats, per, work, x, X, r, K2, r2, e2, theta, u)
                        srow[nxt, :, :] = u
                    nxt += 1
            # ---- step-size update (the PI controller of riemattn.solvers.core._loops.run_adaptive)
            h, err_prev = next_h(m, accept, e, finite, h, h_try, last, err_prev, rejected_prev)
            rejected_prev = not accept
            nonfinite_prev = not finite
            if accept:
                t = t_new
                y[:, :] = y_new
                if has_k1:
                    k1[:, :] = k_next
                n_steps += 1
                if every:
                    if n_rec == ts.shape[0]:
                        ts2 = np.empty(2 * n_rec)
                        ys2 = np.empty((2 * n_rec, l, d))
                        ts2[:n_rec] = ts
                        ys2[:n_rec] = ys
                        ts, ys = ts2, ys2
                    ts[n_rec] = t
                    ys[n_rec] = y
                    n_rec += 1
                if last:
                    status = REACHED
                    done = True
                if hit:
                    status = TERMINAL
                    done = True
            else:
                n_rej += 1
                if h < under_rtol * max(abs(t), 1.0):
                    status = NON_FINITE if nonfinite_prev else UNDERFLOW
                    t_fail = t
                    done = True
        stats[b, 0] = nfev
        stats[b, 1] = n_steps
        stats[b, 2] = n_rej
        stats[b, 3] = status
        t_fail_out[b] = t_fail
    return ts, ys, n_rec
