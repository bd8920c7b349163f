"""Critical points of GLPR's interaction energy E_beta on (S^(d-1))^n: search, certificate, census.

GLPR's Problem 3 asks whether every critical point of E_beta(x) = 1/(2 beta n^2) sum_{i,j}
exp(beta <x_i, x_j>) other than the global maxima (consensus) is a strict saddle: a point where the
Hessian has a positive eigenvalue. This module asks the computer:

* :func:`newton_search` solves grad E_beta = 0 by a damped Riemannian Newton method
  (Levenberg-Marquardt on the residual grad E_beta, a trust-region-like damping with the step capped
  at ``max_step`` per token and the retraction x_i -> x_i / |x_i|). It converges to saddles as
  readily as to maxima. It is written here (a few lines of NumPy, batched over starts), not taken
  from an optimization library.
* the starts (:func:`structured_starts`): k clusters on a regular k-gon (k = 1..n, sizes as equal as
  possible), regular simplices and the octahedron (d >= 3), and uniform random configurations.
* :func:`certify` returns, per point, the gradient norm, the Hessian spectrum without the
  rotation directions (:func:`riemattn.analysis.hessians.spectrum`), the index (number of *positive*
  eigenvalues: directions in which E_beta increases, so a local maximum has index 0), the number of
  clusters and their sizes.
* :func:`deduplicate` merges points equal modulo O(d) and token permutations: two configurations
  are identified when sorted spectral invariants of their Gram matrices agree
  (sorted eigenvalues of G and of G o G, sorted row sums of G and of G o G o G; G_ij = <x_i, x_j>
  determines x modulo O(d), and these invariants do not change under permutations; they are
  necessary conditions, so two inequivalent points with identical invariants would be merged).
* :func:`search` combines them for one (n, d, beta).

Every function that takes beta also takes ``rescaled``: the energy e^{-beta} E_beta (kernel
exp(beta (<x_i, x_j> - 1))), whose gradient, Hessian and spectrum are e^{-beta} times E_beta's, and
whose critical points, indices and cluster shapes are the same. The search always runs on it (the
Newton iteration is scale invariant), so it is finite at every beta; the plain values are the
rescaled ones times e^beta and are refused, naming beta, where that exceeds the float range
(beta > ~709.78). :func:`newton_search` lives in the private ``riemattn.analysis._newton``.

The census over a grid of (n, d, beta), the figure and the claims are the reproduction
``glpr-critical`` (:mod:`riemattn.experiments.glpr_critical`). A finite search finds what it
finds: the census is an observation with its budget, never a proof. Theory and limits:
docs/theory/critical_points.md.

References
----------
GLPR (Geshkovski, Letrouit, Polyanskiy, Rigollet), eq. (3.5), (7.4), Problem 3, Theorems 4.3, 5.1
and 6.1, Appendix A (strict saddles and the center-stable manifold theorem).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .._validation import (check_beta, check_flag, check_int, check_memory, check_nonnegative, check_rescaled,
                           check_size, check_token_array)
from ..errors import InputTypeError, ValidationError
from ._newton import ascend, newton_search, plain_scale
from .gradients import energy
from .hessians import energy_hessian, spectrum

__all__ = [
    "CriticalPoint",
    "certify",
    "circle_cluster_spectrum",
    "clusters",
    "deduplicate",
    "invariants",
    "k_clusters",
    "newton_search",
    "regular_simplex",
    "search",
    "structured_starts",
]


# ---------------------------------------------------------------------------------------------
# starts
def k_clusters(n: int, d: int, k: int, sizes=None) -> np.ndarray:
    """n tokens in k clusters at the vertices of a regular k-gon in the (e_1, e_2)-plane, shape (n, d).

    Token i goes to cluster i mod k (sizes as equal as possible) unless ``sizes`` (k positive
    integers summing to n) is given. Sizes up to 2**31 - 1 whose array fits in memory
    (ValidationError otherwise, before any work).
    """
    n, d, k = check_size(n, "n", 1), check_size(d, "d", 2), check_size(k, "k", 1)
    check_memory((n, d), "n, d")
    if sizes is None:
        labels = np.arange(n) % k
    else:
        sizes = [check_int(s, "sizes[i]", 1) for s in sizes]
        if len(sizes) != k or sum(sizes) != n:
            raise ValidationError(f"sizes must be {k} positive integers summing to n = {n}, got {sizes}.")
        labels = np.repeat(np.arange(k), sizes)
    th = 2 * np.pi * labels / k
    x = np.zeros((n, d))
    x[:, 0], x[:, 1] = np.cos(th), np.sin(th)
    return x


def regular_simplex(k: int, d: int) -> np.ndarray:
    """k unit vectors in R^d with pairwise inner products -1/(k-1) (k <= d + 1), shape (k, d).

    Sizes up to 2**31 - 1 whose arrays fit in memory (ValidationError otherwise, before any work)."""
    k, d = check_size(k, "k", 2), check_size(d, "d", 2)
    check_memory((k, max(k, d)), "k, d")
    if k > d + 1:
        raise ValidationError(f"a regular simplex with k = {k} vertices needs d >= k - 1, got d = {d}.")
    C = np.eye(k) - 1.0 / k  # centred basis vectors span a (k-1)-dimensional space
    U, s, _ = np.linalg.svd(C)
    V = U[:, : k - 1] * s[: k - 1]
    V /= np.linalg.norm(V, axis=1, keepdims=True)
    x = np.zeros((k, d))
    x[:, : k - 1] = V
    return x


def structured_starts(n: int, d: int) -> np.ndarray:
    """Structured starting configurations, shape (m, n, d).

    k clusters on a regular k-gon (k = 1..n), and for d >= 3 the tokens spread over the vertices
    of regular simplices (k = 3..min(n, d+1)) and of the octahedron (d = 3, n >= 6), round robin.
    Sizes up to 2**31 - 1 whose m x n x d array fits in memory (ValidationError otherwise).
    """
    n, d = check_size(n, "n", 1), check_size(d, "d", 2)
    check_memory((n + min(n, d + 1) + 1, n, d), "n, d")
    starts = [k_clusters(n, d, k) for k in range(1, n + 1)]
    if d >= 3:
        for k in range(3, min(n, d + 1) + 1):
            starts.append(regular_simplex(k, d)[np.arange(n) % k])
        if n >= 6:
            octa = np.zeros((6, d))
            octa[:, :3] = np.concatenate([np.eye(3), -np.eye(3)])
            starts.append(octa[np.arange(n) % 6])
    return np.stack(starts)


def circle_cluster_spectrum(n: int, k: int, beta, *, rescaled: bool = False) -> np.ndarray:
    """Round-metric Hessian eigenvalues of E_beta at k equally spaced clusters of n/k tokens on S^1.

    In angles the Hessian is L / n^2, L the Laplacian with weights
    w(phi) = e^{beta cos phi} (beta sin^2 phi - cos phi); its cluster-circulant structure gives

        (q/n^2) sum_{j=1}^{k-1} w(2 pi j/k) (1 - cos(2 pi j m/k)),  m = 1..k-1,
        (q/n^2) sum_{j=0}^{k-1} w(2 pi j/k),  k (q - 1) times,        q = n / k,

    plus 0 for the rotation (m = 0), which is left out. Sorted, shape (n - 1,).
    k = n is the regular n-gon, k = 1 consensus. Derivation: docs/theory/critical_points.md.

    ``rescaled=True``: the spectrum of e^{-beta} E_beta, e^{-beta} times this, with the weights
    e^{-2 beta sin^2(phi/2)} (beta sin^2 phi - cos phi) (= e^{beta (cos phi - 1)} (...)), finite at
    every beta (the cluster-splitting eigenvalue tends to -q/n^2). Plain at beta > ~709.78 (e^beta
    overflows) raises ValidationError naming beta.
    """
    n, k, beta = check_size(n, "n", 1), check_size(k, "k", 1), check_beta(beta)
    rescaled = check_rescaled(rescaled)
    if n % k:
        raise ValidationError(f"k = {k} equal clusters need k to divide n = {n}.")
    q, phi = n // k, 2 * np.pi * np.arange(k) / k
    plain = plain_scale(beta, rescaled, "circle_cluster_spectrum")
    with np.errstate(over="ignore"):  # beta sin^2(phi/2) may overflow to inf: a weight of 0
        kernel = np.exp(-2.0 * beta * np.sin(phi / 2) ** 2) * plain  # e^{beta (cos phi - 1)} (x e^beta)
    w = kernel * (beta * np.sin(phi) ** 2 - np.cos(phi))
    m = np.arange(1, k)
    lam = (q / n**2) * ((1 - np.cos(np.outer(m, np.arange(k)) * 2 * np.pi / k)) @ w)
    return np.sort(np.concatenate([lam, np.full(k * (q - 1), q / n**2 * w.sum())]))


# ---------------------------------------------------------------------------------------------
# certificate and deduplication
def clusters(x, tol: float = 1e-5) -> np.ndarray:
    """Cluster label of every token (tokens closer than ``tol`` chain together), shape (n,).

    Labels are 0, 1, ... in order of first appearance.
    """
    x = np.asarray(check_token_array(x, "x"), dtype=float)
    tol = check_nonnegative(tol, "tol")
    if x.ndim != 2:
        raise ValidationError(f"clusters takes one configuration x of shape (n, d), got shape {x.shape}.")
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components

    A = np.linalg.norm(x[:, None] - x[None], axis=-1) < tol
    _, components = connected_components(csr_matrix(A), directed=False)
    _, first, inverse = np.unique(components, return_index=True, return_inverse=True)
    return np.argsort(np.argsort(first))[inverse]  # numbered by their first token


@dataclass
class CriticalPoint:
    """A certified critical point of E_beta (one representative of its class).

    ``index`` counts the positive Hessian eigenvalues (the directions in which E_beta increases;
    0 for a local maximum); ``n_zero`` the eigenvalues that are zero within the tolerance once the
    ``n_symmetry`` rotation directions are removed (n_zero > 0: degenerate, or not resolved in double
    precision); ``shape`` the cluster sizes, largest first (e.g. "3+3+2"); ``hits`` how many starts
    converged to this class. ``rescaled``: ``energy``, ``grad_norm`` and ``eigenvalues`` are those
    of e^{-beta} E_beta (e^{-beta} times E_beta's; the counts and the shape are the same).
    """

    x: np.ndarray
    beta: float
    energy: float
    grad_norm: float
    eigenvalues: np.ndarray
    n_symmetry: int
    index: int
    n_negative: int
    n_zero: int
    n_clusters: int
    shape: str
    hits: int = 1
    invariants: np.ndarray = field(default=None, repr=False)
    rescaled: bool = False

    @property
    def is_consensus(self) -> bool:
        return self.n_clusters == 1

    @property
    def is_strict_saddle(self) -> bool:
        return self.index > 0


def invariants(x) -> np.ndarray:
    """Permutation- and O(d)-invariant features of configurations, shape (..., 4 n).

    Sorted eigenvalues of G and of G o G, sorted row sums of G and of G o G o G, G = x x^T.
    """
    x = np.asarray(check_token_array(x, "x"), dtype=float)
    G = x @ np.swapaxes(x, -1, -2)
    return np.concatenate([
        np.linalg.eigvalsh(G), np.linalg.eigvalsh(G * G),
        np.sort(G.sum(-1), axis=-1), np.sort((G**3).sum(-1), axis=-1),
    ], axis=-1)


def _canonical(x, labels):
    """A representative for drawing: principal axes of x (circle: largest cluster at angle 0)."""
    sizes = np.bincount(labels)
    c = x[labels == np.argmax(sizes)][0]
    d = x.shape[-1]
    if d == 2:
        R = np.array([[c[0], c[1]], [-c[1], c[0]]])
        return x @ R.T
    _, _, Vt = np.linalg.svd(x, full_matrices=True)
    y = x @ Vt.T
    return y * np.where(np.sum(y, axis=0) < 0, -1.0, 1.0)


def certify(x, beta, *, rtol: float = 1e-11, cluster_tol: float = 1e-5, rescaled: bool = False) -> CriticalPoint:
    """The certificate of one configuration x of shape (n, d) on the sphere (see :class:`CriticalPoint`).

    ``rtol``: an eigenvalue is zero when |lambda| <= rtol * max |lambda| (the round metric).
    ``rescaled``: certify for e^{-beta} E_beta (finite at every beta); plain at beta > ~709.78
    raises ValidationError naming beta. The Hessian is computed rescaled in both cases (the counts
    do not depend on the scale).
    """
    beta = check_beta(beta)
    rescaled = check_rescaled(rescaled)
    cluster_tol = check_nonnegative(cluster_tol, "cluster_tol")
    plain = plain_scale(beta, rescaled, "certify")
    H = energy_hessian(x, beta, "standard", rescaled=True)
    sp = spectrum(H, rtol=rtol)
    labels = clusters(H.x, cluster_tol)
    sizes = np.sort(np.bincount(labels))[::-1]
    return CriticalPoint(
        x=_canonical(H.x, labels), beta=beta, energy=float(energy(H.x, beta, rescaled=rescaled)),
        grad_norm=plain * float(np.linalg.norm(H.grad)), eigenvalues=plain * sp.eigenvalues,
        n_symmetry=sp.n_symmetry, index=sp.n_positive, n_negative=sp.n_negative, n_zero=sp.n_zero,
        n_clusters=len(sizes), shape="+".join(map(str, sizes)), invariants=invariants(H.x), rescaled=rescaled,
    )


def deduplicate(points, tol: float = 1e-5) -> list:
    """Merge :class:`CriticalPoint` s whose invariants agree to ``tol``; sorted by energy, descending.

    The first point of each class (in the given order) is its representative; ``hits`` add up.
    """
    tol = check_nonnegative(tol, "tol")
    points = list(points) if isinstance(points, (list, tuple)) else points
    if not isinstance(points, list) or not all(isinstance(p, CriticalPoint) for p in points):
        raise InputTypeError(f"points must be a list of CriticalPoint (from certify/search), got {type(points).__name__}.")
    out: list[CriticalPoint] = []
    for p in points:
        for q in out:
            if np.max(np.abs(p.invariants - q.invariants)) <= tol:
                q.hits += p.hits
                break
        else:
            out.append(p)
    return sorted(out, key=lambda p: (-float(f"{p.energy:.10g}"), p.index, p.shape))  # 10 digits: ties


def search(n: int, d: int, beta, *, n_random: int = 64, seed=0, structured: bool = True,
           max_iter: int = 100, gtol: float = 1e-14, max_ascent: int = 400, rescaled: bool = False):
    """Critical points of E_beta on (S^(d-1))^n found from random and structured starts.

    Parameters
    ----------
    n, d : int
        Number of tokens and ambient dimension (tokens on S^(d-1)), up to 2**31 - 1, with the
        starts (n_random + about n of shape (n, d)) fitting in memory: ValidationError otherwise,
        before any work.
    beta : float, >= 0
    n_random : int
        Random starts (seeded by ``seed``), in three thirds: uniform on (S^(d-1))^n; uniform then
        moved by a random number (log-uniform in 1..``max_ascent``) of projected gradient-ascent
        steps of E_beta (near the maxima and the metastable saddles the flow visits); random
        clusterings (k uniform in 1..n random centres, tokens assigned at random, Gaussian noise of
        log-uniform size in [1e-3, 0.3]).
    max_ascent : int, 1 <= max_ascent <= 100_000
        The bound of the ascent steps above (each costs one gradient of E_beta per start).
    structured : bool
        Add :func:`structured_starts` (each also perturbed by 1e-3 so that symmetric starts can
        leave their symmetry class).
    max_iter, gtol
        See :func:`newton_search`.
    rescaled : bool, default False
        Certify for e^{-beta} E_beta (:func:`certify`): finite at every beta. The search itself is
        the same (it runs on the rescaled energy either way); plain at beta > ~709.78 raises
        ValidationError naming beta.

    Returns
    -------
    points : list of CriticalPoint
        Distinct converged points (modulo O(d) and permutations), energy descending.
    stats : dict
        ``n_starts``, ``n_converged``.
    """
    n, d = check_size(n, "n", 1), check_size(d, "d", 2)
    beta = check_beta(beta)
    rescaled = check_rescaled(rescaled)
    plain_scale(beta, rescaled, "search")
    n_random = check_size(n_random, "n_random", 0)
    check_memory((n_random + n + min(n, d + 1) + 1, n, d), "n_random, n, d")
    if not isinstance(seed, (np.random.Generator, np.random.SeedSequence)):  # those are streams already
        seed = check_int(seed, "seed", 0)
    rng = np.random.default_rng(seed)
    max_ascent = check_size(max_ascent, "max_ascent", 1, 100_000)
    R = rng.standard_normal((n_random, n, d))
    R /= np.linalg.norm(R, axis=-1, keepdims=True)
    third = np.arange(n_random) % 3
    steps = np.exp(rng.uniform(0.0, np.log(max(max_ascent, 1)), n_random)).astype(int)
    R = ascend(R, beta, np.where(third == 1, steps, 0))
    C = rng.standard_normal((n_random, n, d))  # random clusterings
    k = rng.integers(1, n + 1, n_random)
    labels = (rng.random((n_random, n)) * k[:, None]).astype(int)
    C = np.take_along_axis(C, labels[..., None], axis=1)
    C /= np.linalg.norm(C, axis=-1, keepdims=True)
    C += np.exp(rng.uniform(np.log(1e-3), np.log(0.3), (n_random, 1, 1))) * rng.standard_normal(C.shape)
    starts = [np.where((third == 2)[:, None, None], C, R)]
    if check_flag(structured, "structured"):
        S = structured_starts(n, d)
        starts += [S, S + 1e-3 * rng.standard_normal(S.shape)]
    x0 = np.concatenate(starts)
    x0 /= np.linalg.norm(x0, axis=-1, keepdims=True)
    x, _, conv = newton_search(x0, beta, max_iter=max_iter, gtol=gtol, rescaled=True)
    pts = [certify(p, beta, rescaled=rescaled) for p in x[conv]]
    return deduplicate(pts), {"n_starts": len(x0), "n_converged": int(conv.sum())}
