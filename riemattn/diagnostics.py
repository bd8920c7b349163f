r"""Diagnostics of token configurations: misalignment, Lyapunov functions, hemispheres, clusters.

All functions take tokens of shape ``(..., l, d)`` and are batched over the leading axes.

* :func:`misalignment` -- E(y) of ICML eq. (9); zero exactly at consensus.
* :func:`hemisphere_lyapunov` -- V(y) = max_i (1 - vᵀ y_i), ICML eq. (7).
* :func:`token_lyapunov` -- V_i = 1 - vᵀ y_i of Theorem 4.5 (V_1 is a Lyapunov function).
* :func:`in_common_hemisphere`, :func:`common_hemisphere` -- whether the tokens lie in one open
  hemisphere {x : vᵀ x > 0}, and the unit v with the largest margin (implemented in
  :mod:`riemattn.hemispheres`, re-exported here).
* :func:`cluster_count` -- tokens within a distance tolerance (transitively) form one cluster.
* :func:`consensus_distance`, :func:`is_consensus`, :func:`field_norm`, :func:`is_equilibrium`.
* :func:`wendel_probability` -- Wendel's probability that random points lie in a hemisphere.
"""

from __future__ import annotations

from math import comb
from numbers import Integral

import numpy as np

from ._validation import check_nonnegative, check_nonzero_tokens, check_token_array, check_vector
from .errors import InputTypeError, ValidationError
from .hemispheres import common_hemisphere, in_common_hemisphere

__all__ = [
    "misalignment",
    "hemisphere_lyapunov",
    "token_lyapunov",
    "in_common_hemisphere",
    "common_hemisphere",
    "cluster_count",
    "consensus_distance",
    "is_consensus",
    "field_norm",
    "is_equilibrium",
    "wendel_probability",
]


def misalignment(y) -> np.ndarray:
    """Misalignment E(y) = 1 - (1/l) sum_i y_1^T y_i / (|y_1| |y_i|), shape (...).

    Zero exactly at consensus (all tokens positive multiples of y_1).

    References
    ----------
    Rodriguez Abella, Silvestre, Tabuada, "Consensus is all you get", ICML 2025, eq. (9).
    """
    y = check_nonzero_tokens(check_token_array(y, "y"), "y")
    u = y / np.linalg.norm(y, axis=-1, keepdims=True)
    return 1.0 - np.mean(np.einsum("...d,...id->...i", u[..., 0, :], u), axis=-1)


def hemisphere_lyapunov(y, v) -> np.ndarray:
    """Lyapunov function V(y) = max_i (1 - v^T y_i) of the hemisphere theorem, shape (...).

    References
    ----------
    Rodriguez Abella, Silvestre, Tabuada, "Consensus is all you get", ICML 2025, eq. (7).
    """
    y = check_token_array(y, "y")
    v = check_vector(v, "v", y.shape[-1])
    return np.max(1.0 - y @ v, axis=-1)


def token_lyapunov(y, v) -> np.ndarray:
    """Per-token functions V_i(y) = 1 - v^T y_i, shape (..., l).

    For causal attention with symmetric U (Theorem 4.5) V_1 is non-increasing; V_i, i > 1, need
    not be monotone but tend to 0 when every v^T y_i(0) > 0.

    Parameters
    ----------
    y : array_like, shape (..., l, d)
    v : array_like, shape (d,)

    Returns
    -------
    ndarray, shape (..., l)

    References
    ----------
    Rodriguez Abella, Silvestre, Tabuada, "Consensus is all you get", ICML 2025, Theorem 4.5 and
    its proof (V_1 = 1 - y_1^T v).
    """
    y = check_token_array(y, "y")
    v = check_vector(v, "v", y.shape[-1])
    return 1.0 - y @ v


# ----------------------------------------------------------------------------------------------
# input helpers
# ----------------------------------------------------------------------------------------------
# ----------------------------------------------------------------------------------------------
# clusters, consensus, equilibria
# ----------------------------------------------------------------------------------------------
def cluster_count(y, tol: float) -> np.ndarray:
    r"""Number of clusters of each configuration, shape (...).

    Two tokens are linked when their Euclidean distance |y_i - y_j| is at most ``tol``; clusters
    are the connected components of this graph (single linkage: a chain of close tokens is one
    cluster).

    Parameters
    ----------
    y : array_like, shape (..., l, d)
    tol : float >= 0

    Returns
    -------
    ndarray of int, shape (...)

    References
    ----------
    Geshkovski, Letrouit, Polyanskiy, Rigollet, "A mathematical perspective on Transformers",
    section 6.3 and Figure 4 (counting clusters in the metastable regime).
    """
    y = check_token_array(y, "y")
    tol = check_nonnegative(tol, "tol")
    n = y.shape[-2]
    diff = y[..., :, None, :] - y[..., None, :, :]
    R = (np.linalg.norm(diff, axis=-1) <= tol).astype(float)  # reflexive adjacency
    # transitive closure by repeated squaring: paths of length up to 2^k
    for _ in range(int(np.ceil(np.log2(max(n, 2))))):
        R = ((R @ R) > 0).astype(float)
    # i is the representative of its component when no j < i is reachable from it
    earlier = np.tril(np.ones((n, n), dtype=bool), k=-1)
    roots = ~np.any((R > 0) & earlier, axis=-1)
    return np.sum(roots, axis=-1)


def consensus_distance(y) -> np.ndarray:
    """max_i |y_i - y_1| (Euclidean), shape (...): zero exactly on the consensus set C_l.

    References
    ----------
    Rodriguez Abella, Silvestre, Tabuada, "Consensus is all you get", ICML 2025, section 3
    (consensus set).
    """
    y = check_token_array(y, "y")
    return np.max(np.linalg.norm(y - y[..., :1, :], axis=-1), axis=-1)


def is_consensus(y, tol: float = 1e-8) -> np.ndarray:
    """Whether all tokens coincide up to ``tol``: consensus_distance(y) <= tol, shape (...).

    References
    ----------
    Rodriguez Abella, Silvestre, Tabuada, "Consensus is all you get", ICML 2025, section 3.
    """
    return consensus_distance(y) <= check_nonnegative(tol, "tol")


def field_norm(field, t: float, y) -> np.ndarray:
    """max_i |F_i(t, y)| (Euclidean) of a field's tangent vectors, shape (...).

    Parameters
    ----------
    field : callable (t, y) -> array of shape (..., l, d)
        e.g. an :class:`~riemattn.attention.AttentionField`.
    t : float
    y : array_like, shape (..., l, d)

    References
    ----------
    Rodriguez Abella, Silvestre, Tabuada, "Consensus is all you get", ICML 2025, eq. (6).
    """
    if not callable(field):
        raise InputTypeError(f"field must be callable as field(t, y), got {type(field).__name__}.")
    y = check_token_array(y, "y")
    F = np.asarray(field(t, y), dtype=float)
    if F.shape != y.shape:
        raise ValidationError(f"field(t, y) returned shape {F.shape}; expected the shape of y, {y.shape}.")
    return np.max(np.linalg.norm(F, axis=-1), axis=-1)


def is_equilibrium(field, t: float, y, tol: float = 1e-10) -> np.ndarray:
    """Whether y is an equilibrium of the field at time t: field_norm(field, t, y) <= tol, shape (...).

    References
    ----------
    Rodriguez Abella, Silvestre, Tabuada, "Consensus is all you get", ICML 2025, eq. (6).
    """
    return field_norm(field, t, y) <= check_nonnegative(tol, "tol")


# ----------------------------------------------------------------------------------------------
# Wendel's theorem
# ----------------------------------------------------------------------------------------------
def _wendel_scalar(N: int, dim: int) -> float:
    D = dim + 1  # ambient dimension
    return sum(comb(N - 1, k) for k in range(min(D - 1, N - 1) + 1)) / 2 ** (N - 1)


def wendel_probability(n_points, dim):
    r"""Probability that n i.i.d. uniform points on S^dim ⊂ R^(dim+1) lie in some open hemisphere.

    .. math:: p(N, D) = 2^{-(N-1)} \sum_{k=0}^{D-1} \binom{N-1}{k}, \qquad D = \mathrm{dim} + 1,

    with N = n_points and D the ambient dimension (Wendel 1962, eq. (1)).

    Parameters
    ----------
    n_points : int or array_like of int, >= 1
    dim : int or array_like of int, >= 0
        Dimension of the sphere (tokens in R^(dim+1)). Broadcast against ``n_points``.

    Returns
    -------
    float or ndarray
        p = 1 whenever n_points <= dim + 1.

    Notes
    -----
    Indexing: the sum runs to dim (= D - 1), not to dim - 1. ICML Remark 3.4 writes the sum to
    n - 1 for tokens on S^n; that is off by one (for two points on the circle S^1 it would give 1/2
    instead of 1) -- the Monte Carlo test in ``tests/test_diagnostics.py`` confirms the form above.

    References
    ----------
    J. G. Wendel, "A problem in geometric probability", Math. Scand. 11 (1962), eq. (1).
    Rodriguez Abella, Silvestre, Tabuada, "Consensus is all you get", ICML 2025, Remark 3.4.
    """
    N = np.asarray(n_points)
    dm = np.asarray(dim)
    for name, a, lo in (("n_points", N, 1), ("dim", dm, 0)):
        if not (np.issubdtype(a.dtype, np.integer) or (a.dtype == object and all(
                isinstance(x, Integral) and not isinstance(x, bool) for x in a.ravel()))):
            raise InputTypeError(f"{name} must be an integer (or array of integers), got dtype {a.dtype}.")
        if np.any(a < lo):
            raise ValidationError(f"{name} must be >= {lo}, got {a.min()!r}.")
    out = np.vectorize(_wendel_scalar, otypes=[float])(N, dm)
    return float(out) if out.ndim == 0 else out
