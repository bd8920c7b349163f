"""GLPR's models on the sphere: self-attention (SA) and unnormalized self-attention (USA).

Both are :class:`~riemattn.dynamics.attention.AttentionField` with Q = K = V = I and inverse
temperature beta; SA normalizes by the partition function, USA by the number of tokens.

References
----------
Geshkovski, Letrouit, Polyanskiy, Rigollet, "A mathematical perspective on Transformers",
equations (SA) and (USA).
"""

from __future__ import annotations

import numpy as np

from .._validation import check_memory, check_size
from ..errors import ValidationError
from .attention import AttentionField

__all__ = ["sa", "usa"]


def sa(beta, d: int, **kwargs) -> AttentionField:
    """GLPR's self-attention (SA) on S^(d-1): Q = K = V = I, plain softmax, inverse temperature beta.

    dx_i/dt = P_x_i^perp ( (1/Z_i) sum_j e^{beta <x_i, x_j>} x_j ),  Z_i = sum_j e^{beta <x_i, x_j>}.
    ``beta`` may be an array (one per trajectory, broadcasting over the batch axes). Other keyword
    arguments go to :class:`~riemattn.dynamics.attention.AttentionField` (``mask``, ``W``, ...);
    ``normalization`` may only be "softmax" (use :func:`usa` for "mean"). ``d``: 2 <= d <= 2**31 - 1,
    with the (d, d) matrix fitting in memory (ValidationError otherwise).

    References
    ----------
    Geshkovski, Letrouit, Polyanskiy, Rigollet, "A mathematical perspective on Transformers", eq. (SA).
    """
    _fixed(kwargs, "sa", "softmax", "usa() for 'mean'")
    return AttentionField(np.eye(_check_d(d)), beta=beta, normalization="softmax", **kwargs)


def usa(beta, d: int, *, rescaled: bool = False, **kwargs) -> AttentionField:
    """GLPR's unnormalized self-attention (USA): dx_i/dt = P^perp((1/n) sum_j e^{beta <x_i,x_j>} x_j).

    ``beta`` may be an array (one per trajectory, broadcasting over the batch axes).
    ``rescaled=True`` gives e^{-beta} USA, dx_i/ds = P^perp((1/n) sum_j e^{beta (<x_i,x_j> - 1)} x_j),
    finite at every beta (plain USA overflows past beta ~ 700): the same trajectories in the
    time s = e^beta t (docs/low_temperature.md). Other keyword arguments go to
    :class:`~riemattn.dynamics.attention.AttentionField`; ``normalization`` may only be "mean".
    ``d``: 2 <= d <= 2**31 - 1, with the (d, d) matrix fitting in memory (ValidationError otherwise).

    References
    ----------
    Geshkovski, Letrouit, Polyanskiy, Rigollet, "A mathematical perspective on Transformers", eq. (USA).
    """
    _fixed(kwargs, "usa", "mean", "sa() for 'softmax'")
    return AttentionField(np.eye(_check_d(d)), beta=beta, normalization="mean", rescaled=rescaled, **kwargs)


def _fixed(kwargs: dict, name: str, normalization: str, other: str) -> None:
    """Reject the keyword arguments that the model fixes (P; a normalisation other than its own)."""
    if "P" in kwargs:
        raise ValidationError(f"{name}() fixes P = I (scaled by beta); for another P use "
                              "riemattn.AttentionField(P, beta=beta, normalization=...).")
    value = kwargs.pop("normalization", normalization)
    if value != normalization:
        raise ValidationError(
            f"{name}() has normalization={normalization!r}, got normalization={value!r}: use {other}, or "
            f"riemattn.AttentionField(np.eye(d), beta=beta, normalization={value!r})."
        )


def _check_d(d) -> int:
    d = check_size(d, "d", 2, what=" (tokens in R^d on the sphere S^(d-1))")
    check_memory((d, d), "d")  # the field's (d, d) matrices
    return d
