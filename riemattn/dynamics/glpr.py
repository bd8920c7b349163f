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

from .._validation import check_int
from .attention import AttentionField

__all__ = ["sa", "usa"]


def sa(beta, d: int, **kwargs) -> AttentionField:
    """GLPR's self-attention (SA) on S^(d-1): Q = K = V = I, plain softmax, inverse temperature beta.

    dx_i/dt = P_x_i^perp ( (1/Z_i) sum_j e^{beta <x_i, x_j>} x_j ),  Z_i = sum_j e^{beta <x_i, x_j>}.
    ``beta`` may be an array (one per trajectory, broadcasting over the batch axes).

    References
    ----------
    Geshkovski, Letrouit, Polyanskiy, Rigollet, "A mathematical perspective on Transformers", eq. (SA).
    """
    return AttentionField(np.eye(_check_d(d)), beta=beta, normalization="softmax", **kwargs)


def usa(beta, d: int, **kwargs) -> AttentionField:
    """GLPR's unnormalized self-attention (USA): dx_i/dt = P^perp((1/n) sum_j e^{beta <x_i,x_j>} x_j).

    ``beta`` may be an array (one per trajectory, broadcasting over the batch axes).

    References
    ----------
    Geshkovski, Letrouit, Polyanskiy, Rigollet, "A mathematical perspective on Transformers", eq. (USA).
    """
    return AttentionField(np.eye(_check_d(d)), beta=beta, normalization="mean", **kwargs)


def _check_d(d) -> int:
    return check_int(d, "d", 2, " (tokens in R^d on the sphere S^(d-1))")
