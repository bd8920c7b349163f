r"""The ellipsoid with the metric induced by the ambient dot product: numerical geodesics.

``Ellipsoid(W, metric="euclidean")`` is E_W = {x : x^T W x = 1} with <X, Y> = X . Y on its tangent
spaces (the geometry of "an ellipsoid in R^d"). Its geodesics have no closed form; they solve

    x'' = -(x'^T W x' / |W x|^2) W x                                  (geodesic equation)

(the acceleration is normal to E_W: x'' = lambda W x, and differentiating x^T W x' = 0 twice gives
lambda), and parallel transport of u along a geodesic solves

    u' = -(u^T W x' / |W x|^2) W x                                     (transport equation)

(u' is normal, so its tangent part -- the covariant derivative -- vanishes, and u stays tangent).
Both are integrated together by riemattn's adaptive DOP853 (:func:`~riemattn.solvers.integrate.integrate`
on flat R^d, tolerance ``rtol = 1e-13``, ``atol = 1e-14`` by default): the points stay on E_W and
the speed stays constant to about 1e-13 over a geodesic of length ~2 pi (tests/solvers/test_geodesics.py).

The logarithm is computed by shooting: Newton's method on v -> exp_x(v) - y in T_x E_W, with the
Jacobian by central differences of exp (the d - 1 perturbed geodesics are integrated in the same
batch as the others), from the W-metric's logarithm as initial guess, until |exp_x(v) - y| <= 1e-12.
It returns the minimizing geodesic's initial velocity when y is within the documented domain
dist(x, y) < (pi / 2) sqrt(lambda_min) / lambda_max (lambda the eigenvalues of W): half the
conjugate radius pi / sqrt(K_max) of Rauch's theorem, with K_max <= lambda_max^2 / lambda_min the
largest sectional curvature (the square of the largest principal curvature a_max / a_min^2).

References
----------
M. P. do Carmo, *Riemannian Geometry*, Birkhauser 1992, chapter 6 (geodesics of submanifolds:
the acceleration is normal) and chapter 10 (Rauch comparison, conjugate radius); E. Hairer,
S. P. Norsett, G. Wanner, *Solving Ordinary Differential Equations I*, section II.10 (DOP853).
"""

from __future__ import annotations

import math

import numpy as np
from geomstats.geometry.riemannian_metric import RiemannianMetric

from ..dynamics.fields import VectorField
from .._validation import check_int, check_times
from ..errors import IntegrationError, ValidationError
from ..geometry._fast import check_broadcast
from ..geometry._hypersurface import GaussCurvature, ellipse_perimeter
from ..geometry.ellipsoid import ELLIPSOID_METRICS
from ..geometry.manifolds import Euclidean
from .core.integrate import integrate

__all__ = ["InducedEllipsoidMetric"]

#: Default tolerances of the geodesic integration (adaptive DOP853).
RTOL, ATOL = 1e-13, 1e-14
#: Newton's stopping tolerance of the logarithm: |exp_x(v) - y| (max over components).
LOG_TOL = 1e-12
#: Default cap of the length of the geodesics integrated in d >= 3, in units of pi a_max (a_max
#: the largest semi-axis; a great ellipse is at most 2 pi a_max long): 8 turns.
MAX_LENGTH_TURNS = 16.0


class InducedEllipsoidMetric(GaussCurvature, RiemannianMetric):
    """The metric induced on E_W by the ambient dot product, <X, Y> = X . Y (numerical geodesics).

    Parameters
    ----------
    space : Ellipsoid
        The ellipsoid (``Ellipsoid(W, metric="euclidean")`` equips it with this metric).
    rtol, atol : float
        Tolerances of the adaptive DOP853 integration of the geodesic and transport equations.

    max_length : float, optional
        The longest geodesic (|v|) that ``exp``, ``geodesic_states`` and ``parallel_transport``
        integrate in d >= 3 (default ``MAX_LENGTH_TURNS`` pi a_max, 8 turns around the largest
        great ellipse): the cost of the integration grows in proportion to the length, and no
        reduction of a long geodesic is known there (the geodesic flow of a triaxial ellipsoid is
        not periodic). Longer vectors: a ValidationError naming the argument; raise
        ``metric.max_length`` to integrate them anyway. In d = 2 the geodesics are the ellipse
        run at constant speed: |v| is reduced modulo the perimeter (``ellipse_perimeter``), so
        every length costs at most one turn.

    Notes
    -----
    Closed form: ``inner_product``, ``metric_matrix`` (I), ``christoffels`` (Gamma^k_ij(x) =
    (W x)^k W_ij / |W x|^2 in ambient coordinates), and the curvature from the Gauss equation
    (``curvature``, ``sectional_curvature``, ``riemann_tensor``, ``covariant_riemann_tensor``,
    ``ricci_tensor``, ``scalar_curvature``; ``riemattn.geometry._hypersurface``). Numerical: ``exp``, ``geodesic_states``,
    ``parallel_transport`` (along a geodesic), ``log`` (shooting), ``dist`` (= |log|). Costs: an
    exponential is one batched integration (~100-300 DOP853 steps of 12 evaluations for |v| ~ 2);
    a logarithm is 3-6 Newton iterations, each one integration of 2d - 1 batched geodesics per
    point. Computed in NumPy: CPU torch tensors are accepted and the results are NumPy arrays.

    References
    ----------
    M. P. do Carmo, *Riemannian Geometry*, 1992, chapter 6, and the module docstring.
    """

    def __init__(self, space, signature=None, rtol: float = RTOL, atol: float = ATOL, max_length=None):
        super().__init__(space, signature=signature)
        self.rtol, self.atol = float(rtol), float(atol)
        lam = np.linalg.eigvalsh(space.W)
        self.max_length = MAX_LENGTH_TURNS * math.pi / math.sqrt(lam[0]) if max_length is None else float(max_length)
        #: d = 2: the perimeter of the ellipse (the period of every unit-speed geodesic)
        self.period = ellipse_perimeter(space.W) if space.dim == 1 else None
        #: A lower bound of the injectivity-domain radius used by ``log`` (see the module docstring).
        self.log_radius = 0.5 * math.pi * math.sqrt(lam[0]) / lam[-1]
        self._flat = Euclidean(space.dim + 1)
        # autonomous: one call for the whole batch, whatever the times of its trajectories
        self._field = VectorField(self._rhs, self._flat, time_vectorized=True)

    # --- closed forms ---------------------------------------------------------------------
    def inner_product(self, tangent_vec_a, tangent_vec_b, base_point=None):
        """a . b, shape (...)."""
        a = self._space.check_vector(tangent_vec_a, "tangent_vec_a")
        b = self._space.check_vector(tangent_vec_b, "tangent_vec_b")
        try:
            np.broadcast_shapes(a.shape, b.shape)
        except ValueError:
            raise ValidationError(f"tangent_vec_a and tangent_vec_b must broadcast, got shapes {a.shape} and "
                                  f"{b.shape}.") from None
        return np.einsum("...i,...i->...", a, b)

    def metric_matrix(self, base_point=None):
        """The identity, broadcast to the batch shape of ``base_point``: shape (..., d, d)."""
        d = self._space.dim + 1
        if base_point is None:
            return np.eye(d)
        x = self._space.check_point(base_point)
        return np.broadcast_to(np.eye(d), x.shape[:-1] + (d, d)).copy()

    def christoffels(self, base_point=None):
        """Gamma^k_ij(x) = (W x)^k W_ij / |W x|^2 (ambient coordinates), shape (..., d, d, d)."""
        x = self._space.check_vector(base_point, "base_point")
        n = x @ self._space.W
        return (n / np.einsum("...i,...i->...", n, n)[..., None])[..., :, None, None] * self._space.W

    def to_tangent(self, vector, base_point):
        """The orthogonal (for this metric) projection v - (n . v / n . n) n, n = W x, shape (..., d)."""
        x = self._space.check_point(base_point)
        v = self._space.check_vector(vector, "vector")
        return self._tangent(np.asarray(v, dtype=float), np.asarray(x, dtype=float))

    def _tangent(self, v, x):
        n = x @ self._space.W
        return v - (np.einsum("...i,...i->...", n, v) / np.einsum("...i,...i->...", n, n))[..., None] * n

    # --- the geodesic and transport equations -----------------------------------------------
    def _rhs(self, t, s):
        W = self._space.W
        x, v = s[..., 0, :], s[..., 1, :]
        n = x @ W
        nn = np.einsum("...i,...i->...", n, n)[..., None]
        acc = -(np.einsum("...i,...i->...", v, v @ W)[..., None] / nn) * n
        rows = [v, acc]
        for k in range(2, s.shape[-2]):  # transported vectors
            u = s[..., k, :]
            rows.append(-(np.einsum("...i,...i->...", u, v @ W)[..., None] / nn) * n)
        return np.stack(rows, axis=-2)

    def _solve(self, x, v, extra=(), times=None):
        """Integrate (x, v, extra...) from t = 0 to 1 (or ``times``): states of shape (m?, ..., 2 + k, d)."""
        s0 = np.stack([x, v, *extra], axis=-2)
        t1 = 1.0 if times is None else float(np.max(times))
        if t1 == 0.0:
            return s0 if times is None else np.broadcast_to(s0, (len(times),) + s0.shape).copy()
        traj = integrate(self._field, s0, (0.0, t1), stepper="dop853", rtol=self.rtol, atol=self.atol,
                         saveat=None if times is None else np.asarray(times, dtype=float))
        if not traj.success:
            raise IntegrationError(f"geodesic integration failed: {traj.message}")
        return traj.y[-1] if times is None else traj.y

    def _start(self, tangent_vec, base_point, name="tangent_vec"):
        x = np.asarray(self._space.check_point(base_point), dtype=float)
        v = np.asarray(self._space.check_vector(tangent_vec, name), dtype=float)
        check_broadcast((x, v), ("base_point", name))
        x, v = np.broadcast_arrays(x, v)
        v = self._tangent(v, x)
        length = np.sqrt(np.einsum("...i,...i->...", v, v))
        if self.period is not None:  # d = 2: one turn of the ellipse is the period of every geodesic
            red = np.mod(length, self.period)
            v = v * np.where(length > 0, red / np.where(length > 0, length, 1.0), 0.0)[..., None]
        elif length.size and not float(np.max(length)) <= self.max_length:
            raise ValidationError(
                f"{name} is too long for the induced metric's numerical geodesics: |{name}| = "
                f"{float(np.max(length)):.4g} > max_length = {self.max_length:.4g}. The geodesic is integrated "
                "(DOP853) at a cost proportional to its length, and in d >= 3 no reduction of a long geodesic "
                "is known; set metric.max_length higher to integrate it anyway."
            )
        return x, v

    def exp(self, tangent_vec, base_point):
        """exp_x(v): the geodesic from x with velocity v (projected onto T_x E_W) at t = 1, shape (..., d)."""
        x, v = self._start(tangent_vec, base_point)
        return self._solve(x, v)[..., 0, :]

    def geodesic_states(self, tangent_vec, base_point, times):
        """Positions and velocities of the geodesic t -> exp_x(t v) at ``times`` (increasing, >= 0).

        Returns
        -------
        x, v : ndarray, shape (m, ..., d)
            Positions and velocities (not re-projected: their distance to E_W and the change of
            |v| measure the integration error).
        """
        x, v = self._start(tangent_vec, base_point)
        times = check_times(times, "times")
        if times.ndim != 1 or times.size == 0 or np.any(np.diff(times) <= 0) or times[0] < 0:
            raise ValidationError(f"times must be a 1-d increasing array of times >= 0, got {times!r}.")
        states = self._solve(x, v, times=times)
        return states[..., 0, :], states[..., 1, :]

    def parallel_transport(self, tangent_vec, base_point, direction=None, end_point=None):
        """Parallel transport of ``tangent_vec`` along t -> exp_x(t w), t in [0, 1], shape (..., d).

        ``w`` is ``direction``, or log_x(end_point). The transport equation is integrated with the
        geodesic; the result is tangent at the end point and keeps the length of ``tangent_vec``.
        """
        if direction is None:
            if end_point is None:
                raise ValidationError(
                    "parallel_transport needs direction (a tangent vector) or end_point (a point), got neither."
                )
            direction = self.log(end_point, base_point)
        x, w = self._start(direction, base_point, "direction")
        u = self._tangent(np.asarray(self._space.check_vector(tangent_vec, "tangent_vec"), dtype=float), x)
        x, w, u = np.broadcast_arrays(x, w, u)
        return self._solve(x, w, (u,))[..., 2, :]

    def log(self, point, base_point, max_iter: int = 30):
        """log_x(y) by shooting (Newton on exp_x(v) = y), shape (..., d).

        Converges to the minimizing geodesic's velocity for dist(x, y) < ``self.log_radius``
        (see the module docstring); raises IntegrationError if |exp_x(v) - y| > 1e-12 after
        ``max_iter`` iterations.
        """
        y = np.asarray(self._space.check_point(point, "point"), dtype=float)
        x = np.asarray(self._space.check_point(base_point), dtype=float)
        max_iter = check_int(max_iter, "max_iter", 1)
        check_broadcast((y, x), ("point", "base_point"))
        return self._log(y, x, max_iter)

    def _log(self, y, x, max_iter, names=("base_point", "point")):
        """:meth:`log` of checked float64 points. Both are first W-normalized: a point accepted
        within the precision rule of its dtype (docs/manifolds.md; float32 points are ~1e-7 off)
        is shot at its nearest point of E_W, since exp stays on E_W and |exp(v) - y| could
        otherwise never reach LOG_TOL."""
        x, y = np.broadcast_arrays(x, y)
        if x.size and max(self._space.deviation(x), self._space.deviation(y)) > 0.1 * LOG_TOL:
            x, y = self._space.normalize(x)[0], self._space.normalize(y)[0]
        shape, d = x.shape[:-1], x.shape[-1]
        if x.size == 0:
            return np.zeros(shape + (d,))
        x, y = x.reshape(-1, d), y.reshape(-1, d)
        v = self._tangent(_w_log(self._space, y, x), x)
        basis = _tangent_bases(self._space.W, x)  # (N, d - 1, d), orthonormal bases of T_x
        h = 1e-6
        for _ in range(max_iter):
            # exp at v and at v +- h b_k, one batched integration
            probes = np.concatenate([v[:, None, :], v[:, None, :] + h * basis, v[:, None, :] - h * basis], axis=1)
            xs = np.broadcast_to(x[:, None, :], probes.shape)
            ends = self._solve(xs, probes)[..., 0, :]
            r = ends[:, 0] - y
            if np.max(np.abs(r)) <= LOG_TOL:
                return v.reshape(shape + (d,))
            J = (ends[:, 1:d] - ends[:, d:]) / (2 * h)  # (N, d - 1, d): d exp / d coefficient k
            coef = _lstsq(J, r)
            v = v - np.einsum("nk,nkd->nd", coef, basis)
        raise IntegrationError(
            f"log by shooting did not converge in {max_iter} iterations (max |exp(v) - y| = "
            f"{np.max(np.abs(r)):.3g}); is dist({names[0]}, {names[1]}) < log_radius = {self.log_radius:.3g}?"
        )

    def dist(self, point_a, point_b):
        """Geodesic distance |log_a(b)| (shooting; see :meth:`log`), shape (...)."""
        a = self._space.check_point(point_a, "point_a")
        b = self._space.check_point(point_b, "point_b")
        try:
            np.broadcast_shapes(a.shape, b.shape)
        except ValueError:
            raise ValidationError(f"point_a and point_b must broadcast, got shapes {a.shape} and {b.shape}.") from None
        v = self._log(np.asarray(b, dtype=float), np.asarray(a, dtype=float), 30, ("point_a", "point_b"))
        return np.sqrt(np.einsum("...i,...i->...", v, v))

    def squared_dist(self, point_a, point_b):
        """dist(a, b)^2, shape (...)."""
        return self.dist(point_a, point_b) ** 2

    def injectivity_radius(self, base_point=None):
        """Not known in closed form for a general ellipsoid (NotImplementedError); ``log_radius``
        is the lower bound the logarithm is guaranteed on."""
        raise NotImplementedError(
            "the injectivity radius of the induced metric has no closed form; see log_radius (a lower bound)."
        )


def _w_log(space, y, x):
    """The W-metric's logarithm (closed form), the initial guess of the shooting."""
    c = np.einsum("...i,...i->...", x, y @ space.W)
    u = y - c[..., None] * x
    nu = np.sqrt(np.maximum(np.einsum("...i,...i->...", u, u @ space.W), 0.0))
    theta = np.arctan2(nu, c)
    coef = np.where(nu == 0, 1.0, theta / np.where(nu == 0, 1.0, nu))
    return coef[..., None] * u


def _tangent_bases(W, x):
    """Orthonormal bases (dot product) of T_x E_W = (W x)^perp, shape (N, d - 1, d)."""
    n = x @ W
    n = n / np.linalg.norm(n, axis=-1, keepdims=True)
    d = x.shape[-1]
    P = np.eye(d) - n[:, :, None] * n[:, None, :]
    # the d - 1 leading left singular vectors of the projector span the tangent space
    U, _, _ = np.linalg.svd(P)
    return np.swapaxes(U[:, :, : d - 1], -1, -2)


def _lstsq(J, r):
    """Least-squares coefficients c minimizing |c J - r| per point (J: (N, k, d), r: (N, d))."""
    A = np.swapaxes(J, -1, -2)  # (N, d, k)
    return np.linalg.solve(np.einsum("nik,nil->nkl", A, A), np.einsum("nik,ni->nk", A, r)[..., None])[..., 0]


ELLIPSOID_METRICS["euclidean"] = InducedEllipsoidMetric
