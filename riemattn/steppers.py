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
    "ProjectedDOP853",
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

    @classmethod
    def _plan(cls):
        """Per-class cache of the tableau's nonzero coefficients (less Python work per step)."""
        plan = cls.__dict__.get("_plan_cache")
        if plan is None:
            tab = cls.tableau
            A, b, c = tab.A_, tab.b_, tab.c_

            def nz(row):
                return tuple((j, float(a)) for j, a in enumerate(row) if a != 0.0)

            stages = tuple((float(c[i]), nz(A[i, :i])) for i in range(1, tab.stages))
            b_err = nz(tab.b_err_) if tab.b_err_ is not None else None
            plan = (stages, nz(b), b_err)
            cls._plan_cache = plan
        return plan

    def step(self, field, t, y, h, k1=None):
        stages, b_nz, err_nz = self._plan()
        D = _drive(field)
        apply_W = field.manifold.apply_W
        K = [D(t, y) if k1 is None else k1]
        nfev = 1 if k1 is None else 0
        for ci, coefs in stages:
            Y = _axpy(y, h, coefs, K)
            norm = np.sqrt(np.einsum("...i,...i->...", Y, apply_W(Y)))[..., None]
            K.append(norm * D(t + ci * h, Y / norm))
            nfev += 1
        x = _axpy(y, h, b_nz, K)
        xnorm = np.sqrt(np.einsum("...i,...i->...", x, apply_W(x)))[..., None]
        y_new = x / xnorm
        error = self._error_estimate(h, K, err_nz, y_new, xnorm, apply_W) if self.adaptive else None
        k_next = None
        if self.fsal:
            # last stage is evaluated at x itself (c = 1, A[-1] = b): D(t + h, y_new) = K[-1] / |x|
            k_next = K[-1] / xnorm
        return StepResult(y_new, error, nfev, k_next)

    def _error_estimate(self, h, K, err_nz, y_new, xnorm, apply_W):
        """Local error estimate ``h sum_i (b_i - b_hat_i) K_i`` (ambient, shape of ``y``)."""
        return _axpy(None, h, err_nz, K)


def _axpy(y, h, coefs, K):
    """``y + h * sum_j a_j K_j`` over the nonzero ``(j, a_j)`` (``y`` None: without it)."""
    if not coefs:
        return np.array(y, copy=True) if y is not None else np.zeros_like(K[0])
    (j0, a0), rest = coefs[0], coefs[1:]
    out = K[j0] * (h * a0)
    if rest:
        tmp = np.empty_like(out)
        for j, a in rest:
            np.multiply(K[j], h * a, out=tmp)
            out += tmp
    if y is not None:
        out += y
    return out


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


@register
class ProjectedDOP853(ProjectedRK):
    """Projected Dormand--Prince 8(5,3), adaptive (12 stages), the method of Hairer's code DOP853.

    The 8th-order weights ``b`` propagate the solution. Two embedded weight vectors on the same
    stages estimate the error: ``b_hat`` of order 5 (the code's ``ER`` coefficients are
    ``b - b_hat``) and ``bhh = (31/127, 0, ..., 0, 12675/17272, 0, 0, 3/136)`` of order 3 (only
    stages 1, 9, 12). As in DOP853, with ``e5 = h sum (b - b_hat)_i K_i`` and
    ``e3 = h sum (b - bhh)_i K_i`` the estimate is ``e5 |e5| / sqrt(|e5|^2 + 0.01 |e3|^2)``
    (``|.|`` the RMS norm over the whole state), which behaves like ``h^8`` for small steps, so
    step-size control uses ``error_order = 7``. (Hairer's code takes the norms after scaling by
    the tolerances; here the ratio is scale-free and the scaling is applied by ``integrate``.)

    The tableau class checks all 200 order conditions up to order 8 for ``b``, the 17 up to
    order 5 for ``b_hat`` and the 4 up to order 3 for ``bhh`` on import.

    References
    ----------
    P. J. Prince, J. R. Dormand, "High order embedded Runge-Kutta formulae", J. Comput. Appl.
    Math. 7 (1981) 67-75. E. Hairer, S. P. Norsett, G. Wanner, *Solving Ordinary Differential
    Equations I*, 2nd ed., Springer 1993, section II.10 (the code DOP853: coefficients and the
    combined 5th/3rd-order error estimator).

    Provenance: the decimal values of the coefficients were transcribed from SciPy's
    ``scipy/integrate/_ivp/dop853_coefficients.py`` (BSD-3-Clause), itself a transcription of
    Hairer's Fortran ``dop853.f``; they are checked here against the order conditions, not trusted.
    """

    name = "dop853"
    order = 8
    adaptive = True
    error_order = 7
    fsal = False
    tableau = ButcherTableau(
        c=(
            0, 0.05260015195876773, 0.0789002279381516, 0.1183503419072274, 0.2816496580927726,
            0.3333333333333333, 0.25, 0.3076923076923077, 0.6512820512820513, 0.6,
            0.8571428571428571, 1.0,
        ),
        A=(
            (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
            (0.05260015195876773, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
            (0.0197250569845379, 0.0591751709536137, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
            (0.02958758547680685, 0, 0.08876275643042054, 0, 0, 0, 0, 0, 0, 0, 0, 0),
            (0.2413651341592667, 0, -0.8845494793282861, 0.924834003261792, 0, 0, 0, 0, 0, 0, 0, 0),
            (
                0.037037037037037035, 0, 0, 0.17082860872947386, 0.12546768756682242, 0, 0, 0, 0, 0,
                0, 0,
            ),
            (
                0.037109375, 0, 0, 0.17025221101954405, 0.06021653898045596, -0.017578125, 0, 0, 0,
                0, 0, 0,
            ),
            (
                0.03709200011850479, 0, 0, 0.17038392571223998, 0.10726203044637328,
                -0.015319437748624402, 0.008273789163814023, 0, 0, 0, 0, 0,
            ),
            (
                0.6241109587160757, 0, 0, -3.3608926294469414, -0.868219346841726,
                27.59209969944671, 20.154067550477894, -43.48988418106996, 0, 0, 0, 0,
            ),
            (
                0.47766253643826434, 0, 0, -2.4881146199716677, -0.590290826836843,
                21.230051448181193, 15.279233632882423, -33.28821096898486, -0.020331201708508627,
                0, 0, 0,
            ),
            (
                -0.9371424300859873, 0, 0, 5.186372428844064, 1.0914373489967295,
                -8.149787010746927, -18.52006565999696, 22.739487099350505, 2.4936055526796523,
                -3.0467644718982196, 0, 0,
            ),
            (
                2.273310147516538, 0, 0, -10.53449546673725, -2.0008720582248625, -17.9589318631188,
                27.94888452941996, -2.8589982771350235, -8.87285693353063, 12.360567175794303,
                0.6433927460157636, 0,
            ),
        ),
        b=(
            0.054293734116568765, 0, 0, 0, 0, 4.450312892752409, 1.8915178993145003,
            -5.801203960010585, 0.3111643669578199, -0.1521609496625161, 0.20136540080403034,
            0.04471061572777259,
        ),
        order=8,
        b_hat=(
            0.04117368912237389, 0, 0, 0, 0, 5.675469339128614, 2.3872768489717506,
            -7.465581142465571, 0.6614932157077935, -0.48634006837553356, 0.11944219431891463,
            0.06706592359165889,
        ),
        embedded_order=5,
    )
    #: the 3rd-order weights of the second error estimate (validated as a tableau of order 3)
    _bhh = ButcherTableau(
        c=tableau.c, A=tableau.A, b=("31/127",) + (0,) * 7 + ("12675/17272", 0, 0, "3/136"), order=3
    )

    @classmethod
    def _err3(cls):
        e3 = cls.__dict__.get("_err3_cache")
        if e3 is None:
            diff = cls.tableau.b_ - cls._bhh.b_
            e3 = cls._err3_cache = tuple((j, float(a)) for j, a in enumerate(diff) if a != 0.0)
        return e3

    def _error_estimate(self, h, K, err_nz, y_new, xnorm, apply_W):
        # An error dx in x = y + h sum b_i K_i moves y_new = pi_W(x) by (I - y_new y_new^T W) dx / |x|_W
        # to first order: the radial part is removed by the projection and must not enter the blend.
        e5 = _axpy(None, h, err_nz, K)
        e3 = _axpy(None, h, self._err3(), K)
        e5 = (e5 - np.einsum("...i,...i->...", e5, apply_W(y_new))[..., None] * y_new) / xnorm
        e3 = (e3 - np.einsum("...i,...i->...", e3, apply_W(y_new))[..., None] * y_new) / xnorm
        n5, n3 = np.mean(np.square(e5)), np.mean(np.square(e3))
        denom = n5 + 0.01 * n3
        return e5 * np.sqrt(n5 / denom) if denom > 0 else e5
