"""The loop core: the front door and the machinery every stepper family runs in.

:func:`~riemattn.solvers.core.integrate.integrate` (argument checks, the choice of engine, the
run) and its result types (``_trajectory``: ``Trajectory``, ``PerTrajectory``), the stepping
loops, fixed-step and per-trajectory adaptive (``_loops``), step-size control (``_control``),
dense output (``_dense``), the recorder of saved values (``_recorder``), events
(:mod:`~riemattn.solvers.core.events`, located on the dense output by ``_event_tracker``) and the
per-trajectory statuses and messages (``_status``). The core knows a stepper only through the
registry's interface (:mod:`riemattn.solvers.explicit.steppers`); the compiled engine
(:mod:`riemattn.solvers.compiled`) imports the loop machinery and the result types, never
``integrate`` itself.
"""
