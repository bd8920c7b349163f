"""Status codes and counters of a trajectory and the result message built from them (the stepping loops').

Private to :mod:`riemattn.solvers`; :mod:`riemattn.solvers.core._loops` re-exports every name.
"""

from __future__ import annotations

import math

import numpy as np

from ..._backend import to_numpy
from ._recorder import _Kind

#: status codes of a trajectory
REACHED, RUNNING, MAX_STEPS, UNDERFLOW, NON_FINITE = 0, 1, -1, -2, -3
TERMINAL = 2  # = riemattn.solvers.events.TERMINAL
MESSAGES = {
    REACHED: "reached t1",
    TERMINAL: "stopped by a terminal event",
    RUNNING: "not finished",
    MAX_STEPS: "reached max_steps",
    UNDERFLOW: "step size underflow (the problem may be stiff or singular)",
    NON_FINITE: "the field or the state became NaN or inf",
}


def message(status, t_fail, t_stop=None) -> str:
    if (status == REACHED).all():
        return "The solver reached t1." if status.size <= 1 else f"All {status.size} trajectories reached t1."
    parts = []
    stopped = status == TERMINAL
    if stopped.any():
        reached = int((status == REACHED).sum())
        parts.append(f"{int(stopped.sum())} of {status.size} trajectories: {MESSAGES[TERMINAL]} "
                     f"(first at t = {float(np.nanmin(t_stop[stopped])):.6g})")
        if reached:
            parts.append(f"{reached} reached t1")
    for code in (MAX_STEPS, UNDERFLOW, NON_FINITE, RUNNING):
        bad = status == code
        if bad.any():
            where = float(np.nanmin(t_fail[bad])) if np.isfinite(t_fail[bad]).any() else float("nan")
            parts.append(f"{int(bad.sum())} of {status.size} trajectories: {MESSAGES[code]} "
                         f"(first at t = {where:.6g})")
    return "; ".join(parts) + "."


class Stats:
    """Per-trajectory counters and status."""

    def __init__(self, batch, like=None):
        kind = _Kind(np.zeros(0) if like is None else like)
        i64 = kind.xp.int64
        self.nfev = kind.full(batch, 0, i64)
        self.n_steps = kind.full(batch, 0, i64)
        self.n_rejected = kind.full(batch, 0, i64)
        self.status = kind.full(batch, RUNNING, i64)
        self.t_fail = kind.full(batch, math.nan)
        self.calls = 0  # field evaluations of the whole batch

    def host(self) -> dict:
        """The per-trajectory arrays as NumPy arrays (one copy from the device for tensors)."""
        return {k: to_numpy(getattr(self, k)) for k in ("nfev", "n_steps", "n_rejected", "status", "t_fail")}
