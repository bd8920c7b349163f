"""Log-log slope checks in the spirit of pymanopt's diagnostics: convergence order of a stepper,
order of agreement of a retraction, correctness of a Riemannian gradient.

Each check measures an error ``e(h)`` over a range of step sizes / lengths ``h``, fits
``log e = slope log h + intercept`` by least squares and returns a :class:`Fit`; the slope is the
number a user reads (``fit.slope``, ``fit.assert_slope()``, ``fit.plot()``).

* :func:`check_order` -- ``max |y_h(T) - y(T)|`` of fixed steps ``h`` against a tight SciPy
  reference: slope = the method's order p;
* :func:`check_retraction` -- ``|R_y(t u) - (y + t u)|_W``: slope 2 for every retraction
  (R_y(0) = y, dR_y(0) = id); against the exponential, ``|R_y(t u) - Exp_y(t u)|_W``: slope 3 for
  a second-order retraction such as pi_W (slope 2 for a first-order one);
* :func:`check_riemannian_gradient` -- ``|f(R_y(t u)) - f(y) - t <grad f(y), u>|``: slope 2 if
  the gradient is right (slope 1 if not).

References
----------
N. Boumal, *An introduction to optimization on smooth manifolds*, Cambridge University Press
(2023), sections 3.6 (retractions), 5.4 and 4.8 (second-order retractions, checking gradients).
J. Townsend, N. Koep, S. Weichwald, "Pymanopt", JMLR 17 (2016), ``tools/diagnostics.py``.
E. Hairer, S. P. Norsett, G. Wanner, *Solving Ordinary Differential Equations I*, section II.4
(the order of a method, measured as the slope of the global error).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.integrate import solve_ivp

from ..errors import ValidationError
from ..solvers.integrate import integrate
from ..solvers.steppers import get_stepper

__all__ = ["Fit", "check_order", "check_retraction", "check_riemannian_gradient", "reference_solution"]

#: SciPy's tightest DOP853 tolerances: the reference of :func:`check_order`.
TIGHT = {"method": "DOP853", "rtol": 2.5e-14, "atol": 1e-14}


@dataclass(frozen=True)
class Fit:
    """A least-squares line through ``(log h, log errors)``: ``errors ~ exp(intercept) h^slope``.

    Attributes
    ----------
    h, errors : ndarray, shape (k,)
        Step sizes (or step lengths t) and the measured errors.
    slope, intercept : float
    expected : float or None
        The slope theory predicts.
    quantity : str
        What was measured (used in messages and plots).
    """

    h: np.ndarray
    errors: np.ndarray
    slope: float
    intercept: float
    expected: float | None
    quantity: str

    @property
    def order(self) -> float:
        """The slope (the measured order, for :func:`check_order`)."""
        return self.slope

    def assert_slope(self, expected=None, tol=0.2):
        """Raise ``AssertionError`` (with the table of h and errors) unless |slope - expected| <= tol."""
        expected = self.expected if expected is None else expected
        if expected is None or not abs(self.slope - expected) <= tol:
            rows = ", ".join(f"{h:.3g}: {e:.3e}" for h, e in zip(self.h, self.errors))
            raise AssertionError(f"{self.quantity}: measured slope {self.slope:.3f}, expected {expected} "
                                 f"+- {tol} (h: error = {rows}).")
        return self

    def plot(self, ax=None):
        """The errors and the fitted line on log-log axes; returns the matplotlib Figure."""
        import matplotlib.pyplot as plt

        if ax is None:
            _, ax = plt.subplots(figsize=(4.5, 3.5), layout="constrained")
        ax.loglog(self.h, self.errors, "o", label="measured")
        ax.loglog(self.h, np.exp(self.intercept) * self.h ** self.slope, "-", label=f"slope {self.slope:.2f}")
        if self.expected is not None:
            ref = self.errors[-1] * (self.h / self.h[-1]) ** self.expected
            ax.loglog(self.h, ref, "k:", label=f"slope {self.expected:g} (theory)")
        ax.set_xlabel("h (step size or length)")
        ax.set_ylabel("error")
        ax.set_title(self.quantity, fontsize=9)
        ax.legend(fontsize=8)
        return ax.figure


def _fit(h, errors, expected, quantity):
    h, errors = np.asarray(h, dtype=float), np.asarray(errors, dtype=float)
    if not np.all(np.isfinite(errors)) or not np.all(errors > 0):
        raise ValidationError(f"{quantity}: errors must be finite and > 0 to fit a slope, got {errors}.")
    slope, intercept = np.polyfit(np.log(h), np.log(errors), 1)
    return Fit(h, errors, float(slope), float(intercept), expected, quantity)


def _steps(steps, name="steps"):
    arr = np.asarray(steps)
    if arr.ndim != 1 or arr.size < 2 or not np.issubdtype(arr.dtype, np.integer) or np.any(arr < 1):
        raise ValidationError(f"{name} must be at least two positive integers, got {steps!r}.")
    return arr


def reference_solution(field, y0, t_span):
    """y(t1) from SciPy's DOP853 at rtol 2.5e-14, atol 1e-14, independent of riemattn's steppers.

    On a Sphere or Ellipsoid the solved field is the lift G(t, x) = |x|_W F(t, x / |x|_W) (G is
    tangent to the level sets of |x|_W and its solutions project to those of F), whose final value
    is retracted; on the Euclidean space, F itself. Shape of ``y0``.
    """
    manifold = field.manifold
    y0 = np.asarray(y0, dtype=float)
    shape = y0.shape
    flat = type(manifold).__name__ == "Euclidean"

    def rhs(t, x):
        X = x.reshape(shape)
        if flat:
            return np.asarray(field(t, X), dtype=float).ravel()
        r = manifold.norm(X)[..., None]
        return (r * np.asarray(field(t, X / r), dtype=float)).ravel()

    sol = solve_ivp(rhs, tuple(t_span), y0.ravel(), **TIGHT)
    if not sol.success:
        raise ValidationError(f"the reference solve failed: {sol.message}")
    out = sol.y[:, -1].reshape(shape)
    return out if flat else manifold.retract(out)


def check_order(stepper, field, y0, *, t_span=(0.0, 1.0), steps=(8, 16, 32, 64), reference=None,
                expected=None):
    """Measure the order of ``stepper`` on ``dy/dt = field(t, y)`` from fixed steps.

    Parameters
    ----------
    stepper : str or Stepper
        A name in :data:`riemattn.STEPPERS` or a Stepper; adaptive ones are run with fixed steps.
    field : Field
    y0 : array_like, shape (..., l, d)
        Initial tokens on the field's manifold.
    t_span : (t0, t1)
    steps : sequence of int
        Numbers of equal steps over ``t_span`` (h = (t1 - t0) / n); choose them so the errors are
        in the asymptotic range and well above the reference's accuracy (~1e-13).
    reference : array_like, shape of y0, optional
        y(t1); default :func:`reference_solution`.
    expected : float, optional
        Default: the stepper's declared ``order``.

    Returns
    -------
    Fit
        ``fit.order`` is the slope of log(max |y_h(t1) - y(t1)|) against log h.

    Raises
    ------
    ValidationError
        If the smallest error is below 1e-11 (at the reference's accuracy: fewer steps needed).
    """
    st = get_stepper(stepper)
    ns = _steps(steps)
    y0 = np.asarray(y0, dtype=float)
    t0, t1 = float(t_span[0]), float(t_span[1])
    ref = reference_solution(field, y0, (t0, t1)) if reference is None else np.asarray(reference, dtype=float)
    errors = []
    for n in ns:
        h = (t1 - t0) / n
        if st.adaptive:
            y = y0
            for k in range(n):
                y = st.step(field, t0 + k * h, y, h).y
        else:
            y = integrate(field, y0, (t0, t1), stepper=st, dt=h, saveat=[t1]).y[-1]
        errors.append(float(np.max(np.abs(np.asarray(y) - ref))))
    if min(errors) < 1e-11:
        raise ValidationError(f"steps={tuple(int(n) for n in ns)} give errors down to {min(errors):.1e}, at the "
                              "reference's accuracy: use fewer steps.")
    return _fit((t1 - t0) / ns, errors, st.order if expected is None else expected,
                f"global error of {getattr(st, 'name', type(st).__name__)}")


def _random_point_and_direction(manifold, base_point, tangent_vector, seed):
    rng = np.random.default_rng(seed)
    d = manifold.ambient_dim
    y = manifold.retract(rng.standard_normal(d)) if base_point is None else np.asarray(base_point, dtype=float)
    if tangent_vector is None:
        u = manifold.tangent(y, rng.standard_normal(y.shape))
    else:
        u = np.asarray(tangent_vector, dtype=float)
    if y.shape[-1] != d or u.shape != y.shape:
        raise ValidationError(f"base_point and tangent_vector must have the same shape (..., {d}), got "
                              f"{y.shape} and {u.shape}.")
    return y, u


def _ts(ts, default):
    ts = np.logspace(*default, 9) if ts is None else np.asarray(ts, dtype=float)
    if ts.ndim != 1 or ts.size < 2 or np.any(ts <= 0):
        raise ValidationError(f"ts must be at least two positive step lengths, got {ts!r}.")
    return ts


def check_retraction(manifold, *, base_point=None, tangent_vector=None, against="line", ts=None, seed=0):
    """Order of agreement of the manifold's retraction pi_W with a line or the exponential.

    Parameters
    ----------
    manifold : Sphere or Ellipsoid
    base_point, tangent_vector : array_like, shape (..., d), optional
        y on the manifold and u tangent at y (default: random, from ``seed``); every point of a
        batch is checked, the error is the largest.
    against : {"line", "exp"}
        ``"line"``: e(t) = |pi_W(y + t u) - (y + t u)|_W, slope 2 for every retraction.
        ``"exp"``: e(t) = |pi_W(y + t u) - Exp_y(t u)|_W (the metric's exponential, ``manifold.metric.exp``),
        slope 3 for a second-order retraction (pi_W is one), 2 for a first-order one.
    ts : array_like, optional
        Step lengths (default ``logspace(-3, -1, 9)``).

    Returns
    -------
    Fit
    """
    if type(manifold).__name__ == "Euclidean":
        raise ValidationError("check_retraction: the Euclidean space's retraction is exact (no slope to measure).")
    if against not in ("line", "exp"):
        raise ValidationError(f"against must be 'line' or 'exp', got {against!r}.")
    y, u = _random_point_and_direction(manifold, base_point, tangent_vector, seed)
    u = u / manifold.norm(u)[..., None]
    ts = _ts(ts, (-3, -1))
    errors = []
    for t in ts:
        target = y + t * u if against == "line" else manifold.metric.exp(t * u, y)
        errors.append(float(np.max(manifold.norm(manifold.retract(y + t * u) - target))))
    expected = 2.0 if against == "line" else 3.0
    return _fit(ts, errors, expected, f"retraction of {type(manifold).__name__} vs the {'tangent line' if against == 'line' else 'exponential'}")


def check_riemannian_gradient(manifold, cost, gradient, base_point, *, direction=None, metric=None, ts=None, seed=0):
    """Check a Riemannian gradient by the slope of its first-order model's error.

    Parameters
    ----------
    manifold : Sphere, Ellipsoid or Euclidean
    cost : callable
        ``cost(y)`` -> float, for tokens ``y`` of shape (l, d) (or any shape of ``base_point``).
    gradient : callable
        ``gradient(y)`` -> the claimed Riemannian gradient, shape of y, for ``metric``.
    base_point : array_like, shape (l, d)
        Tokens on the manifold.
    direction : array_like, optional
        Tangent direction u (default: random, from ``seed``).
    metric : callable, optional
        ``metric(y, X, Y)`` -> float, the metric in which ``gradient`` is the gradient; default
        sum_i X_i^T W Y_i (the product metric of the manifold).
    ts : array_like, optional
        Step lengths (default ``logspace(-5, -2, 9)``: small enough that a wrong gradient's
        first-order error dominates, large enough that a right one's O(t^2) error is far above
        the rounding of the cost).

    Returns
    -------
    Fit
        Of e(t) = |cost(pi_W(y + t u)) - cost(y) - t <grad cost(y), u>|: slope 2 when the gradient
        is right, 1 when it is not.

    Raises
    ------
    AssertionError
        If the gradient is not tangent (|y_i^T W g_i| > 1e-10 (1 + |g|)), naming the token.
    """
    y, u = _random_point_and_direction(manifold, base_point, direction, seed)
    g = np.asarray(gradient(y), dtype=float)
    if g.shape != y.shape:
        raise ValidationError(f"gradient(y) must have the shape of y, {y.shape}, got {g.shape}.")
    res = np.abs(manifold.inner(y, g)) if type(manifold).__name__ != "Euclidean" else np.zeros(y.shape[:-1])
    if np.any(res > 1e-10 * (1 + np.max(np.abs(g)))):
        k = np.unravel_index(np.argmax(res), res.shape)
        raise AssertionError(f"gradient not tangent at token {k}: |y^T W g| = {res[k]:.3e}.")
    inner = (lambda a, b: float(np.sum(manifold.inner(a, b)))) if metric is None else (lambda a, b: float(metric(y, a, b)))
    f0, slope0 = float(cost(y)), inner(g, u)
    ts = _ts(ts, (-5, -2))
    errors = [abs(float(cost(manifold.retract(y + t * u))) - f0 - t * slope0) for t in ts]
    return _fit(ts, errors, 2.0, "first-order model of the cost with the claimed gradient")
