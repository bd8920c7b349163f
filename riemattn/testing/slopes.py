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

import numpy as np

from ..errors import InputTypeError, ValidationError
from ._fit import Fit, fit_slope
from .._validation import as_float_array, check_int
from ._common import ON_MANIFOLD, _check_manifold, _deviation, inner_rounding
from ._order import REFERENCE_FLOOR, TIGHT, _index, check_order, reference_solution  # noqa: F401

__all__ = ["Fit", "check_order", "check_retraction", "check_riemannian_gradient", "reference_solution"]
# defined in the private _order module; their public home is this one (docs, reprs, the API sweep)
check_order.__module__ = reference_solution.__module__ = __name__

EPS = np.finfo(float).eps
SQRT_EPS = float(np.sqrt(EPS))
#: A direction whose normal part |y^T W u| is above DIRECTION_NORMAL |u|_W (+ the rounding level of
#: y^T W u) is not tangent: a mistake (a random vector's is ~|u|_W / sqrt(d)). Below it, u is tangent
#: to within the rounding of the projection that made it, which is relative to the vector *before*
#: that projection, unseen here (one that removed a part 1e6 |u| leaves ~1e6 d eps kappa |u|): the
#: checks use its projection (I - y y^T W) u, which moves u by at most DIRECTION_NORMAL relative.
DIRECTION_NORMAL = 1e-6
#: check_riemannian_gradient fits the 5 smallest step lengths above the floor (1.5 decades of the
#: default 9 over 3), where the O(t^2) term leads. A cost whose third-order term is large against its
#: second-order one (the attention energy at beta = 0.01: f2 ~ beta^2, f3 ~ beta) bends the
#: errors of the larger steps down.
GRADIENT_WINDOW = 5


def _random_point_and_direction(manifold, base_point, tangent_vector, seed, name="tangent_vector", each=True):
    """(y, u): the given or a random point on the manifold and a tangent vector at it, nonzero at
    each point (``each``) or as a whole (one tangent vector of the product manifold)."""
    manifold = _check_manifold(manifold)
    seed = check_int(seed, "seed", 0)
    rng = np.random.default_rng(seed)
    d = manifold.ambient_dim
    y = manifold.retract(rng.standard_normal(d)) if base_point is None else as_float_array(base_point, "base_point")
    if y.shape[-1:] != (d,) or not np.all(np.isfinite(y)):
        raise ValidationError(f"base_point must be a finite array of shape (..., {d}), got shape {y.shape}.")
    flat = type(manifold).__name__ == "Euclidean"
    if not flat and (np.any(np.greater(*_deviation(manifold, y))) or not np.all(np.isfinite(_deviation(manifold, y)[0]))):
        raise ValidationError(f"base_point must lie on {manifold!r} (|y^T W y - 1| <= {ON_MANIFOLD:g} + its rounding), "
                              f"got |y^T W y - 1| up to {np.max(np.abs(manifold.inner(y, y) - 1.0)):.2e}.")
    if y.size == 0:
        raise ValidationError(f"base_point is empty (shape {y.shape}): there is nothing to check.")
    if tangent_vector is None:  # its own stream: a base point drawn from default_rng(seed) gets a tangent u
        u = manifold.tangent(y, np.random.default_rng((seed, 1)).standard_normal(y.shape))
    else:
        u = as_float_array(tangent_vector, name)
    if u.shape != y.shape or not np.all(np.isfinite(u)):
        raise ValidationError(f"base_point and {name} must be finite arrays of the same shape (..., {d}), got "
                              f"{y.shape} and {u.shape}.")
    size = manifold.norm(u)
    if not np.all(np.isfinite(size)):
        raise ValidationError(f"{name} is too large: |u|_W overflows (got entries up to {np.max(np.abs(u)):.3g}).")
    if each and not np.all(size > 0):
        raise ValidationError(f"{name} must be nonzero at every point (a zero direction checks nothing), got "
                              f"|u|_W = 0 at {np.argwhere(~(size > 0))[0].tolist()}.")
    if not np.sum(size) > 0:
        raise ValidationError(f"{name} must be nonzero (a zero direction checks nothing), got |u|_W = 0.")
    if not flat:
        # relative to |u|_W (y is W-unit): a direction of size 1e-20 is judged as one of size 1
        # (each=False: one tangent vector of the product manifold, judged against its whole size)
        whole = size if each else np.sqrt(np.sum(size * size))
        if np.any(np.abs(manifold.inner(y, u)) > DIRECTION_NORMAL * whole + inner_rounding(manifold, y, u)):
            raise ValidationError(f"{name} must be tangent at base_point (|y^T W u| <= {DIRECTION_NORMAL:g} |u|_W + its "
                                  f"rounding), got |y^T W u| up to {np.max(np.abs(manifold.inner(y, u))):.2e}.")
        u = manifold.tangent(y, u)
    return y, u


def _ts(ts, default):
    ts = np.logspace(*default, 9) if ts is None else as_float_array(ts, "ts")
    if ts.ndim != 1 or ts.size < 2 or not np.all(np.isfinite(ts)) or np.any(ts <= 0):
        raise ValidationError(f"ts must be at least two positive step lengths, got {ts!r}.")
    return ts


def check_retraction(manifold, *, base_point=None, tangent_vector=None, against="line", ts=None, seed=0):
    """Order of agreement of the manifold's retraction pi_W with a line or the exponential.

    Parameters
    ----------
    manifold : Sphere or Ellipsoid
    base_point, tangent_vector : array_like, shape (..., d), optional
        y on the manifold and u tangent at y, nonzero (default: random, from ``seed``); every point
        of a batch is checked, the error is the largest.
    against : {"line", "exp"}
        ``"line"``: e(t) = |pi_W(y + t u) - (y + t u)|_W, slope 2 for every retraction.
        ``"exp"``: e(t) = |pi_W(y + t u) - Exp_y(t u)|_W (the metric's exponential, ``manifold.metric.exp``),
        slope 3 for a second-order retraction (pi_W is one), 2 for a first-order one.
    ts : array_like, optional
        Step lengths (default ``logspace(-3, -1, 9)``).

    Returns
    -------
    Fit
        ``at_least``: e(t) = O(t^2) (``"line"``) and O(t^3) (``"exp"``); a larger slope passes
        :meth:`Fit.assert_slope`. Errors below the rounding floor 8 d eps sqrt(cond W) (1 + t) (the
        rounding of the d-term W-norms of vectors with entries up to 1/sqrt(lambda_min(W))) are
        left out of the fit. Against the line, every point of E_W is at W-distance >= sqrt(1 + t^2) - 1
        (~ t^2 / 2) from y + t u (|u|_W = 1): an error below that (minus the rounding floor and
        the points' distance from E_W) is no retraction onto E_W.

    Raises
    ------
    AssertionError
        If a retracted point is off the manifold (|R^T W R - 1| above 1e-10 + its rounding level:
        e.g. a ``retract`` that returns its input), or, against the line, an error is below
        sqrt(1 + t^2) - 1, closer to the line than any point of the manifold.
    ValidationError
        Against the line, if every t is so small that t^2 / 2 is within the floor (choose larger ts).
    """
    if type(manifold).__name__ == "Euclidean":  # (the manifold is checked by _random_point_and_direction)
        raise ValidationError("check_retraction: the Euclidean space's retraction is exact (no slope to measure).")
    if against not in ("line", "exp"):
        raise ValidationError(f"against must be 'line' or 'exp', got {against!r}.")
    y, u = _random_point_and_direction(manifold, base_point, tangent_vector, seed)
    u = u / manifold.norm(u)[..., None]
    ts = _ts(ts, (-3, -1))
    errors = []
    for t in ts:
        target = y + t * u if against == "line" else manifold.metric.exp(t * u, y)
        if not np.all(np.isfinite(manifold.norm(y + t * u))):
            raise ValidationError(f"ts must be step lengths whose points y + t u are finite in the W-norm, got t = {t:.3g} "
                                  "(|y + t u|_W overflows): choose smaller ts.")
        R = np.asarray(manifold.retract(y + t * u))
        if R.dtype.kind == "c" or R.shape != y.shape:
            raise AssertionError(f"retract(y + t u) at t = {t:.3g} returned {R.dtype} of shape {R.shape}: expected "
                                 f"real points of shape {y.shape}.")
        dev, tol = _deviation(manifold, R.astype(float))
        if not np.all(dev <= tol):  # NaN too
            k = _index(np.unravel_index(np.argmax(np.where(np.isfinite(dev), dev - tol, np.inf)), dev.shape))
            raise AssertionError(f"retraction off {manifold!r} at t = {t:.3g}, point {k}: |R^T W R - 1| = {dev[k]:.3e} "
                                 f"> {tol[k]:.1e} (a retraction maps onto the manifold).")
        errors.append(float(np.max(manifold.norm(R - target))))
    lam = np.linalg.eigvalsh(np.asarray(manifold.W, dtype=float))
    floor = 8 * manifold.ambient_dim * EPS * np.sqrt(lam[-1] / lam[0]) * (1.0 + ts)
    expected = 2.0 if against == "line" else 3.0
    fit = fit_slope(ts, errors, expected, f"retraction of {type(manifold).__name__} vs the "
                    f"{'tangent line' if against == 'line' else 'exponential'}", floor=floor, at_least=True)
    if against == "line":
        # every point R on E_W is at W-distance >= |y + tu|_W - 1 = sqrt(1 + t^2) - 1 from y + tu
        # (z / |z|_W is the closest): a lower bound on the error of any retraction, to the tokens'
        # distance from E_W (1e-10 |z|_W of y, R and y^T W u each) and the error's rounding
        lower = ts * ts / (np.sqrt(1.0 + ts * ts) + 1.0) - 4 * ON_MANIFOLD * (1.0 + ts) - floor
        if np.any(np.asarray(errors) < lower):
            k = int(np.argmax(lower - np.asarray(errors)))
            raise AssertionError(f"{fit.quantity}: the retraction stays closer to the tangent line than any point of "
                                 f"{manifold!r} can: {errors[k]:.3e} at t = {ts[k]:.3g} < sqrt(1 + t^2) - 1 "
                                 f"= {ts[k] ** 2 / (np.sqrt(1 + ts[k] ** 2) + 1):.3e} ({fit._table()}).")
        if fit.exact:
            raise ValidationError(f"{fit.quantity}: every t^2 / 2 (up to {np.max(ts) ** 2 / 2:.1e}) is within the "
                                  f"rounding floor ({np.max(floor):.1e}): nothing to measure: choose larger ts.")
    return fit


def _cost(cost, y, where):
    value = cost(y)
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise ValidationError(f"cost(y) must return a real number, got {type(value).__name__}.") from None
    if not np.isfinite(value):
        raise AssertionError(f"cost not finite at {where}: {value}.")
    return value


def _assert_gradient_tangent(manifold, y, g, G):
    """|y_i^T W g_i| <= ON_MANIFOLD |y_i|_2 ||W||_2 s_i + 32 d eps |y_i|_2 ||W||_2 s_i, else AssertionError.

    ``s_i = max(|g_i|_2, ||W^-1||_2 G)`` is the size of the vector w = W^-1 grad_E f *before* the
    projection that made g_i (|w| <= ||W^-1|| |grad_E f|); ``G`` estimates |grad_E f|, the cost's
    Euclidean gradient, by the measured change of the cost under four random perturbations of
    relative size sqrt(eps) (plus eps |f| / sqrt(eps) for the cost's rounding). The first term is the
    projection at a point off the manifold by up to ON_MANIFOLD (the base point's check), the
    second its rounding (:func:`~riemattn.testing.checks.inner_rounding`).
    """
    W = np.asarray(getattr(manifold, "W", np.eye(manifold.ambient_dim)), dtype=float)
    sv = np.linalg.svd(W, compute_uv=False)
    res = np.abs(manifold.inner(y, g))
    size = np.maximum(np.linalg.norm(g, axis=-1), G / sv[-1])
    tol = (ON_MANIFOLD + 32 * y.shape[-1] * EPS) * np.linalg.norm(y, axis=-1) * sv[0] * size
    if np.any(res > tol):
        k = np.unravel_index(np.argmax(res - tol), res.shape)
        raise AssertionError(f"gradient not tangent at token {_index(k)}: |y^T W g| = {res[k]:.3e} > {tol[k]:.3e} "
                             f"(1e-10 |y| |W| max(|g|, |W^-1| |grad_E f|), |grad_E f| ~ {G:.3e} from the cost).")


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
        A nonzero tangent direction u (default: random, from ``seed``, of unit length in the metric
        -- ``metric`` or the product W-metric -- so that t is the length of the step whatever the
        conditioning of W).
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
        Of e(t) = |cost(pi_W(y + t u)) - cost(y) - t <grad cost(y), u>|: O(t^2) when the gradient
        is right (slope 2, or more where the cost's second derivative along u vanishes: the fit is
        ``at_least``), slope 1 when it is not. Errors at or below the rounding floor are left out
        of the fit; the floor is 10 (n + eps (|f(y)| + |f(y_t)| + t |g|_W |u|_W)), with n the
        largest change of the cost under four random perturbations of relative size eps of y and
        four of the farthest point pi_W(y + t_max u) (the rounding of a retracted point; on a thin
        ellipsoid it grows along u) -- measured, so it covers costs that cancel. The slope is fitted
        to the 5 smallest t above the floor (the asymptotic range; larger t are named in
        ``fit.note``). When every error
        (or all but one) is at the floor, the first-order model is exact to rounding (a constant
        cost, or one linear along u): ``fit.exact`` and :meth:`Fit.assert_slope` passes.

    Raises
    ------
    AssertionError
        If the gradient is not finite or not tangent, naming the token, or the cost is not finite.
        Tangent means |y_i^T W g_i| <= 1e-10 |y_i|_2 ||W||_2 max(|g_i|_2, ||W^-1||_2 G): relative to
        the size of the vector *before* the projection that made g_i, W^-1 grad_E f, with G the
        size of the cost's Euclidean gradient measured by four random perturbations of y of relative
        size sqrt(eps) (G ~ change / (sqrt(eps) max|y|)); a gradient whose projection removed a large
        normal part is judged against it.
    ValidationError
        If ``base_point`` is not on the manifold or ``direction`` is zero or not tangent.
    """
    for name, fn in (("cost", cost), ("gradient", gradient), ("metric", metric)):
        if not callable(fn) and not (name == "metric" and fn is None):
            raise InputTypeError(f"{name} must be a callable, got {type(fn).__name__} {fn!r}.")
    y, u = _random_point_and_direction(manifold, base_point, direction, seed, name="direction", each=False)
    g = np.asarray(gradient(y), dtype=float)
    if g.shape != y.shape:
        raise ValidationError(f"gradient(y) must have the shape of y, {y.shape}, got {g.shape}.")
    if not np.all(np.isfinite(g)):
        raise AssertionError(f"gradient not finite at token {_index(np.argwhere(~np.isfinite(g))[0][:-1])}.")
    inner = (lambda a, b: float(np.sum(manifold.inner(a, b)))) if metric is None else (lambda a, b: float(metric(y, a, b)))
    if direction is None:  # a unit direction in the metric: t is then the length of the step
        u = u / np.sqrt(inner(u, u))
    f0 = _cost(cost, y, "base_point")
    # the rounding of the cost near y: its change under perturbations of y of relative size eps
    rng = np.random.default_rng(seed + 1)
    scale = np.max(np.abs(y), axis=-1, keepdims=True)
    noise = max(abs(_cost(cost, y + EPS * scale * rng.standard_normal(y.shape), "base_point") - f0) for _ in range(4))
    if type(manifold).__name__ != "Euclidean":
        # the size of the cost's Euclidean gradient (normal part included): its change under
        # perturbations of relative size sqrt(eps), where the first-order change is above the
        # cost's rounding unless |grad_E f| |y| < sqrt(eps) |f|
        reach = max(abs(_cost(cost, y + SQRT_EPS * scale * rng.standard_normal(y.shape), "base_point") - f0)
                    for _ in range(4))
        _assert_gradient_tangent(manifold, y, g, (reach + EPS * abs(f0)) / (SQRT_EPS * float(np.max(scale))))
    slope0 = inner(g, u)
    ts = _ts(ts, (-5, -2))
    values = np.array([_cost(cost, manifold.retract(y + t * u), f"t = {t:.3g}") for t in ts])
    errors = np.abs(values - f0 - ts * slope0)
    size = np.sqrt(abs(inner(g, g) * inner(u, u)))  # Cauchy-Schwarz: the size of t <g, u>
    # the rounding at the farthest point too: on a thin ellipsoid the retracted points' terms grow
    far = manifold.retract(y + ts[-1] * u)
    far_scale, f_far = np.max(np.abs(far), axis=-1, keepdims=True), values[-1]
    noise = max(noise, max(abs(_cost(cost, far + EPS * far_scale * rng.standard_normal(y.shape), "t") - f_far)
                           for _ in range(4)))
    floor = 10 * (noise + EPS * (abs(f0) + np.abs(values) + ts * size))
    return fit_slope(ts, errors, 2.0, "first-order model of the cost with the claimed gradient", floor=floor,
                     at_least=True, window=GRADIENT_WINDOW)
