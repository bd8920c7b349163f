"""cluster_count by SciPy's connected components (issue 34, item 7): the same counts as the former
transitive closure by repeated squaring (kept below as the reference), on random batches and on
hand-made configurations; GLPR's rank count (method="rank") against their published definition;
merge heights and critical_points.clusters, which had the same patterns.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.cluster.hierarchy import linkage
from scipy.spatial.distance import pdist

from riemattn.analysis import critical_points, events
from riemattn.analysis.diagnostics import cluster_count
from riemattn.errors import ValidationError


def _closure_count(y, tol):
    """The former implementation (riemattn <= this change): closure of the <= tol graph by
    repeated squaring; a token is a root when no earlier token is reachable from it."""
    n = y.shape[-2]
    R = (np.linalg.norm(y[..., :, None, :] - y[..., None, :, :], axis=-1) <= tol).astype(float)
    for _ in range(int(np.ceil(np.log2(max(n, 2))))):
        R = ((R @ R) > 0).astype(float)
    earlier = np.tril(np.ones((n, n), dtype=bool), k=-1)
    return np.sum(~np.any((R > 0) & earlier, axis=-1), axis=-1)


@pytest.mark.parametrize("shape", [(40, 6, 3), (3, 5, 12, 2), (4, 17, 3), (2, 60, 5), (1, 200, 3), (7, 1, 4), (9, 8)])
def test_same_counts_as_the_closure_on_random_batches(shape):
    """Both sides of the small-l / pdist switch (l <= 16 batched, l > 16 one configuration at a
    time), tolerances from "nothing linked" to "everything linked"."""
    rng = np.random.default_rng(sum(shape))
    y = rng.standard_normal(shape)
    for tol in (0.0, 0.2, 0.5, 1.0, 2.0, 10.0):
        want = _closure_count(y, tol)
        got = cluster_count(y, tol)
        assert got.shape == want.shape and got.dtype == np.int64
        np.testing.assert_array_equal(got, want)


def _chain(l, gap, d=3):
    y = np.zeros((l, d))
    y[:, 0] = gap * np.arange(l)
    return y


@pytest.mark.parametrize("l", [11, 40])
def test_hand_made_configurations(l):
    # a chain of equally spaced tokens: one cluster when the gap is linked (single linkage)
    chain = _chain(l, 0.1)
    assert cluster_count(chain, 0.15) == 1 and cluster_count(chain, 0.05) == l
    # two chains far apart, in one batch with a shuffled copy (the count ignores the order)
    two = np.concatenate([_chain(l // 2, 0.1), _chain(l - l // 2, 0.1) + [5.0, 0.0, 0.0]])
    perm = np.random.default_rng(0).permutation(l)
    np.testing.assert_array_equal(cluster_count(np.stack([two, two[perm]]), 0.15), [2, 2])
    # coincident tokens: one cluster, even at tol = 0 (distance 0 <= 0)
    x = np.array([0.0, 0.6, 0.8])
    assert cluster_count(np.tile(x, (l, 1)), 0.0) == 1
    # antipodal tokens at distance 2: linked only from tol = 2 on
    anti = np.array([x, -x] * (l // 2))
    assert cluster_count(anti, 1.999) == 2 and cluster_count(anti, 2.0) == 1


def test_empty_batches_and_batch_shape():
    assert cluster_count(np.zeros((0, 5, 3)), 0.1).shape == (0,)
    assert cluster_count(np.zeros((2, 0, 40, 3)), 0.1).shape == (2, 0)
    assert cluster_count(np.zeros((4, 3)), 0.1).shape == ()
    y = np.random.default_rng(1).standard_normal((2, 3, 20, 3))
    np.testing.assert_array_equal(cluster_count(y, 1.0), _closure_count(y, 1.0))
    with pytest.raises(ValidationError, match="method must be one of"):
        cluster_count(y, 1.0, method="linkage")


def test_tensor_input_gives_the_same_counts():
    y = np.random.default_rng(2).standard_normal((5, 30, 3))
    for method in ("components", "rank"):
        got = cluster_count(torch.tensor(y), 0.8, method=method)
        assert isinstance(got, torch.Tensor) and got.dtype == torch.int64
        np.testing.assert_array_equal(got.numpy(), cluster_count(y, 0.8, method=method))


# ----------------------------------------------------------------------------------------------
# GLPR's rank count
def test_rank_count_of_a_path_follows_the_path_graph_spectrum():
    """The chain's 0/1 matrix is I + A(P_l), eigenvalues 1 + 2 cos(k pi / (l + 1)), k = 1..l: one
    is zero exactly when 3 divides l + 1 (cos = -1/2), so the rank is l - 1 then, else l; the
    components count one cluster."""
    for l in (5, 8, 11, 12, 17, 20):
        chain = _chain(l, 0.1)
        assert cluster_count(chain, 0.15) == 1
        assert cluster_count(chain, 0.15, method="rank") == (l - 1 if (l + 1) % 3 == 0 else l)


def test_rank_count_equals_components_for_clique_clusters():
    rng = np.random.default_rng(3)
    centres = rng.standard_normal((4, 3)) * 10
    y = centres[rng.integers(0, 4, (6, 30))] + 1e-3 * rng.standard_normal((6, 30, 3))
    np.testing.assert_array_equal(cluster_count(y, 0.1, method="rank"), cluster_count(y, 0.1))


def test_rank_count_is_glprs_published_definition():
    """borjanG/2023-transformers-rotf, phase-diagrams.py, count_clusters: T1 = float32 [<x_i, x_j>
    > 0.9999], torch.linalg.matrix_rank(T1) (default tolerance). On unit vectors <x_i, x_j> >
    1 - eps is |x_i - x_j| < sqrt(2 eps); configurations near clusters (chains do form)."""
    rng = np.random.default_rng(4)
    centres = rng.standard_normal((8, 5, 2))
    x = centres[np.arange(8)[:, None], rng.integers(0, 5, (8, 32))] / 1.0
    x /= np.linalg.norm(x, axis=-1, keepdims=True)
    x = x + 0.006 * rng.standard_normal(x.shape)
    x /= np.linalg.norm(x, axis=-1, keepdims=True)
    IP = torch.tensor(x) @ torch.tensor(x).transpose(1, 2)
    theirs = [int(torch.linalg.matrix_rank((IP[i] > 0.9999).type(torch.FloatTensor))) for i in range(8)]
    ours = cluster_count(x, np.sqrt(2e-4), method="rank")
    np.testing.assert_array_equal(ours, theirs)
    assert np.any(ours != cluster_count(x, np.sqrt(2e-4)))  # the example separates the two counts


# ----------------------------------------------------------------------------------------------
# the same patterns elsewhere
@pytest.mark.parametrize("l", [7, 40])
def test_merge_heights_are_single_linkage_on_both_paths(l):
    rng = np.random.default_rng(5)
    y = rng.standard_normal((6, l, 3))
    y /= np.linalg.norm(y, axis=-1, keepdims=True)
    H = events.merge_heights(y)
    ref = np.array([np.sort(linkage(pdist(x), "single")[:, 2])[::-1] for x in y])
    np.testing.assert_allclose(H, ref, rtol=0, atol=1e-12)  # Gram-formula distances: ~1e-14 error
    np.testing.assert_allclose(events.merge_heights(torch.tensor(y)).numpy(), H, rtol=0, atol=1e-12)
    for tol in (0.3, 0.8):
        np.testing.assert_array_equal(1 + (H > tol).sum(-1), cluster_count(y, tol))
    assert events.merge_heights(y[:0]).shape == (0, l - 1)


def test_critical_point_clusters_label_by_first_appearance():
    x = np.array([[0.0, 1.0], [1.0, 0.0], [1.0, 1e-7], [0.0, 1.0], [0.0, -1.0], [1.0, 2e-7]])
    np.testing.assert_array_equal(critical_points.clusters(x, 1e-5), [0, 1, 1, 0, 2, 1])
    chain = _chain(30, 1e-6, d=2)
    np.testing.assert_array_equal(critical_points.clusters(chain, 1.5e-6), np.zeros(30, int))


# ---------------------------------------------------------------------------------------------
# many tokens: the grid path (issue 57, item 4), O(l) memory
# ---------------------------------------------------------------------------------------------
def _configs(rng, l, d):
    u = rng.standard_normal((l, d))
    yield "uniform", u / np.linalg.norm(u, axis=1, keepdims=True)
    c = rng.standard_normal((7, d))
    yield "clusters", c[rng.integers(7, size=l)] + 1e-3 * rng.standard_normal((l, d))
    yield "chain", np.outer(np.arange(l) * 0.01, np.ones(d) / np.sqrt(d)) + 1e-4 * rng.standard_normal((l, d))
    yield "duplicates", np.repeat(rng.standard_normal((l // 4, d)), 4, axis=0)[rng.permutation(l // 4 * 4)]


@pytest.mark.parametrize("d", [2, 3, 8])
def test_grid_components_agree_with_the_distance_matrix(d):
    """The grid's count equals the pdist graph's (every distance computed), on uniform, clustered,
    chain-like and duplicated tokens, tol from 0 to beyond the diameter."""
    from riemattn.analysis._clusters import _components_grid

    rng = np.random.default_rng(d)
    for name, Y in _configs(rng, 600, d):
        for tol in (0.0, 1e-300, 1e-4, 1e-2, 0.05, 0.3, 100.0):
            want = int(cluster_count(Y, tol))  # 600 tokens: the pdist path
            assert _components_grid(Y, tol) == want, (name, tol)


def test_many_tokens_take_the_grid_path_in_linear_memory():
    """20 000 tokens: pdist would hold 2e8 distances (1.6 GB); the grid path stays within a few MB of
    NumPy arrays (tracemalloc counts NumPy's allocations), and its count equals the graph of every
    pair within tol found by scipy's k-d tree (an independent reference)."""
    import tracemalloc

    from scipy.sparse import coo_matrix
    from scipy.spatial import cKDTree
    from scipy.sparse.csgraph import connected_components

    rng = np.random.default_rng(1)
    l, tol = 20_000, 0.02
    y = rng.standard_normal((l, 3))
    y /= np.linalg.norm(y, axis=1, keepdims=True)
    tracemalloc.start()
    got = int(cluster_count(y, tol))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    # the arrays are O(l): tokens, cells, candidate pairs (~30 per token at this density) -- 100 bytes a
    # token and pair is ~60 MB; the l x l distances would be 1.6 GB
    assert peak < 64e6, peak
    pairs = cKDTree(y).query_pairs(tol, output_type="ndarray")  # reference: scipy's k-d tree over all pairs
    graph = coo_matrix((np.ones(len(pairs)), (pairs[:, 0], pairs[:, 1])), shape=(l, l))
    assert got == connected_components(graph, directed=False)[0]
