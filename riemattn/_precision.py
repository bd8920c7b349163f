"""The package's one float-precision rule for points on a manifold (used by the input checks of
:mod:`riemattn._validation`, which re-exports these names, and by ``integrate``)."""

from __future__ import annotations

import numpy as np


#: Tolerance on |y^T W y - 1| for float64 tokens that must lie on a manifold (the manifolds' and
#: metrics' base points, the initial tokens of ``integrate``). Lower precisions follow
#: :func:`manifold_atol`.
ON_MANIFOLD_ATOL = 1e-8

#: The factor c of the precision rule ``atol = max(ON_MANIFOLD_ATOL, c (d + 2) cond(W) eps)``
#: (see :func:`manifold_atol`).
ROUNDING_FACTOR = 4.0


def dtype_eps(like) -> float:
    """The machine epsilon of ``like``'s dtype as given (array, tensor or dtype; float64's 2.2e-16
    for integers, Python numbers and lists)."""
    dtype = getattr(like, "dtype", like)
    name = str(dtype)
    if name.startswith("torch."):
        torch = __import__("torch")
        return float(torch.finfo(dtype).eps) if dtype.is_floating_point else float(np.finfo(np.float64).eps)
    kind = np.dtype(dtype).kind if isinstance(dtype, (np.dtype, type, str)) else "i"
    return float(np.finfo(dtype).eps) if kind == "f" else float(np.finfo(np.float64).eps)


def manifold_atol(like, manifold, atol: float = ON_MANIFOLD_ATOL) -> float:
    """The on-manifold tolerance on |y^T W y - 1| for points of ``like``'s precision on ``manifold``.

    The package's one float-precision rule, the same for NumPy arrays and torch tensors::

        atol(dtype) = max(atol, c (d + 2) cond(W) eps(dtype)),   c = ROUNDING_FACTOR = 4

    with eps the machine epsilon of the dtype the points were *given* in (a NumPy float32 array is
    judged as float32 though it is computed in float64), d the ambient dimension and cond(W) the
    condition number of W (1 on the sphere). Why: a point normalized in precision eps,
    x = y / |y|_W, has |x^T W x - 1| <= (d + 2) cond(W) eps to first order. |y|_W^2 = y . (W y) is
    two dot products of d terms, each with error <= d (eps / 2) |y|^T |W| |y| <~ d (eps / 2)
    ||W|| |y|^2, and ||W|| |x|^2 <= ||W|| / lambda_min(W) = cond(W) for x on E_W; the square root,
    the division and the storage of x add about 2 eps. The check computes x^T W x in the same
    precision, with the same bound, and c = 4 covers both (measured: <= 0.53 (d + 2) cond(W) eps
    for float32 points normalized in float32, d in 2..768, cond W in 1..1e4). For float64 the
    floor ``atol`` (1e-8, the acceptance of points computed elsewhere) is the larger unless
    cond(W) (d + 2) > 1e7.
    """
    d = int(getattr(manifold, "ambient_dim", 1))
    return max(float(atol), ROUNDING_FACTOR * (d + 2) * _cond_W(manifold) * dtype_eps(like))


def _cond_W(manifold) -> float:
    """cond(W) of ``manifold`` (1 for the sphere and for manifolds without W), cached on it."""
    cache = getattr(manifold, "__dict__", None)
    if cache is None or getattr(manifold, "is_identity", False) or getattr(manifold, "W", None) is None:
        return 1.0
    if "_cond_W" not in cache:
        cache["_cond_W"] = float(np.linalg.cond(np.asarray(manifold.W, dtype=float)))
    return cache["_cond_W"]


def token_atol(arr, atol: float, manifold=None) -> float:
    """:func:`manifold_atol` of ``arr`` for ``manifold`` (without one: d = 1, cond W = 1)."""
    return manifold_atol(arr, manifold, atol)
