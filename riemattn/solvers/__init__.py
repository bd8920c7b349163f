"""Solvers: integrating a field on a manifold, one folder per family of methods.

- :mod:`riemattn.solvers.core` -- the loop core: :func:`~riemattn.solvers.core.integrate.integrate`
  and its result types, the fixed and per-trajectory adaptive stepping loops, step-size control,
  dense output, the recorder of saved values, events (:mod:`riemattn.solvers.core.events`: zero
  crossings of ``g(t, y)`` per trajectory, located on the dense output, terminal stops) and the
  statuses of a trajectory.
- :mod:`riemattn.solvers.explicit` -- explicit Runge--Kutta: the stepper interface and registry
  (:mod:`riemattn.solvers.explicit.steppers`), Butcher tableaux, Dormand--Prince with dense output.
- :mod:`riemattn.solvers.lie_group` -- Lie-group methods (Lie--Euler, RKMK, Crouch--Grossman,
  commutator-free).
- :mod:`riemattn.solvers.stiff` -- linearly implicit Rosenbrock steppers and their tableaux, the
  explicit/stiff switching stepper ``"auto"``, and their PyTorch path.
- :mod:`riemattn.solvers.stochastic` -- SDEs: attention plus Brownian motion on the manifold.
- :mod:`riemattn.solvers.compiled` -- the compiled (numba) engine: the same loops and steppers
  run per trajectory in compiled code, on the field kernels of :mod:`riemattn.dynamics.kernels`.
- Beside them: the discrete transformer layer, which *is* the ``"layer"`` stepper
  (:mod:`riemattn.solvers.layer`), numerical geodesics of the induced ellipsoid metric
  (:mod:`riemattn.solvers.geodesics`), and gradient checkpointing for differentiating long solves
  on PyTorch (:mod:`riemattn.solvers.autodiff`).

A stepper advances one step and knows nothing about attention. The module paths before the cut
by family (``riemattn.solvers.integrate``, ``riemattn.solvers.steppers``, ``riemattn.solvers.lie``,
...) still import, as the same module objects (``riemattn.MOVED_MODULES``).

May import: :mod:`riemattn.dynamics`, :mod:`riemattn.geometry` and the shared infrastructure.
"""

from . import geodesics  # noqa: E402,F401  (registers Ellipsoid(W, metric="euclidean"))
