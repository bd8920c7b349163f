"""The mask, bias and update parts of an attention field (private helper of the attention field).

:mod:`riemattn.dynamics.masks` and :mod:`riemattn.dynamics.biases` define the parts; here they are
checked against the field (heads, manifold) and laid out for the scores ``S[..., i, eta, j]``.
"""

from __future__ import annotations

import numpy as np

from .._backend import constant
from .._validation import check_choice
from ..errors import ValidationError
from .biases import as_bias
from .masks import as_mask

__all__ = ["UPDATES", "configure_parts", "admissible", "bias_scores"]

#: "centred": sum_j alpha_ij U (y_j - y_i) on flat space (the tangent update on a manifold);
#: "uncentred": sum_j alpha_ij U y_j on flat space (Sinkformers' x' = K W_V x, the SAN layer).
UPDATES = ("centred", "uncentred")


def configure_parts(field, mask, bias, update) -> None:
    """Set ``field.mask`` ("full", "causal" or a Mask), ``field.bias`` (None or a Bias) and
    ``field.centred``; ``field._P.h`` and ``field.flat`` already set."""
    part = as_mask(mask) if not isinstance(mask, str) else None
    if isinstance(mask, str):
        check_choice(mask, "mask", ("full", "causal"))  # the old message for a bad string
    field.mask = mask if part is None else (part.builtin or part)
    field.bias = as_bias(bias)
    for what, p in (("mask", part), ("bias", field.bias)):
        heads = getattr(p, "heads", None) if p is not None else None
        if heads is None and p is not None and getattr(p, "_fixed", None) is not None and p._fixed.ndim == 3:
            heads = p._fixed.shape[0]
        if heads not in (None, 1, field._P.h):
            raise ValidationError(f"{what} {p!r} has {heads} heads but P has {field._P.h}; give (l, l) or one "
                                  f"(l, l) per head of P.")
    update = check_choice(update, "update", UPDATES)
    if update == "uncentred" and not field.flat:
        raise ValidationError("update='uncentred' (sum_j alpha_ij U y_j) needs W='flat': on a sphere or an "
                              "ellipsoid the update is projected on the tangent space, which already removes "
                              "the component along y_i.")
    field.centred = update == "centred"


def _layout(B: np.ndarray) -> np.ndarray:
    """(l, l) -> [i, 1, j]; (h, l, l) -> [i, eta, j]."""
    return B[:, None, :] if B.ndim == 2 else np.swapaxes(B, 0, 1)


def admissible(field, n: int, like=None):
    """The field's mask as [i, eta | 1, j]: bool for NumPy; 0/1 in ``like``'s dtype for tensors."""
    key = ("mask", n)
    if key not in field._tril:
        field._tril[key] = np.ascontiguousarray(_layout(field.mask.array(n)))
    if like is None or type(like) is np.ndarray:
        return field._tril[key]
    return constant(field._consts, ("mask-dev", n), field._tril[key].astype(float), like)


def bias_scores(field, t, n: int, y):
    """The bias [..., i, eta | 1, j] at time(s) t (one per trajectory for an array t)."""
    b = field.bias
    if not b.time_dependent:
        return constant(field._consts, ("bias", n), np.ascontiguousarray(_layout(b.array(n))), y)
    if np.ndim(t) == 0:
        return constant({}, "bias", _layout(b.array(n, float(t))), y)
    t = np.asarray(t, dtype=float)
    out = np.stack([_layout(b.array(n, s)) for s in t.ravel()]).reshape(t.shape + (n, -1, n))
    return constant({}, "bias", out, y)
