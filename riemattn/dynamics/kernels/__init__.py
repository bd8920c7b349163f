r"""Compiled field kernels (numba): the attention family's value, update and lifted Jacobian.

This sub-room holds every compiled field kernel: this module's entry points and the private
modules beside it, one per field form (``_kernel_attention``: the attention field and its
Jacobians; ``_kernel_layernorm``: the placements of the layer norm; ``_kernel_circle``: the circle
form; ``_kernel_dtime``: the time derivative) and their plumbing (``_kernel_layout``: the slots of
a packed field; ``_kernel_pack``: a field object to those arrays; ``_kernel_cache``: numba's disk
cache keyed on every engine file). A kernel mirrors its NumPy field of :mod:`riemattn.dynamics`:
the same formulas (normalisation, mask, rescaled forms, the difference form of the stiff steps),
written for ONE trajectory's ``(l, d)`` array with the field's parameters as run-time arrays
instead of attributes. Nothing but tests ties the two codes together, so a change of a field's
formula is made in both: the engine-agreement suite holds them together --
``tests/dynamics/test_kernels.py`` compares every operation of every form with the NumPy field
(and the Jacobians with finite differences) to a rounding bound, and
``tests/solvers/test_compiled.py`` runs every stepper on both engines, which must take the same
steps and agree to rounding.

The compiled engine's half of "one algorithm, two executions" (docs/architecture.md): the same
formulas as :class:`~riemattn.dynamics.attention.AttentionField` and
:func:`~riemattn.dynamics.jacobians.lifted_attention_jacobian`, evaluated for ONE trajectory per
call inside compiled code, so that a compiled stepping loop (:mod:`riemattn.solvers.compiled`)
runs each trajectory to its end without returning to Python.

A field is first packed into plain arrays by :func:`pack_field` (configuration as run-time
data: a handful of kernels, compiled once and cached on disk, cover every mask, normalization,
head layout, manifold, U, beta and time dependence). Four ``@numba.njit(cache=True, nogil=True)``
functions, callable from Python (tests; a few microseconds of dispatch per call) and from other
compiled code:

=================================================================  ==============================
``evaluate(op, t, y, b, ints, floats, per, work, out)``            one field operation, ``op``:
``op = RHS``                                                       ``out = F(t, y)``, tangent at y
``op = UPDATE``                                                    ``out = f(t, y)``, the
                                                                   un-normalised update (the
                                                                   ``"layer"`` step)
``op = LIFTED_JAC``                                                ``out = dG/dx`` (l d, l d),
                                                                   ``G = |x|_W F(t, pi_W x)``
``op = TIME_DERIVATIVE``                                           ``out = dG/dt`` (0 if
                                                                   ``pack.autonomous``)
``op = BLOCK``                                                     in place: ``out = y + h f``
                                                                   becomes the field's discrete
                                                                   block (the ``"layer"`` step)
``op = RHS_DIFF``                                                  ``out = F(t, y)`` for y on
                                                                   the manifold in the
                                                                   difference form (below)
``project(x, ints, floats, out)``                                  ``out_i = pi_W(x_i)``
``to_tangent(v, y, ints, floats, out)``                            ``out_i = (I - y_i y_i^T W) v_i``
``wnorm(x, ints, floats, out_l)``                                  ``out_l[i] = |x_i|_W``
=================================================================  ==============================

One entry point with the operation as data, not one kernel per operation: numba optimises a
callee's code again inside every compiled function that calls it (its LLVM module is linked in
and optimised with the caller's), so each extra entry point, and each extra level of calls,
would cost another optimisation of the whole field code (seconds) -- also in every loop that
calls it. ``evaluate`` therefore calls the helpers of the private modules directly.

``t`` float; ``b`` the trajectory's row in ``per`` (any value when ``per`` has one row); ``y``,
``x``, ``v``: C-contiguous float64 arrays of shape (l, d); ``out``: C-contiguous (l, d), or (l d,
l d) for the Jacobian, with row ``i d + a`` and column ``k d + c`` the derivative of component a
of token i along component c of token k; ``work``: float64 of length ``pack.work``; ``out_l``:
(l,). ``LIFTED_JAC`` expects ``y`` on the manifold, as
:func:`~riemattn.dynamics.jacobians.lifted_attention_jacobian` does. ``RHS_DIFF`` is the value of
the stiff steps on long plateaus: for an attention pack with U = I on the sphere or an ellipsoid
(where :func:`riemattn.dynamics._tangent.applies`), ``F_i = sum_j alpha_ij Pi_i (y_j - y_i)``, the
field at y on the manifold without the cancellation of ``Pi_i f_i`` (``_tangent.on_manifold``);
for every other pack it is ``RHS``. On flat space (the circle
form: angles as tokens of dimension 1) ``project`` and ``to_tangent`` copy, ``wnorm`` gives 1
(the lifting's scale) and ``LIFTED_JAC`` is the plain Jacobian.

Forms: the attention field (any mask, normalization, head layout, U, beta; the rescaled "mean"
form of ``riemattn.dynamics._softmax``, ``ints[RESCALED]``), the placements of the layer norm
of :func:`riemattn.dynamics.layernorm.layernorm` (``ints[PLACEMENT]``; their models, blocks and
Jacobians: ``riemattn.dynamics.kernels._kernel_layernorm``; Pre-, Peri- and Mix-LN have a flat
state, so ``LIFTED_JAC`` is the plain Jacobian of the model at any y) and the circle form (plain
and rescaled USA, SA). ``BLOCK`` ends every field's ``"layer"`` step: ``u = f(t, y)``
(``UPDATE``), ``out = y + h u``, then ``BLOCK`` at ``(t, y)`` normalises ``out`` on E_W, leaves
it on a flat state, and restores the radii ``|y_i|_W`` for Mix-LN before its switch.

Overflow: where the NumPy field raises (scores beyond the float range, "mean" weights
``e^{score} / l`` above ~1.8e308, USA on the circle past beta ~ 709), the kernels return inf or
NaN, which a compiled loop reports as a non-finite trajectory.

References
----------
Rodriguez Abella, Silvestre, Tabuada, "Consensus is all you get", ICML 2025, eq. (6).
Geshkovski, Letrouit, Polyanskiy, Rigollet, "A mathematical perspective on Transformers", (SA),
(USA) and eq. (7.1).
Karagodin, Ge, Polyanskiy, Rigollet, "Normalization in attention dynamics", NeurIPS 2025, section 2.
"""

from __future__ import annotations

import math

from ._kernel_attention import difference_form, forward, jit, lift, offsets, tangent_rows, update_jacobian
from ._kernel_cache import jit_inline
from ._kernel_circle import circle_jac, circle_rhs
from ._kernel_dtime import dtime_finish, dtime_start
from ._kernel_layernorm import ln_block, ln_dtime, ln_jac_cols, ln_jac_rows, ln_start, ln_value
from ._kernel_layout import (H, KIND, KIND_CIRCLE, MAN_ELLIPSOID, MAN_FLAT, MANIFOLD, PL_POST, PLACEMENT,
                             SRC_IDENTITY, U_KIND, W_OFF)
from ._kernel_layout import OP_BLOCK as BLOCK
from ._kernel_layout import OP_LIFTED_JAC as LIFTED_JAC
from ._kernel_layout import OP_RHS as RHS
from ._kernel_layout import OP_RHS_DIFF as RHS_DIFF
from ._kernel_layout import OP_TIME_DERIVATIVE as TIME_DERIVATIVE
from ._kernel_layout import OP_UPDATE as UPDATE
from ._kernel_pack import KernelPack, pack_field

# The operation codes RHS, UPDATE, LIFTED_JAC, TIME_DERIVATIVE, BLOCK, RHS_DIFF (0..5) are module attributes
# documented above, not in __all__ (small ints are shared objects: the API reference would take
# them for re-exports of other modules' constants of the same value).
__all__ = ["KernelPack", "pack_field", "evaluate", "project", "to_tangent", "wnorm"]


@jit
def evaluate(op, t, y, b, ints, floats, per, work, out):
    """One operation of the packed field at ``(t, y)`` into ``out`` (see the module docstring).

    ``op``: ``RHS`` (the tangent field F, (l, d)), ``UPDATE`` (the un-normalised update f,
    (l, d)), ``LIFTED_JAC`` (dG/dx, (l d, l d); y on the manifold), ``TIME_DERIVATIVE``
    (dG/dt, (l, d); y on the manifold or not), ``BLOCK`` (in place on ``out`` = y + h f: the
    end of the ``"layer"`` step), ``RHS_DIFF`` (F in the difference form, (l, d); y on the
    manifold; ``RHS`` where the form does not apply: other U, flat states, placements, the circle).
    """
    if ints[KIND] != KIND_CIRCLE and ints[PLACEMENT] == PL_POST:  # the attention field: the hot path, first
        attention_at(op, t, y, b, ints, floats, per, work, out, y.shape[0], y.shape[1])
        return
    l, d = y.shape
    n = l * d
    y1 = y.reshape(n)
    if op == RHS_DIFF:
        op = RHS  # the difference form applies to attention with U = I on the sphere or an ellipsoid only
    if op == BLOCK:
        ln_block(t, y1, ints, floats, out.reshape(n))
        return
    if ints[KIND] == KIND_CIRCLE:  # (every branch calls the helpers directly: see above)
        if op == LIFTED_JAC:
            circle_jac(t, y, b, ints, floats, per, work, out)
        elif op == TIME_DERIVATIVE:
            out[:, :] = 0.0
        else:
            circle_rhs(t, y, b, ints, floats, per, work, out)
        return
    ox = ln_start(op, y1, ints, floats, work)  # a layer-norm placement: attention at x = N_W(y) (or y)
    if ox < 0:  # TIME_DERIVATIVE of weights constant between breaks
        out[:, :] = 0.0
        return
    x = work[ox:ox + n]
    if op == TIME_DERIVATIVE:  # forward at x, kept in out
        o1 = out.reshape(n)
        o1[:] = x
        forward(op, t, o1, b, ints, floats, per, work, l, d)
        dtime_finish(t, b, ints, floats, per, work, o1)
        ln_dtime(t, b, ints, floats, per, work, o1)
        return
    cU = forward(op, t, x, b, ints, floats, per, work, l, d)
    if op == LIFTED_JAC:
        update_jacobian(ints, x, work, cU, out, l, d)
        if ln_jac_rows(t, b, ints, floats, per, work, out):
            lift(ints, floats, x, work, out, l, d)
        ln_jac_cols(t, ints, floats, work, out)
        return
    ln_value(op, t, b, ints, floats, per, work, out.reshape(n))


@jit_inline
def attention_at(op, t, y, b, ints, floats, per, work, out, l, d):
    """:func:`evaluate` for the attention field without a layer-norm placement, tokens of shape
    (l, d) given as arguments (compile-time constants in the kernels of
    :mod:`riemattn.dynamics.kernels._kernel_shaped`, run-time values in ``evaluate``)."""
    n = l * d
    y1 = y.reshape(n)
    flat = ints[MANIFOLD] == MAN_FLAT
    if op == RHS_DIFF and (flat or ints[U_KIND] != SRC_IDENTITY):
        op = RHS  # the difference form applies to attention with U = I on the sphere or an ellipsoid only
    if op == RHS or op == UPDATE:
        forward(op, t, y1, b, ints, floats, per, work, l, d)
        of = offsets(l, d, ints[H])[11]  # the update f
        o1 = out.reshape(n)
        if op == UPDATE or flat:
            for m in range(n):
                o1[m] = work[of + m]
        else:  # F = (I - y y^T W) f, W f into the scratch slot after f and W y
            tangent_rows(ints, floats, y1, work, of, work, of + 2 * n, o1, l, d)
        return
    if op == BLOCK:
        ln_block(t, y1, ints, floats, out.reshape(n))
        return
    if op == TIME_DERIVATIVE:  # forward at pi_W(y), kept in out
        o1 = out.reshape(n)
        if dtime_start(y1, ints, floats, work, o1):
            forward(op, t, o1, b, ints, floats, per, work, l, d)
            dtime_finish(t, b, ints, floats, per, work, o1)
        return
    cU = forward(op, t, y1, b, ints, floats, per, work, l, d)
    if op == LIFTED_JAC:
        update_jacobian(ints, y1, work, cU, out, l, d)
        if not flat:
            lift(ints, floats, y1, work, out, l, d)
        return
    difference_form(ints, floats, y1, work, out.reshape(n), l, d)  # RHS_DIFF


@jit_inline
def _winner(x, v, i, man, floats, w0):
    """x_i^T W v_i (W = I on the sphere). Inlined into its callers (called per token at every stage
    of a step: a call each cost more than the sum on the sphere)."""
    d = x.shape[1]
    acc = 0.0
    for a in range(d):
        if man == MAN_ELLIPSOID:
            wa = 0.0
            for c in range(d):
                wa += floats[w0 + a * d + c] * v[i, c]
            acc += x[i, a] * wa
        else:
            acc += x[i, a] * v[i, a]
    return acc


@jit
def wnorm(x, ints, floats, out_l):
    """|x_i|_W per token into ``out_l`` (l,); 1 on flat space."""
    man, w0 = ints[MANIFOLD], ints[W_OFF]
    for i in range(x.shape[0]):
        out_l[i] = 1.0 if man == MAN_FLAT else math.sqrt(_winner(x, x, i, man, floats, w0))


@jit
def project(x, ints, floats, out):
    """pi_W(x_i) = x_i / |x_i|_W per token into ``out`` (l, d) (may be x); a copy on flat space."""
    man, w0 = ints[MANIFOLD], ints[W_OFF]
    for i in range(x.shape[0]):
        r = 1.0 if man == MAN_FLAT else math.sqrt(_winner(x, x, i, man, floats, w0))
        for a in range(x.shape[1]):
            out[i, a] = x[i, a] / r


@jit
def to_tangent(v, y, ints, floats, out):
    """(I - y_i y_i^T W) v_i per token into ``out`` (l, d) (may be v); a copy on flat space."""
    man, w0 = ints[MANIFOLD], ints[W_OFF]
    for i in range(y.shape[0]):
        c = 0.0 if man == MAN_FLAT else _winner(y, v, i, man, floats, w0)
        for a in range(y.shape[1]):
            out[i, a] = v[i, a] - c * y[i, a]
