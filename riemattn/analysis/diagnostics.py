r"""Diagnostics of token configurations: misalignment, Lyapunov functions, hemispheres, clusters.

All functions take tokens of shape ``(..., l, d)`` and are batched over the leading axes.

Backends: :func:`misalignment`, :func:`hemisphere_lyapunov`, :func:`token_lyapunov`,
:func:`cluster_count`, :func:`consensus_distance`, :func:`is_consensus`, :func:`field_norm` and
:func:`is_equilibrium` accept NumPy arrays (or array_like) and PyTorch tensors (CPU or CUDA) and
return arrays of the same kind, on the tokens' device (float results in the tokens' dtype);
a NumPy ``v`` used with tensor tokens is converted to their kind. They do not read values back
to the host (on tensors, cluster_count's number of squarings depends on l only). The hemisphere tests
(:func:`in_common_hemisphere`, :func:`common_hemisphere`) solve linear programs with SciPy and
take NumPy arrays only.

* :func:`misalignment` -- E(y) of ICML eq. (9); zero exactly at consensus.
* :func:`hemisphere_lyapunov` -- V(y) = max_i (1 - vᵀ y_i), ICML eq. (7).
* :func:`token_lyapunov` -- V_i = 1 - vᵀ y_i of Theorem 4.5 (V_1 is a Lyapunov function).
* :func:`in_common_hemisphere`, :func:`common_hemisphere` -- whether the tokens lie in one open
  hemisphere {x : vᵀ x > 0}, and the unit v with the largest margin (implemented in
  :mod:`riemattn.analysis.hemispheres`, re-exported here).
* :func:`cluster_count` -- tokens within a distance tolerance (transitively) form one cluster
  (SciPy's connected components; or GLPR's matrix-rank count, ``method="rank"``).
* :func:`consensus_distance`, :func:`is_consensus`, :func:`field_norm`, :func:`is_equilibrium`.
* :func:`rollout`, :func:`rollout_ode` -- the cumulative attention (influence of each token on each
  other) through layers, with or without the residual, and along a continuous solve
  (implemented in ``riemattn.analysis._rollout``, re-exported here).
* :func:`leaders` -- the hardmax leaders: the tokens that are their own unique maximiser
  (implemented in ``riemattn.analysis._leaders``, re-exported here).
* :func:`wendel_probability` -- Wendel's probability that random points lie in a hemisphere.
* :func:`radii`, :func:`directions`, :func:`clustered_fraction` -- the radius |y_i|_W and the
  direction N_W(y_i) of residual-stream tokens (the state of :func:`riemattn.layernorm`'s
  Pre-LN, Peri-LN and Mix-LN models), and the fraction of pairs whose directions nearly agree.
  Direction diagnostics of such states act on ``directions(y)``: ``cluster_count(directions(y),
  tol)``; :func:`misalignment` already normalizes each token.
"""

from __future__ import annotations

from math import comb
from numbers import Integral

import numpy as np

from .._backend import convert, is_torch, namespace
from .._validation import (
    as_token_array,
    check_times,
    check_finite,
    check_nonnegative,
    check_nonzero_tokens,
    check_real,
    check_spd,
    check_token_array,
    check_vector,
)
from ..errors import InputTypeError, ValidationError
from ._clusters import _norm_last, cluster_count
from ._leaders import leaders
from ._pairs import chunked, pair_sum
from ._rollout import rollout, rollout_ode
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
    "leaders",
    "rollout",
    "rollout_ode",
    "wendel_probability",
    "radii",
    "directions",
    "clustered_fraction",
]




def _vector(v, y, name="v"):
    """A checked vector of shape (d,) of the kind, device and dtype of the tokens ``y``."""
    if not is_torch(v) and not is_torch(y):
        return check_vector(v, name, y.shape[-1])
    if is_torch(v):
        v = check_finite(as_token_array(v, name), name)
        if v.shape != (y.shape[-1],):
            # same wording as check_vector
            check_vector(np.zeros(tuple(v.shape)), name, y.shape[-1])
    else:
        v = check_vector(v, name, y.shape[-1])
    return v if (is_torch(v) and is_torch(y) and v.device == y.device and v.dtype == y.dtype) else convert(v, y)


def misalignment(y) -> np.ndarray:
    """Misalignment E(y) = 1 - (1/l) sum_i y_1^T y_i / (|y_1| |y_i|), shape (...).

    Zero exactly at consensus (all tokens positive multiples of y_1). ``y``: array_like or a
    PyTorch tensor; the result has its kind, device and dtype.

    References
    ----------
    Rodriguez Abella, Silvestre, Tabuada, "Consensus is all you get", ICML 2025, eq. (9).
    """
    y = check_nonzero_tokens(check_token_array(y, "y"), "y")
    xp = namespace(y)
    u = y / _norm_last(y)[..., None]
    return 1.0 - xp.mean(xp.einsum("...d,...id->...i", u[..., 0, :], u), axis=-1)


def hemisphere_lyapunov(y, v) -> np.ndarray:
    """Lyapunov function V(y) = max_i (1 - v^T y_i) of the hemisphere theorem, shape (...).

    References
    ----------
    Rodriguez Abella, Silvestre, Tabuada, "Consensus is all you get", ICML 2025, eq. (7).

    ``y`` (..., l, d) and ``v`` (d,): array_like or PyTorch tensors; the result has the kind,
    device and dtype of ``y``.
    """
    y = check_token_array(y, "y")
    v = _vector(v, y)
    return namespace(y).max(1.0 - y @ v, axis=-1)


def token_lyapunov(y, v) -> np.ndarray:
    """Per-token functions V_i(y) = 1 - v^T y_i, shape (..., l).

    For causal attention with symmetric U (Theorem 4.5) V_1 is non-increasing; V_i, i > 1, need
    not be monotone but tend to 0 when every v^T y_i(0) > 0.

    Parameters
    ----------
    y : array_like or tensor, shape (..., l, d)
    v : array_like or tensor, shape (d,)

    Returns
    -------
    ndarray or tensor, shape (..., l)
        Of the kind, device and dtype of ``y``.

    References
    ----------
    Rodriguez Abella, Silvestre, Tabuada, "Consensus is all you get", ICML 2025, Theorem 4.5 and
    its proof (V_1 = 1 - y_1^T v).
    """
    y = check_token_array(y, "y")
    return 1.0 - y @ _vector(v, y)


# ----------------------------------------------------------------------------------------------
# clusters, consensus, equilibria
# ----------------------------------------------------------------------------------------------
def consensus_distance(y) -> np.ndarray:
    """max_i |y_i - y_1| (Euclidean), shape (...): zero exactly on the consensus set C_l.

    ``y``: array_like or a PyTorch tensor; the result has its kind, device and dtype.

    References
    ----------
    Rodriguez Abella, Silvestre, Tabuada, "Consensus is all you get", ICML 2025, section 3
    (consensus set).
    """
    y = check_token_array(y, "y")
    return namespace(y).max(_norm_last(y - y[..., :1, :]), axis=-1)


def is_consensus(y, tol: float = 1e-8) -> np.ndarray:
    """Whether all tokens coincide up to ``tol``: consensus_distance(y) <= tol, shape (...).

    A bool array of the kind and device of ``y`` (array_like or PyTorch tensor).

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
        e.g. an :class:`~riemattn.dynamics.attention.AttentionField`. For tensor tokens it must return
        tensors (a NumPy result is converted to the tokens' kind).
    t : float
    y : array_like or tensor, shape (..., l, d)

    Returns
    -------
    ndarray or tensor, shape (...)
        Of the kind, device and dtype of ``y``.

    References
    ----------
    Rodriguez Abella, Silvestre, Tabuada, "Consensus is all you get", ICML 2025, eq. (6).
    """
    if not callable(field):
        raise InputTypeError(f"field must be callable as field(t, y), got {type(field).__name__}.")
    y = check_token_array(y, "y")
    check_times(t, "t")  # real and finite (passed on as given)
    F = field(t, y)
    if is_torch(y):
        F = F if is_torch(F) else convert(F, y)
    else:
        F = np.asarray(F, dtype=float)
    if tuple(F.shape) != tuple(y.shape):
        raise ValidationError(f"field(t, y) returned shape {tuple(F.shape)}; expected the shape of y, {tuple(y.shape)}.")
    return namespace(F).max(_norm_last(F), axis=-1)


def is_equilibrium(field, t: float, y, tol: float = 1e-10) -> np.ndarray:
    """Whether y is an equilibrium of the field at time t: field_norm(field, t, y) <= tol, shape (...).

    A bool array of the kind and device of ``y`` (array_like or PyTorch tensor).

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
    if D >= N:
        return 1.0
    if N <= _EXACT:  # exact integers: at most _EXACT terms of _EXACT bits
        return sum(comb(N - 1, k) for k in range(D)) / 2 ** (N - 1)
    # P(Binomial(N - 1, 1/2) <= D - 1) = I_{1/2}(N - D, D) (regularised incomplete beta): O(1) at any
    # N (the exact sum would need ~N-bit integers and D terms), relative error ~1e-15
    from scipy.special import betainc

    return float(betainc(float(N - D), float(D), 0.5))


#: The exact (integer) sum of wendel_probability up to this many points; the incomplete beta beyond.
_EXACT = 4096


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
        p = 1 whenever n_points <= dim + 1. Exact (integer sums) up to n_points = 4096; beyond, the
        binomial tail as a regularised incomplete beta (relative error ~1e-15), so that any size
        costs O(1).

    Notes
    -----
    Indexing: the sum runs to dim (= D - 1), not to dim - 1. ICML Remark 3.4 writes the sum to
    n - 1 for tokens on S^n; that is off by one (for two points on the circle S^1 it would give 1/2
    instead of 1) -- the Monte Carlo test in ``tests/analysis/test_diagnostics.py`` confirms the form above.

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
        if np.any(a < lo):  # the value as the user wrote it (-1, not np.int64(-1))
            which = "" if a.ndim == 0 else " (its smallest entry)"
            raise ValidationError(f"{name} must be >= {lo}, got {int(a.min())}{which}.")
    out = np.vectorize(_wendel_scalar, otypes=[float])(N, dm)
    return float(out) if out.ndim == 0 else out


def _W_norm(y, W):
    """|y_i|_W over the last axis, for checked tokens; W None is the identity."""
    if W is None:
        return _norm_last(y)
    xp = namespace(y)
    Wm = check_spd(W, "W", y.shape[-1])
    Wm = Wm if type(y) is np.ndarray else convert(Wm, y)
    return xp.sqrt(xp.sum(y * (y @ Wm), axis=-1))


def radii(y, W=None):
    """Radii r_i = |y_i|_W = sqrt(y_i^T W y_i) of the tokens, shape (..., l).

    Parameters
    ----------
    y : array_like or tensor, shape (..., l, d)
    W : array_like, shape (d, d), optional
        SPD matrix of the layer normalization (None: the Euclidean norm).

    References
    ----------
    Karagodin, Ge, Polyanskiy, Rigollet, "Normalization in attention dynamics", NeurIPS 2025,
    section 2 (x = r theta).
    """
    return _W_norm(check_token_array(y, "y"), W)


def directions(y, W=None):
    """Directions theta_i = N_W(y_i) = y_i / |y_i|_W on E_W, shape (..., l, d).

    Raises ValidationError for a token at the origin (it has no direction).

    References
    ----------
    Karagodin, Ge, Polyanskiy, Rigollet, "Normalization in attention dynamics", NeurIPS 2025,
    section 2 (x = r theta).
    """
    y = check_nonzero_tokens(check_token_array(y, "y"), "y")
    return y / _W_norm(y, W)[..., None]


def clustered_fraction(y, threshold: float = 0.999, W=None):
    """Fraction of pairs i < j whose directions satisfy <theta_i, theta_j>_W > threshold, shape (...).

    The clustering statistic of GLPR section 6.3 (with threshold 1 - eps) and of the phase
    diagrams of Karagodin et al. (threshold 0.999); 0 for a single token. Acts on the directions,
    so radii do not matter. Counted over tiles of 256 x 256 pairs: O(l) memory.

    Parameters
    ----------
    y : array_like or tensor, shape (..., l, d)
    threshold : float
    W : array_like, shape (d, d), optional
        SPD matrix of the inner product (None: the Euclidean one).

    Returns
    -------
    ndarray or tensor, shape (...)
        Of the kind, device and dtype of ``y``.

    References
    ----------
    Geshkovski, Letrouit, Polyanskiy, Rigollet, "A mathematical perspective on Transformers",
    section 6.3; Karagodin, Ge, Polyanskiy, Rigollet, "Normalization in attention dynamics",
    NeurIPS 2025 (phase diagrams).
    """
    threshold = check_real(threshold, "threshold")
    th = directions(y, W)
    xp = namespace(th)
    n = th.shape[-2]
    if n < 2:
        return xp.zeros_like(th[..., 0, 0])
    Wth = th  # <theta_i, theta_j>_W = <theta_i, (theta W)_j> (W symmetric)
    if W is not None:
        Wm = check_spd(W, "W", th.shape[-1])
        Wth = th @ (Wm if type(th) is np.ndarray else convert(Wm, th))
    # the pairs i < j in tiles (riemattn.analysis._pairs): O(l) memory; counts are exact integers
    # in float64 up to 2^53 pairs, so the tiling changes nothing but pairs at the threshold
    count = chunked(lambda a, b: pair_sum(a, b, lambda G: xp.astype(G > float(threshold), G.dtype), strict=True),
                    th, Wth)
    return count / (n * (n - 1) / 2)
