"""The CUDA engine's Rosenbrock loop: one trajectory's adaptive solve with the RODAS step (private).

:func:`ros_rows` is :func:`riemattn.solvers.compiled._adaptive.solve_rows` for a method of kind
``ROSENBROCK`` (``rodas4``, ``rodas4p``) and one trajectory, without events: the same initial
step, PI controller, acceptance, last-step rule, statuses and saving rule as
:func:`riemattn.solvers.compiled.cuda._loop.adaptive_rows` (the explicit methods' loop), with the
step :func:`ros_step` and the dense output :func:`ros_dense` generated per method and field
configuration by :mod:`riemattn.solvers.compiled.cuda._ros` and bound to those names when the
loop is compiled for a kernel (the names below are placeholders, never compiled).
"""

from __future__ import annotations

import math

from numba import cuda

from ._field import rhs
from ._loop import REACHED, RUNNING, MAX_STEPS, advance, initial_step, next_step_size, put, record
from ._steps import rms_norm

#: False in a probe kernel without the saving code (as _loop.SAVES)
SAVES = True
#: l d, a compile-time constant of each generated kernel (bound by _ros)
N = 0


def ros_step(*args):  # pragma: no cover -- replaced by the generated step (_ros.step_source)
    raise NotImplementedError


def ros_dense(*args):  # pragma: no cover -- replaced by the generated dense output (_ros.dense_source)
    raise NotImplementedError


@cuda.jit(device=True)
def ros_rows(mi, ctrl, flat, t0, t1, rtol, atol, h_row, max_steps, ints, floats, per, b, l, d, y, w, JM, piv, Us,
             Ft, F0, x, X, x1, y_new, err, k1, k_next, u, r, r_new, saveat, saved, stats, t_fail_out):
    """The Rosenbrock solve of trajectory b on its local arrays: y (N,) the state (overwritten by the
    end state), JM (N, N) the Jacobian and then the LU of I / (h gamma) - J, piv (N,) its pivots,
    Us (6, N) the stages, w the field's scratch, the rest (N,) or (l,) scratch. Writes ``saved`` at
    the save times (:func:`put`; NaN in the slots a stopped trajectory does not reach),
    ``stats[:, b]`` = (nfev, n_steps, n_rejected, status) and ``t_fail_out[b]``."""
    n = N
    k, fsal = mi[3], mi[4] != 0
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
        nf, jn = ros_step(t, y, h_try, k1, has_k1, b, ints, floats, per, w, JM, piv, Us, Ft, F0, x, X, r, x1, y_new,
                          r_new, err, k_next)  # (|J|_inf: auto's stiffness test, _autoloop)
        nfev += nf
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
        if accept:  # saving: slots at or before the step's end (the dense output inside the step)
            while SAVES and nxt < n_save and saveat[nxt] <= t_new:
                sv = saveat[nxt]
                if sv >= t_new:
                    for p in range(n):
                        put(saved, nxt, p, b, y_new[p])
                else:
                    theta = (sv - t) / (h_try if h_try > 0 else 1.0)
                    theta = min(max(theta, 0.0), 1.0)
                    ros_dense(y, x1, Us, theta, ints, floats, x, u, r)
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
