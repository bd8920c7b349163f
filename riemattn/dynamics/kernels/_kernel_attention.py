r"""Compiled attention field: value, update, lifted Jacobian and time derivative (private).

The numba code behind :mod:`riemattn.dynamics.kernels` for ``KIND_ATTENTION``: one trajectory
per call, configuration read from the pack's ``ints`` at run time (see
:mod:`riemattn.dynamics.kernels._kernel_layout`). The formulas are those of
:class:`riemattn.dynamics.attention.AttentionField` (value and update) and of
:func:`riemattn.dynamics.jacobians.lifted_attention_jacobian` (with ``p_j = P y_j``, ``q_i =
P^T y_i``, ``u_j = U y_j``, beta folded into P, ``s`` = sqrt(d) / 1 / 0 for "paper" / "softmax" /
"mean"):

.. math::

    Df[i, k] = \sum_\eta \alpha_{ik} \big[(u_k - s f^\eta_i) q_i^T + U_\eta\big]
        + \delta_{ik} \sum_\eta \Big[\sum_j \alpha_{ij} u_j p_j^T - s f^\eta_i g_i^T\Big],
    \qquad J_G[i, k] = \Pi_i Df[i, k] \Pi_k
        + \delta_{ik} \big[f_i (W y_i)^T - y_i (W f_i)^T - c_i \Pi_i\big],

``Pi_i = I - y_i (W y_i)^T``, ``c_i = y_i^T W f_i``; on flat space ``J_G = Df``.

Rescaled "mean" (``ints[RESCALED]``): the scores are ``beta (y_i^T P y_j - 1)`` from the
unscaled Gram entries, with the rounding rule of :mod:`riemattn.dynamics._softmax` (exponents
within ``RESCALED_ROUNDING`` of 0 before the product by beta are 0); beta is never folded into P
there, and for the Jacobian (linear in alpha and beta P, as in
:func:`~riemattn.dynamics.jacobians.lifted_attention_jacobian`) p and q are multiplied by beta
after the scores.

Softmax rows ("paper", "softmax") are shifted by their own maximum (any finite score is safe);
"mean" exponentiates scores below ``MEAN_DIRECT_MAX`` directly and shifts larger rows by their
maximum, so that a row whose ``exp(max)`` overflows gives inf (where the NumPy field raises).

References
----------
Rodriguez Abella, Silvestre, Tabuada, "Consensus is all you get", ICML 2025, eq. (6).
Geshkovski, Letrouit, Polyanskiy, Rigollet, "A mathematical perspective on Transformers", (SA), (USA).
"""

from __future__ import annotations

import math

from ._kernel_cache import jit
from ._kernel_heads import heads_at, heads_rate, load_heads  # noqa: F401 -- heads_at, heads_rate: re-exported
from ._kernel_layout import (BETA_LOC, D, H, LOC_PER, MASK, MASK_CAUSAL, MEAN_DIRECT_MAX, NORM, NORM_MEAN,
                             NORM_PAPER, OP_LIFTED_JAC, OP_RHS_DIFF, P_HEADS, P_KIND, P_LOC, RESCALED, SRC_IDENTITY,
                             SRC_SCALAR, U_HEADS, U_KIND, U_LOC, W_OFF)
from .._softmax import RESCALED_ROUNDING
from ._kernel_rows import mean_rows, normalize_row, scores, softmax_rows, transposed_cols, transposed_rows, weighted_rows


# Calls between jitted functions pass no literal constants (a slot index, 0, True): numba
# compiles a separate copy of the callee for every literal argument value.
@jit
def source(loc, floats, per, b):
    """The array a datum lives in (``loc`` = ints[*_LOC]): ``floats`` or the trajectory's row of ``per``."""
    if loc == LOC_PER:
        return per[b if per.shape[0] > 1 else 0]
    return floats


@jit
def offsets(l, d, h):
    """Offsets in the scratch vector (layout of _kernel_layout.work_length):
    Pt, Ut, dPt, dUt (h d d); p, q, u, fh, dfh (h l d); A, dA (h l l); f, Wy, Wf, yn, df, row (l d); c (l)."""
    hdd, hld, hll, ld = h * d * d, h * l * d, h * l * l, l * d
    oP = 0 * h  # an int64, not the literal 0 (which would compile callees once more)
    oU = oP + hdd
    odP = oU + hdd
    odU = odP + hdd
    opy = odU + hdd
    oq = opy + hld
    ou = oq + hld
    ofh = ou + hld
    odfh = ofh + hld
    oA = odfh + hld
    odA = oA + hll
    of = odA + hll
    oWy = of + ld
    oWf = oWy + ld
    oyn = oWf + ld
    odf = oyn + ld
    orow = odf + ld
    oc = orow + ld
    return oP, oU, odP, odU, opy, oq, ou, ofh, odfh, oA, odA, of, oWy, oWf, oyn, odf, orow, oc


@jit
def norm_scale(ints):
    """s: sqrt(d) ("paper"), 1 ("softmax"), 0 ("mean")."""
    nrm = ints[NORM]
    if nrm == NORM_PAPER:
        return math.sqrt(ints[D])
    return 0.0 if nrm == NORM_MEAN else 1.0


@jit
def apply_W(ints, floats, x, ox, out, oo, l, d):
    """out[oo + i d + a] = (W x_i)_a for the tokens x[ox:ox + l d] (a copy when W = I).

    W is the ellipsoid's (``ints[W_OFF] >= 0``): of the state, or of the directions theta = N_W(x)
    of a placement whose state is flat (callers on a flat state without placement do not use it)."""
    if ints[W_OFF] < 0:
        for m in range(l * d):
            out[oo + m] = x[ox + m]
        return
    rows_times(floats, ints[W_OFF], x, ox, out, oo, l, d)


@jit
def rows_times(M, om, x, ox, out, oo, l, d):
    """out[oo + j d + a] = (M x_j)_a for the tokens x[ox:ox + l d], M (d, d) stored row-major at
    M[om:] (each component summed over c in order)."""
    for j in range(l):
        for a in range(d):
            acc = 0.0
            for c in range(d):
                acc += M[om + a * d + c] * x[ox + j * d + c]
            out[oo + j * d + a] = acc


@jit
def forward(op, t, y, b, ints, floats, per, w, l, d):
    """Attention A (h, l, l), values u = U y (h, l, d), per-head updates fh and the update f in
    the scratch vector w; p = P y_j (and q = P^T y_i for op = OP_LIFTED_JAC). y: flat (l d), l and d
    given (compile-time constants in the kernels of :mod:`riemattn.dynamics.kernels._kernel_shaped`).
    For op = OP_RHS_DIFF only A (:func:`difference_form` forms the field from it).
    Returns the factor of a scalar U (c I), else 0."""
    need_q = op == OP_LIFTED_JAC
    h = ints[H]
    oP, oU, odP, odU, opy, oq, ou, ofh, odfh, oA, odA, of, oWy, oWf, oyn, odf, orow, oc = offsets(l, d, h)
    rescaled = ints[RESCALED] != 0  # scores beta (y_i^T P y_j - 1): beta not folded into P
    pk, uk, hP, hU = ints[P_KIND], ints[U_KIND], ints[P_HEADS], ints[U_HEADS]
    cP, cU, beta, pscale = load_heads(t, ints, source(ints[BETA_LOC], floats, per, b),
                                      source(ints[P_LOC], floats, per, b), source(ints[U_LOC], floats, per, b),
                                      pk, uk, hP, hU, rescaled, d, w, oP, w, oU)
    causal = ints[MASK] == MASK_CAUSAL
    mean = ints[NORM] == NORM_MEAN
    s = norm_scale(ints)
    hld, hll = l * d, l * l
    oyT = odfh  # y transposed (d, l): odfh is the time derivative's, used after forward only
    for i in range(l):
        for a in range(d):
            w[oyT + a * l + i] = y[i * d + a]
    for e in range(h):
        pe, Ae, qe = opy + e * hld, oA + e * hll, oq + e * hld
        if e > 0 and hP == 1:  # one P shared by the U heads: the same attention
            for m in range(hll):
                w[Ae + m] = w[oA + m]
            for m in range(hld):
                w[pe + m] = w[opy + m]
                w[qe + m] = w[oq + m]
            continue
        Pe = oP + e * d * d
        si, sc = d, 1 + 0 * d  # q as rows (l, d); (1, l): transposed
        if pk == SRC_SCALAR:  # p_j = q_j = c y_j
            for m in range(hld):
                w[pe + m] = cP * y[m]
                w[qe + m] = cP * y[m]
        elif need_q or l <= d:  # q_i = P^T y_i (the scores q_i . y_j); p_j = P y_j for the Jacobian
            transposed_rows(w, Pe, y, w, qe, l, d)
            if need_q:
                rows_times(w, Pe, y, 0 * l, w, pe, l, d)
        else:  # only the scores, more tokens than components: q transposed, the same values
            transposed_cols(w, Pe, w, oyT, w, qe, l, d)
            si, sc = 1 + 0 * d, l
        scores(w, qe, si, sc, w, oyT, w, Ae, l, d, causal)
        rowwise = causal or mean or rescaled
        if not rowwise:  # softmax rows: one exp over the matrix
            softmax_rows(w, Ae, l, s)
        elif mean and not (causal or rescaled):  # "mean" rows: one exp over the matrix unless one is shifted
            rowwise = not mean_rows(w, Ae, l, MEAN_DIRECT_MAX)
        for i in range(l if rowwise else 0):
            jmax = i + 1 if causal else l
            row = w[Ae + i * l:Ae + i * l + jmax]
            if rescaled:  # the rule of riemattn.dynamics._softmax (R): rounding of G_ij - 1 -> 0
                for j in range(jmax):
                    acc = row[j] - 1.0
                    row[j] = 0.0 if abs(acc) <= RESCALED_ROUNDING else acc * beta
            normalize_row(row, jmax, mean, s, l, MEAN_DIRECT_MAX)
        if rescaled and need_q:  # the Jacobian's p = beta P y_j, q = beta P^T y_i (linear in alpha)
            for m in range(hld):
                w[pe + m] *= beta
                w[qe + m] *= beta
    if op == OP_RHS_DIFF:  # the difference form reads the attention only (difference_form; U = I)
        return cU
    for m in range(l * d):
        w[of + m] = 0.0
    for e in range(h):
        ue, Ae, fe, Ue = ou + e * hld, oA + e * hll, ofh + e * hld, oU + (e if hU > 1 else 0) * d * d
        if uk == SRC_IDENTITY:  # u_j = U y_j
            for m in range(hld):
                w[ue + m] = y[m]
        elif uk == SRC_SCALAR:
            for m in range(hld):
                w[ue + m] = cU * y[m]
        else:
            rows_times(w, Ue, y, 0 * l, w, ue, l, d)
        weighted_rows(w, Ae, w, ue, w, fe, l, d, causal)  # fh_i = sum_j A_ij u_j
        for m in range(hld):
            w[of + m] += w[fe + m]
    return cU


@jit
def tangent_rows(ints, floats, y, v, ov, w, oWv, out, l, d):
    """out_i = v_i - (y_i^T W v_i) y_i for v = v[ov:] (out may overlap v); w[oWv:] receives W v."""
    apply_W(ints, floats, v, ov, w, oWv, l, d)
    for i in range(l):
        c = 0.0
        for a in range(d):
            c += y[i * d + a] * w[oWv + i * d + a]
        for a in range(d):
            out[i * d + a] = v[ov + i * d + a] - c * y[i * d + a]


@jit
def update_jacobian(ints, y, w, cU, J, l, d):
    """J (n, n) = Df, the Jacobian of the update (after forward with op = OP_LIFTED_JAC); tokens (l, d)."""
    h = ints[H]
    oP, oU, odP, odU, opy, oq, ou, ofh, odfh, oA, odA, of, oWy, oWf, oyn, odf, orow, oc = offsets(l, d, h)
    uk, hU = ints[U_KIND], ints[U_HEADS]
    causal = ints[MASK] == MASK_CAUSAL
    s = norm_scale(ints)
    J[:, :] = 0.0
    hld, hll = l * d, l * l
    for e in range(h):
        pe, qe, ue, fe = opy + e * hld, oq + e * hld, ou + e * hld, ofh + e * hld
        Ae, Ue = oA + e * hll, oU + (e if hU > 1 else 0) * d * d
        for i in range(l):
            kmax = i + 1 if causal else l
            for k in range(kmax):
                a_ik = w[Ae + i * l + k]
                if a_ik == 0.0:
                    continue
                for ra in range(d):
                    coef = a_ik * (w[ue + k * d + ra] - s * w[fe + i * d + ra])
                    r = i * d + ra
                    for cb in range(d):
                        J[r, k * d + cb] += coef * w[qe + i * d + cb]
                    if uk == SRC_IDENTITY:
                        J[r, k * d + ra] += a_ik
                    elif uk == SRC_SCALAR:
                        J[r, k * d + ra] += a_ik * cU
                    else:
                        for cb in range(d):
                            J[r, k * d + cb] += a_ik * w[Ue + ra * d + cb]
            # D_i = sum_j A_ij u_j p_j^T - s f_i g_i^T, g_i = sum_j A_ij p_j (in row)
            for cb in range(d):
                w[orow + cb] = 0.0
            for j in range(kmax):
                a_ij = w[Ae + i * l + j]
                if a_ij == 0.0:
                    continue
                for cb in range(d):
                    w[orow + cb] += a_ij * w[pe + j * d + cb]
                for ra in range(d):
                    ua = a_ij * w[ue + j * d + ra]
                    for cb in range(d):
                        J[i * d + ra, i * d + cb] += ua * w[pe + j * d + cb]
            if s != 0.0:
                for ra in range(d):
                    sf = s * w[fe + i * d + ra]
                    for cb in range(d):
                        J[i * d + ra, i * d + cb] -= sf * w[orow + cb]


@jit
def lift(ints, floats, y, w, J, l, d):
    """J <- Pi Df Pi + diag[f (W y)^T - y (W f)^T - c Pi] (sphere, ellipsoid), in place; tokens (l, d)."""
    h = ints[H]
    oP, oU, odP, odU, opy, oq, ou, ofh, odfh, oA, odA, of, oWy, oWf, oyn, odf, orow, oc = offsets(l, d, h)
    n = l * d
    for m in range(n):  # y into the scratch (its offset is then a run-time value)
        w[oyn + m] = y[m]
    apply_W(ints, floats, w, oyn, w, oWy, l, d)
    apply_W(ints, floats, w, of, w, oWf, l, d)
    for i in range(l):  # rows: minus y_i (W y_i)^T Df_i
        for m in range(n):
            acc = 0.0
            for a in range(d):
                acc += w[oWy + i * d + a] * J[i * d + a, m]
            w[orow + m] = acc
        for a in range(d):
            ya = y[i * d + a]
            for m in range(n):
                J[i * d + a, m] -= ya * w[orow + m]
    for r in range(n):  # columns: minus (Df y_k) (W y_k)^T
        for k in range(l):
            acc = 0.0
            for c in range(d):
                acc += J[r, k * d + c] * y[k * d + c]
            for c in range(d):
                J[r, k * d + c] -= acc * w[oWy + k * d + c]
    for i in range(l):
        ci = 0.0
        for a in range(d):
            ci += y[i * d + a] * w[oWf + i * d + a]
        for a in range(d):
            ya, fa = y[i * d + a], w[of + i * d + a]
            for c in range(d):
                J[i * d + a, i * d + c] += (fa * w[oWy + i * d + c] - ya * w[oWf + i * d + c]
                                            + ci * ya * w[oWy + i * d + c])
            J[i * d + a, i * d + a] -= ci


@jit
def difference_form(ints, floats, y, w, out, l, d):
    """out_i = Pi_i sum_j (sum_eta A^eta_ij) (y_j - y_i), after forward: the field (U = I) at
    tokens y on the manifold without the cancellation of Pi_i f_i (riemattn.dynamics._tangent,
    form (D); the same attention rows). y, out: flat (l d); f's scratch slot receives the sum."""
    h = ints[H]
    oP, oU, odP, odU, opy, oq, ou, ofh, odfh, oA, odA, of, oWy, oWf, oyn, odf, orow, oc = offsets(l, d, h)
    causal = ints[MASK] == MASK_CAUSAL
    hll = l * l
    for i in range(l):
        jmax = i + 1 if causal else l
        for a in range(d):
            w[of + i * d + a] = 0.0
        for j in range(jmax):
            a_ij = 0.0
            for e in range(h):
                a_ij += w[oA + e * hll + i * l + j]
            for a in range(d):
                w[of + i * d + a] += a_ij * (y[j * d + a] - y[i * d + a])
    tangent_rows(ints, floats, y, w, of, w, of + 2 * l * d, out, l, d)
