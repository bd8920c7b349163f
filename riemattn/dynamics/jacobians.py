r"""Jacobians of fields: closed form for the attention field, batched finite differences otherwise.

For the attention field (one head shown; heads add up) write ``alpha_ij`` for the attention,
``u_j = U y_j``, ``p_j = P y_j`` and ``q_i = P^T y_i`` (beta folded into P), ``f_i = sum_j
alpha_ij u_j`` the update and ``s`` the derivative of the normalisation: ``s = sqrt(d)`` for
"paper", ``1`` for "softmax", ``0`` for "mean" (no normalisation depends on y). From
``d S_ij = v_i^T p_j + q_i^T v_j`` and ``d alpha_ij = alpha_ij (dS_ij - s sum_m alpha_im dS_im)``,
with ``g_i = sum_j alpha_ij p_j``:

.. math::

    \partial f_i / \partial y_k = \delta_{ik} \Big[\sum_j \alpha_{ij} u_j p_j^T - s f_i g_i^T\Big]
        + \alpha_{ik} \big[(u_k - s f_i) q_i^T + U\big],

and for the tangent field ``F_i = (I - y_i y_i^T W) f_i``

.. math::

    \partial F_i / \partial y_k = (I - y_i y_i^T W)\, \partial f_i / \partial y_k
        - \delta_{ik} \big[y_i (W f_i)^T + (y_i^T W f_i) I\big].

This is the Jacobian of the field's ambient extension (the formula evaluated at any y, on the
manifold or not), the map that the stiff steppers linearise (see
:mod:`riemattn.solvers.rosenbrock`). A causal mask needs nothing more (masked ``alpha_ij`` are 0).

A field with its own ``jacobian(t, y)`` method returning the layout (..., l, d, l, d) (e.g.
:meth:`riemattn.dynamics.circle.CircleField.jacobian`, closed form in angles) is used as it is.
Other fields (user :class:`~riemattn.dynamics.fields.VectorField` s, ...) get central finite
differences, all ``2 l d`` perturbed token sets evaluated as one batch (relative accuracy about
1e-10 for smooth fields of size 1).

References
----------
Rodriguez Abella, Silvestre, Tabuada, "Consensus is all you get", ICML 2025, eq. (6) (the field).
Geshkovski, Letrouit, Polyanskiy, Rigollet, "A mathematical perspective on Transformers", (SA),
(USA).

Fields without a closed form here (``field.closed_form`` False: the hardmax and Sinkhorn
normalisations, positional scores, flat space) use the finite differences; for hardmax they are
the a.e. derivative (the weights are piecewise constant) except within the difference step of a
maximiser switch.
"""

from __future__ import annotations

import math

import numpy as np

from .._backend import is_torch
from .._validation import as_float_array, check_finite, check_times
from ..errors import InputTypeError, ValidationError
from .attention import AttentionField

__all__ = ["jacobian", "jvp", "is_autonomous", "lifted_attention_jacobian"]


def _check(field, y, t=0.0):
    check_times(t, "t")
    if getattr(field, "manifold", None) is None or not callable(field):
        raise InputTypeError(
            f"field must be a riemattn Field (callable with a .manifold), got {type(field).__name__}."
        )
    if is_torch(y):
        raise InputTypeError("Jacobians are computed for NumPy tokens only; got a torch tensor "
                             "(convert with riemattn._backend.to_numpy or use an explicit stepper).")
    y = check_finite(as_float_array(y, "y"), "y")
    if y.ndim < 2 or y.shape[-1] != field.d:
        raise ValidationError(f"y must have shape (..., l, {field.d}), got shape {y.shape}.")
    return y


def is_autonomous(field) -> bool:
    """Whether ``field`` is known not to depend on t (an attention field with constant P and U)."""
    if isinstance(field, AttentionField):
        return field._P.fn is None and (field._U is None or field._U.fn is None)
    return bool(getattr(field, "autonomous", False))


def _parts(field: AttentionField, t, y):
    """alpha (..., h, l, l), P, U (..., h, d, d), u = U y_j, the scale s, the update f."""
    A = field.attention(t, y)
    P, U = field.P(t), field.U(t)
    s = {"paper": math.sqrt(field.d), "softmax": 1.0, "mean": 0.0}[field.normalization]
    u = np.einsum("...hab,...jb->...hja", U, y)  # U y_j, (..., h, l, d)
    fh = np.einsum("...hij,...hja->...hia", A, u)
    return A, P, U, u, fh, s


def _tangent_terms(field, y, f):
    """W y_i and W f_i, shape (..., l, d)."""
    apply_W = field.manifold.apply_W
    return apply_W(y), apply_W(f)


def jacobian(field, t, y) -> np.ndarray:
    """Dense Jacobian of the field's ambient extension at ``(t, y)``.

    Parameters
    ----------
    field : Field
        An :class:`~riemattn.dynamics.attention.AttentionField` (closed form), a field with its own
        ``jacobian(t, y)`` method (used as it is, e.g. :class:`~riemattn.dynamics.circle.CircleField`)
        or any field (central finite differences, one batched evaluation of ``2 l d`` token sets).
    t : float or array_like
        Time, or one time per trajectory (shape ``y.shape[:-2]``).
    y : ndarray, shape (..., l, d)

    Returns
    -------
    ndarray, shape (..., l, d, l, d)
        ``J[..., i, a, k, b] = dF_ia / dy_kb``.

    References
    ----------
    Rodriguez Abella, Silvestre, Tabuada, "Consensus is all you get", ICML 2025, eq. (6).
    """
    y = _check(field, y, t)
    if not (isinstance(field, AttentionField) and field.closed_form):  # hardmax, Sinkhorn, positions: FD
        if callable(getattr(field, "jacobian", None)):
            J = np.asarray(field.jacobian(t, y), dtype=float)
            if J.shape != y.shape + y.shape[-2:]:
                raise ValidationError(f"{type(field).__name__}.jacobian returned shape {J.shape}; "
                                      f"expected {y.shape + y.shape[-2:]} (..., l, d, l, d).")
            return J
        return _fd_jacobian(field, t, y)
    A, P, U, u, fh, s = _parts(field, t, y)
    # einsum, not matmul, for the small products: BLAS rounding would depend on the batch around
    # a trajectory (alignment), einsum's does not
    p = np.einsum("...hab,...jb->...hja", P, y)  # P y_j, (..., h, l, d)
    q = np.einsum("...hba,...ib->...hia", P, y)  # P^T y_i
    # diag_i = sum_j alpha_ij u_j p_j^T - s f_i g_i^T (per head, then summed)
    diag = np.einsum("...hija,...hjb->...hiab", A[..., :, :, None] * u[..., None, :, :], p)
    if s:
        diag -= s * fh[..., :, :, None] * np.einsum("...hij,...hjb->...hib", A, p)[..., :, None, :]
    # Df[i, a, k, b] = sum_eta alpha_ik [(u_k - s f_i)_a q_ib + U_ab]; axes (..., h, i, a, k, b)
    inner = np.swapaxes(u, -1, -2)[..., None, :, :, None]
    if s:
        inner = inner - s * fh[..., :, :, :, None, None]
    Df = A[..., :, :, None, :, None] * (inner * q[..., :, :, None, None, :] + U[..., :, None, :, None, :])
    Df = Df.sum(axis=-5) if Df.shape[-5] > 1 else Df[..., 0, :, :, :, :]
    diag = diag.sum(axis=-4) if diag.shape[-4] > 1 else diag[..., 0, :, :, :]
    l, d = y.shape[-2:]
    idx = np.arange(l)
    Df[..., idx, :, idx, :] += np.moveaxis(diag, -3, 0)
    f = fh.sum(axis=-3)
    Wy, Wf = _tangent_terms(field, y, f)
    # (I - y_i (W y_i)^T) Df_i  -  delta_ik [y_i (W f_i)^T + (y_i^T W f_i) I]
    c = np.einsum("...ia,...iam->...im", Wy, Df.reshape(Df.shape[:-4] + (l, d, l * d)))  # (W y_i)^T Df_i
    Df -= (y[..., :, :, None] * c[..., :, None, :]).reshape(Df.shape)
    yWf = np.einsum("...ia,...ia->...i", y, Wf)
    corr = y[..., :, :, None] * Wf[..., :, None, :] + yWf[..., None, None] * np.eye(d)
    Df[..., idx, :, idx, :] -= np.moveaxis(corr, -3, 0)
    return Df


def lifted_attention_jacobian(field: AttentionField, t, y) -> np.ndarray:
    r"""Jacobian of the lifted attention field ``G(x) = |x|_W F(t, pi_W x)`` at tokens on the
    manifold, shape (..., l d, l d), in one pass (the matrix the stiff steppers linearise).

    With ``Pi_i = I - y_i (W y_i)^T``, ``c_i = y_i^T W f_i`` and ``Df`` the Jacobian of the update
    (module docstring), token blocks

    .. math:: J_G[i, k] = \Pi_i \, Df[i, k] \, \Pi_k
        + \delta_{ik} \big[f_i (W y_i)^T - y_i (W f_i)^T - c_i \Pi_i\big],

    which is :func:`jacobian` composed with the lifting ``DF (I - y y^T W) + F (W y)^T`` (the
    generic route of :func:`riemattn.solvers.rosenbrock.lifted_jacobian`), with the projections
    applied once and the diagonal blocks written through a view. ``y`` must be checked NumPy
    tokens on the manifold (``|y_i|_W = 1``).

    References
    ----------
    Rodriguez Abella, Silvestre, Tabuada, "Consensus is all you get", ICML 2025, eq. (6).
    """
    batch, (l, d) = y.shape[:-2], y.shape[-2:]
    if not field.closed_form:  # the generic route: finite differences, then the lifting
        DF, Wy = _fd_jacobian(field, t, y), field.manifold.apply_W(y)
        DF -= np.sum(DF * y[..., None, None, :, :], axis=-1)[..., None] * Wy[..., None, None, :, :]
        idx = np.arange(l)
        DF[..., idx, :, idx, :] += np.moveaxis(np.einsum("...ia,...ib->...iab", field(t, y), Wy), -3, 0)
        return DF.reshape(batch + (l * d, l * d))
    A = np.moveaxis(field._attention(t, y), -2, -3)  # (..., hP, i, k); may be a work buffer: used at once
    A = np.broadcast_to(A, batch + (field.h, l, l))  # heads of P and U paired as in the field
    P = field.P(t)
    s = {"paper": math.sqrt(field.d), "softmax": 1.0, "mean": 0.0}[field.normalization]
    n = l * d
    U = None if field._U is None else field.U(t)
    p = np.einsum("...hab,...jb->...hja", P, y)  # P y_j
    q = np.einsum("...hba,...ib->...hia", P, y)  # P^T y_i
    u = y[..., None, :, :] if U is None else np.einsum("...hab,...jb->...hja", U, y)  # U y_j
    u = np.broadcast_to(u, A.shape[:-1] + (d,))  # one per head (U = I: the same for every head)
    fh = np.einsum("...hij,...hja->...hia", A, u)  # per-head update f_i
    # Layout: J[..., i, a, K] with K = (k, b) flattened, so that every broadcast below runs along
    # a last axis of length l d (numpy's per-inner-loop cost dominates with a last axis of d).
    # Df[i, a, (k, b)] = sum_eta A_ik q_ib (u_k - s f_i)_a  [+ A_ik U_ab]  [+ delta_ik D_i[a, b]]
    J = np.zeros(batch + (l, d, n))
    for e in range(A.shape[-3]):
        Aq = np.repeat(A[..., e, :, :], d, axis=-1) * np.tile(q[..., e, :, :], l)  # (..., i, K): A_ik q_ib
        uK = np.repeat(np.swapaxes(u[..., e, :, :], -1, -2), d, axis=-1)  # (..., a, K): u_ka
        J += Aq[..., :, None, :] * uK[..., None, :, :]
        if s:
            J -= s * fh[..., e, :, :, None] * Aq[..., :, None, :]
    J5 = J.reshape(batch + (l, d, l, d))
    if U is None:
        np.einsum("...iaka->...ika", J5)[...] += (A.sum(axis=-3) if A.shape[-3] > 1 else A[..., 0, :, :])[..., None]
    else:
        J5 += np.einsum("...hik,...hab->...iakb", A, np.broadcast_to(U, A.shape[:-2] + (d, d)))
    # D_i = sum_eta [sum_j A_ij u_j p_j^T - s f_i g_i^T], g_i = sum_j A_ij p_j
    up = (u[..., :, :, None] * p[..., :, None, :]).reshape(p.shape[:-1] + (d * d,))  # (..., h, j, d d)
    D = np.einsum("...hij,...hjm->...im", A, up).reshape(batch + (l, d, d))
    if s:
        g = np.einsum("...hij,...hjb->...hib", A, p)
        D -= s * np.einsum("...hia,...hib->...iab", fh, g)
    np.einsum("...iaib->...iab", J5)[...] += D
    f = fh.sum(axis=-3)
    Wy, Wf = _tangent_terms(field, y, f)
    # Pi_i Df Pi_k: rows (W y_i)^T Df_i removed along y_i, then columns Df y_k along W y_k
    J -= y[..., :, :, None] * np.einsum("...ia,...iam->...im", Wy, J)[..., :, None, :]
    J2 = J.reshape(batch + (n, n))
    r = np.einsum("...Ikb,...kb->...Ik", J.reshape(batch + (n, l, d)), y)  # (..., I, k)
    J2 -= np.repeat(r, d, axis=-1) * Wy.reshape(batch + (1, n))
    # the lifting and the tangent projection's own derivative: + f_i Wy_i^T - y_i Wf_i^T - c_i Pi_i
    c = np.einsum("...ia,...ia->...i", y, Wf)[..., None, None]
    diag = np.einsum("...iaib->...iab", J5)  # a writeable view of the diagonal blocks
    diag += f[..., :, None] * Wy[..., None, :] - y[..., :, None] * Wf[..., None, :] - c * np.eye(d)
    diag += (c * y[..., :, None]) * Wy[..., None, :]
    return J2


def jvp(field, t, y, v) -> np.ndarray:
    """Jacobian-vector product ``DF(t, y) v`` of the field's ambient extension, shape (..., l, d).

    Closed form for the attention field (cost of about two field evaluations, no (l d)^2
    matrix); other fields: a central difference along ``v``.

    References
    ----------
    Rodriguez Abella, Silvestre, Tabuada, "Consensus is all you get", ICML 2025, eq. (6).
    """
    y = _check(field, y, t)
    v = check_finite(as_float_array(v, "v"), "v")
    if v.shape != y.shape:
        raise ValidationError(f"v must have the shape of y, {y.shape}; got {v.shape}.")
    if not (isinstance(field, AttentionField) and field.closed_form):
        scale = max(1.0, float(np.max(np.abs(y), initial=0.0)))
        vn = float(np.max(np.abs(v), initial=0.0))
        if vn == 0.0:
            return np.zeros_like(y)
        delta = np.cbrt(np.finfo(float).eps) * scale / vn
        ev = field._unchecked() if hasattr(field, "_unchecked") else field
        return (ev(t, y + delta * v) - ev(t, y - delta * v)) / (2.0 * delta)
    A, P, U, u, fh, s = _parts(field, t, y)
    p = np.einsum("...hab,...jb->...hja", P, y)
    q = np.einsum("...hba,...ib->...hia", P, y)
    dS = np.einsum("...ia,...hja->...hij", v, p) + np.einsum("...hia,...ja->...hij", q, v)
    dA = A * dS
    if s:
        dA -= s * A * np.einsum("...hij->...hi", dA)[..., None]
    Uv = np.einsum("...hab,...jb->...hja", U, v)
    df = np.einsum("...hij,...hja->...ia", dA, u) + np.einsum("...hij,...hja->...ia", A, Uv)
    f = fh.sum(axis=-3)
    Wy, Wf = _tangent_terms(field, y, f)
    coef = np.einsum("...ia,...ia->...i", v, Wf) + np.einsum("...ia,...ia->...i", Wy, df)
    return df - coef[..., None] * y - np.einsum("...ia,...ia->...i", y, Wf)[..., None] * v


def _fd_jacobian(field, t, y) -> np.ndarray:
    """Central differences of ``field`` in every ambient direction, one batched evaluation
    (step per trajectory, so that a trajectory's Jacobian does not depend on the batch)."""
    batch, (l, d) = y.shape[:-2], y.shape[-2:]
    n = l * d
    delta = np.cbrt(np.finfo(float).eps) * np.maximum(1.0, np.max(np.abs(y), axis=(-2, -1)))  # batch
    E = np.eye(n).reshape((n,) + (1,) * len(batch) + (l, d)) * delta[..., None, None]
    Y = np.concatenate([y[None] + E, y[None] - E])  # (2n,) + batch + (l, d)
    tt = t if np.ndim(t) == 0 else np.broadcast_to(np.asarray(t, dtype=float), (2 * n,) + batch)
    ev = field._unchecked() if hasattr(field, "_unchecked") else field
    Fv = np.asarray(ev(tt, Y))
    D = (Fv[:n] - Fv[n:]) / (2.0 * delta[..., None, None])  # (n,) + batch + (l, d): column kb
    J = np.moveaxis(D, 0, -1)  # batch + (l, d, n)
    return J.reshape(batch + (l, d, l, d))
