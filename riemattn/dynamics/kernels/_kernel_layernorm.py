r"""Compiled layer-norm placements (private; ``ints[PLACEMENT]`` of :mod:`riemattn.dynamics.kernels`).

The models of :mod:`riemattn.dynamics.layernorm` (written there once, in ``_value`` and
``_block``), evaluated around the attention kernels: ``A = f(t, x)`` is the attention update
(:func:`~riemattn.dynamics.kernels._kernel_attention.forward`) at ``x = theta = N_W(y)`` ("pre", "peri",
"mix") or at ``x = y`` ("ngpt", state on E_W), ``Df`` its Jacobian
(:func:`~riemattn.dynamics.kernels._kernel_attention.update_jacobian`). Per token, ``r_i = |y_i|_W``,
``Pi_i = I - theta_i (W theta_i)^T``, ``c_i = <theta_i, A_i>_W``, ``n_i = N(A_i)`` (``N(0) = 0``),
``M_i = I - n_i (W n_i)^T``:

=========  ===================================  ==============================  ===================
placement  RHS (continuous model)               UPDATE u (block: see BLOCK)      state
=========  ===================================  ==============================  ===================
post       the attention field F (PL_POST)      f                                E_W
pre        A(theta)                             A(theta)                         R^d
peri       n = N(A(theta))                      n                                R^d
ngpt       alpha (n_i - <y_i, n_i>_W y_i)       alpha (n - y), A at y            E_W
mix        t < switch: r_i Pi_i A_i(theta)      r_i A_i(theta)                   R^d
           t >= switch: A(theta)                A(theta)
=========  ===================================  ==============================  ===================

``BLOCK`` finishes the discrete block from ``z = y + h u`` (the loop's Euler step of UPDATE):
``N_W(z)`` on E_W (the attention field, post and ngpt: the ``"layer"`` step), ``z`` on a flat
state (pre, peri, mix after the switch, the circle form), and ``r_i N_W(z_i)`` for mix before the
switch. This is each placement's block of :mod:`riemattn.dynamics.layernorm`: for mix,
``r N_W(theta + h A) = r N_W(y + h r A)`` (N_W is invariant under positive scaling of a token).

Jacobians (the matrix the Rosenbrock steppers linearise). From ``dtheta_k = Pi_k dy_k / r_k``,
``dr_i = (W theta_i)^T dy_i`` and ``dN(v) = M dv / |v|_W``:

- pre (and mix after the switch), flat state: ``J[i, k] = Df[i, k] Pi_k / r_k``;
- peri, flat state: ``J[i, k] = (M_i / |A_i|_W) Df[i, k] Pi_k / r_k``;
- mix before the switch, flat state: the model is the lifted attention field itself, ``G(y) =
  |y|_W F(pi_W y)``, at any y (not only on E_W), and

  .. math:: J[i, k] = \frac{r_i}{r_k} \Big(\Pi_i Df[i, k] \Pi_k
      + \delta_{ik} \big[A_i (W\theta_i)^T - \theta_i (W A_i)^T - c_i \Pi_i\big]\Big),

  (differentiate ``r_i (A_i - c_i theta_i)``: the product rule gives ``Pi_i A_i (W theta_i)^T``
  from ``dr_i`` and ``r_i [Pi_i dA_i - c_i dtheta_i - theta_i (W A_i)^T dtheta_i]`` from the
  rest; the diagonal terms simplify to the bracket, which is the lifted attention Jacobian of
  :mod:`riemattn.dynamics.kernels._kernel_attention` at theta, with the block (i, k) scaled by r_i / r_k);
- ngpt, state on E_W, the lifted form ``G = |x|_W F(pi_W x)``: the lifted attention Jacobian with
  the update ``f`` replaced by ``V = alpha n`` and ``Df`` by ``DV[i, k] = alpha (M_i / |A_i|_W)
  Df[i, k]`` (that formula holds for any update: it is ``DF Pi + F (W y)^T`` with ``F = Pi V``).

Where ``A_i = 0`` (zero value weights) N is not differentiable; its rows are set to 0 (the
value there is 0, and with U = 0 it is 0 everywhere). ``TIME_DERIVATIVE`` (time-dependent
weights): ``dA/dt`` at theta (:func:`~riemattn.dynamics.kernels._kernel_dtime.dtime_finish`), then pre
``dA``, peri ``M_i dA_i / |A_i|``, mix before the switch ``r_i Pi_i dA_i``, ngpt ``r_i Pi_i
(alpha M_i dA_i / |A_i|)`` at theta = pi_W(y) (the switch itself is a break of the pack, not a
derivative).

References
----------
Karagodin, Ge, Polyanskiy, Rigollet, "Normalization in attention dynamics", NeurIPS 2025,
section 2; Loshchilov et al., "nGPT", ICLR 2025, eq. (10)-(11).
"""

from __future__ import annotations

import math

from ._kernel_attention import apply_W, jit, offsets, source
from ._kernel_heads import smooth
from ._kernel_layout import (D, H, L, LN_ALPHA_LOC, LN_ALPHA_OFF, LN_SWITCH_OFF, MAN_FLAT, MANIFOLD,
                             OP_RHS, OP_TIME_DERIVATIVE, P_KIND, PL_MIX, PL_NGPT, PL_PERI, PL_POST, PL_PRE,
                             PLACEMENT, U_KIND, W_OFF)


@jit
def ln_offsets(l, d, h):
    """Scratch offsets of the point x the attention is evaluated at (l d), r_i = |y_i|_W (l) and
    |A_i|_W (l), after the attention's scratch (layout of _kernel_layout.work_length)."""
    ox = offsets(l, d, h)[17] + l
    return ox, ox + l * d, ox + l * d + l


@jit
def _early(t, ints, floats):
    """Mix-LN before its switch (t < switch): the Post-LN model on the directions."""
    return ints[PLACEMENT] == PL_MIX and t < floats[ints[LN_SWITCH_OFF]]


@jit
def _wdot(ints, floats, x, ox, v, ov, d):
    """x[ox:ox + d]^T W v[ov:ov + d] (W = I when ints[W_OFF] < 0)."""
    w0 = ints[W_OFF]
    acc = 0.0
    for a in range(d):
        if w0 < 0:
            acc += x[ox + a] * v[ov + a]
        else:
            wa = 0.0
            for c in range(d):
                wa += floats[w0 + a * d + c] * v[ov + c]
            acc += x[ox + a] * wa
    return acc


@jit
def _wvec(ints, floats, x, ox, out, oo, d):
    """out[oo:oo + d] = W x[ox:ox + d]."""
    w0 = ints[W_OFF]
    for a in range(d):
        if w0 < 0:
            out[oo + a] = x[ox + a]
        else:
            acc = 0.0
            for c in range(d):
                acc += floats[w0 + a * d + c] * x[ox + c]
            out[oo + a] = acc


@jit
def ln_start(op, y, ints, floats, w):
    """x (theta = N_W(y), or y itself for ngpt's value and Jacobian) into the scratch, and r_i =
    |y_i|_W. Returns the offset of x, or -1 for TIME_DERIVATIVE when the weights do not vary
    smoothly in t (dG/dt = 0)."""
    l, d, h = ints[L], ints[D], ints[H]
    ox, orr, ona = ln_offsets(l, d, h)
    if op == OP_TIME_DERIVATIVE and not (smooth(ints[P_KIND]) or smooth(ints[U_KIND])):
        return -1
    keep = ints[PLACEMENT] == PL_NGPT and op != OP_TIME_DERIVATIVE
    for i in range(l):
        r = math.sqrt(_wdot(ints, floats, y, i * d, y, i * d, d))
        w[orr + i] = r
        for a in range(d):
            w[ox + i * d + a] = y[i * d + a] if keep else y[i * d + a] / r
    return ox


@jit
def _direction(ints, floats, w, of, i, d, oWn):
    """|A_i|_W of A = w[of:] and W n_i into w[oWn:oWn + d] (n_i = A_i / |A_i|_W; 0 when A_i = 0)."""
    na = math.sqrt(_wdot(ints, floats, w, of + i * d, w, of + i * d, d))
    _wvec(ints, floats, w, of + i * d, w, oWn, d)
    inv = 1.0 / na if na > 0.0 else 0.0
    for a in range(d):
        w[oWn + a] *= inv
    return na, inv


@jit
def ln_value(op, t, b, ints, floats, per, w, out):
    """RHS or UPDATE of the placement (table of the module docstring) into out (l d), from the
    attention update A = f at x (after ``forward``)."""
    l, d, h = ints[L], ints[D], ints[H]
    of, orow = offsets(l, d, h)[11], offsets(l, d, h)[16]
    ox, orr, ona = ln_offsets(l, d, h)
    pl = ints[PLACEMENT]
    early = _early(t, ints, floats)
    rhs = op == OP_RHS
    alpha = _alpha(ints, floats, per, b) if pl == PL_NGPT else 1.0
    for i in range(l):
        if pl == PL_PERI or pl == PL_NGPT:  # n_i = N(A_i)
            na, inv = _direction(ints, floats, w, of, i, d, orow)
            for a in range(d):
                out[i * d + a] = w[of + i * d + a] * inv
            if pl == PL_NGPT:  # alpha (n_i - <y_i, n_i>_W y_i), or alpha (n_i - y_i)
                c = _wdot(ints, floats, w, ox + i * d, out, i * d, d) if rhs else 1.0
                for a in range(d):
                    out[i * d + a] = alpha * (out[i * d + a] - c * w[ox + i * d + a])
        elif early:  # r_i Pi_i A_i (RHS), r_i A_i (UPDATE)
            r = w[orr + i]
            c = _wdot(ints, floats, w, ox + i * d, w, of + i * d, d) if rhs else 0.0
            for a in range(d):
                out[i * d + a] = r * (w[of + i * d + a] - c * w[ox + i * d + a])
        else:  # pre, mix after the switch
            for a in range(d):
                out[i * d + a] = w[of + i * d + a]


@jit
def _alpha(ints, floats, per, b):
    return source(ints[LN_ALPHA_LOC], floats, per, b)[ints[LN_ALPHA_OFF]]


@jit
def ln_jac_rows(t, b, ints, floats, per, w, J):
    """Left factors of the Jacobian (after ``update_jacobian``: J = Df): peri and ngpt rows times
    M_i / |A_i|_W (alpha for ngpt, whose update becomes V = alpha n). Returns whether the lifting
    of :func:`~riemattn.dynamics.kernels._kernel_attention.lift` follows (ngpt, mix before the switch)."""
    pl = ints[PLACEMENT]
    if pl != PL_PERI and pl != PL_NGPT:
        return _early(t, ints, floats)
    l, d, h = ints[L], ints[D], ints[H]
    n = l * d
    of, odf, orow = offsets(l, d, h)[11], offsets(l, d, h)[15], offsets(l, d, h)[16]
    alpha = _alpha(ints, floats, per, b) if pl == PL_NGPT else 1.0
    for i in range(l):
        na, inv = _direction(ints, floats, w, of, i, d, orow)  # W n_i in w[orow:]
        for m in range(n):  # (W n_i)^T Df_i
            acc = 0.0
            for a in range(d):
                acc += w[orow + a] * J[i * d + a, m]
            w[odf + m] = acc
        s = alpha * inv
        for a in range(d):
            na_ = w[of + i * d + a] * inv  # n_ia
            for m in range(n):
                J[i * d + a, m] = s * (J[i * d + a, m] - na_ * w[odf + m])
            if pl == PL_NGPT:
                w[of + i * d + a] = alpha * na_
    return pl == PL_NGPT


@jit
def ln_jac_cols(t, ints, floats, w, J):
    """Right factors of the Jacobian: columns times Pi_k / r_k (pre, peri, mix after the switch),
    or blocks (i, k) times r_i / r_k (mix before the switch, after the lifting)."""
    pl = ints[PLACEMENT]
    if pl == PL_NGPT or pl == PL_POST:
        return
    l, d, h = ints[L], ints[D], ints[H]
    n = l * d
    oWy = offsets(l, d, h)[12]
    ox, orr, ona = ln_offsets(l, d, h)
    if _early(t, ints, floats):
        for i in range(l):
            for k in range(l):
                if k != i:
                    s = w[orr + i] / w[orr + k]
                    for a in range(d):
                        for c in range(d):
                            J[i * d + a, k * d + c] *= s
        return
    apply_W(ints, floats, w, ox, w, oWy, l, d)  # W theta_k
    for m in range(n):
        for k in range(l):
            acc = 0.0
            for c in range(d):
                acc += J[m, k * d + c] * w[ox + k * d + c]
            inv = 1.0 / w[orr + k]
            for c in range(d):
                J[m, k * d + c] = (J[m, k * d + c] - acc * w[oWy + k * d + c]) * inv


@jit
def ln_dtime(t, b, ints, floats, per, w, out):
    """dG/dt of the placement from dA/dt in out (l d), at theta (after ``dtime_finish``)."""
    pl = ints[PLACEMENT]
    early = _early(t, ints, floats)
    if pl == PL_PRE or (pl == PL_MIX and not early):
        return
    l, d, h = ints[L], ints[D], ints[H]
    of, orow = offsets(l, d, h)[11], offsets(l, d, h)[16]
    ox, orr, ona = ln_offsets(l, d, h)
    alpha = _alpha(ints, floats, per, b) if pl == PL_NGPT else 1.0
    for i in range(l):
        if pl != PL_MIX:  # M_i dA_i / |A_i|_W (times alpha)
            na, inv = _direction(ints, floats, w, of, i, d, orow)
            c = 0.0
            for a in range(d):
                c += w[orow + a] * out[i * d + a]
            for a in range(d):
                out[i * d + a] = alpha * inv * (out[i * d + a] - c * w[of + i * d + a] * inv)
        if pl != PL_PERI:  # r_i Pi_i v_i at theta
            c = _wdot(ints, floats, w, ox + i * d, out, i * d, d)
            r = w[orr + i]
            for a in range(d):
                out[i * d + a] = r * (out[i * d + a] - c * w[ox + i * d + a])


@jit
def ln_block(t, y, ints, floats, out):
    """The discrete block from out = y + h u (u = UPDATE at (t, y)), in place: N_W per token on
    E_W, nothing on a flat state, r_i N_W for mix before the switch."""
    early = _early(t, ints, floats)
    if ints[MANIFOLD] == MAN_FLAT and not early:
        return
    d = ints[D]
    for i in range(ints[L]):
        rz = math.sqrt(_wdot(ints, floats, out, i * d, out, i * d, d))
        ry = math.sqrt(_wdot(ints, floats, y, i * d, y, i * d, d)) if early else 1.0
        for a in range(d):
            out[i * d + a] = out[i * d + a] / rz * ry if early else out[i * d + a] / rz
