"""Explicit Runge--Kutta: projected steppers, their Butcher tableaux, and Dormand--Prince.

The stepper interface and registry (:mod:`~riemattn.solvers.explicit.steppers`: ``Stepper``,
``StepResult``, ``STEPPERS``, ``register``, ``get_stepper``, which every family registers into)
with the projected explicit steppers ``"euler"``, ``"heun"``, ``"rk4"`` and any Butcher tableau;
the tableaux themselves and their order conditions (:mod:`~riemattn.solvers.explicit.tableaux`);
the adaptive pairs ``"dopri5"`` and ``"dop853"`` with their dense output
(:mod:`~riemattn.solvers.explicit.dormand_prince`).
"""
