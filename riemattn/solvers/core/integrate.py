"""``integrate``: join a field, a stepper and a manifold; fixed or per-trajectory adaptive steps; saving."""

from __future__ import annotations

import math

import numpy as np

from . import _loops
from ..._backend import convert, default_device, device_of, is_torch, namespace, size, to_numpy
from ..._validation import (ON_MANIFOLD_ATOL, as_float_array, check_flag, check_int, check_points, check_positive, check_real,
                            token_atol)
from ...errors import InputTypeError, IntegrationError, ValidationError
from ._dense import StepLog
from ._recorder import check_saveat
from ._event_tracker import Tracker
from ._trajectory import PerTrajectory, Trajectory
from .events import _on_host, as_events
from ..explicit.steppers import get_stepper
from ..compiled._dispatch import dispatch, empty_engine

__all__ = ["integrate", "Trajectory", "PerTrajectory", "ON_MANIFOLD_ATOL"]

#: Tolerance on |y^T W y - 1| for initial tokens (else ``project=True``), as the field's token checks.
ON_MANIFOLD_ATOL = ON_MANIFOLD_ATOL


def _empty_result(y0, t, save_fn, name) -> Trajectory:
    """The Trajectory of an empty batch (a leading axis of length 0): nothing to integrate.

    With ``save_fn``, the observables keep their names, trailing shapes and dtypes (those of a
    non-empty batch): ``save_fn`` is called once, on the empty batch at ``t[0]``.
    """
    batch = y0.shape[:-2]
    zeros = np.zeros(batch, dtype=np.int64)
    pt = PerTrajectory(zeros, zeros.copy(), zeros.copy(), zeros.copy(), np.ones(batch, dtype=bool),
                       np.full(batch, np.nan))
    t = np.asarray(t, dtype=float)
    y, observables = None, {}
    if save_fn is None:
        xp = namespace(y0)
        y = xp.zeros((len(t),) + tuple(y0.shape), dtype=y0.dtype, device=device_of(y0))
    else:
        rec = _loops.Recorder(t, tuple(batch), save_fn, like=y0)
        rec.record_all(float(t[0]), y0)
        observables = rec.result()[1]  # name -> (len(t),) + batch + ..., no entries
    return Trajectory(t=t, y=y, observables=observables,
                      nfev=0, n_steps=0, n_rejected=0, success=True,
                      message="The batch is empty: no trajectory to integrate.", per_trajectory=pt,
                      stepper=name)


def integrate(
    field,
    y0,
    t_span,
    stepper="rk4",
    dt=None,
    rtol=1e-6,
    atol=1e-9,
    saveat=None,
    save_fn=None,
    progress=False,
    *,
    max_steps=1_000_000,
    raise_on_failure=False,
    project=False,
    first_step=None,
    events=None,
    event_tol=None,
    dense_output=False,
    engine="auto",
):
    """Integrate ``dy/dt = field(t, y)`` on the field's manifold from ``t0`` to ``t1``.

    Parameters
    ----------
    field : Field
        A :class:`~riemattn.dynamics.attention.AttentionField` or any :class:`~riemattn.dynamics.fields.Field`.
    y0 : array_like, shape (..., l, d)
        Initial tokens on ``field.manifold`` (|y^T W y - 1| <= 1e-8); leading axes are independent
        trajectories integrated together. Real numbers of any integer or float dtype (converted
        to float64); an empty batch (a leading axis of length 0) gives an empty result.
    t_span : (t0, t1)
        Start and end time (t1 >= t0); ``t1 == t0`` gives the initial state, no step, no call.
    stepper : str or Stepper
        A name in :data:`riemattn.STEPPERS` ("layer", "euler", "heun", "rk4", "dopri5", "dop853",
        Lie-group ones ...).
    dt : float, optional
        Step size of a fixed-step stepper (required for them). Each interval between save times is
        split into ``ceil(length / dt)`` equal steps, so steps never exceed ``dt`` and land exactly on
        ``t1`` and on every ``saveat`` time. For adaptive steppers, the initial step (optional).
    rtol, atol : float
        Tolerances of adaptive steppers, per trajectory: the RMS over the trajectory's entries of
        ``err / (atol + rtol * max(|y|, |y_new|))`` must be <= 1, ``err`` the local error estimate
        measured on the manifold. Each trajectory has its own step size (PI control).
    saveat : array_like, optional
        Times at which to save (increasing, within [t0, t1]). Fixed steps land on them; adaptive
        steps are not shortened, the values come from the stepper's dense output. Default: ``t0``
        and every step (fixed steps, or a single adaptive trajectory), ``t0`` and ``t1`` for a
        batch of adaptive trajectories (whose steps differ).
    save_fn : callable, optional
        ``save_fn(t, y)`` returning an array (or a dict of arrays) whose leading axes are the batch
        axes of ``y``: stored at the save times instead of the tokens (``Trajectory.observables``),
        e.g. ``lambda t, y: riemattn.analysis.diagnostics.misalignment(y)``. ``t`` is a float, or one
        save time per trajectory.
    progress : bool
        Show a tqdm progress bar.
    max_steps : int
        Maximum number of (accepted + rejected) steps per trajectory; beyond it the trajectory
        stops with status -1 and the result has ``success=False``.
    raise_on_failure : bool
        Raise :class:`~riemattn.errors.IntegrationError` instead of returning ``success=False``.
    project : bool
        Normalize ``y0`` onto the manifold (pi_W) instead of checking that it lies on it.
    first_step : float, optional
        Initial step of adaptive steppers (default: chosen per trajectory, Hairer's algorithm).
    events : Event, callable or list, optional
        Zero crossings of ``g(t, y)`` to detect, per trajectory, on accepted steps, located on the
        stepper's dense output (:class:`riemattn.solvers.events.Event`; a plain callable may carry
        SciPy's ``terminal`` and ``direction`` attributes). Results in ``Trajectory.events``;
        a terminal event stops its trajectory (status 2). Semantics: docs/events.md.
    event_tol : float, optional
        Location tolerance in t of the crossings (default ``1e-10 * max(1, |t0|, |t1|)``).
    dense_output : bool
        Record every accepted step so that ``Trajectory.interpolate(t)`` gives the solution at any
        time of the solved interval (a fresh step from the step's start; one token array per step).
    engine : {"auto", "numpy", "compiled", "cuda"}
        Which execution runs the call: docs/performance.md, "Which engine when" (``Trajectory.engine``).
        ``"cuda"``: one GPU thread per trajectory (numba-cuda; docs/performance.md, "GPU ensembles"),
        in float32 for a float32 NumPy ``y0`` or tensor, float64 otherwise; never chosen by ``"auto"``.

    Returns
    -------
    Trajectory
        ``t`` (m,), ``y`` (m, ..., l, d), ``observables``, ``nfev``, ``n_steps``, ``success``,
        ``message``, ``per_trajectory``, ``to_xarray()``.
    """
    device = default_device()
    if device is not None and not is_torch(y0):  # riemattn.use_device: NumPy in, computed on device
        import torch

        y0 = convert(as_float_array(y0, "y0"), torch.empty(0, dtype=torch.float64, device=device))
        host_fn = save_fn
        if save_fn is not None and callable(save_fn):
            def save_fn(t, y):  # the caller's save_fn sees NumPy arrays, as without the device
                return host_fn(to_numpy(t) if is_torch(t) else t, to_numpy(y))
        events = [_on_host(e) for e in as_events(events)] or None
        return integrate(field, y0, t_span, stepper, dt, rtol, atol, saveat, save_fn, progress,
                         max_steps=max_steps, raise_on_failure=raise_on_failure, project=project, first_step=first_step,
                         events=events, event_tol=event_tol, dense_output=dense_output, engine=engine).to_numpy()
    step = get_stepper(stepper)
    manifold = getattr(field, "manifold", None)
    if manifold is None or not callable(field):
        raise InputTypeError(
            f"field must be a riemattn Field (callable with a .manifold), got {type(field).__name__}."
        )
    step.check_field(field)
    y0_given = y0  # its dtype as given sets the on-manifold tolerance (_validation.manifold_atol)
    precision = "float32" if str(getattr(y0, "dtype", "")).endswith("float32") else None  # engine="cuda"
    y0 = check_points(y0, "y0", manifold, on_manifold=False)
    unchecked, given = getattr(field, "_unchecked", None), field
    if callable(unchecked):  # y0 is checked here once; the steps skip the field's token checks
        field = unchecked()  # (the stepper's own call of _unchecked then returns it at once)
    sinkhorn = getattr(field, "sinkhorn_error", None) if getattr(field, "normalization", None) == "sinkhorn" else None
    if sinkhorn is not None:  # Sinkhorn attention: the worst error of this solve
        field.sinkhorn_error = 0.0
    calls0 = getattr(field, "n_calls", None)  # a VectorField counts the calls of the user's func
    if check_flag(project, "project"):
        y0 = manifold.projection(y0)
    else:
        dev, limit = manifold.deviation(y0), token_atol(y0_given, ON_MANIFOLD_ATOL, manifold)
        if dev > limit:
            raise ValidationError(
                f"y0 is not on {manifold!r}: max |y^T W y - 1| = {dev:.3g} > {limit:g}. "
                "Normalize it (manifold.projection) or pass project=True."
            )
    try:
        pair = not isinstance(t_span, (str, bytes)) and len(t_span) == 2
    except TypeError:  # no len(): a number, None, a 0-d array
        pair = False
    if not pair:
        raise InputTypeError(f"t_span must be a pair (t0, t1) of real numbers, got {t_span!r}.")
    t0, t1 = (check_real(v, "t_span") for v in t_span)
    if not (math.isfinite(t0) and math.isfinite(t1)):
        raise ValidationError(f"t_span must be finite, got {(t0, t1)}.")
    if t1 < t0 and step.forward_only:
        raise ValidationError(
            f"t_span = ({t0}, {t1}) runs backward (t1 < t0), but stepper {step.name!r} integrates forward "
            "only; pass t0 <= t1."
        )
    if step.adaptive and getattr(field, "discontinuous", False):
        raise ValidationError(
            f"stepper {step.name!r} is adaptive, but the field is discontinuous (hardmax attention: the "
            "maximisers switch); its error control assumes a smooth field. Use a fixed-step stepper "
            "(dt=...) or 'layer'."
        )
    # checked for every stepper (a fixed-step one ignores them, but a NaN there is a mistake)
    rtol = check_positive(rtol, "rtol")
    atol = check_positive(atol, "atol")
    if first_step is not None:
        first_step = check_positive(first_step, "first_step")
    progress, raise_on_failure = check_flag(progress, "progress"), check_flag(raise_on_failure, "raise_on_failure")
    dense_output = check_flag(dense_output, "dense_output")
    if step.adaptive:
        if first_step is None and dt is not None:
            first_step = check_positive(dt, "dt")
    else:
        if dt is None:
            raise ValidationError(f"dt is required for the fixed-step stepper {step.name!r}.")
        dt = check_positive(dt, "dt")
    max_steps = check_int(max_steps, "max_steps", 1)
    if save_fn is not None and not callable(save_fn):
        raise InputTypeError(f"save_fn must be callable as save_fn(t, y), got {type(save_fn).__name__}.")
    save = check_saveat(saveat, t0, t1)
    events = as_events(events)
    if event_tol is None:
        event_tol = 1e-10 * max(1.0, abs(t0), abs(t1))
    event_tol = check_positive(event_tol, "event_tol")
    batch = y0.shape[:-2]
    if save is None and step.adaptive and batch:
        save = np.array([t0, t1]) if t1 > t0 else np.array([t0])
    if size(y0) == 0:  # an empty batch: an empty result, the same on both engines (nothing runs)
        sol = _empty_result(y0, save if save is not None else np.unique([t0, t1]), save_fn, step.name)
        sol.engine = empty_engine(engine, field, step, y0, save_fn, events, progress, dense_output)
        return sol
    if (sol := dispatch(engine, field, step, y0, t0, t1, dt, rtol, atol, first_step, save, max_steps, events,
                        event_tol, save_fn, progress, dense_output, raise_on_failure, precision)) is not None:
        return sol  # the compiled engine ran
    batch = tuple(batch)
    rec = _loops.Recorder(save, batch, save_fn, like=y0)
    stats = _loops.Stats(batch, like=y0)
    tracker = Tracker(events, batch, y0, event_tol) if events else None
    log = StepLog(batch, y0) if dense_output and step.name != "layer" else None
    if save is None or save[0] == t0:
        rec.record_all(t0, y0)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=t1 - t0, desc=f"integrate[{step.name}]", unit="t", leave=False)
    try:
        if t1 == t0:  # nothing to integrate: the initial state, for every stepper (no step, no call)
            stats.status[...] = _loops.REACHED
            if log is not None:  # interpolate(t0): a step of size 0 from y0
                flat = y0.reshape((-1,) + tuple(y0.shape[-2:]))
                log.add(np.arange(flat.shape[0]), t0, 0.0, flat, np.ones(flat.shape[0], dtype=bool))
        elif step.adaptive:
            _loops.run_adaptive(field, step, y0, t0, t1, rtol, atol, first_step, rec, stats,
                                max_steps, bar, tracker, log)
        else:
            _loops.run_fixed(field, step, y0, t0, t1, dt, save, rec, stats, max_steps, bar, tracker, log)
    finally:
        if bar is not None:
            bar.close()
    t, data = rec.result(template=(t0, y0))  # NaN values where no save time was reached
    host = stats.host()  # per-trajectory counters on the host (one copy from a device)
    status = host["status"]
    ok = (status == _loops.REACHED) | (status == _loops.TERMINAL)
    pt = PerTrajectory(host["nfev"], host["n_steps"], host["n_rejected"], status, ok, host["t_fail"])
    ev = None if tracker is None else tracker.result(save_fn, y0.shape[-2:])
    sol = Trajectory(
        t=t,
        y=data.pop("y") if save_fn is None else None,
        observables=data,
        nfev=int(field.n_calls - calls0) if isinstance(calls0, int) else int(stats.calls),
        n_steps=int(host["n_steps"].max(initial=0)),
        n_rejected=int(host["n_rejected"].max(initial=0)),
        success=bool(ok.all()),
        message=_loops.message(status, host["t_fail"], None if ev is None else ev.t_stop),
        per_trajectory=pt,
        stepper=step.name,
        events=ev,
    )
    if sinkhorn is not None:  # recorded on the solve; the field keeps its running maximum
        sol.attrs["sinkhorn_error"] = float(field.sinkhorn_error)
        seen = (sinkhorn, field.sinkhorn_error, given.sinkhorn_error)
        given.sinkhorn_error = field.sinkhorn_error = math.nan if any(map(math.isnan, seen)) else max(seen)
    if log is not None:
        sol.dense = log.finish(field, step, (t0, t1))
    elif dense_output:
        sol.dense = "the 'layer' stepper (discrete transformer layers) has no dense output"
    if raise_on_failure and not sol.success:
        raise IntegrationError(sol.message)
    return sol
