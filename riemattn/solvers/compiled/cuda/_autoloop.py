"""The CUDA engine's ``auto`` kernel: the explicit/stiff switch in one trajectory's solve (private).

:func:`auto_rows` is :func:`riemattn.solvers.compiled._adaptive.solve_rows` for a method of kind
``AUTO`` and one trajectory, without events: mode 0 takes DOPRI5 steps (the generated step of
:mod:`riemattn.solvers.compiled.cuda._gen`, from the ``auto`` Method record's explicit tableau)
and tests them with :func:`explicit_signal` (``_rosenbrock.explicit_signal``); mode 1 takes
RODAS4P steps (the generated step and dense output of :mod:`riemattn.solvers.compiled.cuda._ros`,
from the record's Rosenbrock tableau) and tests them with ``h |J|_inf`` (``_rosenbrock.stiff_signal``,
|J|_inf the step's own). On every attempted step, accepted or not, the compiled engine's switching
rule: a count of consecutive steps calling for the other method (switch after ``switch_after``),
and in mode 0 a count of elevated steps (switch after ``probe_after``). FSAL: the field at the
step's end (DOPRI5's last stage, or the Rosenbrock step's closing evaluation) is the next step's
first, in either mode. The dense output inside a step is that of the mode that took it. The rest
-- initial step, PI controller (DOPRI5's error order in both modes), acceptance, last-step rule,
statuses, saving -- is :func:`riemattn.solvers.compiled.cuda._rosloop.ros_rows`'. The names
``rk_step``, ``ros_step`` and ``ros_dense`` are bound to the generated functions when the loop is
compiled for a kernel (:func:`build`; the placeholders below are never compiled).
"""

from __future__ import annotations

import math
import sys

import numpy as np
from numba import cuda, float64, int64

from . import _field, _gen, _loop, _steps
from ._field import rhs
from ._loop import REACHED, RUNNING, MAX_STEPS, advance, initial_step, next_step_size, put, record
from ._steps import dopri5_dense, fsal_next, hsum, rms_norm

#: False in a probe kernel without the saving code (as _loop.SAVES)
SAVES = True
#: l d, a compile-time constant of each generated kernel (bound by :func:`build`)
N = 0


def rk_step(*args):  # pragma: no cover -- replaced by the generated DOPRI5 step (_gen.step_source)
    raise NotImplementedError


def ros_step(*args):  # pragma: no cover -- replaced by the generated Rosenbrock step (_ros.step_source)
    raise NotImplementedError


def ros_dense(*args):  # pragma: no cover -- replaced by the generated dense output (_ros.dense_source)
    raise NotImplementedError


@cuda.jit(device=True)
def explicit_signal(ctrl, b6, s, h, K, x, n):
    """``_rosenbrock.explicit_signal``: rho = |h| rms(K_7 - K_6) / rms(h sum_j b6_j K_j) (x: scratch);
    2 stiff (rho > ctrl[7]), 1 elevated (rho > ctrl[9]), 0 not (and where rho is not finite)."""
    hsum(h, b6, s, K, x, n)
    num = 0.0
    den = 0.0
    for p in range(n):
        v = K[6, p] - K[5, p]
        num += v * v
        den += x[p] * x[p]
    dn = math.sqrt(den / n)
    if dn == 0.0:  # the CPU's rho is then inf or NaN: not finite
        return 0.0
    rho = abs(h) * math.sqrt(num / n) / dn
    if not math.isfinite(rho):
        return 0.0
    if rho > ctrl[7]:
        return 2.0
    if rho > ctrl[9]:
        return 1.0
    return 0.0


@cuda.jit(device=True)
def auto_rows(mi, ctrl, dense, b6, flat, t0, t1, rtol, atol, h_row, max_steps, ints, floats, per, b, l, d, y, w, K,
              JM, piv, Us, Ft, F0, x, X, x1, y_new, err, k1, k_next, u, r, r_new, saveat, saved, stats, t_fail_out):
    """The ``auto`` solve of trajectory b on its local arrays: as ``_rosloop.ros_rows``, with K (7, N)
    DOPRI5's stages and ``dense`` its continuous extension, ``b6`` the stiffness estimate's weights."""
    n = N
    s, k, fsal = mi[1], mi[3], mi[4] != 0
    switch_after, probe_after = mi[7], mi[8]
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
    mode = 0  # 0 explicit, 1 stiff; count of steps calling for the other method; elevated explicit steps
    count = 0
    elevated = 0
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
        step_mode = mode
        if mode == 0:
            if has_k1:
                for p in range(n):
                    K[0, p] = k1[p]
            nfev += rk_step(dense, b6, b6, b6, s, True, flat, t, y, h_try, K, has_k1, b, ints, floats, per, w, x, X,
                            r, y_new, r_new, err, l, d)
            if fsal:
                fsal_next(K, s, r_new, k_next, l, d)
            signal = explicit_signal(ctrl, b6, s, h_try, K, x, n)
        else:
            nf, jn = ros_step(t, y, h_try, k1, has_k1, b, ints, floats, per, w, JM, piv, Us, Ft, F0, x, X, r, x1,
                              y_new, r_new, err, k_next)
            nfev += nf
            signal = 0.0 if abs(h_try) * jn < ctrl[8] else 2.0  # (NaN: stiff, as the CPU's test)
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
        stiff_now = signal >= 2.0  # the switching rule, on every attempted step
        other = (not stiff_now) if mode == 1 else stiff_now
        count = count + 1 if other else 0
        if mode == 0 and signal >= 1.0:
            elevated += 1
        if count >= switch_after or (mode == 0 and elevated >= probe_after):
            mode = 1 - mode
            count = 0
            elevated = 0
        if accept:  # saving: slots at or before the step's end (the dense output of the step's mode)
            while SAVES and nxt < n_save and saveat[nxt] <= t_new:
                sv = saveat[nxt]
                if sv >= t_new:
                    for p in range(n):
                        put(saved, nxt, p, b, y_new[p])
                else:
                    theta = (sv - t) / (h_try if h_try > 0 else 1.0)
                    theta = min(max(theta, 0.0), 1.0)
                    if step_mode == 0:
                        dopri5_dense(dense, s, flat, y, h_try, K, theta, ints, floats, x, u, r, l, d)
                    else:
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


def build(m, INTS, l, d, flat, work, rhs, step, dense, saves):
    """The ``auto`` kernel (the arguments of ``_ros``' kernels) for the Method record m, the field
    configuration INTS with its fused field ``rhs``, and the generated Rosenbrock ``step`` and its
    ``dense`` output (``_ros._build``)."""
    steps = _field.device_functions(_steps, ("normalize", "tangent_error", "rms_norm", "fsal_next", "dopri5_dense",
                                             "hsum", "last_nonzero"), {"rhs": rhs})
    rk = _gen._device_step(m, dict(L=l, D=d, N=l * d, FLAT=flat, rhs=rhs, normalize=steps["normalize"],
                                   tangent_error=steps["tangent_error"]), True)
    init = _field.device_functions(_loop, ("initial_step",), dict(steps, rhs=rhs))
    rows = _field.device_functions(sys.modules[__name__], ("auto_rows",), dict(
        steps, rhs=rhs, rk_step=rk, ros_step=step, ros_dense=dense, SAVES=saves, put=_gen.put, N=l * d, **init))
    return _kernel(rows["auto_rows"], m, INTS, l, d, flat, work)


def _kernel(rows, m, INTS, l, d, flat, work):
    MI, CTRL = np.ascontiguousarray(m.ints), np.ascontiguousarray(m.ctrl)
    DENSE, B6 = np.ascontiguousarray(m.dense), np.ascontiguousarray(m.b6)
    L_, D_, N_, S, SR, WORK, FLAT = l, d, l * d, int(m.ints[1]), int(m.rmm.shape[1]), max(int(work), 1), flat

    @cuda.jit
    def auto_kernel(t0, t1, rtol, atol, h_first, max_steps, floats, per_all, Y, saveat, saved, stats, t_fail_out):
        b = cuda.grid(1)
        if b >= Y.shape[0]:
            return
        y = cuda.local.array(N_, float64)
        K = cuda.local.array((S, N_), float64)
        JM = cuda.local.array((N_, N_), float64)
        piv = cuda.local.array(N_, int64)
        Us = cuda.local.array((SR, N_), float64)
        w = cuda.local.array(WORK, float64)
        Ft = cuda.local.array(N_, float64)
        F0 = cuda.local.array(N_, float64)
        x = cuda.local.array(N_, float64)
        X = cuda.local.array(N_, float64)
        x1 = cuda.local.array(N_, float64)
        y_new = cuda.local.array(N_, float64)
        err = cuda.local.array(N_, float64)
        k1 = cuda.local.array(N_, float64)
        k_next = cuda.local.array(N_, float64)
        u = cuda.local.array(N_, float64)
        r = cuda.local.array(L_, float64)
        r_new = cuda.local.array(L_, float64)
        for p in range(N_):
            y[p] = Y[b, p]
        per = per_all[b if per_all.shape[0] > 1 else 0]
        rows(MI, CTRL, DENSE, B6, FLAT, t0, t1, rtol, atol, h_first, max_steps, INTS, floats, per, b, L_, D_, y, w,
             K, JM, piv, Us, Ft, F0, x, X, x1, y_new, err, k1, k_next, u, r, r_new, saveat, saved, stats, t_fail_out)

    return auto_kernel
