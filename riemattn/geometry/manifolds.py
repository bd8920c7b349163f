"""Token manifolds: the sphere S^n, the ellipsoid E_W^n and flat R^d, as geomstats objects.

Layer normalization puts every token on ``E_W = {x in R^d : x^T W x = 1}`` (``d = n + 1``,
``W`` symmetric positive definite); ``W = I`` is the sphere. Both classes are geomstats
manifolds -- :class:`Sphere` *is* :class:`geomstats.geometry.hypersphere.Hypersphere`, and
:class:`~riemattn.geometry.ellipsoid.Ellipsoid` is a :class:`geomstats.geometry.base.LevelSet` --
so they can be passed wherever geomstats expects a manifold. All methods broadcast over leading
axes: a token array of shape ``(..., l, d)`` is handled directly.

Their metric is the W-metric <X, Y>_W = X^T W Y (:mod:`riemattn.geometry.metrics`, every method
in closed form); the ellipsoid also takes the metric induced by the ambient dot product
(``Ellipsoid(W, metric="euclidean")``, geodesics integrated by :mod:`riemattn.solvers.geodesics`).
Besides geomstats' interface every class has pymanopt's ``retraction(point, tangent_vec)`` and
``vector_transport(point, tangent_vec, vector)``, and the fast unchecked primitives the steppers
call (``riemattn.geometry._fast``). :class:`Euclidean` is flat R^d with the translation group,
so that every stepper also integrates unconstrained dynamics.

References
----------
Rodriguez Abella, Silvestre, Tabuada, "Consensus is all you get", ICML 2025, eq. (3).
"""

from __future__ import annotations

import numpy as np
from geomstats.geometry.euclidean import Euclidean as _GsEuclidean
from geomstats.geometry.hypersphere import Hypersphere

from .._backend import dot_last, namespace
from .._validation import (as_float_array, check_finite, check_flag, check_memory, check_nonzero_tokens,
                           check_points, check_size, check_spd)
from ..errors import ValidationError
from ._fast import ATOL, RAW, _FastMixin, check_broadcast, check_chart_dim, check_frame_args, same_kind, unfit
from .ellipsoid import Ellipsoid
from .metrics import EllipsoidMetric, SphereMetric

__all__ = ["ATOL", "Ellipsoid", "EllipsoidMetric", "Euclidean", "Sphere", "SphereMetric", "project"]


class Sphere(_FastMixin, Hypersphere):
    """The unit sphere S^dim in R^(dim+1): geomstats' Hypersphere plus fast primitives.

    Parameters
    ----------
    dim : int
        Dimension n of the sphere; points have shape ``(..., dim + 1)``. At most 2**31 - 1, and
        geomstats' (dim + 1, dim + 1) metric matrix must fit in memory (ValidationError otherwise).

    Notes
    -----
    ``Sphere(n)`` is an instance of :class:`geomstats.geometry.hypersphere.Hypersphere` with
    extrinsic coordinates; every geomstats method is inherited unchanged. ``W`` is the identity.
    """

    def __init__(self, dim: int, equip: bool = True):
        dim = check_size(dim, "dim", 1, what=" (the sphere S^dim lives in R^(dim+1))")
        check_memory((dim + 1, dim + 1), "dim")  # geomstats builds the (dim+1, dim+1) metric matrix
        super().__init__(dim, intrinsic=False, equip=check_flag(equip, "equip"))

    @staticmethod
    def default_metric():
        """The round metric, :class:`~riemattn.geometry.metrics.SphereMetric` (a HypersphereMetric)."""
        return SphereMetric

    @property
    def W(self) -> np.ndarray:
        return np.eye(self.dim + 1)

    @property
    def sqrt_W(self) -> np.ndarray:
        return np.eye(self.dim + 1)

    @property
    def inv_sqrt_W(self) -> np.ndarray:
        return np.eye(self.dim + 1)

    @staticmethod
    def apply_W(x):
        """W x for W = I (returns x itself)."""
        return x

    @property
    def is_identity(self) -> bool:
        return True

    def random_uniform(self, n_samples=1):
        """Uniform points on the sphere, shape (n_samples, dim + 1) (geomstats' global RNG; squeezed for 1)."""
        n_samples = check_size(n_samples, "n_samples", 1)
        check_memory((n_samples, self.dim + 1), "n_samples")
        return super().random_uniform(n_samples)

    # geomstats' charts of the circle and the 2-sphere, refused in other dimensions
    def angle_to_extrinsic(self, point_angle):
        check_chart_dim(self, 1, "angle_to_extrinsic")
        return super().angle_to_extrinsic(point_angle)

    def extrinsic_to_angle(self, point_extrinsic):
        check_chart_dim(self, 1, "extrinsic_to_angle")
        return super().extrinsic_to_angle(point_extrinsic)

    def spherical_to_extrinsic(self, point_spherical):
        check_chart_dim(self, 2, "spherical_to_extrinsic")
        return super().spherical_to_extrinsic(point_spherical)

    def extrinsic_to_spherical(self, point_extrinsic):
        check_chart_dim(self, 2, "extrinsic_to_spherical")
        return super().extrinsic_to_spherical(point_extrinsic)

    def tangent_spherical_to_extrinsic(self, tangent_vec_spherical, base_point_spherical):
        check_chart_dim(self, 2, "tangent_spherical_to_extrinsic")
        return super().tangent_spherical_to_extrinsic(tangent_vec_spherical, base_point_spherical)

    def tangent_extrinsic_to_spherical(self, tangent_vec, base_point=None, base_point_spherical=None):
        check_chart_dim(self, 2, "tangent_extrinsic_to_spherical")
        return super().tangent_extrinsic_to_spherical(tangent_vec, base_point, base_point_spherical)

    def __repr__(self) -> str:
        return f"Sphere({self.dim})"


class Euclidean(_GsEuclidean):
    """Flat R^d: tokens are not normalized; a geomstats :class:`~geomstats.geometry.euclidean.Euclidean`.

    Parameters
    ----------
    dim : int
        d, the dimension of the space; points have shape ``(..., dim)``. At most 2**31 - 1, and
        geomstats' (dim, dim) metric matrix must fit in memory (ValidationError otherwise).

    Notes
    -----
    With this manifold every stepper integrates plain dynamics in R^d: the retraction and the
    tangent projection are the identity, and the Lie-group steppers act by the translation group
    (exponentials are sums), so each reduces to its classical Runge--Kutta tableau. GLPR's pure
    self-attention without layer normalization (their section 9.2) lives here.
    """

    def __init__(self, dim: int, equip: bool = True):
        dim = check_size(dim, "dim", 1, what=" (the space R^dim)")
        check_memory((dim, dim), "dim")  # geomstats builds the (dim, dim) metric matrix
        super().__init__(dim, equip=check_flag(equip, "equip"))

    @property
    def ambient_dim(self) -> int:
        """d, the dimension of the points."""
        return self.dim

    @property
    def W(self) -> np.ndarray:
        return np.eye(self.dim)

    is_identity = True

    @staticmethod
    def apply_W(x):
        return x

    @staticmethod
    def inner(x, y):
        """Euclidean inner product over the last axis; shape (...)."""
        try:
            return dot_last(x, y)
        except RAW as exc:  # after the failure only: InputTypeError naming x and y
            raise unfit("Euclidean.inner", None, exc, x=x, y=y) from exc

    def norm(self, x):
        try:
            return namespace(x).sqrt(self.inner(x, x))
        except RAW as exc:
            raise unfit("Euclidean.norm", self.dim, exc, x=x) from exc

    @staticmethod
    def tangent(y, v):
        """Every vector is tangent: returns v."""
        return v

    @staticmethod
    def normalize(x):
        """(x, None): nothing to normalize (None stands for the scale 1)."""
        return x, None

    @staticmethod
    def retract(x):
        """The identity (unchecked fast primitive)."""
        return x

    def retraction(self, point, tangent_vec, method: str = "projection"):
        """x + v (exact: the exponential of flat R^d), shape (..., dim) (pymanopt's order)."""
        if method not in ("projection", "exp"):
            raise ValidationError(f"method must be 'projection' or 'exp', got {method!r}.")
        x, v = same_kind(check_points(point, "point", self, on_manifold=False, min_axes=1),
                         check_points(tangent_vec, "tangent_vec", self, on_manifold=False, min_axes=1))
        check_broadcast([x, v], ["point", "tangent_vec"])
        return x + v

    def vector_transport(self, point, tangent_vec, vector, method: str = "projection"):
        """``vector`` itself (every tangent space is R^dim), broadcast with the others, shape (..., dim)."""
        z = self.retraction(point, tangent_vec, method)
        u = check_points(vector, "vector", self, on_manifold=False, min_axes=1)
        z, u = same_kind(z, u)
        check_broadcast([z, u], ["point + tangent_vec", "vector"])
        return u + 0.0 * z

    @staticmethod
    def deviation(x) -> float:
        """0: every point lies in R^d."""
        return 0.0

    def projection(self, point):
        """The identity (checked: finite real numbers with ``dim`` components), shape (..., dim)."""
        return check_points(point, "point", self, on_manifold=False, min_axes=1)

    def lie_frame(self, y, slots: int):
        """The translation action for one Lie-group step (exponentials are sums); the arguments are
        checked as by ``Sphere.lie_frame`` (O(1): kind, last axis, ``slots`` in [1, 64])."""
        from .groups import TranslationFrame

        check_frame_args(self, y, slots)
        return TranslationFrame(y)

    def random_uniform(self, n_samples=1):
        """Points uniform in the cube [-1, 1]^dim, shape (n_samples, dim) (geomstats' global RNG)."""
        n_samples = check_size(n_samples, "n_samples", 1)
        check_memory((n_samples, self.dim), "n_samples")
        return self.random_point(n_samples)

    def __repr__(self) -> str:
        return f"Euclidean({self.dim})"


def project(y, W=None):
    """pi_W(y) = y / |y|_W over the last axis (the sphere when ``W`` is None).

    Checked: ``y`` finite real, shape (..., d) with d >= 1 and no zero row; ``W`` symmetric positive
    definite (d, d) (ValidationError / InputTypeError naming them)."""
    y = check_nonzero_tokens(check_finite(as_float_array(y, "y"), "y"), "y")
    if y.ndim < 1 or y.shape[-1] < 1:
        raise ValidationError(f"y must have shape (..., d) with d >= 1, got shape {y.shape}.")
    if not np.all(np.isfinite(np.linalg.norm(y, axis=-1))):
        raise ValidationError("y is too large: a row's norm overflows.")
    if W is not None:
        W = check_spd(W, "W", dim=y.shape[-1])
    if W is None:
        return y / np.linalg.norm(y, axis=-1, keepdims=True)
    return y / np.sqrt(np.einsum("...i,...i->...", y, y @ W))[..., None]


def manifold_for(W, d: int, source: str = "the tokens"):
    """The manifold for tokens in R^d: ``Sphere(d - 1)`` if W is None, else ``Ellipsoid(W)``.

    ``source`` names where d comes from, for the messages when d < 2 or W has another size."""
    if W is None and int(d) < 2:
        raise ValidationError(
            f"{source} puts the tokens in R^{d}, whose unit sphere S^{d - 1} has no tangent directions; "
            "a sphere or an ellipsoid needs d >= 2 (W='flat' keeps tokens in R^d unnormalised)."
        )
    if W is None:
        return Sphere(d - 1)
    manifold = Ellipsoid(W)
    if manifold.dim + 1 != d:
        raise ValidationError(
            f"W must have shape ({d}, {d}) to match {source} (d = {d}), got shape {manifold.W.shape}."
        )
    return manifold
