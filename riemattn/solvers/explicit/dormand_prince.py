r"""Adaptive projected Dormand--Prince methods with dense output: ``"dopri5"`` and ``"dop853"``.

Both are projected Runge--Kutta methods (:class:`~riemattn.solvers.steppers.ProjectedRK`: the tableau is
applied to the lifted field G(t, x) = |x|_W F(t, pi_W x) and the result retracted), with local
errors measured on the manifold (the embedded difference projected onto the tangent space at the
new point) and save points between steps from their continuous extensions, retracted.

References
----------
J. R. Dormand, P. J. Prince, "A family of embedded Runge-Kutta formulae", J. Comput. Appl. Math. 6
(1980). L. F. Shampine, "Some practical Runge-Kutta formulas", Math. Comp. 46 (1986) (dense
output of DOPRI5). E. Hairer, S. P. Norsett, G. Wanner, *Solving Ordinary Differential Equations
I*, 2nd ed., Springer 1993, sections II.4-II.6 and II.10 (the code DOP853).
"""

from __future__ import annotations

import numpy as np

from ..._backend import constant, is_torch, namespace
from .steppers import (
    Interpolant,
    ProjectedRK,
    StepResult,
    axpy,
    coefficients,
    per_trajectory,
    shifted_time,
    register,
)
from .tableaux import DOP853, DOP853_BHH, DOP853_DENSE, DOPRI5, DOPRI5_DENSE

__all__ = ["ProjectedDormandPrince", "ProjectedDOP853"]

_DENSE_CACHE: dict = {}  # dense-output coefficients on other devices / dtypes


@register
class ProjectedDormandPrince(ProjectedRK):
    """Projected Dormand--Prince 5(4), adaptive (7 stages, first same as last), dense output of order 4.

    Coefficients: Dormand & Prince (1980), Table 2 ("RK5(4)7M"), :data:`riemattn.solvers.tableaux.DOPRI5`;
    the 5th-order weights propagate the solution, the difference to the embedded 4th-order weights,
    projected onto the tangent space at the new point, estimates the local error. Save points
    between steps come from Shampine's continuous extension (order 4) of the lifted solution,
    retracted onto the manifold.
    """

    name = "dopri5"
    order = 5
    adaptive = True
    error_order = 4
    fsal = True
    dense_order = 4
    tableau = DOPRI5

    def interpolant(self, field, t, y, h, res):
        K = res.stages[0]
        P = np.asarray(DOPRI5_DENSE)  # (7, 4): b_i(theta) = sum_k P[i, k] theta^(k+1)

        def u(theta):
            if is_torch(theta):
                th = theta.to(y.dtype)
                Pt = constant(_DENSE_CACHE, "dopri5", P, th)
                powers = th[..., None] ** constant(_DENSE_CACHE, "powers", np.arange(1.0, 5.0), th)
            else:
                th, Pt = np.asarray(theta, dtype=float), P
                powers = th[..., None] ** np.arange(1, 5)  # (..., 4)
            weights = [powers @ Pt[i] for i in range(len(K))]
            return self._dense_sum(field, t, y, h, weights, K)

        return Interpolant(u)


@register
class ProjectedDOP853(ProjectedRK):
    """Projected Dormand--Prince 8(5,3), adaptive (12 stages), the method of Hairer's code DOP853.

    The 8th-order weights ``b`` propagate the solution. Two embedded weight vectors on the same
    stages estimate the error: ``b_hat`` of order 5 and ``bhh`` of order 3 (only stages 1, 9, 12).
    With ``e5``, ``e3`` the two differences, each projected onto the tangent space at the new point
    (see the module docstring), and ``|.|`` the norms scaled by the tolerances per trajectory, the
    estimate is ``|e5|^2 / sqrt(|e5|^2 + 0.01 |e3|^2)`` (normalized by the number of components) as
    in DOP853; it behaves like ``h^8`` for small steps, so step-size control uses
    ``error_order = 7``. Like the Fortran code the step ends with ``F(t + h, y_1)``, which is the
    next step's first stage (12 evaluations per step). Dense output: the code's continuous
    extension of order 7 (three more evaluations on steps that contain save points), retracted.

    The tableau checks all 200 order conditions up to order 8 for ``b``, the 17 up to order 5 for
    ``b_hat`` and the 4 up to order 3 for ``bhh`` on import (:mod:`riemattn.solvers.tableaux`).

    References
    ----------
    P. J. Prince, J. R. Dormand, "High order embedded Runge-Kutta formulae", J. Comput. Appl.
    Math. 7 (1981) 67-75. E. Hairer, S. P. Norsett, G. Wanner, *Solving Ordinary Differential
    Equations I*, 2nd ed., Springer 1993, section II.10 (the code DOP853).
    """

    name = "dop853"
    order = 8
    adaptive = True
    error_order = 7
    fsal = True
    dense_order = 7
    tableau = DOP853

    @classmethod
    def _err3(cls):
        e3 = cls.__dict__.get("_err3_cache")
        if e3 is None:
            e3 = cls._err3_cache = coefficients(cls.tableau.b_ - DOP853_BHH.b_)
        return e3

    def step(self, field, t, y, h, k1=None):
        res = super().step(field, t, y, h, k1)
        K, r = res.stages
        manifold = field.manifold
        e3 = self._tangent_error(manifold, axpy(None, per_trajectory(h, y), self._err3(), K), res.y, r)
        k_next = field(shifted_time(t, 1.0, h), res.y)
        return StepResult(res.y, (res.error, e3), res.nfev + 1, k_next, (K, r, k_next))

    def error_norm(self, res, scale):
        e5, e3 = res.error
        xp = namespace(e5)
        n5 = xp.sum(xp.square(e5 / scale), axis=(-2, -1))
        n3 = xp.sum(xp.square(e3 / scale), axis=(-2, -1))
        size = e5.shape[-2] * e5.shape[-1]
        denom = xp.sqrt((n5 + 0.01 * n3) * size)
        if xp is not np:
            return xp.where(denom > 0, n5 / xp.where(denom > 0, denom, 1.0), 0.0)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(denom > 0, n5 / np.where(denom > 0, denom, 1.0), 0.0)

    def interpolant(self, field, t, y, h, res):
        K, r, k_next = res.stages
        normalize = field.manifold.normalize
        hc = per_trajectory(h, y)
        x1 = y + axpy(None, hc, self._plan()[1], K)  # the lifted endpoint (before retraction)
        K = list(K) + [k_next if r is None else r * k_next]  # G(t + h, x1)
        for c, row in zip(DOP853_DENSE.c_extra, DOP853_DENSE.A_extra):
            X, rr = normalize(axpy(y, hc, coefficients(row[: len(K)]), K))
            F = field(shifted_time(t, c, h), X)
            K.append(F if rr is None else rr * F)
        dy = x1 - y
        F = [dy, hc * K[0] - dy, 2.0 * dy - hc * (K[0] + K[12])]
        F += [axpy(None, hc, coefficients(row), K) for row in DOP853_DENSE.D]

        def u(theta):
            # y + s (F1 + (1-s) (F2 + s (F3 + (1-s) (F4 + s (F5 + (1-s) (F6 + s F7))))))
            s = per_trajectory(theta if is_torch(theta) else np.asarray(theta, dtype=float), y)
            acc = F[-1]
            for k in range(len(F) - 2, -1, -1):
                acc = F[k] + (s if k % 2 else 1.0 - s) * acc
            return field.manifold.retract(y + s * acc)

        return Interpolant(u, nfev=3)
