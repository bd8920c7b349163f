"""Diagnostics of token configurations: misalignment, Lyapunov functions, hemispheres, clusters.

All functions take tokens of shape ``(..., l, d)`` and are batched over the leading axes.
"""

from __future__ import annotations

import numpy as np

__all__ = ["misalignment", "hemisphere_lyapunov"]


def misalignment(y) -> np.ndarray:
    """Misalignment E(y) = 1 - (1/l) sum_i y_1^T y_i / (|y_1| |y_i|), shape (...).

    Zero exactly at consensus (all tokens positive multiples of y_1).

    References
    ----------
    Rodriguez Abella, Silvestre, Tabuada, "Consensus is all you get", ICML 2025, eq. (9).
    """
    y = np.asarray(y, dtype=float)
    u = y / np.linalg.norm(y, axis=-1, keepdims=True)
    return 1.0 - np.mean(np.einsum("...d,...id->...i", u[..., 0, :], u), axis=-1)


def hemisphere_lyapunov(y, v) -> np.ndarray:
    """Lyapunov function V(y) = max_i (1 - v^T y_i) of the hemisphere theorem, shape (...).

    References
    ----------
    Rodriguez Abella, Silvestre, Tabuada, "Consensus is all you get", ICML 2025, eq. (7).
    """
    y = np.asarray(y, dtype=float)
    return np.max(1.0 - y @ np.asarray(v, dtype=float), axis=-1)
