"""Property checkers for fields and token trajectories: assertions a user calls in their own tests.

Each raises ``AssertionError`` with a message that names the violated quantity and where it was
violated: the time, the trajectory (index into the leading batch axes) and the token. Bad
arguments raise :class:`~riemattn.errors.ValidationError` / :class:`~riemattn.errors.InputTypeError`.

* :func:`assert_on_manifold` -- ``|y_i^T W y_i - 1| <= atol`` for every token (and saved time);
* :func:`assert_tangent` -- ``|y_i^T W F_i(t, y)| <= atol_i + rtol |F_i|_W``: the field is tangent;
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
from ..errors import InputTypeError, ValidationError
from ..solvers.core.integrate import integrate
from ..solvers.explicit.steppers import get_stepper

__all__ = ["assert_forward_invariant", "assert_on_manifold", "assert_tangent"]


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


def _manifold_of(field):
    manifold = getattr(field, "manifold", None)
    if manifold is None or not hasattr(manifold, "tangent"):
        raise InputTypeError(f"field must be a riemattn Field (with a manifold), got {type(field).__name__}.")
    return manifold


def _is_flat(manifold) -> bool:
    return type(manifold).__name__ == "Euclidean"


def assert_on_manifold(manifold, y, *, atol=1e-10, times=None):
    """Assert that every token lies on ``manifold``: ``|y_i^T W y_i - 1| <= atol``.

    Parameters
    ----------
    manifold : Sphere, Ellipsoid or Euclidean
    y : array_like, shape (..., l, d), or (m, ..., l, d) with ``times``
    atol : float, default 1e-10
    times : array_like, shape (m,), optional
        Saved times (e.g. ``sol.t`` with ``y = sol.y``): the first axis of ``y`` is then time.

    Raises
    ------
    AssertionError
        Naming the worst token (time, trajectory, token) and its deviation; also for NaN/inf.
    """
    y = _tokens(y)
    if y.shape[-1] != manifold.ambient_dim:
        raise ValidationError(f"y must have d = {manifold.ambient_dim} components for {manifold!r}, got {y.shape}.")
    batch_ndim = y.ndim - 2 - (times is not None)
    bad = ~np.isfinite(y).all(axis=-1)
    if bad.any():
        raise AssertionError(f"token not finite at {_where(np.argwhere(bad)[0], batch_ndim, times)}.")
    if _is_flat(manifold):
        return
    dev = np.abs(manifold.inner(y, y) - 1.0)
    if dev.size == 0:  # an empty batch: no token to be off the manifold
        return
    worst = np.unravel_index(np.argmax(dev), dev.shape)
    if dev[worst] > atol:
        raise AssertionError(
            f"token off {manifold!r} at {_where(worst, batch_ndim, times)}: |y^T W y - 1| = "
            f"{dev[worst]:.3e} > atol = {atol:.1e} ({int(np.sum(dev > atol))} of {dev.size} tokens off)."
        )


def assert_tangent(field, y, *, t=0.0, atol=1e-12, rtol=1e-12):
    """Assert that ``field(t, y)`` is tangent to the field's manifold at every token.

    Checks ``|<y_i, F_i>_W| = |y_i^T W F_i| <= atol_i + rtol s_i`` (T_y E_W = {u : y^T W u = 0},
    ICML eq. 3), the shape of F and its finiteness. ``s_i = |F_i|_W``, or for a field with an
    ``update`` method (:class:`~riemattn.dynamics.attention.AttentionField`) the larger of that and
    the un-projected update's norm, whose rounding error the projection leaves behind.

    Parameters
    ----------
    field : Field
        Any riemattn field (``field(t, y)`` and ``field.manifold``).
    y : array_like, shape (..., l, d)
        Tokens on the manifold (e.g. from :func:`riemattn.testing.strategies.points`).
    t : float, default 0.0
    atol : float or array_like of shape (..., l)
        Absolute tolerance (per token if an array: e.g. scaled by the size of the un-projected
        update, whose rounding error the projection leaves behind).
    rtol : float, default 1e-12

    Raises
    ------
    AssertionError
        Naming the time, trajectory and token with the largest violation, ``y^T W F`` and ``|F|_W``.
    """
    manifold = _manifold_of(field)
    y = _tokens(y)
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
    size = manifold.norm(F)
    if callable(getattr(field, "update", None)):  # an attention field: the rounding of its projection
        size = np.maximum(size, manifold.norm(np.asarray(field.update(t, y), dtype=float)))
    tol = np.broadcast_to(np.asarray(atol, dtype=float), residual.shape) + rtol * size
    excess = residual - tol
    if excess.size == 0:  # an empty batch: no token to be off the tangent space
        return
    worst = np.unravel_index(np.argmax(excess), excess.shape)
    if excess[worst] > 0:
        raise AssertionError(
            f"field not tangent at t = {t!r}, {_where(worst, batch_ndim)}: |y^T W F| = "
            f"{residual[worst]:.3e} > tolerance {tol[worst]:.3e} (|F|_W = {manifold.norm(F)[worst]:.3e}; "
            f"{int(np.sum(excess > 0))} of {excess.size} tokens)."
        )


def _hemisphere_region(y0, v):
    if v is None:
        v = common_hemisphere(y0)
        if v is None or np.isnan(np.asarray(v)).any():
            raise ValidationError("y0 has a configuration in no open hemisphere: give region or v.")
    v = np.asarray(v, dtype=float)
    if v.shape[-1] != y0.shape[-1]:
        raise ValidationError(f"v must have d = {y0.shape[-1]} components, got shape {v.shape}.")
    vb = v[..., None, :]  # (..., 1, d): one v, or one per trajectory

    def margin(t, y):
        return np.sum(y * vb, axis=-1)

    return margin, "v^T y_i"


def assert_forward_invariant(field, y0, *, region="hemisphere", v=None, stepper="rk4", t_span=(0.0, 1.0),
                             dt=0.05, rtol=1e-8, atol=1e-10, nondecreasing=False, slack=1e-12):
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
    _manifold_of(field)  # a riemattn field
    y0 = _tokens(y0, "y0")
    if isinstance(region, str):
        if region != "hemisphere":
            raise ValidationError(f"region must be 'hemisphere' or a callable region(t, y), got {region!r}.")
        margin_fn, label = _hemisphere_region(y0, v)
    elif callable(region):
        margin_fn, label = region, "region(t, y)"
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
        if np.any(drop > slack):
            k = np.argwhere(drop > slack)[0]
            k1 = (k[0] + 1,) + tuple(k[1:])
            token = f", token {int(np.argmin(margins[k1]))} is the lowest" if per_token else ""
            raise AssertionError(
                f"smallest {label} decreased ({how}) at {_where(k1, batch_ndim, sol.t)}{token}: "
                f"{low[tuple(k)]:.6e} -> {low[k1]:.6e} (decrease {drop[tuple(k)]:.3e} > slack {slack:.1e})."
            )
    return sol
