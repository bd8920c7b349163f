r"""pymanopt adapter: riemattn's Sphere and Ellipsoid (and their products (E_W)^l) as pymanopt manifolds.

``to_pymanopt(manifold)`` gives a ``pymanopt.manifolds.manifold.Manifold`` whose points are
arrays of shape ``(d,)``, or ``(l, d)`` with ``tokens=l`` (the token configuration space
(E_W)^l, every token on E_W, the product metric). pymanopt's optimizers (trust regions,
conjugate gradients, steepest descent) then run on them. It needs the optional ``pymanopt``
extra (``pip install 'riemattn[pymanopt]'``).

Riemannian gradient and Hessian from the Euclidean ones (for f extended to R^d):

- W-metric (``Ellipsoid(W)``, ``Sphere``): grad f = P_x W^{-1} df, with P_x = I - x x^T W, and
  Hess f[xi] = P_x W^{-1} d2f[xi] - (x^T df) xi (the sphere's formulas conjugated by
  x -> W^{1/2} x);
- induced metric (``Ellipsoid(W, metric="euclidean")``): grad f = Pi_x df, Pi_x the orthogonal
  projection onto (W x)^perp, and Hess f[xi] = Pi_x d2f[xi] - (nu . df) Pi_x(W xi) / |W x|
  (Weingarten map of the level set, nu = W x / |W x|).

The retraction is the layer normalization pi_W(x + v) (second order), the transport is by
projection, ``exp``/``log``/``dist`` are the manifold metric's.

References
----------
Boumal, Mishra, Absil, Sepulchre, "Manopt, a Matlab toolbox for optimization on manifolds",
JMLR 2014; Townsend, Koep, Weichwald, "Pymanopt", JMLR 2016; N. Boumal, *An introduction to
optimization on smooth manifolds*, Cambridge 2023, sections 3.8 and 5.11 (Riemannian submanifolds,
Weingarten map) and 7.2 (the sphere).
"""

from __future__ import annotations

import numpy as np

from .._validation import check_int
from ..errors import InputTypeError

__all__ = ["to_pymanopt"]


def to_pymanopt(manifold, tokens: int | None = None):
    """A pymanopt Manifold for a riemattn Sphere or Ellipsoid (or its power (E_W)^tokens).

    Parameters
    ----------
    manifold : Sphere or Ellipsoid
        The manifold and its metric (the W-metric, or ``metric="euclidean"``).
    tokens : int, optional
        With ``tokens=l``: the product (E_W)^l, points of shape (l, d).

    Returns
    -------
    pymanopt.manifolds.manifold.Manifold

    Examples
    --------
    >>> import numpy as np, riemattn as ra
    >>> from riemattn.geometry.pymanopt_adapter import to_pymanopt
    >>> M = to_pymanopt(ra.Ellipsoid(np.diag([1.0, 4.0])), tokens=3)
    >>> M.random_point().shape, M.dim
    ((3, 2), 3)
    """
    try:
        from pymanopt.manifolds.manifold import Manifold
    except ImportError:  # pragma: no cover - the extra is installed in the test environment
        raise ImportError("to_pymanopt needs pymanopt: pip install 'riemattn[pymanopt]'.") from None
    if not all(hasattr(manifold, a) for a in ("W", "retract", "metric")) or not hasattr(manifold, "sqrt_W"):
        raise InputTypeError(f"manifold must be a riemattn Sphere or Ellipsoid, got {type(manifold).__name__}.")
    if tokens is not None:
        tokens = check_int(tokens, "tokens", 1)
    return type("RiemattnPymanoptManifold", (_Adapter, Manifold), {})(manifold, tokens)


class _Adapter:
    """Methods of the pymanopt manifold (mixed into pymanopt's Manifold by :func:`to_pymanopt`)."""

    def __init__(self, manifold, tokens):
        self.space = manifold
        self.tokens = tokens
        d = manifold.dim + 1
        self._shape = (d,) if tokens is None else (tokens, d)
        self._induced = type(manifold.metric).__name__ == "InducedEllipsoidMetric"
        self._W = np.asarray(manifold.W, dtype=float)
        self._W_inv = np.linalg.inv(self._W)
        name = f"pymanopt view of {manifold!r}" + ("" if tokens is None else f" ^ {tokens}")
        super().__init__(name, int(manifold.dim * (1 if tokens is None else tokens)))

    @property
    def typical_dist(self):
        return np.pi * np.sqrt(1 if self.tokens is None else self.tokens)

    # --- metric -------------------------------------------------------------------------------
    def _inner_rows(self, a, b):
        return np.einsum("...i,...i->...", a, b) if self._induced else np.einsum("...i,...i->...", a, b @ self._W)

    def inner_product(self, point, tangent_vector_a, tangent_vector_b):
        return float(np.sum(self._inner_rows(tangent_vector_a, tangent_vector_b)))

    def norm(self, point, tangent_vector):
        return float(np.sqrt(self.inner_product(point, tangent_vector, tangent_vector)))

    def projection(self, point, vector):
        """The tangent projection orthogonal for the metric (per token)."""
        if self._induced:
            n = point @ self._W
            return vector - (np.einsum("...i,...i->...", n, vector) / np.einsum("...i,...i->...", n, n))[..., None] * n
        return self.space.tangent(point, vector)

    to_tangent_space = projection

    def euclidean_to_riemannian_gradient(self, point, euclidean_gradient):
        if self._induced:
            return self.projection(point, euclidean_gradient)
        return self.projection(point, euclidean_gradient @ self._W_inv)

    def euclidean_to_riemannian_hessian(self, point, euclidean_gradient, euclidean_hessian, tangent_vector):
        dot = np.einsum("...i,...i->...", point, euclidean_gradient)[..., None]
        if self._induced:
            n = point @ self._W
            nn = np.linalg.norm(n, axis=-1, keepdims=True)
            nu_g = np.einsum("...i,...i->...", n, euclidean_gradient)[..., None] / nn
            return self.projection(point, euclidean_hessian) - nu_g * self.projection(point, tangent_vector @ self._W) / nn
        return self.projection(point, euclidean_hessian @ self._W_inv) - dot * tangent_vector

    # --- maps -----------------------------------------------------------------------------------
    def retraction(self, point, tangent_vector):
        return self.space.retract(point + tangent_vector)

    def exp(self, point, tangent_vector):
        return self.space.metric.exp(tangent_vector, point)

    def log(self, point_a, point_b):
        return self.space.metric.log(point_b, point_a)

    def dist(self, point_a, point_b):
        return float(np.sqrt(np.sum(self.space.metric.dist(point_a, point_b) ** 2)))

    def transport(self, point_a, point_b, tangent_vector_a):
        return self.projection(point_b, tangent_vector_a)

    def random_point(self):
        return self.space.retract(np.random.normal(size=self._shape) @ self.space.inv_sqrt_W)

    def random_tangent_vector(self, point):
        v = self.projection(point, np.random.normal(size=self._shape))
        return v / self.norm(point, v)

    def zero_vector(self, point):
        return np.zeros(self._shape)

    def pair_mean(self, point_a, point_b):
        return self.space.retract(point_a + point_b)
