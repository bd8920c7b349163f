"""Helpers shared by the checkers of :mod:`riemattn.testing` (private): token and tolerance
arguments, the words of a message's "where", overflow-free norms and the rounding level of a W-inner
product (:func:`inner_rounding`, re-exported by :mod:`riemattn.testing.checks`)."""

from __future__ import annotations

import numpy as np

from .._validation import as_float_array, check_finite, plain
from ..errors import InputTypeError, ValidationError

EPS = np.finfo(float).eps
#: How far from E_W (|y^T W y - 1|) a token given to a checker may be, on top of the rounding
#: level of y^T W y: the accuracy of a retracted float64 token, with room (the strategies'
#: guarantee is 1e-12; a float32 token is ~6e-8 off, and is refused).
ON_MANIFOLD = 1e-10


def _where(index, batch_ndim: int, times=None) -> str:
    """Words for an index into an array of shape ``([m,] *batch, l)``: time, trajectory, token.

    ``times`` (shape (m,)) says that the first axis is time.
    """
    index = tuple(int(i) for i in index)
    parts = []
    if times is not None:
        parts.append(f"t = {float(times[index[0]]):.6g} (save index {index[0]})")
        index = index[1:]
    if batch_ndim:
        parts.append(f"trajectory {index[:batch_ndim]}")
    if len(index) > batch_ndim:
        parts.append(f"token {index[batch_ndim]}")
    return ", ".join(parts) if parts else "the only configuration"


def _tokens(y, name="y"):
    """``y`` as a float64 array of shape (..., l, d) with l, d >= 1. Complex, boolean or non-numeric
    tokens raise InputTypeError naming ``name`` (as :func:`riemattn.integrate` does: a complex
    token's imaginary part would be dropped and the rest checked as if it were the token)."""
    y = as_float_array(y, name)
    if y.ndim < 2 or y.shape[-1] < 1 or y.shape[-2] < 1:
        raise ValidationError(f"{name} must have shape (..., l, d) with l, d >= 1, got {y.shape}.")
    return y


def _tol(value, name, shape=()):
    """A finite tolerance >= 0 (a float, or an array broadcasting to ``shape``), checked up front."""
    arr = check_finite(as_float_array(value, name), name)
    if np.any(arr < 0):
        raise ValidationError(f"{name} must be >= 0, got {plain(arr)}.")
    try:
        return np.broadcast_to(arr, shape)
    except ValueError:
        raise ValidationError(f"{name} must be a number or broadcast to the tokens' shape {shape}, "
                              f"got shape {arr.shape}.") from None


def _t_span(t_span, name="t_span"):
    """(t0, t1): two finite real times (InputTypeError / ValidationError naming ``name``)."""
    arr = check_finite(as_float_array(t_span, name), name)
    if arr.shape != (2,):
        raise ValidationError(f"{name} must be two times (t0, t1), got shape {arr.shape}.")
    return float(arr[0]), float(arr[1])


def _check_manifold(manifold, name="manifold"):
    if not all(hasattr(manifold, a) for a in ("ambient_dim", "inner", "tangent")):
        what = repr(manifold) if isinstance(manifold, str) else type(manifold).__name__
        raise InputTypeError(f"{name} must be a riemattn Sphere, Ellipsoid or Euclidean (an instance, e.g. "
                             f"riemattn.Sphere(2)), got {what}.")
    return manifold


def _check_dim(y, manifold, name="y"):
    if y.shape[-1] != manifold.ambient_dim:
        raise ValidationError(f"{name} must have d = {manifold.ambient_dim} components for {manifold!r}, got "
                              f"shape {y.shape}.")


def _W_norm2(manifold) -> float:
    """The spectral norm of W (1 for a sphere or the Euclidean space)."""
    W = getattr(manifold, "W", None)
    return 1.0 if W is None else float(np.linalg.norm(np.asarray(W, dtype=float), 2))


def _norm(x, manifold=None):
    """|x|_2 (or |x|_W with ``manifold``) over the last axis without overflow: max|x_k| times the norm
    of x / max|x_k| (a field of size e^600 has |x|^2 = e^1200 = inf in doubles), shape (...)."""
    m = np.max(np.abs(x), axis=-1, initial=0.0)
    unit = x / np.where(m > 0, m, 1.0)[..., None]
    return m * (np.linalg.norm(unit, axis=-1) if manifold is None else manifold.norm(unit))


def inner_rounding(manifold, a, b):
    """The rounding level of ``a^T W b`` over the last axis, shape (...):
    ``32 d eps |a|_2 ||W||_2 |b|_2`` (the terms of the d-term inner product and of a projection
    (I - a a^T W) b that came before it are at most |a|_2 ||W||_2 |b|_2; 32 d eps covers their O(d)
    roundings, Higham, *Accuracy and Stability of Numerical Algorithms*, eq. 3.5). Up to
    cond(W) times |a|_W |b|_W: at condition number 1e10 it is ~1e-5 |a|_W |b|_W."""
    manifold = _check_manifold(manifold)
    a, b = check_finite(as_float_array(a, "a"), "a"), check_finite(as_float_array(b, "b"), "b")
    try:
        ok = a.ndim >= 1 and b.ndim >= 1 and a.shape[-1] == b.shape[-1] >= 1 and np.broadcast_shapes(a.shape, b.shape)
    except ValueError:
        ok = False
    if not ok:
        raise ValidationError(f"a and b must broadcast together, with the same d >= 1 components (last axis), "
                              f"got shapes {a.shape} and {b.shape}.")
    d = a.shape[-1]
    return 32 * d * EPS * _norm(a) * _W_norm2(manifold) * _norm(b)


def _manifold_of(field):
    manifold = getattr(field, "manifold", None)
    if manifold is None or not hasattr(manifold, "tangent"):
        raise InputTypeError(f"field must be a riemattn Field (with a manifold), got {type(field).__name__}.")
    return manifold


def _is_flat(manifold) -> bool:
    return type(manifold).__name__ == "Euclidean"



def _deviation(manifold, y):
    """``|y_i^T W y_i - 1|`` and its tolerance ``ON_MANIFOLD`` + its rounding level, shape (...)."""
    return np.abs(manifold.inner(y, y) - 1.0), ON_MANIFOLD + inner_rounding(manifold, y, y)


def _require_on_manifold(manifold, y, name="y"):
    """ValidationError naming ``name`` unless every token is on ``manifold`` within ON_MANIFOLD +
    its rounding level (the precondition of the checkers that judge a field or a solve *at* the
    tokens: the tokens are blamed, not the field); returns the deviations, shape (...)."""
    dev, tol = _deviation(manifold, y)
    if dev.size and (np.any(dev > tol) or not np.all(np.isfinite(dev))):  # 1e300 tokens: inf <= inf
        k = tuple(int(i) for i in np.unravel_index(np.argmax(np.where(np.isfinite(dev), dev - tol, np.inf)), dev.shape))
        hint = (" (float32 tokens are ~1e-7 off: retract them in float64, manifold.retract(y.astype(float)))"
                if 1e-9 < dev[k] < 1e-5 else "")
        raise ValidationError(f"{name} must lie on {manifold!r}: |y^T W y - 1| = {dev[k]:.2e} at token {k} "
                              f"(> {tol[k]:.1e}){hint}.")
    return dev
