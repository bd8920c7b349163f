"""``integrate``: join a field, a stepper and a manifold; fixed or adaptive steps; saving; status."""

from __future__ import annotations

import math
from dataclasses import dataclass, field as dc_field
from numbers import Real

import numpy as np

from ._validation import as_float_array, check_positive, check_tokens
from .errors import InputTypeError, IntegrationError, ValidationError
from .steppers import get_stepper

__all__ = ["integrate", "Trajectory", "ON_MANIFOLD_ATOL"]

#: Tolerance on |y^T W y - 1| for initial tokens (pass ``project=True`` to normalize them instead).
ON_MANIFOLD_ATOL = 1e-8


@dataclass
class Trajectory:
    """Result of :func:`integrate`.

    Attributes
    ----------
    t : ndarray, shape (m,)
        Saved times.
    y : ndarray, shape (m, ..., l, d)
        Tokens at the saved times.
    nfev : int
        Number of field evaluations.
    n_steps : int
        Number of accepted steps.
    n_rejected : int
        Number of rejected steps (adaptive steppers).
    success : bool
        Whether the final time was reached with finite values.
    message : str
        What happened.
    stepper : str
        Name of the stepper used.
    """

    t: np.ndarray
    y: np.ndarray
    nfev: int
    n_steps: int
    n_rejected: int
    success: bool
    message: str
    stepper: str = ""
    attrs: dict = dc_field(default_factory=dict)

    def to_xarray(self):
        """An :class:`xarray.Dataset` with variable ``y`` of dims (time, [batch_0, ...], token, component)."""
        import xarray as xr

        nbatch = self.y.ndim - 3
        dims = ("time",) + tuple(f"batch_{k}" if nbatch > 1 else "batch" for k in range(nbatch)) + (
            "token",
            "component",
        )
        attrs = dict(
            nfev=int(self.nfev),
            n_steps=int(self.n_steps),
            n_rejected=int(self.n_rejected),
            success=int(self.success),
            message=self.message,
            stepper=self.stepper,
        )
        attrs.update(self.attrs)
        return xr.Dataset({"y": (dims, self.y)}, coords={"time": self.t}, attrs=attrs)

    def __repr__(self) -> str:
        return (
            f"Trajectory(t: {self.t.shape}, y: {self.y.shape}, nfev={self.nfev}, n_steps={self.n_steps}, "
            f"success={self.success}, message={self.message!r})"
        )


def _rms(x):
    return float(np.sqrt(np.mean(np.square(x))))


def _initial_step(field, t0, y0, f0, order, rtol, atol, direction=1.0):
    """Hairer, Norsett & Wanner (1993), II.4 'starting step size' algorithm (as in scipy)."""
    scale = atol + np.abs(y0) * rtol
    d0, d1 = _rms(y0 / scale), _rms(f0 / scale)
    h0 = 1e-6 if d0 < 1e-5 or d1 < 1e-5 else 0.01 * d0 / d1
    y1 = field.manifold.projection(y0 + h0 * direction * f0)
    f1 = field(t0 + h0 * direction, y1)
    d2 = _rms((f1 - f0) / scale) / h0
    if d1 <= 1e-15 and d2 <= 1e-15:
        h1 = max(1e-6, h0 * 1e-3)
    else:
        h1 = (0.01 / max(d1, d2)) ** (1.0 / (order + 1))
    return min(100 * h0, h1)


def _check_saveat(saveat, t0, t1):
    if saveat is None:
        return None
    s = as_float_array(saveat, "saveat")
    s = np.atleast_1d(s)
    if s.ndim != 1 or not np.all(np.isfinite(s)):
        raise ValidationError(f"saveat must be a 1-D array of finite times, got shape {s.shape}.")
    if np.any(np.diff(s) <= 0):
        raise ValidationError("saveat must be strictly increasing.")
    if s.size and (s[0] < t0 - 1e-12 * max(1, abs(t0)) or s[-1] > t1 + 1e-12 * max(1, abs(t1))):
        raise ValidationError(f"saveat must lie in [t0, t1] = [{t0}, {t1}], got [{s[0]}, {s[-1]}].")
    return np.clip(s, t0, t1)


def integrate(
    field,
    y0,
    t_span,
    stepper="rk4",
    dt=None,
    rtol=1e-6,
    atol=1e-9,
    saveat=None,
    progress=False,
    *,
    max_steps=1_000_000,
    raise_on_failure=False,
    project=False,
    first_step=None,
):
    """Integrate ``dy/dt = field(t, y)`` on the field's manifold from ``t0`` to ``t1``.

    Parameters
    ----------
    field : Field
        A :class:`~riemattn.attention.AttentionField` or any :class:`~riemattn.fields.Field`.
    y0 : array_like, shape (..., l, d)
        Initial tokens on ``field.manifold`` (|y^T W y - 1| <= 1e-8); leading axes are independent
        trajectories integrated together.
    t_span : (t0, t1)
        Start and end time (t1 >= t0).
    stepper : str or Stepper
        A name in :data:`riemattn.STEPPERS` ("euler", "heun", "rk4", "dopri5", Lie-group ones ...).
    dt : float, optional
        Step size of a fixed-step stepper (required for them). Each interval between save times is
        split into ``ceil(length / dt)`` equal steps, so steps never exceed ``dt`` and land exactly on
        ``t1`` and on every ``saveat`` time. For adaptive steppers, the initial step (optional).
    rtol, atol : float
        Tolerances of adaptive steppers: the RMS over all entries of
        ``err / (atol + rtol * max(|y|, |y_new|))`` must be <= 1.
    saveat : array_like, optional
        Times at which to save (increasing, within [t0, t1]). Default: ``t0`` and every step.
    progress : bool
        Show a tqdm progress bar.
    max_steps : int
        Maximum number of (accepted + rejected) steps; beyond it the result has ``success=False``.
    raise_on_failure : bool
        Raise :class:`~riemattn.errors.IntegrationError` instead of returning ``success=False``.
    project : bool
        Normalize ``y0`` onto the manifold (pi_W) instead of checking that it lies on it.

    Returns
    -------
    Trajectory
        ``t`` (m,), ``y`` (m, ..., l, d), ``nfev``, ``n_steps``, ``success``, ``message``, ``to_xarray()``.
    """
    step = get_stepper(stepper)
    manifold = getattr(field, "manifold", None)
    if manifold is None or not callable(field):
        raise InputTypeError(
            f"field must be a riemattn Field (callable with a .manifold), got {type(field).__name__}."
        )
    d = manifold.dim + 1
    y0 = check_tokens(y0, "y0", d)
    if project:
        y0 = manifold.projection(y0)
    else:
        dev = float(np.max(np.abs(manifold.inner(y0, y0) - 1.0)))
        if dev > ON_MANIFOLD_ATOL:
            raise ValidationError(
                f"y0 is not on {manifold!r}: max |y^T W y - 1| = {dev:.3g} > {ON_MANIFOLD_ATOL:g}. "
                "Normalize it (manifold.projection) or pass project=True."
            )
    try:
        t0, t1 = (float(v) for v in t_span)
    except (TypeError, ValueError):
        raise ValidationError(f"t_span must be a pair (t0, t1) of numbers, got {t_span!r}.") from None
    if not (math.isfinite(t0) and math.isfinite(t1)):
        raise ValidationError(f"t_span must be finite, got {(t0, t1)}.")
    if t1 < t0 and step.forward_only:
        raise ValidationError(
            f"t_span = ({t0}, {t1}) runs backward (t1 < t0), but stepper {step.name!r} integrates forward "
            "only; pass t0 <= t1."
        )
    if step.adaptive:
        rtol = check_positive(rtol, "rtol")
        atol = check_positive(atol, "atol")
        if dt is not None:
            dt = check_positive(dt, "dt")
    else:
        if dt is None:
            raise ValidationError(f"dt is required for the fixed-step stepper {step.name!r}.")
        dt = check_positive(dt, "dt")
    if not isinstance(max_steps, (int, np.integer)) or max_steps < 1:
        raise ValidationError(f"max_steps must be a positive integer, got {max_steps!r}.")
    save = _check_saveat(saveat, t0, t1)

    runner = _Runner(field, step, y0, t0, t1, save, progress)
    if step.adaptive:
        runner.run_adaptive(rtol, atol, dt if first_step is None else first_step, max_steps)
    else:
        runner.run_fixed(dt, max_steps)
    sol = runner.result()
    if raise_on_failure and not sol.success:
        raise IntegrationError(sol.message)
    return sol


class _Runner:
    def __init__(self, field, step, y0, t0, t1, save, progress):
        self.field, self.step, self.t0, self.t1 = field, step, t0, t1
        self.y, self.t = y0, t0
        self.save = save
        self.ts, self.ys = [], []
        if save is None or (save.size and save[0] == t0):
            self._record()
        self.nfev = self.n_steps = self.n_rejected = 0
        self.success, self.message = True, "The solver reached t1."
        self.bar = None
        if progress:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=t1 - t0, desc=f"integrate[{step.name}]", unit="t", leave=False)

    def _record(self):
        self.ts.append(self.t)
        self.ys.append(self.y.copy())

    def _targets(self):
        """Times the stepping must land on: save times after t0, then t1."""
        targets = [] if self.save is None else [s for s in self.save if s > self.t0]
        if not targets or targets[-1] < self.t1:
            targets.append(self.t1)
        return targets

    def _advance(self, t_new, y_new):
        if self.bar is not None:
            self.bar.update(t_new - self.t)
        self.t, self.y = t_new, y_new

    def _finite(self):
        if not np.all(np.isfinite(self.y)):
            self.success = False
            self.message = f"Non-finite tokens at t = {self.t:.6g}; the field overflowed or diverged."
            return False
        return True

    def run_fixed(self, dt, max_steps):
        for target in self._targets():
            n = max(1, math.ceil((target - self.t) / dt - 1e-9))
            start, h = self.t, (target - self.t) / n
            for k in range(1, n + 1):
                if self.n_steps >= max_steps:
                    self.success = False
                    self.message = f"Reached max_steps = {max_steps} at t = {self.t:.6g} < t1 = {self.t1}."
                    return
                res = self.step.step(self.field, self.t, self.y, h)
                self.nfev += res.nfev
                self.n_steps += 1
                self._advance(target if k == n else start + k * h, res.y)
                if self.save is None:
                    self._record()
                if not self._finite():
                    return
            if self.save is not None and target in self.save:
                self._record()

    def run_adaptive(self, rtol, atol, h, max_steps, safety=0.9, facmin=0.2, facmax=10.0):
        st = self.step
        expo = 1.0 / ((st.error_order or st.order) + 1)
        k1 = getattr(self.field, "drive", self.field)(self.t, self.y) if st.fsal else None
        self.nfev += 1 if st.fsal else 0
        if h is None:
            f0 = self.field(self.t, self.y)
            self.nfev += 2
            h = _initial_step(self.field, self.t, self.y, f0, st.order, rtol, atol)
        for target in self._targets():
            while self.t < target:
                if self.n_steps + self.n_rejected >= max_steps:
                    self.success = False
                    self.message = (
                        f"Reached max_steps = {max_steps} at t = {self.t:.6g} < t1 = {self.t1}; "
                        "raise max_steps or loosen rtol/atol."
                    )
                    return
                h_try = min(h, target - self.t)
                last = h_try >= target - self.t - 1e-12 * max(1.0, abs(target))
                if last:
                    h_try = target - self.t
                res = st.step(self.field, self.t, self.y, h_try, k1)
                self.nfev += res.nfev
                scale = atol + rtol * np.maximum(np.abs(self.y), np.abs(res.y))
                err = _rms(res.error / scale) if res.error is not None else 0.0
                if not np.isfinite(err):
                    err = np.inf
                if err <= 1.0:
                    self.n_steps += 1
                    self._advance(target if last else self.t + h_try, res.y)
                    k1 = res.k_next
                    if self.save is None:
                        self._record()
                    if not self._finite():
                        return
                    fac = facmax if err == 0 else min(facmax, max(facmin, safety * err ** (-expo)))
                    # keep h when the step was shortened only to land on the target
                    h = max(h, h_try) * fac if last else h_try * fac
                else:
                    self.n_rejected += 1
                    h = h_try * max(facmin, safety * err ** (-expo)) if np.isfinite(err) else h_try * facmin
                    if h < 1e-14 * max(1.0, abs(self.t)):
                        self.success = False
                        self.message = f"Step size underflow at t = {self.t:.6g}; the problem may be stiff or singular."
                        return
            if self.save is not None and target in self.save:
                self._record()

    def result(self) -> Trajectory:
        if self.bar is not None:
            self.bar.close()
        return Trajectory(
            t=np.asarray(self.ts),
            y=np.stack(self.ys) if self.ys else np.empty((0,) + self.y.shape),
            nfev=self.nfev,
            n_steps=self.n_steps,
            n_rejected=self.n_rejected,
            success=self.success,
            message=self.message,
            stepper=self.step.name,
        )
