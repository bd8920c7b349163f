r"""Steppers: projected (retraction) Runge--Kutta methods and the transformer-layer step.

A stepper advances tokens ``y`` (shape ``(..., l, d)``, on the field's manifold) by one step of a
field ``F(t, y)`` of tangent vectors; it knows nothing about attention. ``t`` and ``h`` are floats
or arrays of one value per trajectory (shape ``y.shape[:-2]``). Lie-group steppers live in
:mod:`riemattn.solvers.lie` and register themselves in the same :data:`STEPPERS` registry.

Projected Runge--Kutta (the retraction pi_W)
--------------------------------------------
On ``R^d \ {0}`` define the lifted field

.. math:: G(t, x) = |x|_W \, F(t, \pi_W(x)).

Because ``T_x pi_W = |x|_W^{-1} (I - \pi \pi^T W)`` and ``F`` is tangent, ``d/dt pi_W(x(t)) =
F(t, pi_W(x(t)))`` along every solution of ``x' = G(t, x)``, and ``|x|_W`` is constant along it:
pi_W maps solutions of G exactly onto solutions of the manifold ODE. A classical explicit RK
method of order p applied to G, followed by the manifold's retraction, is therefore of order p
on the manifold:

.. math:: K_i = G(t + c_i h, y + h \sum_j a_{ij} K_j), \qquad y_1 = \pi_W(y + h \sum_i b_i K_i).

Evaluating F at the retracted stage points matters: the raw field evaluated off the manifold
would add a stiff radial mode (for attention of rate ~ e^beta / n). The local error of adaptive
methods is measured on the manifold: the embedded difference ``e = h sum_i (b_i - bhat_i) K_i``
moves ``y_1`` by ``(I - y_1 y_1^T W) e / |x|_W`` to first order, and that tangent vector is what
the step-size control sees. On :class:`~riemattn.geometry.manifolds.Euclidean` the retraction is the
identity and every method here is its classical tableau.

The layer step
--------------
``"layer"`` (:class:`riemattn.solvers.layer.LayerStep`) is projected Euler on the attention field's
*un-normalised* update (:meth:`~riemattn.dynamics.attention.AttentionField.update`):
``y_1 = pi_W(y + h f(t, y))``. For ``h = tau`` it is one transformer layer exactly (attention,
skip connection, layer norm, ICML eq. 1 and 4); it agrees with ``"euler"`` to first order in h.
The adaptive projected methods ``"dopri5"`` and ``"dop853"`` are in :mod:`riemattn.solvers.dormand_prince`.

References
----------
E. Hairer, C. Lubich, G. Wanner, *Geometric Numerical Integration*, 2nd ed., section IV.4
(projection methods). E. Hairer, S. P. Norsett, G. Wanner, *Solving Ordinary Differential
Equations I*, 2nd ed., sections II.4-II.6 (error estimates, dense output).
Rodriguez Abella, Silvestre, Tabuada, "Consensus is all you get", ICML 2025, eq. (1), (4), (6).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from ..._backend import constant, convert, copy, device_of, is_torch, namespace
from ...errors import InputTypeError, ValidationError
from .tableaux import EULER, HEUN, RK4, ButcherTableau, order_residuals, rooted_trees

__all__ = [
    "ButcherTableau",
    "Interpolant",
    "StepResult",
    "Stepper",
    "ProjectedRK",
    "ProjectedEuler",
    "ProjectedHeun",
    "ProjectedRK4",
    "STEPPERS",
    "register",
    "get_stepper",
    "order_residuals",
    "rooted_trees",
]


class StepResult(NamedTuple):
    """Result of one step.

    Attributes
    ----------
    y : ndarray, shape (..., l, d)
        The new tokens (on the manifold).
    error : ndarray or tuple or None
        The local error estimate, a tangent vector at ``y`` (same shape), for adaptive steppers.
    nfev : int
        Field evaluations used.
    k_next : ndarray or None
        ``F(t + h, y)``, passed back as ``k1`` of the next step (first-same-as-last steppers).
    stages : Any
        What the stepper's dense output needs (stage values); None for steppers without one.
    state : ndarray or None
        Per-trajectory state carried to the next step, shape ``batch + (m,)`` (e.g. which
        method ``"auto"`` uses): the adaptive loop keeps it with the rows (compacting it like
        ``k_next``) and passes it back as ``step(..., state=...)``; None for stateless steppers.
    """

    y: np.ndarray
    error: Any
    nfev: int
    k_next: np.ndarray | None = None
    stages: Any = None
    state: Any = None


def per_trajectory(a, y):
    """A scalar, or a per-trajectory array shaped to broadcast against tokens ``y`` (..., l, d).

    Arrays follow ``y``'s kind and dtype (per-trajectory step sizes of float32 tensors are cast
    to float32, so that the arithmetic stays in the tokens' precision).
    """
    if np.ndim(a) == 0:
        return a
    if type(y) is np.ndarray:
        a = np.asarray(a, dtype=float)
    elif not is_torch(a) or a.dtype != y.dtype:
        a = convert(a, y)
    if tuple(a.shape) != tuple(y.shape[:-2]):
        a = namespace(a).broadcast_to(a, tuple(y.shape[:-2]))
    return a[..., None, None]


def _check_field(field):
    """The field a step evaluates: its unchecked twin where it has one (stage points are not
    retracted, so the field's on-manifold token check is for users' calls only)."""
    if getattr(field, "manifold", None) is None or not callable(field):
        raise InputTypeError(
            f"field must be a riemattn Field (callable with a .manifold), got {type(field).__name__}."
        )
    unchecked = getattr(field, "_unchecked", None)
    return field if unchecked is None else unchecked()


class Stepper:
    """Base class of steppers.

    Class attributes: ``name`` (registry key), ``order``, ``adaptive`` (has an error estimate),
    ``error_order`` (order of the embedded estimate, used by step-size control), ``fsal``
    (``step`` returns ``k_next``, the field at the new point, to be passed as ``k1``),
    ``dense_order`` (order of the native dense output; None: save points are computed by an
    extra step from the start of the step, see :meth:`interpolant`).
    """

    name = "stepper"
    order: int = 0
    adaptive = False
    error_order: int | None = None
    fsal = False
    dense_order: int | None = None
    forward_only = True

    def check_field(self, field) -> None:
        """Raise this stepper's refusal of ``field`` (a documented error) before any step, so that
        a call is refused the same way whatever the batch (an empty one included). The base
        stepper takes every Field (a callable ``field(t, y)``; anything else: InputTypeError)."""
        if not callable(field):
            raise InputTypeError(f"field must be a riemattn Field (callable as field(t, y)), got {type(field).__name__}.")

    def step(self, field, t, y, h, k1=None) -> StepResult:  # pragma: no cover - abstract
        raise NotImplementedError

    def error_norm(self, res: StepResult, scale) -> np.ndarray:
        """Per-trajectory RMS of ``res.error / scale`` over tokens and components, shape (...)."""
        xp = namespace(res.error)
        return xp.sqrt(xp.mean(xp.square(res.error / scale), axis=(-2, -1)))

    def interpolant(self, field, t, y, h, res: StepResult) -> "Interpolant":
        """An :class:`Interpolant` of the solution between ``t`` and ``t + h``, on the manifold.

        The default takes a fresh step of size ``theta h`` from ``(t, y)`` for each call (the
        method's full order, one step's cost per call); steppers with a dense output override it.
        """
        interp = Interpolant(None)

        def restart(theta):
            r = self.step(field, t, y, scaled_step(theta, h))
            interp.nfev += r.nfev
            return r.y

        interp.fn = restart
        return interp

    def __repr__(self) -> str:
        return f"{type(self).__name__}(order={self.order})"


def scaled_step(theta, h):
    return theta * h if np.ndim(theta) or np.ndim(h) else float(theta) * float(h)


class Interpolant:
    """``u(theta)``: the solution at ``t + theta h`` (theta a float or one value per trajectory,
    in [0, 1]), on the manifold; ``nfev`` counts the field evaluations it has used so far."""

    def __init__(self, fn, nfev: int = 0):
        self.fn, self.nfev = fn, nfev

    def __call__(self, theta):
        return self.fn(theta)


class ProjectedRK(Stepper):
    """Explicit RK tableau applied to G(t, x) = |x|_W F(t, pi_W x), then retracted by pi_W.

    Subclasses set ``tableau``; see the module docstring for why this keeps the tableau's order.
    """

    tableau: ButcherTableau

    @classmethod
    def _plan(cls):
        """Per-class cache of the tableau's rows without trailing zeros (less work per step)."""
        plan = cls.__dict__.get("_plan_cache")
        if plan is None:
            tab = cls.tableau
            A, b, c = tab.A_, tab.b_, tab.c_
            stages = tuple((float(c[i]), coefficients(A[i, :i])) for i in range(1, tab.stages))
            b_err = coefficients(tab.b_err_) if tab.b_err_ is not None else None
            plan = (stages, coefficients(b), b_err)
            cls._plan_cache = plan
        return plan

    def _evaluate(self, field, t, y):
        """The field whose tableau is applied (the tangent field; the layer step overrides)."""
        return field(t, y)

    def step(self, field, t, y, h, k1=None):
        field = _check_field(field)
        stages, b, b_err = self._plan()
        normalize = field.manifold.normalize
        hc = per_trajectory(h, y)
        xp = namespace(y)
        # stage values G(t + c_i h, X_i), stacked
        K = xp.empty((len(stages) + 1,) + tuple(y.shape), dtype=y.dtype, device=device_of(y))
        K[0] = self._evaluate(field, t, y) if k1 is None else k1
        nfev = 1 if k1 is None else 0
        for i, (ci, a) in enumerate(stages, start=1):
            X, r = normalize(axpy(y, hc, a, K))
            F = self._evaluate(field, shifted_time(t, ci, h), X)
            if r is None:
                K[i] = F
            elif xp is np:
                np.multiply(F, r, out=K[i])
            else:
                K[i] = F * r
            nfev += 1
        y_new, r = normalize(axpy(y, hc, b, K))
        error = None
        if self.adaptive:
            error = self._tangent_error(field.manifold, axpy(None, hc, b_err, K), y_new, r)
        k_next = None
        if self.fsal:  # last stage sits at x itself (c = 1, A[-1] = b): G(t + h, x) = |x| F(t + h, y_new)
            k_next = K[-1] if r is None else K[-1] / r
        return StepResult(y_new, error, nfev, k_next, (K, r))

    @staticmethod
    def _tangent_error(manifold, e, y_new, r):
        """First-order motion of pi_W(x) under x -> x + e: (I - y y^T W) e / |x|_W."""
        e = manifold.tangent(y_new, e)
        return e if r is None else e / r

    def _dense_sum(self, field, t, y, h, weights, K):
        """retract(y + h sum_i w_i K_i) for per-trajectory weights w_i (floats or arrays)."""
        x = copy(y)
        hc = per_trajectory(h, y)
        for w, k in zip(weights, K):
            if np.ndim(w) or w != 0.0:
                x += (hc * per_trajectory(w, y)) * k
        return field.manifold.retract(x)


def coefficients(row) -> np.ndarray:
    """A tableau row as a float array without its trailing zeros."""
    row = np.asarray(row, dtype=float)
    nz = np.flatnonzero(row)
    return row[: nz[-1] + 1] if nz.size else row[:0]


def shifted_time(t, c, h):
    """t + c h for floats or per-trajectory arrays (NumPy arrays or tensors)."""
    if np.ndim(t) == 0 and np.ndim(h) == 0:
        return float(t) + c * float(h)
    return t + c * (h if is_torch(h) else np.asarray(h))


_COEFFS: dict = {}


def _coefficients_like(a: np.ndarray, K):
    """The NumPy coefficient row ``a`` as a tensor on ``K``'s device and dtype, cached (a host to
    device copy per stage would synchronise with the GPU)."""
    return constant(_COEFFS, a.tobytes(), a, K)


def combine(a, K):
    """``sum_j a_j K_j`` for the coefficients ``a`` (1-D, length <= len(K)), or None if ``a`` is empty.

    ``K`` is a stack of arrays (one contraction over its first axis) or a list of them.
    """
    n = len(a)
    if n == 0:
        return None
    if isinstance(K, np.ndarray):
        # einsum, not np.dot: BLAS gemv is 1.5x faster here but its rounding depends on the row
        # count and alignment, so a trajectory's result would change with the batch around it
        # (tests/solvers/test_integrate.py::test_compacted_batch_equals_masked_batch caught a step count 66 vs 67)
        return np.einsum("j,jk->k", a, K[:n].reshape(n, -1)).reshape(K.shape[1:])
    if is_torch(K) and isinstance(a, np.ndarray):
        return (_coefficients_like(a, K) @ K[:n].reshape(n, -1)).reshape(K.shape[1:])
    out = None
    for aj, kj in zip(a.tolist(), K):
        if aj != 0.0:
            out = kj * aj if out is None else out + kj * aj
    return out if out is not None else namespace(K[0]).zeros_like(K[0])


def axpy(y, hc, a, K):
    """``y + h * sum_j a_j K_j`` (``y`` None: without it); ``h`` a float or per-trajectory array."""
    acc = combine(a, K)
    if acc is None:
        return copy(y) if y is not None else namespace(K[0]).zeros_like(K[0])
    acc *= hc
    if y is not None:
        acc += y
    return acc


# ----------------------------------------------------------------------------------------------
# Registry and the methods
# ----------------------------------------------------------------------------------------------
STEPPERS: dict[str, type] = {}


def register(cls):
    """Class decorator adding a stepper class to :data:`STEPPERS` under ``cls.name``."""
    STEPPERS[cls.name] = cls
    return cls


def get_stepper(stepper) -> Stepper:
    """A stepper instance from a registry name, a Stepper class or an instance."""
    if isinstance(stepper, Stepper):
        return stepper
    if isinstance(stepper, type) and issubclass(stepper, Stepper):
        return stepper()
    if isinstance(stepper, str) and stepper in STEPPERS:
        return STEPPERS[stepper]()
    raise ValidationError(f"stepper must be one of {sorted(STEPPERS)} or a Stepper, got {stepper!r}.")


@register
class ProjectedEuler(ProjectedRK):
    """Projected explicit Euler, order 1: ``y_1 = pi_W(y + h F(t, y))``, F the tangent field.

    Not the papers' discrete model. "An Euler step, then renormalise" on the un-normalised
    attention update f, ``y_1 = pi_W(y + h f)`` (a transformer layer; GLPR's and the
    dynamic-metastability code's loop), is the stepper ``"layer"``
    (:class:`~riemattn.solvers.layer.LayerStep`). Since ``f = F + <y, f>_W y``, the layer is this
    step with the size ``h / (1 + h <y, f>_W)``: both are first-order schemes for ``y' = F`` and
    agree as ``h -> 0``, but at a fixed time they differ by O(h), and by a lot where
    ``h <y, f>_W`` is not small (USA at large beta, where ``<y, f>_W`` grows like ``e^beta``).
    Use ``"layer"`` to reproduce discrete-layer experiments, ``"euler"`` (or a higher-order
    stepper) to approximate the continuous flow.
    """

    name = "euler"
    order = 1
    tableau = EULER


@register
class ProjectedHeun(ProjectedRK):
    """Projected Heun (explicit trapezoidal rule), order 2: c = (0, 1), a21 = 1, b = (1/2, 1/2)."""

    name = "heun"
    order = 2
    tableau = HEUN


@register
class ProjectedRK4(ProjectedRK):
    """Projected classical Runge--Kutta, order 4: c = (0, 1/2, 1/2, 1), b = (1/6, 1/3, 1/3, 1/6)."""

    name = "rk4"
    order = 4
    tableau = RK4
