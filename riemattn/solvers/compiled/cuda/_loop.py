"""The CUDA engine's kernels: one thread per trajectory runs the whole solve (private).

:func:`adaptive_kernel` is :func:`riemattn.solvers.compiled._adaptive.solve_rows` for the
trajectory ``b = cuda.grid(1)`` (the same initial step, PI controller, acceptance, last-step
rule, statuses and saving rule, with the steps of :mod:`riemattn.solvers.compiled.cuda._steps`);
:func:`fixed_kernel` is :func:`riemattn.solvers.compiled._fixed.fixed_rows` over the grid the host
computes as the compiled engine does. No host round trip during a solve: the kernel returns when
every trajectory has reached t1 or stopped.

Memory layout (the engine allocates): every per-trajectory array has the trajectory as its LAST
axis -- the state ``Y`` (n, B), the stages ``K`` (s, n, B), the field's scratch ``W`` (work, B),
the saved values (n_save, n, B), ``stats`` (4, B) -- so that when the threads of a warp touch the
same element of their trajectories they touch neighbouring addresses (coalesced loads). Each
thread works on the column views ``Y[:, b]``.
"""

from __future__ import annotations

import math

from numba import cuda

from ._field import rhs
from ._steps import dop853_dense, dop853_extra, dop853_norm, dop853_prepare, dopri5_dense, fsal_next, normalize
from ._steps import rk_step, rms_norm

REACHED, RUNNING, MAX_STEPS, UNDERFLOW, NON_FINITE = 0, 1, -1, -2, -3
RK, DOP853 = 0, 2
#: False in a probe kernel without the saving code (the proxy test of the generated kernels, _gen)
SAVES = True


@cuda.jit(device=True)
def put(saved, q, p, b, v):
    """Save component p of trajectory b in slot q: ``saved[q, p, b] = v`` (the layout (n_save, n, B));
    the generated kernels (:mod:`._gen`) bind their own, for the layout (n_save, B, n)."""
    saved[q, p, b] = v


@cuda.jit(device=True)
def initial_step(order, flat, t0, t1, y0, f0, rtol, atol, b, ints, floats, per, w, x, y1, f1, r, l, d):
    """Hairer, Norsett & Wanner (1993), II.4, as ``compiled._adaptive.initial_step`` (one evaluation)."""
    n = l * d
    a0 = 0.0
    a1 = 0.0
    for p in range(n):
        sc = atol + abs(y0[p]) * rtol
        v = y0[p] / sc
        a0 += v * v
        u = f0[p] / sc
        a1 += u * u
    d0 = math.sqrt(a0 / n)
    d1 = math.sqrt(a1 / n)
    if d0 < 1e-5 or d1 < 1e-5:
        h0 = 1e-6
    else:
        h0 = 0.01 * d0 / (d1 if d1 > 0 else 1.0)
    h0 = min(h0, t1 - t0)
    for p in range(n):
        x[p] = y0[p] + h0 * f0[p]
    normalize(x, l, d, flat, ints, floats, y1, r)
    rhs(t0 + h0, y1, b, ints, floats, per, w, f1)
    a2 = 0.0
    for p in range(n):
        v = (f1[p] - f0[p]) / (atol + abs(y0[p]) * rtol)
        a2 += v * v
    d2 = math.sqrt(a2 / n) / h0
    dmax = max(d1, d2)
    if dmax <= 1e-15:
        h1 = max(h0 * 1e-3, 1e-6)
    else:
        h1 = (0.01 / dmax) ** (1.0 / (order + 1))
    return min(min(100 * h0, h1), t1 - t0)


@cuda.jit(device=True)
def next_step_size(ctrl, alpha, k, accept, finite, en, h, h_try, last, rejected_prev, err_prev):
    """(the next step size, the error kept for the next PI step) after an attempt with error norm
    ``en``: the PI controller of ``riemattn.solvers.core._loops.run_adaptive`` on an accepted step
    (no growth after a rejection, at most ``facmax``), ``safety en^(-1/k)`` (at least ``facmin``) on
    a rejected one. Shared by the explicit loop (:func:`adaptive_rows`) and the Rosenbrock loop
    (:mod:`riemattn.solvers.compiled.cuda._rosloop`)."""
    pi_beta, safety, facmin, facmax, err_floor = ctrl[0], ctrl[1], ctrl[2], ctrl[3], ctrl[6]
    if accept:
        if en > 0:
            grow = safety * en ** (-alpha) * err_prev ** pi_beta
        else:
            grow = facmax
        grow = max(grow, facmin)
        grow = min(grow, 1.0) if rejected_prev else min(grow, facmax)
        return (max(h, h_try) if last else h_try) * grow, max(en, err_floor)
    shrink = max(safety * en ** (-1.0 / k), facmin) if (finite and en > 1.0) else facmin
    return h_try * shrink, err_prev


@cuda.jit(device=True, inline="always")  # in Numba IR: the loops' registers as before the extraction
def advance(accept, last, finite, t, t_new, h, under_rtol, n, y, y_new, has_k1, k1, k_next, n_steps, n_rej, status,
            t_fail):
    """After an attempt, with the next step size h already chosen: an accepted step moves (t, y, and
    k1 where kept) to its end and counts, REACHED on the last; a rejected one counts, and stops the
    trajectory (UNDERFLOW, or NON_FINITE after a non-finite attempt) once h falls below
    ``under_rtol max(|t|, 1)``. Returns (t, n_steps, n_rejected, status, t_fail, done). Shared by the
    explicit, Rosenbrock and auto loops."""
    done = False
    if accept:
        t = t_new
        for p in range(n):
            y[p] = y_new[p]
        if has_k1:
            for p in range(n):
                k1[p] = k_next[p]
        n_steps += 1
        if last:
            status = REACHED
            done = True
    else:
        n_rej += 1
        if h < under_rtol * max(abs(t), 1.0):
            status = UNDERFLOW if finite else NON_FINITE
            t_fail = t
            done = True
    return t, n_steps, n_rej, status, t_fail, done


@cuda.jit(device=True, inline="always")
def record(stats, t_fail_out, b, nfev, n_steps, n_rej, status, t_fail):
    """The adaptive loops' statistics of trajectory b: stats[:, b] = (nfev, n_steps, n_rejected, status)."""
    stats[0, b] = nfev
    stats[1, b] = n_steps
    stats[2, b] = n_rej
    stats[3, b] = status
    t_fail_out[b] = t_fail


@cuda.jit
def adaptive_kernel(mi, ctrl, A, bb, c, e, e3c, dense, cx, flat, t0, t1, rtol, atol, h_first, max_steps, ints,
                    floats, per_all, W, Y, K, Kx, Fd, X1, X2, Yn, Er, E3, K1, Kn, U, R, Rn, saveat, saved, stats,
                    t_fail_out):
    """Integrate trajectory b = cuda.grid(1) of Y (n, B) from t0 to t1 (Y overwritten by its end
    state); ``mi`` = the Method's ints (kind, stages, order, k, fsal); ``saved`` (n_save, n, B),
    ``stats`` (4, B) = (nfev, n_steps, n_rejected, status), ``t_fail_out`` (B,). The solve is
    :func:`adaptive_rows` on the trajectory's columns of the global arrays."""
    b = cuda.grid(1)
    B = Y.shape[1]
    if b >= B:
        return
    per = per_all[b if per_all.shape[0] > 1 else 0]  # the trajectory's row (_field.source)
    bx = b if Kx.shape[2] > 1 else 0  # DOP853's dense-output stages: allocated for every b only when used
    adaptive_rows(mi, ctrl, A, bb, c, e, e3c, dense, cx, flat, t0, t1, rtol, atol, h_first[b], max_steps, ints,
                  floats, per, b, ints[2], ints[3], Y[:, b], W[:, b], K[:, :, b], Kx[:, :, bx], Fd[:, :, bx],
                  X1[:, b], X2[:, b], Yn[:, b], Er[:, b], E3[:, b], K1[:, b], Kn[:, b], U[:, b], R[:, b], Rn[:, b],
                  saveat, saved, stats, t_fail_out)


@cuda.jit(device=True)
def adaptive_rows(mi, ctrl, A, bb, c, e, e3c, dense, cx, flat, t0, t1, rtol, atol, h_row, max_steps, ints, floats,
                  per, b, l, d, y, w, Kb, Kxb, Fdb, x, X, y_new, err, e3, k1, k_next, u, r, r_new, saveat, saved, stats,
                  t_fail_out):
    """The solve of trajectory b (``compiled._adaptive.solve_rows``), l tokens of dimension d, on its
    per-trajectory arrays: y (n,) the state (overwritten by the end state), Kb (s, n) the stages,
    Kxb (16, n), Fdb (7, n) DOP853's dense-output stages and coefficients, w the field's scratch, x, X, y_new, err, e3, k1,
    k_next, u (n,) and r, r_new (l,) scratch -- columns of global arrays (:func:`adaptive_kernel`) or
    per-thread local arrays (the generated kernels, :mod:`riemattn.solvers.compiled.cuda._gen`). Writes
    ``saved[:, :, b]`` at the save times (:func:`put`; NaN in the slots a stopped trajectory does not
    reach) and ``stats[:, b]``, ``t_fail_out[b]`` at the end."""
    n = l * d
    kind, s, k, fsal = mi[0], mi[1], mi[3], mi[4] != 0
    last_rtol, under_rtol = ctrl[4], ctrl[5]
    alpha = 1.0 / k - 0.75 * ctrl[0]  # ctrl[0]: the PI controller's beta
    nfev = 0
    n_steps = 0
    n_rej = 0
    status = RUNNING
    t_fail = math.nan
    n_save = saveat.shape[0]
    nxt = 1 if (n_save > 0 and saveat[0] == t0) else 0
    has_k1 = False
    if fsal or not h_row > 0:
        rhs(t0, y, b, ints, floats, per, w, k1)
        nfev += 1
        has_k1 = True
    if h_row > 0:
        h = h_row
    else:
        h = initial_step(mi[2], flat, t0, t1, y, k1, rtol, atol, b, ints, floats, per, w, x, y_new, k_next, r, l, d)
        nfev += 1
        if not fsal:
            has_k1 = False
    t = t0
    done = not t1 > t0
    if done:
        status = REACHED
    err_prev = 1.0
    rejected_prev = False
    while not done:
        if n_steps + n_rej >= max_steps:
            status = MAX_STEPS
            t_fail = t
            break
        remaining = t1 - t
        h_try = min(h, remaining)
        last = h_try >= remaining - last_rtol * max(1.0, abs(t1))
        if last:
            h_try = remaining
        if has_k1:
            for p in range(n):
                Kb[0, p] = k1[p]
        nfev += rk_step(A, bb, c, e, s, True, flat, t, y, h_try, Kb, has_k1, b, ints, floats, per, w, x, X, r,
                        y_new, r_new, err, l, d)
        if kind == DOP853:
            nfev += dop853_extra(e3c, s, flat, t, h_try, y_new, r_new, Kb, b, ints, floats, per, w, x, e3, k_next,
                                 l, d)
            en = dop853_norm(err, e3, y, y_new, rtol, atol, n)
        else:
            if fsal:
                fsal_next(Kb, s, r_new, k_next, l, d)
            en = rms_norm(err, y, y_new, rtol, atol, n)
        finite = math.isfinite(en)
        if finite:
            for p in range(n):
                if not math.isfinite(y_new[p]):
                    finite = False
        if not finite:
            en = math.inf
        accept = en <= 1.0
        t_new = t1 if last else t + h_try
        if accept:  # saving: slots at or before the step's end (dense output built on first use)
            prepared = False
            while SAVES and nxt < n_save and saveat[nxt] <= t_new:
                sv = saveat[nxt]
                if sv >= t_new:
                    for p in range(n):
                        put(saved, nxt, p, b, y_new[p])
                else:
                    theta = (sv - t) / (h_try if h_try > 0 else 1.0)
                    theta = min(max(theta, 0.0), 1.0)
                    if kind == DOP853:
                        if not prepared:
                            nfev += dop853_prepare(dense, cx, bb, s, flat, t, y, h_try, Kb, r_new, k_next, b, ints,
                                                   floats, per, w, Kxb, Fdb, x, X, r, l, d)
                            prepared = True
                        dop853_dense(flat, y, Fdb, theta, ints, floats, x, u, r, l, d)
                    else:
                        dopri5_dense(dense, s, flat, y, h_try, Kb, theta, ints, floats, x, u, r, l, d)
                    for p in range(n):
                        put(saved, nxt, p, b, u[p])
                nxt += 1
        h, err_prev = next_step_size(ctrl, alpha, k, accept, finite, en, h, h_try, last, rejected_prev, err_prev)
        rejected_prev = not accept
        t, n_steps, n_rej, status, t_fail, done = advance(accept, last, finite, t, t_new, h, under_rtol, n, y, y_new,
                                                          has_k1, k1, k_next, n_steps, n_rej, status, t_fail)
    while SAVES and nxt < n_save:  # the slots a stopped trajectory does not reach
        for p in range(n):
            put(saved, nxt, p, b, math.nan)
        nxt += 1
    record(stats, t_fail_out, b, nfev, n_steps, n_rej, status, t_fail)


@cuda.jit
def fixed_kernel(mi, A, bb, c, e, flat, gt, gh, gslot, ints, floats, per_all, W, Y, K, X1, X2, Yn, Er, R, Rn, saved,
                 stats, t_fail_out):
    """Step trajectory b = cuda.grid(1) over the grid (``compiled._fixed.fixed_rows`` without
    events): ``saved`` (n_save, n, B) at the grid's save slots; ``stats`` (4, B) = (nfev,
    n_steps, status, stop step (1-based; 0: none)); a non-finite state stops the row (frozen).
    The solve is :func:`fixed_rows` on the trajectory's columns of the global arrays."""
    b = cuda.grid(1)
    B = Y.shape[1]
    if b >= B:
        return
    per = per_all[b if per_all.shape[0] > 1 else 0]  # the trajectory's row (_field.source)
    fixed_rows(mi, A, bb, c, e, flat, gt, gh, gslot, ints, floats, per, b, ints[2], ints[3], Y[:, b], W[:, b],
               K[:, :, b], X1[:, b], X2[:, b], Yn[:, b], Er[:, b], R[:, b], Rn[:, b], saved, stats, t_fail_out)


@cuda.jit(device=True)
def fixed_rows(mi, A, bb, c, e, flat, gt, gh, gslot, ints, floats, per, b, l, d, y, w, Kb, x, X, y_new, err, r, r_new,
               saved, stats, t_fail_out):
    """The fixed-step solve of trajectory b on its per-trajectory arrays (as :func:`adaptive_rows`)."""
    n = l * d
    s = mi[1]
    nfev = 0
    n_steps = 0
    status = RUNNING
    t_fail = math.nan
    stop = 0
    alive = True
    for kk in range(gt.shape[0]):
        if alive:
            nfev += rk_step(A, bb, c, e, s, False, flat, gt[kk], y, gh[kk], Kb, False, b, ints, floats, per, w, x, X,
                            r, y_new, r_new, err, l, d)
            n_steps += 1
            finite = True
            for p in range(n):
                if not math.isfinite(y_new[p]):
                    finite = False
            if not finite:
                status = NON_FINITE
                t_fail = gt[kk]
                alive = False
                stop = kk + 1
            else:
                for p in range(n):
                    y[p] = y_new[p]
        if SAVES and gslot[kk] >= 0:
            for p in range(n):
                put(saved, gslot[kk], p, b, y[p])
    if alive:
        status = REACHED
    stats[0, b] = nfev
    stats[1, b] = n_steps
    stats[2, b] = status
    stats[3, b] = stop
    t_fail_out[b] = t_fail
