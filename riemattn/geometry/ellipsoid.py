"""The ellipsoid E_W = {x in R^d : x^T W x = 1} as a geomstats level set.

Equipped by default with the W-metric (:class:`~riemattn.geometry.metrics.EllipsoidMetric`, closed
form through the isometry x -> W^{1/2} x onto the round sphere); ``metric="euclidean"`` equips it
with the metric induced by the ambient dot product (numerical geodesics, registered by
:mod:`riemattn.solvers.geodesics`). The sphere's coordinate charts and random distributions are
pushed forward by W^{-1/2}.

References
----------
Rodriguez Abella, Silvestre, Tabuada, "Consensus is all you get", ICML 2025, section 2 and eq. (3).
"""

from __future__ import annotations

import hashlib

import numpy as np
from geomstats.geometry.base import LevelSet
from geomstats.geometry.euclidean import Euclidean as _GsEuclidean
from geomstats.geometry.hypersphere import Hypersphere

from .._backend import constant, is_torch, requires_grad
from .._validation import check_flag, check_memory, check_size, check_spd
from ..errors import ValidationError
from ._fast import RAW, _FastMixin, check_chart_dim, unfit
from .metrics import EllipsoidMetric

__all__ = ["ELLIPSOID_METRICS", "Ellipsoid"]

#: The metrics ``Ellipsoid(W, metric=...)`` accepts: name -> geomstats RiemannianMetric class.
#: "W" is the closed-form W-metric; :mod:`riemattn.solvers.geodesics` adds "euclidean" (the metric
#: induced by the ambient dot product), which needs riemattn's integrators.
ELLIPSOID_METRICS = {"W": EllipsoidMetric}

#: The largest number of entries of W that ``repr(Ellipsoid(W))`` prints in full (8 x 8).
REPR_MAX_ENTRIES = 64


class Ellipsoid(_FastMixin, LevelSet):
    """The ellipsoid E_W = {x in R^d : x^T W x = 1} for a symmetric positive definite W.

    A geomstats :class:`~geomstats.geometry.base.LevelSet` of the submersion x^T W x - 1.

    Parameters
    ----------
    W : array_like, shape (d, d)
        Symmetric positive definite matrix (checked: finite, symmetric to 1e-10 relative,
        smallest eigenvalue > 0). The manifold has dimension ``d - 1``. A PyTorch tensor with
        ``requires_grad`` is kept as a parameter: computations on tensor tokens use it (read
        afresh at every call, so gradients with respect to W flow, see docs/autodiff.md); NumPy
        computations use its values at construction.
    equip : bool, default True
        Equip the manifold with its metric (geomstats' convention).
    metric : {"W", "euclidean"}
        ``"W"`` (default): <X, Y>_W = X^T W Y, every method in closed form
        (:class:`~riemattn.geometry.metrics.EllipsoidMetric`). ``"euclidean"``: the metric induced
        by the ambient dot product, geodesics integrated numerically
        (:class:`riemattn.solvers.geodesics.InducedEllipsoidMetric`).

    Notes
    -----
    ``projection`` is layer normalization pi_W(x) = x / |x|_W; ``to_tangent`` is its tangent map at
    a point of E_W, (I - y y^T W) v (ICML eq. 3). ``Ellipsoid(np.eye(d))`` agrees with
    ``Sphere(d - 1)`` on every public method of both (tests/geometry/test_manifolds_methods.py enumerates
    them). Fast unchecked primitives (``inner``, ``tangent``, ``normalize``, ``retract``, ...) are
    documented in ``riemattn.geometry._fast``.

    References
    ----------
    Rodriguez Abella, Silvestre, Tabuada, "Consensus is all you get", ICML 2025, section 2.
    """

    def __init__(self, W, equip: bool = True, metric: str = "W"):
        self._W_param = W if requires_grad(W) else None
        equip = check_flag(equip, "equip")
        W = check_spd(W, "W")
        if W.shape[0] < 2:
            raise ValidationError(
                f"W must be at least 2 x 2 (E_W is a manifold of dimension d - 1 >= 1), got shape {W.shape}."
            )
        if metric not in ELLIPSOID_METRICS:
            raise ValidationError(f"metric must be one of {sorted(ELLIPSOID_METRICS)}, got {metric!r}.")
        self._metric_name = metric
        self._W = W
        lam, vec = np.linalg.eigh(W)
        self._sqrt_W = (vec * np.sqrt(lam)) @ vec.T
        self._inv_sqrt_W = (vec / np.sqrt(lam)) @ vec.T
        self._is_identity = self._W_param is None and bool(np.array_equal(W, np.eye(W.shape[0])))
        self.dim = W.shape[0] - 1
        self.intrinsic = False
        super().__init__(dim=W.shape[0] - 1, equip=equip)

    # --- geomstats interface -------------------------------------------------------------
    def _define_embedding_space(self):
        return _GsEuclidean(self._W.shape[0])

    def default_metric(self):
        return ELLIPSOID_METRICS[self._metric_name]

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
        """W x over the last axis (x @ W, W symmetric). Unchecked fast primitive."""
        if self._is_identity:
            return x
        return x @ self.W_like(x)

    def W_like(self, x):
        """W as an array of the kind, device and dtype of ``x`` (cached; a parameter W is read afresh)."""
        if self._W_param is not None and is_torch(x):
            return self._W_param.to(dtype=x.dtype, device=x.device)
        try:
            return constant(self.__dict__.setdefault("_consts", {}), "W", self._W, x)
        except RAW as exc:
            raise unfit("Ellipsoid.W_like", self.ambient_dim, exc, x=x) from exc

    @property
    def is_identity(self) -> bool:
        return self._is_identity

    def submersion(self, point):
        """x^T W x - 1, shape (...)."""
        try:
            return self.inner(point, point) - 1.0
        except RAW as exc:
            raise unfit("Ellipsoid.submersion", self.ambient_dim, exc, point=point) from exc

    def tangent_submersion(self, vector, point):
        """Differential of the submersion: 2 x^T W v, shape (...)."""
        try:
            return 2.0 * self.inner(point, vector)
        except RAW as exc:
            raise unfit("Ellipsoid.tangent_submersion", self.ambient_dim, exc, vector=vector, point=point) from exc

    # --- the sphere's charts and distributions, pushed forward by W^{-1/2} -----------------
    def _sphere(self):
        return Hypersphere(self.dim)

    def _to_sphere(self, x):
        return np.asarray(x, dtype=float) @ self._sqrt_W

    def _from_sphere(self, z):
        return np.asarray(z) @ self._inv_sqrt_W

    def random_uniform(self, n_samples=1):
        """Push-forward by W^{-1/2} of uniform points on the sphere, shape (n_samples, d).

        Uniform for the Riemannian volume of the W-metric (x -> W^{1/2} x is an isometry), not for
        the surface area of E_W in R^d unless W is a multiple of the identity. Uses geomstats'
        global RNG (``gs.random.seed``) like Hypersphere.random_uniform; squeezed when
        ``n_samples == 1``.
        """
        n_samples = check_size(n_samples, "n_samples", 1)
        check_memory((n_samples, self.ambient_dim), "n_samples")
        return self._from_sphere(self._sphere().random_uniform(n_samples))

    def random_point(self, n_samples=1, bound=1.0):
        """Same as :meth:`random_uniform` (``bound`` unused, kept for geomstats' signature)."""
        return self.random_uniform(n_samples)

    def random_tangent_vec(self, base_point=None, n_samples=1):
        """Random tangent vectors: W^{-1/2} g projected onto T_x E_W, g standard Gaussian in R^d.

        The push-forward of the sphere's random tangent vectors (geomstats' Manifold
        .random_tangent_vec) by the isometry, so their W-norms are distributed as on the sphere.
        Shapes as geomstats: ``(n_samples, d)`` or ``base_point.shape`` (``n_samples`` must then be
        1 or the number of base points). Uses geomstats' global RNG.
        """
        import geomstats.backend as gs

        n_samples = check_size(n_samples, "n_samples", 1)
        check_memory((n_samples, self.ambient_dim), "n_samples")
        if base_point is not None:
            base_point = self.check_point(base_point, "base_point")
            if n_samples > 1 and base_point.ndim > 1 and n_samples != len(base_point):
                raise ValidationError(
                    f"n_samples must be 1 or the number of base points ({len(base_point)}), got {n_samples}."
                )
        batch = () if n_samples == 1 else (n_samples,)
        g = gs.random.normal(size=batch + self.shape) @ self._inv_sqrt_W
        return self.to_tangent(g, base_point)

    def random_von_mises_fisher(self, mu=None, kappa=10, n_samples=1, max_iter=100):
        """von Mises--Fisher samples: density prop. to exp(kappa <mu, x>_W) for the W-metric's volume.

        The push-forward by W^{-1/2} of Hypersphere.random_von_mises_fisher with mean W^{1/2} mu
        (``mu`` on E_W; default: W^{-1/2} e_1). Shape (n_samples, d), squeezed for one sample.

        References
        ----------
        Wood, "Simulation of the von Mises Fisher distribution", Comm. Stat. Simul. Comput. 1994.
        """
        mu_s = None if mu is None else self._to_sphere(self.check_point(mu, "mu"))
        return self._from_sphere(self._sphere().random_von_mises_fisher(mu_s, kappa, n_samples, max_iter))

    def random_riemannian_normal(self, mean=None, precision=None, n_samples=1, max_iter=100):
        """Riemannian normal samples (density prop. to exp(-log_mean(x)^T Lambda log_mean(x) / 2)).

        The push-forward by W^{-1/2} of Hypersphere.random_riemannian_normal with mean
        W^{1/2} ``mean`` (default W^{-1/2} e_d): ``precision`` is expressed in the W-orthonormal
        frame that W^{-1/2} maps the sphere's frame to. Shape (n_samples, d), squeezed for one.

        References
        ----------
        Hauberg, "Directional statistics with the spherical normal distribution", FUSION 2018.
        """
        mean_s = None if mean is None else self._to_sphere(self.check_point(mean, "mean"))
        return self._from_sphere(self._sphere().random_riemannian_normal(mean_s, precision, n_samples, max_iter))

    def angle_to_extrinsic(self, point_angle):
        """Circle (d = 2) only: W^{-1/2} (cos t, sin t), shape (..., 2)."""
        check_chart_dim(self, 1, "angle_to_extrinsic")
        return self._from_sphere(Hypersphere(self.dim).angle_to_extrinsic(point_angle))

    def extrinsic_to_angle(self, point_extrinsic):
        """Circle (d = 2) only: the angle of W^{1/2} x, shape (...)."""
        check_chart_dim(self, 1, "extrinsic_to_angle")
        return Hypersphere(self.dim).extrinsic_to_angle(self._to_sphere(point_extrinsic))

    def spherical_to_extrinsic(self, point_spherical):
        """d = 3 only: W^{-1/2} of the sphere's point with spherical coordinates (theta, phi)."""
        check_chart_dim(self, 2, "spherical_to_extrinsic")
        return self._from_sphere(self._sphere().spherical_to_extrinsic(point_spherical))

    def extrinsic_to_spherical(self, point_extrinsic):
        """d = 3 only: the spherical coordinates of W^{1/2} x, shape (..., 2)."""
        check_chart_dim(self, 2, "extrinsic_to_spherical")
        return self._sphere().extrinsic_to_spherical(self._to_sphere(point_extrinsic))

    def tangent_spherical_to_extrinsic(self, tangent_vec_spherical, base_point_spherical):
        """d = 3 only: W^{-1/2} of the sphere's tangent vector, shape (..., 3)."""
        check_chart_dim(self, 2, "tangent_spherical_to_extrinsic")
        return self._from_sphere(
            self._sphere().tangent_spherical_to_extrinsic(tangent_vec_spherical, base_point_spherical))

    def tangent_extrinsic_to_spherical(self, tangent_vec, base_point=None, base_point_spherical=None):
        """d = 3 only: the spherical components of W^{1/2} v at W^{1/2} x, shape (..., 2)."""
        check_chart_dim(self, 2, "tangent_extrinsic_to_spherical")
        bp = None if base_point is None else self._to_sphere(base_point)
        return self._sphere().tangent_extrinsic_to_spherical(
            self._to_sphere(tangent_vec), base_point=bp, base_point_spherical=base_point_spherical)

    def intrinsic_to_extrinsic_coords(self, point_intrinsic):
        """d = 2 or 3 only: W^{-1/2} of the sphere's point with these angle/spherical coordinates."""
        return self._from_sphere(self._sphere().intrinsic_to_extrinsic_coords(point_intrinsic))

    def extrinsic_to_intrinsic_coords(self, point_extrinsic):
        """d = 2 or 3 only: the angle/spherical coordinates of W^{1/2} x."""
        return self._sphere().extrinsic_to_intrinsic_coords(self._to_sphere(point_extrinsic))

    def __repr__(self) -> str:
        """``Ellipsoid(W=np.array([[...]]))`` with every entry of W in full precision (the shortest
        repr that round-trips, so that ``eval`` of it under ``import numpy as np`` rebuilds an equal
        manifold) when W has at most ``REPR_MAX_ENTRIES`` entries; for a larger W, a summary:
        shape, eigenvalue range and a digest of its bytes (``Ellipsoid(W of shape (50, 50),
        eigenvalues in [...], sha1 ...)``)."""
        extra = "" if self._metric_name == "W" else f", metric={self._metric_name!r}"
        W = self._W
        if W.size <= REPR_MAX_ENTRIES:
            rows = ", ".join("[" + ", ".join(repr(float(v)) for v in row) + "]" for row in W)
            return f"Ellipsoid(W=np.array([{rows}]){extra})"
        lam = np.linalg.eigvalsh(W)
        digest = hashlib.sha1(np.ascontiguousarray(W).tobytes()).hexdigest()[:12]
        return (f"Ellipsoid(W of shape {W.shape}, eigenvalues in [{float(lam[0])!r}, {float(lam[-1])!r}], "
                f"sha1 {digest}{extra})")
