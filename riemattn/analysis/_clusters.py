"""Cluster counts of token configurations: :func:`riemattn.analysis.diagnostics.cluster_count`.

Private module of :mod:`riemattn.analysis.diagnostics` (which re-exports ``cluster_count``): the
counts by connected components (SciPy's ``scipy.sparse.csgraph``) and by rank (GLPR's published
code), on NumPy arrays and on tensors (on their device).
"""

from __future__ import annotations

import numpy as np

from .._backend import namespace
from .._validation import check_choice, check_nonnegative, check_token_array

__all__ = ["cluster_count"]


def _norm_last(x):
    """Euclidean norm over the last axis (NumPy's ``linalg.norm``; ``vector_norm`` on tensors)."""
    if type(x) is np.ndarray:
        return np.linalg.norm(x, axis=-1)
    return namespace(x).linalg.vector_norm(x, axis=-1)


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
    ``scipy.sparse.csgraph.connected_components`` on one block-diagonal graph of the whole batch;
    above 4096 tokens, on a grid of cells of side tol / sqrt(d) with a k-d tree, in O(l) memory
    (``riemattn.analysis._clusters._components_grid``; the same count).

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
    if l > _GRID_L:  # many tokens: no l x l distances
        return np.array([_components_grid(Y[k], tol) for k in range(m)], dtype=np.int64).reshape(batch)
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


#: Above this many tokens ``method="components"`` finds the clusters on a grid (:func:`_components_grid`):
#: O(l) memory instead of pdist's l (l - 1) / 2 distances (4096 tokens: 67 MB of distances).
_GRID_L = 4096


def _components_grid(Y, tol) -> int:
    """Connected components of the graph |y_i - y_j| <= tol of one configuration Y (l, d), without
    the l x l distances.

    Cells of side s = tol / sqrt(d) (integer coordinates floor(y / s)): two tokens of one cell are
    within tol, so each cell is connected. Two cells are joined when some pair of their tokens is
    within tol; such a pair puts their first tokens (the representatives) within 3 tol, so the
    candidate cell pairs come from a k-d tree of the representatives (scipy's cKDTree,
    ``query_pairs(3 tol)``) and each candidate is checked on its tokens' distances (computed as
    pdist does). The components of the cells' graph are SciPy's ``connected_components``. Memory
    and time grow with l and the number of candidate pairs, not l^2: 1e5 tokens on S^2 in ~3 s.
    """
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components
    from scipy.spatial import cKDTree

    l, d = Y.shape
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        grid = np.floor(Y / (tol / np.sqrt(d))) if tol > 0 else None
    if grid is None or not np.all(np.abs(grid) < 2.0**62):  # tol 0, or tiny against |y|: cells of equal tokens
        _, cell = np.unique(Y, axis=0, return_inverse=True)
    else:
        _, cell = np.unique(grid.astype(np.int64), axis=0, return_inverse=True)
    cell = cell.ravel()
    k = int(cell.max()) + 1
    if tol == 0 or k == 1:
        return k
    order = np.argsort(cell, kind="stable")
    starts = np.searchsorted(cell[order], np.arange(k + 1))
    pairs = cKDTree(Y[order[starts[:-1]]]).query_pairs(3.0 * tol, output_type="ndarray")
    keep = [np.zeros((0, 2), dtype=np.int64)]
    for c in range(0, len(pairs), _PAIRS):  # candidates in chunks: the work arrays stay O(_PAIRS)
        keep += _linked_cells(Y, order, starts, pairs[c:c + _PAIRS], tol)
    keep = np.concatenate(keep)
    graph = coo_matrix((np.ones(len(keep), dtype=np.int8), (keep[:, 0], keep[:, 1])), shape=(k, k))
    return int(connected_components(graph, directed=False)[0])


#: Candidate cell pairs checked at once by :func:`_components_grid` (work arrays of ~2^18 x 8 bytes
#: each). 10^5 tokens on S^2, tol 0.02: ~4.5e6 candidates; checked all at once they took 410 MB of
#: NumPy arrays at peak, in chunks 67 MB (benchmarks/diagnostics.py --large-n).
_PAIRS = 1 << 18


def _linked_cells(Y, order, starts, pairs, tol) -> list:
    """The candidate cell pairs (rows of ``pairs``) with two tokens within tol: a list of (m, 2) arrays."""
    from scipy.spatial import cKDTree

    d = Y.shape[1]
    a, b = pairs[:, 0], pairs[:, 1]
    na, nb = starts[a + 1] - starts[a], starts[b + 1] - starts[b]
    small = na * nb <= 256
    keep = []
    if small.any():  # every token pair of the small cell pairs at once
        pa, pb, sa, sb = a[small], b[small], na[small], nb[small]
        cnt = sa * sb
        first = np.cumsum(cnt) - cnt
        pid = np.repeat(np.arange(pa.size), cnt)
        off = np.arange(int(cnt.sum())) - first[pid]
        ia, ib = order[starts[pa][pid] + off // sb[pid]], order[starts[pb][pid] + off % sb[pid]]
        acc = np.zeros(ia.size)
        for c in range(d):  # squares summed in the order of the coordinates, as pdist does
            t = Y[ia, c] - Y[ib, c]
            acc += t * t
        near = np.minimum.reduceat(np.sqrt(acc), first) <= tol
        keep.append(np.stack([pa[near], pb[near]], axis=-1))
    for x, z in zip(a[~small], b[~small]):  # large cells: a k-d tree of one against the other
        A, B = Y[order[starts[x]:starts[x + 1]]], Y[order[starts[z]:starts[z + 1]]]
        dist, near = cKDTree(A).query(B, k=1, distance_upper_bound=2.0 * tol)
        hit = np.isfinite(dist)  # B's tokens with an A token close by: their distance as pdist computes it
        if hit.any() and np.sqrt(((A[near[hit]] - B[hit]) ** 2).sum(-1)).min() <= tol:
            keep.append(np.array([[x, z]]))
    return keep


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
