r"""Projected Rosenbrock (linearly implicit) steppers for stiff attention dynamics: ``"rodas4p"``, ``"rodas4"``.

At large beta the attention dynamics is stiff: once tokens gather, the linearisation has
eigenvalues of size about e^beta, and explicit steppers are held to steps of about e^-beta by
stability. A Rosenbrock method solves one linear system per stage with the matrix
``I / (h gamma) - J`` (one inversion per step, reused by all stages) and is L-stable.

Projection, as for the explicit methods (:mod:`riemattn.solvers.steppers`): the tableau is
applied to the lifted field ``G(t, x) = |x|_W F(t, pi_W x)``, the result retracted, and the local
error (the embedded difference) measured as a tangent vector at the new point. The method
linearises **the lifted field G**, the ODE its order conditions are about: at a point y of the
manifold (|y|_W = 1), token by token,

.. math:: J_G = DF \, (I - y y^T W) + F \, (W y)^T,

with ``DF`` the Jacobian of the field's ambient extension
(:func:`riemattn.dynamics.jacobians.jacobian`, closed form for attention). The factor
``(I - y y^T W)`` removes the field's behaviour off the manifold: the normal direction ``y`` is
mapped to ``F`` (tangent, of the size of the field), so the stiff radial mode that the raw field
has off the manifold (rate ~ e^beta / n for attention) never enters the linear system, and the
stiff eigenvalues that remain are those of the dynamics on the manifold. The linear system is
in ambient coordinates of the (l, d) token array: ``l d`` unknowns per trajectory, one batched
``numpy.linalg.inv`` of shape (..., l d, l d) per step. Dense Jacobians cost O((l d)^2) memory
and O((l d)^3) per step: this stepper is meant for l d up to a few hundred (no Krylov path).

``"rodas4"`` (Hairer & Wanner's RODAS): 6 stages, order 4, embedded order 3, L-stable and
stiffly accurate, dense output of order 3. ``"rodas4p"`` (Steinebach) has the same structure
and avoids RODAS4's order reduction on stiff problems that follow a slowly moving equilibrium
(on x' = -1000 (x - cos t), tolerance 1e-8: 37 steps against 1 255); it is the one ``"auto"``
switches to. The Jacobian and the inverse are recomputed every
step (a Rosenbrock method needs the exact Jacobian at the step's start for its order; only
rejected steps could reuse it, and they are rare). For a field that depends on time, ``G_t``
is a forward difference (one more evaluation per step).

Precision on long plateaus. (1) The field is evaluated at the step's start, the stage points
and the end by :func:`riemattn.dynamics._tangent.on_manifold`: for attention fields with
``U=None`` that is the difference form ``F_i = sum_j alpha_ij Pi_i (y_j - y_i)``, whose rounding
is relative to ``|F_i|`` (the field's ``__call__`` projects an update of size ~1 inside a cluster
and leaves an absolute rounding of ~eps, which a step of length h integrates into ``h eps``: on a
metastable plateau that held the steps near tol / eps); the step's start is evaluated afresh (a
``k1`` from the loop or the explicit stepper of ``"auto"`` has the cancellation). (2) The solve
with ``I / (h gamma) - J`` resolves the directions where J is nearly zero (the rotation of a
cluster) only while ``1 / (h gamma)`` exceeds the solve's rounding ``eps |J|``: a step with
``h gamma eps |J|_inf > SOLVE_LIMIT`` would move nothing there, with an embedded error of 0, and
is rejected (error ``inf``; the controller shrinks it). Plateaus longer than about
``1 / (gamma eps |J|)`` (~1e16 for rescaled USA) therefore end in ``max_steps``, not in a silent
equilibrium: double precision cannot step across them with a linearly implicit method (SciPy's
LSODA fails there too).

References
----------
E. Hairer, G. Wanner, *Solving Ordinary Differential Equations II*, 2nd ed., Springer 1996,
section IV.7 (Rosenbrock methods, the code RODAS). E. Hairer, C. Lubich, G. Wanner, *Geometric
Numerical Integration*, 2nd ed., section IV.4 (projection methods).
"""

from __future__ import annotations

import math

import numpy as np

from ..._backend import convert, is_torch, namespace, to_numpy
from ..._validation import check_positive
from ...errors import InputTypeError
from ...dynamics._tangent import applies, on_manifold
from ...dynamics.attention import AttentionField
from ...dynamics.jacobians import is_autonomous, jacobian, lifted_attention_jacobian
from ...geometry._fast import _FastMixin
from ._rosenbrock_torch import differentiated, rosenbrock_interpolant, rosenbrock_step, torch_path
from .rosenbrock_tableaux import RODAS4, RODAS4P, RosenbrockTableau
from ..explicit.steppers import Interpolant, Stepper, StepResult, _check_field, per_trajectory, register, shifted_time

__all__ = ["ProjectedRosenbrock", "ProjectedRodas4", "ProjectedRodas4P", "lifted_jacobian"]

DT_FACTOR = math.sqrt(np.finfo(float).eps)
EPS = np.finfo(float).eps
#: Largest ``h gamma eps |J|_inf`` of an accepted step: beyond it the solve with ``I / (h gamma) - J``
#: cannot resolve the directions where J is (nearly) zero (module docstring, "Precision").
SOLVE_LIMIT = 1.0


def _norm_inf(J):
    """|J|_inf per trajectory, shape J.shape[:-2]."""
    return np.max(np.sum(np.abs(J), axis=-1), axis=-1)


def lifted_jacobian(field, t, y, F=None) -> np.ndarray:
    """J_G = DF (I - y y^T W) + F (W y)^T at tokens ``y`` on the manifold, shape (..., l d, l d).

    ``F`` is the field at (t, y) when known. On a Euclidean manifold J_G = DF.
    """
    manifold = field.manifold
    if isinstance(field, AttentionField) and isinstance(manifold, _FastMixin) and type(y) is np.ndarray:
        return lifted_attention_jacobian(field, t, y)  # the same matrix in one pass (closed form)
    DF = jacobian(field, t, y)  # (..., l, d, l, d)
    l, d = y.shape[-2:]
    if manifold.normalize(y[..., :1, :])[1] is None:  # Euclidean: no lifting
        return DF.reshape(y.shape[:-2] + (l * d, l * d))
    Wy = manifold.apply_W(y)
    if F is None:
        F = field(t, y)
    r = np.sum(DF * y[..., None, None, :, :], axis=-1)  # (DF y_k)[i, a, k]
    DF -= r[..., None] * Wy[..., None, None, :, :]
    idx = np.arange(l)
    DF[..., idx, :, idx, :] += np.moveaxis(np.einsum("...ia,...ib->...iab", F, Wy), -3, 0)
    return DF.reshape(y.shape[:-2] + (l * d, l * d))


class ProjectedRosenbrock(Stepper):
    """A Rosenbrock tableau (:class:`~riemattn.solvers.rosenbrock_tableaux.RosenbrockTableau`)
    applied to the lifted field with its exact Jacobian, retracted; see the module docstring."""

    tableau: RosenbrockTableau
    adaptive = True
    fsal = True  # returns F(t + h, y1): the next step's first stage and Jacobian point
    stiff = True

    def __init__(self, solve_limit: float | None = SOLVE_LIMIT):
        """``solve_limit``: steps with ``h gamma eps |J|_inf`` above it are rejected (module
        docstring); None turns the test off -- only where the Jacobian's structure keeps the solve
        accurate beyond it (a triangular J, e.g. causal attention, solves row by row with each
        row's rounding relative to its own entries) and the result is checked another way."""
        self.solve_limit = None if solve_limit is None else check_positive(solve_limit, "solve_limit")

    def jacobian(self, field, t, y, F):
        """The lifted Jacobian at the step's start (a hook: W-methods may approximate it)."""
        return lifted_jacobian(field, t, y, F)

    def step(self, field, t, y, h, k1=None):
        field = _check_field(field)
        if is_torch(y):
            if torch_path(field, y):  # every operation in the graph, the Jacobian included
                return rosenbrock_step(self, field, t, y, h, k1)
            return host_step(self, field, t, y, h, k1)
        tab = self.tableau
        normalize = field.manifold.normalize
        frozen = None
        if not np.all(h):  # h = 0 (rows the adaptive loop keeps still, a dense output at a step's
            frozen = np.asarray(h) == 0  # start): a dummy step, then y itself (1 / (h gamma) is inf)
            h = np.where(frozen, 1e-6, h)
        hc = per_trajectory(h, y)
        shape, n = y.shape, y.shape[-2] * y.shape[-1]
        nfev = 0
        F0 = k1
        if F0 is None or applies(field, y):  # (D) at the start too: a k1 from elsewhere has the cancellation
            F0 = on_manifold(field, t, y)
            nfev += 1
        J = self.jacobian(field, t, y, F0)
        hg = np.broadcast_to(np.asarray(hc, dtype=float) * tab.gamma, y.shape[:-2] + (1, 1)) if np.ndim(hc) else hc * tab.gamma
        M = np.eye(n) / hg - J
        with np.errstate(all="ignore"):
            try:
                Minv = np.linalg.inv(M)
            except np.linalg.LinAlgError:  # a singular row: NaN, reported by integrate per trajectory
                Minv = np.full_like(M, np.nan)
        Ft = None
        if not is_autonomous(field):  # forward difference in t, step per trajectory
            tt = np.asarray(t, dtype=float)
            dt = DT_FACTOR * np.maximum(1.0, np.abs(tt))
            Ft = (field(tt + dt if np.ndim(t) else float(t) + float(dt), y) - F0) / per_trajectory(dt, y)
            nfev += 1
        Us = np.empty((tab.stages,) + shape)
        U_flat = Us.reshape(tab.stages, -1)
        times = [t] + [shifted_time(t, float(c), h) for c in tab.c[1:]]
        for i in range(tab.stages):
            if i == 0:
                rhs = F0.copy()
            else:  # stage point and C-term in one contraction: aC[i] = (a[i], C[i])
                aC = _combine(tab.aC[i, :, :i], U_flat[:i])
                Xn, r = normalize(y + aC[0].reshape(shape))
                rhs = on_manifold(field, times[i], Xn)
                nfev += 1
                if r is not None:
                    rhs *= r
                rhs += aC[1].reshape(shape) / hc
            if Ft is not None and tab.d[i] != 0.0:
                rhs += (hc * tab.d[i]) * Ft
            # no BLAS: batch-independent rounding
            np.einsum("...ij,...j->...i", Minv, rhs.reshape(shape[:-2] + (n,)), out=Us[i].reshape(shape[:-2] + (n,)))
        if tab.stiffly_accurate:  # x1 = (last stage point) + U_s, the embedded solution without U_s
            x1 = y + _combine(tab.m[None], U_flat)[0].reshape(shape)
            diff = Us[-1]
        else:
            mm = _combine(tab.mm, U_flat)
            x1, diff = y + mm[0].reshape(shape), mm[1].reshape(shape)
        y_new, r = normalize(x1)
        e = field.manifold.tangent(y_new, diff)
        error = e if r is None else e / r
        if self.solve_limit is not None:
            with np.errstate(invalid="ignore"):  # beyond the precision of the solve: rejected (module docstring)
                lost = np.abs(np.reshape(hg, np.shape(hg)[:-2] if np.ndim(hg) else ())) * _norm_inf(J) > self.solve_limit / EPS
            if np.any(lost):
                error = np.where(lost[..., None, None], np.inf, error)
        if frozen is not None:
            keep = frozen[..., None, None]
            y_new, error = np.where(keep, y, y_new), np.where(keep, 0.0, error)
        k_next = on_manifold(field, shifted_time(t, 1.0, h), y_new)
        nfev += 1
        return StepResult(y_new, error, nfev, k_next, (Us, x1, J))

    def interpolant(self, field, t, y, h, res):
        if is_torch(y):
            if is_torch(res.stages[0]):  # a step of the differentiable torch path
                return rosenbrock_interpolant(self, field, t, y, h, res)
            return host_interpolant(self, field, t, y, h, res)
        U, x1, _ = res.stages
        H = self.tableau.H
        ka, kb = _combine(H, U.reshape(len(U), -1)).reshape((2,) + U.shape[1:])
        retract = field.manifold.retract

        def u(theta):
            s = per_trajectory(np.asarray(theta, dtype=float), y)
            return retract((1.0 - s) * y + s * (x1 + (1.0 - s) * (ka + s * kb)))

        return Interpolant(u)


def _host(x):
    return np.asarray(to_numpy(x), dtype=float) if is_torch(x) else x


def host_step(stepper, field, t, y, h, k1=None, **kw):
    """``stepper.step`` for tensors that nothing differentiates: computed on the host in float64
    (the dense linear algebra of the stiff steppers is NumPy's), the results moved back to the
    tokens' device and dtype. Tokens or field parameters that require gradients take the torch
    path instead (``riemattn.solvers.stiff._rosenbrock_torch``); a host step would cut the graph, so
    it refuses them with an :class:`~riemattn.errors.InputTypeError`.
    """
    if differentiated(field, y):
        raise InputTypeError(
            f"stepper {stepper.name!r}: the host (NumPy) step does not propagate gradients; the "
            f"tokens or the field's parameters require grad (docs/autodiff.md)."
        )
    res = stepper.step(field, _host(t), _host(y), _host(h), None if k1 is None else _host(k1), **kw)
    back = lambda a: None if a is None else convert(a, y)  # noqa: E731
    state = None if res.state is None else convert(res.state, y, dtype=namespace(y).float64)
    return StepResult(back(res.y), back(res.error), res.nfev, back(res.k_next), res.stages, state)


def host_interpolant(stepper, field, t, y, h, res):
    """``stepper.interpolant`` for tensors (see :func:`host_step`)."""
    inner = stepper.interpolant(field, _host(t), _host(y), _host(h),
                                res._replace(y=_host(res.y), error=None, k_next=None))
    return Interpolant(lambda theta: convert(inner(_host(theta)), y), nfev=inner.nfev)


def _combine(coef, U_flat):
    """``coef @ U_flat`` for coefficient rows (m, k) and the first k flattened stages (k, N), shape
    (m, N) (einsum: a trajectory's result does not depend on the batch around it, see
    :func:`riemattn.solvers.steppers.combine`)."""
    return np.einsum("mj,jk->mk", coef, U_flat[:coef.shape[-1]])


@register
class ProjectedRodas4(ProjectedRosenbrock):
    """Projected RODAS4: Rosenbrock, 6 stages, order 4(3), L-stable, stiffly accurate, dense
    output of order 3; coefficients :data:`riemattn.solvers.rosenbrock_tableaux.RODAS4`.

    References
    ----------
    E. Hairer, G. Wanner, *Solving Ordinary Differential Equations II*, 2nd ed., section IV.7.
    """

    name = "rodas4"
    order = 4
    error_order = 3
    dense_order = 3
    tableau = RODAS4


@register
class ProjectedRodas4P(ProjectedRodas4):
    """Projected RODAS4P: RODAS4's structure with Steinebach's coefficients that avoid order
    reduction on stiff problems following a slowly moving equilibrium;
    :data:`riemattn.solvers.rosenbrock_tableaux.RODAS4P`.

    References
    ----------
    G. Steinebach, "Order-reduction of ROW-methods for DAEs and method of lines applications",
    Preprint 1741, TH Darmstadt, 1995.
    """

    name = "rodas4p"
    tableau = RODAS4P
