r"""Lie-group steppers: Lie--Euler, RKMK4, Crouch--Grossman 3, commutator-free 4, adaptive RKMK 5(4).

Why they apply (SPEC section 1)
-------------------------------
The group ``O(W) = {G : G^T W G = W}`` acts transitively on ``E_W = {y : y^T W y = 1}``. For a token
``y`` and the field's tangent value ``F = field(t, y)`` the matrix

.. math:: A(t, y) = F\,y^T W - y\,F^T W

lies in the Lie algebra ``o(W)`` and ``A y = F``: the ODE ``y' = F(t, y)`` is ``y' = A(t, y) y``,
and a Lie-group method advances ``y`` by group elements ``exp(Theta)``, which keep every token on
``E_W`` exactly (up to rounding), at every step size. For ``W = I`` this is ``SO(d)`` acting on the
sphere; for general ``W``, ``O(W) = W^{-1/2} O(d) W^{1/2}`` (conjugation by the isometry
``y -> W^{1/2} y`` onto the unit sphere) -- here we simply work with the W-inner product.

Exact low-rank exponentials
---------------------------
Every generator ``A(t_i, Y_i)`` of a step maps into ``span{Y_i, F_i}``; by induction every stage
point ``Y_i`` lies in ``V = span{y, F_1, ..., F_{i-1}}``. So one W-orthonormal basis of
``V`` (at most ``s + 1`` vectors per token, built incrementally by Gram--Schmidt,
:class:`~riemattn.lowrank.WOrthoBasis`) carries the whole step: generators become
``(s+1) x (s+1)`` skew matrices ``K_i = phi_i eta_i^T - eta_i phi_i^T`` (``phi_i``, ``eta_i`` the
coordinates of ``F_i`` and ``Y_i``), commutators and the dexp^{-1} series are computed with those
small matrices, exponentials act on coordinate vectors (closed form for one rank-2 generator,
:func:`~riemattn.lowrank.rank2_expm_action`; scaled Taylor series otherwise), and stage points are
mapped back to R^d with one ``O(d s)`` product. Cost per step beyond the field evaluations:
``O(l d s^2)`` on the sphere; on an ellipsoid add one product ``W F_i`` per stage (``O(l d^2)``,
less than a field evaluation, which forms ``y^T P_eta y`` for every head).

Fields that carry their generator
---------------------------------
A field whose Lie-algebra element is known (attribute ``lie_generator(t, y)`` returning W-skew
``(d, d)`` or ``(..., l, d, d)`` matrices; e.g. :class:`LinearField` for ``y' = A y``) is stepped
with that generator instead (dense exponentials, their action by a scaled Taylor series). This matters: a method that
only sees tangent values cannot tell ``y' = A y`` from ``y' = A(y0) y`` at the first step (both
have the same ``F(y0)``), so it cannot reproduce ``expm(t A) y0`` for every step size; with the
generator it does (every method here reduces to ``exp(h A)`` when all generators commute).

References
----------
H. Munthe-Kaas, "High order Runge-Kutta methods on manifolds", Appl. Numer. Math. 29 (1999).
P. E. Crouch, R. Grossman, "Numerical integration of ODEs on manifolds", J. Nonlinear Sci. 3 (1993).
E. Celledoni, A. Marthinsen, B. Owren, "Commutator-free Lie group methods", Future Gener. Comput.
Syst. 19 (2003). A. Iserles, H. Munthe-Kaas, S. P. Norsett, A. Zanna, "Lie-group methods",
Acta Numerica 9 (2000). E. Hairer, C. Lubich, G. Wanner, *Geometric Numerical Integration*, IV.8.
Rodriguez Abella, Silvestre, Tabuada, "Consensus is all you get", ICML 2025, eq. (3) and (6).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from ._validation import as_float_array, check_finite
from .errors import InputTypeError, ValidationError
from .fields import Field
from .manifolds import Sphere
from .lowrank import WOrthoBasis, expm_small_action, rank2_expm_action
from .steppers import ButcherTableau, ProjectedRK4, StepResult, Stepper, register

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
    "AlgebraField",
    "LinearField",
    "generator_matrix",
]


def _f(x) -> float:
    return float(Fraction(x)) if isinstance(x, str) else float(x)


def _coefs(cls, *names):
    """Coefficient attributes of a stepper class parsed to floats, once per class."""
    key = "_parsed_" + "_".join(names)
    cache = cls.__dict__.get(key)
    if cache is None:
        cache = []
        for n in names:
            val = getattr(cls, n)
            if n in ("A",):
                cache.append([[_f(x) for x in row] for row in val])
            elif n in ("stages", "output"):
                cache.append(
                    [[[_f(x) for x in coef] for coef in exps] for exps in val]
                    if n == "stages" else [[_f(x) for x in coef] for coef in val]
                )
            else:
                cache.append([_f(x) for x in val])
        setattr(cls, key, cache)
    return cache


def generator_matrix(F, y, W=None):
    """The dense Lie-algebra element ``A = F y^T W - y F^T W`` with ``A y = F`` (for tests, small d).

    Parameters
    ----------
    F, y : ndarray, shape (..., d)
        Tangent vector and base point on E_W.
    W : ndarray, shape (d, d), optional (None: identity)

    Returns
    -------
    ndarray, shape (..., d, d)
    """
    d = y.shape[-1]
    Wm = np.eye(d) if W is None else np.asarray(W, dtype=float)
    M = F[..., :, None] * y[..., None, :] - y[..., :, None] * F[..., None, :]
    return M @ Wm


# ----------------------------------------------------------------------------------------------
# Backends: where algebra elements and points live during one step
# ----------------------------------------------------------------------------------------------
class _Gen:
    """One stage generator: its small/dense matrix and, for the closed form, its two vectors."""

    __slots__ = ("K", "phi", "eta", "F")

    def __init__(self, K, phi, eta, F):
        self.K, self.phi, self.eta, self.F = K, phi, eta, F


class _LowRank:
    """Step-local W-orthonormal basis of span{y, F_1, ..., F_s}.

    A point ``Y`` of the step is held as its increment ``delta`` (coordinates, shape (..., m)):
    ``Y = y + Q^T delta``. Increments of exponentials are summed without the identity term, so
    rounding errors are relative to the motion in a step, not to |y| (no systematic drift of
    |y|_W even where the tokens barely move).
    """

    def __init__(self, field, y, m):
        self.field = field
        self.manifold = field.manifold
        self.y = y
        self.W = None if _is_identity(self.manifold) else self.manifold.W
        self.basis = WOrthoBasis(y.shape[:-1], m, y.shape[-1], self.W)
        self.eta0 = self.basis.add(y)
        self.start = np.zeros_like(self.eta0)
        self.nfev = 0

    def ambient(self, delta):
        if delta is self.start:
            return self.y
        return self.y + self.basis.to_ambient(delta)

    def generator(self, t, delta, F=None):
        Y = self.ambient(delta)
        if F is None:
            F = self.field(t, Y)
            self.nfev += 1
        else:  # a value handed over (FSAL): make sure it is the tangent field, not a drive
            F = F - self.manifold.inner(Y, F)[..., None] * Y
        phi = self.basis.add(F)
        eta = self.eta0 if delta is self.start else self.eta0 + delta
        K = phi[..., :, None] * eta[..., None, :] - eta[..., :, None] * phi[..., None, :]
        return _Gen(K, phi, eta, F)

    def exp(self, X, delta):
        eta = self.eta0 if delta is self.start else self.eta0 + delta
        return delta + expm_small_action(X, eta, increment=True)

    def exp_single(self, g, c, delta):
        eta = self.eta0 if delta is self.start else self.eta0 + delta
        return delta + rank2_expm_action(c * g.phi, g.eta, eta, increment=True)

    def act_start(self, X):
        """``X y`` as an ambient vector (leading term of ``exp(X) y - y``)."""
        return self.basis.to_ambient(np.einsum("...ij,...j->...i", X, self.eta0))


class _Dense:
    """For fields with ``lie_generator``: dense algebra elements, points are ambient tokens."""

    def __init__(self, field, y, m):
        self.field = field
        self.y = self.start = y
        self.nfev = 0

    @staticmethod
    def ambient(Y):
        return Y

    def generator(self, t, Y, F=None):
        X = np.asarray(self.field.lie_generator(t, Y), dtype=float)
        self.nfev += 1
        return _Gen(X, None, None, None)

    @staticmethod
    def exp(X, Y):
        return Y + expm_small_action(X, Y, increment=True)

    def exp_single(self, g, c, Y):
        return self.exp(c * g.K, Y)

    def act_start(self, X):
        return self.y @ X.T if X.ndim == 2 else (X @ self.y[..., None])[..., 0]


def _is_identity(manifold) -> bool:
    if isinstance(manifold, Sphere):
        return True
    return bool(getattr(manifold, "_is_identity", False))


def _backend(field, y, m):
    if hasattr(field, "lie_generator"):
        return _Dense(field, y, m)
    return _LowRank(field, y, m)


def _lincomb(coef, mats, h):
    out = None
    for c, X in zip(coef, mats):
        if c != 0.0:
            out = (h * c) * X if out is None else out + (h * c) * X
    return out


def _single(coef):
    nz = [j for j, c in enumerate(coef) if c != 0.0]
    return nz[0] if len(nz) == 1 else None


def _commutator(X, Y):
    return X @ Y - Y @ X


# Bernoulli numbers B_k / k! of dexp^{-1}_Omega(H) = sum_k B_k / k! ad_Omega^k(H) (B_1 = -1/2).
_DEXPINV = (1.0, -0.5, 1.0 / 12.0, 0.0, -1.0 / 720.0, 0.0, 1.0 / 30240.0)


def _dexpinv(Theta, H, q):
    while q > 0 and _DEXPINV[q] == 0.0:
        q -= 1
    out, ad = H, H
    for k in range(1, q + 1):
        ad = _commutator(Theta, ad)
        if _DEXPINV[k] != 0.0:
            out = out + _DEXPINV[k] * ad
    return out


# ----------------------------------------------------------------------------------------------
# Steppers
# ----------------------------------------------------------------------------------------------
class LieStepper(Stepper):
    """Base class of Lie-group steppers (they use the tangent field ``field(t, y)``, not ``drive``).

    ``step(field, t, y, h, k1=None)`` returns a :class:`~riemattn.steppers.StepResult`; ``y`` has
    shape ``(..., l, d)`` and stays on the field's manifold to rounding for every ``h``.
    """

    lie = True

    def _check(self, field, y):
        if getattr(field, "manifold", None) is None or not callable(field):
            raise InputTypeError(
                f"field must be a riemattn Field (callable with a .manifold), got {type(field).__name__}."
            )
        return np.asarray(y, dtype=float)


class CrouchGrossman(LieStepper):
    r"""Crouch--Grossman method: products of single exponentials (generic tableau ``c, A, b``).

    ``Y_i = exp(h a_{i,i-1} A_{i-1}) ... exp(h a_{i1} A_1) y``, ``A_j = A(t + c_j h, Y_j)``,
    ``y_1 = exp(h b_s A_s) ... exp(h b_1 A_1) y``. Each factor is one rank-2 generator and is
    applied in closed form (Rodrigues).
    """

    c: tuple = (0,)
    A: tuple = ((0,),)
    b: tuple = (1,)

    def step(self, field, t, y, h, k1=None):
        y = self._check(field, y)
        c, A, b = _coefs(type(self), "c", "A", "b")
        s = len(b)
        be = _backend(field, y, s + 1)
        gens = []
        for i in range(s):
            eta = be.start
            for j in range(i):
                if A[i][j] != 0.0:
                    eta = be.exp_single(gens[j], h * A[i][j], eta)
            gens.append(be.generator(t + c[i] * h, eta, k1 if i == 0 else None))
        eta = be.start
        for j in range(s):
            if b[j] != 0.0:
                eta = be.exp_single(gens[j], h * b[j], eta)
        return StepResult(be.ambient(eta), None, be.nfev, None)


@register
class LieEuler(CrouchGrossman):
    r"""Lie--Euler, order 1: ``y_1 = exp(h A(t, y)) y = cos(h|F|_W) y + sin(h|F|_W) F/|F|_W``.

    One field evaluation; the step follows the geodesic of E_W in the direction of ``F``
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

    References
    ----------
    P. E. Crouch, R. Grossman, J. Nonlinear Sci. 3 (1993), the third-order method of section 5;
    B. Owren, A. Marthinsen, "Runge-Kutta methods adapted to manifolds and based on rigid frames",
    BIT 39 (1999), Table 1.
    """

    name = "cg3"
    order = 3
    c = (0, "3/4", "17/24")
    A = ((0, 0, 0), ("3/4", 0, 0), ("119/216", "17/108", 0))
    b = ("13/51", "-2/3", "24/17")


class RKMK(LieStepper):
    r"""Runge--Kutta--Munthe-Kaas method built on an explicit Butcher tableau.

    ``Theta_i = h sum_j a_ij k_j``, ``Y_i = exp(Theta_i) y``,
    ``k_i = dexp^{-1}_{Theta_i}(A(t + c_i h, Y_i))`` with the series
    ``dexp^{-1}_Theta(H) = H - [Theta, H]/2 + [Theta, [Theta, H]]/12 - ...`` truncated after
    ``ad^q`` (``q >= order - 2`` keeps the tableau's order; measured: RKMK4 with ``q = 1`` drops
    to order ~3 and with ``q = 0`` to order 2 on a generic algebra-valued field), and
    ``y_1 = exp(h sum_i b_i k_i) y``. With embedded weights ``b_hat`` the error estimate is
    ``(Theta - Theta_hat) y`` mapped to R^d (the leading term of ``y_1 - y_hat_1``).
    """

    tableau: ButcherTableau
    dexpinv_terms: int = 2

    def step(self, field, t, y, h, k1=None):
        y = self._check(field, y)
        tab = self.tableau
        A, b, c = tab.A_, tab.b_, tab.c_
        s = tab.stages
        be = _backend(field, y, s + 1)
        fsal_tab = np.array_equal(A[-1, :], b) and c[-1] == 1.0
        gens, ks = [], []
        eta_last = None
        for i in range(s):
            if i == 0:
                eta, Theta = be.start, None
            else:
                Theta = _lincomb(A[i, :i], ks, h)
                eta = be.start if Theta is None else be.exp(Theta, be.start)
            if i == s - 1 and fsal_tab:
                eta_last = eta
                if not self.adaptive:
                    break
            g = be.generator(t + c[i] * h, eta, k1 if i == 0 else None)
            gens.append(g)
            ks.append(g.K if Theta is None else _dexpinv(Theta, g.K, self.dexpinv_terms))
        if eta_last is not None:
            eta1 = eta_last
        else:
            Theta = _lincomb(b, ks, h)
            eta1 = be.start if Theta is None else be.exp(Theta, be.start)
        y1 = be.ambient(eta1)
        error = k_next = None
        if self.adaptive:
            dTheta = _lincomb(tab.b_err_, ks, h)
            error = be.act_start(dTheta) if dTheta is not None else np.zeros_like(y)
            if fsal_tab and gens[-1].F is not None:
                k_next = gens[-1].F
        return StepResult(y1, error, be.nfev, k_next)


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
    tableau = ProjectedRK4.tableau  # the classical RK4 tableau, shared with the projected method


@register
class RKMK45(RKMK):
    r"""Adaptive RKMK on the Cash--Karp 5(4) pair: order 5, embedded order-4 error estimate.

    Six stages, six field evaluations per attempted step::

        c    = (0, 1/5, 3/10, 3/5, 1, 7/8)
        a21  = 1/5
        a3j  = 3/40, 9/40
        a4j  = 3/10, -9/10, 6/5
        a5j  = -11/54, 5/2, -70/27, 35/27
        a6j  = 1631/55296, 175/512, 575/13824, 44275/110592, 253/4096
        b    = (37/378, 0, 250/621, 125/594, 0, 512/1771)                     (order 5, propagated)
        bhat = (2825/27648, 0, 18575/48384, 13525/55296, 277/14336, 1/4)     (order 4)

    dexp^{-1} truncated after ad^2 (the ad^3 coefficient B_3/3! is zero, so this is the
    truncation index q = 3 = p - 2, which keeps order p; Munthe-Kaas 1999, and the measured
    orders in tests/test_lie.py). The error estimate is
    ``(h sum_i (b_i - bhat_i) k_i) y`` mapped to R^d (the leading term of ``y_1 - yhat_1``),
    used by :func:`riemattn.integrate`'s standard step-size control (``error_order = 4``).

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
    tableau = ButcherTableau(
        c=(0, "1/5", "3/10", "3/5", 1, "7/8"),
        A=(
            (0, 0, 0, 0, 0, 0),
            ("1/5", 0, 0, 0, 0, 0),
            ("3/40", "9/40", 0, 0, 0, 0),
            ("3/10", "-9/10", "6/5", 0, 0, 0),
            ("-11/54", "5/2", "-70/27", "35/27", 0, 0),
            ("1631/55296", "175/512", "575/13824", "44275/110592", "253/4096", 0),
        ),
        b=("37/378", 0, "250/621", "125/594", 0, "512/1771"),
        order=5,
        b_hat=("2825/27648", 0, "18575/48384", "13525/55296", "277/14336", "1/4"),
        embedded_order=4,
    )


class CommutatorFree(LieStepper):
    r"""Commutator-free Lie group method: each stage / the output is a product of exponentials
    ``exp(h sum_j alpha^{(k)}_j A_j)`` applied in order (the first listed acts first)."""

    c: tuple = (0,)
    stages: tuple = ((),)
    output: tuple = ((1,),)

    def step(self, field, t, y, h, k1=None):
        y = self._check(field, y)
        c, stages, output = _coefs(type(self), "c", "stages", "output")
        s = len(c)
        be = _backend(field, y, s + 1)
        gens = []

        def apply(exps, eta):
            for coef in exps:
                j = _single(coef)
                if j is not None:
                    eta = be.exp_single(gens[j], h * coef[j], eta)
                else:
                    X = _lincomb(coef, [g.K for g in gens], h)
                    if X is not None:
                        eta = be.exp(X, eta)
            return eta

        for i in range(s):
            eta = apply(stages[i], be.start)
            gens.append(be.generator(t + c[i] * h, eta, k1 if i == 0 else None))
        return StepResult(be.ambient(apply(output, be.start)), None, be.nfev, None)


@register
class CommutatorFree4(CommutatorFree):
    r"""Commutator-free method of Celledoni--Marthinsen--Owren, order 4 (four field evaluations)::

        Y_1 = y
        Y_2 = exp(h A_1 / 2) y
        Y_3 = exp(h A_2 / 2) y
        Y_4 = exp(h (A_3 - A_1 / 2)) Y_2
        y_1 = exp(h (-A_1 + 2 A_2 + 2 A_3 + 3 A_4) / 12) exp(h (3 A_1 + 2 A_2 + 2 A_3 - A_4) / 12) y

    with ``A_i = A(t + c_i h, Y_i)``, ``c = (0, 1/2, 1/2, 1)``. No commutators; the two output
    exponentials are combinations of four rank-2 generators (exact, in the 5-dimensional span).

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


# ----------------------------------------------------------------------------------------------
# Fields given by their Lie-algebra element
# ----------------------------------------------------------------------------------------------
class AlgebraField(Field):
    r"""A field ``F(t, y) = xi(t, y) y`` given by its Lie-algebra element ``xi(t, y) in o(W)``.

    Parameters
    ----------
    generator : callable
        ``generator(t, y)`` with ``y`` of shape ``(..., l, d)`` returning W-skew matrices of shape
        ``(d, d)`` (one for all tokens) or ``(..., l, d, d)`` (one per token).
    manifold : Sphere or Ellipsoid

    Notes
    -----
    Lie-group steppers use ``lie_generator`` directly (dense exponentials), so e.g. a constant
    ``xi = A`` is integrated exactly, ``y(t) = expm(t A) y0``, for every step size. Projected
    Runge--Kutta steppers use ``field(t, y)`` like any other field.
    """

    def __init__(self, generator, manifold):
        if not callable(generator):
            raise InputTypeError(f"generator must be callable as generator(t, y), got {type(generator).__name__}.")
        if not hasattr(manifold, "to_tangent") or not hasattr(manifold, "norm"):
            raise InputTypeError(f"manifold must be a riemattn Sphere or Ellipsoid, got {type(manifold).__name__}.")
        self._generator = generator
        self.manifold = manifold

    def lie_generator(self, t, y):
        """The algebra element(s) xi(t, y): shape (d, d) or (..., l, d, d)."""
        return self._generator(t, y)

    def __call__(self, t, y):
        y = np.asarray(y, dtype=float)
        X = np.asarray(self._generator(t, y), dtype=float)
        return y @ X.T if X.ndim == 2 else (X @ y[..., None])[..., 0]


class LinearField(AlgebraField):
    r"""The linear field ``y' = A y`` for a constant ``A`` in ``o(W)`` (``A^T W + W A = 0``).

    Parameters
    ----------
    A : array_like, shape (d, d)
        W-skew matrix (checked to 1e-10 relative to |A| |W|).
    manifold : Sphere or Ellipsoid
        ``Sphere(d - 1)`` or ``Ellipsoid(W)``.

    Notes
    -----
    Exact flow: ``y(t) = expm(t A) y0``; every Lie-group stepper reproduces it for every step size.
    """

    def __init__(self, A, manifold):
        A = check_finite(as_float_array(A, "A"), "A")
        d = manifold.dim + 1
        if A.shape != (d, d):
            raise ValidationError(f"A must have shape ({d}, {d}) to match {manifold!r}, got {A.shape}.")
        W = manifold.W
        res = float(np.max(np.abs(A.T @ W + W @ A)))
        scale = float(np.max(np.abs(A))) * float(np.max(np.abs(W))) + 1e-300
        if res > 1e-10 * scale:
            raise ValidationError(
                f"A must lie in o(W) (A^T W + W A = 0); max |A^T W + W A| = {res:.3g} (relative {res / scale:.3g})."
            )
        self.A = A
        super().__init__(lambda t, y: self.A, manifold)
