r"""Attention rollout: the cumulative influence of each token on each other, through layers or along a solve.

Re-exported by :mod:`riemattn.analysis.diagnostics` (``riemattn.diagnostics.rollout`` and
``riemattn.diagnostics.rollout_ode``).

The attention field's centred update on the tokens is linear in them for fixed weights: with the
identity values, ``sum_eta sum_j alpha_ij^eta (y_j - y_i) = (G y)_i`` with the generator

.. math::  G = \sum_\eta \big(A^\eta - \operatorname{diag}(A^\eta \mathbf 1)\big),

whose rows sum to 0. One layer (``"layer"`` stepper, step tau) maps the tokens by ``I + tau G``:
for one head with row-stochastic attention that is the residual form ``(1 - tau) I + tau A``. The
*rollout* is the product of these maps through the layers,

.. math::  R_k = M_k M_{k-1} \cdots M_1,\qquad M_k = I + \tau G_k \ \text{(residual)}
           \ \text{ or }\ M_k = A_k \ \text{(attention only, Wu et al.'s } P^{(t)}),

and ``[R_k]_ij`` is the influence of token j on token i after k layers. Letting tau -> 0 with
t = k tau, ``R(t + tau) = (I + tau G(t)) R(t)`` becomes the matrix ODE

.. math::  \dot R(t) = G(t)\, R(t),\qquad R(t_0) = I,

the rollout of a continuous solve (:func:`rollout_ode`): G(t) is the generator at the solution's
tokens y(t). Its rows sum to 1 for all t (G 1 = 0), and for row-stochastic attention its entries
stay nonnegative (G has nonnegative off-diagonal entries). On the sphere and ellipsoids the field
also projects the update on the tangent space; the rollout follows the attention's mixing, as the
position-bias papers compute it, not that projection.

References
----------
S. Abnar, W. Zuidema, "Quantifying attention flow in transformers", ACL 2020 (attention rollout with
the residual). X. Wu, Y. Wang, S. Jegelka, A. Jadbabaie, "On the emergence of position bias in
transformers", ICML 2025 (the product P^(t) of the layers' attention).
"""

from __future__ import annotations

import numpy as np

from .._validation import as_float_array, check_finite, check_positive, check_real
from ..errors import InputTypeError, ValidationError

__all__ = ["rollout", "rollout_ode", "generator"]


def generator(A) -> np.ndarray:
    """G = sum over heads of (A^eta - diag(A^eta 1)), shape (..., l, l), from A of shape (..., h, l, l)."""
    A = np.asarray(A, dtype=float)
    rows = A.sum(-1)  # (..., h, l)
    G = A.sum(-3)
    idx = np.arange(A.shape[-1])
    G[..., idx, idx] -= rows.sum(-2)
    return G


def _attention(attention, name="attention") -> np.ndarray:
    A = check_finite(as_float_array(attention, name), name)
    if A.ndim < 3 or A.shape[-1] != A.shape[-2] or A.shape[-1] < 1 or A.shape[0] < 1:
        raise ValidationError(f"{name} must have shape (T, ..., l, l) with T >= 1 layers of square attention "
                              f"matrices, got shape {A.shape}.")
    return A


def rollout(attention, *, tau=None) -> np.ndarray:
    """Cumulative attention through the layers: R_k = M_k ... M_1 for k = 1..T, shape (T, ..., l, l).

    Parameters
    ----------
    attention : array_like, shape (T, ..., l, l)
        The attention matrix of each layer (heads already combined: e.g. ``A.sum(-3)`` of
        ``field.attention(t, y)`` for the sum over heads the update uses, or one head), any batch
        axes after the layer axis.
    tau : float, optional
        None (default): the attention-only product, M_k = A_k (Wu et al.'s P^(t)). A step tau: the
        residual form of one ``"layer"`` step, M_k = I + tau (A_k - diag(A_k 1)), which is
        (1 - tau) I + tau A_k for row-stochastic A_k.

    Returns
    -------
    ndarray, shape (T, ..., l, l)
        ``R[k - 1][..., i, j]``: the influence of token j on token i after k layers.

    Examples
    --------
    >>> import numpy as np, riemattn as ra
    >>> A = np.array([[[1.0, 0.0], [0.5, 0.5]]] * 3)   # causal, three layers
    >>> ra.diagnostics.rollout(A)[-1]
    array([[1.   , 0.   ],
           [0.875, 0.125]])
    """
    A = _attention(attention)
    if tau is not None:
        tau = check_positive(tau, "tau")
        idx = np.arange(A.shape[-1])
        M = tau * A
        M[..., idx, idx] += 1.0 - tau * A.sum(-1)
    else:
        M = A
    R = np.empty_like(M)
    R[0] = M[0]
    with np.errstate(over="ignore", invalid="ignore"):
        for k in range(1, len(M)):
            np.matmul(M[k], R[k - 1], out=R[k])
    if not np.isfinite(R).all():
        raise ValidationError("the rollout overflows the float range (entries of the attention or of "
                              "I + tau (A - diag(A 1)) far above 1, or tau too large); attention weights and "
                              "tau of order 1 are expected.")
    return R


def rollout_ode(field, solution, t, *, start=None, rtol: float = 1e-8, atol: float = 1e-10) -> np.ndarray:
    """The rollout of a continuous solve: R(t) solving dR/dt = G(t) R, R(t0) = I (module docstring).

    Parameters
    ----------
    field : AttentionField
        The field that was integrated (its ``attention`` gives G(t) at the solution's tokens).
    solution : Trajectory
        ``integrate(field, y0, (t0, t1), ..., dense_output=True)``: its dense output gives y(t).
    t : array_like, shape (k,)
        Increasing times at which R is returned, within the solution's saved times.
    start : float, optional
        The time where R = I (default: the first saved time, the solve's t0 unless ``saveat``
        left it out); at most ``t[0]``.
    rtol, atol : float
        Tolerances of SciPy's DOP853 on the l x l entries of R (per trajectory, all at once).

    Returns
    -------
    ndarray, shape (k, ..., l, l)
        R(t) for each time: ``[..., i, j]`` the influence of token j on token i since t0.
    """
    from scipy.integrate import solve_ivp

    if not hasattr(field, "attention"):
        raise InputTypeError(f"field must be an attention field (with .attention(t, y)), got {type(field).__name__}.")
    if not hasattr(solution, "interpolate") or not hasattr(solution, "t"):
        raise InputTypeError(f"solution must be the result of riemattn.integrate, got {type(solution).__name__}.")
    t = check_finite(as_float_array(t, "t"), "t")
    lo, hi = float(solution.t[0]), float(solution.t[-1])
    if t.ndim != 1 or t.size == 0 or np.any(np.diff(t) <= 0) or t[0] < lo or t[-1] > hi:
        raise ValidationError(f"t must be increasing times within the solve's saved times [{lo}, {hi}], got {t!r}.")
    t0 = lo if start is None else check_real(start, "start")
    if not lo <= t0 <= t[0]:
        raise ValidationError(f"start must lie in [{lo}, t[0] = {t[0]}], got {t0!r}.")
    rtol, atol = check_positive(rtol, "rtol"), check_positive(atol, "atol")
    y0 = solution.interpolate(t0)
    shape = np.shape(y0)[:-1] + (np.shape(y0)[-2],)  # (..., l, l)
    eye = np.broadcast_to(np.eye(shape[-1]), shape)

    def rhs(s, r):
        G = generator(field.attention(s, np.asarray(solution.interpolate(s))))
        return (G @ r.reshape(shape)).ravel()

    out = solve_ivp(rhs, (t0, float(t[-1])), eye.ravel().copy(), method="DOP853", t_eval=t, rtol=rtol, atol=atol)
    if not out.success:  # a linear ODE with bounded G: only tolerances below the rounding stop it
        raise ValidationError(f"rollout_ode: the matrix ODE did not reach t = {t[-1]} with rtol = {rtol:g}, "
                              f"atol = {atol:g} ({out.message}); loosen rtol / atol.")
    return np.moveaxis(out.y, -1, 0).reshape((len(t),) + shape)
