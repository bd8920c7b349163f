"""Issue 57, item 4: the diagnostics at many tokens without l x l memory.

The double sums (energy, energy_weights, potential, normalizers, clustered_fraction) run over tiles
of pairs (``riemattn.analysis._pairs``); misalignment, the Lyapunov functions and the consensus
distance are O(l) by construction. Checked here: agreement with the l x l formulas (written out
below as they stood before tiling) on small and multi-tile sizes and at the edges, and the memory
of NumPy arrays (tracemalloc counts NumPy's allocations) at l = 20 000, where one l x l float64
matrix is 3.2 GB.

Tolerances. The tiled and the l x l sums add the same N = l^2 terms t_k in different orders (the
tiles above the diagonal counted twice, i.e. t_ij + t_ji replaced by 2 t_ij). Any order of a float
sum is within (N - 1) eps sum_k |t_k| of the exact sum, so two orders differ by at most
2 N eps sum_k |t_k|; <x_i, x_j> and <x_j, x_i> (d products each) differ by at most d eps |x_i| |x_j|,
which moves exp(beta <x_i, x_j>) by a relative beta d eps max|x|^2. Hence
|tiled - full| <= (2 N + beta d max|x|^2) eps sum_k |t_k| (scaled as the result is), the bound used
below (actual differences are a few eps: the sums are pairwise).
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from riemattn import diagnostics as dg
from riemattn.analysis import _pairs
from riemattn.analysis.gradients import energy, energy_weights, normalizers, potential
from riemattn.dynamics._softmax import RESCALED_ROUNDING

EPS = np.finfo(float).eps


# -- the l x l formulas (the code before tiling) -----------------------------------------------
def _exponents(G, beta, rescaled):
    if not rescaled:
        return beta * G
    with np.errstate(over="ignore"):
        return np.where(np.abs(G - 1.0) <= RESCALED_ROUNDING, 0.0, beta * (G - 1.0))


def _terms_full(x, beta, centered=False, rescaled=False):
    G = x @ np.swapaxes(x, -1, -2)
    if beta == 0.0:
        return G
    with np.errstate(over="ignore"):
        S = _exponents(G, beta, rescaled)
        if centered:
            return (np.exp(S) - np.exp(-beta)) if rescaled else np.expm1(S)
        return np.exp(S)


def _energy_full(x, beta, centered=False, rescaled=False, log=False):
    n = x.shape[-2]
    if log:
        S = _exponents(x @ np.swapaxes(x, -1, -2), beta, True)
        m = S.max(axis=(-2, -1))
        lse = m + np.log(np.exp(S - m[..., None, None]).sum(axis=(-2, -1)))
        return lse - np.log(2.0 * n * n) - np.log(beta) + (0.0 if rescaled else beta)
    T = _terms_full(x, beta, centered, rescaled)
    return T.sum(axis=(-2, -1)) / (2.0 * n * n) / (beta if beta else 1.0)


def _bound(x, beta, T, scale):
    """(2 N + beta d max|x|^2) eps sum|t| times the result's scale (module docstring)."""
    n, d = x.shape[-2:]
    big = float(np.max(np.sum(x * x, axis=-1), initial=0.0))
    return (2 * n * n + beta * d * big + 4) * EPS * np.abs(T).sum(axis=(-2, -1)) * scale


def _sphere(rng, shape):
    x = rng.standard_normal(shape)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def _configs(rng):
    """Random, coincident, antipodal, one token, batched, empty batch, and multi-tile sizes."""
    e = np.eye(3)
    c = _sphere(rng, (_pairs.TILE + 1, 3)) * 1e-3 + e[1]
    return {
        "random": _sphere(rng, (7, 3)),
        "coincident": np.tile(e[0], (6, 1)),
        "antipodal": np.array([e[2], -e[2], e[2], -e[2]]),
        "one token": e[:1],
        "batched": _sphere(rng, (2, 3, 5, 3)),
        "empty batch": np.zeros((0, 4, 3)),
        "off the sphere": 0.7 * rng.standard_normal((9, 4)),
        "tiles": _sphere(rng, (2, 2 * _pairs.TILE + 37, 3)),  # 3 x 3 tiles, ragged last
        "clustered tiles": c / np.linalg.norm(c, axis=-1, keepdims=True),
    }


@pytest.mark.parametrize("beta", [0.0, 1.0, 9.0])
@pytest.mark.parametrize("form", [{}, {"centered": True}, {"rescaled": True}, {"rescaled": True, "centered": True}])
def test_energy_agrees_with_the_full_sum(beta, form):
    rng = np.random.default_rng(57)
    for name, x in _configs(rng).items():
        got, want = energy(x, beta, **form), _energy_full(x, beta, **form)
        assert got.shape == want.shape == x.shape[:-2], name
        n = x.shape[-2]
        tol = _bound(x, beta, _terms_full(x, beta, **form), 1.0 / (2.0 * n * n * (beta or 1.0)))
        assert np.all(np.abs(got - want) <= tol), (name, got, want)


@pytest.mark.parametrize("beta", [1.0, 9.0])
@pytest.mark.parametrize("rescaled", [False, True])
def test_log_energy_agrees(beta, rescaled):
    """log of the sum: the absolute error is the sum's relative error (2 N + beta d) eps, plus one
    rounding per tile of the online rescaling."""
    rng = np.random.default_rng(58)
    for name, x in _configs(rng).items():
        if name == "off the sphere":
            continue
        got, want = energy(x, beta, rescaled=rescaled, log=True), _energy_full(x, beta, rescaled=rescaled, log=True)
        n, d = x.shape[-2:]
        tiles = (-(-n // _pairs.TILE)) ** 2
        assert np.all(np.abs(got - want) <= (2 * n * n + beta * d + tiles + 8) * EPS), name


def test_huge_beta_rescaled_energy_is_exact():
    """beta = 1e300: every rescaled exponent is 0 (a coincident pair, by the rounding rule) or
    -inf, so e^{-beta} E_beta = (pairs of coincident tokens) / (2 beta n^2) exactly; log too."""
    e = np.eye(3)
    x = np.array([e[0], e[0], e[1], -e[0], e[1]])[None].repeat(2, axis=0)  # 5 + 2 + 2 coincident pairs
    beta = 1e300
    np.testing.assert_array_equal(energy(x, beta, rescaled=True), 9 / (2 * beta * 25))
    np.testing.assert_allclose(energy(x, beta, rescaled=True, log=True), np.log(9 / 50) - np.log(beta), rtol=1e-15)
    many = np.tile(e[2], (3 * _pairs.TILE + 5, 1))  # all coincident, many tiles: 1/(2 beta)
    n = many.shape[0]
    np.testing.assert_allclose(energy(many, beta, rescaled=True), 1 / (2 * beta), rtol=2 * n * n * EPS)
    np.testing.assert_allclose(energy(many, beta, rescaled=True, log=True), -np.log(2 * beta), rtol=4 * EPS)


@pytest.mark.parametrize("beta", [400.0, 700.0])
def test_large_beta_agrees(beta):
    """Exponents far below -700 (raised to -700 on the tiles, _pairs.flush: each term moves by less
    than 2^-1008, far below the rounding of sums >= 1) give the l x l values within the bound."""
    rng = np.random.default_rng(64)
    for name, x in _configs(rng).items():
        if name == "off the sphere":
            continue
        n, d = x.shape[-2:]
        for form in ({"rescaled": True}, {"rescaled": True, "centered": True}):
            T = _terms_full(x, beta, **form)
            tol = _bound(x, beta, T, 1.0 / (2.0 * n * n * beta))
            assert np.all(np.abs(energy(x, beta, **form) - _energy_full(x, beta, **form)) <= tol), (name, form)
        tiles = (-(-n // _pairs.TILE)) ** 2
        got, want = energy(x, beta, rescaled=True, log=True), _energy_full(x, beta, rescaled=True, log=True)
        assert np.all(np.abs(got - want) <= (2 * n * n + beta * d + tiles + 8) * EPS), name
        T = _terms_full(x, beta, rescaled=True)
        want = T.sum(axis=-1) / (n * n)
        tol = (2 * n + beta * d + 4) * EPS * np.abs(T).sum(axis=-1) / (n * n)
        assert np.all(np.abs(energy_weights(x, beta, rescaled=True) - want) <= tol), name


def test_sums_of_subnormal_terms_are_recomputed():
    """Where every term is subnormal (points inside the sphere, rescaled exponents -720) the raised
    exponents would dominate: the sums are taken again without raising them, as the l x l sum."""
    x = np.sqrt(0.28) * np.tile(np.eye(3)[0], (_pairs.TILE + 3, 1))  # every exponent 1000 (0.28 - 1) = -720
    got, want = energy(x, 1000.0, rescaled=True), _energy_full(x, 1000.0, rescaled=True)
    assert 0 < want < 1e-300
    np.testing.assert_allclose(got, want, rtol=1e-10)
    n = x.shape[0]
    np.testing.assert_allclose(energy_weights(x, 1000.0, rescaled=True),
                               _terms_full(x, 1000.0, rescaled=True).sum(axis=-1) / (n * n), rtol=1e-10)


def test_weights_potential_normalizers_agree():
    """Row sums (energy_weights, normalizers: l terms per row) and the potential's double sum."""
    rng = np.random.default_rng(59)
    P = np.diag([1.5, 1.0, 0.5])
    for name, x in _configs(rng).items():
        if x.shape[-1] != 3:
            continue
        n = x.shape[-2]
        for beta, rescaled in ((0.0, False), (2.0, False), (2.0, True), (1e300, True)):
            T = _terms_full(x, beta, rescaled=rescaled) if beta else np.ones(x.shape[:-1] + (n,))
            want = T.sum(axis=-1) / (n * n)
            got = energy_weights(x, beta, rescaled=rescaled)
            tol = (2 * n + beta * 3 * (beta < 1e3) + 4) * EPS * np.abs(T).sum(axis=-1) / (n * n)
            assert np.all(np.abs(got - want) <= tol), (name, beta, rescaled)
        S = np.exp(x @ P @ np.swapaxes(x, -1, -2))
        assert np.all(np.abs(potential(x, P) + 0.5 * S.sum(axis=(-2, -1))) <= 0.5 * _bound(x, 1.5, S, 1.0)), name
        Z = normalizers(x, P, "softmax")
        assert np.all(np.abs(Z - S.sum(axis=-1)) <= (2 * n + 8) * EPS * S.sum(axis=-1)), name


def test_clustered_fraction_agrees():
    """Counts of pairs i < j above the threshold: exact integers; the tiled inner products differ
    from the l x l ones by rounding only, so no pair lies within 1e-12 of the threshold here."""
    rng = np.random.default_rng(60)
    W = np.diag([2.0, 1.0, 1.0])
    for name, x in _configs(rng).items():
        n = x.shape[-2]
        for th, Wm in ((0.5, None), (0.999, None), (-2.0, None), (0.3, W)):
            u = dg.directions(x, Wm) if x.shape[-1] == 3 or Wm is None else None
            if u is None:
                continue
            G = u @ ((np.eye(x.shape[-1]) if Wm is None else Wm) @ np.swapaxes(u, -1, -2))
            iu = np.triu_indices(n, 1)
            want = (G[..., iu[0], iu[1]] > th).mean(axis=-1) if n > 1 else np.zeros(x.shape[:-2])
            np.testing.assert_array_equal(dg.clustered_fraction(x, th, W=Wm), want, err_msg=name)


def test_results_do_not_depend_on_the_batch():
    """A configuration's tiles and their order depend on l only: alone or in a batch, the same bits."""
    rng = np.random.default_rng(61)
    x = _sphere(rng, (5, _pairs.TILE + 70, 3))
    for f in (lambda y: energy(y, 3.0), lambda y: energy(y, 3.0, rescaled=True, log=True),
              lambda y: energy_weights(y, 3.0), lambda y: dg.clustered_fraction(y, 0.2)):
        whole = f(x)
        for k in range(5):
            np.testing.assert_array_equal(f(x[k]), whole[k])


L_BIG = 20_000  # the l x l float64 matrix: 3.2 GB


@pytest.fixture(scope="module")
def big():
    return _sphere(np.random.default_rng(62), (L_BIG, 3))


def _peak(fn):
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["energy", "energy rescaled", "energy log", "energy_weights", "potential",
                                  "clustered_fraction", "misalignment", "lyapunov", "consensus_distance"])
def test_memory_at_many_tokens(big, name):
    """Peak NumPy memory at l = 20 000 on S^2: O(l) arrays (the tokens' 480 kB, a few copies) and a
    few tiles of 256 x 256 (512 kB each) -- under 16 MB, where one l x l matrix is 3.2 GB."""
    v = np.array([0.0, 0.0, 1.0])
    calls = {
        "energy": lambda: energy(big, 4.0),
        "energy rescaled": lambda: energy(big, 400.0, rescaled=True, centered=True),
        "energy log": lambda: energy(big, 4.0, log=True),
        "energy_weights": lambda: energy_weights(big, 4.0, rescaled=True),
        "potential": lambda: potential(big, np.diag([2.0, 1.0, 0.5])),
        "clustered_fraction": lambda: dg.clustered_fraction(big, 0.9),
        "misalignment": lambda: dg.misalignment(big),
        "lyapunov": lambda: (dg.hemisphere_lyapunov(big, v), dg.token_lyapunov(big, v)),
        "consensus_distance": lambda: dg.consensus_distance(big),
    }
    peak = _peak(calls[name])
    assert peak < 16e6, (name, peak)


def test_tensors_take_the_same_tiles():
    """Tensor tokens: the same tiles in torch, tensors out, the NumPy values to rounding."""
    torch = pytest.importorskip("torch")
    x = _sphere(np.random.default_rng(63), (2, _pairs.TILE + 37, 3))
    t = torch.tensor(x)
    P = np.diag([1.5, 1.0, 0.5])
    for f in (lambda y: energy(y, 3.0), lambda y: energy(y, 3.0, rescaled=True, log=True),
              lambda y: energy_weights(y, 3.0), lambda y: potential(y, P), lambda y: normalizers(y, P),
              lambda y: dg.clustered_fraction(y, 0.2)):
        got = f(t)
        assert isinstance(got, torch.Tensor)
        np.testing.assert_allclose(got.numpy(), f(x), rtol=1e-13)
