r"""The ellipsoid E_W = {x : x^T W x = 1} as a hypersurface of Euclidean R^d: curvature from the
Gauss equation, and the perimeter of the ellipse (d = 2).

With the metric induced by the ambient dot product, the unit normal at x is N = W x / |W x| and
the second fundamental form and shape operator are, on tangent vectors X, Y (X . W x = 0),

    II(X, Y) = <D_X N, Y> = X^T W Y / |W x|,        S X = P W X / |W x|,

P = I - N N^T the orthogonal projection onto T_x E_W. In ambient coordinates both are the matrix
A = P W P / |W x| (extended by zero on the normal direction). The Gauss equation gives the
curvature in geomstats' convention (R(X, Y)Z = <Y, Z> X - <X, Z> Y on the unit sphere):

    R(X, Y)Z = II(Y, Z) S X - II(X, Z) S Y,
    K(X, Y) = (II(X, X) II(Y, Y) - II(X, Y)^2) / (|X|^2 |Y|^2 - (X . Y)^2),
    Ric = tr(A) A - A^2,     scalar = tr(A)^2 - tr(A^2),

and in d = 3 the Gaussian curvature K = scalar / 2 = det(W) / |W x|^4 (for W = diag(a^-2, b^-2,
c^-2) the classical 1 / (a^2 b^2 c^2 (x^2/a^4 + y^2/b^2 + z^2/c^4)^2)). The round sphere W = I
gives A = P, K = 1. The W-metric's tensors (:mod:`riemattn.geometry.metrics`) share
:func:`riemann_from` with (G, P) in place of (A, A).

References
----------
M. P. do Carmo, *Riemannian Geometry*, Birkhauser 1992, chapter 6 (the second fundamental form,
the Gauss equation, Proposition 3.1 and Theorem 2.5); M. P. do Carmo, *Differential Geometry of
Curves and Surfaces*, 1976, section 3-3 (the ellipsoid's Gaussian curvature).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import special

from .._backend import namespace
from .._precision import _cond_W
from .._validation import as_float_array
from ..errors import ValidationError
from ._fast import check_broadcast
from ._safe import check_plane


def riemann_from(G, P):
    """R[..., i, j, k, l] = G_ki P_lj - G_ji P_lk, shape (..., d, d, d, d).

    The (1, 3) tensor of R(X, Y)Z = g(Y, Z) S X - g(X, Z) S Y with g = G, S = P in ambient
    coordinates (geomstats' index convention dx^l(R(X_j, X_k) X_i)).
    """
    Pt = namespace(P).matrix_transpose(P)
    first = G[..., :, None, :, None] * Pt[..., None, :, None, :]
    second = G[..., :, :, None, None] * Pt[..., None, None, :, :]
    return first - second


def shape_operator(W: np.ndarray, x: np.ndarray):
    """(A, P): A = P W P / |W x| (the second fundamental form and the shape operator in ambient
    coordinates) and P = I - N N^T, N = W x / |W x|; shapes (..., d, d)."""
    n = x @ W
    nn = np.linalg.norm(n, axis=-1)
    N = n / nn[..., None]
    P = np.eye(x.shape[-1]) - N[..., :, None] * N[..., None, :]
    A = P @ W @ P / nn[..., None, None]
    return A, P


def ellipse_perimeter(W: np.ndarray) -> float:
    """The length of the ellipse {x in R^2 : x^T W x = 1}: 4 a E(1 - b^2 / a^2), a >= b its
    semi-axes 1 / sqrt(lambda) and E SciPy's complete elliptic integral of the second kind
    (relative error ~1e-16)."""
    lam = np.linalg.eigvalsh(W)
    a, b = 1.0 / math.sqrt(lam[0]), 1.0 / math.sqrt(lam[-1])
    return 4.0 * a * float(special.ellipe(1.0 - (b / a) ** 2))


class GaussCurvature:
    """Curvature methods of the induced metric on E_W from the Gauss equation (a mixin for a
    geomstats RiemannianMetric whose ``_space`` is an Ellipsoid). NumPy in, NumPy out (CPU torch
    tensors are read as NumPy values). Tangent arguments are first projected onto T_x E_W (the
    orthogonal projection P, as ``exp`` does)."""

    def _gauss(self, base_point):
        if base_point is None:
            raise ValidationError("base_point is required: the induced metric's curvature depends on the point.")
        x = as_float_array(self._space.check_point(base_point), "base_point")
        return x, shape_operator(self._space.W, x)

    def _tangents(self, names, vectors, x, P):
        arrays = [as_float_array(self._space.check_vector(v, n), n) for v, n in zip(vectors, names)]
        check_broadcast((x, *arrays), ("base_point", *names))
        return [np.einsum("...ij,...j->...i", P, a) for a in arrays]

    def curvature(self, tangent_vec_a, tangent_vec_b, tangent_vec_c, base_point=None):
        """R(a, b)c = II(b, c) S a - II(a, c) S b (Gauss equation), shape (..., d)."""
        x, (A, P) = self._gauss(base_point)
        a, b, c = self._tangents(("tangent_vec_a", "tangent_vec_b", "tangent_vec_c"),
                                 (tangent_vec_a, tangent_vec_b, tangent_vec_c), x, P)
        Sa, Sb = (np.einsum("...ij,...j->...i", A, v) for v in (a, b))
        Ac = np.einsum("...ij,...j->...i", A, c)
        return _dot(b, Ac)[..., None] * Sa - _dot(a, Ac)[..., None] * Sb

    def sectional_curvature(self, tangent_vec_a, tangent_vec_b, base_point=None):
        """K(a, b) = (II(a, a) II(b, b) - II(a, b)^2) / (|a|^2 |b|^2 - (a . b)^2), shape (...).

        Linearly dependent a, b (after projection; a zero vector included) span no plane: a
        ValidationError naming them (the rule of the W-metric's, ``riemattn.geometry._safe``)."""
        x, (A, P) = self._gauss(base_point)
        a, b = self._tangents(("tangent_vec_a", "tangent_vec_b"), (tangent_vec_a, tangent_vec_b), x, P)
        # Gram-Schmidt first: b' = b - (a . b / a . a) a spans the same plane, and the quotient is then
        # of two well-separated numbers (its error ~ eps / sin(angle), the input's own conditioning)
        aa, bb, ab = _dot(a, a), _dot(b, b), _dot(a, b)
        check_plane(aa, bb, ab, x.shape[-1], _cond_W(self._space))
        b = b - (ab / aa)[..., None] * a
        Aa, Ab = np.einsum("...ij,...j->...i", A, a), np.einsum("...ij,...j->...i", A, b)
        return (_dot(a, Aa) * _dot(b, Ab) - _dot(a, Ab) ** 2) / (aa * _dot(b, b))

    def riemann_tensor(self, base_point=None):
        """R[..., i, j, k, l] = A_ki A_lj - A_ji A_lk (geomstats' R_ijk^l), shape (..., d, d, d, d)."""
        _, (A, _) = self._gauss(base_point)
        return riemann_from(A, A)

    def covariant_riemann_tensor(self, base_point=None):
        """R_ijkl = <R(X_k, X_l) X_j, X_i> = A_lj A_ik - A_kj A_il, shape (..., d, d, d, d)."""
        _, (A, _) = self._gauss(base_point)
        return A[..., None, :, None, :] * A[..., :, None, :, None] - A[..., None, :, :, None] * A[..., :, None, None, :]

    def ricci_tensor(self, base_point=None):
        """Ric = tr(A) A - A^2 (zero on the normal direction), shape (..., d, d)."""
        _, (A, _) = self._gauss(base_point)
        return np.trace(A, axis1=-2, axis2=-1)[..., None, None] * A - A @ A

    def scalar_curvature(self, base_point=None):
        """tr(A)^2 - tr(A^2); in d = 3 twice the Gaussian curvature det(W) / |W x|^4; shape (...)."""
        _, (A, _) = self._gauss(base_point)
        return np.trace(A, axis1=-2, axis2=-1) ** 2 - np.trace(A @ A, axis1=-2, axis2=-1)

    def curvature_derivative(self, tangent_vec_a, tangent_vec_b=None, tangent_vec_c=None, tangent_vec_d=None,
                             base_point=None):
        """Not implemented for the induced metric (NotImplementedError, not geomstats' autodiff error)."""
        raise NotImplementedError("curvature_derivative of the induced metric is not implemented.")


def _dot(a, b):
    return np.einsum("...i,...i->...", a, b)
