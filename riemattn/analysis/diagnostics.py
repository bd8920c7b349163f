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
    check_finite,
    check_nonnegative,
    check_choice,
    check_nonzero_tokens,
    check_real,
    check_spd,
    check_token_array,
    check_vector,
)
from ..errors import InputTypeError, ValidationError
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
    "radii",
    "directions",
    "clustered_fraction",
]


def _norm_last(x):
    """Euclidean norm over the last axis (NumPy's ``linalg.norm``; ``vector_norm`` on tensors)."""
    if type(x) is np.ndarray:
        return np.linalg.norm(x, axis=-1)
    return namespace(x).linalg.vector_norm(x, axis=-1)


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
# input helpers
# ----------------------------------------------------------------------------------------------
# ----------------------------------------------------------------------------------------------
# clusters, consensus, equilibria
# ----------------------------------------------------------------------------------------------
#: GLPR's published code counts clusters by the rank of the 0/1 matrix in float32 with PyTorch's
#: default tolerance: singular values above sigma_max * l * eps(float32) count.
_RANK_RTOL_EPS = float(np.finfo(np.float32).eps)
#: Elements of the largest pairwise-difference block (configurations x rows x l x d) made at once.
_BLOCK = 1 << 22


def cluster_count(y, tol: float, *, method: str = "components") -> np.ndarray:
    r"""Number of clusters of each configuration, shape (...).

    Two tokens are linked when their Euclidean distance |y_i - y_j| is at most ``tol``.

    ``method="components"`` (default): clusters are the connected components of this graph
    (single linkage: a chain of close tokens is one cluster), counted with SciPy's
    ``scipy.sparse.csgraph.connected_components`` on one block-diagonal graph of the whole batch.

    ``method="rank"``: the rank of the l x l 0/1 matrix A_ij = [|y_i - y_j| <= tol], singular
    values above sigma_max l eps(float32) counted -- the count of GLPR's published code
    (``torch.linalg.matrix_rank`` of the float32 matrix [<x_i, x_j> > 0.9999], i.e. tol =
    sqrt(2 * 1e-4) on the unit sphere). A is block diagonal over the components, each block has
    rank >= 1, so components <= rank <= l: the two counts agree when every component is a clique
    (tight, well separated clusters); a chain of close tokens that is not a clique counts more
    than once by rank. See docs/diagnostics.md.

    Parameters
    ----------
    y : array_like or tensor, shape (..., l, d)
    tol : float >= 0
    method : {"components", "rank"}

    Returns
    -------
    ndarray or tensor of int64, shape (...)
        A tensor on ``y``'s device for tensor input (computed there, without reading values back
        to the host: the components by a transitive closure with ceil(log2 l) squarings).

    References
    ----------
    Geshkovski, Letrouit, Polyanskiy, Rigollet, "A mathematical perspective on Transformers",
    section 6.3 and Figure 4 (counting clusters in the metastable regime); their code,
    github.com/borjanG/2023-transformers-rotf, ``phase-diagrams.py`` (the rank count).
    """
    y = check_token_array(y, "y")
    tol = check_nonnegative(tol, "tol")
    method = check_choice(method, "method", ("components", "rank"))
    if type(y) is not np.ndarray:
        return _cluster_count_tensor(y, tol, method)
    batch, (l, d) = y.shape[:-2], y.shape[-2:]
    Y = np.ascontiguousarray(y.reshape((-1, l, d)))
    m = Y.shape[0]
    if m == 0:
        return np.zeros(batch, dtype=np.int64)
    if method == "rank":
        counts = np.empty(m, dtype=np.int64)
        step = max(1, _BLOCK // (l * l))
        for a in range(0, m, step):
            c, i, j = _links(Y[a:a + step], tol)
            A = np.broadcast_to(np.eye(l), (min(step, m - a), l, l)).copy()
            A[c, i, j] = A[c, j, i] = 1.0
            s = np.abs(np.linalg.eigvalsh(A))  # A is symmetric: its singular values
            counts[a:a + step] = np.sum(s > s.max(axis=-1, keepdims=True) * l * _RANK_RTOL_EPS, axis=-1)
        return counts.reshape(batch)
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components

    c, i, j = _links(Y, tol)
    rows = c * l + i  # ascending: one CSR matrix of the block-diagonal graph of the whole batch
    indptr = np.zeros(m * l + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=m * l), out=indptr[1:])
    graph = csr_matrix((np.ones(rows.size, dtype=np.int8), c * l + j, indptr), shape=(m * l, m * l))
    _, labels = connected_components(graph, directed=True, connection="weak")
    _, first = np.unique(labels, return_index=True)  # the first token of each component
    return np.bincount(first // l, minlength=m).astype(np.int64).reshape(batch)


#: Up to this many tokens the links of a batch are computed at once; above, one configuration at
#: a time with SciPy's pdist (measured: faster from l = 16 on; 40x at l = 200).
_SMALL_L = 16


def _links(Y, tol):
    """The pairs i < j with |y_i - y_j| <= tol of each configuration of Y (m, l, d): arrays
    (configuration, i, j) in ascending (configuration, i, j) order.

    Distances as SciPy's ``pdist`` computes them: sqrt of the sum of squared differences, summed
    in the order of the coordinates (a distance exactly at ``tol`` can round differently in
    another summation order).
    """
    from scipy.spatial.distance import pdist

    m, l, d = Y.shape
    iu, ju = np.triu_indices(l, 1)
    if l > _SMALL_L:
        parts = [(k, np.flatnonzero(pdist(Y[k]) <= tol)) for k in range(m)]
        c = np.concatenate([np.full(p.size, k, dtype=np.int64) for k, p in parts])
        p = np.concatenate([p for _, p in parts])
        return c, iu[p], ju[p]
    upper = np.triu(np.ones((l, l), dtype=bool), 1)
    out = []
    step = max(1, _BLOCK // (l * l))
    for a in range(0, m, step):
        acc = np.zeros((min(step, m - a), l, l))
        for k in range(d):
            t = Y[a:a + step, :, None, k] - Y[a:a + step, None, :, k]
            acc += t * t
        c, i, j = np.nonzero((np.sqrt(acc) <= tol) & upper)
        out.append((c + a, i, j))
    return tuple(np.concatenate([o[n] for o in out]).astype(np.int64) for n in range(3))


def _cluster_count_tensor(y, tol, method):
    """cluster_count on tensors, on their device: no value is read back to the host."""
    xp = namespace(y)
    n = y.shape[-2]
    diff = y[..., :, None, :] - y[..., None, :, :]
    R = xp.astype(_norm_last(diff) <= tol, y.dtype)
    if method == "rank":
        import torch

        rtol = n * _RANK_RTOL_EPS
        return xp.astype(torch.linalg.matrix_rank(R, rtol=rtol, hermitian=True), xp.int64)
    # transitive closure by repeated squaring: paths of length up to 2^k (the loop count depends on
    # n only); i is the representative of its component when no j < i is reachable from it
    for _ in range(int(np.ceil(np.log2(max(n, 2))))):
        R = xp.astype((R @ R) > 0, y.dtype)
    idx = xp.arange(n, device=y.device)
    earlier = idx[:, None] > idx[None, :]
    roots = ~xp.any((R > 0) & earlier, axis=-1)
    return xp.sum(xp.astype(roots, xp.int64), axis=-1)


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
    so radii do not matter.

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
    if W is not None:
        Wm = check_spd(W, "W", th.shape[-1])
        G = th @ ((Wm if type(th) is np.ndarray else convert(Wm, th)) @ th.swapaxes(-1, -2))
    else:
        G = th @ th.swapaxes(-1, -2)
    if n < 2:
        return xp.zeros_like(th[..., 0, 0])
    iu = np.triu_indices(n, k=1)
    upper = G[..., iu[0], iu[1]] if xp is np else G[..., convert(iu[0], th, xp.int64), convert(iu[1], th, xp.int64)]
    return xp.mean(xp.astype(upper > float(threshold), th.dtype), axis=-1)
