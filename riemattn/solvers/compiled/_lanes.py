"""Ensembles on the compiled engine, eight trajectories per step: DOPRI5 and DOP853 in vector lanes
(private).

:func:`solve_lanes` is :func:`riemattn.solvers.compiled._adaptive.solve_rows` for the FSAL steppers
``dopri5`` and ``dop853`` (DOP853's second error estimate and closing evaluation,
:func:`~riemattn.solvers.compiled._steps.dop853_extra`, in lanes too) on the attention forms of
:func:`riemattn.dynamics.kernels._kernel_lanes.lanes_supported`, with the trajectories of one
thread's share taken eight at a time, one per vector lane
(:data:`~riemattn.dynamics.kernels._kernel_simd.LANES`): each lane has its own time, step size,
controller state and counters, and a lane whose trajectory ends (reached, failed, out of steps)
takes the next one of the share at once. Every lane computes exactly what ``solve_rows`` computes
for its trajectory -- the same stages, sums in the same order, the same error norm and controller --
so the results are the same bits (``tests/solvers/test_compiled_lanes.py``). The rare parts run the
per-trajectory code on the lane's values: the first evaluation and initial step of a trajectory, and
the dense output at a ``saveat`` time inside a step.
"""

from __future__ import annotations


import numpy as np

from ...dynamics.kernels._kernel_cache import njit
from ...dynamics.kernels._kernel_lanes import lanes_rhs
from ...dynamics.kernels._kernel_simd import (LANES, v_comb, v_comb_y, v_copy, v_div, v_fill, v_mul, v_muladd,
                                              v_sqrt, v_submul)
from ._adaptive import DOP853, MAX_STEPS, NON_FINITE, REACHED, RUNNING, UNDERFLOW, initial_step
from ._interp import interp
from ._kernel import RHS
from ._steps import _last_nonzero, next_h, step_error

_JIT = dict(error_model="numpy")


@njit(**_JIT)
def _normalize(x, l, d, X, r):
    """r_i = |x_i| (sum of squares in order), X_i = x_i / r_i, per lane."""
    W = LANES
    for i in range(l):
        v_fill(r, i * W, 0.0)
        for a in range(d):
            v_muladd(r, i * W, x, (i * d + a) * W, x, (i * d + a) * W)
        v_sqrt(r, i * W)
        for a in range(d):
            v_div(X, (i * d + a) * W, x, (i * d + a) * W, r, i * W)


@njit(**_JIT)
def _tangent_error(coef, s, K, h, y_new, r_new, l, d, x, c, out):
    """out = (I - y_new y_new^T) (h sum_j coef_j K_j) / |x| per token and lane (_steps.hsum, then
    _steps.tangent_error); x and c (one vector) are scratch."""
    W = LANES
    n = l * d
    v_comb(x, 0, coef, _last_nonzero(coef, s), K, 0, n * W, n, h, 0, x, 0)  # x = h sum_j coef_j K_j
    for p in range(l):
        v_fill(c, 0, 0.0)
        for a in range(d):
            v_muladd(c, 0, y_new, (p * d + a) * W, x, (p * d + a) * W)
        for a in range(d):
            v_submul(out, (p * d + a) * W, x, (p * d + a) * W, c, 0, y_new, (p * d + a) * W)
            v_div(out, (p * d + a) * W, out, (p * d + a) * W, r_new, p * W)


@njit(**_JIT)
def _lane_out(src, w, dst):
    """dst (l, d) = the lane w of src (l d, W) flat."""
    l, d = dst.shape
    for i in range(l):
        for a in range(d):
            dst[i, a] = src[(i * d + a) * LANES + w]


@njit(**_JIT)
def _lane_in(src, dst, w):
    """The lane w of dst (l d, W) flat = src (l, d)."""
    l, d = src.shape
    for i in range(l):
        for a in range(d):
            dst[(i * d + a) * LANES + w] = src[i, a]


@njit(**_JIT)
def solve_lanes(fn, m, Y, start, stride, t0, t1, rtol, atol, h_first, max_steps, ints, floats, per, work_len,
                lane_rows, lane_len, saveat, saved, stats, t_fail_out, halt):
    """Rows start, start + stride, ... of Y (B, l, d) to t1, as ``solve_rows`` (same arguments and
    results; no events, ``saveat`` given), eight at a time. ``lane_rows``, ``lane_len``: the shape
    of the lane kernel's scratch (``lanes_work``)."""
    W = LANES
    B, l, d = Y.shape[0], Y.shape[1], Y.shape[2]
    n = l * d
    s = m.ints[1]
    dop = m.ints[0] == DOP853  # the second error estimate and a closing evaluation (_steps.dop853_extra)
    last_rtol, under_rtol = m.ctrl[4], m.ctrl[5]  # (the controller's constants: _steps.next_h)
    n_save = saveat.shape[0]
    # the per-trajectory code's buffers (start of a trajectory, dense output)
    work = np.empty(max(work_len, 1))
    Ks = np.zeros((s, l, d))
    Us = np.zeros((1, l, d))
    Fd = np.zeros((7 if dop else 1, l, d))
    Kx = np.zeros((16 if dop else 1, l, d))
    K2 = np.zeros((1, l, d))
    ys, xs, Xs, x1s, ynew_s = np.zeros((l, d)), np.zeros((l, d)), np.zeros((l, d)), np.zeros((l, d)), np.zeros((l, d))
    knext_s, scale, u, e2, k1s = np.zeros((l, d)), np.zeros((l, d)), np.zeros((l, d)), np.zeros((l, d)), np.zeros((l, d))
    rs, rnew_s, r2 = np.zeros(l), np.zeros(l), np.zeros(l)
    prep = np.zeros(1, dtype=np.int64)
    errs, e3s = np.zeros((l, d)), np.zeros((l, d))
    # the lanes: (l d, W) flat per vector, (s, l d, W) for the stages
    y, x, X, y_new = np.zeros(n * W), np.zeros(n * W), np.zeros(n * W), np.zeros(n * W)
    err, e3, k1, k_next = np.zeros(n * W), np.zeros(n * W), np.zeros(n * W), np.zeros(n * W)
    K = np.zeros(s * n * W)
    r, r_new, c = np.zeros(l * W), np.zeros(l * W), np.zeros(W)
    wk, wp = np.zeros(lane_rows * W), np.zeros(max(lane_len, 1))
    row = np.full(W, -1, dtype=np.int64)
    frow = np.zeros(W, dtype=np.int64)  # the row of per each lane's field reads (0 for an empty lane)
    t, h, h_try, tc = np.full(W, t0), np.ones(W), np.ones(W), np.full(W, t0)
    last = np.zeros(W, dtype=np.bool_)
    err_prev, rej_prev, nonfin_prev = np.ones(W), np.zeros(W, dtype=np.bool_), np.zeros(W, dtype=np.bool_)
    nfev, n_steps = np.zeros(W, dtype=np.int64), np.zeros(W, dtype=np.int64)
    n_rej, nxt = np.zeros(W, dtype=np.int64), np.zeros(W, dtype=np.int64)
    yes = m.ints[0] >= 0  # True, typed as data (see solve_rows)
    b_next = start
    while True:
        for w in range(W):  # empty lanes take the next rows
            while row[w] < 0 and b_next < B and halt[0] == 0:
                b = b_next
                b_next += stride
                yb = Y[b]
                nf = 0
                fn(RHS, t0, yb, b, ints, floats, per, work, k1s)  # (FSAL: the first stage of the first step)
                nf += 1
                if h_first[b] > 0:
                    hb = h_first[b]
                else:
                    hb = initial_step(fn, m.ints[2], False, t0, t1, yb, k1s, rtol, atol, b, ints, floats, per, work,
                                      scale, xs, ynew_s, knext_s, rs)
                    nf += 1
                if not t1 > t0:  # nothing to integrate
                    stats[b, 0], stats[b, 1], stats[b, 2], stats[b, 3] = nf, 0, 0, REACHED
                    t_fail_out[b] = np.nan
                    continue
                row[w], frow[w] = b, b
                t[w], h[w], nfev[w], n_steps[w], n_rej[w] = t0, hb, nf, 0, 0
                err_prev[w], rej_prev[w], nonfin_prev[w] = 1.0, False, False
                nxt[w] = 1 if (n_save and saveat[0] == t0) else 0
                _lane_in(yb, y, w)
                _lane_in(k1s, k1, w)
        busy = False
        for w in range(W):
            busy = busy or row[w] >= 0
        if not busy:
            break
        if halt[0] != 0:  # Ctrl-C: every lane stops where it is, not finished
            for w in range(W):
                if row[w] >= 0:
                    _finish(w, row, frow, y, Y, stats, t_fail_out, nfev, n_steps, n_rej, RUNNING, t[w])
            break
        stepping = False
        for w in range(W):
            if row[w] < 0:
                continue
            if n_steps[w] + n_rej[w] >= max_steps:
                _finish(w, row, frow, y, Y, stats, t_fail_out, nfev, n_steps, n_rej, MAX_STEPS, t[w])
                continue
            remaining = t1 - t[w]
            h_try[w] = min(h[w], remaining)
            last[w] = h_try[w] >= remaining - last_rtol * max(1.0, abs(t1))
            if last[w]:
                h_try[w] = remaining
            stepping = True
        if not stepping:
            continue
        # ---- one step on every lane (ProjectedRK.step, as rk_step computes it), the first stage carried
        for e in range(n):
            v_copy(K, e * W, k1, e * W)
        for i in range(1, s):
            v_comb_y(x, 0, m.A[i], _last_nonzero(m.A[i], i), K, 0, n * W, n, h_try, 0, y, 0)  # y + h sum_j A_ij K_j
            _normalize(x, l, d, X, r)
            for w in range(W):
                tc[w] = t[w] + m.c[i] * h_try[w]
            lanes_rhs(tc, X, frow, ints, floats, per, wk, wp, K[i * n * W:(i + 1) * n * W])
            for p in range(l):
                for a in range(d):
                    v_mul(K, (i * n + p * d + a) * W, r, p * W)
            for w in range(W):
                nfev[w] += 1
        v_comb_y(x, 0, m.b, _last_nonzero(m.b, s), K, 0, n * W, n, h_try, 0, y, 0)
        _normalize(x, l, d, y_new, r_new)
        _tangent_error(m.e, s, K, h_try, y_new, r_new, l, d, x, c, err)  # the embedded difference
        if dop:
            _tangent_error(m.e3, s, K, h_try, y_new, r_new, l, d, x, c, e3)
            for w in range(W):
                tc[w] = t[w] + 1.0 * h_try[w]
                nfev[w] += 1
            lanes_rhs(tc, y_new, frow, ints, floats, per, wk, wp, k_next)
        else:  # the last stage sits at the new point (_steps.fsal_next)
            for p in range(l):
                for a in range(d):
                    v_div(k_next, (p * d + a) * W, K, ((s - 1) * n + p * d + a) * W, r_new, p * W)
        # ---- per lane: the error norm, saving, the controller (solve_rows' code)
        for w in range(W):
            b = row[w]
            if b < 0:
                continue
            _lane_out(y, w, ys)
            _lane_out(y_new, w, ynew_s)
            _lane_out(err, w, errs)
            if dop:
                _lane_out(e3, w, e3s)
            e, finite = step_error(errs, e3s, ys, ynew_s, atol, rtol, dop, scale)
            accept = e <= 1.0
            ht, tw = h_try[w], t[w]
            t_new = t1 if last[w] else tw + ht
            if accept:
                prep[0] = 0
                built = False
                while nxt[w] < n_save and saveat[nxt[w]] <= t_new:
                    sv = saveat[nxt[w]]
                    if sv >= t_new:
                        saved[nxt[w], b, :, :] = ynew_s
                    else:
                        if not built:  # the lane's step for the per-trajectory dense output
                            for j in range(s):
                                _lane_out(K[j * n * W:(j + 1) * n * W], w, Ks[j])
                            for i in range(l):
                                rnew_s[i] = r_new[i * W + w]
                            _lane_out(k_next, w, knext_s)
                            built = True
                        theta = (sv - tw) / (ht if ht > 0 else 1.0)
                        theta = min(max(theta, 0.0), 1.0)
                        nfev[w] += interp(fn, m, 0 * b, False, yes, tw, ys, ht, Ks, Us, x1s, Fd, Kx, rnew_s,
                                          knext_s, prep, b, ints, floats, per, work, xs, Xs, rs, K2, r2, e2, theta, u)
                        saved[nxt[w], b, :, :] = u
                    nxt[w] += 1
            h[w], err_prev[w] = next_h(m, accept, e, finite, h[w], ht, last[w], err_prev[w], rej_prev[w])
            rej_prev[w] = not accept
            nonfin_prev[w] = not finite
            if accept:
                t[w] = t_new
                for q in range(n):
                    y[q * W + w] = y_new[q * W + w]
                    k1[q * W + w] = k_next[q * W + w]
                n_steps[w] += 1
                if last[w]:
                    _finish(w, row, frow, y, Y, stats, t_fail_out, nfev, n_steps, n_rej, REACHED, np.nan)
            else:
                n_rej[w] += 1
                if h[w] < under_rtol * max(abs(tw), 1.0):
                    status = NON_FINITE if nonfin_prev[w] else UNDERFLOW
                    _finish(w, row, frow, y, Y, stats, t_fail_out, nfev, n_steps, n_rej, status, tw)
    return 0


@njit(**_JIT)
def _finish(w, row, frow, y, Y, stats, t_fail_out, nfev, n_steps, n_rej, status, t_fail):
    """Lane w's trajectory ends: its state, counters and status to its row; the lane is free."""
    b = row[w]
    _lane_out(y, w, Y[b])
    stats[b, 0], stats[b, 1], stats[b, 2], stats[b, 3] = nfev[w], n_steps[w], n_rej[w], status
    t_fail_out[b] = t_fail
    row[w] = -1
    frow[w] = 0
