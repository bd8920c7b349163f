"""Geometry: where the tokens live.

The manifolds (:class:`~riemattn.geometry.manifolds.Sphere`,
:class:`~riemattn.geometry.ellipsoid.Ellipsoid`, :class:`~riemattn.geometry.manifolds.Euclidean`)
with their projection, retraction and tangent projection, the W-metric in closed form
(:mod:`riemattn.geometry.metrics`), a pymanopt adapter (:mod:`riemattn.geometry.pymanopt_adapter`,
optional extra), the O(W) group action on them
(:mod:`riemattn.geometry.groups`) and the exact exponentials of low-rank generators
(:mod:`riemattn.geometry.lowrank`). Nothing here knows about time, attention or stepping.

May import: the shared infrastructure (``riemattn.errors``, ``riemattn._backend``,
``riemattn._validation``) only.
"""
