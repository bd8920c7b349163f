"""Bounded time-varying head matrices P_eta(t), U_eta(t) (drawn by ``strategies.head_matrices``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ValidationError


@dataclass
class TimeVaryingHeads:
    """M_eta(t) = B_eta + sum_k A_{eta,k} sin(omega_k t + phi_k), shape (h, d, d): bounded and
    uniformly continuous in t.

    ``bound[eta]`` bounds the spectral norm of M_eta(t) for all t (the sum of the Frobenius norms
    of B_eta and of the A_{eta,k}). Every entry satisfies |M(t)_ij| <= |B_ij| + sum_k |A_k,ij|
    (``entry_bound``) for all t. Called with a float t it returns (h, d, d); with an array of k
    times, (k, h, d, d) (so it also serves ``AttentionField(..., time_vectorized=True)``).

    ``symmetric=True`` (B and every A_k must then be exactly symmetric, else ValidationError)
    returns exactly symmetric matrices at every t: the value is symmetrized, (M + M^T) / 2, after
    the sum, because the rounding of ``sin(omega t + phi) @ A`` depends on the BLAS kernel and on
    the position of an entry (AVX-512 kernels rounded mirrored entries differently). The average
    of two floats is symmetric in them, so the result is symmetric bit for bit, and it changes
    the exact sum by at most its rounding.
    """

    B: np.ndarray  # (h, d, d)
    A: np.ndarray  # (K, h, d, d)
    omega: np.ndarray  # (K,)
    phi: np.ndarray  # (K,)
    symmetric: bool = False

    def __post_init__(self):
        if self.symmetric and not (_is_symmetric(self.B) and _is_symmetric(self.A)):
            raise ValidationError("TimeVaryingHeads(symmetric=True) needs exactly symmetric B and A_k.")
        self._A2 = self.A.reshape(self.A.shape[0], self.B.size)

    def __call__(self, t):
        if self._A2.shape[0] == 0:
            return self.B if np.ndim(t) == 0 else np.broadcast_to(self.B, np.shape(t) + self.B.shape)
        # |sin| <= 1 is what the entry bound uses; the clip guards it against any libm's rounding
        s = np.clip(np.sin(np.multiply.outer(t, self.omega) + self.phi), -1.0, 1.0)
        out = self.B + (s @ self._A2).reshape(np.shape(t) + self.B.shape)
        return _sym(out) if self.symmetric else out

    @property
    def bound(self) -> np.ndarray:
        """Upper bounds of |M_eta(t)|_2 over all t, shape (h,)."""
        return _frobenius(self.B) + np.sum(_frobenius(self.A), axis=0)

    @property
    def entry_bound(self) -> np.ndarray:
        """|B| + sum_k |A_k|: entrywise bounds of |M(t)| over all t, shape (h, d, d)."""
        return np.abs(self.B) + np.sum(np.abs(self.A), axis=0)


def _frobenius(M):
    """Frobenius norms over the last two axes, scaled first so that tiny entries do not underflow."""
    s = np.max(np.abs(M), axis=(-2, -1), initial=0.0)
    safe = np.where(s > 0, s, 1.0)
    return s * np.linalg.norm(M / safe[..., None, None], axis=(-2, -1))


def _sym(M):
    return 0.5 * (M + np.swapaxes(M, -1, -2))


def _is_symmetric(M):
    return bool(np.array_equal(M, np.swapaxes(M, -1, -2)))
