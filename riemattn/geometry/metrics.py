r"""The W-metric <X, Y>_W = X^T W Y on the ellipsoid E_W (and the round metric on the sphere, W = I).

Every method is in closed form through the isometry x -> W^{1/2} x from (E_W, <.,.>_W) onto the
unit sphere with its round metric, written directly in the ellipsoid's coordinates (only W-inner
products appear, so W^{1/2} is never applied):

- exp_x(v) = cos|v|_W x + sin|v|_W v / |v|_W;  log_x(y) = theta u / |u|_W with u = y - <x, y>_W x
  and theta = atan2(|u|_W, <x, y>_W) = dist(x, y);
- parallel transport of u along t -> exp_x(t w): u + <u, e>_W ((cos theta - 1) e - sin theta x),
  theta = |w|_W, e = w / theta;
- curvature in geomstats' convention R(X, Y)Z = <Y, Z>_W X - <X, Z>_W Y (sectional curvature 1,
  Ricci (n - 1) g, scalar n (n - 1)); injectivity radius pi.

Tensors are given in the ambient (extrinsic) coordinates of R^d, the coordinates the points have:
the metric matrix is W, the Christoffel symbols Gamma^k_ij(x) = x^k W_ij (so that geomstats'
geodesic equation x'' = -Gamma(x)(x', x') reads x'' = -(x'^T W x') x, the geodesic equation of
E_W), and the curvature tensors are the closed forms above extended by zero on the normal
direction (P = I - x x^T W and G = W - W x x^T W project every slot onto the tangent space).

Base points (and the points of log/dist) are checked to lie on the manifold (1e-8 in float64, the
precision rule of ``riemattn._validation.manifold_atol`` otherwise) and arguments to broadcast
(ValidationError naming them); NumPy and torch arrays are accepted, and the result has the kind,
device and dtype of the input. exp, log, squared_dist and the transport are written as smooth
functions of squared norms (``riemattn.geometry._safe``): autograd's derivatives at v = 0, y = x
and w = 0 are finite and right.

References
----------
Rodriguez Abella, Silvestre, Tabuada, "Consensus is all you get", ICML 2025, section 2 (E_W);
Absil, Mahony, Sepulchre, *Optimization Algorithms on Matrix Manifolds*, 2008, section 5.4
(the sphere's exponential) and P. Petersen, *Riemannian Geometry*, 3rd ed., section 3.2
(constant curvature: R(X, Y)Z = <Y, Z>X - <X, Z>Y).
"""

from __future__ import annotations

import math

import numpy as np
from geomstats.geometry.hypersphere import Hypersphere, HypersphereMetric
from geomstats.geometry.riemannian_metric import RiemannianMetric

from .._backend import constant, device_of, namespace
from .._precision import _cond_W
from ..errors import ValidationError
from ._fast import check_broadcast, same_kind
from ._hypersurface import riemann_from as _riemann
from ._safe import angle_direction, atan_ratio, check_plane, cos_sinc, pair as _pair, quiet, safe_sqrt

__all__ = ["EllipsoidMetric", "SphereMetric"]

_EPS = float(np.finfo(np.float64).eps)


class EllipsoidMetric(RiemannianMetric):
    """The metric <X, Y>_W = X^T W Y induced on E_W by the ambient W-inner product, in closed form.

    ``x -> W^{1/2} x`` is an isometry from (E_W, this metric) onto the unit sphere with its round
    metric; every method below is the sphere's, conjugated (see the module docstring for the
    formulas and conventions). O(W) acts on E_W by isometries of this metric.

    Parameters
    ----------
    space : Ellipsoid or Sphere
        The manifold (it provides W, the W-inner product and the checks).

    References
    ----------
    Rodriguez Abella, Silvestre, Tabuada, "Consensus is all you get", ICML 2025, section 2.
    """

    @property
    def _sphere(self):
        """geomstats' Hypersphere of the same dimension (built on first use: the normal's constants)."""
        if "_sphere_" not in self.__dict__:
            self._sphere_ = Hypersphere(self._space.dim)
        return self._sphere_

    # --- helpers -------------------------------------------------------------------------------
    def _W(self, like, key="W", value=None):
        space = self._space
        value = space.W if value is None else value
        return constant(space.__dict__.setdefault("_consts", {}), key, value, like)

    def _Winv(self, like):
        space = self._space
        if "_W_inv" not in space.__dict__:
            space._W_inv = np.linalg.inv(space.W)
        return self._W(like, "W_inv", space._W_inv)

    def _pt(self, x, name="base_point"):
        return self._space.check_point(x, name)

    def _vec(self, v, name="tangent_vec"):
        return self._space.check_vector(v, name)

    def _inner(self, a, b):
        return self._space.inner(a, b)

    # --- metric --------------------------------------------------------------------------------
    def metric_matrix(self, base_point=None):
        """W, broadcast to the batch shape of ``base_point``: shape (..., d, d)."""
        if base_point is None:
            return self._space.W.copy()
        x = self._pt(base_point)
        return _fresh(x, self._W(x))

    def cometric_matrix(self, base_point=None):
        """W^{-1}, broadcast to the batch shape of ``base_point``: shape (..., d, d)."""
        if base_point is None:
            return np.linalg.inv(self._space.W)
        x = self._pt(base_point)
        return _fresh(x, self._Winv(x))

    def inner_product_derivative_matrix(self, base_point=None):
        """d g_ij / d x^k = 0 (the metric matrix W is constant): shape (..., d, d, d)."""
        d = self._space.dim + 1
        if base_point is None:
            return np.zeros((d, d, d))
        x = self._pt(base_point)
        return namespace(x).zeros(tuple(x.shape[:-1]) + (d, d, d), dtype=x.dtype, device=device_of(x))

    def inner_product(self, tangent_vec_a, tangent_vec_b, base_point=None):
        """<a, b>_W = a^T W b, shape (...)."""
        a, b = _pair(self._vec(tangent_vec_a, "tangent_vec_a"), self._vec(tangent_vec_b, "tangent_vec_b"),
                     ("tangent_vec_a", "tangent_vec_b"))
        if base_point is not None:
            self._pt(base_point)
        return self._inner(a, b)

    def squared_norm(self, vector, base_point=None):
        """|v|_W^2, shape (...)."""
        return self.inner_product(vector, vector, base_point)

    def norm(self, vector, base_point=None):
        """|v|_W, shape (...)."""
        sq = self.squared_norm(vector, base_point)
        return namespace(sq).sqrt(sq)

    # --- geodesics -----------------------------------------------------------------------------
    def exp(self, tangent_vec, base_point):
        """exp_x(v) = cos|v|_W x + sin|v|_W v / |v|_W (v first projected onto T_x E_W), shape (..., d).

        Vectors whose |v|_W^2 overflows (|v| >~ 1e154) are rescaled first: the result is the exact
        exponential of the floating-point v (for |v|_W beyond ~1 / eps its angle mod 2 pi is
        decided by the rounding of v, as for sin of a large number).
        """
        x = self._pt(base_point)
        v0 = self._vec(tangent_vec)
        x, v0 = _pair(x, v0, ("base_point", "tangent_vec"))
        xp = namespace(x, v0)
        with quiet(x):  # an overflow of |v|_W^2 is handled below
            v = self._space.tangent(x, v0)
            sq = self._inner(v, v)
            cos, sinc = cos_sinc(sq)
            out = cos[..., None] * x + sinc[..., None] * v
        over = ~xp.isfinite(sq)
        if bool(xp.any(over)):  # |v|_W^2 overflowed: the angle and direction from v / max|v_i|
            theta, e = angle_direction(self._space, x, v0)
            big = xp.cos(theta)[..., None] * x + xp.sin(theta)[..., None] * e
            out = xp.where(over[..., None], big, out)
        return out

    def log(self, point, base_point):
        """log_x(y) = theta u / |u|_W, u = y - <x, y>_W x, theta = dist(x, y); shape (..., d).

        Always tangent at x (|<x, log_x(y)>_W| at rounding level, ~eps theta), and
        exp_x(log_x(y)) = y to rounding for every y, the antipode -x included. At y = -x every
        tangent vector of length pi is a logarithm (the geodesics of every direction meet there);
        where u is at the rounding level of y (|u|_W <= 4 (d + 1) cond(W) eps, so y is -x to
        rounding), the direction returned is the tangent part of the coordinate axis e_k least
        aligned with x (smallest (W x)_k^2 / W_kk): a deterministic choice, the same on every CPU.
        """
        y, x = _pair(self._pt(point, "point"), self._pt(base_point), ("point", "base_point"))
        xp = namespace(x, y)
        xx, c = self._inner(x, x), self._inner(x, y)
        # Two passes of the projection onto <x>^perp ("twice is enough", with <x, x>_W in the
        # denominator so that a base point off E_W by rounding does not leave a multiple of x):
        # near y = -x the first u is rounding noise whose normal part is as large as its tangent
        # one, which theta / |u|_W ~ pi / eps amplified (issue 34: x^T W log_x(-x) = -3.13).
        u = y - (c / xx)[..., None] * x
        u = u - (self._inner(x, u) / xx)[..., None] * x
        s0 = self._inner(u, u)
        # theta / |u|_W = atan2(|u|_W, c) / |u|_W as a smooth function of |u|_W^2 (finite gradients at y = x)
        coef = atan_ratio(s0, c)
        # |u|_W at the rounding level of u = y - (c / <x, x>) x: its direction is noise
        tol = 4.0 * (x.shape[-1] + 1) * self._cond() * _EPS
        antipode = (s0 <= tol * tol) & (c < 0)
        if bool(xp.any(antipode)):
            theta = xp.atan2(xp.sqrt(xp.where(antipode, xp.clip(s0, 0.0, None), xp.ones_like(s0))), c)
            u = xp.where(antipode[..., None], self._axis_direction(x), u)
            na = xp.sqrt(xp.where(antipode, self._inner(u, u), xp.ones_like(s0)))
            coef = xp.where(antipode, theta / na, coef)
        return coef[..., None] * u

    def _cond(self) -> float:
        """The condition number of W (cached on the space; 1 for the sphere)."""
        return _cond_W(self._space)

    def _axis_direction(self, x):
        """The tangent part at x of the axis e_k with the smallest (W x)_k^2 / W_kk, shape (..., d).

        Nonzero: (W x)_k^2 <= W_kk x^T W x (Cauchy-Schwarz in <., .>_W), with equality for at most
        one k (x parallel to e_k), so the smallest ratio is below x^T W x and the tangent part
        e_k - ((W x)_k / x^T W x) x has |.|_W^2 = W_kk - (W x)_k^2 / x^T W x > 0.
        """
        xp = namespace(x)
        d = x.shape[-1]
        Wx = self._space.apply_W(x)
        diag = self._W(x, "W_diag", np.diag(self._space.W).copy())
        k = xp.argmin(Wx * Wx / diag, axis=-1)
        e = self._W(x, "eye", np.eye(d))[k]  # (..., d): the chosen axes
        return e - (self._inner(x, e) / self._inner(x, x))[..., None] * x

    def dist(self, point_a, point_b):
        """Geodesic distance atan2(|b - <a, b>_W a|_W, <a, b>_W) in [0, pi], shape (...).

        Its autograd gradient at a = b is 0 (a subgradient: dist has a kink there)."""
        c, sq = self._cos_sq(point_a, point_b)
        return namespace(c).atan2(safe_sqrt(sq), c)

    def squared_dist(self, point_a, point_b):
        """dist(a, b)^2, shape (...); smooth at a = b (|u|_W^2 (theta / |u|_W)^2 with the series of
        ``riemattn.geometry._safe.atan_ratio``), so autograd's derivatives there are finite and right."""
        c, sq = self._cos_sq(point_a, point_b)
        xp = namespace(c)
        near = (c > 0) & (sq < 1e-4 * c * c)
        far = xp.atan2(safe_sqrt(xp.where(near, xp.ones_like(sq), sq)), c) ** 2
        return xp.where(near, sq * atan_ratio(sq, c) ** 2, far)

    def _cos_sq(self, point_a, point_b):
        """(<a, b>_W, |b - <a, b>_W a|_W^2) for checked points."""
        a, b = _pair(self._pt(point_a, "point_a"), self._pt(point_b, "point_b"), ("point_a", "point_b"))
        c = self._inner(a, b)
        u = b - c[..., None] * a
        return c, self._inner(u, u)

    def parallel_transport(self, tangent_vec, base_point, direction=None, end_point=None):
        """Parallel transport of ``tangent_vec`` along the geodesic t -> exp_x(t w), t in [0, 1].

        ``w`` is ``direction`` or, if only ``end_point`` is given, log_x(end_point). Closed form:
        u + <u, e>_W ((cos theta - 1) e - sin theta x), theta = |w|_W, e = w / theta. It preserves
        the W-inner product. Shape (..., d).
        """
        x = self._pt(base_point)
        u = self._vec(tangent_vec)
        if direction is None:
            if end_point is None:
                raise ValidationError(
                    "parallel_transport needs direction (a tangent vector) or end_point (a point), got neither."
                )
            direction = self.log(end_point, x)
        w = self._vec(direction, "direction")
        x, u, w = same_kind(x, u, w)
        check_broadcast((x, u, w), ("base_point", "tangent_vec", "direction"))
        xp = namespace(x, u, w)
        # u + <u, w>_W ((cos theta - 1) / theta^2 w - sinc(theta) x), (cos theta - 1) / theta^2 =
        # -sinc(theta / 2)^2 / 2: smooth in s = theta^2 (finite autograd derivatives at w = 0)
        with quiet(x):  # an overflow of |w|_W^2 is handled below
            sq = self._inner(w, w)
            _, sinc = cos_sinc(sq)
            _, sinc2 = cos_sinc(sq / 4.0)
            a = self._inner(u, w)
            out = u + a[..., None] * ((-0.5 * sinc2 * sinc2)[..., None] * w - sinc[..., None] * x)
        over = ~xp.isfinite(sq)
        if bool(xp.any(over)):  # |w|_W^2 overflowed: theta and e = w / theta from w / max|w_i|
            theta, e = angle_direction(self._space, x, w)
            b = self._inner(u, e)
            big = u + b[..., None] * ((xp.cos(theta) - 1.0)[..., None] * e - xp.sin(theta)[..., None] * x)
            out = xp.where(over[..., None], big, out)
        return out

    def injectivity_radius(self, base_point=None):
        """pi at every point, shape (...) (a scalar when ``base_point`` is None)."""
        if base_point is None:
            return np.array(math.pi)
        x = self._pt(base_point)
        return namespace(x).full(tuple(x.shape[:-1]), math.pi, dtype=x.dtype, device=device_of(x))

    # --- connection and curvature (ambient coordinates) -----------------------------------------
    def christoffels(self, base_point=None):
        """Gamma^k_ij(x) = x^k W_ij (contravariant index first), shape (..., d, d, d).

        In the ambient coordinates: geomstats' geodesic equation with these symbols is
        x'' = -(x'^T W x') x, whose solutions from (x, v) tangent are the geodesics of E_W.
        Not checked to lie on the manifold, on purpose: ODE solvers of the geodesic equation
        (geomstats' ``geodesic`` included) evaluate it at stage points near it.
        """
        x = self._vec(base_point, "base_point")
        W = self._W(x)
        return x[..., :, None, None] * W

    def _projectors(self, x):
        xp = namespace(x)
        W = self._W(x)
        Wx = self._space.apply_W(x)
        d = x.shape[-1]
        eye = xp.eye(d, dtype=x.dtype, device=device_of(x))
        P = eye - x[..., :, None] * Wx[..., None, :]
        G = W - Wx[..., :, None] * Wx[..., None, :]
        return P, G

    def riemann_tensor(self, base_point=None):
        """R[..., i, j, k, l] = R_ijk^l = G_ki P_lj - G_ji P_lk, shape (..., d, d, d, d).

        geomstats' convention dx^l(R(X_j, X_k) X_i) with R(X, Y)Z = <Y, Z> X - <X, Z> Y, extended
        by zero on the normal direction (P = I - x x^T W, G = W - W x x^T W).
        """
        x = self._pt(base_point)
        P, G = self._projectors(x)
        return _riemann(G, P)

    def covariant_riemann_tensor(self, base_point=None):
        """R_ijkl = <R(X_k, X_l) X_j, X_i> = G_lj G_ik - G_kj G_il, shape (..., d, d, d, d)."""
        x = self._pt(base_point)
        _, G = self._projectors(x)
        return G[..., None, :, None, :] * G[..., :, None, :, None] - G[..., None, :, :, None] * G[..., :, None, None, :]

    def curvature(self, tangent_vec_a, tangent_vec_b, tangent_vec_c, base_point=None):
        """R(a, b)c = <b, c>_W a - <a, c>_W b (geomstats' convention), shape (..., d)."""
        a, b, c = same_kind(self._vec(tangent_vec_a, "tangent_vec_a"), self._vec(tangent_vec_b, "tangent_vec_b"),
                            self._vec(tangent_vec_c, "tangent_vec_c"))
        check_broadcast((a, b, c), ("tangent_vec_a", "tangent_vec_b", "tangent_vec_c"))
        if base_point is not None:
            self._pt(base_point)
        return self._inner(b, c)[..., None] * a - self._inner(a, c)[..., None] * b

    def ricci_tensor(self, base_point=None):
        """Ric_ik = R_ijk^j = (n - 1) G_ik, G = W - W x x^T W: shape (..., d, d)."""
        x = self._pt(base_point)
        _, G = self._projectors(x)
        return (self._space.dim - 1) * G

    def sectional_curvature(self, tangent_vec_a, tangent_vec_b, base_point=None):
        """K(a, b) = <R(a, b)b, a>_W / (|a|^2 |b|^2 - <a, b>^2) = 1 for linearly independent a, b,
        shape (...).

        Linearly dependent vectors (a zero vector included) span no plane: a ValidationError naming
        them, where the Gram determinant is at its rounding level, 8 (d + 2) cond(W) eps |a|^2 |b|^2
        (``riemattn.geometry._safe.check_plane``; the quotient of two rounding errors was returned
        before, e.g. 0.7 on the circle)."""
        a, b = _pair(self._vec(tangent_vec_a, "tangent_vec_a"), self._vec(tangent_vec_b, "tangent_vec_b"),
                     ("tangent_vec_a", "tangent_vec_b"))
        if base_point is not None:
            self._pt(base_point)
        den = check_plane(self._inner(a, a), self._inner(b, b), self._inner(a, b), a.shape[-1], self._cond())
        return 0.0 * den + 1.0

    def scalar_curvature(self, base_point=None):
        """n (n - 1) at every point, shape (...)."""
        n = self._space.dim
        if base_point is None:
            return np.array(float(n * (n - 1)))
        x = self._pt(base_point)
        xp = namespace(x)
        return xp.zeros_like(x[..., 0]) + float(n * (n - 1))

    def curvature_derivative(self, tangent_vec_a, tangent_vec_b=None, tangent_vec_c=None, tangent_vec_d=None,
                             base_point=None):
        """(nabla_a R)(b, c)d = 0 (constant curvature), shape (..., d)."""
        arrays = [self._vec(v, n) for v, n in ((tangent_vec_a, "tangent_vec_a"), (tangent_vec_b, "tangent_vec_b"),
                                               (tangent_vec_c, "tangent_vec_c"), (tangent_vec_d, "tangent_vec_d"))
                  if v is not None]
        if base_point is not None:
            arrays.append(self._pt(base_point))
        arrays = same_kind(*arrays)
        xp = namespace(*arrays)
        out = xp.zeros_like(arrays[0])
        for arr in arrays[1:]:
            out = out + 0.0 * arr
        return out

    # --- the Riemannian normal's normalization (it depends on the dimension only) ---------------
    def normalization_factor(self, variances):
        """Normalization constant of the Riemannian normal distribution (as the sphere's)."""
        return self._sphere.metric.normalization_factor(variances)

    def norm_factor_gradient(self, variances):
        """Gradient of the normalization factor (as the sphere's; needs an autodiff backend)."""
        return self._sphere.metric.norm_factor_gradient(variances)


def _fresh(x, M):
    """A new (writable) array of M repeated over the batch shape of the points x: (..., d, d)."""
    xp = namespace(x)
    return xp.zeros(tuple(x.shape[:-1]) + (1, 1), dtype=x.dtype, device=device_of(x)) + M


class SphereMetric(EllipsoidMetric, HypersphereMetric):
    """The round metric of the unit sphere: :class:`~riemattn.geometry.metrics.EllipsoidMetric` with W = I.

    A ``geomstats.geometry.hypersphere.HypersphereMetric`` (so geomstats code that checks for
    it still recognizes the sphere) whose methods are the closed forms of :class:`~riemattn.geometry.metrics.EllipsoidMetric`:
    the same checks, torch support, Christoffel symbols and curvature tensors.
    """
