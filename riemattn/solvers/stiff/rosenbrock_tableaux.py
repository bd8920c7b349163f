r"""Rosenbrock tableaux, validated on construction: order conditions, consistency, L-stability.

A Rosenbrock method for ``x' = G(t, x)`` with ``J = dG/dx(t0, x0)`` is given in the form of
Hairer & Wanner's code RODAS (no matrix-vector products with J; Solving ODEs II, (IV.7.25))::

    (I / (h gamma) - J) U_i = G(t0 + c_i h, x0 + sum_j a_ij U_j) + sum_j (C_ij / h) U_j + h d_i G_t
    x1 = x0 + sum_i m_i U_i,     embedded:  x0 + sum_i mhat_i U_i.

It is the classical form ``k_i = h G(x0 + sum_j alpha_ij k_j) + h J sum_j gamma_ij k_j`` with
``U = Gamma K``: ``Gamma^{-1} = diag(1/gamma) - C``, ``alpha = a Gamma``, ``b = m Gamma``.
:class:`RosenbrockTableau` recovers (alpha, Gamma, b) and checks, to 1e-10, the order
conditions of Hairer & Wanner, Table IV.7.1 (``beta = alpha + Gamma``, ``beta'_j = sum_{k<j}
beta_jk``, ``alpha_j = sum_k alpha_jk``)::

    order 1: sum b_j = 1
    order 2: sum b_j beta'_j = 1/2 - gamma
    order 3: sum b_j alpha_j^2 = 1/3;   sum b_j beta_jk beta'_k = 1/6 - gamma + gamma^2
    order 4: sum b_j alpha_j^3 = 1/4;   sum b_j alpha_j alpha_jk beta'_k = 1/8 - gamma/3
             sum b_j beta_jk alpha_k^2 = 1/12 - gamma/3
             sum b_j beta_jk beta_kl beta'_l = 1/24 - gamma/2 + 3 gamma^2/2 - gamma^3

for ``m`` up to ``order`` and ``mhat`` up to ``embedded_order``; that ``c_i = alpha_i`` and
``d_i = sum_j gamma_ij`` (non-autonomous consistency); and L-stability: the stability function
``R(z) = 1 + z b^T (I - z beta)^{-1} 1`` has ``|R(iy)| <= 1`` on the imaginary axis (sampled)
and ``R(-inf) = 0``.

References
----------
E. Hairer, G. Wanner, *Solving Ordinary Differential Equations II*, 2nd ed., Springer 1996,
section IV.7 (Table 7.1, the form (7.25) and the code RODAS, whose coefficients RODAS4 are).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..._validation import as_float_array, check_finite, check_int
from ...errors import InputTypeError, ValidationError

__all__ = ["RosenbrockTableau", "RODAS4", "RODAS4P", "rosenbrock_residuals", "stability_function"]


def _classical(a, C, gamma):
    s = a.shape[0]
    Gamma = np.linalg.inv(np.eye(s) / gamma - C)
    return a @ Gamma, Gamma


def _coefficients(alpha, Gamma, b):
    """alpha, Gamma (s, s) and b (s,) as finite float arrays, else a riemattn error naming the argument."""
    b = check_finite(as_float_array(b, "b"), "b")
    if b.ndim != 1 or b.size == 0:
        raise ValidationError(f"b must have shape (s,) with s >= 1 stages, got {b.shape}.")
    alpha = check_finite(as_float_array(alpha, "alpha"), "alpha")
    Gamma = check_finite(as_float_array(Gamma, "Gamma"), "Gamma")
    for name, m in (("alpha", alpha), ("Gamma", Gamma)):
        if m.shape != (b.size, b.size):
            raise ValidationError(f"{name} must have shape (s, s) = {(b.size, b.size)} (s from b), got {m.shape}.")
    return alpha, Gamma, b


def rosenbrock_residuals(alpha, Gamma, b, order: int) -> list[tuple[str, float]]:
    """(condition, residual) of the Rosenbrock order conditions up to ``order`` (at most 4)."""
    alpha, Gamma, b = _coefficients(alpha, Gamma, b)
    order = check_int(order, "order", 1)
    g = Gamma[0, 0]
    beta = np.tril(alpha + Gamma, -1)
    a_s = alpha.sum(axis=1)
    bp = beta.sum(axis=1)
    conds = [("b 1", b.sum(), 1.0)]
    if order >= 2:
        conds.append(("b beta'", b @ bp, 0.5 - g))
    if order >= 3:
        conds += [("b alpha^2", b @ a_s ** 2, 1 / 3), ("b beta beta'", b @ beta @ bp, 1 / 6 - g + g * g)]
    if order >= 4:
        conds += [("b alpha^3", b @ a_s ** 3, 0.25),
                  ("b alpha (alpha beta')", b @ (a_s * (alpha @ bp)), 1 / 8 - g / 3),
                  ("b beta alpha^2", b @ beta @ a_s ** 2, 1 / 12 - g / 3),
                  ("b beta beta beta'", b @ beta @ beta @ bp, 1 / 24 - g / 2 + 1.5 * g * g - g ** 3)]
    if order > 4:
        raise ValidationError(f"order conditions are implemented up to order 4, got order {order}.")
    return [(name, float(lhs - rhs)) for name, lhs, rhs in conds]


def stability_function(alpha, Gamma, b, z):
    """R(z) = 1 + z b^T (I - z beta)^{-1} 1 for the linear test equation x' = lambda x, z = h lambda."""
    alpha, Gamma, b = _coefficients(alpha, Gamma, b)
    beta = alpha + Gamma
    s = len(b)
    try:
        z = np.asarray(z, dtype=complex)
    except (TypeError, ValueError):
        raise InputTypeError(f"z must be a (complex) number or array, got {type(z).__name__} {z!r}.") from None
    if not np.all(np.isfinite(z)):
        raise ValidationError("z contains NaN or infinite values; expected finite numbers.")
    M = np.eye(s) - z[..., None, None] * beta
    return 1.0 + z * np.einsum("j,...j->...", b, np.linalg.solve(M, np.ones(z.shape + (s, 1)))[..., 0])


@dataclass(frozen=True)
class RosenbrockTableau:
    """A Rosenbrock method in RODAS form (see the module docstring), validated on construction.

    Parameters
    ----------
    gamma : float
        Diagonal of Gamma.
    a : (s, s) strictly lower triangular; C : (s, s) strictly lower triangular
    c, d : (s,) time nodes and time-derivative weights
    m, m_hat : (s,) weights of the solution (order ``order``) and of the embedded solution
        (``embedded_order``).
    H : (2, s)
        Dense output: ``x(theta) = (1 - theta) x0 + theta (x1 + (1 - theta) (k_a + theta k_b))``,
        ``k_a = sum_i H_0i U_i``, ``k_b = sum_i H_1i U_i``.
    """

    gamma: float
    a: np.ndarray
    C: np.ndarray
    c: np.ndarray
    d: np.ndarray
    m: np.ndarray
    m_hat: np.ndarray
    H: np.ndarray
    order: int
    embedded_order: int

    def __post_init__(self):
        for name in ("a", "C", "c", "d", "m", "m_hat", "H"):
            object.__setattr__(self, name, np.asarray(getattr(self, name), dtype=float))
        s = len(self.m)
        if self.a.shape != (s, s) or self.C.shape != (s, s) or np.any(np.triu(self.a) != 0) or np.any(np.triu(self.C) != 0):
            raise ValidationError("a and C must be strictly lower triangular (s, s) arrays.")
        alpha, Gamma = _classical(self.a, self.C, self.gamma)
        for weights, order, name in ((self.m, self.order, "m"), (self.m_hat, self.embedded_order, "m_hat")):
            bad = [(c, r) for c, r in rosenbrock_residuals(alpha, Gamma, weights @ Gamma, order) if abs(r) > 1e-10]
            if bad:
                raise ValidationError(f"weights {name} violate the order condition(s) {bad} (order {order}).")
        if not np.allclose(alpha.sum(axis=1), self.c, atol=1e-10):
            raise ValidationError(f"c = {self.c} differs from the row sums of alpha {alpha.sum(axis=1)}.")
        if not np.allclose(Gamma.sum(axis=1), self.d, atol=1e-10):
            raise ValidationError(f"d = {self.d} differs from the row sums of Gamma {Gamma.sum(axis=1)}.")
        b = self.m @ Gamma
        R = stability_function(alpha, Gamma, b, 1j * np.geomspace(1e-3, 1e6, 400))
        R_inf = stability_function(alpha, Gamma, b, -1e12)
        if np.max(np.abs(R)) > 1 + 1e-10 or abs(R_inf) > 1e-8:
            raise ValidationError(f"not L-stable: max |R(iy)| = {np.max(np.abs(R))}, |R(-inf)| = {abs(R_inf)}.")
        # the step's contractions: (a_i, C_i) per stage, (m, m - mhat); stiffly accurate
        # (m - mhat = e_s): the error estimate is the last stage's U_s itself
        object.__setattr__(self, "aC", np.stack([self.a, self.C], axis=1))
        object.__setattr__(self, "mm", np.stack([self.m, self.m - self.m_hat]))
        e_s = np.eye(s)[-1]
        object.__setattr__(self, "stiffly_accurate", bool(np.array_equal(self.m - self.m_hat, e_s)))
        object.__setattr__(self, "alpha", alpha)
        object.__setattr__(self, "Gamma", Gamma)
        object.__setattr__(self, "b", b)

    @property
    def stages(self) -> int:
        return len(self.m)


_A4 = np.zeros((6, 6))
_A4[1, 0] = 1.544
_A4[2, :2] = (0.9466785280815826, 0.2557011698983284)
_A4[3, :3] = (3.314825187068521, 2.896124015972201, 0.9986419139977817)
_A4[4, :4] = (1.221224509226641, 6.019134481288629, 12.53708332932087, -0.6878860361058950)
_A4[5, :5] = (*_A4[4, :4], 1.0)
_C4 = np.zeros((6, 6))
_C4[1, 0] = -5.6688
_C4[2, :2] = (-2.430093356833875, -0.2063599157091915)
_C4[3, :3] = (-0.1073529058151375, -9.594562251023355, -20.47028614809616)
_C4[4, :4] = (7.496443313967647, -10.24680431464352, -33.99990352819905, 11.70890893206160)
_C4[5, :5] = (8.083246795921522, -7.981132988064893, -31.52159432874371, 16.31930543123136, -6.058818238834054)

#: RODAS4 (Hairer & Wanner): 6 stages, order 4, embedded order 3, L-stable and stiffly accurate
#: (x1 is the last stage point plus U_6, and the error estimate is U_6), dense output of order 3.
RODAS4 = RosenbrockTableau(
    gamma=0.25, a=_A4, C=_C4,
    c=(0.0, 0.386, 0.21, 0.63, 1.0, 1.0),
    d=(0.25, -0.1043, 0.1035, -0.0362, 0.0, 0.0),
    m=np.append(_A4[5, :5], 1.0),
    m_hat=np.append(_A4[5, :5], 0.0),
    H=((10.12623508344586, -7.487995877610167, -34.80091861555747, -7.992771707568823, 1.025137723295662, 0.0),
       (-0.6762803392801253, 6.087714651680015, 16.43084320892478, 24.76722511418386, -6.594389125716872, 0.0)),
    order=4, embedded_order=3,
)

_A4P = np.zeros((6, 6))
_A4P[1, 0] = 3.0
_A4P[2, :2] = (1.831036793486759, 0.4955183967433795)
_A4P[3, :3] = (2.304376582692669, -0.05249275245743001, -1.176798761832782)
_A4P[4, :4] = (-7.170454962423024, -4.741636671481785, -16.31002631330971, -1.062004044111401)
_A4P[5, :5] = (*_A4P[4, :4], 1.0)
_C4P = np.zeros((6, 6))
_C4P[1, 0] = -12.0
_C4P[2, :2] = (-8.791795173947035, -2.207865586973518)
_C4P[3, :3] = (10.81793056857153, 6.780270611428266, 19.5348594464241)
_C4P[4, :4] = (34.19095006749676, 15.49671153725963, 54.7476087596413, 14.16005392148534)
_C4P[5, :5] = (34.62605830930532, 15.30084976114473, 56.99955578662667, 18.40807009793095, -5.714285714285717)

#: RODAS4P (Steinebach 1995): RODAS4's structure (6 stages, order 4(3), L-stable, stiffly
#: accurate, dense output of order 3) with additional conditions that avoid the order reduction
#: of RODAS4 on stiff problems whose solution follows a slowly moving equilibrium
#: (Prothero--Robinson type), which is what attention at large beta does once tokens gather.
RODAS4P = RosenbrockTableau(
    gamma=0.25, a=_A4P, C=_C4P,
    c=(0.0, 0.75, 0.21, 0.63, 1.0, 1.0),
    d=(0.25, -0.5, -0.023504, -0.0362, 0.0, 0.0),
    m=np.append(_A4P[5, :5], 1.0),
    m_hat=np.append(_A4P[5, :5], 0.0),
    H=((25.09876703708589, 11.62013104361867, 28.49148307714626, -5.664021568594133, 0.0, 0.0),
       (1.638054557396973, -0.7373619806678748, 8.47791821923899, 15.9925314877952, -1.882352941176471, 0.0)),
    order=4, embedded_order=3,
)
