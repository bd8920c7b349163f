"""Gradient structure of attention: metric g_P, potential V_P, energies E_beta, gradient fields.

ARXIV section 3 (h = 1, U = I, P constant SPD, tokens on E_P, i.e. W = P)::

    dy_i/dt = sum_j alpha_ij(y) (y_j - (y_i^T P y_j) y_i),   alpha_ij = exp(y_i^T P y_j) / Z_i
    <X, Y>_g(x) = sum_i Z_i(x) X_i^T P Y_i                                   (ARXIV eq. 9)
    V(x)        = -1/2 sum_{i,j} exp(x_i^T P x_j)                              (ARXIV eq. 10)
    grad_g V = -X_P (Lemma 3.2),   grad_{g_P} V_P = -Y_P (Theorem 3.1)

The metric's Z_i must be the *same* normalizer as the attention's: with riemattn's default
``normalization="paper"`` (``Z_i = sqrt(d) sum_j exp(x_i^T P x_j)``) Theorem 3.1 is exact
against ``AttentionField(P, W=P)``; with ``"softmax"`` (no sqrt(d)) it is exact against
``AttentionField(P, W=P, normalization="softmax")``. Mixing the two is off by the factor sqrt(d).

GLPR section 3 (sphere, P = beta I): E_beta(x) = 1/(2 beta n^2) sum_{i,j} exp(beta <x_i, x_j>)
increases along (SA) and (USA); USA = n grad E_beta for the standard metric, and SA = grad E_beta
for the metric with per-token weights Z_{beta,i}/n^2 (see :func:`energy_weights`).

The functions (:func:`normalizers`, :func:`metric`, :func:`potential`, :func:`tangent_projection`,
:func:`ambient_gradient`, :func:`riemannian_gradient`, :func:`energy`, :func:`energy_weights`) are
implemented in :mod:`riemattn.analysis.gradients` and re-exported here; this module adds the gradient
flows as riemattn fields (:class:`GradientField`, :func:`arxiv_field`, :func:`potential_field`,
:func:`energy_field`). Gradients of user functions come from autograd's Euclidean gradient
(:mod:`riemattn.analysis.gradients` is the only module of riemattn that imports autograd); the rest is
plain NumPy. Theory and examples: docs/gradient_flow.md.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .._validation import check_beta, check_choice, check_flag, check_memory, check_points, check_size, check_spd, check_time
from ..dynamics.attention import AttentionField
from ..errors import InputTypeError
from ..dynamics.fields import Field
from .gradients import (
    METRIC_NORMALIZATIONS,
    ON_MANIFOLD_ATOL,  # noqa: F401  (re-exported: public name of this module)
    _euclidean_gradient,
    ambient_gradient,
    energy,
    energy_weights,
    metric,
    normalizers,
    potential,
    riemannian_gradient,
    sinkhorn_energy,
    tangent_projection,
)
from ..geometry.manifolds import Ellipsoid, Sphere

__all__ = [
    "METRIC_NORMALIZATIONS",
    "GradientField",
    "ambient_gradient",
    "arxiv_field",
    "energy",
    "energy_field",
    "energy_weights",
    "metric",
    "normalizers",
    "potential",
    "potential_field",
    "riemannian_gradient",
    "sinkhorn_energy",
    "tangent_projection",
]


# ---------------------------------------------------------------------------------------------
class GradientField(Field):
    """The gradient flow of a scalar function for a weighted metric, as a riemattn Field.

    On E_W (``manifold``) with the metric <X, Y>_x = sum_i w_i(x) X_i^T W Y_i::

        field(t, y)_i = sign * (I - y_i y_i^T W) (w_i(y) W)^{-1} df/dx_i(y)

    with sign = -1 (descent, default) or +1 (``ascent=True``). ``ambient_gradient(t, y)`` returns the un-projected
    ambient gradient. Any stepper of :func:`riemattn.integrate` integrates it.

    Parameters
    ----------
    f : callable
        ``f(x) -> shape x.shape[:-2]`` written with ``autograd.numpy`` (e.g. :func:`potential`).
    manifold : Sphere or Ellipsoid
        The manifold E_W of every token; W is also the matrix of the metric.
    weights : callable, optional
        ``weights(y) -> (..., l)`` positive per-token weights w_i (e.g. :func:`normalizers` or
        :func:`energy_weights`); None means w_i = 1.
    ascent : bool, default False
        Gradient ascent instead of descent.

    References
    ----------
    ARXIV, section 3.2; GLPR, Remark 3.8 and section 3.4.
    """

    def __init__(
        self, f: Callable, manifold, weights: Callable | None = None, *, ascent: bool = False
    ):
        if not callable(f):
            raise InputTypeError(f"f must be callable as f(x), got {type(f).__name__}.")
        if not isinstance(manifold, (Sphere, Ellipsoid)):
            raise InputTypeError(
                f"manifold must be a riemattn Sphere or Ellipsoid, got {type(manifold).__name__}."
            )
        if weights is not None and not callable(weights):
            raise InputTypeError(
                f"weights must be None or callable as weights(y), got {type(weights).__name__}."
            )
        self.f = f
        self.manifold = manifold
        self.weights = weights
        self.sign = 1.0 if check_flag(ascent, "ascent") else -1.0
        W = np.asarray(manifold.W, dtype=float)
        self._Winv = None if np.array_equal(W, np.eye(W.shape[0])) else np.linalg.inv(W)

    def ambient_gradient(self, t, y) -> np.ndarray:
        """The ambient metric gradient sign * (w_i W)^{-1} df/dx_i, shape (..., l, d)."""
        y, t = check_points(y, "y", self.manifold, on_manifold=False), check_time(t)
        G = _euclidean_gradient(self.f, y)
        if self._Winv is not None:
            G = G @ self._Winv
        if self.weights is not None:
            G = G / np.asarray(self.weights(y), dtype=float)[..., None]
        return self.sign * G

    def __call__(self, t, y) -> np.ndarray:
        """The Riemannian gradient field, tangent to (E_W)^l, shape (..., l, d)."""
        return self.manifold.tangent(y, self.ambient_gradient(t, y))

    def __repr__(self) -> str:
        return (
            f"GradientField({'ascent' if self.sign > 0 else 'descent'}, manifold={self.manifold!r})"
        )


def arxiv_field(P) -> AttentionField:
    """The ARXIV section 3 attention field: h = 1, U = I, constant SPD P, tokens on E_P (W = P).

    dy_i/dt = sum_j alpha_ij (y_j - (y_i^T P y_j) y_i),
    alpha_ij = e^{y_i^T P y_j} / (sqrt(d) sum_k e^{y_i^T P y_k})

    Parameters
    ----------
    P : array_like, shape (d, d), symmetric positive definite

    Returns
    -------
    AttentionField
        ``AttentionField(P, W=P, normalization="paper")``; equal to -grad_{g_P} V_P (Theorem 3.1).

    References
    ----------
    ARXIV, eq. (8), Theorem 3.1.

    Examples
    --------
    The field is minus the g_P-gradient of the potential V_P (Theorem 3.1):

    >>> import numpy as np
    >>> from riemattn import gradient_flow as gf
    >>> P = np.diag([2.0, 1.0, 0.5])
    >>> field = gf.arxiv_field(P)
    >>> y = field.manifold.projection(np.random.default_rng(0).standard_normal((4, 3)))
    >>> G = gf.riemannian_gradient(lambda x: gf.potential(x, P), y, P)
    >>> bool(np.allclose(G, -field(0.0, y)))
    True
    """
    P = check_spd(P, "P")
    return AttentionField(P, W=P, normalization="paper")


def potential_field(P, normalization: str = "paper") -> GradientField:
    """-grad_{g_P} V_P built from the potential (eq. 10) and the metric (eq. 9) by autograd.

    Equal to :func:`arxiv_field` (``normalization="paper"``) by Theorem 3.1, computed independently.

    Parameters
    ----------
    P : array_like, shape (d, d), symmetric positive definite
    normalization : {"paper", "softmax", "none"}

    References
    ----------
    ARXIV, eq. (9)-(10), Theorem 3.1.
    """
    P = check_spd(P, "P")
    check_choice(normalization, "normalization", METRIC_NORMALIZATIONS)
    return GradientField(
        lambda x: potential(x, P),
        Ellipsoid(P),
        weights=None if normalization == "none" else (lambda y: normalizers(y, P, normalization)),
    )


def energy_field(beta, d: int, model: str = "sa") -> GradientField:
    """The gradient ascent of E_beta on (S^(d-1))^n that equals GLPR's (SA) or (USA).

    ``model="sa"``: weights Z_{beta,i}/n^2 (:func:`energy_weights`); ``model="usa"``: weights 1/n,
    i.e. n times the gradient for the standard metric. ``energy_field(beta, d, m)(t, x)`` equals
    ``riemattn.sa(beta, d)(t, x)`` / ``riemattn.usa(beta, d)(t, x)``.

    Parameters
    ----------
    beta : float, >= 0
    d : int, 2 <= d <= 2**31 - 1
        With (d, d) matrices fitting in memory (ValidationError otherwise).
    model : {"sa", "usa"}

    References
    ----------
    GLPR, Remark 3.8 (eq. 3.11) and section 3.4 (eq. 3.12).
    """
    beta = check_beta(beta)
    check_choice(model, "model", ("sa", "usa"))
    d = check_size(d, "d", 2)
    check_memory((d, d), "d")  # the field's (d, d) matrices
    if model == "sa":
        weights = lambda y: energy_weights(y, beta)
    else:
        weights = lambda y: np.full(y.shape[:-1], 1.0 / y.shape[-2])
    return GradientField(
        lambda x: energy(x, beta, centered=True), Sphere(int(d) - 1), weights, ascent=True
    )
