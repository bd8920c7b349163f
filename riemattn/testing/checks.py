"""Property checkers for fields and token trajectories: assertions a user calls in their own tests.

Each raises ``AssertionError`` with a message that names the violated quantity and where it was
violated: the time, the trajectory (index into the leading batch axes) and the token. Bad
arguments raise :class:`~riemattn.errors.ValidationError` / :class:`~riemattn.errors.InputTypeError`.

* :func:`assert_on_manifold` -- ``|y_i^T W y_i - 1| <= atol`` + its rounding level, for every
  token (and saved time);
* :func:`assert_tangent` -- ``|y_i^T W F_i(t, y)|`` within its rounding level, relative to the
  field before its projection: the field is tangent;
* :func:`inner_rounding` -- the rounding level of ``a^T W b`` those tolerances are built on;
* :func:`assert_forward_invariant` -- along a numerical solution, every token stays in a region
  (an open hemisphere H+(v), or any region given as a margin function), optionally with a
  non-decreasing margin (the Lyapunov form of ICML Theorem 3.2).

References
----------
Rodriguez Abella, Silvestre, Tabuada, "Consensus is all you get", ICML 2025, eq. (3) (tangent
spaces of E_W), Theorem 3.2 and eq. (7) (forward invariance of H+(v), its Lyapunov function).
"""

from __future__ import annotations

import numpy as np

from ..analysis.hemispheres import common_hemisphere
from .._validation import check_int, as_float_array, check_finite, check_flag, check_nonnegative
from ..errors import InputTypeError, ValidationError
from ..solvers.core.integrate import integrate
from ..solvers.explicit.steppers import get_stepper
from ._common import (EPS, ON_MANIFOLD, _check_dim, _check_manifold, _is_flat, _manifold_of, _norm, _t_span,  # noqa: F401
                      _tokens, _tol, _W_norm2, _where, inner_rounding)
from ._tangent import assert_tangent

__all__ = ["assert_forward_invariant", "assert_on_manifold", "assert_tangent", "inner_rounding"]
# defined in the private _tangent and _common modules; their public home is this one
assert_tangent.__module__ = inner_rounding.__module__ = __name__


def assert_on_manifold(manifold, y, *, atol=1e-10, times=None):
    """Assert that every token lies on ``manifold``: ``|y_i^T W y_i - 1| <= atol + r_i``.

    ``r_i = 32 d eps |y_i|_2^2 ||W||_2`` is the rounding level of y_i^T W y_i (:func:`inner_rounding`;
    2e-14 d on the unit sphere, up to 7e-5 d at condition number 1e10, where the rounding of the
    retraction itself leaves a correct token that far off).

    Parameters
    ----------
    manifold : Sphere, Ellipsoid or Euclidean
    y : array_like, shape (..., l, d), or (m, ..., l, d) with ``times``
    atol : float, default 1e-10
        The accuracy asked of y^T W y = 1, on top of its rounding level.
    times : array_like, shape (m,), optional
        Saved times (e.g. ``sol.t`` with ``y = sol.y``): the first axis of ``y`` is then time.

    Raises
    ------
    AssertionError
        Naming the worst token (time, trajectory, token) and its deviation; also for NaN/inf.
    InputTypeError
        If ``y`` is not real (complex tokens are refused, as by :func:`riemattn.integrate`).
    """
    manifold = _check_manifold(manifold)
    y = _tokens(y)
    _check_dim(y, manifold)
    atol = _tol(atol, "atol", y.shape[:-1])
    if times is not None:
        try:
            times = np.asarray(times, dtype=float)
        except (TypeError, ValueError):
            raise InputTypeError(f"times must be a real array of shape (m,), got {type(times).__name__}.") from None
        if times.ndim != 1 or y.ndim < 3 or times.shape[0] != y.shape[0]:
            raise ValidationError(f"times must have shape (m,) with m = the first axis of y (shape (m, ..., l, d)), "
                                  f"got times of shape {times.shape} and y of shape {y.shape}.")
    batch_ndim = y.ndim - 2 - (times is not None)
    bad = ~np.isfinite(y).all(axis=-1)
    if bad.any():
        raise AssertionError(f"token not finite at {_where(np.argwhere(bad)[0], batch_ndim, times)}.")
    if _is_flat(manifold):
        return
    dev = np.abs(manifold.inner(y, y) - 1.0)
    if dev.size == 0:  # an empty batch: no token to be off the manifold
        return
    tol = atol + inner_rounding(manifold, y, y)
    worst = np.unravel_index(np.argmax(dev - tol), dev.shape)
    if dev[worst] > tol[worst]:
        raise AssertionError(
            f"token off {manifold!r} at {_where(worst, batch_ndim, times)}: |y^T W y - 1| = "
            f"{dev[worst]:.3e} > tolerance {tol[worst]:.1e} ({int(np.sum(dev > tol))} of {dev.size} tokens off)."
        )


def _hemisphere_region(y0, v):
    if v is None:
        v = common_hemisphere(y0)
        if v is None or np.isnan(np.asarray(v)).any():
            raise ValidationError("y0 has a configuration in no open hemisphere: give region or v.")
    v = check_finite(as_float_array(v, "v"), "v")
    if v.ndim < 1 or v.shape[-1] != y0.shape[-1]:
        raise ValidationError(f"v must have d = {y0.shape[-1]} components, got shape {v.shape}.")
    vb = v[..., None, :]  # (..., 1, d): one v, or one per trajectory

    def margin(t, y):
        return np.sum(y * vb, axis=-1)

    return margin, "v^T y_i", float(np.max(np.linalg.norm(v, axis=-1)))


def assert_forward_invariant(field, y0, *, region="hemisphere", v=None, stepper="rk4", t_span=(0.0, 1.0),
                             dt=0.05, rtol=1e-8, atol=None, nondecreasing=False, slack=None, max_steps=1_000_000):
    """Assert that tokens starting in a region stay in it along a numerical solution.

    Parameters
    ----------
    field : Field
    y0 : array_like, shape (..., l, d)
        Initial tokens on the field's manifold, inside the region.
    region : "hemisphere" or callable
        ``"hemisphere"``: the open hemisphere H+(v) = {y : v^T y > 0} (margin v^T y_i).
        A callable ``region(t, y)`` returns margins of shape ``y.shape[:-1]`` (per token) or
        ``y.shape[:-2]`` (per configuration); the region is {margin > 0}.
    v : array_like, shape (d,) or (..., d), optional
        The hemisphere's direction (one per trajectory allowed); default: the largest-margin v of
        each configuration of ``y0`` (:func:`riemattn.analysis.hemispheres.common_hemisphere`).
    stepper, t_span, dt, rtol, atol, max_steps :
        Passed to :func:`riemattn.integrate` (``dt`` for fixed-step steppers, ``rtol``/``atol`` for
        adaptive ones); every step is checked. ``atol`` defaults to 1e-10 Y0, Y0 the largest token
        norm |y0_i|_2 (1e-10 on the unit sphere): relative to the tokens' size, so that tokens of size
        1e-8 are solved, and their margins judged, as tightly as tokens of size 1.
    nondecreasing : bool, default False
        Also assert that each configuration's smallest margin never decreases by more than
        ``slack`` between steps (ICML Theorem 3.2's m(t) = min_i v^T y_i; eq. (7)).
    slack : float, optional
        The decrease of the smallest margin between two steps that is not a violation: the
        numerical solution's own error. Default, with L the margin's Lipschitz constant (|v|_2
        for a hemisphere; 1 for a callable region -- pass ``slack`` for one with another) and
        Y = max |y| over the solution: the rounding of a step and of the margin,
        ``64 (l + d) eps L Y K`` with K = max |y_i|_2^2 ||W||_2 (>= 1; up to cond(W): the
        retraction's relative rounding, :func:`inner_rounding`), and for an adaptive stepper also
        ``10 L sqrt(l d) (atol + rtol Y)`` (its error control keeps the RMS over the l d
        components of each step's error estimate, scaled by atol + rtol |y|, below 1, so one
        token's error is at most sqrt(l d) times that scale; 10 for an estimate that is
        asymptotic).

    Returns
    -------
    Trajectory
        The solution that was checked.

    Raises
    ------
    AssertionError
        At the first time a margin is <= 0 (or decreases), naming the time, trajectory, token,
        the margin and the integration settings.
    """
    manifold = _manifold_of(field)  # a riemattn field
    y0 = check_finite(_tokens(y0, "y0"), "y0")
    _check_dim(y0, manifold, "y0")
    t_span = _t_span(t_span)
    nondecreasing = check_flag(nondecreasing, "nondecreasing")
    if slack is not None:
        slack = check_nonnegative(slack, "slack")
    if isinstance(region, str):
        if region != "hemisphere":
            raise ValidationError(f"region must be 'hemisphere' or a callable region(t, y), got {region!r}.")
        margin_fn, label, lipschitz = _hemisphere_region(y0, v)
    elif callable(region):
        margin_fn, label, lipschitz = region, "region(t, y)", 1.0
    else:
        raise InputTypeError(f"region must be 'hemisphere' or a callable region(t, y), got {type(region).__name__}.")
    m0 = np.asarray(margin_fn(t_span[0], y0), dtype=float)
    if m0.shape not in (y0.shape[:-1], y0.shape[:-2]):
        raise ValidationError(
            f"{label} must return shape {y0.shape[:-1]} (per token) or {y0.shape[:-2]} (per "
            f"configuration), got {m0.shape}."
        )
    if not np.all(m0 > 0):
        raise ValidationError(f"y0 is not inside the region: {label} = {m0.min():.3e} <= 0 at "
                              f"{_where(np.unravel_index(np.argmin(m0), m0.shape), y0.ndim - 2)}.")
    if atol is None:  # relative to the tokens' size (an absolute 1e-10 is 1 % of tokens of size 1e-8)
        atol = 1e-10 * float(np.max(_norm(y0), initial=0.0)) or 1e-10
    adaptive = get_stepper(stepper).adaptive
    max_steps = check_int(max_steps, "max_steps", 1)
    if not adaptive and isinstance(dt, (int, float)) and dt > 0 and abs(t_span[1] - t_span[0]) / dt > max_steps:
        raise ValidationError(f"dt = {dt!r} takes {abs(t_span[1] - t_span[0]) / dt:.3g} steps over t_span {t_span}, "
                              f"more than max_steps = {max_steps}; a larger dt or max_steps.")
    sol = integrate(field, y0, t_span, stepper=stepper, dt=None if adaptive else dt, rtol=rtol, atol=atol,
                    max_steps=max_steps)
    how = f"{stepper} " + (f"rtol = {rtol:g}" if adaptive else f"dt = {dt:g}") + f" on [{t_span[0]:g}, {t_span[1]:g}]"
    if not sol.success:
        raise AssertionError(f"integration failed ({how}): {sol.message}")
    margins = np.stack([np.asarray(margin_fn(t, y), dtype=float) for t, y in zip(sol.t, sol.y)])
    batch_ndim = y0.ndim - 2
    bad = ~(margins > 0)  # NaN counts as outside
    if bad.any():
        k = np.argwhere(bad)[0]
        raise AssertionError(
            f"left the region ({how}) at {_where(k, batch_ndim, sol.t)}: {label} = {margins[tuple(k)]:.3e} "
            f"<= 0 (initially {m0[tuple(k[1:])]:.3e})."
        )
    if nondecreasing:
        per_token = margins.ndim == y0.ndim  # (m, ..., l)
        low = margins.min(axis=-1) if per_token else margins
        drop = low[:-1] - low[1:]
        if slack is None:
            ys = np.asarray(sol.y, dtype=float)
            Y = float(np.max(np.abs(ys), initial=0.0))
            l, d = y0.shape[-2:]
            # the retraction's rounding: relative 32 d eps |y|_2^2 ||W||_2 (inner_rounding), <= cond(W)
            kappa = max(1.0, float(np.max(np.sum(ys * ys, axis=-1), initial=0.0)) * _W_norm2(_manifold_of(field)))
            slack = (64.0 * (l + d) * EPS * Y * kappa
                     + (10.0 * np.sqrt(l * d) * (atol + rtol * Y) if adaptive else 0.0)) * lipschitz
        if np.any(drop > slack):
            k = np.argwhere(drop > slack)[0]
            k1 = (k[0] + 1,) + tuple(k[1:])
            token = f", token {int(np.argmin(margins[k1]))} is the lowest" if per_token else ""
            raise AssertionError(
                f"smallest {label} decreased ({how}) at {_where(k1, batch_ndim, sol.t)}{token}: "
                f"{float(low[tuple(k)])!r} -> {float(low[k1])!r} (decrease {drop[tuple(k)]:.3e} > slack {slack:.3e})."
            )
    return sol
