"""The functions behind :mod:`riemattn.analysis.gradient_flow`: metric, potential, energy, gradients.

* ARXIV section 3 (tokens on E_P = {x : x^T P x = 1}): the normalizers Z_i (:func:`normalizers`),
  the metric <X, Y>_g(x) = sum_i Z_i(x) X_i^T P Y_i (:func:`metric`, ARXIV eq. 9), the potential
  V(x) = -1/2 sum_{i,j} exp(x_i^T P x_j) (:func:`potential`, ARXIV eq. 10), the g-orthogonal
  projection onto T_y(E_P)^l (:func:`tangent_projection`) and the g- and g_P-gradients of any
  scalar function (:func:`ambient_gradient`, :func:`riemannian_gradient`).
* GLPR section 3 (sphere): the energy E_beta(x) = 1/(2 beta n^2) sum_{i,j} exp(beta <x_i, x_j>)
  (:func:`energy`) and the per-token weights Z_{beta,i}/n^2 of the metric in which (SA) is its
  gradient (:func:`energy_weights`), also rescaled by e^{-beta} and in log form, finite at every
  beta (implemented in the private ``riemattn.analysis._energy``, documented here).

Every name here is re-exported by :mod:`riemattn.analysis.gradient_flow`, whose docstring and
docs/gradient_flow.md give the theory; the gradient fields built from these functions live there.
Gradients of user functions come from autograd's Euclidean gradient (this module is the only
place in riemattn that imports autograd). The input checks are skipped while autograd traces, so
the public functions are differentiable.

PyTorch: every function also takes tokens as a tensor (any device, float64 recommended) and
returns tensors. The energies, the potential, the normalizers and the metric are then written in
torch and differentiable by ``torch.autograd`` (with respect to the tokens and to a tensor beta is
not supported: beta is a number); :func:`ambient_gradient` and :func:`riemannian_gradient` take
the Euclidean gradient of a torch function ``f`` with ``torch.autograd.grad`` (the result is a
value, not differentiated further). HIPS autograd and torch do not mix: a NumPy ``x`` needs an
``f`` written with ``autograd.numpy``, a tensor ``x`` one written with torch.
"""

from __future__ import annotations

from collections.abc import Callable

import autograd.numpy as anp
import numpy as np
from autograd import grad
from autograd.tracer import getval, isbox

from .._backend import convert, is_torch, namespace, to_numpy
from ._energy import energy, energy_weights
from ._pairs import chunked, pair_sum, row_sums
from ..dynamics._normalize import sinkhorn_potentials
from ._torch_ops import _P_like, _torch_gradient
from .._validation import (
    ON_MANIFOLD_ATOL, as_float_array, as_token_array, check_beta, check_choice, check_finite, check_int,
    check_positive, check_spd, check_token_array,
)
from ..errors import InputTypeError, ValidationError

__all__ = [
    "METRIC_NORMALIZATIONS",
    "ambient_gradient",
    "energy",
    "energy_weights",
    "metric",
    "normalizers",
    "potential",
    "riemannian_gradient",
    "sinkhorn_energy",
    "tangent_projection",
]

#: Choices of Z_i in the metric: "paper" sqrt(d) sum_j e^{x_i^T P x_j}, "softmax" sum_j e^{...},
#: "none" Z_i = 1 (the product of the P-inner products; with P = I the standard metric).
METRIC_NORMALIZATIONS = ("paper", "softmax", "none")


# ---------------------------------------------------------------------------------------------
# input checks (skipped while autograd traces, so the public functions are differentiable)
def _tokens(x, name: str, d: int | None = None):
    if isbox(x):
        return x
    x = check_token_array(x, name, allow_d0=True)
    if d is not None and x.shape[-1] != d:
        raise ValidationError(
            f"{name} has tokens in R^{x.shape[-1]} but P is {d} x {d} (shape {x.shape})."
        )
    return x


def _spd(P, name: str = "P"):
    return P if isbox(P) else check_spd(P, name)


def _mT(x):
    """Swap the last two axes (autograd.numpy or torch)."""
    return x.transpose(-1, -2) if is_torch(x) else anp.swapaxes(x, -1, -2)


def _ops(x):
    """The namespace for ``x``: autograd.numpy (NumPy arrays, autograd boxes) or torch's."""
    return namespace(x) if is_torch(x) else anp


def _same_shape(X, x, name: str):
    if isbox(X):
        return X
    if is_torch(x):
        X = check_finite(as_token_array(X, name) if is_torch(X) else convert(as_float_array(X, name), x), name)
    else:
        X = check_finite(as_float_array(X, name), name)
    if tuple(X.shape) != tuple(np.shape(x)):
        raise ValidationError(f"{name} must have the shape of x, {tuple(np.shape(x))}, got {tuple(X.shape)}.")
    return X


def _on_manifold(y, P, name: str = "y"):
    dev = float(np.max(np.abs(np.einsum("...i,ij,...j->...", to_numpy(y), P, to_numpy(y)) - 1.0)))
    if dev > ON_MANIFOLD_ATOL:
        raise ValidationError(
            f"{name} must lie on E_P (|y_i^T P y_i - 1| <= {ON_MANIFOLD_ATOL:g}), got max deviation "
            f"{dev:.3g}; normalize it with riemattn.Ellipsoid(P).projection."
        )


def _xP(x, P):
    """The rows x_i^T P (autograd-traceable; torch for tensors): x_i^T P x_j = <(x P)_i, x_j>."""
    return x @ _P_like(P, x) if is_torch(x) else anp.matmul(x, P)


def _scores(x, P):
    """S[..., i, j] = x_i^T P x_j (autograd-traceable; torch for tensors)."""
    if is_torch(x):
        return (x @ _P_like(P, x)) @ _mT(x)
    return anp.matmul(anp.matmul(x, P), anp.swapaxes(x, -1, -2))


# ---------------------------------------------------------------------------------------------
def normalizers(x, P, normalization: str = "paper"):
    """Per-token weights Z_i(x) of the metric (and the attention's normalizers).

    Parameters
    ----------
    x : array_like, shape (..., l, d)
        Tokens in R^d (need not lie on E_P).
    P : array_like, shape (d, d)
        Symmetric positive definite matrix.
    normalization : {"paper", "softmax", "none"}
        ``"paper"``: Z_i = sqrt(d) sum_j exp(x_i^T P x_j) (riemattn's default AttentionField);
        ``"softmax"``: Z_i = sum_j exp(x_i^T P x_j); ``"none"``: Z_i = 1.

    Returns
    -------
    Z : ndarray, shape (..., l)
        Row sums over tiles of 256 columns (``riemattn.analysis._pairs``): O(l) memory.

    References
    ----------
    ARXIV (Rodriguez Abella, Silvestre, Tabuada), eq. (8)-(9).
    """
    check_choice(normalization, "normalization", METRIC_NORMALIZATIONS)
    P = _spd(P)
    x = _tokens(x, "x", np.shape(P)[-1])
    if normalization == "none":
        return namespace(x).ones(tuple(x.shape[:-1]), dtype=x.dtype, device=x.device) if is_torch(x) \
            else anp.ones(anp.shape(x)[:-1])
    Z = chunked(lambda a, b: row_sums(a, b, lambda S: _ops(S).exp(S)), _xP(x, P), x)  # tiles: O(l) memory
    return Z * np.sqrt(np.shape(x)[-1]) if normalization == "paper" else Z


def metric(x, X, Y, P, normalization: str = "paper"):
    """The metric of ARXIV eq. (9): <X, Y>_g(x) = sum_i Z_i(x) X_i^T P Y_i.

    Parameters
    ----------
    x : array_like, shape (..., l, d)
        Base point in (R^d minus 0)^l; on (E_P)^l this is g_P.
    X, Y : array_like, shape (..., l, d)
        Tangent vectors at x.
    P : array_like, shape (d, d)
        Symmetric positive definite matrix.
    normalization : {"paper", "softmax", "none"}
        Which Z_i (see :func:`normalizers`). ``"paper"`` (Z_i with the factor sqrt(d)) is the one
        for which grad_{g_P} V_P = -Y_P holds exactly with ``AttentionField(P, W=P)``.

    Returns
    -------
    ndarray, shape (...)

    References
    ----------
    ARXIV, eq. (9) and Lemma 3.1.
    """
    P = _spd(P)
    x = _tokens(x, "x", np.shape(P)[-1])
    X, Y = _same_shape(X, x, "X"), _same_shape(Y, x, "Y")
    Z = normalizers(x, P, normalization)
    xp = _ops(x)
    return xp.sum(Z * xp.sum((X @ _P_like(P, X)) * Y if is_torch(X) else anp.matmul(X, P) * Y, axis=-1), axis=-1)


def potential(x, P):
    """The potential of ARXIV eq. (10): V(x) = -1/2 sum_{i,j} exp(x_i^T P x_j).

    V_P is its restriction to (E_P)^l. Written with autograd.numpy, so it can be differentiated.
    Summed over tiles of 256 x 256 pairs, so no l x l array is formed (O(l) memory; the sum of
    one matrix up to 256 tokens).

    Parameters
    ----------
    x : array_like, shape (..., l, d)
    P : array_like, shape (d, d), symmetric positive definite

    Returns
    -------
    ndarray, shape (...)

    References
    ----------
    ARXIV, eq. (10), Lemma 3.2, Theorem 3.1.
    """
    P = _spd(P)
    x = _tokens(x, "x", np.shape(P)[-1])
    return -0.5 * chunked(lambda a, b: pair_sum(a, b, lambda S: _ops(S).exp(S)), _xP(x, P), x)  # tiles: O(l) memory


def sinkhorn_energy(x, P, beta=1.0, *, iters: int = 10000, tol: float = 1e-13):
    r"""The Sinkformers energy: half the entropic optimal-transport cost of the tokens to themselves.

    For the empirical measure mu = (1/l) sum_i delta_{x_i}, the cost c(x, y) = -beta x^T P y and
    entropy weight 1 (Sander et al. 2022, section 4)::

        F(x) = 1/2 OT(mu, mu),   OT = max_{f,g} <f, mu> + <g, mu> - <exp(f + g - c) - 1, mu x mu>
             = 1/2 [mean_i (a_i + b_i) + log l]

    with alpha_ij = exp(a_i + beta x_i^T P x_j + b_j) the doubly stochastic (Sinkhorn) scaling.
    For symmetric P the envelope theorem gives ``dF/dx_k = -(beta / l) sum_j alpha_kj P x_j``: the
    Sinkhorn attention field with U = P, ``AttentionField(P, P, normalization="sinkhorn",
    beta=beta)``, is ``-(l / beta)`` times the gradient of F (projected on the sphere or an
    ellipsoid), so F decreases along it (the Wasserstein gradient flow of F for the particles).

    Written with autograd.numpy (usable as ``f`` of :class:`~riemattn.analysis.gradient_flow.GradientField`
    with weights ``beta / l``): the potentials (a, b) are computed from the values of x (log-domain
    iterations, at most ``iters`` sweeps, columns to ``tol``) and held fixed while differentiating,
    which is the exact derivative at convergence (envelope theorem).

    Parameters
    ----------
    x : array_like, shape (..., l, d)
    P : array_like, shape (d, d), symmetric
    beta : float, >= 0, default 1.0
    iters, tol : int >= 1, float > 0
        Sinkhorn sweeps and column-sum tolerance of the potentials.

    Raises
    ------
    InputTypeError
        For a torch tensor x (NumPy/autograd only) or non-numeric arguments.
    ValidationError
        For NaN/inf, a negative beta, iters < 1, tol <= 0, or scores beta x_i^T P x_j that overflow.

    Returns
    -------
    ndarray, shape (...)

    References
    ----------
    Sander, Ablin, Blondel, Peyre, "Sinkformers: Transformers with doubly stochastic attention",
    AISTATS 2022, Proposition 2 (the gradient-flow structure for a symmetric key-query matrix).
    """
    if not isbox(P):
        P = check_finite(as_float_array(P, "P"), "P")
        if P.ndim != 2 or P.shape[0] != P.shape[1] or not np.allclose(P, P.T, rtol=0, atol=1e-12 * max(1.0, np.abs(P).max())):
            raise ValidationError(f"P must be a symmetric (d, d) matrix (the Sinkformers energy needs it), got {np.shape(P)}.")
    if is_torch(x):
        raise InputTypeError("x must be a NumPy array (sinkhorn_energy is written with autograd.numpy), "
                             "got a torch tensor; pass x.detach().cpu().numpy().")
    beta = check_beta(beta)
    iters, tol = check_int(iters, "iters", 1), check_positive(tol, "tol")
    x = _tokens(x, "x", np.shape(P)[-1])
    S = beta * _scores(x, P)
    if not np.all(np.isfinite(getval(S))):
        raise ValidationError(f"beta x_i^T P x_j overflows (not finite) for these x and beta = {beta!r}; "
                              "expected tokens of moderate norm (on the sphere or an ellipsoid).")
    a, b, _ = sinkhorn_potentials(np.asarray(getval(S), dtype=float)[..., :, None, :], iters, tol)
    a, b = a[..., :, 0, 0], b[..., 0, 0, :]  # (..., l)
    l = np.shape(x)[-2]
    dual = anp.mean(a, -1) + anp.mean(b, -1) - anp.sum(anp.exp(a[..., :, None] + S + b[..., None, :]), axis=(-2, -1)) / l
    return 0.5 * (dual + 1.0 + np.log(l))


def tangent_projection(y, X, P):
    """The g-orthogonal projection onto T_y(E_P)^l: (I - y_i y_i^T P) X_i = T_y pi_P . X (Lemma 3.1).

    Because the metric is block diagonal, token i weighted by Z_i times the P-inner product, the
    projection is the same for every choice of Z_i.

    Parameters
    ----------
    y : array_like, shape (..., l, d), on (E_P)^l
    X : array_like, shape (..., l, d)
    P : array_like, shape (d, d), symmetric positive definite

    Returns
    -------
    ndarray, shape (..., l, d)

    References
    ----------
    ARXIV, Lemma 3.1; ICML eq. (3).
    """
    P = check_spd(P, "P")
    y = _tokens(y, "y", P.shape[0])
    X = _same_shape(X, y, "X")
    _on_manifold(y, P)
    return X - ((y @ _P_like(P, y)) * X).sum(axis=-1, keepdims=True) * y


def _euclidean_gradient(f: Callable, x: np.ndarray) -> np.ndarray:
    if not callable(f):
        raise InputTypeError(f"f must be a callable f(x) -> scalar(s), got {type(f).__name__}.")
    if is_torch(x):
        return _torch_gradient(f, x)
    try:
        G = grad(lambda z: anp.sum(f(z)))(x)
    except Exception as exc:
        raise ValidationError(
            f"autograd could not differentiate f at x of shape {x.shape}: {exc!r}. Write f with "
            "autograd.numpy (import autograd.numpy as anp) and return shape x.shape[:-2] or a scalar."
        ) from exc
    G = np.asarray(G, dtype=float)
    if G.shape != x.shape or not np.all(np.isfinite(G)):
        raise ValidationError(f"the gradient of f at x is not a finite array of shape {x.shape}.")
    return G


def ambient_gradient(f: Callable, x, P, normalization: str = "paper") -> np.ndarray:
    """The g-gradient on (R^d minus 0)^l of a scalar function: (Z_i P)^{-1} df/dx_i.

    Parameters
    ----------
    f : callable
        ``f(x) -> scalar`` written with ``autograd.numpy``; for a batch ``x`` it may return one value
        per configuration, shape ``x.shape[:-2]`` (the gradient of their sum is taken, which is the
        per-configuration gradient when configurations do not interact).
    x : array_like, shape (..., l, d)
    P : array_like, shape (d, d), symmetric positive definite
    normalization : {"paper", "softmax", "none"}

    Returns
    -------
    ndarray, shape (..., l, d)

    References
    ----------
    ARXIV, eq. (9), Lemma 3.2 (grad_g V = -X_P).
    """
    P = check_spd(P, "P")
    x = _tokens(x, "x", P.shape[0])
    G = _euclidean_gradient(f, x)
    Z = normalizers(x, P, normalization)
    if is_torch(x):
        return namespace(x).linalg.solve(_P_like(P, x), _mT(G)).transpose(-1, -2) / Z.detach()[..., None]
    return np.linalg.solve(P, np.swapaxes(G, -1, -2)).swapaxes(-1, -2) / Z[..., None]


def riemannian_gradient(f: Callable, x, P, normalization: str = "paper") -> np.ndarray:
    """The g_P-Riemannian gradient on (E_P)^l of a scalar function ``f``, via autograd.

    grad_{g_P} f(y)_i = (I - y_i y_i^T P) (Z_i(y) P)^{-1} df/dx_i(y): the g-orthogonal projection
    (Lemma 3.1) of the ambient g-gradient, which is the gradient of the restriction f o i_P.

    Parameters
    ----------
    f : callable
        ``f(x) -> scalar`` (or shape ``x.shape[:-2]`` for a batch), written with ``autograd.numpy``.
    x : array_like, shape (..., l, d)
        Configuration(s) on (E_P)^l (|x_i^T P x_i - 1| <= 1e-8).
    P : array_like, shape (d, d), symmetric positive definite
    normalization : {"paper", "softmax", "none"}
        The Z_i of the metric. With ``"paper"``,
        ``riemannian_gradient(lambda x: potential(x, P), y, P)``
        equals ``-AttentionField(P, W=P)(0, y)`` (Theorem 3.1); with ``"none"`` and P = I it is the
        gradient for the standard metric of (S^(d-1))^l.

    Returns
    -------
    ndarray, shape (..., l, d)

    References
    ----------
    ARXIV, Lemma 3.1, Lemma 3.2, Theorem 3.1.
    """
    P = check_spd(P, "P")
    x = _tokens(x, "x", P.shape[0])
    _on_manifold(x, P, "x")
    G = ambient_gradient(f, x, P, normalization)
    return G - ((x @ _P_like(P, x)) * G).sum(axis=-1, keepdims=True) * x
