"""Vector fields on token manifolds: the interface steppers and :func:`riemattn.integrate` use.

A *field* maps ``(t, y)``, ``y`` of shape ``(..., l, d)`` on a manifold, to tangent vectors of the
same shape. It knows nothing about stepping. Besides ``__call__`` a field may provide
``drive(t, y)``: any ambient vector ``f`` whose tangent projection ``(I - y y^T W) f`` is the field.
Projected Runge--Kutta steppers take ``y + h f`` and normalize; for the attention field the drive is
the un-normalized attention update, which makes one transformer layer *exactly* one projected
Euler step (SPEC section 2). The default drive is the field itself.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from .errors import InputTypeError

__all__ = ["Field", "VectorField"]


class Field:
    """Base class of vector fields on a :class:`~riemattn.manifolds.Sphere` or ``Ellipsoid``.

    Subclasses set ``self.manifold`` and implement ``__call__(t, y)``; they may override ``drive``.
    """

    manifold = None

    def __call__(self, t: float, y: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def drive(self, t: float, y: np.ndarray) -> np.ndarray:
        """An ambient representative of the field (default: the tangent field itself)."""
        return self(t, y)

    @property
    def d(self) -> int:
        """Dimension of the ambient space R^d the tokens live in."""
        return self.manifold.dim + 1


class VectorField(Field):
    """Wrap a function ``func(t, y) -> tangent vectors`` as a field on ``manifold``.

    Parameters
    ----------
    func : callable
        ``func(t, y)`` with ``y`` of shape ``(..., l, d)``, returning an array of the same shape.
    manifold : Sphere or Ellipsoid
        The manifold the tokens live on.
    project : bool, default False
        If True, the output of ``func`` is projected onto the tangent space
        (``manifold.to_tangent``), so ``func`` may return any ambient vector (it is then used as
        the drive). If False, ``func`` must already return tangent vectors.
    """

    def __init__(self, func: Callable, manifold, *, project: bool = False):
        if not callable(func):
            raise InputTypeError(f"func must be callable as func(t, y), got {type(func).__name__}.")
        if not hasattr(manifold, "to_tangent") or not hasattr(manifold, "norm"):
            raise InputTypeError(
                "manifold must be a riemattn Sphere or Ellipsoid, got " f"{type(manifold).__name__}."
            )
        self.func = func
        self.manifold = manifold
        self.project = bool(project)

    def drive(self, t, y):
        return self.func(t, y)

    def __call__(self, t, y):
        out = self.func(t, y)
        return self.manifold.to_tangent(out, y) if self.project else out
