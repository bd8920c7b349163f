"""One step of each method, for one trajectory, in compiled code: the NumPy engine's algorithms.

Each function mirrors its NumPy counterpart line by line (the same sums in the same order where
the NumPy code fixes one), on one trajectory ``y`` of shape (l, d):

* :func:`rk_step` -- :meth:`riemattn.solvers.steppers.ProjectedRK.step` (the tableau applied to
  the lifted field ``G = |x|_W F(pi_W x)``, retracted; the embedded difference projected onto
  the tangent space at the new point and divided by ``|x|_W``); ``layer`` evaluates the
  un-normalised update instead and ends with the field's block (``BLOCK``: on a flat state, Mix-LN's
  r_i N_W before its switch) (:class:`riemattn.solvers.layer.LayerStep`).
* :func:`dop853_extra` -- the second error estimate and the closing evaluation of
  :meth:`riemattn.solvers.dormand_prince.ProjectedDOP853.step`; :func:`dop853_dense` its
  continuous extension, :func:`dopri5_dense` DOPRI5's.
* the Rosenbrock steps: :mod:`riemattn.solvers.compiled._rosenbrock`;
* the error norms of :meth:`riemattn.solvers.steppers.Stepper.error_norm` and DOP853's.

The field enters only through the kernels (:mod:`riemattn.solvers.compiled._kernel`).
"""

from __future__ import annotations

import math

from ...dynamics.kernels._kernel_cache import njit
import numpy as np

from ._kernel import BLOCK, RHS, UPDATE, to_tangent, wnorm

_JIT = dict(error_model="numpy")


@njit(**_JIT)
def normalize(x, flat, ints, floats, X, r):
    """(pi_W(x), |x|_W per token) into X, r (flat: X = x, r = 1)."""
    l, d = x.shape
    if flat:
        for i in range(l):
            r[i] = 1.0
            for a in range(d):
                X[i, a] = x[i, a]
        return
    wnorm(x, ints, floats, r)
    for i in range(l):
        for a in range(d):
            X[i, a] = x[i, a] / r[i]


@njit(**_JIT)
def _last_nonzero(row, n):
    m = 0
    for j in range(n):
        if row[j] != 0.0:
            m = j + 1
    return m


@njit(**_JIT)
def _combine(coef, m, K, out):
    """out = sum_{j < m} coef_j K_j ((l, d)), the stages added one after another (for each element
    the same sum, in the same order, as a loop over j per element). Indexed in place: no views of
    K (each would cost a reference count, a reshape a call, at every stage)."""
    l, d = out.shape
    for i in range(l):
        for a in range(d):
            out[i, a] = 0.0
    j = 0
    while j + 4 <= m:  # four stages per pass, added in order
        c0, c1, c2, c3 = coef[j], coef[j + 1], coef[j + 2], coef[j + 3]
        for i in range(l):
            for a in range(d):
                out[i, a] = (((out[i, a] + c0 * K[j, i, a]) + c1 * K[j + 1, i, a]) + c2 * K[j + 2, i, a]) \
                    + c3 * K[j + 3, i, a]
        j += 4
    while j < m:
        cj = coef[j]
        for i in range(l):
            for a in range(d):
                out[i, a] += cj * K[j, i, a]
        j += 1


@njit(**_JIT)
def axpy(y, h, coef, n, K, out):
    """out = y + h * sum_j coef_j K_j over the first n stages (up to the last nonzero coefficient)."""
    l, d = y.shape
    _combine(coef, _last_nonzero(coef, n), K, out)
    for i in range(l):
        for a in range(d):
            out[i, a] = out[i, a] * h + y[i, a]


@njit(**_JIT)
def hsum(h, coef, n, K, out):
    """out = h * sum_j coef_j K_j over the first n stages."""
    l, d = out.shape
    _combine(coef, _last_nonzero(coef, n), K, out)
    for i in range(l):
        for a in range(d):
            out[i, a] = out[i, a] * h


@njit(**_JIT)
def tangent_error(e, y_new, r, flat, ints, floats, out):
    """(I - y y^T W) e / |x|_W per token (flat: e itself)."""
    l, d = e.shape
    if flat:
        out[:, :] = e
        return
    to_tangent(e, y_new, ints, floats, out)
    for i in range(l):
        for a in range(d):
            out[i, a] /= r[i]


@njit(**_JIT)
def rk_step(fn, m, layer, flat, t, y, h, K, has_k1, b, ints, floats, per, work, x, X, r, y_new, r_new, err):
    """One projected RK step of the tableau in ``m``; stages into K (K[0] given when has_k1).
    Writes y_new, r_new (|x|_W of the lifted end point) and, for adaptive tableaux, err (the
    tangent error e5). Returns the field evaluations."""
    s = m.ints[1]
    nfev = 0
    if not has_k1:
        if layer:  # the ops as literal constants (one specialisation of the kernel per op)
            fn(UPDATE, t, y, b, ints, floats, per, work, K[0])
        else:
            fn(RHS, t, y, b, ints, floats, per, work, K[0])
        nfev += 1
    l, d = y.shape
    for i in range(1, s):
        axpy(y, h, m.A[i], i, K, x)
        normalize(x, flat, ints, floats, X, r)
        if layer:
            fn(UPDATE, t + m.c[i] * h, X, b, ints, floats, per, work, K[i])
        else:
            fn(RHS, t + m.c[i] * h, X, b, ints, floats, per, work, K[i])
        if not flat:
            for p in range(l):
                for a in range(d):
                    K[i, p, a] *= r[p]
        nfev += 1
    axpy(y, h, m.b, s, K, x)
    if layer and flat:  # the field's own block from z = y + h u (Mix-LN before its switch: r_i N_W(z_i));
        fn(BLOCK, t, y, b, ints, floats, per, work, x)  # on E_W the block is N_W(z), the retraction below
    normalize(x, flat, ints, floats, y_new, r_new)
    if m.ints[5]:  # adaptive: the embedded difference as a tangent vector at y_new
        hsum(h, m.e, s, K, x)
        tangent_error(x, y_new, r_new, flat, ints, floats, err)
    return nfev


@njit(**_JIT)
def fsal_next(K, s, r_new, k_next):
    """k_next = K[s - 1] / |x|_W: the field at the new point (the last stage sits there)."""
    l, d = k_next.shape
    for i in range(l):
        for a in range(d):
            k_next[i, a] = K[s - 1, i, a] / r_new[i]


@njit(**_JIT)
def dop853_extra(fn, m, flat, t, h, y_new, r_new, K, b, ints, floats, per, work, x, e3, k_next):
    """DOP853: the order-3 tangent error e3 and F(t + h, y_new) (one evaluation)."""
    s = m.ints[1]
    hsum(h, m.e3, s, K, x)
    tangent_error(x, y_new, r_new, flat, ints, floats, e3)
    fn(RHS, t + 1.0 * h, y_new, b, ints, floats, per, work, k_next)
    return 1


@njit(**_JIT)
def rms_norm(err, scale):
    l, d = err.shape
    acc = 0.0
    for i in range(l):
        for a in range(d):
            v = err[i, a] / scale[i, a]
            acc += v * v
    return math.sqrt(acc / (l * d))


@njit(**_JIT)
def dop853_norm(e5, e3, scale):
    l, d = e5.shape
    n5 = 0.0
    n3 = 0.0
    for i in range(l):
        for a in range(d):
            v = e5[i, a] / scale[i, a]
            n5 += v * v
            w = e3[i, a] / scale[i, a]
            n3 += w * w
    denom = math.sqrt((n5 + 0.01 * n3) * (l * d))
    if denom > 0:
        return n5 / denom
    if denom == 0.0:
        return 0.0
    return n5 / denom  # NaN propagates


@njit(**_JIT)
def step_error(err, e3, y, y_new, atol, rtol, dop853, scale):
    """(e, finite): the step's scaled error norm (RMS of ``err``, or DOP853's with ``e3``) against
    ``scale = atol + rtol max(|y|, |y_new|)`` (written into ``scale``), inf where it or a value of
    ``y_new`` is not finite (riemattn.solvers.core._loops.run_adaptive)."""
    l, d = y.shape
    for i in range(l):
        for a in range(d):
            scale[i, a] = atol + rtol * max(abs(y[i, a]), abs(y_new[i, a]))
    e = dop853_norm(err, e3, scale) if dop853 else rms_norm(err, scale)
    finite = math.isfinite(e)
    if finite:
        for i in range(l):
            for a in range(d):
                if not math.isfinite(y_new[i, a]):
                    finite = False
    return (e if finite else np.inf), finite


@njit(**_JIT)
def next_h(m, accept, e, finite, h, h_try, last, err_prev, rejected_prev):
    """(h, err_prev) after an attempted step: the PI controller of
    riemattn.solvers.core._loops.run_adaptive (constants from the method record ``m``)."""
    k = m.ints[3]
    pi_beta, safety, facmin, facmax, err_floor = m.ctrl[0], m.ctrl[1], m.ctrl[2], m.ctrl[3], m.ctrl[6]
    if accept:
        if e > 0:
            grow = safety * e ** (-(1.0 / k - 0.75 * pi_beta)) * err_prev ** pi_beta
        else:
            grow = facmax
        grow = max(grow, facmin)
        grow = min(grow, 1.0) if rejected_prev else min(grow, facmax)
        return (max(h, h_try) if last else h_try) * grow, max(e, err_floor)
    shrink = max(safety * e ** (-1.0 / k), facmin) if (finite and e > 1.0) else facmin
    return h_try * shrink, err_prev


@njit(**_JIT)
def dopri5_dense(m, flat, y, h, K, theta, ints, floats, x, out):
    """Shampine's continuous extension of DOPRI5 at theta, retracted."""
    l, d = y.shape
    s = m.ints[1]
    x[:, :] = y
    for i in range(s):
        w = 0.0
        for k in range(4):
            w += theta ** (k + 1) * m.dense[i, k]
        if w != 0.0:
            hw = h * w
            for p in range(l):
                for a in range(d):
                    x[p, a] += hw * K[i, p, a]
    r = np.empty(l)
    normalize(x, flat, ints, floats, out, r)


@njit(**_JIT)
def dop853_prepare(fn, m, flat, t, y, h, K, r_new, k_next, b, ints, floats, per, work, Kx, Fd, x, X, r):
    """DOP853's continuous extension: three more stages into Kx[13:16], the polynomial's
    coefficients F_1..F_7 into Fd. Returns the evaluations (3)."""
    l, d = y.shape
    s = m.ints[1]
    for j in range(s):
        Kx[j, :, :] = K[j]
    for p in range(l):
        for a in range(d):
            Kx[s, p, a] = r_new[p] * k_next[p, a]
    n = s + 1
    for q in range(3):
        axpy(y, h, m.dense[q], n, Kx, x)
        normalize(x, flat, ints, floats, X, r)
        fn(RHS, t + m.cx[q] * h, X, b, ints, floats, per, work, Kx[n])
        if not flat:
            for p in range(l):
                for a in range(d):
                    Kx[n, p, a] *= r[p]
        n += 1
    # x1 - y
    hsum(h, m.b, s, K, x)
    for p in range(l):
        for a in range(d):
            x1 = y[p, a] + x[p, a]
            dy = x1 - y[p, a]
            Fd[0, p, a] = dy
            Fd[1, p, a] = h * K[0, p, a] - dy
            Fd[2, p, a] = 2.0 * dy - h * (K[0, p, a] + Kx[s, p, a])
    for q in range(4):
        hsum(h, m.dense[3 + q], n, Kx, Fd[3 + q])
    return 3


@njit(**_JIT)
def dop853_dense(flat, y, Fd, theta, ints, floats, x, out):
    l, d = y.shape
    s = theta
    for p in range(l):
        for a in range(d):
            acc = Fd[6, p, a]
            for k in range(5, -1, -1):
                acc = Fd[k, p, a] + (s if k % 2 else 1.0 - s) * acc
            x[p, a] = y[p, a] + s * acc
    r = np.empty(l)
    normalize(x, flat, ints, floats, out, r)
