"""Stochastic attention: SDEs on the token manifold.

:func:`~riemattn.solvers.stochastic.sde.integrate_sde` (:mod:`~riemattn.solvers.stochastic.sde`):
the attention field plus an independent Brownian motion per token on the sphere, an ellipsoid or
flat space, stepped by projected Euler--Maruyama (``"em"``) or a Strang splitting with a geodesic
random walk (``"strang"``), through the loop core's ``integrate``.
"""
