"""The mask, bias, update and context parts of an attention field (private helper of the attention field).

:mod:`riemattn.dynamics.masks` and :mod:`riemattn.dynamics.biases` define the parts; here they are
checked against the field (heads, manifold) and laid out for the scores ``S[..., i, eta, j]``.

Cross-attention (``context=C``, C of shape (m, d) or (..., m, d), finite): the queries are the
moving tokens y_i, the keys and values the fixed c_j::

    s_ij = beta y_i^T P_eta c_j,   f_i = sum_eta sum_j alpha_ij^eta U_eta c_j,

the normalization over the m keys ("mean": 1 / m; "sigmoid": the bias -log m), on a manifold the
tangent projection of f_i at y_i, on flat space ``update="centred"`` sum alpha U (c_j - y_i) or
``"uncentred"`` sum alpha U c_j. The context is data, not a state: it does not move (an encoder's
output). Batch axes of C broadcast against the tokens' batch, one context per trajectory, like
per-trajectory weights (taken along by the adaptive loop's compaction). With a context: mask "full"
only, no bias, ALiBi, RoPE or Sinkhorn (positions and masks relate a query to keys of the same
sequence); NumPy engine.
"""

from __future__ import annotations

import numpy as np

from .._backend import constant, to_numpy
from .._validation import as_float_array, check_choice, check_finite
from ..errors import ValidationError
from .biases import as_bias
from .masks import _keeps_a_key, as_mask

__all__ = ["UPDATES", "ROW_FREE", "configure_parts", "admissible", "bias_scores", "cross_call", "cross_conflicts", "keys",
           "take_context"]

#: "centred": sum_j alpha_ij U (y_j - y_i) on flat space (the tangent update on a manifold);
#: "uncentred": sum_j alpha_ij U y_j on flat space (Sinkformers' x' = K W_V x, the SAN layer).
UPDATES = ("centred", "uncentred")

#: The normalizations that do not normalise rows: a query with no admissible key gets the weights 0.
ROW_FREE = ("mean", "sigmoid")


def configure_parts(field, mask, bias, update, context=None) -> None:
    """Set ``field.mask`` ("full", "causal" or a Mask), ``field.bias`` (None or a Bias),
    ``field.centred`` and ``field.context`` (None or a read-only array (..., m, d)); ``field._P``,
    ``field.flat``, ``field.normalization``, ``field.alibi`` and ``field.rope`` already set."""
    part = as_mask(mask) if not isinstance(mask, str) else None
    if isinstance(mask, str):
        check_choice(mask, "mask", ("full", "causal"))  # the old message for a bad string
    field.mask = mask if part is None else (part.builtin or part)
    if part is not None and part._fixed is not None and field.normalization not in ROW_FREE:
        _keeps_a_key(part.array(part._fixed.shape[-1]), part.name, field.normalization)  # a fixed array: now
    field.bias = as_bias(bias)
    for what, p in (("mask", part), ("bias", field.bias)):
        heads = None if p is None else p.heads
        if heads not in (None, 1, field._P.h):
            raise ValidationError(f"{what} {p!r} has {heads} heads but P has {field._P.h}; give (l, l) or one "
                                  f"(l, l) per head of P.")
    update = check_choice(update, "update", UPDATES)
    if update == "uncentred" and not field.flat:
        raise ValidationError("update='uncentred' (sum_j alpha_ij U y_j) needs W='flat': on a sphere or an "
                              "ellipsoid the update is projected on the tangent space, which already removes "
                              "the component along y_i.")
    field.centred = update == "centred"
    field.context = None
    if context is not None:
        C = np.array(check_finite(as_float_array(context, "context"), "context"))  # a copy, read-only
        d = field._P.shape[-1]
        if C.ndim < 2 or C.shape[-1] != d or C.shape[-2] < 1:
            raise ValidationError(f"context must have shape (m, {d}) or (..., m, {d}) with m >= 1 keys, got {C.shape}.")
        others = cross_conflicts(field)
        if others:
            raise ValidationError(f"context (cross-attention) does not combine with {', '.join(others)}: masks and "
                                  "positions relate a query to keys of its own sequence; use mask='full'.")
        C.setflags(write=False)
        field.context = C


def cross_conflicts(field) -> list:
    """The parts of ``field`` that cross-attention (keys from another sequence) cannot take."""
    return [what for what, on in (("mask", field.mask != "full"), ("bias", field.bias is not None),
                                  ("alibi", field.alibi is not None), ("rope", field.rope is not None),
                                  ("normalization='sinkhorn'", field.normalization == "sinkhorn")) if on]


def cross_call(field, t, y, C):
    """The tangent field at the queries y with keys and values C (..., m, d), a moving context of y's kind
    and batch (:class:`~riemattn.dynamics.populations.Populations`); checked tokens, no context of its own."""
    work = field._work
    before = getattr(work, "keys", None)
    work.keys = C
    try:
        return field.manifold.tangent(y, field._update(t, y))
    finally:
        work.keys = before


def keys(field, y):
    """The keys and values: the tokens y themselves, a moving context (:func:`cross_call`), or the fixed
    context broadcast to y's batch (and kind)."""
    moving = getattr(field._work, "keys", None)
    if moving is not None:
        return moving
    C = field.context
    if C is None:
        return y
    C = constant(field._consts, "context", C, y)
    batch = tuple(y.shape[:-2])
    try:
        if np.broadcast_shapes(tuple(C.shape[:-2]), batch) != batch:
            raise ValueError
    except ValueError:
        raise ValidationError(f"context of shape {tuple(field.context.shape)} does not broadcast against the tokens' "
                              f"batch shape {batch} (its leading axes are one context per trajectory).") from None
    if type(C) is np.ndarray:
        return np.broadcast_to(C, batch + tuple(C.shape[-2:]))
    return C.broadcast_to(batch + tuple(C.shape[-2:]))


def take_context(field, index, batch_shape):
    """A per-trajectory context broadcast to ``batch_shape``, flattened and taken at ``index``."""
    C = field.context
    if C is None or C.ndim == 2:
        return C
    out = np.broadcast_to(C, tuple(batch_shape) + C.shape[-2:]).reshape((-1,) + C.shape[-2:])[np.asarray(to_numpy(index))]
    out.setflags(write=False)
    return out

def _layout(B: np.ndarray) -> np.ndarray:
    """(l, l) -> [i, 1, j]; (h, l, l) -> [i, eta, j]."""
    return B[:, None, :] if B.ndim == 2 else np.swapaxes(B, 0, 1)


def admissible(field, n: int, like=None):
    """The field's mask as [i, eta | 1, j]: bool for NumPy; 0/1 in ``like``'s dtype for tensors."""
    key = ("mask", n)
    if key not in field._tril:
        arr = as_mask(field.mask).array(n)
        if field.normalization not in ROW_FREE:
            _keeps_a_key(arr, field.mask, field.normalization)
        field._tril[key] = np.ascontiguousarray(_layout(arr))
    if like is None or type(like) is np.ndarray:
        return field._tril[key]
    return constant(field._consts, ("mask-dev", n), field._tril[key].astype(float), like)


def bias_scores(field, t, n: int, y):
    """The bias [..., i, eta | 1, j] at time(s) t (one per trajectory for an array t)."""
    b = field.bias
    if not b.time_dependent:
        key = ("bias", n)
        if key not in field._tril:
            field._tril[key] = np.ascontiguousarray(_row_normalised(field, _layout(b.array(n)), n))
        return constant(field._consts, key, field._tril[key], y)
    if np.ndim(t) == 0:
        return constant({}, "bias", _row_normalised(field, _layout(b.array(n, float(t))), n), y)
    t = np.asarray(t, dtype=float)
    out = np.stack([_row_normalised(field, _layout(b.array(n, s)), n) for s in t.ravel()]).reshape(t.shape + (n, -1, n))
    return constant({}, "bias", out, y)


def _heads_checked(field, B):
    """B [i, eta | 1, j] if its heads are 1 or the field's (a callable's result is known only now)."""
    if B.shape[1] not in (1, field._P.h):
        raise ValidationError(f"bias {field.bias!r} gives {B.shape[1]} heads but P has {field._P.h}; give (l, l) or one "
                              "(l, l) per head of P (alibi: slopes of one value, or one per head of P).")
    return B


def _row_normalised(field, B, n: int):
    """A ``per_row`` bias B [i, eta | 1, j] minus the log-sum-exp of each row over the admissible keys:
    exp(B) sums to 1 over the keys each query attends to (lost-in-the-middle's normalised ALiBi weights).
    An empty row (mask "strict_causal()" with "mean" or "sigmoid") stays -inf. Other biases: B."""
    B = _heads_checked(field, B)
    if not field.bias.per_row:
        return B
    masked = B if field.mask == "full" else np.where(admissible(field, n), B, -np.inf)
    with np.errstate(divide="ignore", invalid="ignore"):
        top = np.max(masked, axis=-1, keepdims=True)
        finite = np.isfinite(top)
        top = np.where(finite, top, 0.0)
        lse = top + np.log(np.sum(np.exp(masked - top), axis=-1, keepdims=True))
        out = np.where(finite, masked - lse, -np.inf)
    out.setflags(write=False)
    return out
