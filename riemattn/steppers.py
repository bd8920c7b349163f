r"""Steppers: projected (retraction) Runge--Kutta methods, as validated Butcher tableaux.

A stepper advances ``y`` (shape ``(..., l, d)``, on a manifold E_W) by one step ``h`` of a field;
it knows nothing about attention. Lie-group steppers live in :mod:`riemattn.lie` and register
themselves in the same :data:`STEPPERS` registry.

Projected Runge--Kutta (the retraction pi_W)
--------------------------------------------
Let ``D(t, y)`` be the field's *drive*: an ambient vector whose tangent projection
``(I - y y^T W) D`` is the field ``F(t, y)`` (the un-normalized attention update for
:class:`~riemattn.attention.AttentionField`; ``F`` itself for other fields). Define on
``R^d \ {0}`` the ambient field

.. math:: H(t, x) = |x|_W \, D(t, \pi_W(x)).

Because ``T_x pi_W = |x|_W^{-1} (I - \pi \pi^T W)`` kills the radial part,
``d/dt pi_W(x(t)) = F(t, pi_W(x(t)))`` along every solution of ``x' = H(t, x)``: pi_W maps
solutions of H exactly onto solutions of the manifold ODE. A classical explicit RK method of order
p applied to H, followed by pi_W, is therefore a method of order p on E_W:

.. math:: K_i = H(t + c_i h, y + h \sum_j a_{ij} K_j), \qquad y_1 = \pi_W(y + h \sum_i b_i K_i).

With one stage (Euler), ``y_1 = pi_W(y + h D(t, y))``: for the attention drive and h = tau this is
one transformer layer (SPEC section 2), exactly, not only to first order.

References
----------
E. Hairer, C. Lubich, G. Wanner, *Geometric Numerical Integration*, 2nd ed., section IV.4
(projection methods). J. R. Dormand, P. J. Prince, "A family of embedded Runge-Kutta formulae",
J. Comput. Appl. Math. 6 (1980). J. C. Butcher, *Numerical Methods for ODEs*, section 3 (trees).
"""

from __future__ import annotations

from dataclasses import dataclass, field as dc_field
from fractions import Fraction
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from .errors import ValidationError

__all__ = [
    "ButcherTableau",
    "StepResult",
    "Stepper",
    "ProjectedRK",
    "ProjectedEuler",
    "ProjectedHeun",
    "ProjectedRK4",
    "ProjectedDormandPrince",
    "STEPPERS",
    "register",
    "get_stepper",
]


# ----------------------------------------------------------------------------------------------
# Rooted trees and order conditions
# ----------------------------------------------------------------------------------------------
@lru_cache(maxsize=None)
def rooted_trees(order: int) -> tuple:
    """All rooted trees with ``order`` nodes; a tree is a sorted tuple of its children."""
    if order == 1:
        return ((),)
    out = set()
    # children multisets whose node counts sum to order - 1
    def partitions(n, max_part):
        if n == 0:
            yield ()
            return
        for k in range(min(n, max_part), 0, -1):
            for rest in partitions(n - k, k):
                yield (k,) + rest

    for part in partitions(order - 1, order - 1):
        def combos(parts):
            if not parts:
                yield ()
                return
            for t in rooted_trees(parts[0]):
                for rest in combos(parts[1:]):
                    yield (t,) + rest

        for children in combos(part):
            out.add(tuple(sorted(children)))
    return tuple(sorted(out))


def _density(tree) -> int:
    """gamma(t) = |t| * prod gamma(children)."""
    n = _size(tree)
    for child in tree:
        n *= _density(child)
    return n


def _size(tree) -> int:
    return 1 + sum(_size(c) for c in tree)


def _weights(tree, A) -> np.ndarray:
    """Internal elementary weights Phi_i(t) = prod_children (A Phi(child))_i."""
    out = np.ones(A.shape[0])
    for child in tree:
        out = out * (A @ _weights(child, A))
    return out


def order_residuals(A, b, order: int) -> list[tuple[tuple, float]]:
    """For every tree of order <= ``order``: (tree, b . Phi(t) - 1/gamma(t))."""
    A = np.asarray(A, dtype=float)
    b = np.asarray(b, dtype=float)
    res = []
    for q in range(1, order + 1):
        for t in rooted_trees(q):
            res.append((t, float(b @ _weights(t, A) - 1.0 / _density(t))))
    return res


# ----------------------------------------------------------------------------------------------
# Butcher tableau
# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ButcherTableau:
    """An explicit Runge--Kutta tableau, validated on construction.

    Parameters
    ----------
    c : (s,) nodes, A : (s, s) strictly lower triangular, b : (s,) weights, order : int.
    b_hat : (s,), optional -- weights of an embedded method of order ``embedded_order``.

    Validation: A strictly lower triangular, ``c_i = sum_j a_ij``, and all order conditions
    ``b . Phi(t) = 1/gamma(t)`` for rooted trees t with up to ``order`` nodes (and up to
    ``embedded_order`` for ``b_hat``) hold to 1e-12.
    """

    c: tuple
    A: tuple
    b: tuple
    order: int
    b_hat: tuple | None = None
    embedded_order: int | None = None
    _arrays: dict = dc_field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self):
        c = np.array([float(Fraction(x)) if isinstance(x, str) else float(x) for x in self.c])
        A = np.array([[float(Fraction(x)) if isinstance(x, str) else float(x) for x in row] for row in self.A])
        b = np.array([float(Fraction(x)) if isinstance(x, str) else float(x) for x in self.b])
        s = len(b)
        if A.shape != (s, s) or c.shape != (s,):
            raise ValidationError(f"tableau shapes disagree: c {c.shape}, A {A.shape}, b {b.shape}.")
        if np.any(np.triu(A) != 0):
            raise ValidationError("A must be strictly lower triangular (explicit method).")
        if not np.allclose(A.sum(axis=1), c, atol=1e-14):
            raise ValidationError(f"row sums of A {A.sum(axis=1)} must equal c {c}.")
        self._check(A, b, self.order, "b")
        self._arrays.update(c=c, A=A, b=b)
        if self.b_hat is not None:
            b_hat = np.array([float(Fraction(x)) if isinstance(x, str) else float(x) for x in self.b_hat])
            if self.embedded_order is None:
                raise ValidationError("embedded_order is required with b_hat.")
            self._check(A, b_hat, self.embedded_order, "b_hat")
            self._arrays.update(b_hat=b_hat, b_err=b - b_hat)

    @staticmethod
    def _check(A, b, order, name):
        bad = [(t, r) for t, r in order_residuals(A, b, order) if abs(r) > 1e-12]
        if bad:
            t, r = bad[0]
            raise ValidationError(
                f"weights {name} violate {len(bad)} order condition(s) up to order {order}; first: "
                f"tree {t} (order {_size(t)}), residual {r:.3g}."
            )
        # A method of order p must violate some condition of order p + 1 (else order is understated).

    @property
    def stages(self) -> int:
        return len(self.b)

    def __getattr__(self, name):
        arrays = object.__getattribute__(self, "_arrays")
        if name in ("c_", "A_", "b_", "b_hat_", "b_err_"):
            return arrays.get(name[:-1])
        raise AttributeError(name)


class StepResult(NamedTuple):
    """Result of one step: new state, error estimate (ambient, same shape; or None), field evaluations,
    and an optional value to pass back as ``k1`` on the next step (first-same-as-last)."""

    y: np.ndarray
    error: np.ndarray | None
    nfev: int
    k_next: np.ndarray | None = None


class Stepper:
    """Base class of steppers.

    Class attributes: ``name`` (registry key), ``order``, ``adaptive`` (has an error estimate),
    ``error_order`` (order of the embedded estimate, used by step-size control), ``fsal``
    (``step`` returns ``k_next`` to be passed as ``k1``), ``forward_only``.
    """

    name = "stepper"
    order: int = 0
    adaptive = False
    error_order: int | None = None
    fsal = False
    forward_only = True

    def step(self, field, t: float, y: np.ndarray, h: float, k1=None) -> StepResult:  # pragma: no cover
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}(order={self.order})"


def _drive(field):
    return getattr(field, "drive", field)


class ProjectedRK(Stepper):
    """Explicit RK tableau applied to H(t, x) = |x|_W D(t, pi_W x), then projected by pi_W.

    Subclasses set ``tableau``; see the module docstring for why this keeps the tableau's order.
    """

    tableau: ButcherTableau

    def step(self, field, t, y, h, k1=None):
        tab = self.tableau
        A, b, c = tab.A_, tab.b_, tab.c_
        D = _drive(field)
        manifold = field.manifold
        s = tab.stages
        K = [D(t, y) if k1 is None else k1]
        nfev = 1 if k1 is None else 0
        for i in range(1, s):
            Y = y + h * _combine(A[i, :i], K)
            norm = manifold.norm(Y)[..., None]
            K.append(norm * D(t + c[i] * h, Y / norm))
            nfev += 1
        x = y + h * _combine(b, K)
        y_new = x / manifold.norm(x)[..., None]
        error = None
        if self.adaptive:
            error = h * _combine(tab.b_err_, K)
        k_next = None
        if self.fsal:
            # last stage is evaluated at x itself (c = 1, A[-1] = b): D(t + h, y_new) = K[-1] / |x|
            k_next = K[-1] / manifold.norm(x)[..., None]
        return StepResult(y_new, error, nfev, k_next)


def _combine(coef, K):
    out = None
    for a, k in zip(coef, K):
        if a != 0.0:
            out = a * k if out is None else out + a * k
    return out if out is not None else np.zeros_like(K[0])


# ----------------------------------------------------------------------------------------------
# Registry and the classical tableaux
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
    """Projected explicit Euler, order 1: y_1 = pi_W(y + h D(t, y)). One transformer layer for h = tau."""

    name = "euler"
    order = 1
    tableau = ButcherTableau(c=(0,), A=((0,),), b=(1,), order=1)


@register
class ProjectedHeun(ProjectedRK):
    """Projected Heun (explicit trapezoidal rule), order 2: c = (0, 1), a21 = 1, b = (1/2, 1/2)."""

    name = "heun"
    order = 2
    tableau = ButcherTableau(c=(0, 1), A=((0, 0), (1, 0)), b=("1/2", "1/2"), order=2)


@register
class ProjectedRK4(ProjectedRK):
    """Projected classical Runge--Kutta, order 4: c = (0, 1/2, 1/2, 1), b = (1/6, 1/3, 1/3, 1/6)."""

    name = "rk4"
    order = 4
    tableau = ButcherTableau(
        c=(0, "1/2", "1/2", 1),
        A=((0, 0, 0, 0), ("1/2", 0, 0, 0), (0, "1/2", 0, 0), (0, 0, 1, 0)),
        b=("1/6", "1/3", "1/3", "1/6"),
        order=4,
    )


@register
class ProjectedDormandPrince(ProjectedRK):
    """Projected Dormand--Prince 5(4), adaptive (7 stages, first-same-as-last).

    Coefficients: Dormand & Prince (1980), Table 2 ("RK5(4)7M"); the 5th-order weights propagate the
    solution, the difference to the embedded 4th-order weights estimates the local error.
    """

    name = "dopri5"
    order = 5
    adaptive = True
    error_order = 4
    fsal = True
    tableau = ButcherTableau(
        c=(0, "1/5", "3/10", "4/5", "8/9", 1, 1),
        A=(
            (0, 0, 0, 0, 0, 0, 0),
            ("1/5", 0, 0, 0, 0, 0, 0),
            ("3/40", "9/40", 0, 0, 0, 0, 0),
            ("44/45", "-56/15", "32/9", 0, 0, 0, 0),
            ("19372/6561", "-25360/2187", "64448/6561", "-212/729", 0, 0, 0),
            ("9017/3168", "-355/33", "46732/5247", "49/176", "-5103/18656", 0, 0),
            ("35/384", 0, "500/1113", "125/192", "-2187/6784", "11/84", 0),
        ),
        b=("35/384", 0, "500/1113", "125/192", "-2187/6784", "11/84", 0),
        order=5,
        b_hat=("5179/57600", 0, "7571/16695", "393/640", "-92097/339200", "187/2100", "1/40"),
        embedded_order=4,
    )
