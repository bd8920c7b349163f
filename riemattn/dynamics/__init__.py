"""Dynamics: vector fields on the token manifolds.

:class:`~riemattn.dynamics.fields.Field` and its kinds (``VectorField``, ``AlgebraField``,
``LinearField``), the attention field and its head matrices (:mod:`riemattn.dynamics.attention`),
GLPR's SA and USA (:mod:`riemattn.dynamics.glpr`), the placements of the layer norm (Post-, Pre-,
Peri-LN, nGPT, Mix-LN: :mod:`riemattn.dynamics.layernorm`), their Jacobians
(:mod:`riemattn.dynamics.jacobians`), and the circle form of the dynamics
(:mod:`riemattn.dynamics.circle`). The compiled (numba) kernels that mirror these fields for the
compiled engine live in one sub-room, :mod:`riemattn.dynamics.kernels`. A field maps ``(t, y)``
to tangent vectors and knows nothing about stepping.

May import: :mod:`riemattn.geometry` and the shared infrastructure.
"""
