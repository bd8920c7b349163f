"""Stiff methods: linearly implicit Rosenbrock steppers and the switching stepper ``"auto"``.

The projected Rosenbrock steppers RODAS4 / RODAS4P with dense output
(:mod:`~riemattn.solvers.stiff.rosenbrock`) and their tableaux
(:mod:`~riemattn.solvers.stiff.rosenbrock_tableaux`); ``"auto"``
(:mod:`~riemattn.solvers.stiff.auto`): Dormand--Prince that switches per trajectory to RODAS4P
where the problem turns stiff; and their PyTorch path (``_rosenbrock_torch``: the steps on
tensors, differentiable, with the closed-form Jacobians of :mod:`riemattn.dynamics.jacobians`).
"""
