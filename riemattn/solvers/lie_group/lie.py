r"""Lie-group steppers: Lie--Euler, Crouch--Grossman 3, RKMK4, commutator-free 4, adaptive RKMK 5(4).

A Lie-group method writes the ODE ``y' = F(t, y)`` as ``y' = A(t, y) y`` with ``A`` in the Lie
algebra of a group acting on the manifold, and advances ``y`` by group elements ``exp(Theta)``.
The action is the manifold's (``manifold.lie_frame``, :mod:`riemattn.geometry.groups`): O(W) on spheres
and ellipsoids, where ``A = F y^T W - y F^T W`` and every step keeps every token on E_W exactly
(up to rounding) at every step size; the translations of R^d on
:class:`~riemattn.geometry.manifolds.Euclidean`, where each method reduces to its classical Runge--Kutta
tableau. The steppers see only the tangent field ``field(t, y)``.

Backends: ``y`` may be a NumPy array or a PyTorch tensor (CPU or CUDA, float64 or float32); the
field must then return tangent values of that kind, and ``step`` returns the new tokens (and the
error estimate) with the kind, device and dtype of ``y``. One code path serves both
(``riemattn._backend``, docs/performance.md); tableau coefficients are host floats. Per step on tensors the only
host read-back is the norm of each dense or low-rank exponential's generator
(:func:`~riemattn.geometry.lowrank.expm_small_action`: its scaling and number of terms are loop counts).

A field that carries its algebra element (``lie_generator(t, y)``, e.g.
:class:`~riemattn.dynamics.fields.LinearField` for ``y' = A y``) is stepped with it instead (dense
exponentials): a method that only sees tangent values cannot tell ``y' = A y`` from
``y' = A(y0) y`` at the first step, so it cannot reproduce ``expm(t A) y0`` for every step size;
with the generator it does (every method here reduces to ``exp(h A)`` when generators commute).

References
----------
H. Munthe-Kaas, "High order Runge-Kutta methods on manifolds", Appl. Numer. Math. 29 (1999).
P. E. Crouch, R. Grossman, "Numerical integration of ODEs on manifolds", J. Nonlinear Sci. 3 (1993).
E. Celledoni, A. Marthinsen, B. Owren, "Commutator-free Lie group methods", Future Gener. Comput.
Syst. 19 (2003). A. Iserles, H. Munthe-Kaas, S. P. Norsett, A. Zanna, "Lie-group methods",
Acta Numerica 9 (2000). E. Hairer, C. Lubich, G. Wanner, *Geometric Numerical Integration*, IV.8.
"""

from __future__ import annotations

import contextvars
import functools

import numpy as np

from ..._backend import namespace
from ..._validation import as_token_array
from ...dynamics.fields import AlgebraField, LinearField, generator_matrix
from ...geometry.groups import DenseFrame
from ..explicit.steppers import Stepper, StepResult, _check_field, register, shifted_time
from ..explicit.tableaux import CASH_KARP, CROUCH_GROSSMAN3, RK4, ButcherTableau, coefficient

__all__ = [
    "LieStepper",
    "LieEuler",
    "RKMK",
    "RKMK4",
    "RKMK45",
    "CrouchGrossman",
    "CrouchGrossman3",
    "CommutatorFree",
    "CommutatorFree4",
    # fields given by their algebra element (defined in riemattn.dynamics.fields, kept importable here)
    "AlgebraField",
    "LinearField",
    "generator_matrix",
]


_HOST_ROWS: dict = {}

#: NumPy's error state of the caller of a step, restored around the field's calls (see :func:`_quiet`)
_USER_ERRSTATE = contextvars.ContextVar("riemattn_lie_user_errstate", default=None)


def _quiet(step):
    """A Lie step without NumPy's overflow / invalid warnings from its group arithmetic: a step so
    large that its algebra elements overflow gives inf or NaN tokens, which the stepping loops
    report per trajectory (status -3, "the field or the state became NaN or inf"), not a warning.
    The field is called with the caller's error state (its own warnings are the user's)."""
    @functools.wraps(step)
    def wrapper(self, *args, **kwargs):
        token = _USER_ERRSTATE.set(np.geterr())
        try:
            with np.errstate(over="ignore", invalid="ignore"):
                return step(self, *args, **kwargs)
        finally:
            _USER_ERRSTATE.reset(token)
    return wrapper


def _host_rows(tab: ButcherTableau):
    """(A, b, c) of a tableau as nested lists of Python floats, cached per tableau: host
    coefficients multiply scalars or arrays of any kind (a NumPy float64 scalar times a float32
    tensor would be fine too, but a NumPy array row would not)."""
    rows = _HOST_ROWS.get(id(tab))
    if rows is None or rows[0] is not tab:
        rows = _HOST_ROWS[id(tab)] = (tab, (tab.A_.tolist(), tab.b_.tolist(), tab.c_.tolist()))
    return rows[1]


class LieStepper(Stepper):
    """Base class of Lie-group steppers: they see the tangent field ``field(t, y)`` and act through
    the manifold's group action; ``y`` of shape ``(..., l, d)`` stays on the manifold to rounding.

    ``y`` is a NumPy array (array_like: converted to float64) or a PyTorch tensor (kept on its
    device with its floating dtype); the result has the kind, device and dtype of ``y``."""

    lie = True

    def _start(self, field, y, slots: int):
        """The step's frame and the function evaluating a stage's algebra value at (t, Y)."""
        field = _check_field(field)
        if type(y) is not np.ndarray or y.dtype != np.float64:
            y = as_token_array(y, "y")
        if hasattr(field, "lie_generator"):
            cache = field.__dict__.setdefault("_lie_generator_cache", {})
            return DenseFrame(y, cache, field.manifold), field.lie_generator
        return field.manifold.lie_frame(y, slots), field

    @staticmethod
    def _stage(frame, value, t, state, k1):
        """(generator, nfev) of the stage at ``state``; ``k1`` is a handed-over first value."""
        if k1 is not None:
            return frame.generator(state, k1), 0
        Y = frame.point(state)
        user = _USER_ERRSTATE.get()
        if user is None:
            return frame.generator(state, value(t, Y)), 1
        with np.errstate(**user):
            F = value(t, Y)
        return frame.generator(state, F), 1


class CrouchGrossman(LieStepper):
    r"""Crouch--Grossman method: products of single exponentials on a classical tableau ``(c, A, b)``.

    ``Y_i = exp(h a_{i,i-1} A_{i-1}) ... exp(h a_{i1} A_1) y``, ``A_j = A(t + c_j h, Y_j)``,
    ``y_1 = exp(h b_s A_s) ... exp(h b_1 A_1) y``. Each factor is one stage generator, applied in
    closed form. Subclasses set ``tableau``; on a flat space the method is that classical tableau.
    """

    tableau: ButcherTableau = ButcherTableau(c=(0,), A=((0,),), b=(1,), order=1)

    @_quiet
    def step(self, field, t, y, h, k1=None):
        tab = self.tableau
        s = tab.stages
        A, b, c = _host_rows(tab)
        frame, value = self._start(field, y, s + 1)
        gens, nfev = [], 0
        for i in range(s):
            state = frame.start
            for j in range(i):
                if A[i][j] != 0.0:
                    state = frame.exp_single(gens[j], h * A[i][j], state)
            g, n = self._stage(frame, value, shifted_time(t, c[i], h), state, k1 if i == 0 else None)
            gens.append(g)
            nfev += n
        state = frame.start
        for j in range(s):
            if b[j] != 0.0:
                state = frame.exp_single(gens[j], h * b[j], state)
        return StepResult(frame.point(state), None, nfev)


@register
class LieEuler(CrouchGrossman):
    r"""Lie--Euler, order 1: ``y_1 = exp(h A(t, y)) y = cos(h|F|_W) y + sin(h|F|_W) F/|F|_W``.

    One field evaluation; on E_W the step follows the geodesic in the direction of ``F``
    (closed form, Rodrigues). Coefficients: ``c = (0,)``, ``b = (1,)``.

    References
    ----------
    Iserles, Munthe-Kaas, Norsett, Zanna, "Lie-group methods", Acta Numerica 2000, section 5.
    """

    name = "lie-euler"
    order = 1


@register
class CrouchGrossman3(CrouchGrossman):
    r"""Crouch--Grossman, order 3 (three stages, three field evaluations)::

        c = (0, 3/4, 17/24)
        a21 = 3/4;  a31 = 119/216, a32 = 17/108
        b = (13/51, -2/3, 24/17)

    (:data:`riemattn.solvers.tableaux.CROUCH_GROSSMAN3`, validated as a classical tableau of order 3.)

    References
    ----------
    P. E. Crouch, R. Grossman, J. Nonlinear Sci. 3 (1993), the third-order method of section 5;
    B. Owren, A. Marthinsen, "Runge-Kutta methods adapted to manifolds and based on rigid frames",
    BIT 39 (1999), Table 1.
    """

    name = "cg3"
    order = 3
    tableau = CROUCH_GROSSMAN3


class RKMK(LieStepper):
    r"""Runge--Kutta--Munthe-Kaas method built on an explicit Butcher tableau.

    ``Theta_i = h sum_j a_ij k_j``, ``Y_i = exp(Theta_i) y``,
    ``k_i = dexp^{-1}_{Theta_i}(A(t + c_i h, Y_i))`` with the series
    ``dexp^{-1}_Theta(H) = H - [Theta, H]/2 + [Theta, [Theta, H]]/12 - ...`` truncated after
    ``ad^q`` (``q >= order - 2`` keeps the tableau's order; measured: RKMK4 with ``q = 1`` drops
    to order ~3 and with ``q = 0`` to order 2 on a generic algebra-valued field), and
    ``y_1 = exp(h sum_i b_i k_i) y``. With embedded weights ``b_hat`` the error estimate is
    ``(Theta - Theta_hat) y`` in R^d (the leading term of ``y_1 - y_hat_1``, a tangent vector at y).
    """

    tableau: ButcherTableau
    dexpinv_terms: int = 2

    @_quiet
    def step(self, field, t, y, h, k1=None):
        tab = self.tableau
        A, b, c = tab.A_, tab.b_, tab.c_
        s = tab.stages
        frame, value = self._start(field, y, s + 1)
        fsal_tab = np.array_equal(A[-1, :], b) and c[-1] == 1.0
        ks, nfev, state_last = [], 0, None
        for i in range(s):
            Theta = None if i == 0 else frame.combine(A[i, :i], ks, h)
            state = frame.start if Theta is None else frame.exp(Theta, frame.start)
            if i == s - 1 and fsal_tab:
                state_last = state  # the last stage point is the new point
                if not self.adaptive:
                    break
            g, n = self._stage(frame, value, shifted_time(t, c[i], h), state, k1 if i == 0 else None)
            nfev += n
            ks.append(g.K if Theta is None else frame.dexpinv(Theta, g.K, self.dexpinv_terms))
        if state_last is None:
            Theta = frame.combine(b, ks, h)
            state_last = frame.start if Theta is None else frame.exp(Theta, frame.start)
        error = None
        if self.adaptive:
            dTheta = frame.combine(tab.b_err_, ks, h)
            error = frame.act_start(dTheta) if dTheta is not None else namespace(frame.y).zeros_like(frame.y)
        return StepResult(frame.point(state_last), error, nfev)


@register
class RKMK4(RKMK):
    r"""Runge--Kutta--Munthe-Kaas on the classical RK4 tableau, order 4 (four field evaluations).

    Coefficients: ``c = (0, 1/2, 1/2, 1)``, ``a21 = 1/2, a32 = 1/2, a43 = 1``,
    ``b = (1/6, 1/3, 1/3, 1/6)``; stage increments corrected by
    ``dexp^{-1}_Theta(H) ~ H - [Theta, H]/2 + [Theta, [Theta, H]]/12`` (the ad^3 term has
    Bernoulli coefficient B_3 = 0, so this truncation is exact to O(h^4) as order 4 needs).

    References
    ----------
    H. Munthe-Kaas, "High order Runge-Kutta methods on manifolds", Appl. Numer. Math. 29 (1999);
    Hairer, Lubich, Wanner, *Geometric Numerical Integration*, IV.8.2 (Algorithm 8.6).
    """

    name = "rkmk4"
    order = 4
    dexpinv_terms = 2
    tableau = RK4


@register
class RKMK45(RKMK):
    r"""Adaptive RKMK on the Cash--Karp 5(4) pair: order 5, embedded order-4 error estimate.

    Six stages, six field evaluations per attempted step (:data:`riemattn.solvers.tableaux.CASH_KARP`)::

        c    = (0, 1/5, 3/10, 3/5, 1, 7/8)
        b    = (37/378, 0, 250/621, 125/594, 0, 512/1771)                     (order 5, propagated)
        bhat = (2825/27648, 0, 18575/48384, 13525/55296, 277/14336, 1/4)     (order 4)

    dexp^{-1} truncated after ad^2 (the ad^3 coefficient B_3/3! is zero, so this is the
    truncation index q = 3 = p - 2, which keeps order p; Munthe-Kaas 1999, and the measured
    orders in tests/solvers/test_lie.py). The error estimate is ``(h sum_i (b_i - bhat_i) k_i) y``, a
    tangent vector at the start of the step: the manifold error of ``y_1`` to leading order.
    Save points between steps are computed by an extra step from the start of the step
    (:meth:`~riemattn.solvers.steppers.Stepper.interpolant`: full order, one step's cost per save point).

    Why Cash--Karp and not Dormand--Prince: the DP5(4) weights minimize the fifth-order error
    constants so strongly that on the attention problems the sixth-order terms dominate down to
    errors of ~1e-12 (measured orders 5.3 to 6, for projected DOPRI5 as well); Cash--Karp's
    order 5 is visible at every measurable error level.

    References
    ----------
    H. Munthe-Kaas, "High order Runge-Kutta methods on manifolds", Appl. Numer. Math. 29 (1999);
    J. R. Cash, A. H. Karp, "A variable order Runge-Kutta method for initial value problems with
    rapidly varying right-hand sides", ACM Trans. Math. Softw. 16 (1990), Table 2;
    B. Owren, A. Marthinsen, "Runge-Kutta methods adapted to manifolds and based on rigid frames",
    BIT 39 (1999) (embedded pairs in the Lie algebra).
    """

    name = "rkmk45"
    order = 5
    adaptive = True
    error_order = 4
    dexpinv_terms = 3
    tableau = CASH_KARP


class CommutatorFree(LieStepper):
    r"""Commutator-free Lie group method: each stage / the output is a product of exponentials
    ``exp(h sum_j alpha^{(k)}_j A_j)`` applied in order (the first listed acts first)."""

    c: tuple = (0,)
    stages: tuple = ((),)
    output: tuple = ((1,),)

    @classmethod
    def _coefficients(cls):
        key = "_parsed_coefficients"
        cached = cls.__dict__.get(key)
        if cached is None:
            cached = (
                [coefficient(x) for x in cls.c],
                [[[coefficient(x) for x in coef] for coef in exps] for exps in cls.stages],
                [[coefficient(x) for x in coef] for coef in cls.output],
            )
            setattr(cls, key, cached)
        return cached

    @classmethod
    def classical_tableau(cls) -> ButcherTableau:
        """The classical tableau the method reduces to on a flat space (exponentials are sums):
        ``a_ij`` is the sum of the coefficients of A_j over the exponentials of stage i."""
        c, stages, output = cls._coefficients()
        s = len(c)

        def total(exps):
            row = [0.0] * s
            for coef in exps:
                for j, x in enumerate(coef):
                    row[j] += x
            return tuple(row)

        return ButcherTableau(c=tuple(c), A=tuple(total(e) for e in stages), b=total(output),
                              order=cls.order)

    @_quiet
    def step(self, field, t, y, h, k1=None):
        c, stages, output = self._coefficients()
        s = len(c)
        frame, value = self._start(field, y, s + 1)
        gens, nfev = [], 0

        def apply(exps, state):
            for coef in exps:
                nz = [j for j, x in enumerate(coef) if x != 0.0]
                if len(nz) == 1:
                    state = frame.exp_single(gens[nz[0]], h * coef[nz[0]], state)
                elif nz:
                    state = frame.exp(frame.combine(coef, [g.K for g in gens], h), state)
            return state

        for i in range(s):
            g, n = self._stage(frame, value, shifted_time(t, c[i], h), apply(stages[i], frame.start),
                               k1 if i == 0 else None)
            gens.append(g)
            nfev += n
        return StepResult(frame.point(apply(output, frame.start)), None, nfev)


@register
class CommutatorFree4(CommutatorFree):
    r"""Commutator-free method of Celledoni--Marthinsen--Owren, order 4 (four field evaluations)::

        Y_1 = y
        Y_2 = exp(h A_1 / 2) y
        Y_3 = exp(h A_2 / 2) y
        Y_4 = exp(h (A_3 - A_1 / 2)) Y_2
        y_1 = exp(h (-A_1 + 2 A_2 + 2 A_3 + 3 A_4) / 12) exp(h (3 A_1 + 2 A_2 + 2 A_3 - A_4) / 12) y

    with ``A_i = A(t + c_i h, Y_i)``, ``c = (0, 1/2, 1/2, 1)``. No commutators; the two output
    exponentials are combinations of four generators (exact, in the 5-dimensional span). On a
    flat space it is the classical RK4 (:meth:`classical_tableau`).

    References
    ----------
    E. Celledoni, A. Marthinsen, B. Owren, "Commutator-free Lie group methods", Future Gener.
    Comput. Syst. 19 (2003) 341-352, the order-4 scheme of section 4.
    """

    name = "cf4"
    order = 4
    c = (0, "1/2", "1/2", 1)
    stages = ((), (("1/2",),), ((0, "1/2"),), (("1/2",), ("-1/2", 0, 1)))
    output = (("1/4", "1/6", "1/6", "-1/12"), ("-1/12", "1/6", "1/6", "1/4"))
