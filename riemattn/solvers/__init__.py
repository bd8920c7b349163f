"""Solvers: integrating a field on a manifold.

:func:`~riemattn.solvers.integrate.integrate` and its result, the stepping loops (fixed and
per-trajectory adaptive), the stepper registry (:mod:`riemattn.solvers.steppers`), Butcher
tableaux (:mod:`riemattn.solvers.tableaux`), Dormand--Prince with dense output
(:mod:`riemattn.solvers.dormand_prince`), stiff (linearly implicit Rosenbrock) steppers and their
tableaux (:mod:`riemattn.solvers.rosenbrock`, :mod:`riemattn.solvers.rosenbrock_tableaux`), the
explicit/stiff switching stepper ``"auto"`` (:mod:`riemattn.solvers.auto`), Lie-group methods
(:mod:`riemattn.solvers.lie`), and
the discrete transformer layer, which *is* the ``"layer"`` stepper
(:mod:`riemattn.solvers.layer`), events (:mod:`riemattn.solvers.events`: zero crossings of
``g(t, y)`` per trajectory, located on the dense output, terminal stops), and gradient
checkpointing for differentiating long solves on PyTorch (:mod:`riemattn.solvers.autodiff`). A
stepper advances one step and knows nothing about attention.

May import: :mod:`riemattn.dynamics`, :mod:`riemattn.geometry` and the shared infrastructure.
"""

from . import geodesics  # noqa: E402,F401  (registers Ellipsoid(W, metric="euclidean"))
