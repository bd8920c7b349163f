"""One step of each method for one trajectory, as CUDA device functions (private).

The device twins of :mod:`riemattn.solvers.compiled._steps` (same sums in the same order): the
compiled engine's step functions receive the field as a function pointer (``fn``) and take (l, d)
arrays, neither of which a CUDA device function can do, so they are restated here on flat
columns (views ``A[:, b]`` of arrays whose last axis is the trajectory) with the field called
by name (:func:`riemattn.solvers.compiled.cuda._field.rhs`). Arguments: ``y``, ``x``, ``X``, ``err``...
flat columns of length n = l d; ``K`` (s, n) the stages; ``r`` (l,) the tokens' |x|_W; the
tableau rows come from the compiled engine's :class:`~riemattn.solvers.compiled._tables.Method`.
"""

from __future__ import annotations

import math

from numba import cuda

from ._field import rhs, winner_token, wnorm_token


@cuda.jit(device=True)
def normalize(x, l, d, flat, ints, floats, X, r):
    """(pi_W(x), |x|_W per token) into X, r (flat: X = x, r = 1)."""
    for i in range(l):
        ri = 1.0 if flat else wnorm_token(x, i, d, ints, floats)
        r[i] = ri
        for a in range(d):
            X[i * d + a] = x[i * d + a] / ri


@cuda.jit(device=True)
def last_nonzero(row, n):
    m = 0
    for j in range(n):
        if row[j] != 0.0:
            m = j + 1
    return m


@cuda.jit(device=True)
def axpy(y, h, coef, n, K, out, nn):
    """out = y + h * sum_j coef_j K_j over the first n stages (up to the last nonzero coefficient)."""
    m = last_nonzero(coef, n)
    for p in range(nn):
        acc = 0.0
        for j in range(m):
            acc += coef[j] * K[j, p]
        out[p] = acc * h + y[p]


@cuda.jit(device=True)
def hsum(h, coef, n, K, out, nn):
    """out = h * sum_j coef_j K_j over the first n stages."""
    m = last_nonzero(coef, n)
    for p in range(nn):
        acc = 0.0
        for j in range(m):
            acc += coef[j] * K[j, p]
        out[p] = acc * h


@cuda.jit(device=True)
def tangent_error(e, y_new, r, l, d, flat, ints, floats, out):
    """(I - y y^T W) e / |x|_W per token (flat: e itself)."""
    for i in range(l):
        if flat:
            for a in range(d):
                out[i * d + a] = e[i * d + a]
        else:
            c = winner_token(y_new, e, i, d, ints, floats)
            for a in range(d):
                out[i * d + a] = (e[i * d + a] - c * y_new[i * d + a]) / r[i]


@cuda.jit(device=True)
def rk_step(A, bb, c, e, s, adaptive, flat, t, y, h, K, has_k1, b, ints, floats, per, w, x, X, r, y_new, r_new,
            err, l, d):
    """One projected RK step (``compiled._steps.rk_step``); stages into K (K[0] given when has_k1).
    Writes y_new, r_new and, for adaptive tableaux, err. Returns the field evaluations."""
    n = l * d
    nfev = 0
    if not has_k1:
        rhs(t, y, b, ints, floats, per, w, K[0])
        nfev += 1
    for i in range(1, s):
        axpy(y, h, A[i], i, K, x, n)
        normalize(x, l, d, flat, ints, floats, X, r)
        rhs(t + c[i] * h, X, b, ints, floats, per, w, K[i])
        if not flat:
            for p in range(l):
                for a in range(d):
                    K[i, p * d + a] *= r[p]
        nfev += 1
    axpy(y, h, bb, s, K, x, n)
    normalize(x, l, d, flat, ints, floats, y_new, r_new)
    if adaptive:
        hsum(h, e, s, K, x, n)
        tangent_error(x, y_new, r_new, l, d, flat, ints, floats, err)
    return nfev


@cuda.jit(device=True)
def fsal_next(K, s, r_new, k_next, l, d):
    """k_next = K[s - 1] / |x|_W: the field at the new point (the last stage sits there)."""
    for i in range(l):
        for a in range(d):
            k_next[i * d + a] = K[s - 1, i * d + a] / r_new[i]


@cuda.jit(device=True)
def dop853_extra(e3c, s, flat, t, h, y_new, r_new, K, b, ints, floats, per, w, x, e3, k_next, l, d):
    """DOP853: the order-3 tangent error e3 and F(t + h, y_new) (one evaluation)."""
    hsum(h, e3c, s, K, x, l * d)
    tangent_error(x, y_new, r_new, l, d, flat, ints, floats, e3)
    rhs(t + 1.0 * h, y_new, b, ints, floats, per, w, k_next)
    return 1


@cuda.jit(device=True)
def rms_norm(err, y, y_new, rtol, atol, n):
    """The RMS of err / (atol + rtol max(|y|, |y_new|)) (``Stepper.error_norm``)."""
    acc = 0.0
    for p in range(n):
        v = err[p] / (atol + rtol * max(abs(y[p]), abs(y_new[p])))
        acc += v * v
    return math.sqrt(acc / n)


@cuda.jit(device=True)
def dop853_norm(e5, e3, y, y_new, rtol, atol, n):
    """DOP853's error norm (Hairer's: |e5|^2 / sqrt(n (|e5|^2 + 0.01 |e3|^2)))."""
    n5 = 0.0
    n3 = 0.0
    for p in range(n):
        sc = atol + rtol * max(abs(y[p]), abs(y_new[p]))
        v = e5[p] / sc
        n5 += v * v
        u = e3[p] / sc
        n3 += u * u
    denom = math.sqrt((n5 + 0.01 * n3) * n)
    if denom > 0:
        return n5 / denom
    if denom == 0.0:
        return 0.0
    return n5 / denom  # NaN propagates


@cuda.jit(device=True)
def dopri5_dense(dense, s, flat, y, h, K, theta, ints, floats, x, out, r, l, d):
    """Shampine's continuous extension of DOPRI5 at theta, retracted."""
    n = l * d
    for p in range(n):
        x[p] = y[p]
    for i in range(s):
        wt = 0.0
        for k in range(4):
            wt += theta ** (k + 1) * dense[i, k]
        if wt != 0.0:
            hw = h * wt
            for p in range(n):
                x[p] += hw * K[i, p]
    normalize(x, l, d, flat, ints, floats, out, r)


@cuda.jit(device=True)
def dop853_prepare(dense, cx, bb, s, flat, t, y, h, K, r_new, k_next, b, ints, floats, per, w, Kx, Fd, x, X, r,
                   l, d):
    """DOP853's continuous extension: three more stages into Kx[s + 1:s + 4], the polynomial's
    coefficients F_1..F_7 into Fd. Returns the evaluations (3)."""
    nn = l * d
    for j in range(s):
        for p in range(nn):
            Kx[j, p] = K[j, p]
    for i in range(l):
        for a in range(d):
            Kx[s, i * d + a] = r_new[i] * k_next[i * d + a]
    n = s + 1
    for q in range(3):
        axpy(y, h, dense[q], n, Kx, x, nn)
        normalize(x, l, d, flat, ints, floats, X, r)
        rhs(t + cx[q] * h, X, b, ints, floats, per, w, Kx[n])
        if not flat:
            for i in range(l):
                for a in range(d):
                    Kx[n, i * d + a] *= r[i]
        n += 1
    hsum(h, bb, s, K, x, nn)
    for p in range(nn):
        x1 = y[p] + x[p]
        dy = x1 - y[p]
        Fd[0, p] = dy
        Fd[1, p] = h * K[0, p] - dy
        Fd[2, p] = 2.0 * dy - h * (K[0, p] + Kx[s, p])
    for q in range(4):
        hsum(h, dense[3 + q], n, Kx, Fd[3 + q], nn)
    return 3


@cuda.jit(device=True)
def dop853_dense(flat, y, Fd, theta, ints, floats, x, out, r, l, d):
    """DOP853's continuous extension at theta (after :func:`dop853_prepare`), retracted."""
    for p in range(l * d):
        acc = Fd[6, p]
        for k in range(5, -1, -1):
            acc = Fd[k, p] + (theta if k % 2 else 1.0 - theta) * acc
        x[p] = y[p] + theta * acc
    normalize(x, l, d, flat, ints, floats, out, r)
