"""Lie-group methods: steppers that move the tokens by a group action, so they stay on E_W.

:mod:`~riemattn.solvers.lie_group.lie`: ``"lie-euler"``, the Runge--Kutta--Munthe-Kaas methods
(``"rkmk4"``, the adaptive ``"rkmk45"``) and the commutator-free / Crouch--Grossman methods
(``"cg3"``, ``"cf4"``), built on the frames of :mod:`riemattn.geometry.groups` and the tableaux
of :mod:`riemattn.solvers.explicit.tableaux`.
"""
