"""Relative positional structure of the attention scores: ALiBi decay bias and rotary encodings (RoPE).

Private helper of :mod:`riemattn.dynamics.attention`. Tokens are indexed by their position
``i = 0, ..., l - 1`` in the sequence (the token axis of ``y``). Per head eta:

* **ALiBi** (Press, Smith & Lewis, ICLR 2022; the decay mask of Wu et al., ICML 2025): the score
  of (i, j) gets the bias ``-m_eta |i - j|`` added *after* beta,
  ``S_ij = beta y_i^T P_eta y_j - m_eta |i - j|`` (slopes ``m_eta >= 0``, one float shared by all
  heads or one per head).
* **RoPE** (Su et al., "RoFormer", 2021): ``S_ij = y_i^T beta P_eta R((j - i) theta) K_eta y_j``
  where ``P_eta`` plays ``Q_eta^T`` and ``K_eta`` the key matrix (default the identity, so that
  ``P = Q^T K`` for a commuting pair), and ``R(phi)`` the block rotation of R^d acting on the
  coordinate pairs ``(2k, 2k + 1)``, ``k < len(theta) <= d // 2``, by the angle ``phi theta_k``
  (``[[cos, -sin], [sin, cos]]``); coordinates beyond ``2 len(theta)`` are not rotated. Computed
  as ``(R(i theta) q_i)^T (R(j theta) k_j)`` with ``q_i = (beta P_eta)^T y_i`` and ``k_j = K_eta y_j``
  (``R(a)^T R(b) = R(b - a)``): two rotated projections and one product per head.

Both combine with masks, heads, time-varying P (and U) and every normalisation; positions make the
field depend on the order of the tokens (it is no longer permutation equivariant).
"""

from __future__ import annotations

import numpy as np

from .._backend import constant, namespace
from .._validation import as_float_array, check_finite
from ..errors import ValidationError

__all__ = ["alibi_bias", "check_alibi", "check_rope", "rope_scores"]


def check_alibi(alibi, h: int):
    """None, or the ALiBi slopes as a float array of shape (h,) (non-negative, finite)."""
    if alibi is None:
        return None
    m = check_finite(as_float_array(alibi, "alibi"), "alibi")
    if m.ndim > 1 or (m.ndim == 1 and m.shape[0] not in (1, h)):
        raise ValidationError(f"alibi must be a slope m >= 0 or one slope per head, shape ({h},); got shape {m.shape}.")
    if np.any(m < 0):
        raise ValidationError(f"alibi slopes must be >= 0 (the bias is -m |i - j|); got {m.tolist()}.")
    return np.broadcast_to(m, (h,)).astype(float)


def check_rope(rope, rope_key, d: int, h: int):
    """(theta, K): the RoPE frequencies, shape (k,) with 1 <= k <= d // 2, and the key matrices
    (h, d, d) or None (identity); (None, None) without RoPE."""
    if rope is None:
        if rope_key is not None:
            raise ValidationError("rope_key is the key matrix of rotary encodings: give the frequencies rope too.")
        return None, None
    theta = check_finite(as_float_array(rope, "rope"), "rope")
    if theta.ndim != 1 or not 1 <= theta.shape[0] <= d // 2:
        raise ValidationError(
            f"rope must be a 1-D array of k frequencies, 1 <= k <= d // 2 = {d // 2} (one per coordinate "
            f"pair); got shape {theta.shape}."
        )
    K = None
    if rope_key is not None:
        K = check_finite(as_float_array(rope_key, "rope_key"), "rope_key")
        if K.ndim == 2:
            K = K[None]
        if K.ndim != 3 or K.shape[1:] != (d, d) or K.shape[0] not in (1, h):
            raise ValidationError(f"rope_key must have shape ({d}, {d}) or ({h}, {d}, {d}); got {K.shape}.")
        K = np.broadcast_to(K, (h, d, d)).copy()
    return theta, K


def alibi_bias(cache: dict, slopes: np.ndarray, n: int, like):
    """The bias B[i, eta, j] = -m_eta |i - j|, shape (n, h, n), cached per n (and device)."""
    key = ("alibi", n)
    if key not in cache:
        dist = np.abs(np.arange(n)[:, None] - np.arange(n)[None, :]).astype(float)
        with np.errstate(over="ignore"):  # slopes near the float limit: -inf off the diagonal, the
            cache[key] = -(dist[:, None, :] * slopes[None, :, None])  # exact limit (only i = j attends)
    return constant(cache, ("alibi-dev", n), cache[key], like)


def _rotate(X, cos, sin, k: int, xp):
    """R(pos theta) applied to X[..., i, eta, :] (cos, sin of shape (n, 1, k))."""
    even, odd = X[..., 0:2 * k:2], X[..., 1:2 * k:2]
    rot = xp.stack([cos * even - sin * odd, sin * even + cos * odd], axis=-1)
    rot = xp.reshape(rot, tuple(rot.shape[:-2]) + (2 * k,))
    if X.shape[-1] == 2 * k:
        return rot
    return xp.concat([rot, X[..., 2 * k:]], axis=-1)


def rope_scores(cache: dict, y, P, K, theta: np.ndarray):
    """S[..., i, eta, j] = y_i^T P_eta R((j - i) theta) K_eta y_j for P of shape (..., h, d, d)
    (beta already folded in) and K (h, d, d) or None (identity)."""
    xp = namespace(y)
    n, k = y.shape[-2], theta.shape[0]
    if ("rope", n) not in cache:
        ang = np.arange(n, dtype=float)[:, None, None] * theta[None, None, :]
        cache[("rope", n)] = (np.cos(ang), np.sin(ang))
    cos, sin = (constant(cache, ("rope", n, w), a, y) for w, a in zip("cs", cache[("rope", n)]))
    q = xp.einsum("...hba,...ib->...iha", P, y)
    if K is None:
        kv = xp.broadcast_to(y[..., :, None, :], tuple(y.shape[:-1]) + (P.shape[-3], y.shape[-1]))
    else:
        kv = xp.einsum("hac,...jc->...jha", constant(cache, "rope_key", K, y), y)
    return xp.einsum("...iha,...jha->...ihj", _rotate(q, cos, sin, k, xp), _rotate(kv, cos, sin, k, xp))
