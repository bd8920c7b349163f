"""Per-trajectory parameters of the attention field: beta, P and U with batch axes.

Private helper of :mod:`riemattn.dynamics.attention` and :mod:`riemattn.dynamics._heads`.

The rule (docs/index.md, "Per-trajectory weights"): the last three axes of P and U are always
(h, d, d) -- a (d, d) matrix is one head -- and a stack of that shape is shared by every
trajectory. Axes before them are **batch axes**: P of shape ``S + (h, d, d)`` holds one stack per
trajectory, ``S`` broadcasting against the batch shape ``B = y.shape[:-2]`` of the tokens the
NumPy way (right-aligned), to ``B`` itself: ``S`` may have fewer axes or axes of length 1, never
more axes or other lengths (the rule of an array ``beta``). So one single-head matrix per
trajectory is ``(n, 1, d, d)``, not ``(n, d, d)`` (that is n heads). The batch shapes of P, U and
beta broadcast against each other and against ``B``; a mismatch raises
:class:`~riemattn.errors.ValidationError` naming the argument and both shapes.

Restriction to some trajectories (:meth:`AttentionField.take`, used by the adaptive loop's
compaction and by ``stepper="auto"``): constant per-trajectory stacks are broadcast to ``B``,
flattened and indexed (a contiguous ``(k, h, d, d)`` copy, one row per remaining trajectory);
callables and differentiable tensors keep their full value and the flat indices of the rows
(:class:`~riemattn.dynamics._heads.HeadMatrices`).
"""

from __future__ import annotations

import copy
import math
import threading

import numpy as np

from .._backend import convert, is_torch, like_param, namespace, requires_grad
from ..errors import ValidationError

__all__ = ["batch_of", "beta_factor", "broadcast_rows", "check_batch", "select_rows", "take", "weight_rows"]


def _mismatch(name: str, shape: tuple, batch_shape: tuple) -> ValidationError:
    return ValidationError(
        f"{name} of shape {tuple(shape)} has the per-trajectory batch shape {tuple(shape[:-3])}, which does "
        f"not broadcast against the batch shape {tuple(batch_shape)} of the tokens (the leading axes of y); "
        f"give {name} the shape (h, d, d) (shared by every trajectory) or S + (h, d, d) with S "
        f"broadcasting to {tuple(batch_shape)} (one stack per trajectory; the head axis is required)."
    )


def broadcast_rows(base: np.ndarray, batch_shape: tuple, name: str, shape: tuple) -> np.ndarray:
    """``base`` (indices of shape ``shape[:-3]``) broadcast to ``batch_shape`` and flattened."""
    try:
        return np.broadcast_to(base, batch_shape).reshape(-1)
    except ValueError:
        raise _mismatch(name, shape, batch_shape) from None


def weight_rows(cache: dict, wbatch: tuple, batch_shape: tuple, name: str, shape: tuple) -> np.ndarray:
    """For each trajectory of ``batch_shape`` the flat index of its stack among ``wbatch``'s (cached)."""
    rows = cache.get(batch_shape)
    if rows is None:
        base = np.arange(math.prod(wbatch)).reshape(wbatch)
        rows = cache[batch_shape] = broadcast_rows(base, batch_shape, name, shape).reshape(batch_shape)
    return rows


def select_rows(out, rows, lead: int):
    """``out`` of shape ``L + S + (h, d, d)`` (``len(L) = lead``) -> ``L + (k, h, d, d)``: the
    stacks ``rows`` (flat indices into S); ``out`` itself for ``rows=None``."""
    if rows is None:
        return out
    flat = out.reshape(tuple(out.shape[:lead]) + (-1,) + tuple(out.shape[-3:]))
    if is_torch(out):
        rows = convert(rows, out, namespace(out).int64)
    return flat[(slice(None),) * lead + (rows,)]


def batch_of(t, heads) -> tuple:
    """The batch shape of per-trajectory times ``t`` broadcast with the stacks ``heads``'s."""
    try:
        return np.broadcast_shapes(np.shape(t), heads.batch)
    except ValueError:
        raise _mismatch(heads.name, heads.shape, np.shape(t)) from None


def check_batch(field, batch: tuple) -> None:
    """Raise if the field's per-trajectory P or U do not broadcast against the tokens' ``batch``."""
    if batch == field._batch_ok:
        return
    for hm in (field._P, field._U):
        if hm is not None and hm.batch:
            try:
                ok = np.broadcast_shapes(hm.batch, batch) == tuple(batch)
            except ValueError:
                ok = False
            if not ok:
                raise _mismatch(hm.name, hm.shape, batch)
    field._batch_ok = tuple(batch)


def _beta_mismatch(beta, batch_shape) -> ValidationError:
    return ValidationError(
        f"beta of shape {tuple(beta.shape)} does not broadcast against the batch shape "
        f"{tuple(batch_shape)} of the tokens (leading axes of y)."
    )


def take(field, index, batch_shape: tuple):
    """:meth:`AttentionField.take`: ``field`` for the trajectories ``index`` of the flattened
    ``batch_shape`` (its array beta and per-trajectory P, U taken along; ``field`` itself when it
    has none)."""
    scalar_beta = isinstance(field.beta, float)
    per_context = getattr(field, "context", None) is not None and field.context.ndim > 2
    if scalar_beta and not field.weights_batch and not per_context:
        return field
    new = copy.copy(field)
    new.__dict__.pop("_twin", None)
    new._work = threading.local()
    new._batch_ok = None
    if not scalar_beta:
        new.beta = _take_beta(field, index, batch_shape)
    if field.weights_batch:
        new._P = field._P.take(index, batch_shape)
        new._U = None if field._U is None else field._U.take(index, batch_shape)
        new.weights_batch = (new._P.shape if new._P.batch else new._U.shape)[:1]
        new._set_columns()
    if per_context:  # one cross-attention context per trajectory (riemattn.dynamics._parts)
        from ._parts import take_context
        new.context = take_context(field, index, batch_shape)
    # converted copies of the per-trajectory constants belong to the whole batch
    new._consts = {k: v for k, v in field._consts.items() if k[0] not in _PER_TRAJECTORY}
    return new


_PER_TRAJECTORY = ("beta_flat", "Pcols", "Ucols", "context")


def _take_beta(field, index, batch_shape):
    """The array beta broadcast to ``batch_shape``, flattened, at ``index`` (in the autograd graph
    for a differentiable beta; on the device of a tensor ``index``)."""
    beta = field.beta
    if requires_grad(beta):
        try:
            beta = beta.broadcast_to(batch_shape).reshape(-1)
        except RuntimeError:
            raise _beta_mismatch(field.beta, batch_shape) from None
        return beta[index.to(beta.device)] if is_torch(index) else beta[np.asarray(index)]
    try:
        beta = np.broadcast_to(beta, batch_shape).reshape(-1)
    except ValueError:
        raise _beta_mismatch(field.beta, batch_shape) from None
    if is_torch(index):  # per-trajectory beta on the device of the (compacted) batch
        key = ("beta_flat", str(index.device))
        full = field._consts.get(key)
        if full is None or full.shape != beta.shape:
            full = field._consts[key] = convert(beta, index, namespace(index).float64)
        return full[index]
    return beta[np.asarray(index)]


def beta_factor(field, batch_shape, y):
    """Array beta reshaped to scale scores [..., i, eta, j], or None for a scalar beta."""
    if isinstance(field.beta, float):
        return None
    if requires_grad(field.beta):
        beta = like_param(field.beta, y)
    else:
        beta = field.beta if type(y) is np.ndarray and type(field.beta) is np.ndarray else convert(field.beta, y)
    try:
        b = namespace(y).broadcast_to(beta, batch_shape)
    except (ValueError, RuntimeError):
        raise _beta_mismatch(field.beta, batch_shape) from None
    return b[..., None, None, None]
