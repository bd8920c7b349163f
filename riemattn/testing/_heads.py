"""Bounded time-varying head matrices P_eta(t), U_eta(t) (drawn by ``strategies.head_matrices``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class TimeVaryingHeads:
    """M_eta(t) = B_eta + sum_k A_{eta,k} sin(omega_k t + phi_k), shape (h, d, d): bounded and
    uniformly continuous in t.

    ``bound[eta]`` bounds the spectral norm of M_eta(t) for all t (the sum of the Frobenius norms
    of B_eta and of the A_{eta,k}). Called with a float t it returns (h, d, d); with an array of
    k times, (k, h, d, d) (so it also serves ``AttentionField(..., time_vectorized=True)``).
    With batch axes (``B`` of shape (..., h, d, d), ``A`` of shape (K, ..., h, d, d)) it is one
    stack per trajectory (per-trajectory weights, docs/index.md): (..., h, d, d) at a float t,
    (k, ..., h, d, d) at k times; ``bound`` then has shape (..., h).
    """

    B: np.ndarray  # (h, d, d) or (..., h, d, d)
    A: np.ndarray  # (K, h, d, d) or (K, ..., h, d, d)
    omega: np.ndarray  # (K,)
    phi: np.ndarray  # (K,)

    def __post_init__(self):
        self._A2 = self.A.reshape(self.A.shape[0], self.B.size)

    def __call__(self, t):
        if self._A2.shape[0] == 0:
            return self.B if np.ndim(t) == 0 else np.broadcast_to(self.B, np.shape(t) + self.B.shape)
        s = np.sin(np.multiply.outer(t, self.omega) + self.phi)
        return self.B + (s @ self._A2).reshape(np.shape(t) + self.B.shape)

    @property
    def bound(self) -> np.ndarray:
        """Upper bounds of |M_eta(t)|_2 over all t, shape (h,)."""
        return _frobenius(self.B) + np.sum(_frobenius(self.A), axis=0)


def _frobenius(M):
    """Frobenius norms over the last two axes, scaled first so that tiny entries do not underflow."""
    s = np.max(np.abs(M), axis=(-2, -1), initial=0.0)
    safe = np.where(s > 0, s, 1.0)
    return s * np.linalg.norm(M / safe[..., None, None], axis=(-2, -1))


def _sym(M):
    return 0.5 * (M + np.swapaxes(M, -1, -2))
