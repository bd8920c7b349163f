"""The NumPy engine's method data, read into plain arrays for the compiled loops.

Nothing here restates a coefficient: the Butcher tableaux (:mod:`riemattn.solvers.tableaux`, the
rows the NumPy steppers use, :meth:`riemattn.solvers.steppers.ProjectedRK._plan`), the dense
outputs (``DOPRI5_DENSE``, ``DOP853_DENSE``), the Rosenbrock tableaux
(:mod:`riemattn.solvers.rosenbrock_tableaux`), the step-size controller's constants
(:mod:`riemattn.solvers.core._control`) and ``"auto"``'s switching rule (:mod:`riemattn.solvers.auto`) are
read from the NumPy engine's objects and copied into one :class:`Method` record of arrays, the
same record type for every stepper (so that the compiled loop compiles once).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..core import _control
from ..stiff import auto, rosenbrock
from ..explicit.dormand_prince import ProjectedDOP853, ProjectedDormandPrince
from ..layer import LayerStep
from ..stiff.rosenbrock import ProjectedRodas4, ProjectedRodas4P
from ..explicit.steppers import ProjectedEuler, ProjectedHeun, ProjectedRK4
from ..explicit.tableaux import DOP853_DENSE, DOPRI5_DENSE

#: method kinds of the compiled loops
RK, LAYER, DOP853, ROSENBROCK, AUTO = 0, 1, 2, 3, 4

#: the steppers the compiled engine runs: registry name -> (class, kind). A subclass or another
#: stepper is not run by the compiled engine (it could change any of the methods it inherits).
SUPPORTED = {
    "layer": (LayerStep, LAYER),
    "euler": (ProjectedEuler, RK),
    "heun": (ProjectedHeun, RK),
    "rk4": (ProjectedRK4, RK),
    "dopri5": (ProjectedDormandPrince, RK),
    "dop853": (ProjectedDOP853, DOP853),
    "rodas4": (ProjectedRodas4, ROSENBROCK),
    "rodas4p": (ProjectedRodas4P, ROSENBROCK),
    "auto": (auto.AutoSwitch, AUTO),
}


class Method(NamedTuple):
    """One stepper as arrays (unused parts are empty arrays of the right number of axes)."""

    ints: np.ndarray  # kind, stages, order, k (error order + 1), fsal, adaptive, stiffly accurate,
    #                   switch_after, probe_after
    ctrl: np.ndarray  # PI_BETA, SAFETY, FACMIN, FACMAX, last-step rtol, underflow rtol, err floor,
    #                   rho_stiff, rho_back, rho_elevated, the solve's limit on h gamma |J|_inf
    A: np.ndarray  # (s, s) explicit stages (rows without their trailing zeros: zeros are skipped)
    b: np.ndarray  # (s,)
    c: np.ndarray  # (s,)
    e: np.ndarray  # (s,) b - b_hat (the embedded difference)
    e3: np.ndarray  # (s,) DOP853: b - bhh
    dense: np.ndarray  # (s, 4) DOPRI5's continuous extension; DOP853: (3 + 4, 16): A_extra then D
    cx: np.ndarray  # (3,) DOP853's extra nodes
    b6: np.ndarray  # (s,) auto: b - A[5] (the stiffness estimate's difference x1 - X6, over h)
    ra: np.ndarray  # (6, 6) Rosenbrock a
    rC: np.ndarray  # (6, 6) Rosenbrock C
    rc: np.ndarray  # (6,)
    rd: np.ndarray  # (6,)
    rmm: np.ndarray  # (2, 6) m and m - m_hat
    rH: np.ndarray  # (2, 6) dense output
    rgamma: float


def _rk_arrays(cls):
    tab = cls.tableau
    s = tab.stages
    A = np.ascontiguousarray(tab.A_, dtype=float)
    b = np.ascontiguousarray(tab.b_, dtype=float)
    c = np.ascontiguousarray(tab.c_, dtype=float)
    e = np.zeros(s) if tab.b_err_ is None else np.ascontiguousarray(tab.b_err_, dtype=float)
    return A, b, c, e


def _ros_arrays(cls):
    tab = cls.tableau
    return (np.ascontiguousarray(tab.a), np.ascontiguousarray(tab.C), np.ascontiguousarray(tab.c, dtype=float),
            np.ascontiguousarray(tab.d, dtype=float), np.ascontiguousarray(tab.mm), np.ascontiguousarray(tab.H),
            float(tab.gamma), bool(tab.stiffly_accurate))


_CACHE: dict = {}


def method(name: str) -> Method:
    """The :class:`Method` record of a supported stepper name (cached)."""
    rec = _CACHE.get(name)
    if rec is not None:
        return rec
    cls, kind = SUPPORTED[name]
    empty1, empty2 = np.zeros(0), np.zeros((0, 0))
    A, b, c, e = _rk_arrays(ProjectedDormandPrince if kind == AUTO else cls) if kind != ROSENBROCK else (
        empty2, empty1, empty1, empty1)
    e3, dense, cx, b6 = empty1, empty2, empty1, empty1
    if cls is ProjectedDormandPrince or kind == AUTO:
        dense = np.ascontiguousarray(np.asarray(DOPRI5_DENSE, dtype=float))
    if kind == DOP853:
        e3 = np.ascontiguousarray(cls._err3(), dtype=float)
        e3 = np.concatenate([e3, np.zeros(len(b) - len(e3))])
        rows = [list(r) + [0.0] * (16 - len(r)) for r in DOP853_DENSE.A_extra]
        rows += [list(r) + [0.0] * (16 - len(r)) for r in DOP853_DENSE.D]
        dense = np.ascontiguousarray(np.asarray(rows, dtype=float))
        cx = np.asarray(DOP853_DENSE.c_extra, dtype=float)
    if kind == AUTO:
        b6 = np.ascontiguousarray(ProjectedDormandPrince.tableau.b_ - ProjectedDormandPrince.tableau.A_[5])
    ros = cls if kind == ROSENBROCK else ProjectedRodas4P if kind == AUTO else None
    if ros is not None:
        ra, rC, rc, rd, rmm, rH, gamma, stiffly = _ros_arrays(ros)
    else:
        ra = rC = rmm = rH = empty2
        rc = rd = empty1
        gamma, stiffly = 0.0, False
    order = cls.order
    k = (cls.error_order or cls.order) + 1
    ints = np.array([kind, len(b), order, k, int(bool(cls.fsal)), int(bool(cls.adaptive)), int(stiffly),
                     auto.SWITCH_AFTER, auto.PROBE_AFTER], dtype=np.int64)
    ctrl = np.array([_control.PI_BETA, _control.SAFETY, _control.FACMIN, _control.FACMAX, _control.LAST_STEP_RTOL,
                     _control.UNDERFLOW_RTOL, _control.ERR_PREV_FLOOR, auto._RHO_STIFF, auto._RHO_BACK,
                     auto._RHO_ELEVATED, rosenbrock.SOLVE_LIMIT / rosenbrock.EPS], dtype=float)
    rec = Method(ints, ctrl, A, b, c, e, e3, dense, cx, b6, ra, rC, rc, rd, rmm, rH, gamma)
    _CACHE[name] = rec
    return rec
