"""Hypothesis strategies for token manifolds, token configurations and attention fields.

Every strategy draws *small* problems by default (d <= 5, l <= 5, h <= 3), so one example costs
well under a millisecond to draw, and every size shrinks toward its smallest value (small ``l``,
``d``, ``h``) and every entry toward 0, so a failing example is reported small. Sizes (``d``,
``h``, ``tokens``) are an ``int`` or a strategy of ``int``; ``batch_shape`` a tuple or a strategy
of tuples (e.g. ``hypothesis.extra.numpy.array_shapes(min_dims=0, max_side=3)``).

Guarantees (each is itself a property test, tests/test_testing.py):

* :func:`spd_matrices` -- symmetric, eigenvalues in [1, ``max_condition``] (rounding aside), so
  the condition number is at most ``max_condition``;
* :func:`points` -- ``|y_i^T W y_i - 1| <= 1e-12`` for every token (Sphere, Ellipsoid);
* :func:`hemisphere_points` -- on the manifold, and ``v^T y_i >= min_margin`` for every token;
* :func:`tangent_vectors` -- ``|y_i^T W u_i|`` at rounding level;
* :func:`head_matrices` -- entries within ``[-scale, scale]`` at every time (exactly symmetric
  with ``symmetric=True``), spectral norms at most ``bound`` for all times;
* :func:`betas` -- finite, within ``[min_value, max_value]``.

References
----------
Rodriguez Abella, Silvestre, Tabuada, "Consensus is all you get", ICML 2025, eqs. (3), (6) and
Theorems 3.2, 4.5 (the settings these strategies draw).
D. R. MacIver et al., "Hypothesis: a new approach to property-based testing", JOSS 4 (2019) 1891.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from hypothesis.strategies import SearchStrategy

from ..dynamics.attention import MASKS, NORMALIZATIONS, AttentionField
from ..errors import InputTypeError, ValidationError
from ..geometry.manifolds import Ellipsoid, Euclidean, Sphere
from ._draw import _floats, _matrix, _nonzero_rows, _positive, _shape, _size
from ._heads import TimeVaryingHeads, _sym

__all__ = [
    "DIMS",
    "HEADS",
    "MANIFOLD_KINDS",
    "TOKENS",
    "TimeVaryingHeads",
    "attention_fields",
    "betas",
    "ellipsoids",
    "head_matrices",
    "hemisphere_points",
    "manifolds",
    "orthogonal_matrices",
    "points",
    "spd_matrices",
    "spheres",
    "symmetric_with_top_eigenvector",
    "tangent_vectors",
    "unit_vectors",
]

#: Default sizes: d in 2..5, l in 1..5, h in 1..3 (each shrinks toward its smallest value).
DIMS = st.integers(2, 5)
TOKENS = st.integers(1, 5)
HEADS = st.integers(1, 3)
MANIFOLD_KINDS = ("sphere", "ellipsoid", "euclidean")


# ---------------------------------------------------------------------------------------------
# matrices and manifolds
@st.composite
def orthogonal_matrices(draw, d):
    """An orthogonal matrix Q, shape (d, d), with Q^T Q = I to rounding."""
    d = _size(draw, d, "d", 1)
    # |A_ij| <= 1, so A + (d + 1) I is strictly diagonally dominant, hence invertible: R has a
    # nonzero diagonal and Q is orthogonal for every draw. (A shift of 3 allowed a singular A at
    # d >= 4, which Hypothesis found in the project's own suite: a zero column of Q and a
    # singular "SPD" W.)
    A = draw(_matrix((d, d))) + (d + 1.0) * np.eye(d)
    Q, R = np.linalg.qr(A)
    return Q * np.where(np.diag(R) < 0, -1.0, 1.0)  # sign fixing makes Q a function of A


@st.composite
def spd_matrices(draw, d, *, max_condition=10.0):
    """A symmetric positive definite W, shape (d, d), eigenvalues in [1, max_condition].

    The condition number is therefore at most ``max_condition`` (to rounding, ~1e-15 relative).
    Shrinks toward the identity (all eigenvalues 1).
    """
    max_condition = _positive(max_condition, "max_condition", 0.0)
    if max_condition < 1.0:
        raise ValidationError(f"max_condition must be >= 1, got {max_condition}.")
    Q = draw(orthogonal_matrices(d))
    lam = np.array(draw(st.lists(_floats(1.0, max_condition), min_size=len(Q), max_size=len(Q))))
    W = (Q * lam) @ Q.T
    return 0.5 * (W + W.T)  # exactly symmetric (Ellipsoid checks symmetry)


@st.composite
def spheres(draw, *, dims=DIMS):
    """``Sphere(d - 1)``: points have d components (``dims``: int or strategy of d >= 2)."""
    return Sphere(_size(draw, dims, "dims", 2) - 1)


@st.composite
def ellipsoids(draw, *, dims=DIMS, max_condition=10.0):
    """``Ellipsoid(W)``, W drawn by :func:`~riemattn.testing.strategies.spd_matrices` (condition number <= max_condition)."""
    return Ellipsoid(draw(spd_matrices(_size(draw, dims, "dims", 2), max_condition=max_condition)))


@st.composite
def manifolds(draw, *, dims=DIMS, kinds=("sphere", "ellipsoid"), max_condition=10.0):
    """A Sphere, Ellipsoid or (if ``"euclidean"`` is in ``kinds``) Euclidean of dimension d.

    Shrinks toward the first kind in ``kinds`` (the sphere by default).
    """
    kinds = tuple(kinds)
    bad = [k for k in kinds if k not in MANIFOLD_KINDS]
    if not kinds or bad:
        raise ValidationError(f"kinds must be a nonempty subset of {MANIFOLD_KINDS}, got {kinds!r}.")
    kind = draw(st.sampled_from(kinds))
    d = _size(draw, dims, "dims", 2)
    if kind == "sphere":
        return Sphere(d - 1)
    if kind == "euclidean":
        return Euclidean(d)
    return Ellipsoid(draw(spd_matrices(d, max_condition=max_condition)))


def _manifold(draw, manifold):
    if isinstance(manifold, SearchStrategy):
        manifold = draw(manifold)
    if not isinstance(manifold, (Sphere, Ellipsoid, Euclidean)):
        raise InputTypeError(
            f"manifold must be a riemattn Sphere, Ellipsoid or Euclidean (or a strategy of them), "
            f"got {type(manifold).__name__}."
        )
    return manifold


# ---------------------------------------------------------------------------------------------
# points
@st.composite
def points(draw, manifold, *, tokens=TOKENS, batch_shape=()):
    """Token configurations on ``manifold``, shape ``batch_shape + (l, d)``.

    Each token is pi_W(x) for x with entries in [-1, 1] (tokens shorter than 0.1 get e_1 added,
    so no token is zero); on the Euclidean space, x itself. Guarantee: |y^T W y - 1| <= 1e-12.
    Shrinks toward all tokens equal to pi_W(e_1).
    """
    manifold = _manifold(draw, manifold)
    l = _size(draw, tokens, "tokens", 1)
    shape = _shape(draw, batch_shape) + (l, manifold.ambient_dim)
    x = draw(_matrix(shape))
    if isinstance(manifold, Euclidean):
        return x
    return manifold.retract(_nonzero_rows(x))


@st.composite
def unit_vectors(draw, d):
    """A vector of unit Euclidean length, shape (d,); shrinks toward e_1."""
    x = _nonzero_rows(draw(_matrix((_size(draw, d, "d", 1),))))
    return x / np.linalg.norm(x)


@st.composite
def hemisphere_points(draw, manifold, *, v=None, tokens=TOKENS, batch_shape=(), min_margin=1e-3):
    """``(y, v)``: tokens on E_W in the open hemisphere H+(v) = {y : v^T y > 0}, and v.

    Parameters
    ----------
    manifold : Sphere or Ellipsoid, or a strategy of them
    v : array_like, shape (d,), optional
        The hemisphere's direction; drawn (unit Euclidean length) when None.
    tokens, batch_shape :
        As in :func:`points`; one v certifies every configuration of the batch.
    min_margin : float, default 1e-3
        Guarantee: ``v^T y_i >= min_margin`` for every token (up to 1e-15 relative rounding).
        Must be below ``max_{y in E_W} v^T y = sqrt(v^T W^{-1} v)``.

    Returns
    -------
    y : ndarray, shape ``batch_shape + (l, d)``
    v : ndarray, shape (d,)

    Notes
    -----
    With the pole u = W^{-1} v / kappa (kappa = sqrt(v^T W^{-1} v), the maximizer of v^T y on
    E_W), each x (entries in [-1, 1]) is reflected through v-perp where v^T x < 0, moved to
    x + c u with c = |x|_W m / (kappa - m), and retracted: v^T y >= c kappa / (|x|_W + c) = m.
    """
    manifold = _manifold(draw, manifold)
    if isinstance(manifold, Euclidean):
        raise ValidationError("hemisphere_points needs a Sphere or an Ellipsoid, got Euclidean.")
    d = manifold.ambient_dim
    m = _positive(min_margin, "min_margin")
    Winv = np.linalg.inv(manifold.W)
    if v is None:
        # a unit v has kappa >= 1 / sqrt(lambda_max(W)); check the margin against that first
        kmin = 1.0 / np.sqrt(np.linalg.eigvalsh(manifold.W)[-1])
        if m >= kmin:
            raise ValidationError(f"min_margin must be < 1 / sqrt(lambda_max(W)) = {kmin:.6g}, got {m}.")
        v = draw(unit_vectors(d))
    else:
        v = np.asarray(v, dtype=float)
        if v.shape != (d,) or not np.all(np.isfinite(v)) or not np.any(v):
            raise ValidationError(f"v must be a finite nonzero vector of shape ({d},), got {v!r}.")
    kappa = float(np.sqrt(v @ Winv @ v))
    if m >= kappa:
        raise ValidationError(f"min_margin must be < max v^T y = sqrt(v^T W^-1 v) = {kappa:.6g}, got {m}.")
    u = Winv @ v / kappa
    l = _size(draw, tokens, "tokens", 1)
    x = draw(_matrix(_shape(draw, batch_shape) + (l, d)))
    s = x @ v
    x = x - 2.0 * np.minimum(s, 0.0)[..., None] * v / (v @ v)  # reflect through v-perp
    small = np.linalg.norm(x, axis=-1) < 0.1
    x[small] = u  # no zero token; all-zero draws shrink to the pole u
    c = manifold.norm(x) * m / (kappa - m)
    return manifold.retract(x + c[..., None] * u), v


@st.composite
def tangent_vectors(draw, manifold, base_point, *, scale=1.0):
    """Tangent vectors at ``base_point`` (shape (..., d)), same shape: (I - y y^T W) u.

    u has entries in [-scale, scale]; guarantee |y^T W u| at rounding level
    (<= 1e-15 d |W|_2 scale); on the Euclidean space u itself. Shrinks toward 0.
    """
    manifold = _manifold(draw, manifold)
    y = np.asarray(base_point, dtype=float)
    if y.ndim < 1 or y.shape[-1] != manifold.ambient_dim:
        raise ValidationError(
            f"base_point must have shape (..., {manifold.ambient_dim}) for {manifold!r}, got {y.shape}."
        )
    scale = _positive(scale, "scale")
    return manifold.tangent(y, draw(_matrix(y.shape, -scale, scale)))


# ---------------------------------------------------------------------------------------------
# attention
@st.composite
def head_matrices(draw, h, d, *, symmetric=False, time_varying=False, scale=1.0, max_terms=2, max_omega=6.0):
    """Head matrices P_eta (or U_eta) whose entries lie in [-scale, scale] at every time.

    Parameters
    ----------
    h, d : int or strategy of int
    symmetric : bool
        Exactly symmetric matrices, (M + M^T) / 2, at every time (entries stay in
        [-scale, scale]).
    time_varying : bool or None
        False: an ndarray of shape (h, d, d) (its spectral norms are at most d * scale).
        True: a :class:`TimeVaryingHeads` P(t) = B + sum_k A_k sin(omega_k t + phi_k) with
        K in 0..max_terms sinusoids of frequency <= max_omega and its ``bound``; B and the A_k
        have entries in [-c, c], c = scale (1 - (K + 2) eps) / (K + 1), so that every entry of
        P(t), as computed, lies in [-scale, scale] for every t. None: either.
    scale : float
        The entry bound.

    Shrinks toward constant zero matrices of one head.
    """
    h, d = _size(draw, h, "h", 1), _size(draw, d, "d", 1)
    scale = _positive(scale, "scale")
    if time_varying is None:
        time_varying = draw(st.booleans())
    if not time_varying:
        B = draw(_matrix((h, d, d), -scale, scale))
        return _sym(B) if symmetric else B  # the average of two entries of [-scale, scale] stays in it
    K = draw(st.integers(0, max_terms))
    # |P(t)_ij| <= |B_ij| + sum_k |A_k,ij| |sin| <= (K + 1) c in exact arithmetic; the computed sum
    # of K + 1 products (any order, FMA or not: a dot product of length K plus B) is within
    # gamma_{K+2} = (K + 2) u / (1 - (K + 2) u) (u = eps / 2, Higham, Accuracy and Stability,
    # eq. 3.5) of the sum of the absolute terms, so (1 + gamma_{K+2}) (1 - (K + 2) eps) < 1 keeps
    # it <= scale; the final (M + M^T) / 2 of a symmetric draw does not exceed its two entries.
    c = scale if K == 0 else scale * (1.0 - (K + 2) * np.finfo(float).eps) / (K + 1)
    B = draw(_matrix((h, d, d), -c, c))
    A = draw(_matrix((K, h, d, d), -c, c))
    omega = draw(hnp.arrays(np.float64, (K,), elements=_floats(0.0, max_omega)))
    phi = draw(hnp.arrays(np.float64, (K,), elements=_floats(0.0, 2 * np.pi)))
    if symmetric:
        return TimeVaryingHeads(_sym(B), _sym(A), omega, phi, symmetric=True)
    return TimeVaryingHeads(B, A, omega, phi)


@st.composite
def symmetric_with_top_eigenvector(draw, d, *, min_gap=0.3, dominant=None):
    """``(U, v)``: symmetric U (d, d) with a simple top eigenvalue lam_1 in [0.5, 2] and its unit
    eigenvector v (d,) (the setting of ICML Theorem 4.5).

    The other eigenvalues are <= (1 - min_gap) lam_1. ``dominant=True`` also makes them >= -lam_1
    (lam_1 is the spectral radius); False allows down to -3 lam_1; None draws either.
    """
    Q = draw(orthogonal_matrices(d))
    d = len(Q)
    lam1 = draw(_floats(0.5, 2.0))
    if dominant is None:
        dominant = draw(st.booleans())
    lo = -lam1 if dominant else -3.0 * lam1
    rest = draw(st.lists(_floats(lo, (1 - min_gap) * lam1), min_size=d - 1, max_size=d - 1))
    lam = np.array([lam1] + rest)
    U = (Q * lam) @ Q.T
    return 0.5 * (U + U.T), Q[:, 0].copy()


def betas(*, min_value=0.0, max_value=10.0):
    """Inverse temperatures beta: finite floats in [min_value, max_value] (no subnormals)."""
    if not (np.isfinite(min_value) and np.isfinite(max_value) and 0 <= min_value <= max_value):
        raise ValidationError(f"need 0 <= min_value <= max_value < inf, got {min_value}, {max_value}.")
    return _floats(float(min_value), float(max_value))


@st.composite
def attention_fields(draw, *, dims=DIMS, heads=HEADS, kinds=("sphere", "ellipsoid"), masks=MASKS,
                     normalizations=NORMALIZATIONS, values=("identity", "matrices"), time_varying=None,
                     beta=None, scale=1.0, max_condition=10.0):
    """An :class:`~riemattn.dynamics.attention.AttentionField` (ICML eq. 6).

    Parameters
    ----------
    dims, heads : int or strategy of int
        d and the number of heads h.
    kinds : subset of {"sphere", "ellipsoid"}
        The manifold (W drawn by :func:`spd_matrices`; the field's ``manifold`` attribute).
    masks, normalizations : subsets of ``MASKS``, ``NORMALIZATIONS``
    values : subset of {"identity", "matrices"}
        U = I (None) or drawn head matrices.
    time_varying : bool or None
        P (and U) time-varying (:class:`TimeVaryingHeads`) or constant; None draws either.
    beta : float or strategy of float, optional
        Default :func:`betas` in [0, 2].
    scale, max_condition : float
        Entry bound of the head matrices; condition-number bound of W.

    Draw tokens for it with ``points(field.manifold, ...)``. Shrinks toward one head, the sphere,
    the first mask/normalization, U = I, constant zero P and beta = 0.
    """
    manifold = draw(manifolds(dims=dims, kinds=kinds, max_condition=max_condition))
    if isinstance(manifold, Euclidean):
        raise ValidationError("attention_fields: kinds must be a subset of ('sphere', 'ellipsoid').")
    d, h = manifold.ambient_dim, _size(draw, heads, "heads", 1)
    if time_varying is None:
        time_varying = draw(st.booleans())
    P = draw(head_matrices(h, d, time_varying=time_varying, scale=scale))
    U = None
    if draw(st.sampled_from(tuple(values))) == "matrices":
        U = draw(head_matrices(h, d, time_varying=time_varying, scale=scale))
    b = draw(betas(max_value=2.0)) if beta is None else (draw(beta) if isinstance(beta, SearchStrategy) else beta)
    W = None if isinstance(manifold, Sphere) else manifold.W
    return AttentionField(P, U, W=W, mask=draw(st.sampled_from(tuple(masks))),
                          normalization=draw(st.sampled_from(tuple(normalizations))), beta=b)
