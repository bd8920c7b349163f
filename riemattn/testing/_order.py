"""``check_order`` and its reference solution (re-exported by :mod:`riemattn.testing.slopes`): the
order of a stepper, read off the global errors of fixed steps against a tight SciPy solve.

Every floor here is relative to the size of the solution, so that the check reads the same on
tokens of size 1e-8 and 1e8 (an ellipsoid W / s^2 with the tokens s y is the sphere's problem
scaled by s, and so are its errors).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from scipy.integrate import solve_ivp

from ..errors import InputTypeError, ValidationError
from ..solvers.core.integrate import integrate
from ..solvers.explicit.steppers import get_stepper
from .._validation import as_float_array, check_finite, check_positive
from ._common import EPS, _deviation, _norm, _t_span, _W_norm2
from ._fit import fit_slope

#: SciPy's tightest DOP853 tolerances: the reference of :func:`check_order`. ``atol`` is relative:
#: it is multiplied by the size of the solution (:func:`_size`), so that tokens of size 1e-8 are
#: solved as tightly as tokens of size 1 (an absolute 1e-14 is 1e-6 of them).
TIGHT = {"method": "DOP853", "rtol": 2.5e-14, "atol": 1e-14}
#: Errors below ``REFERENCE_FLOOR * Y`` (Y the size of the solution: the largest token norm
#: |y_i|_2 of y0 and of y(t1)) are at the reference's accuracy: the TIGHT solve's global error is
#: about 1e-13 Y on the test problems (rtol 2.5e-14 accumulated over its steps): a margin of 100.
REFERENCE_FLOOR = 1e-11
#: The largest spread of the local slopes (between consecutive step counts) taken as the
#: asymptotic range (:func:`_asymptotic`): then the fitted slope is within ~0.2 of the order.
SPREAD = 0.1


def _index(k):
    """An index as plain ints, (2,) not (np.int64(2),)."""
    return tuple(int(i) for i in k)


def _steps(steps, name="steps"):
    arr = np.asarray(steps)
    if arr.ndim != 1 or arr.size < 2 or not np.issubdtype(arr.dtype, np.integer) or np.any(arr < 1):
        raise ValidationError(f"{name} must be at least two positive integers, got {steps!r}.")
    return arr


def _size(*arrays):
    """Y: the largest token norm |y_i|_2 of the arrays (0 for tokens that are all zero)."""
    return max(float(np.max(_norm(a), initial=0.0)) for a in arrays)


def reference_solution(field, y0, t_span):
    """y(t1) from SciPy's DOP853 at rtol 2.5e-14, atol 1e-14 Y (Y the largest token norm of y0),
    independent of riemattn's steppers.

    On a Sphere or Ellipsoid the solved field is the lift G(t, x) = |x|_W F(t, x / |x|_W) (G is
    tangent to the level sets of |x|_W and its solutions project to those of F), whose final value
    is retracted; on the Euclidean space, F itself. Shape of ``y0``.
    """
    y0, t_span = _initial(field, y0), _t_span(t_span)
    manifold = field.manifold
    shape = y0.shape
    flat = type(manifold).__name__ == "Euclidean"

    def rhs(t, x):
        X = x.reshape(shape)
        if flat:
            return np.asarray(field(t, X), dtype=float).ravel()
        r = manifold.norm(X)[..., None]
        return (r * np.asarray(field(t, X / r), dtype=float)).ravel()

    # atol relative to the tokens' size; at tokens that are all zero (an equilibrium of the
    # Euclidean space, or a solution that starts there), relative to the first step's reach
    Y = _size(y0) or abs(t_span[1] - t_span[0]) * float(np.max(np.abs(rhs(t_span[0], y0.ravel())), initial=0.0))
    tight = dict(TIGHT, atol=TIGHT["atol"] * Y if Y > 0 else np.finfo(float).tiny)
    sol = solve_ivp(rhs, tuple(t_span), y0.ravel(), **tight)
    if not sol.success:
        raise ValidationError(f"the reference solve failed: {sol.message}")
    out = sol.y[:, -1].reshape(shape)
    return out if flat else manifold.retract(out)


def _initial(field, y0):
    """y0 as a finite float array of shape (..., l, d) on the field's manifold (ValidationError naming y0)."""
    manifold = getattr(field, "manifold", None)
    if manifold is None or not hasattr(manifold, "ambient_dim"):
        raise InputTypeError(f"field must be a riemattn Field (with a manifold), got {type(field).__name__}.")
    y0 = as_float_array(y0, "y0")  # complex tokens: InputTypeError, as integrate says
    d = manifold.ambient_dim
    if y0.ndim < 2 or y0.shape[-1] != d:
        raise ValidationError(f"y0 must have shape (..., l, {d}) for {manifold!r}, got {y0.shape}.")
    if y0.size == 0:
        raise ValidationError(f"y0 is empty (shape {y0.shape}): there is no error to measure.")
    if not np.all(np.isfinite(y0)):
        raise ValidationError(f"y0 must be finite, got a NaN or inf at token "
                              f"{_index(np.argwhere(~np.isfinite(y0))[0][:-1])}.")
    if type(manifold).__name__ != "Euclidean":
        dev, tol = _deviation(manifold, y0)
        if np.any(dev > tol) or not np.all(np.isfinite(dev)):  # 1e300 tokens: inf <= inf
            k = _index(np.unravel_index(np.argmax(dev - tol), dev.shape))
            raise ValidationError(f"y0 must lie on {manifold!r}: |y^T W y - 1| = {dev[k]:.2e} at token {k} "
                                  f"(> {tol[k]:.1e}).")
    return y0


def _floor(manifold, y0, ref, ns):
    """The floor of each error, shape (k,): the reference's accuracy and the rounding of n steps,
    both relative to Y (the largest token norm of y0 and y(t1)).

    * the reference: ``REFERENCE_FLOOR Y``;
    * the rounding of the stepper's own solution: each step rounds the new tokens at ~4 eps Y (the
      sum y + h sum_j b_j k_j and the stage combination) and, on a Sphere or Ellipsoid, retracts
      them, dividing by |y|_W with a relative rounding of 32 d eps kappa (kappa = max_i |y_i|_2^2
      ||W||_2, between 1 and cond(W): :func:`~riemattn.testing.checks.inner_rounding`); n steps
      add up to at most n (4 + 32 d kappa) eps Y (a flow that contracts errors makes it less).
    """
    Y = _size(y0, ref)
    flat = type(manifold).__name__ == "Euclidean"
    kappa = 0.0 if flat else max(1.0, float(np.max(np.sum(y0 * y0, axis=-1))) * _W_norm2(manifold))
    per_step = 4.0 + 32.0 * y0.shape[-1] * kappa
    return Y * (REFERENCE_FLOOR + ns * per_step * EPS)


def _asymptotic(hs, errors, floor, quantity):
    """ValidationError unless the errors above the floor shrink as h does: in the asymptotic range
    e(h) ~ C h^p decreases with h; an error that grows as h shrinks, or one at the floor at a larger
    h than one above it, means the error changed sign between them (its leading terms cancel there):
    no order can be read off those steps (a slope fitted across them is anything)."""
    order = np.argsort(hs)[::-1]  # from the largest h down
    e, above = errors[order], errors[order] > floor[order]
    for i in range(len(e) - 1):
        later = np.flatnonzero(above[i + 1:]) + i + 1
        if later.size and (not above[i] or np.any(e[later] >= e[i])):
            j = later[0] if not above[i] else later[np.argmax(e[later] >= e[i])]
            raise ValidationError(f"{quantity}: not in the asymptotic range: the error at h = {hs[order][j]:.3g} "
                                  f"({e[j]:.2e}) is not below the error at h = {hs[order][i]:.3g} ({e[i]:.2e}; floor "
                                  f"{floor[order][i]:.1e}): it changes sign between these steps; choose other steps "
                                  "(fewer or more of them).")
    # the local slopes between consecutive errors above the floor: p + c h in the asymptotic range
    # (e = C h^p (1 + a h + ...)), drifting by c h per halving of h, so the finest is still c h off p
    # and the fitted slope (about their mean) up to ~1.5 c h (two slopes) or ~2.3 c h (three): with
    # a spread above SPREAD = 0.1 the fit can be more than the +-0.2 it is judged by from p -- the
    # higher-order terms (or a cancellation of the leading one: one token on a circle, where the
    # error is one number) still lead, and the steps do not show the order
    h_up, e_up = hs[order][above], e[above]
    if h_up.size == 2:  # one local slope: nothing says the steps are already asymptotic
        raise ValidationError(f"{quantity}: only two errors are above the floor ({e_up[0]:.2e} at h = {h_up[0]:.3g}, "
                              f"{e_up[1]:.2e} at h = {h_up[1]:.3g}; floor {floor[order][above][-1]:.1e}): one local slope, "
                              "nothing to show the steps are in the asymptotic range: choose larger steps (fewer of "
                              "them) or add a step count.")
    local = np.log(e_up[:-1] / e_up[1:]) / np.log(h_up[:-1] / h_up[1:])
    if local.size > 1 and np.ptp(local) > SPREAD:
        raise ValidationError(f"{quantity}: not in the asymptotic range: the local slopes between consecutive "
                              f"steps are {', '.join(f'{x:.2f}' for x in local)} (h = "
                              f"{', '.join(f'{x:.3g}' for x in h_up)}; they differ by more than {SPREAD}); choose "
                              "other steps (fewer or more of them).")


def check_order(stepper, field, y0, *, t_span=(0.0, 1.0), steps=(8, 16, 32, 64), reference=None,
                expected=None):
    """Measure the order of ``stepper`` on ``dy/dt = field(t, y)`` from fixed steps.

    Parameters
    ----------
    stepper : str or Stepper
        A name in :data:`riemattn.STEPPERS` or a Stepper; adaptive ones are run with fixed steps.
    field : Field
    y0 : array_like, shape (..., l, d)
        Initial tokens on the field's manifold (real: complex tokens raise InputTypeError).
    t_span : (t0, t1)
    steps : sequence of int
        Numbers of equal steps over ``t_span`` (h = (t1 - t0) / n); choose them so the errors are
        in the asymptotic range and well above the reference's accuracy (~1e-13 relative).
    reference : array_like, shape of y0, optional
        y(t1); default :func:`reference_solution`.
    expected : float, optional
        Default: the stepper's declared ``order``.

    Returns
    -------
    Fit
        ``fit.order`` is the slope of log(max |y_h(t1) - y(t1)|) against log h, fitted to the
        errors above the floor, which is relative to the size of the solution, Y = the largest
        token norm |y_i|_2 of y0 and y(t1): ``Y (1e-11 + n (4 + 32 d kappa) eps)`` for n steps --
        the reference's accuracy (about 100 times the tight reference's error, 1e-13 Y) and the
        rounding of n steps (kappa = max |y_i|_2^2 ||W||_2, 1 on a sphere; 0 on the Euclidean
        space); smaller errors are left out, ``fit.note`` names them. Tokens of size 1e-8 and 1e8
        are judged alike. When every error is at the floor -- the stepper reproduces the solution
        at every step count, e.g. at an equilibrium or on a problem it solves exactly -- no order
        can be measured: ``fit.order`` is inf ("order >= anything"), ``fit.exact`` is True and
        :meth:`Fit.assert_slope` passes, with a note (to measure the order, use fewer steps).

    Raises
    ------
    ValidationError
        If only one or two errors are above the floor (no slope to measure, or a single local slope
        with nothing to show the asymptotic range: use fewer steps), an error
        is not finite, the errors are not yet in the asymptotic range (an error above the floor
        that does not decrease as h does, or an error at the floor at a larger h than one above
        it: the error changes sign between those steps; or local slopes between consecutive step
        counts that differ by more than 0.1), or ``t_span`` has length 0.
    """
    st = get_stepper(stepper)
    ns = _steps(steps)
    y0 = _initial(field, y0)
    t0, t1 = _t_span(t_span)
    _ = None if expected is None else check_positive(expected, "expected")  # kept as given (an int prints as such)
    if not t1 != t0:
        raise ValidationError(f"t_span must have t1 != t0 to measure an order, got {tuple(t_span)}.")
    ref = reference_solution(field, y0, (t0, t1)) if reference is None else check_finite(
        as_float_array(reference, "reference"), "reference")
    if ref.shape != y0.shape:
        raise ValidationError(f"reference must have the shape of y0, {y0.shape}, got {ref.shape}.")
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
    hs, floor = abs(t1 - t0) / ns, _floor(field.manifold, y0, ref, ns)
    quantity = f"global error of {getattr(st, 'name', type(st).__name__)}"
    _asymptotic(hs, np.asarray(errors), floor, quantity)
    fit = fit_slope(hs, errors, st.order if expected is None else expected, quantity, floor=floor,
                    floor_means="floor of the reference's accuracy and the steps' rounding")
    if fit.exact:
        fit = replace(fit, note=fit.note + " (An equilibrium, or a problem the stepper solves exactly; to "
                                           "measure the order, use fewer steps.)")
    return fit
