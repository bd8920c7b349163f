"""Newton's method for grad E_beta = 0 and the ascent of the random starts (critical-point search).

Private module of :mod:`riemattn.analysis.critical_points` (which re-exports :func:`newton_search`,
its documented home). Both work on the rescaled energy e^{-beta} E_beta (kernel
exp(beta (<x_i, x_j> - 1)), finite at every beta; :func:`riemattn.analysis.hessians.energy_hessian`
with ``rescaled=True``): the damped Newton step, its acceptance test and the convergence test are
invariant under scaling the gradient and the Hessian by the same factor (with the damping mu
scaled by its square), so the iterates are those of the plain energy -- only the gradient norm that
is returned is multiplied by e^beta for the plain energy, and refused where that exceeds the float
range.
"""

from __future__ import annotations

import numpy as np

from .._validation import check_beta, check_int, check_points, check_positive, check_rescaled, check_token_array
from ..errors import ValidationError
from ..geometry.manifolds import Sphere
from .hessians import energy_hessian

__all__ = ["ascend", "newton_search", "plain_scale"]


def plain_scale(beta: float, rescaled: bool, what: str) -> float:
    """e^beta, the factor from the rescaled energy's derivatives to the plain ones (1 if ``rescaled``);
    beyond the float range (beta > ~709.78) a ValidationError names beta and ``rescaled``."""
    if rescaled:
        return 1.0
    with np.errstate(over="ignore"):
        scale = np.exp(beta)
    if not np.isfinite(scale):
        raise ValidationError(
            f"{what} at beta = {beta}: E_beta and its derivatives (of size e^beta / n) exceed the float "
            "range; use rescaled=True (e^-beta E_beta, finite at every beta)."
        )
    return float(scale)


def _state(x, beta):
    H = energy_hessian(x, beta, "standard", rescaled=True)
    M, B = H.matrix()
    g = np.einsum("...aij,...ij->...a", B, H.grad)
    return M, B, g


def newton_search(x0, beta, *, max_iter: int = 100, gtol: float = 1e-14, max_step: float = 0.5,
                  polish: int = 3, rescaled: bool = False):
    """Damped Riemannian Newton iterations for grad E_beta = 0 from a batch of starts.

    Each step solves ``(M^2 + mu I) eta = -M g`` in an orthonormal tangent basis (M the round-metric
    Hessian, g the gradient), i.e. Newton's step where ``|eigenvalue| >> sqrt(mu)`` and a short
    gradient-like step elsewhere, caps the move of every token at ``max_step``, retracts
    ``x_i <- x_i / |x_i|``, and accepts the step iff ``|grad|`` decreases (then ``mu /= 10``, else
    ``mu *= 10``).

    Parameters
    ----------
    x0 : array_like, shape (..., n, d), on the sphere
        The starts; not modified (the search works on a copy).
    beta : float, >= 0
    max_iter : int
    gtol : float
        Converged when |grad E_beta| <= gtol * e^beta / n (e^beta / n is the size of the Hessian at
        consensus, the natural scale of E_beta's derivatives; rescaled: |grad| <= gtol / n).
    max_step : float
        Largest Euclidean move of a token per step (trust radius).
    polish : int
        Extra iterations after convergence (steps accepted only if |grad| decreases), which bring
        the points to the rounding floor so that duplicates agree closely.
    rescaled : bool, default False
        Return the gradient norm of e^{-beta} E_beta (finite at every beta) instead of E_beta's.
        The iterates are the same: the search always runs on the rescaled energy, whose Newton
        steps and tests are those of E_beta (scale invariance); plain at beta > ~709.78, where
        e^beta overflows, raises ValidationError naming beta.

    Returns
    -------
    x : ndarray, shape (..., n, d)
    grad_norm : ndarray, shape (...)
        |grad E_beta| (rescaled: |grad e^{-beta} E_beta|) for the round metric at the returned points.
    converged : ndarray of bool, shape (...)

    References
    ----------
    GLPR (Geshkovski, Letrouit, Polyanskiy, Rigollet), eq. (3.5) and Problem 3; theory and limits:
    docs/theory/critical_points.md.
    """
    beta = check_beta(beta)
    rescaled = check_rescaled(rescaled)
    x = check_token_array(x0, "x0")  # real, finite, (..., n, d): then on the sphere of that d
    # a copy: the iterations write into x (x0 itself is never changed, and may be read-only)
    x = np.array(check_points(x, "x0", Sphere(max(x.shape[-1] - 1, 1))), dtype=float, copy=True)
    check_positive(gtol, "gtol")
    check_positive(max_step, "max_step")
    max_iter = check_int(max_iter, "max_iter", 0)
    polish = check_int(polish, "polish", 0)
    plain = plain_scale(beta, rescaled, "newton_search")
    lead, n = x.shape[:-2], x.shape[-2]
    x = x.reshape((-1,) + x.shape[-2:])
    scale = 1.0 / n  # of the rescaled derivatives (the plain ones: e^beta / n)
    M, B, g = _state(x, beta)
    gn = np.linalg.norm(g, axis=-1)
    mu = np.full(len(x), 1e-4 * scale**2)
    extra = np.zeros(len(x), dtype=int)
    for it in range(max_iter + polish):
        done = gn <= gtol * scale
        active = (((~done) & (it < max_iter)) | (done & (extra < polish))) & (mu < 1e12 * scale**2)
        extra += done
        if not active.any():
            break
        lam, U = np.linalg.eigh(M[active])
        coef = lam / (lam**2 + mu[active, None])
        eta_c = -np.einsum("...ab,...b->...a", U, coef * np.einsum("...ba,...b->...a", U, g[active]))
        eta = np.einsum("...a,...aij->...ij", eta_c, B[active])
        step = np.max(np.linalg.norm(eta, axis=-1), axis=-1)
        eta *= np.minimum(1.0, max_step / np.maximum(step, 1e-300))[:, None, None]
        y = x[active] + eta
        y /= np.linalg.norm(y, axis=-1, keepdims=True)
        M1, B1, g1 = _state(y, beta)
        gn1 = np.linalg.norm(g1, axis=-1)
        ok = gn1 < gn[active]
        idx = np.flatnonzero(active)
        acc = idx[ok]
        x[acc], M[acc], B[acc], g[acc], gn[acc] = y[ok], M1[ok], B1[ok], g1[ok], gn1[ok]
        mu[acc] = np.maximum(mu[acc] / 10, 1e-24 * scale**2)
        mu[idx[~ok]] *= 10
    conv = gn <= gtol * scale
    return x.reshape(lead + x.shape[-2:]), (plain * gn).reshape(lead), conv.reshape(lead)


def ascend(x, beta, steps, tau: float = 0.5):
    """Projected gradient ascent of E_beta, ``steps[b]`` steps of size tau n / (e^beta (1 + beta)).

    Written with the rescaled gradient (e^{-beta} times E_beta's) and the step tau n / (1 + beta):
    the same steps, finite at every beta.
    """
    h = tau * x.shape[-2] / (1.0 + beta)
    for s in range(int(np.max(steps, initial=0))):
        live = steps > s
        g = energy_hessian(x[live], beta, "standard", rescaled=True).grad
        y = x[live] + h * g
        x[live] = y / np.linalg.norm(y, axis=-1, keepdims=True)
    return x


newton_search.__module__ = "riemattn.analysis.critical_points"  # documented there
