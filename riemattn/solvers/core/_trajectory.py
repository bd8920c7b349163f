"""The result of :func:`riemattn.integrate`: :class:`Trajectory` and its per-trajectory counters
:class:`PerTrajectory` (both engines build it; re-exported by :mod:`riemattn.solvers.integrate`)."""

from __future__ import annotations

from dataclasses import dataclass, field as dc_field

import numpy as np

from ..._backend import to_numpy
from ...errors import ValidationError
from .events import Events


@dataclass
class PerTrajectory:
    """Counters and status of every trajectory of a batch (arrays of the batch shape).

    Attributes
    ----------
    nfev, n_steps, n_rejected : ndarray of int
        Field evaluations that included the trajectory while it was unfinished (a call on the
        whole batch counts once for each of its trajectories), accepted and rejected steps.
    status : ndarray of int
        0 reached t1; 2 stopped by a terminal event; -1 reached max_steps; -2 step size
        underflow; -3 NaN or inf.
    success : ndarray of bool
        ``status`` is 0 or 2.
    t_fail : ndarray of float
        Time at which a failed trajectory stopped (NaN where it succeeded).
    """

    nfev: np.ndarray
    n_steps: np.ndarray
    n_rejected: np.ndarray
    status: np.ndarray
    success: np.ndarray
    t_fail: np.ndarray


@dataclass
class Trajectory:
    """Result of :func:`integrate`.

    Attributes
    ----------
    t : ndarray, shape (m,)
        Saved times.
    y : ndarray, shape (m, ..., l, d), or None
        Tokens at the saved times (None when ``save_fn`` was given).
    observables : dict
        With ``save_fn``: name -> array of shape (m, ...) (a single array is stored as ``"value"``).
    nfev : int
        Calls of the user's function of a :class:`~riemattn.dynamics.fields.VectorField` (its
        ``n_calls``, all of them), else the field's evaluations of the (unfinished) batch.
    n_steps, n_rejected : int
        Accepted and rejected steps: the largest over the trajectories (for fixed steps, the
        shared count).
    success : bool
        Whether every trajectory reached t1, or a terminal event, with finite values.
    message : str
        What happened (the failures, per kind, with how many trajectories and where).
    per_trajectory : PerTrajectory
        The same counters and the status of each trajectory.
    stepper : str
        Name of the stepper used.
    engine : str
        ``"numpy"``, ``"compiled"`` or ``"cuda"``: the engine that ran (``integrate(..., engine=...)``).
    events : Events or None
        With ``integrate(..., events=...)``: the crossings per trajectory (padded arrays with
        counts, :class:`riemattn.solvers.events.Events`); None without events.
    """

    t: np.ndarray
    y: np.ndarray | None
    nfev: int
    n_steps: int
    n_rejected: int
    success: bool
    message: str
    per_trajectory: PerTrajectory
    stepper: str = ""
    observables: dict = dc_field(default_factory=dict)
    attrs: dict = dc_field(default_factory=dict)
    events: Events | None = None
    dense: object = dc_field(default=None, repr=False)
    engine: str = "numpy"

    def interpolate(self, t):
        """The solution at any time(s) ``t`` of the solved interval (``integrate(..., dense_output=True)``).

        Parameters
        ----------
        t : float or array_like, shape (k,)
            Times in ``[t0, t1]``.

        Returns
        -------
        ndarray or tensor, shape (..., l, d) for a float, (k, ..., l, d) for k times
            NaN for a trajectory that stopped (terminal event, failure) before ``t``. At ``t0``
            and at every accepted step's end: the stored tokens, exactly. Inside a step: the
            step's own dense output (the one ``saveat`` and events used), the step taken again
            with the same size and carried state (for ``"auto"`` the same method); a fresh step
            of size ``t - t_start`` for steppers without a native dense output. All queries are
            evaluated as one batch (``riemattn.solvers.core._dense``; docs/events.md, "Dense output
            of the whole solve").
        """
        if self.dense is None or isinstance(self.dense, str):
            why = self.dense or "the solve kept no dense output: pass dense_output=True to integrate"
            raise ValidationError(f"Trajectory.interpolate: {why}.")
        return self.dense(t)

    def to_xarray(self):
        """An :class:`xarray.Dataset`: ``y`` with dims (time, [batch_0, ...], token, component), or
        the observables with dims (time, [batch...], ...); per-trajectory counters as variables."""
        import xarray as xr

        nbatch = self.per_trajectory.status.ndim
        bdims = tuple(f"batch_{k}" if nbatch > 1 else "batch" for k in range(nbatch))
        data = {}
        if self.y is not None:
            data["y"] = (("time",) + bdims + ("token", "component"), to_numpy(self.y))
        for name, v in self.observables.items():
            extra = tuple(f"{name}_dim_{k}" for k in range(v.ndim - 1 - nbatch))
            data[name] = (("time",) + bdims + extra, to_numpy(v))
        pt = self.per_trajectory
        for name in ("nfev", "n_steps", "n_rejected", "status"):
            data[f"{name}_per_trajectory"] = (bdims, getattr(pt, name))
        attrs = dict(nfev=int(self.nfev), n_steps=int(self.n_steps), n_rejected=int(self.n_rejected),
                     success=int(self.success), message=self.message, stepper=self.stepper)
        attrs.update(self.attrs)
        coords = {"time": self.t}
        ev = self.events
        if ev is not None:  # crossings: padded along "crossing", event names as a coordinate
            data["event_count"] = (bdims, ev.count)
            data["event_t"] = (bdims + ("crossing",), ev.t)
            data["event_which"] = (bdims + ("crossing",), ev.which)
            data["event_t_stop"] = (bdims, ev.t_stop)
            if ev.y is not None:
                data["event_y"] = (bdims + ("crossing", "token", "component"), to_numpy(ev.y))
            for name, v in ev.observables.items():
                extra = tuple(f"event_{name}_dim_{k}" for k in range(v.ndim - 1 - nbatch))
                data[f"event_{name}"] = (bdims + ("crossing",) + extra, v)
            coords["event"] = list(ev.names)
        return xr.Dataset(data, coords=coords, attrs=attrs)

    def to_numpy(self) -> "Trajectory":
        """This result with ``y``, the observables and the events' tokens as NumPy arrays (copied
        from a device); ``interpolate`` then returns NumPy arrays too."""
        import dataclasses

        events, dense = self.events, self.dense
        if events is not None and events.y is not None:
            events = dataclasses.replace(events, y=to_numpy(events.y))
        if callable(dense):
            inner = dense

            def dense(t):
                return to_numpy(inner(t))
        return dataclasses.replace(
            self, y=None if self.y is None else to_numpy(self.y),
            observables={k: to_numpy(v) for k, v in self.observables.items()}, events=events, dense=dense)

    def __repr__(self) -> str:
        shape = None if self.y is None else tuple(self.y.shape)
        return (
            f"Trajectory(t: {self.t.shape}, y: {shape}, nfev={self.nfev}, n_steps={self.n_steps}, "
            f"success={self.success}, message={self.message!r})"
        )
