"""The matrix and manifold strategies of :mod:`riemattn.testing.strategies` (re-exported there):
orthogonal and SPD matrices, spheres, ellipsoids and every manifold kind riemattn registers.

Below both :mod:`riemattn.testing.strategies` and the attention strategies
(``riemattn.testing._attention``), which draw their manifolds and matrices from here.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from ..errors import ValidationError
from ..geometry.ellipsoid import ELLIPSOID_METRICS
from ..geometry.manifolds import Ellipsoid, Euclidean, Sphere
from ._draw import DIMS, _floats, _matrix, _positive, _size

#: Every kind of manifold riemattn registers (``manifolds(kinds=MANIFOLD_KINDS)`` draws each;
#: tests/suites/test_edges_manifolds.py checks that every manifold class riemattn exports is here).
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


#: The largest condition number drawn: Q diag(lam) Q^T rounds its entries by ~d eps lam_max, so
#: beyond ~1e12 (d up to 8: 2e-3 of the eigenvalue 1) W is no longer reliably positive definite.
MAX_CONDITION = 1e12


@st.composite
def spd_matrices(draw, d, *, max_condition=10.0):
    """A symmetric positive definite W, shape (d, d), eigenvalues in [1, max_condition].

    The condition number is therefore at most ``max_condition`` (to rounding, ~1e-15 relative).
    Shrinks toward the identity (all eigenvalues 1).
    """
    max_condition = _positive(max_condition, "max_condition", 0.0)
    if not 1.0 <= max_condition <= MAX_CONDITION:
        raise ValidationError(f"max_condition must be >= 1 and <= {MAX_CONDITION:g}, got {max_condition}.")
    Q = draw(orthogonal_matrices(d))
    lam = np.array(draw(st.lists(_floats(1.0, max_condition), min_size=len(Q), max_size=len(Q))))
    if np.all(lam == 1.0):
        return np.eye(len(Q))  # exactly the identity: the W = I edge (the sphere as an ellipsoid)
    W = (Q * lam) @ Q.T
    return 0.5 * (W + W.T)  # exactly symmetric (Ellipsoid checks symmetry)


@st.composite
def spheres(draw, *, dims=DIMS):
    """``Sphere(d - 1)``: points have d components (``dims``: int or strategy of d >= 2)."""
    return Sphere(_size(draw, dims, "dims", 2) - 1)


def _metrics(metrics):
    metrics = tuple(metrics)
    bad = [m for m in metrics if m not in ELLIPSOID_METRICS]
    if not metrics or bad:
        raise ValidationError(f"metrics must be a nonempty subset of {tuple(ELLIPSOID_METRICS)}, got {metrics!r}.")
    return metrics


@st.composite
def ellipsoids(draw, *, dims=DIMS, max_condition=10.0, metrics=("W",)):
    """``Ellipsoid(W, metric=...)``, W drawn by :func:`~riemattn.testing.strategies.spd_matrices`
    (condition number <= max_condition; exactly the identity when it shrinks), the metric from
    ``metrics`` (names of ``riemattn.geometry.ellipsoid.ELLIPSOID_METRICS``: ``"W"``, ``"euclidean"``)."""
    metrics = _metrics(metrics)
    W = draw(spd_matrices(_size(draw, dims, "dims", 2), max_condition=max_condition))
    return Ellipsoid(W, metric=draw(st.sampled_from(metrics)))


@st.composite
def manifolds(draw, *, dims=DIMS, kinds=("sphere", "ellipsoid"), max_condition=10.0, metrics=("W",)):
    """A Sphere, Ellipsoid or (if ``"euclidean"`` is in ``kinds``) Euclidean of dimension d.

    ``kinds`` is a subset of :data:`MANIFOLD_KINDS` (all of them: every manifold riemattn
    registers); an ellipsoid's metric is drawn from ``metrics`` (see :func:`ellipsoids`).
    Shrinks toward the first kind in ``kinds`` (the sphere by default).
    """
    kinds = tuple(kinds)
    bad = [k for k in kinds if k not in MANIFOLD_KINDS]
    if not kinds or bad:
        raise ValidationError(f"kinds must be a nonempty subset of {MANIFOLD_KINDS}, got {kinds!r}.")
    metrics = _metrics(metrics)
    kind = draw(st.sampled_from(kinds))
    d = _size(draw, dims, "dims", 2)
    if kind == "sphere":
        return Sphere(d - 1)
    if kind == "euclidean":
        return Euclidean(d)
    return Ellipsoid(draw(spd_matrices(d, max_condition=max_condition)), metric=draw(st.sampled_from(metrics)))
