r"""Butcher tableaux: validation by rooted-tree order conditions, and the coefficient tables.

A :class:`ButcherTableau` checks on construction that ``A`` is strictly lower triangular, that
``c_i = sum_j a_ij``, and that its weights satisfy every order condition
``b . Phi(t) = 1 / gamma(t)`` for the rooted trees ``t`` with up to ``order`` nodes (and the
embedded weights up to ``embedded_order``). The tables below are the classical explicit methods
the steppers of :mod:`riemattn.solvers.steppers` and :mod:`riemattn.solvers.lie` are built on; a new projected
method is a new table. This module holds coefficient data and may be longer than the others.

References
----------
J. C. Butcher, *Numerical Methods for Ordinary Differential Equations*, 3rd ed., Wiley 2016,
chapter 3 (trees and order conditions). E. Hairer, S. P. Norsett, G. Wanner, *Solving Ordinary
Differential Equations I*, 2nd ed., Springer 1993, sections II.2-II.6 and II.10.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field as dc_field
from fractions import Fraction
from functools import lru_cache

import numpy as np

from ..._validation import as_float_array, check_finite, check_int
from ...errors import InputTypeError, ValidationError

__all__ = [
    "ButcherTableau",
    "order_residuals",
    "rooted_trees",
    "coefficient",
    "EULER",
    "HEUN",
    "RK4",
    "DOPRI5",
    "DOPRI5_DENSE",
    "DOP853",
    "DOP853_BHH",
    "DOP853_DENSE",
    "CASH_KARP",
    "CROUCH_GROSSMAN3",
]


def coefficient(x) -> float:
    """A coefficient given as a real number or as a fraction string ("-56/15")."""
    what = "x (a tableau coefficient) must be a real number or a fraction string"
    if isinstance(x, str):
        try:
            return float(Fraction(x))
        except (ValueError, ZeroDivisionError):
            raise InputTypeError(f"{what} such as '-56/15', got {x!r}.") from None
    if isinstance(x, (bool, np.bool_, complex, np.complexfloating)) or np.ndim(x) != 0:
        raise InputTypeError(f"{what}, got {x!r}.")
    try:
        value = float(x)
    except (TypeError, ValueError):
        raise InputTypeError(f"{what}, got {x!r}.") from None
    if not math.isfinite(value):
        raise ValidationError(f"x (a tableau coefficient) must be finite, got {value!r}.")
    return value


# ----------------------------------------------------------------------------------------------
# Rooted trees and order conditions
# ----------------------------------------------------------------------------------------------
#: The highest order whose trees are enumerated: 12 (7,813 trees of up to 12 nodes, ~1 s of order
#: conditions for a 12-stage tableau; the tree counts grow ~3x per order). The explicit pairs in use
#: reach order 8 (their checks order 9).
MAX_ORDER = 12


def rooted_trees(order: int) -> tuple:
    """All rooted trees with ``order`` nodes (an integer, 1 <= order <= ``MAX_ORDER`` = 12, else
    ValidationError); a tree is a sorted tuple of its children."""
    return _rooted_trees(check_int(order, "order", 1, maximum=MAX_ORDER))


@lru_cache(maxsize=None)
def _rooted_trees(order: int) -> tuple:
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
            for t in _rooted_trees(parts[0]):
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
    """For every tree of order <= ``order`` (0 <= order <= ``MAX_ORDER`` = 12): (tree, b . Phi(t) - 1/gamma(t))."""
    order = check_int(order, "order", 0, maximum=MAX_ORDER)
    A = check_finite(as_float_array(A, "A"), "A")
    b = check_finite(as_float_array(b, "b"), "b")
    if b.ndim != 1 or not b.size or A.shape != (b.size, b.size):
        raise ValidationError(f"A must be (s, s) and b (s,) with s >= 1, got A {A.shape} and b {b.shape}.")
    res = []
    for q in range(1, order + 1):
        for t in rooted_trees(q):
            res.append((t, float(b @ _weights(t, A) - 1.0 / _density(t))))
    return res


# ----------------------------------------------------------------------------------------------
# Butcher tableau
# ----------------------------------------------------------------------------------------------
def _coefficients(values, name: str, ndim: int) -> np.ndarray:
    """Tableau coefficients (numbers or fraction strings) as a finite float array of ``ndim`` axes."""
    try:
        if ndim == 1:
            arr = np.array([coefficient(x) for x in values])
        else:
            arr = np.array([[coefficient(x) for x in row] for row in values])
    except ValidationError as exc:  # a NaN/inf coefficient
        raise ValidationError(f"{name} contains NaN or infinite coefficients ({exc})") from None
    except (TypeError, ValueError, ZeroDivisionError) as exc:
        raise InputTypeError(
            f"{name} must be {'a sequence' if ndim == 1 else 'a sequence of rows'} of real numbers or "
            f"fraction strings, got {type(values).__name__}: {exc}"
        ) from None
    if arr.ndim != ndim:
        raise ValidationError(f"{name} must have {ndim} axis/axes, got shape {arr.shape}.")
    if not np.isfinite(arr).all():
        raise ValidationError(f"{name} contains NaN or infinite coefficients.")
    return arr


@dataclass(frozen=True)
class ButcherTableau:
    """An explicit Runge--Kutta tableau, validated on construction.

    Parameters
    ----------
    c : (s,) nodes, A : (s, s) strictly lower triangular, b : (s,) weights, order : int.
    b_hat : (s,), optional -- weights of an embedded method of order ``embedded_order``.
    ``order`` and ``embedded_order`` are at most ``MAX_ORDER`` = 12 (ValidationError otherwise,
    before any tree is built; an explicit method of order p has at least p stages).

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
        check_int(self.order, "order", 1, maximum=MAX_ORDER)
        if self.embedded_order is not None:
            check_int(self.embedded_order, "embedded_order", 1, maximum=MAX_ORDER)
        c = _coefficients(self.c, "c", 1)
        A = _coefficients(self.A, "A", 2)
        b = _coefficients(self.b, "b", 1)
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
            b_hat = _coefficients(self.b_hat, "b_hat", 1)
            if self.embedded_order is None:
                raise ValidationError("embedded_order is required with b_hat.")
            check_int(self.embedded_order, "embedded_order", 1)
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



# ----------------------------------------------------------------------------------------------
# The classical tables
# ----------------------------------------------------------------------------------------------
#: Explicit Euler, order 1.
EULER = ButcherTableau(c=(0,), A=((0,),), b=(1,), order=1)

#: Heun's method (explicit trapezoidal rule), order 2.
HEUN = ButcherTableau(c=(0, 1), A=((0, 0), (1, 0)), b=("1/2", "1/2"), order=2)

#: The classical Runge--Kutta method, order 4.
RK4 = ButcherTableau(
    c=(0, "1/2", "1/2", 1),
    A=((0, 0, 0, 0), ("1/2", 0, 0, 0), (0, "1/2", 0, 0), (0, 0, 1, 0)),
    b=("1/6", "1/3", "1/3", "1/6"),
    order=4,
)

#: Dormand--Prince 5(4) ("RK5(4)7M", Dormand & Prince 1980, Table 2): 7 stages, first same as
#: last; the 5th-order weights propagate, the embedded 4th-order weights estimate the error.
DOPRI5 = ButcherTableau(
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

#: Continuous extension of DOPRI5 of order 4 (Shampine 1986, the "optimal c_6" choice; the same
#: polynomials as SciPy's ``RK45.P``): ``y(t + theta h) = y + h sum_i b_i(theta) K_i`` with
#: ``b_i(theta) = sum_k DOPRI5_DENSE[i][k] theta^(k+1)``. At theta = 1 it reproduces ``b``.
DOPRI5_DENSE = tuple(
    tuple(coefficient(x) for x in row)
    for row in (
        (1, "-8048581381/2820520608", "8663915743/2820520608", "-12715105075/11282082432"),
        (0, 0, 0, 0),
        (0, "131558114200/32700410799", "-68118460800/10900136933", "87487479700/32700410799"),
        (0, "-1754552775/470086768", "14199869525/1410260304", "-10690763975/1880347072"),
        (0, "127303824393/49829197408", "-318862633887/49829197408", "701980252875/199316789632"),
        (0, "-282668133/205662961", "2019193451/616988883", "-1453857185/822651844"),
        (0, "40617522/29380423", "-110615467/29380423", "69997945/29380423"),
    )
)

#: Dormand--Prince 8(5,3), the method of Hairer's code DOP853 (Prince & Dormand 1981; Hairer,
#: Norsett & Wanner 1993, II.10): 12 stages, ``b`` of order 8, ``b_hat`` of order 5 (the code's
#: ``ER`` coefficients are ``b - b_hat``). Provenance: the decimal values were transcribed from
#: SciPy's ``scipy/integrate/_ivp/dop853_coefficients.py`` (BSD-3-Clause), itself a transcription
#: of Hairer's Fortran ``dop853.f``; they are checked here against all 200 order conditions of
#: order <= 8, not trusted.
DOP853 = ButcherTableau(
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

#: The 3rd-order weights ``bhh`` of DOP853's second error estimate (stages 1, 9 and 12 only).
DOP853_BHH = ButcherTableau(
    c=DOP853.c, A=DOP853.A, b=("31/127",) + (0,) * 7 + ("12675/17272", 0, 0, "3/136"), order=3
)


@dataclass(frozen=True)
class _Dop853Dense:
    """DOP853's continuous extension of order 7 (Hairer, Norsett & Wanner 1993, II.6 and the code
    ``dop853.f``, subroutine CONTD8; same provenance as :data:`DOP853`).

    It uses the 12 stages, ``K_13 = f(t + h, y_1)`` and three extra stages
    ``K_i = f(t + c_i h, y + h sum_j a_ij K_j)`` (i = 14, 15, 16; ``c_extra``, ``A_extra``), then
    with ``dy = y_1 - y``: ``F_1 = dy``, ``F_2 = h K_1 - dy``, ``F_3 = 2 dy - h (K_1 + K_13)``,
    ``F_(4+k) = h sum_j D[k][j] K_j`` (k = 0..3) and, with ``s = theta``,
    ``y(t + s h) = y + s (F_1 + (1-s) (F_2 + s (F_3 + (1-s) (F_4 + s (F_5 + (1-s) (F_6 + s F_7))))))``.
    """

    c_extra: tuple
    A_extra: tuple
    D: tuple


DOP853_DENSE = _Dop853Dense(
    c_extra=(0.1, 0.2, 0.7777777777777778),
    A_extra=(
        (0.056167502283047954, 0, 0, 0, 0, 0, 0.25350021021662483, -0.2462390374708025,
         -0.12419142326381637, 0.15329179827876568, 0.00820105229563469, 0.007567897660545699,
         -0.008298, 0, 0, 0),
        (0.03183464816350214, 0, 0, 0, 0, 0.028300909672366776, 0.053541988307438566,
         -0.05492374857139099, 0, 0, -0.00010834732869724932, 0.0003825710908356584,
         -0.00034046500868740456, 0.1413124436746325, 0, 0),
        (-0.42889630158379194, 0, 0, 0, 0, -4.697621415361164, 7.683421196062599, 4.06898981839711,
         0.3567271874552811, 0, 0, 0, -0.0013990241651590145, 2.9475147891527724, -9.15095847217987,
         0),
    ),
    D=(
        (-8.428938276109013, 0, 0, 0, 0, 0.5667149535193777, -3.0689499459498917, 2.38466765651207,
         2.117034582445028, -0.871391583777973, 2.2404374302607883, 0.6315787787694688,
         -0.08899033645133331, 18.148505520854727, -9.194632392478356, -4.436036387594894),
        (10.427508642579134, 0, 0, 0, 0, 242.28349177525817, 165.20045171727028, -374.5467547226902,
         -22.113666853125306, 7.733432668472264, -30.674084731089398, -9.332130526430229,
         15.697238121770845, -31.139403219565178, -9.35292435884448, 35.81684148639408),
        (19.985053242002433, 0, 0, 0, 0, -387.0373087493518, -189.17813819516758, 527.8081592054236,
         -11.57390253995963, 6.8812326946963, -1.0006050966910838, 0.7777137798053443,
         -2.778205752353508, -60.19669523126412, 84.32040550667716, 11.99229113618279),
        (-25.69393346270375, 0, 0, 0, 0, -154.18974869023643, -231.5293791760455, 357.6391179106141,
         93.40532418362432, -37.45832313645163, 104.0996495089623, 29.8402934266605,
         -43.53345659001114, 96.32455395918828, -39.17726167561544, -149.72683625798564),
    ),
)

#: Cash--Karp 5(4) (Cash & Karp 1990, Table 2): 6 stages, ``b`` of order 5, ``b_hat`` of order 4.
CASH_KARP = ButcherTableau(
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

#: The Crouch--Grossman method of order 3 (Crouch & Grossman 1993, section 5; Owren & Marthinsen
#: 1999, Table 1). On a flat space its products of exponentials are sums, so its coefficients
#: form a classical tableau; validating it here checks them against the classical conditions
#: of order 3 (Crouch--Grossman methods need further conditions on curved spaces).
CROUCH_GROSSMAN3 = ButcherTableau(
    c=(0, "3/4", "17/24"),
    A=((0, 0, 0), ("3/4", 0, 0), ("119/216", "17/108", 0)),
    b=("13/51", "-2/3", "24/17"),
    order=3,
)
