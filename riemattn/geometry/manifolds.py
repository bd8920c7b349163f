"""Token manifolds: the sphere S^n and the ellipsoid E_W^n, as geomstats objects.

Layer normalization puts every token on ``E_W = {x in R^d : x^T W x = 1}`` (``d = n + 1``,
``W`` symmetric positive definite); ``W = I`` is the sphere. Both classes here are geomstats
manifolds -- :class:`Sphere` *is* :class:`geomstats.geometry.hypersphere.Hypersphere`, and
:class:`Ellipsoid` is a :class:`geomstats.geometry.base.LevelSet` -- so they can be passed wherever
geomstats expects a manifold. All methods broadcast over leading axes: a token array of shape
``(..., l, d)`` is handled directly.

Besides geomstats' interface every class exposes the few fast primitives the steppers call
(no validation, any leading axes): ``inner``/``norm`` (the W-inner product), ``tangent(y, v)``
(the tangent projection ``(I - y y^T W) v``), ``normalize(x)`` (the retraction pi_W(x) = x / |x|_W
and the norm it divided by), ``retract(x)`` and ``lie_frame(y, slots)`` (the action of the group
O(W) = {G : G^T W G = W} on the tokens during one step of a Lie-group method, see
:mod:`riemattn.geometry.groups`). :class:`Euclidean` is flat R^d with the translation group, so that every
stepper also integrates unconstrained dynamics.

References
----------
Rodriguez Abella, Silvestre, Tabuada, "Consensus is all you get", ICML 2025, eq. (3).
"""

from __future__ import annotations

import numpy as np
from geomstats.geometry.base import LevelSet
from geomstats.geometry.euclidean import Euclidean as _GsEuclidean
from geomstats.geometry.hypersphere import Hypersphere
from geomstats.geometry.riemannian_metric import RiemannianMetric

from .._backend import constant, dot_last, is_torch, namespace, requires_grad, size
from .._validation import as_float_array, check_int, check_nonzero_tokens, check_points, check_spd
from ..errors import ValidationError

__all__ = ["Sphere", "Ellipsoid", "Euclidean", "EllipsoidMetric", "project"]

#: Default absolute tolerance of ``belongs`` / ``is_tangent`` (geomstats uses 1e-12).
ATOL = 1e-10


class _FastMixin:
    """NumPy primitives shared by Sphere and Ellipsoid (W-inner product, W-norm)."""

    W: np.ndarray

    @property
    def ambient_dim(self) -> int:
        """d = n + 1, the dimension of the space the tokens live in."""
        return self.dim + 1

    def inner(self, x, y):
        """W-inner product x^T W y over the last axis; shape (...)."""
        return dot_last(x, self.apply_W(y))

    def norm(self, x):
        """|x|_W = sqrt(x^T W x) over the last axis; shape (...)."""
        return namespace(x).sqrt(self.inner(x, x))

    @property
    def is_identity(self) -> bool:
        """Whether W is the identity (the unit sphere)."""
        return False

    def tangent(self, y, v):
        """(I - y y^T W) v for y on the manifold: the tangent part of v, shape (..., d) (no checks)."""
        return v - self.inner(y, v)[..., None] * y

    def normalize(self, x):
        """(pi_W(x), |x|_W[..., None]): the retraction of x and the norm it divided by (no checks)."""
        r = self.norm(x)[..., None]
        return x / r, r

    def retract(self, x):
        """pi_W(x) = x / |x|_W, the layer normalization (no checks; see ``projection``)."""
        return self.normalize(x)[0]

    def deviation(self, x) -> float:
        """max |x^T W x - 1| over all points of x (how far x is from the manifold)."""
        if not size(x):
            return 0.0
        xp = namespace(x)
        dev = xp.max(xp.abs(self.inner(x, x) - 1.0))
        return float(dev.detach() if is_torch(dev) else dev)  # a number for checks: no gradient

    def lie_frame(self, y, slots: int):
        """The O(W) action on the tokens ``y`` for one Lie-group step with up to ``slots - 1`` generators."""
        from .groups import OWFrame

        return OWFrame(self, y, slots)

    # --- checked public methods (geomstats' names and argument order) ------------------------
    def projection(self, point):
        """Layer normalization pi_W(x) = x / |x|_W, shape (..., d).

        Checked: real finite points with d components, none of them zero (ValidationError).
        """
        point = check_nonzero_tokens(check_points(point, "point", self, on_manifold=False, min_axes=1), "point")
        return point / self.norm(point)[..., None]

    def is_tangent(self, vector, base_point, atol=ATOL):
        """Whether |y^T W v| <= atol, shape (...) (tensors are read as NumPy values)."""
        if is_torch(vector) or is_torch(base_point):
            vector, base_point = as_float_array(vector, "vector"), as_float_array(base_point, "base_point")
        return super().is_tangent(vector, base_point, atol)

    def belongs(self, point, atol=ATOL):
        """Whether |x^T W x - 1| <= atol, shape (...); False for points with the wrong d."""
        point = as_float_array(point, "point")
        if point.shape[-1:] != (self.dim + 1,):
            return np.zeros(point.shape[:-1], dtype=bool)
        return np.abs(self.inner(point, point) - 1.0) <= atol

    def to_tangent(self, vector, base_point):
        """(I - y y^T W) v: the tangent part of ``vector`` at ``base_point`` on the manifold, shape (..., d).

        Checked: real arrays with d components that broadcast together. Not checked, on purpose:
        that ``base_point`` lies on the manifold (user fields call this at the steppers' stage
        points, which are near it) and finiteness (NaN/inf propagate so that ``integrate``
        reports them per trajectory).
        """
        base_point = check_points(base_point, "base_point", self, on_manifold=False, min_axes=1, finite=False)
        vector = check_points(vector, "vector", self, on_manifold=False, min_axes=1, finite=False)
        try:
            np.broadcast_shapes(vector.shape, base_point.shape)
        except ValueError:
            raise ValidationError(
                f"vector of shape {vector.shape} does not broadcast against base_point of shape "
                f"{base_point.shape}."
            ) from None
        return vector - self.inner(base_point, vector)[..., None] * base_point


class Sphere(_FastMixin, Hypersphere):
    """The unit sphere S^dim in R^(dim+1): geomstats' Hypersphere plus fast primitives.

    Parameters
    ----------
    dim : int
        Dimension n of the sphere; points have shape ``(..., dim + 1)``.

    Notes
    -----
    ``Sphere(n)`` is an instance of :class:`geomstats.geometry.hypersphere.Hypersphere` with
    extrinsic coordinates; every geomstats method is inherited unchanged. ``W`` is the identity.
    """

    def __init__(self, dim: int, equip: bool = True):
        dim = check_int(dim, "dim", 1, " (the sphere S^dim lives in R^(dim+1))")
        super().__init__(dim, intrinsic=False, equip=equip)

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
        return super().random_uniform(check_int(n_samples, "n_samples", 1))

    def __repr__(self) -> str:
        return f"Sphere({self.dim})"


class EllipsoidMetric(RiemannianMetric):
    """The metric <X, Y>_W = X^T W Y induced on E_W by the ambient W-inner product.

    ``x -> W^{1/2} x`` is an isometry from (E_W, this metric) onto the unit sphere with its round
    metric, so the exponential, logarithm and distance are the sphere's, conjugated.
    O(W) acts on E_W by isometries of this metric.
    """

    def __init__(self, space, signature=None):
        super().__init__(space, signature=signature)
        self._sphere = Hypersphere(space.dim)

    def inner_product(self, tangent_vec_a, tangent_vec_b, base_point=None):
        return self._space.inner(tangent_vec_a, tangent_vec_b)

    def _to_sphere(self, x):
        return x @ self._space.sqrt_W  # sqrt_W symmetric: (W^1/2 x) as row vectors

    def _from_sphere(self, x):
        return x @ self._space.inv_sqrt_W

    def exp(self, tangent_vec, base_point):
        return self._from_sphere(
            self._sphere.metric.exp(self._to_sphere(tangent_vec), self._to_sphere(base_point))
        )

    def log(self, point, base_point):
        return self._from_sphere(
            self._sphere.metric.log(self._to_sphere(point), self._to_sphere(base_point))
        )

    def dist(self, point_a, point_b):
        return self._sphere.metric.dist(self._to_sphere(point_a), self._to_sphere(point_b))

    def squared_dist(self, point_a, point_b):
        return self.dist(point_a, point_b) ** 2


class Ellipsoid(_FastMixin, LevelSet):
    """The ellipsoid E_W = {x in R^d : x^T W x = 1} for a symmetric positive definite W.

    A geomstats :class:`~geomstats.geometry.base.LevelSet` of the submersion x^T W x - 1,
    equipped by default with :class:`EllipsoidMetric` (the W-inner product).

    Parameters
    ----------
    W : array_like, shape (d, d)
        Symmetric positive definite matrix (checked: finite, symmetric to 1e-10 relative,
        smallest eigenvalue > 0). The manifold has dimension ``d - 1``. A PyTorch tensor with
        ``requires_grad`` is kept as a parameter: computations on tensor tokens use it (read
        afresh at every call, so gradients with respect to W flow, see docs/autodiff.md); NumPy
        computations use its values at construction.

    Notes
    -----
    ``projection`` is layer normalization pi_W(x) = x / |x|_W; ``to_tangent`` is its tangent map at
    a point of E_W, (I - y y^T W) v (ICML eq. 3). ``Ellipsoid(np.eye(d))`` agrees
    with ``Sphere(d - 1)`` on every method.

    References
    ----------
    Rodriguez Abella, Silvestre, Tabuada, "Consensus is all you get", ICML 2025, section 2.
    """

    def __init__(self, W, equip: bool = True):
        self._W_param = W if requires_grad(W) else None
        W = check_spd(W, "W")
        if W.shape[0] < 2:
            raise ValidationError(
                f"W must be at least 2 x 2 (E_W is a manifold of dimension d - 1 >= 1), got shape {W.shape}."
            )
        self._W = W
        lam, vec = np.linalg.eigh(W)
        self._sqrt_W = (vec * np.sqrt(lam)) @ vec.T
        self._inv_sqrt_W = (vec / np.sqrt(lam)) @ vec.T
        self._is_identity = self._W_param is None and bool(np.array_equal(W, np.eye(W.shape[0])))
        self.dim = W.shape[0] - 1
        super().__init__(dim=W.shape[0] - 1, equip=equip)

    # --- geomstats interface -------------------------------------------------------------
    def _define_embedding_space(self):
        return _GsEuclidean(self._W.shape[0])

    def default_metric(self):
        return EllipsoidMetric

    @property
    def W(self) -> np.ndarray:
        return self._W

    @property
    def sqrt_W(self) -> np.ndarray:
        """The symmetric square root W^{1/2}."""
        return self._sqrt_W

    @property
    def inv_sqrt_W(self) -> np.ndarray:
        """W^{-1/2}; E_W = W^{-1/2} S^n."""
        return self._inv_sqrt_W

    def apply_W(self, x):
        """W x over the last axis (x @ W, W symmetric)."""
        if self._is_identity:
            return x
        return x @ self.W_like(x)

    def W_like(self, x):
        """W as an array of the kind, device and dtype of ``x`` (cached; a parameter W is read afresh)."""
        if self._W_param is not None and is_torch(x):
            return self._W_param.to(dtype=x.dtype, device=x.device)
        return constant(self.__dict__.setdefault("_consts", {}), "W", self._W, x)

    @property
    def is_identity(self) -> bool:
        return self._is_identity

    def submersion(self, point):
        """x^T W x - 1, shape (...)."""
        return self.inner(point, point) - 1.0

    def tangent_submersion(self, vector, point):
        """Differential of the submersion: 2 x^T W v, shape (...)."""
        return 2.0 * self.inner(point, vector)

    def is_tangent(self, vector, base_point, atol=ATOL):
        """Whether |y^T W v| <= atol, shape (...) (tensors are read as NumPy values)."""
        vector, base_point = as_float_array(vector, "vector"), as_float_array(base_point, "base_point")
        return np.abs(self.inner(base_point, vector)) <= atol

    def random_uniform(self, n_samples=1):
        """Push-forward by W^{-1/2} of uniform points on the sphere, shape (n_samples, d).

        This is the distribution of pi_W(g) for a standard Gaussian g transformed by W^{-1/2}; it is
        uniform on E_W only when W is a multiple of the identity. Uses geomstats' global RNG
        (``gs.random.seed``) like Hypersphere.random_uniform; squeezed when ``n_samples == 1``.
        """
        n_samples = check_int(n_samples, "n_samples", 1)
        return Hypersphere(self.dim).random_uniform(n_samples) @ self._inv_sqrt_W

    def random_point(self, n_samples=1, bound=1.0):
        """Same as :meth:`random_uniform` (``bound`` unused, kept for geomstats' signature)."""
        return self.random_uniform(n_samples)

    def random_tangent_vec(self, base_point, n_samples=1):
        base_point = np.asarray(base_point, dtype=float)
        shape = (n_samples,) + base_point.shape if n_samples > 1 else base_point.shape
        return self.to_tangent(np.random.standard_normal(shape), base_point)

    def __repr__(self) -> str:
        return f"Ellipsoid(W of shape {self._W.shape})"


class Euclidean(_GsEuclidean):
    """Flat R^d: tokens are not normalized; a geomstats :class:`~geomstats.geometry.euclidean.Euclidean`.

    Parameters
    ----------
    dim : int
        d, the dimension of the space; points have shape ``(..., dim)``.

    Notes
    -----
    With this manifold every stepper integrates plain dynamics in R^d: the retraction and the
    tangent projection are the identity, and the Lie-group steppers act by the translation group
    (exponentials are sums), so each reduces to its classical Runge--Kutta tableau. GLPR's pure
    self-attention without layer normalization (their section 9.2) lives here.
    """

    def __init__(self, dim: int, equip: bool = True):
        dim = check_int(dim, "dim", 1, " (the space R^dim)")
        super().__init__(dim, equip=equip)

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
        return dot_last(x, y)

    def norm(self, x):
        return namespace(x).sqrt(self.inner(x, x))

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
        return x

    @staticmethod
    def deviation(x) -> float:
        """0: every point lies in R^d."""
        return 0.0

    def projection(self, point):
        """The identity (checked: finite real numbers with ``dim`` components), shape (..., dim)."""
        return check_points(point, "point", self, on_manifold=False, min_axes=1)

    def lie_frame(self, y, slots: int):
        """The translation action for one Lie-group step (exponentials are sums)."""
        from .groups import TranslationFrame

        return TranslationFrame(y)

    def random_uniform(self, n_samples=1):
        """Points uniform in the cube [-1, 1]^dim, shape (n_samples, dim) (geomstats' global RNG)."""
        return self.random_point(check_int(n_samples, "n_samples", 1))

    def __repr__(self) -> str:
        return f"Euclidean({self.dim})"


def project(y, W=None):
    """pi_W(y) = y / |y|_W over the last axis (the sphere when ``W`` is None)."""
    y = np.asarray(y, dtype=float)
    if W is None:
        return y / np.linalg.norm(y, axis=-1, keepdims=True)
    return y / np.sqrt(np.einsum("...i,...i->...", y, y @ W))[..., None]


def manifold_for(W, d: int, source: str = "the tokens"):
    """The manifold for tokens in R^d: ``Sphere(d - 1)`` if W is None, else ``Ellipsoid(W)``.

    ``source`` names where d comes from, for the message when W has another size."""
    if W is None:
        return Sphere(d - 1)
    manifold = Ellipsoid(W)
    if manifold.dim + 1 != d:
        raise ValidationError(
            f"W must have shape ({d}, {d}) to match {source} (d = {d}), got shape {manifold.W.shape}."
        )
    return manifold
