"""The CUDA engine's kernels specialised to one shape: the field fused, its scratch in local memory (private).

The generic kernels of :mod:`riemattn.solvers.compiled.cuda._loop` read every size at run time and give
the field (:func:`riemattn.solvers.compiled.cuda._field.rhs`) a scratch column of ~``work_length`` numbers
per trajectory in global memory (p, q, u, the per-head updates and the h l l attention matrix;
~1000 numbers on the hemisphere ensemble), written and read back at every evaluation. Here, for
one (l, d, h, dtype), :func:`kernels` builds the same kernels with the field replaced by
:func:`make_rhs`'s ``rhs``, which

* keeps its intermediates in ``cuda.local.array`` of compile-time size (per-thread local memory,
  interleaved across a warp's threads by the hardware, cached in L1; registers where the compiler
  can), of the state's dtype as the generic scratch is;
* never stores the attention matrix: each row's scores, softmax and weighted sum of values are
  computed and used at once (one row of l numbers);
* computes the scores, softmax and weighted sums in the state's dtype (float32 states: float32
  constants, accumulators and ``exp``; in float64 the same operations as the generic kernel).

In float64 the arithmetic is that of ``_kernel_attention.forward`` (value only, ``OP_RHS``) and
``tangent_rows`` operation for operation, in the same order (the simulator tests compare both
with the compiled engine): scores ``q_i . y_j`` (``q_i = P^T y_i``, each summed over the index of
P's rows, the scores over the components in order), the row's maximum, ``exp(s - m)`` (the
device's ``exp``; the CPU kernel's vectorised polynomial, ``_kernel_rows.exp_shifted``, is within 2.2 ulp of it)
summed in j order, ``r = 1 / (s z)``, ``alpha = x r``, ``fh_i = sum_j alpha_ij u_j`` in j order,
``f_i += fh_i`` head after head. Heads sharing one P (``P_HEADS == 1``) recompute the same rows
(the same operations, hence the same values the generic kernel copies).

The steppers and the loop are the generic ones (:mod:`riemattn.solvers.compiled.cuda._steps`,
:mod:`riemattn.solvers.compiled.cuda._loop`): their Python bodies are compiled again with the name ``rhs``
(and the functions calling it) bound to the specialised versions, as
:func:`riemattn.solvers.compiled.cuda._field.device_functions` does for the field's kernels. Shapes whose
local arrays would exceed :data:`MAX_LOCAL` numbers use the generic kernels.
"""

from __future__ import annotations

import math
import types

import numpy as np
from numba import cuda, float32, float64

from ....dynamics.kernels._kernel_layout import (BETA_LOC, D, MANIFOLD, MAN_FLAT, MASK, MASK_CAUSAL, MEAN_DIRECT_MAX,
                                                 NORM, NORM_MEAN, P_HEADS, P_KIND, P_LOC, RESCALED, SRC_IDENTITY,
                                                 SRC_SCALAR, U_HEADS, U_KIND, U_LOC)
from ....dynamics._softmax import RESCALED_ROUNDING
from . import _field, _loop, _steps

#: the most numbers of local memory per thread the specialised field may use (else: generic kernels)
MAX_LOCAL = 4096
_CACHE: dict = {}


def local_size(l, d, h):
    """Numbers of local memory the specialised field uses per thread."""
    n = l * d
    return 4 * n + 2 * h * d * d + 2 * h * n + l + d


#: the pack's ints slots the generated kernels fix at compile time (:func:`field_options`)
OPTION_SLOTS = (MANIFOLD, MASK, NORM, RESCALED, P_KIND, P_HEADS, U_KIND, U_HEADS)


def field_options(ints):
    """The field's options as compile-time constants: the values of ``ints`` at :data:`OPTION_SLOTS`."""
    return tuple(int(ints[k]) for k in OPTION_SLOTS)


def make_rhs(l, d, h, is32, options=None):
    """The field's value ``rhs(t, y, b, ints, floats, per, w, out)`` for l tokens of dimension d
    and h heads (``w`` unused), intermediates in local arrays of float32 (``is32``) or float64.
    ``options`` (:func:`field_options`): the manifold, mask, normalization, rescaling and head
    kinds fixed at compile time (branches resolved, the sphere's tangent projection inlined);
    None: read from ``ints`` at run time."""
    FIX = options is not None
    MAN_, MASK_, NORM_, RESC_, PK_, HP_, UK_, HU_ = options if FIX else (0,) * 8
    SPHERE = FIX and MAN_ == 0  # MAN_SPHERE: W = I
    # the normalization's scale from the kernels' own rule (norm_scale reads ints[NORM], ints[D] only)
    S_FIXED = (np.float32 if is32 else np.float64)(_field._DEV["norm_scale"].py_func({NORM: NORM_, D: d})) if FIX \
        else 0.0
    N, HDD, HLD, LD = l * d, max(h, 1) * d * d, max(h, 1) * l * d, l * d
    DT = float32 if is32 else float64
    CAST = np.float32 if is32 else np.float64  # constants and accumulators in the state's dtype
    INV_L = CAST(1.0 / l)
    L_, D_, H_ = l, d, h
    load_heads, norm_scale, tangent_rows, source = (_field._DEV["load_heads"], _field._DEV["norm_scale"],
                                                    _field._DEV["tangent_rows"], _field.source)

    @cuda.jit(device=True)
    def rhs(t, y, b, ints, floats, per, w, out):
        yl = cuda.local.array(N, DT)
        Pl = cuda.local.array(HDD, DT)
        Ul = cuda.local.array(HDD, DT)
        pl = cuda.local.array(HLD, DT)
        ul = cuda.local.array(HLD, DT)
        row = cuda.local.array(L_, DT)
        fh = cuda.local.array(D_, DT)
        f = cuda.local.array(N, DT)
        wv = cuda.local.array(N, DT)
        for m in range(N):
            yl[m] = y[m]
        rescaled = RESC_ != 0 if FIX else ints[RESCALED] != 0
        if FIX:
            pk, uk, hP, hU = PK_, UK_, HP_, HU_
        else:
            pk, uk, hP, hU = ints[P_KIND], ints[U_KIND], ints[P_HEADS], ints[U_HEADS]
        cP, cU, beta, pscale = load_heads(t, ints, source(ints[BETA_LOC], floats, per, b),
                                          source(ints[P_LOC], floats, per, b), source(ints[U_LOC], floats, per, b),
                                          pk, uk, hP, hU, rescaled, D_, Pl, 0, Ul, 0)
        causal = MASK_ == MASK_CAUSAL if FIX else ints[MASK] == MASK_CAUSAL
        nrm = NORM_ if FIX else ints[NORM]
        s = S_FIXED if FIX else CAST(norm_scale(ints))
        beta_c = CAST(beta)
        zero = CAST(0.0)
        nP = hP if hP > 1 else 1
        for e in range(min(nP, H_)):  # q_j = P_e^T y_j (or c y_j) for each distinct P head
            pe = e * LD
            if pk == SRC_SCALAR:
                for m in range(LD):
                    pl[pe + m] = cP * yl[m]
            else:
                Pe = e * D_ * D_
                for j in range(L_):
                    for a in range(D_):
                        acc = zero
                        for c in range(D_):
                            acc += Pl[Pe + c * D_ + a] * yl[j * D_ + c]
                        pl[pe + j * D_ + a] = acc
        nU = hU if hU > 1 else 1
        if uk != SRC_IDENTITY:
            for e in range(min(nU, H_)):  # u_j = U_e y_j (or c y_j)
                ue = e * LD
                if uk == SRC_SCALAR:
                    for m in range(LD):
                        ul[ue + m] = cU * yl[m]
                else:
                    Ue = e * D_ * D_
                    for j in range(L_):
                        for a in range(D_):
                            acc = zero
                            for c in range(D_):
                                acc += Ul[Ue + a * D_ + c] * yl[j * D_ + c]
                            ul[ue + j * D_ + a] = acc
        for m in range(N):
            f[m] = zero
        for i in range(L_):
            jmax = i + 1 if causal else L_
            for e in range(H_):
                pe = (e if hP > 1 else 0) * LD
                ue = (e if hU > 1 else 0) * LD
                mx = CAST(-math.inf)
                for j in range(jmax):  # the row's scores
                    acc = zero
                    for a in range(D_):
                        acc += pl[pe + i * D_ + a] * yl[j * D_ + a]
                    if rescaled:  # the rule of riemattn.dynamics._softmax (R)
                        acc -= CAST(1.0)
                        acc = zero if abs(acc) <= RESCALED_ROUNDING else acc * beta_c
                    row[j] = acc
                    if acc > mx or acc != acc:
                        mx = acc
                if nrm == NORM_MEAN:
                    if mx < MEAN_DIRECT_MAX:
                        for j in range(jmax):
                            row[j] = math.exp(row[j]) * INV_L
                    else:
                        em = math.exp(mx) / CAST(L_)
                        for j in range(jmax):
                            row[j] = math.exp(row[j] - mx) * em
                else:
                    z = zero
                    for j in range(jmax):
                        x = math.exp(row[j] - mx)
                        row[j] = x
                        z += x
                    r = CAST(1.0) / (s * z)
                    for j in range(jmax):
                        row[j] *= r
                for a in range(D_):
                    fh[a] = zero
                for j in range(jmax):  # fh_i = sum_j alpha_ij u_j
                    a_ij = row[j]
                    if uk == SRC_IDENTITY:
                        for a in range(D_):
                            fh[a] += a_ij * yl[j * D_ + a]
                    else:
                        for a in range(D_):
                            fh[a] += a_ij * ul[ue + j * D_ + a]
                for a in range(D_):
                    f[i * D_ + a] += fh[a]
        if (MAN_ == MAN_FLAT) if FIX else (ints[MANIFOLD] == MAN_FLAT):
            for m in range(N):
                out[m] = f[m]
        elif SPHERE:  # F = (I - y y^T) f: tangent_rows with W = I (the same sums in the same order)
            for i in range(L_):
                c = zero
                for a in range(D_):
                    c += yl[i * D_ + a] * f[i * D_ + a]
                for a in range(D_):
                    out[i * D_ + a] = f[i * D_ + a] - c * yl[i * D_ + a]
        else:  # F = (I - y y^T W) f
            tangent_rows(ints, floats, yl, f, 0, wv, 0, out, L_, D_)

    return rhs


def _rebind(module, names, glob_extra, device):
    glob = dict(vars(module))
    glob.update(glob_extra)
    out = {}
    for name in names:
        py = getattr(module, name).py_func
        fn = types.FunctionType(py.__code__, glob, py.__name__, py.__defaults__, py.__closure__)
        out[name] = cuda.jit(device=True)(fn) if device else cuda.jit(fn)
    return out


def kernels(l, d, h, is32):
    """(adaptive_kernel, fixed_kernel) specialised to (l, d, h, dtype), or None where the shape's
    local arrays exceed MAX_LOCAL (the caller then uses the generic kernels). Cached per shape."""
    if local_size(l, d, max(h, 1)) > MAX_LOCAL:
        return None
    key = (int(l), int(d), max(int(h), 1), bool(is32))
    if key not in _CACHE:
        rhs = make_rhs(*key)
        steps = _rebind(_steps, ("rk_step", "dop853_extra", "dop853_prepare"), {"rhs": rhs}, True)
        init = _rebind(_loop, ("initial_step",), {"rhs": rhs}, True)
        rows = _rebind(_loop, ("adaptive_rows", "fixed_rows"), dict(steps, rhs=rhs, **init), True)
        kern = _rebind(_loop, ("adaptive_kernel", "fixed_kernel"), dict(steps, rhs=rhs, **init, **rows), False)
        _CACHE[key] = (kern["adaptive_kernel"], kern["fixed_kernel"])
    return _CACHE[key]
