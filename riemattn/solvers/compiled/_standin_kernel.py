"""A stand-in for the compiled field kernels (``riemattn.dynamics.kernels``) while they are written.

Same signatures as the kernels' contract (one trajectory per call, configuration as run-time
arrays); it covers: the sphere, full mask, one head, constant P, U = I, ``"paper"`` or ``"mean"``
normalization (GLPR's USA), beta a scalar or one per trajectory. Everything else is refused by
:func:`pack_field` with :class:`~riemattn.errors.UnsupportedByEngine`. Deleted once the real
kernels are merged.

The formulas are those of :mod:`riemattn.dynamics.attention` (the field) and
:func:`riemattn.dynamics.jacobians.lifted_attention_jacobian` (the lifted Jacobian), for h = 1,
U = I, W = I: with ``S_ij = beta y_i^T P y_j``, ``alpha_ij = e^{S_ij} / (sqrt(d) sum_j e^{S_ij})``,
``f_i = sum_j alpha_ij y_j`` and ``F_i = f_i - (y_i . f_i) y_i``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numba
import numpy as np

from ...errors import UnsupportedByEngine


class KernelPack(NamedTuple):
    ints: np.ndarray
    floats: np.ndarray
    per: np.ndarray
    l: int
    d: int
    work: int
    autonomous: bool
    breaks: np.ndarray


RHS, UPDATE, LIFTED_JAC, TIME_DERIVATIVE = 0, 1, 2, 3


def pack_field(field, y_shape) -> KernelPack:
    """The field's run-time data, or UnsupportedByEngine naming what the stand-in cannot run."""
    from ...dynamics.attention import AttentionField

    if type(field) is not AttentionField:
        raise UnsupportedByEngine(f"a field of type {type(field).__name__} (the compiled engine "
                                  "runs AttentionField)")
    why = []
    if field.W is not None:
        why.append("an ellipsoid (W given)")
    if field.mask != "full":
        why.append(f"mask={field.mask!r}")
    if field.normalization not in ("paper", "mean"):
        why.append(f"normalization={field.normalization!r}")
    if field._P.const is None:
        why.append("a callable P")
    elif field._P.const.shape[0] != 1 or field.h != 1:
        why.append("several heads")
    if field._U is not None:
        why.append("a U other than the identity")
    beta = field.beta
    if not isinstance(beta, float) and not isinstance(beta, np.ndarray):
        why.append(f"beta of type {type(beta).__name__}")
    if why:
        raise UnsupportedByEngine(", ".join(why) + " (stand-in kernel)")
    d = field.d
    if isinstance(beta, float):
        per = np.array([[beta]])
    else:
        try:
            per = np.array(np.broadcast_to(beta, tuple(y_shape[:-2])).reshape(-1, 1), dtype=float)
        except ValueError:  # the NumPy engine reports it
            raise UnsupportedByEngine("a beta that does not broadcast against the batch") from None
    P = np.ascontiguousarray(field._P.const[0], dtype=float).reshape(-1)
    ints = np.array([0, 0, d, field.normalization == "mean"], dtype=np.int64)  # kind, manifold, d, mean
    return KernelPack(ints, P, per, int(y_shape[-2]), d, 0, True, np.zeros(0))


_JIT = dict(cache=True, nogil=True, error_model="numpy")


@numba.njit(**_JIT)
def _attention(y, b, ints, floats, per, A):
    """A[i, j] = alpha_ij (paper: shifted by each row's maximum; mean: e^{S_ij} / l)."""
    l, d = y.shape
    beta = per[b if per.shape[0] > 1 else 0, 0]
    scale = math.sqrt(d)
    for i in range(l):
        m = -np.inf
        for j in range(l):
            s = 0.0
            for a in range(d):
                pa = 0.0
                for c in range(d):
                    pa += floats[a * d + c] * y[j, c]
                s += y[i, a] * pa
            A[i, j] = beta * s
            if A[i, j] > m:
                m = A[i, j]
        if ints[3]:
            for j in range(l):
                A[i, j] = math.exp(A[i, j]) / l
            continue
        tot = 0.0
        for j in range(l):
            A[i, j] = math.exp(A[i, j] - m)
            tot += A[i, j]
        for j in range(l):
            A[i, j] /= scale * tot


@numba.njit(**_JIT)
def _update(t, y, b, ints, floats, per, work, out):
    l, d = y.shape
    A = np.empty((l, l))
    _attention(y, b, ints, floats, per, A)
    for i in range(l):
        for a in range(d):
            s = 0.0
            for j in range(l):
                s += A[i, j] * y[j, a]
            out[i, a] = s


@numba.njit(**_JIT)
def _rhs(t, y, b, ints, floats, per, work, out):
    _update(t, y, b, ints, floats, per, work, out)
    l, d = y.shape
    for i in range(l):
        c = 0.0
        for a in range(d):
            c += y[i, a] * out[i, a]
        for a in range(d):
            out[i, a] -= c * y[i, a]




@numba.njit(**_JIT)
def wnorm(x, ints, floats, out_l):
    l, d = x.shape
    for i in range(l):
        s = 0.0
        for a in range(d):
            s += x[i, a] * x[i, a]
        out_l[i] = math.sqrt(s)


@numba.njit(**_JIT)
def project(x, ints, floats, out):
    l, d = x.shape
    r = np.empty(l)
    wnorm(x, ints, floats, r)
    for i in range(l):
        for a in range(d):
            out[i, a] = x[i, a] / r[i]


@numba.njit(**_JIT)
def to_tangent(v, y, ints, floats, out):
    l, d = y.shape
    for i in range(l):
        c = 0.0
        for a in range(d):
            c += y[i, a] * v[i, a]
        for a in range(d):
            out[i, a] = v[i, a] - c * y[i, a]


@numba.njit(**_JIT)
def _lifted_jac(t, x, b, ints, floats, per, work, J):
    """J[(i, a), (k, c)] of G(x) = |x| F(pi x) at x on the sphere (see the module docstring of
    riemattn.dynamics.jacobians for Df)."""
    l, d = x.shape
    y = x
    beta = per[b if per.shape[0] > 1 else 0, 0]
    s = 0.0 if ints[3] else math.sqrt(d)
    A = np.empty((l, l))
    _attention(y, b, ints, floats, per, A)
    p = np.zeros((l, d))  # beta P y_j
    q = np.zeros((l, d))  # beta P^T y_i
    for j in range(l):
        for a in range(d):
            for c in range(d):
                p[j, a] += beta * floats[a * d + c] * y[j, c]
                q[j, a] += beta * floats[c * d + a] * y[j, c]
    f = np.zeros((l, d))
    g = np.zeros((l, d))
    for i in range(l):
        for j in range(l):
            for a in range(d):
                f[i, a] += A[i, j] * y[j, a]
                g[i, a] += A[i, j] * p[j, a]
    n = l * d
    Df = np.zeros((n, n))
    for i in range(l):
        for k in range(l):
            for a in range(d):
                for c in range(d):
                    v = A[i, k] * (y[k, a] - s * f[i, a]) * q[i, c]
                    if a == c:
                        v += A[i, k]
                    Df[i * d + a, k * d + c] = v
        for a in range(d):  # D_i = sum_j A_ij y_j p_j^T - s f_i g_i^T
            for c in range(d):
                v = 0.0
                for j in range(l):
                    v += A[i, j] * y[j, a] * p[j, c]
                Df[i * d + a, i * d + c] += v - s * f[i, a] * g[i, c]
    # J = Pi_i Df Pi_k + delta_ik [f_i y_i^T - y_i f_i^T - c_i Pi_i]
    T = np.empty((n, n))
    for I in range(n):  # Df Pi_k (columns)
        for k in range(l):
            r = 0.0
            for c in range(d):
                r += Df[I, k * d + c] * y[k, c]
            for c in range(d):
                T[I, k * d + c] = Df[I, k * d + c] - r * y[k, c]
    for i in range(l):  # Pi_i (rows)
        for K in range(n):
            r = 0.0
            for a in range(d):
                r += y[i, a] * T[i * d + a, K]
            for a in range(d):
                J[i * d + a, K] = T[i * d + a, K] - y[i, a] * r
    for i in range(l):
        ci = 0.0
        for a in range(d):
            ci += y[i, a] * f[i, a]
        for a in range(d):
            for c in range(d):
                pi = (1.0 if a == c else 0.0) - y[i, a] * y[i, c]
                J[i * d + a, i * d + c] += f[i, a] * y[i, c] - y[i, a] * f[i, c] - ci * pi


@numba.njit(**_JIT)
def evaluate(op, t, y, b, ints, floats, per, work, out):
    """The contract's one entry point: op RHS (F), UPDATE (f), LIFTED_JAC (dG/dx), TIME_DERIVATIVE."""
    if op == 0:
        _rhs(t, y, b, ints, floats, per, work, out)
    elif op == 1:
        _update(t, y, b, ints, floats, per, work, out)
    elif op == 2:
        _lifted_jac(t, y, b, ints, floats, per, work, out)
    else:
        out[:] = 0.0
