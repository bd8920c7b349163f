"""The device parts of the lanes form (:mod:`._warp`): the field for one lane's token, the sums over a
trajectory's lanes, the error norms and the initial step built on them (private).

Every factory takes the sizes (l tokens, d components) and ``sync``, the trajectory's barrier
(:func:`_syncwarp` on a GPU; :func:`_syncblock` under numba-cuda's simulator, which has no syncwarp).
Lane ``cuda.laneid`` of a warp holds token i = laneid - g l of trajectory g = laneid // l.
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda, float32, float64

from ....dynamics._softmax import RESCALED_ROUNDING
from ....dynamics.kernels._kernel_layout import (BETA_LOC, BETA_OFF, D, MAN_FLAT, MASK_CAUSAL, MEAN_DIRECT_MAX, NORM,
                                                 NORM_MEAN, P_LOC, P_OFF, P_TERMS, SRC_IDENTITY, SRC_SCALAR, U_LOC,
                                                 U_OFF, U_TERMS)
from . import _field


@cuda.jit(device=True)
def _syncwarp(mask):
    cuda.syncwarp(mask)


@cuda.jit(device=True)
def _syncblock(mask):
    cuda.syncthreads()  # the simulator's stand-in (it has no syncwarp): every live thread of the block


def _masks(l, g):
    """The lane masks of the G trajectories of a warp, as int32 (syncwarp's argument type)."""
    return np.array([((1 << l) - 1) << (k * l) for k in range(g)], dtype=np.uint64).astype(np.uint32).view(np.int32)


def make_reductions(l, d, sync):
    """``group_sums(u, v)``: (sum_p u_p, sum_p v_p) over the trajectory's n = l d components in
    component order (token-major, as the compiled engine's loops), the same in every lane; u, v
    the lane's d terms (float64, as the CPU's accumulators). The rows of the sums (2 n float64 per
    trajectory) are the first G 2 n numbers of the block's dynamic shared memory: numba-cuda names
    a static shared array of a device function once per compilation, and a device function reached
    from several callers is linked into the kernel once per caller ("symbol multiply defined");
    dynamic shared arrays are declarations of one buffer, so every caller sees the same rows."""
    N, G, L_, D_ = l * d, max(32 // l, 1), l, d
    MASKS = _masks(l, G)

    @cuda.jit(device=True)
    def group_sums(u, v):
        red = cuda.shared.array(0, float64)  # the block's dynamic shared memory: these rows first (_warp)
        lane = cuda.laneid
        g = lane // L_
        base = g * 2 * N + (lane - g * L_) * D_
        for a in range(D_):
            red[base + a] = u[a]
            red[base + N + a] = v[a]
        sync(MASKS[g])
        su = 0.0
        sv = 0.0
        for p in range(N):
            su += red[g * 2 * N + p]
        for p in range(N):
            sv += red[g * 2 * N + N + p]
        sync(MASKS[g])  # the row is rewritten by the next sum
        return su, sv

    return group_sums


def make_norms(l, d, group_sums, rhs, normalize):
    """The error norms and the initial step of :mod:`._steps` / :mod:`._loop` over the trajectory's
    lanes: the same terms, summed in the same order (:func:`make_reductions`); a non-finite y_new
    component gives NaN terms (the step is then non-finite in every lane)."""
    N, D_ = l * d, d

    @cuda.jit(device=True)
    def rms_norm(err, y, y_new, rtol, atol, n):
        t5 = cuda.local.array(D_, float64)
        for a in range(D_):
            v = err[a] / (atol + rtol * max(abs(y[a]), abs(y_new[a])))
            t5[a] = v * v if math.isfinite(y_new[a]) else math.nan
        acc, _ = group_sums(t5, t5)
        return math.sqrt(acc / N)

    @cuda.jit(device=True)
    def dop853_norm(e5, e3, y, y_new, rtol, atol, n):
        t5 = cuda.local.array(D_, float64)
        t3 = cuda.local.array(D_, float64)
        for a in range(D_):
            sc = atol + rtol * max(abs(y[a]), abs(y_new[a]))
            v = e5[a] / sc
            u = e3[a] / sc
            t5[a] = v * v if math.isfinite(y_new[a]) else math.nan
            t3[a] = u * u
        n5, n3 = group_sums(t5, t3)
        denom = math.sqrt((n5 + 0.01 * n3) * N)
        if denom > 0:
            return n5 / denom
        if denom == 0.0:
            return 0.0
        return n5 / denom  # NaN propagates

    @cuda.jit(device=True)
    def initial_step(order, flat, t0, t1, y0, f0, rtol, atol, b, ints, floats, per, w, x, y1, f1, r, l1, d1_):
        """``_loop.initial_step`` (Hairer, Norsett & Wanner II.4) with its three sums over the lanes."""
        ta = cuda.local.array(D_, float64)
        tb = cuda.local.array(D_, float64)
        for a in range(D_):
            sc = atol + abs(y0[a]) * rtol
            v = y0[a] / sc
            ta[a] = v * v
            u = f0[a] / sc
            tb[a] = u * u
        a0, a1 = group_sums(ta, tb)
        d0 = math.sqrt(a0 / N)
        d1 = math.sqrt(a1 / N)
        if d0 < 1e-5 or d1 < 1e-5:
            h0 = 1e-6
        else:
            h0 = 0.01 * d0 / (d1 if d1 > 0 else 1.0)
        h0 = min(h0, t1 - t0)
        for a in range(D_):
            x[a] = y0[a] + h0 * f0[a]
        normalize(x, 1, D_, flat, ints, floats, y1, r)
        rhs(t0 + h0, y1, b, ints, floats, per, w, f1)
        for a in range(D_):
            v = (f1[a] - f0[a]) / (atol + abs(y0[a]) * rtol)
            ta[a] = v * v
        a2, _ = group_sums(ta, ta)
        d2 = math.sqrt(a2 / N) / h0
        dmax = max(d1, d2)
        if dmax <= 1e-15:
            h1 = max(h0 * 1e-3, 1e-6)
        else:
            h1 = (0.01 / dmax) ** (1.0 / (order + 1))
        return min(min(100 * h0, h1), t1 - t0)

    return rms_norm, dop853_norm, initial_step


def uniform_step(inner, group_sums, d):
    """The fixed-step loop's step: ``inner`` (the generated step), then y_new made non-finite in every
    lane when it is in one (the loop's finiteness test is per lane; the compiled engine's per row)."""
    D_ = d

    @cuda.jit(device=True)
    def rk_step(A, bb, c, e, s, adaptive, flat, t, y, h, K, has_k1, b, ints, floats, per, w, x, X, r, y_new, r_new,
                err, l, d):
        nfev = inner(A, bb, c, e, s, adaptive, flat, t, y, h, K, has_k1, b, ints, floats, per, w, x, X, r, y_new,
                     r_new, err, l, d)
        z = cuda.local.array(D_, float64)
        for a in range(D_):
            z[a] = 0.0 * y_new[a]  # NaN for an infinite or NaN component
        bad, _ = group_sums(z, z)
        if bad != bad:
            y_new[0] = math.nan
        return nfev

    return rk_step


def make_rhs(l, d, h, is32, options, sync):
    """The field's value for the lane's token: ``rhs(t, y, b, ints, floats, per, w, out)`` with y, out
    the lane's d components and w the trajectory's shared tile; :func:`._fast.make_rhs`'s operations
    for the lane's row, in its order."""
    MAN_, MASK_, NORM_, RESC_, PK_, HP_, UK_, HU_ = options
    S_FIXED = (np.float32 if is32 else np.float64)(_field._DEV["norm_scale"].py_func({NORM: NORM_, D: d}))
    N, L_, D_, H_, G = l * d, l, d, h, max(32 // l, 1)
    HDD, HD = max(h, 1) * d * d, max(h, 1) * d
    DT = float32 if is32 else float64
    CAST = np.float32 if is32 else np.float64
    INV_L = CAST(1.0 / l)
    NP = min(HP_ if HP_ > 1 else 1, H_)
    NU = min(HU_ if HU_ > 1 else 1, H_) if UK_ != SRC_IDENTITY else 0
    SPHERE, FLAT, CAUSAL, MEAN, RESC = MAN_ == 0, MAN_ == MAN_FLAT, MASK_ == MASK_CAUSAL, NORM_ == NORM_MEAN, RESC_ != 0
    MASKS = _masks(l, G)
    heads_at, tangent_rows, source = _field._DEV["heads_at"], _field._DEV["tangent_rows"], _field.source

    @cuda.jit(device=True)
    def rhs(t, y, b, ints, floats, per, w, out):
        Pl = cuda.local.array(HDD, DT)
        Ul = cuda.local.array(HDD, DT)
        pl = cuda.local.array(HD, DT)
        row = cuda.local.array(L_, DT)
        fh = cuda.local.array(D_, DT)
        f = cuda.local.array(D_, DT)
        wv = cuda.local.array(D_, DT)
        lane = cuda.laneid
        g = lane // L_
        i = lane - g * L_
        for a in range(D_):  # the stage input's token i, published
            w[i * D_ + a] = y[a]
        beta = source(ints[BETA_LOC], floats, per, b)[ints[BETA_OFF]]
        pscale = 1.0 if RESC else beta
        srcP = source(ints[P_LOC], floats, per, b)
        cP = 0.0
        if PK_ == SRC_SCALAR:
            cP = pscale * srcP[ints[P_OFF]]
        else:
            heads_at(t, PK_, srcP, ints[P_OFF], HP_, ints[P_TERMS], D_, pscale, Pl, 0)
        cU = 0.0
        if UK_ == SRC_SCALAR:
            cU = source(ints[U_LOC], floats, per, b)[ints[U_OFF]]
        elif UK_ != SRC_IDENTITY:
            heads_at(t, UK_, source(ints[U_LOC], floats, per, b), ints[U_OFF], HU_, ints[U_TERMS], D_, 1.0, Ul, 0)
        beta_c = CAST(beta)
        zero = CAST(0.0)
        for e in range(NP):  # q_i = P_e^T y_i (or c y_i): the lane's query only
            for a in range(D_):
                if PK_ == SRC_SCALAR:
                    pl[e * D_ + a] = cP * y[a]
                else:
                    acc = zero
                    for c in range(D_):
                        acc += Pl[e * D_ * D_ + c * D_ + a] * y[c]
                    pl[e * D_ + a] = acc
        for e in range(NU):  # u_i = U_e y_i (or c y_i), published after the tokens
            for a in range(D_):
                if UK_ == SRC_SCALAR:
                    w[N * (1 + e) + i * D_ + a] = cU * y[a]
                else:
                    acc = zero
                    for c in range(D_):
                        acc += Ul[e * D_ * D_ + a * D_ + c] * y[c]
                    w[N * (1 + e) + i * D_ + a] = acc
        sync(MASKS[g])
        for a in range(D_):
            f[a] = zero
        jmax = i + 1 if CAUSAL else L_
        for e in range(H_):
            pe = (e if HP_ > 1 else 0) * D_
            ue = N * (1 + (e if HU_ > 1 else 0))
            mx = CAST(-math.inf)
            for j in range(jmax):  # the row's scores against the tile's keys
                acc = zero
                for a in range(D_):
                    acc += pl[pe + a] * w[j * D_ + a]
                if RESC:  # the rule of riemattn.dynamics._softmax (R)
                    acc -= CAST(1.0)
                    acc = zero if abs(acc) <= RESCALED_ROUNDING else acc * beta_c
                row[j] = acc
                if acc > mx or acc != acc:
                    mx = acc
            if MEAN:
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
                r = CAST(1.0) / (S_FIXED * z)
                for j in range(jmax):
                    row[j] *= r
            for a in range(D_):
                fh[a] = zero
            for j in range(jmax):  # fh_i = sum_j alpha_ij u_j
                a_ij = row[j]
                for a in range(D_):
                    if UK_ == SRC_IDENTITY:
                        fh[a] += a_ij * w[j * D_ + a]
                    else:
                        fh[a] += a_ij * w[ue + j * D_ + a]
            for a in range(D_):
                f[a] += fh[a]
        sync(MASKS[g])  # the tile is rewritten by the next evaluation
        if FLAT:
            for a in range(D_):
                out[a] = f[a]
        elif SPHERE:  # F = (I - y y^T) f
            c = zero
            for a in range(D_):
                c += y[a] * f[a]
            for a in range(D_):
                out[a] = f[a] - c * y[a]
        else:  # F = (I - y y^T W) f
            tangent_rows(ints, floats, y, f, 0, wv, 0, out, 1, D_)

    return rhs
