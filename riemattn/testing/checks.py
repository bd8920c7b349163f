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
from .._validation import as_float_array, check_finite, check_flag, check_nonnegative, check_real, plain
from ..errors import InputTypeError, ValidationError
from ..solvers.core.integrate import integrate
from ..solvers.explicit.steppers import get_stepper

EPS = np.finfo(float).eps

__all__ = ["assert_forward_invariant", "assert_on_manifold", "assert_tangent", "inner_rounding"]


def _where(index, batch_ndim: int, times=None) -> str:
    """Words for an index into an array of shape ``([m,] *batch, l)``: time, trajectory, token.

    ``times`` (shape (m,)) says that the first axis is time.
    """
    index = tuple(int(i) for i in index)
    parts = []
    if times is not None:
        parts.append(f"t = {float(times[index[0]]):.6g} (save index {index[0]})")
        index = index[1:]
    if batch_ndim:
        parts.append(f"trajectory {index[:batch_ndim]}")
    if len(index) > batch_ndim:
        parts.append(f"token {index[batch_ndim]}")
    return ", ".join(parts) if parts else "the only configuration"


def _tokens(y, name="y"):
    try:
        y = np.asarray(y, dtype=float)
    except (TypeError, ValueError):
        raise InputTypeError(f"{name} must be a real array of shape (..., l, d), got {type(y).__name__}.") from None
    if y.ndim < 2 or y.shape[-1] < 1 or y.shape[-2] < 1:
        raise ValidationError(f"{name} must have shape (..., l, d) with l, d >= 1, got {y.shape}.")
    return y


def _tol(value, name, shape=()):
    """A finite tolerance >= 0 (a float, or an array broadcasting to ``shape``), checked up front."""
    arr = check_finite(as_float_array(value, name), name)
    if np.any(arr < 0):
        raise ValidationError(f"{name} must be >= 0, got {plain(arr)}.")
    try:
        return np.broadcast_to(arr, shape)
    except ValueError:
        raise ValidationError(f"{name} must be a number or broadcast to the tokens' shape {shape}, "
                              f"got shape {arr.shape}.") from None


def _t_span(t_span, name="t_span"):
    """(t0, t1): two finite real times (InputTypeError / ValidationError naming ``name``)."""
    arr = check_finite(as_float_array(t_span, name), name)
    if arr.shape != (2,):
        raise ValidationError(f"{name} must be two times (t0, t1), got shape {arr.shape}.")
    return float(arr[0]), float(arr[1])


def _check_manifold(manifold, name="manifold"):
    if not all(hasattr(manifold, a) for a in ("ambient_dim", "inner", "tangent")):
        what = repr(manifold) if isinstance(manifold, str) else type(manifold).__name__
        raise InputTypeError(f"{name} must be a riemattn Sphere, Ellipsoid or Euclidean (an instance, e.g. "
                             f"riemattn.Sphere(2)), got {what}.")
    return manifold


def _check_dim(y, manifold, name="y"):
    if y.shape[-1] != manifold.ambient_dim:
        raise ValidationError(f"{name} must have d = {manifold.ambient_dim} components for {manifold!r}, got "
                              f"shape {y.shape}.")


def _W_norm2(manifold) -> float:
    """The spectral norm of W (1 for a sphere or the Euclidean space)."""
    W = getattr(manifold, "W", None)
    return 1.0 if W is None else float(np.linalg.norm(np.asarray(W, dtype=float), 2))


def _norm(x, manifold=None):
    """|x|_2 (or |x|_W with ``manifold``) over the last axis without overflow: max|x_k| times the norm
    of x / max|x_k| (a field of size e^600 has |x|^2 = e^1200 = inf in doubles), shape (...)."""
    m = np.max(np.abs(x), axis=-1, initial=0.0)
    unit = x / np.where(m > 0, m, 1.0)[..., None]
    return m * (np.linalg.norm(unit, axis=-1) if manifold is None else manifold.norm(unit))


def inner_rounding(manifold, a, b):
    """The rounding level of ``a^T W b`` over the last axis, shape (...):
    ``32 d eps |a|_2 ||W||_2 |b|_2`` (the terms of the d-term inner product and of a projection
    (I - a a^T W) b that came before it are at most |a|_2 ||W||_2 |b|_2; 32 d eps covers their O(d)
    roundings, Higham, *Accuracy and Stability of Numerical Algorithms*, eq. 3.5). Up to
    cond(W) times |a|_W |b|_W: at condition number 1e10 it is ~1e-5 |a|_W |b|_W."""
    manifold = _check_manifold(manifold)
    a, b = check_finite(as_float_array(a, "a"), "a"), check_finite(as_float_array(b, "b"), "b")
    try:
        ok = a.ndim >= 1 and b.ndim >= 1 and a.shape[-1] == b.shape[-1] >= 1 and np.broadcast_shapes(a.shape, b.shape)
    except ValueError:
        ok = False
    if not ok:
        raise ValidationError(f"a and b must broadcast together, with the same d >= 1 components (last axis), "
                              f"got shapes {a.shape} and {b.shape}.")
    d = a.shape[-1]
    return 32 * d * EPS * _norm(a) * _W_norm2(manifold) * _norm(b)


def _manifold_of(field):
    manifold = getattr(field, "manifold", None)
    if manifold is None or not hasattr(manifold, "tangent"):
        raise InputTypeError(f"field must be a riemattn Field (with a manifold), got {type(field).__name__}.")
    return manifold


def _is_flat(manifold) -> bool:
    return type(manifold).__name__ == "Euclidean"


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


def _unprojected(field, t, y):
    """The field's value before its tangent projection, shape of y, or None if it has none.

    An :class:`~riemattn.dynamics.attention.AttentionField` projects ``update(t, y)``; a
    :class:`~riemattn.dynamics.fields.VectorField` with ``project=True`` projects ``func(t, y)``.
    """
    if callable(getattr(field, "update", None)):
        return np.asarray(field.update(t, y), dtype=float)
    if getattr(field, "project", False) and callable(getattr(field, "func", None)):
        return np.asarray(field.func(t, y), dtype=float)
    return None


def assert_tangent(field, y, *, t=0.0, atol=None, rtol=1e-12):
    """Assert that ``field(t, y)`` is tangent to the field's manifold at every token.

    Checks ``|<y_i, F_i>_W| = |y_i^T W F_i| <= atol_i + rtol |y_i|_W |v_i|_W + r_i`` (T_y E_W =
    {u : y^T W u = 0}, ICML eq. 3), the shape of F and its finiteness. ``v_i`` is the larger of
    F_i and the value *before* the projection F_i = v_i - y_i (y_i^T W v_i) that made F_i: the
    rtol term covers a token off the manifold by ~rtol (y^T W F = (1 - y^T W y) y^T W v for an
    exact projection), ``r_i = 32 d eps |y_i|_2 ||W||_2 |v_i|_2`` the rounding of the projection
    and of the check (:func:`inner_rounding`). The value before the projection is
    ``field.update(t, y)`` for an :class:`~riemattn.dynamics.attention.AttentionField`,
    ``field.func(t, y)`` for a :class:`~riemattn.dynamics.fields.VectorField` with
    ``project=True``, else F_i itself. A
    field whose projection removes a large normal part (|v| = e^9, |F| = 1e-12) is judged against
    |v|, not against the small |F| that is left; where v is not visible (a function projecting
    inside), its rounding is unknown and ``atol`` defaults to 1e-12 (unit-scale values), else 0.

    Parameters
    ----------
    field : Field
        Any riemattn field (``field(t, y)`` and ``field.manifold``).
    y : array_like, shape (..., l, d)
        Tokens on the manifold (e.g. from :func:`riemattn.testing.strategies.points`); d must be
        the manifold's ambient dimension.
    t : float, default 0.0
    atol : float or array_like of shape (..., l), optional
        Absolute tolerance (per token if an array). Default: 0 where the value before the
        projection is known (attention fields, ``VectorField(..., project=True)``), else 1e-12.
    rtol : float, default 1e-12
        Relative to ``|y_i|_W |v_i|_W``: tokens off the manifold by up to ~1e-12.

    Raises
    ------
    AssertionError
        Naming the time, trajectory and token with the largest violation, ``y^T W F`` and ``|F|_W``.
    ValidationError
        If ``y`` does not have the manifold's d components.
    """
    manifold = _manifold_of(field)
    y = _tokens(y)
    _check_dim(y, manifold)
    t = check_real(t, "t")
    atol, rtol = None if atol is None else _tol(atol, "atol", y.shape[:-1]), float(_tol(rtol, "rtol"))
    F = np.asarray(field(t, y), dtype=float)
    if F.shape != y.shape:
        raise AssertionError(f"field(t, y) at t = {t!r} has shape {F.shape}, expected the shape of y, {y.shape}.")
    batch_ndim = y.ndim - 2
    bad = ~np.isfinite(F).all(axis=-1)
    if bad.any():
        raise AssertionError(f"field value not finite at t = {t!r}, {_where(np.argwhere(bad)[0], batch_ndim)}.")
    if _is_flat(manifold):
        return
    residual = np.abs(manifold.inner(y, F))
    v = _unprojected(field, t, y)
    if atol is None:  # the unseen value before a projection inside the field's own function
        atol = 1e-12 if v is None or v.shape != y.shape else 0.0
    if v is None or v.shape != y.shape:
        v = F
    v = np.where(np.isfinite(v), v, 0.0)
    bigger = (_norm(v) > _norm(F))[..., None]
    v = np.where(bigger, v, F)
    scale = rtol * _norm(y, manifold) * _norm(v, manifold) + inner_rounding(manifold, y, v)
    tol = np.broadcast_to(np.asarray(atol, dtype=float), residual.shape) + scale
    excess = residual - tol
    if excess.size == 0:  # an empty batch: no token to be off the tangent space
        return
    worst = np.unravel_index(np.argmax(excess), excess.shape)
    if excess[worst] > 0:
        raise AssertionError(
            f"field not tangent at t = {t!r}, {_where(worst, batch_ndim)}: |y^T W F| = "
            f"{residual[worst]:.3e} > tolerance {tol[worst]:.3e} (|F|_W = {manifold.norm(F)[worst]:.3e}, "
            f"|v|_W before the projection {_norm(v, manifold)[worst]:.3e}; "
            f"{int(np.sum(excess > 0))} of {excess.size} tokens)."
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
                             dt=0.05, rtol=1e-8, atol=1e-10, nondecreasing=False, slack=None):
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
    stepper, t_span, dt, rtol, atol :
        Passed to :func:`riemattn.integrate` (``dt`` for fixed-step steppers, ``rtol``/``atol`` for
        adaptive ones); every step is checked.
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
    adaptive = get_stepper(stepper).adaptive
    sol = integrate(field, y0, t_span, stepper=stepper, dt=None if adaptive else dt, rtol=rtol, atol=atol)
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
