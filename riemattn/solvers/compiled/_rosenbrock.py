"""The Rosenbrock steps of the compiled engine, for one trajectory: the NumPy engine's algorithm.

:func:`ros_step` is :meth:`riemattn.solvers.rosenbrock.ProjectedRosenbrock.step` (the RODAS form
applied to the lifted field with its exact Jacobian, retracted; the error estimate projected onto
the tangent space), with one LU factorisation of ``I / (h gamma) - J`` per step instead of
NumPy's explicit inverse (the same solution to rounding); :func:`ros_dense` is its dense output;
:func:`explicit_signal` and :func:`stiff_signal` are ``"auto"``'s stiffness tests
(:mod:`riemattn.solvers.auto`).
"""

from __future__ import annotations

import math

from ...dynamics.kernels._kernel_cache import njit
import numpy as np

from ._kernel import LIFTED_JAC, RHS, RHS_DIFF
from ._steps import hsum, normalize, tangent_error

_JIT = dict(error_model="numpy")


@njit(**_JIT)
def lu_factor(M, piv):
    """In-place LU with partial pivoting (a zero pivot gives inf/NaN, reported as non-finite)."""
    n = M.shape[0]
    for k in range(n):
        p = k
        big = abs(M[k, k])
        for i in range(k + 1, n):
            v = abs(M[i, k])
            if v > big:
                big = v
                p = i
        piv[k] = p
        if p != k:
            for j in range(n):
                tmp = M[k, j]
                M[k, j] = M[p, j]
                M[p, j] = tmp
        inv = 1.0 / M[k, k]
        for i in range(k + 1, n):
            f = M[i, k] * inv
            M[i, k] = f
            if f != 0.0:
                for j in range(k + 1, n):
                    M[i, j] -= f * M[k, j]


@njit(**_JIT)
def lu_solve(M, piv, v):
    """Solve in place (v flat of length n)."""
    n = M.shape[0]
    for k in range(n):
        p = piv[k]
        if p != k:
            tmp = v[k]
            v[k] = v[p]
            v[p] = tmp
    for i in range(n):
        acc = v[i]
        for j in range(i):
            acc -= M[i, j] * v[j]
        v[i] = acc
    for i in range(n - 1, -1, -1):
        acc = v[i]
        for j in range(i + 1, n):
            acc -= M[i, j] * v[j]
        v[i] = acc / M[i, i]


@njit(**_JIT)
def ros_step(fn, m, flat, autonomous, diff, dt_factor, t, y, h, k1, has_k1, b, ints, floats, per, work,
             J, M, piv, Us, Ft, F0, x, X, r, x1, y_new, r_new, err, k_next):
    """One projected Rosenbrock step (RODAS form). J: the lifted Jacobian at (t, y), kept for
    ``auto``'s test; x1 the lifted end point (for the dense output). ``diff``: the field is
    evaluated in the difference form (kernel op RHS_DIFF, where riemattn.dynamics._tangent
    applies) at the start -- afresh, whatever k1 -- the stages and the end, as the NumPy stepper
    does. A step with h gamma eps |J|_inf > SOLVE_LIMIT gets an infinite error (rejected).
    Returns the evaluations."""
    l, d = y.shape
    n = l * d
    nfev = 0
    rop = RHS_DIFF if diff else RHS
    if diff or not has_k1:
        fn(rop, t, y, b, ints, floats, per, work, F0)
        nfev += 1
    else:
        F0[:, :] = k1
    fn(LIFTED_JAC, t, y, b, ints, floats, per, work, J)
    hg = h * m.rgamma
    for i in range(n):
        for j in range(n):
            M[i, j] = (1.0 if i == j else 0.0) / hg - J[i, j]
    lu_factor(M, piv)
    if not autonomous:  # forward difference in t, as the NumPy stepper
        dt = dt_factor * max(1.0, abs(t))
        fn(RHS, t + dt, y, b, ints, floats, per, work, Ft)
        for p in range(l):
            for a in range(d):
                Ft[p, a] = (Ft[p, a] - F0[p, a]) / dt
        nfev += 1
    ra, rC, rc, rd, rmm = m.ra, m.rC, m.rc, m.rd, m.rmm  # (the record's arrays taken once, not in the loops:
    stages = rmm.shape[1]  # each access of a record's member in a loop costs a reference count)
    for i in range(stages):
        Ui = Us[i]
        if i == 0:
            Ui[:, :] = F0
        else:
            for p in range(l):
                for a in range(d):
                    sa = 0.0
                    for j in range(i):
                        sa += ra[i, j] * Us[j, p, a]
                    x[p, a] = y[p, a] + sa
            normalize(x, flat, ints, floats, X, r)
            fn(rop, t + rc[i] * h, X, b, ints, floats, per, work, Ui)
            nfev += 1
            for p in range(l):
                for a in range(d):
                    sc = 0.0
                    for j in range(i):
                        sc += rC[i, j] * Us[j, p, a]
                    if not flat:
                        Ui[p, a] *= r[p]
                    Ui[p, a] += sc / h
        if not autonomous and rd[i] != 0.0:
            hd = h * rd[i]
            for p in range(l):
                for a in range(d):
                    Ui[p, a] += hd * Ft[p, a]
        lu_solve(M, piv, Ui.reshape(n))
    stiffly = m.ints[6] != 0
    for p in range(l):
        for a in range(d):
            acc = 0.0
            for j in range(stages):
                acc += rmm[0, j] * Us[j, p, a]
            x1[p, a] = y[p, a] + acc
            if stiffly:  # stiffly accurate: the error estimate is the last stage
                x[p, a] = Us[stages - 1, p, a]
            else:
                acc = 0.0
                for j in range(stages):
                    acc += rmm[1, j] * Us[j, p, a]
                x[p, a] = acc
    normalize(x1, flat, ints, floats, y_new, r_new)
    tangent_error(x, y_new, r_new, flat, ints, floats, err)
    if abs(hg) * norm_inf(J) > m.ctrl[10]:  # beyond the precision of the solve (SOLVE_LIMIT / eps)
        err[:, :] = np.inf
    fn(rop, t + 1.0 * h, y_new, b, ints, floats, per, work, k_next)
    nfev += 1
    return nfev


@njit(**_JIT)
def ros_dense(m, flat, y, x1, Us, theta, ints, floats, x, out):
    """retract((1 - s) y + s (x1 + (1 - s) (k_a + s k_b))), k_a, k_b = H U."""
    l, d = y.shape
    stages = m.rmm.shape[1]
    s = theta
    for p in range(l):
        for a in range(d):
            ka = 0.0
            kb = 0.0
            for j in range(stages):
                ka += m.rH[0, j] * Us[j, p, a]
                kb += m.rH[1, j] * Us[j, p, a]
            x[p, a] = (1.0 - s) * y[p, a] + s * (x1[p, a] + (1.0 - s) * (ka + s * kb))
    r = np.empty(l)
    normalize(x, flat, ints, floats, out, r)


@njit(**_JIT)
def explicit_signal(m, h, K, x):
    """``auto``: rho = |h| rms(K_7 - K_6) / rms(h sum_j b6_j K_j); 2 stiff, 1 elevated, 0 not."""
    l, d = x.shape
    s = m.ints[1]
    hsum(h, m.b6, s, K, x)
    num = 0.0
    den = 0.0
    for p in range(l):
        for a in range(d):
            v = K[6, p, a] - K[5, p, a]
            num += v * v
            den += x[p, a] * x[p, a]
    rho = abs(h) * math.sqrt(num / (l * d)) / math.sqrt(den / (l * d))
    if not math.isfinite(rho):
        return 0.0
    if rho > m.ctrl[7]:
        return 2.0
    if rho > m.ctrl[9]:
        return 1.0
    return 0.0


@njit(**_JIT)
def norm_inf(J):
    """|J|_inf (NaN if J has NaN: no comparison holds)."""
    n = J.shape[0]
    norm = 0.0
    for i in range(n):
        acc = 0.0
        for j in range(n):
            acc += abs(J[i, j])
        if acc > norm or math.isnan(acc):
            norm = acc
    return norm


@njit(**_JIT)
def stiff_signal(m, h, J):
    """``auto``: 0 when h |J|_inf < rho_back (the explicit method would be stable), else 2."""
    if abs(h) * norm_inf(J) < m.ctrl[8]:
        return 0.0
    return 2.0
