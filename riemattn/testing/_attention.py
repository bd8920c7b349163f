"""The attention strategies of :mod:`riemattn.testing.strategies` (re-exported there): head
matrices (constant or :class:`~riemattn.testing.strategies.TimeVaryingHeads`), symmetric matrices
with a top eigenvector, inverse temperatures and attention fields."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from hypothesis.strategies import SearchStrategy

from ..dynamics.attention import MASKS, NORMALIZATIONS, AttentionField
from .._validation import check_beta, check_real
from ..errors import ValidationError
from ..geometry.manifolds import Euclidean, Sphere
from ._draw import DIMS, HEADS, _flag, _floats, _matrix, _options, _positive, _size
from ._heads import TimeVaryingHeads, _sym
from ._manifolds import manifolds, orthogonal_matrices


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
    symmetric = _flag(symmetric, "symmetric")
    time_varying = _flag(time_varying, "time_varying", allow_none=True)
    max_terms = _size(None, max_terms, "max_terms", 0)
    max_omega = _positive(max_omega, "max_omega")
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
    min_gap = _positive(min_gap, "min_gap")
    if not min_gap < 1.5:  # (1 - min_gap) lam_1 must stay above the lowest eigenvalue -lam_1 (lam_1 >= 0.5 > 0)
        raise ValidationError(f"min_gap must be in (0, 1.5), got {min_gap!r}.")
    dominant = _flag(dominant, "dominant", allow_none=True)
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
    min_value, max_value = check_real(min_value, "min_value"), check_real(max_value, "max_value")
    if not 0 <= min_value <= max_value:
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
    time_varying = _flag(time_varying, "time_varying", allow_none=True)
    masks, normalizations = _options(masks, "masks"), _options(normalizations, "normalizations")
    values = _options(values, "values")
    if not values or set(values) - {"identity", "matrices"}:
        raise ValidationError(f"values must be a nonempty subset of ('identity', 'matrices'), got {values!r}.")
    if time_varying is None:
        time_varying = draw(st.booleans())
    P = draw(head_matrices(h, d, time_varying=time_varying, scale=scale))
    U = None
    if draw(st.sampled_from(tuple(values))) == "matrices":
        U = draw(head_matrices(h, d, time_varying=time_varying, scale=scale))
    b = draw(betas(max_value=2.0)) if beta is None else (draw(beta) if isinstance(beta, SearchStrategy) else check_beta(beta))
    W = None if isinstance(manifold, Sphere) else manifold.W
    return AttentionField(P, U, W=W, mask=draw(st.sampled_from(tuple(masks))),
                          normalization=draw(st.sampled_from(tuple(normalizations))), beta=b)
