"""``assert_tangent`` (re-exported by :mod:`riemattn.testing.checks`): a field is tangent to its
manifold at the given tokens, judged relative to the vector its projection removed.

The value of a projected field F = (I - y y^T W) v is rounded at the size of v, not of F: a field
whose projection removes a large normal part (|v| = 1e6 |F|) leaves y^T W F ~ eps |v|, a million
times the rounding level of |F|. The tolerance therefore scales with |v|, which is read off the
field where it is visible (an attention field's ``update``, a ``VectorField``'s ``func`` with
``project=True``) and measured where the field projects inside its own function (:func:`_removed`).
"""

from __future__ import annotations

import numpy as np

from ..errors import ValidationError
from .._validation import check_real
from ._common import (EPS, _W_norm2, _check_dim, _is_flat, _manifold_of, _norm, _require_on_manifold, _tokens,
                      _tol, _where)

#: The probe of :func:`_removed` evaluates the field at (1 + PROBE) y. Its choice: the normal part
#: s it measures is y^T W F((1 + PROBE) y) / (2 PROBE), read with the rounding error 32 d eps kappa |v|
#: / (2 PROBE) (kappa = |y|_2^2 ||W||_2 <= cond W); a field with a *wrong* normal part e (not a
#: projection) reads as s ~ e / (2 PROBE), which raises the tolerance by 32 d eps kappa e / (2 PROBE):
#: 0.07 e at kappa = 1e10, d = 4 -- the bug still shows. A larger PROBE moves the probe point off
#: the tokens (a field of weights exp(beta y^T W y) grows by exp(2 PROBE beta) = e^2 at beta = 1e3,
#: an overestimate of s, never an underestimate).
PROBE = 2.0 ** -10


def _unprojected(field, t, y):
    """The field's value before its tangent projection, shape of y, or None if it is not visible.

    An :class:`~riemattn.dynamics.attention.AttentionField` (or any field with an ``update(t, y)``
    method) projects ``update(t, y)``; a :class:`~riemattn.dynamics.fields.VectorField` with
    ``project=True`` projects ``func(t, y)``.
    """
    if callable(getattr(field, "update", None)):
        return np.asarray(field.update(t, y), dtype=float)
    if getattr(field, "project", False) and callable(getattr(field, "func", None)):
        return np.asarray(field.func(t, y), dtype=float)
    return None


def _removed(field, t, y, manifold):
    """|s_i|, the normal part y_i^T W v_i that a field projecting inside its own function removed,
    shape (...), or None where the probe cannot be made.

    For F(x) = v(x) - x (x^T W v(x)) at x = c y (c = 1 + PROBE): y^T W F(c y) = (1 - c^2 |y|_W^2)
    y^T W v(c y) = -(2 PROBE + PROBE^2) s (1 + O(PROBE)) on the manifold (|y|_W = 1 to 1e-10).
    A field that is tangent without a projection (a rotation) reads s ~ 0.
    """
    try:
        Fc = np.asarray(field(t, (1.0 + PROBE) * y))
    except Exception:  # noqa: BLE001 - a field defined on the manifold only: no probe
        return None
    if Fc.shape != y.shape or Fc.dtype.kind not in "iuf" or not np.all(np.isfinite(Fc)):
        return None
    return np.abs(manifold.inner(y, Fc.astype(float))) / (2.0 * PROBE + PROBE * PROBE)


def _field_value(field, t, y, batch_ndim):
    F = np.asarray(field(t, y))
    if F.dtype.kind == "c":
        raise AssertionError(f"field(t, y) at t = {t!r} returned complex values ({F.dtype}): a field on real "
                             "tokens is real.")
    F = F.astype(float) if F.dtype.kind in "iufb" else np.asarray(F, dtype=float)
    if F.shape != y.shape:
        raise AssertionError(f"field(t, y) at t = {t!r} has shape {F.shape}, expected the shape of y, {y.shape}.")
    bad = ~np.isfinite(F).all(axis=-1)
    if bad.any():
        raise AssertionError(f"field value not finite at t = {t!r}, {_where(np.argwhere(bad)[0], batch_ndim)}.")
    return F


def assert_tangent(field, y, *, t=0.0, atol=0.0, rtol=1e-12):
    """Assert that ``field(t, y)`` is tangent to the field's manifold at every token.

    Checks ``|<y_i, F_i>_W| = |y_i^T W F_i| <= atol_i + rtol |y_i|_W |F_i|_W + delta_i |y_i|_W |v_i|_W
    + r_i`` (T_y E_W = {u : y^T W u = 0}, ICML eq. 3), the shape of F and its finiteness. ``v_i`` is
    the vector *before* the projection F_i = v_i - y_i (y_i^T W v_i) that made F_i, of which F_i's
    rounding is a fraction: ``r_i = 32 d eps |y_i|_2 ||W||_2 |v_i|_2`` is the rounding of that
    projection and of the check (:func:`inner_rounding`); ``delta_i = |y_i^T W y_i - 1|`` the
    token's measured distance from the manifold (an exact projection at it leaves
    y^T W F = (1 - y^T W y) y^T W v); ``rtol`` the field's relative accuracy. Every term scales with
    the field and the tokens: the check judges a field of size 1e-20 and one of size 1e100 alike.

    Where ``v_i`` comes from: ``field.update(t, y)`` for an
    :class:`~riemattn.dynamics.attention.AttentionField` (or any field with an ``update``
    method), ``field.func(t, y)`` for a :class:`~riemattn.dynamics.fields.VectorField` with
    ``project=True``. A field that projects inside its own function is probed once more, at
    (1 + 2^-10) y, where its projection leaves the normal part it removed, 2^-9 (y^T W v), in
    sight: |v_i| <= |F_i| + |y^T W v| |y_i| (a field that refuses tokens off the manifold is judged
    against |F_i| alone). F_i itself when larger.

    Parameters
    ----------
    field : Field
        Any riemattn field (``field(t, y)`` and ``field.manifold``).
    y : array_like, shape (..., l, d)
        Real tokens on the manifold (e.g. from :func:`riemattn.testing.strategies.points`); d must
        be the manifold's ambient dimension.
    t : float, default 0.0
    atol : float or array_like of shape (..., l), default 0.0
        Absolute tolerance (per token if an array), on top of the relative one.
    rtol : float, default 1e-12
        The field's relative accuracy: a normal part up to ``rtol |y_i|_W |F_i|_W`` passes.

    Raises
    ------
    AssertionError
        Naming the time, trajectory and token with the largest violation, ``y^T W F`` and ``|F|_W``;
        also for a value that is not finite, complex, or of the wrong shape.
    ValidationError
        If ``y`` does not have the manifold's d components, or a token is off the manifold by more
        than 1e-10 + the rounding level of y^T W y (the tokens are blamed, not the field, as by
        :func:`~riemattn.testing.slopes.check_order`: float32 tokens are ~1e-7 off).
    InputTypeError
        If ``y`` is not real (complex tokens are refused, as by :func:`riemattn.integrate`).
    """
    manifold = _manifold_of(field)
    y = _tokens(y)
    _check_dim(y, manifold)
    t = check_real(t, "t")
    atol = _tol(0.0 if atol is None else atol, "atol", y.shape[:-1])
    rtol = float(_tol(rtol, "rtol"))
    flat = _is_flat(manifold)
    if not flat:
        if not np.all(np.isfinite(y)):
            raise ValidationError(f"y must be finite, got a NaN or inf at {_where(np.argwhere(~np.isfinite(y))[0][:-1], y.ndim - 2)}"
                                  ": a token not on the manifold has no tangent space.")
        dev = _require_on_manifold(manifold, y)
    batch_ndim = y.ndim - 2
    F = _field_value(field, t, y, batch_ndim)
    if flat or F.size == 0:  # the Euclidean space: every vector is tangent; an empty batch: nothing to check
        return
    residual = np.abs(manifold.inner(y, F))
    v = _unprojected(field, t, y)
    if v is not None and v.shape == y.shape:
        v = np.where(np.isfinite(v), v, 0.0)
        bigger = (_norm(v) > _norm(F))[..., None]
        v2, vW = _norm(np.where(bigger, v, F)), _norm(np.where(bigger, v, F), manifold)
        seen = "before the projection"
    else:
        s = _removed(field, t, y, manifold)
        s = np.zeros(residual.shape) if s is None else s
        # v = F + s y: |v| <= |F| + |s| |y| in either norm
        v2, vW = _norm(F) + s * _norm(y), _norm(F, manifold) + s * _norm(y, manifold)
        seen = "probed, before the field's own projection"
    rounding = 32 * y.shape[-1] * EPS * _norm(y) * _W_norm2(manifold) * v2  # inner_rounding(y, v)
    yW = _norm(y, manifold)
    tol = atol + rtol * yW * _norm(F, manifold) + dev * yW * vW + rounding
    excess = residual - tol
    worst = np.unravel_index(np.argmax(excess), excess.shape)
    if excess[worst] > 0:
        raise AssertionError(
            f"field not tangent at t = {t!r}, {_where(worst, batch_ndim)}: |y^T W F| = "
            f"{residual[worst]:.3e} > tolerance {tol[worst]:.3e} (|F|_W = {_norm(F, manifold)[worst]:.3e}, "
            f"|v|_W {seen} {vW[worst]:.3e}; {int(np.sum(excess > 0))} of {excess.size} tokens)."
        )
