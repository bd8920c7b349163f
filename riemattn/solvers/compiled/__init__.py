"""The compiled engine of :func:`riemattn.integrate` (``engine="compiled"``): numba loops that run
each trajectory to its end, in parallel over the trajectories.

One algorithm, two executions: the steppers here are the NumPy engine's (``"layer"``, ``"euler"``,
``"heun"``, ``"rk4"``, ``"dopri5"``, ``"dop853"``, ``"rodas4"``, ``"rodas4p"``, ``"auto"``) with the
same tableaux, controller, error norms on the tangent space, retraction, dense output and event
semantics, read from the NumPy engine's objects (``riemattn.solvers.compiled._tables``); the
field enters through compiled kernels. Every module of this package is private; the only door is
``integrate(..., engine=...)`` (:func:`riemattn.solvers.compiled._dispatch.dispatch`), and
:func:`warmup` (``riemattn.warmup``), which compiles it up front.
"""

from ._warmup import warmup

__all__ = ["warmup"]

