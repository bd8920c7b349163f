"""GLPR's circle case (d = 2): (SA) and (USA) as ODEs on angles, and the Kuramoto connection.

With x_i = (cos theta_i, sin theta_i) on S^1, GLPR eq. (7.1)::

    (USA)  dtheta_i/dt = (1/n)       sum_j e^{beta cos(theta_i - theta_j)} sin(theta_j - theta_i)
    (SA)   dtheta_i/dt = (1/Z_{beta,i}) sum_j e^{beta cos(theta_i - theta_j)} sin(theta_j - theta_i)

Z_{beta,i} = sum_j e^{beta cos(theta_i - theta_j)}. beta = 0 gives the Kuramoto model with identical
natural frequencies and coupling K = 1 (both SA and USA). Both are gradient ascents of

    E_beta(theta) = 1/(2 beta n^2) sum_{i,j} e^{beta cos(theta_i - theta_j)}          (GLPR eq. 7.4)

USA: dtheta/dt = n grad E_beta; SA: dtheta_i/dt = (n^2 / Z_{beta,i}) dE_beta/dtheta_i (the metric
weights of :func:`riemattn.analysis.gradient_flow.energy_weights`).

Low temperature (``rescaled=True``, USA only): e^{-beta} times the USA equations and energy,

    dtheta_i/ds = (1/n) sum_j e^{beta (cos(theta_i - theta_j) - 1)} sin(theta_j - theta_i),
    e^{-beta} E_beta = 1/(2 beta n^2) sum_{i,j} e^{beta (cos(theta_i - theta_j) - 1)},

finite at every beta (the exponents are <= 0, and exactly 0 for coincident angles): the USA
trajectories in the time s = e^beta t. (SA is finite at every beta as it is.)

Causal mask (``mask="causal"``): token i attends to j <= i only (the sums over j run over j <= i,
Z_{beta,i} too; USA keeps the factor 1/n, as ``AttentionField(mask="causal")``): Karagodin,
Polyanskiy, Rigollet's causal self-attention on S^1. Token 1 sees only itself and does not move.
The causal equations are not a gradient flow; :meth:`CircleField.energy` stays the (unmasked) E_beta.

Evaluation (``evaluation="fourier"``): the same field through the Fourier moments
M_k = sum_j e^{i k theta_j} of the particles, with e^{beta cos D} sin D = (2/beta) sum_k k I_k(beta) sin(k D)
and e^{beta cos D} = I_0(beta) + 2 sum_k I_k(beta) cos(k D) (I_k the modified Bessel functions):

    sum_j e^{beta cos(theta_j - theta_i)} sin(theta_j - theta_i) = (2/beta) sum_{k=1}^K k I_k(beta) Im(e^{-i k theta_i} M_k),
    Z_{beta,i} = n I_0(beta) + 2 sum_{k=1}^K I_k(beta) Re(e^{-i k theta_i} M_k),

O(n K) operations instead of O(n^2) (prefix sums of the moments under the causal mask). K is the
least K >= max(1, ceil(beta)) at which the truncated tail, bounded by (2/beta) (K + 2) I_K(beta) per
term for the numerator and 2 I_K(beta) for Z (from I_{k+1}(x) <= x/(2(k+1)) I_k(x)), is at most eps
e^beta: below the rounding of the direct sums' largest weight (K = 25 at beta = 5, 36 at beta = 14,
ceil(beta) from beta ~ 100 on). Derivation: ``riemattn.dynamics._circle_fourier``. It applies to
the field (``field(t, theta)``); :meth:`CircleField.jacobian`, :meth:`CircleField.energy` and
:meth:`CircleField.energy_gradient` use the direct sums. The compiled engine runs the direct sums
only: it refuses ``evaluation="fourier"`` (UnsupportedByEngine; ``engine="auto"`` falls back to NumPy).

:meth:`CircleField.jacobian` is the closed-form Jacobian d(dtheta_i/dt)/dtheta_k, the matrix the
stiff steppers (``"rodas4p"``, ``"auto"``) linearise; :func:`riemattn.dynamics.jacobians.jacobian`
uses it.

Angles live on the flat torus: :class:`CircleField` is a :class:`~riemattn.dynamics.fields.Field`
on the flat line ``Euclidean(1)``, whose state is the angles as a column, shape (..., n, 1) (what
:func:`riemattn.integrate` passes), so every stepper integrates it (``integrate(field,
theta0[..., None], ...)``; the angles come back unwrapped). :meth:`CircleField.solve` integrates
with SciPy (high accuracy).

References
----------
Geshkovski, Letrouit, Polyanskiy, Rigollet, "A mathematical perspective on Transformers",
section 7.1 (eq. 7.1), section 7.2 (eq. 7.2-7.4).
Karagodin, Polyanskiy, Rigollet, "Clustering in causal attention masking", NeurIPS 2024
(arXiv 2411.04990), the causal system (CSA) with Q = K = V = I on S^1.
NIST DLMF 10.35.1 (the generating function e^{(z/2)(t + 1/t)} = sum_k t^k I_k(z), at t = e^{iD}).
"""

from __future__ import annotations

import contextlib

import numpy as np
from scipy.integrate import solve_ivp

from .._validation import (as_float_array, check_beta, check_choice, check_finite, check_positive, check_real,
                           check_rescaled, check_time, check_times)
from ..errors import InputTypeError, IntegrationError, ValidationError
from ..geometry.manifolds import Euclidean
from .._backend import convert, is_torch
from ._circle_fourier import fourier_field
from .fields import _CheckedField

__all__ = ["CircleField", "from_points", "to_points", "wrap"]


def _angles(theta, name: str = "theta") -> np.ndarray:
    theta = check_finite(as_float_array(theta, name), name)
    if theta.ndim < 1 or theta.shape[-1] == 0:
        raise ValidationError(
            f"{name} must have shape (..., n) with n >= 1 angles, got shape {theta.shape}."
        )
    return theta


def to_points(theta) -> np.ndarray:
    """(cos theta_i, sin theta_i): angles (..., n) -> points on S^1, shape (..., n, 2)."""
    theta = _angles(theta)
    return np.stack([np.cos(theta), np.sin(theta)], axis=-1)


def from_points(x) -> np.ndarray:
    """Angles atan2(x_i2, x_i1) in (-pi, pi] of points (..., n, 2), shape (..., n)."""
    x = check_finite(as_float_array(x, "x"), "x")
    if x.ndim < 2 or x.shape[-1] != 2:
        raise ValidationError(
            f"x must have shape (..., n, 2) (points in R^2), got shape {x.shape}."
        )
    return np.arctan2(x[..., 1], x[..., 0])


def wrap(theta) -> np.ndarray:
    """Angles reduced to (-pi, pi]; use wrap(a - b) to compare angles."""
    theta = check_finite(as_float_array(theta, "theta"), "theta")
    return np.angle(np.exp(1j * theta))


class CircleField(_CheckedField):
    """GLPR's angular equations (7.1) for (SA) or (USA) on the circle.

    Parameters
    ----------
    beta : float, >= 0
        Inverse temperature; 0 gives the Kuramoto model.
    model : {"sa", "usa"}
    rescaled : bool, default False
        ("usa" only) e^{-beta} times the USA equations: weights e^{beta (cos(theta_i - theta_j) - 1)} / n,
        finite at every beta; the USA trajectories in the time s = e^beta t (module docstring).
    mask : {"full", "causal"}, default "full"
        "causal": token i attends to tokens j <= i only (module docstring); the same equations as
        ``riemattn.sa(beta, 2, mask="causal")`` (``usa``) written in angles.
    evaluation : {"direct", "fourier"}, default "direct"
        How ``field(t, theta)`` sums over the particles: "direct", the O(n^2) pairwise sums;
        "fourier", O(n K) sums through the Fourier moments of the particles, truncated where the
        Bessel coefficients fall below rounding (module docstring; K = 25 at beta = 5, 36 at
        beta = 14): equal to the direct sums to rounding, faster for n well above beta. The Jacobian
        and the energy always use the direct sums; the compiled engine refuses "fourier"
        (``engine="auto"`` falls back to NumPy).

    Notes
    -----
    ``field(t, theta)`` maps angles (..., n) to their time derivatives (..., n); leading axes are
    independent configurations. An array with at least two axes whose last axis has length 1 is
    read as the :class:`~riemattn.dynamics.fields.Field` state (..., n, 1) (angles as a column, on
    ``Euclidean(1)``: what :func:`riemattn.integrate` passes) and the result has that shape too (so
    angles (..., n) of a single particle, n = 1, must be given as shape (...,)). The SA weights are
    computed as softmax (shifted by the maximum beta), so any beta is safe; plain USA overflows
    past beta ~ 700 (raises ValidationError naming beta; use ``rescaled=True``).

    References
    ----------
    GLPR, eq. (7.1), (7.2) and (7.4). Karagodin, Polyanskiy, Rigollet, NeurIPS 2024, (CSA) on S^1.
    """

    manifold = Euclidean(1)
    autonomous = True  # no time dependence: the stiff steppers skip the time derivative

    def __init__(self, beta: float = 1.0, model: str = "sa", *, rescaled: bool = False, mask: str = "full",
                 evaluation: str = "direct"):
        self.beta = check_beta(beta)
        self.model = check_choice(model, "model", ("sa", "usa"))
        self.rescaled = check_rescaled(rescaled, None if self.model == "usa" else "model='sa'")
        self.mask = check_choice(mask, "mask", ("full", "causal"))
        self.evaluation = check_choice(evaluation, "evaluation", ("direct", "fourier"))
        self._checked = True  # public calls validate the angles; integrate() steps an unchecked twin

    def take(self, index, batch_shape: tuple):
        """``self``: a trajectory's value depends only on its own angles."""
        return self

    def _kernel(self, diff, rescaled: bool, what: str):
        """e^{beta cos(diff)} (e^{beta (cos(diff) - 1)} when rescaled); an overflow raises naming beta."""
        with np.errstate(over="raise"):
            try:
                return np.exp(self.beta * (np.cos(diff) - 1.0)) if rescaled else np.exp(self.beta * np.cos(diff))
            except FloatingPointError:
                hint = " or model='sa'" if "weight" in what else ""
                raise ValidationError(f"{what} overflow at beta = {self.beta} (e^beta > 1.8e308); use "
                                      f"rescaled=True (e^-beta times it){hint}.") from None

    def _weights(self, theta):
        """w_ij = e^{beta cos(theta_i - theta_j)} / N_i (0 for j > i if causal) and theta_j - theta_i."""
        n = theta.shape[-1]
        diff = theta[..., None, :] - theta[..., :, None]  # [i, j] = theta_j - theta_i
        if self.model == "sa":
            E = np.exp(self.beta * (np.cos(diff) - 1.0))
            if self.mask == "causal":
                E = np.tril(E)
            return E / np.sum(E, axis=-1, keepdims=True), diff
        w = self._kernel(diff, self.rescaled, "USA weights") / n
        return (np.tril(w) if self.mask == "causal" else w), diff

    def __call__(self, t, theta) -> np.ndarray:
        """dtheta/dt, shape (..., n); the Field state (..., n, 1) gives shape (..., n, 1).

        Computed in NumPy; angles given as a torch tensor give a tensor of their dtype and device
        (values only, as every NumPy field: no gradient flows through), so that ``integrate`` can
        step a CircleField on tensors with the explicit steppers (the Rosenbrock steppers on tensors
        differentiate the field with torch's autograd, which NumPy code does not support: give them
        NumPy angles)."""
        like = theta
        theta = as_float_array(theta, "theta")
        column = theta.ndim >= 2 and theta.shape[-1] == 1
        if column:
            theta = theta[..., 0]
        if self._checked:
            theta = _angles(theta)
            check_time(t)
        # unchecked (inside integrate): non-finite angles give NaN, which the stepper reports
        with np.errstate(invalid="ignore") if not self._checked else contextlib.nullcontext():
            if self.evaluation == "fourier":
                out = fourier_field(theta, self.beta, self.model, self.rescaled, self.mask == "causal")
            else:
                w, diff = self._weights(theta)
                out = np.sum(w * np.sin(diff), axis=-1)
        out = out[..., None] if column else out
        return convert(out, like) if is_torch(like) else out

    def jacobian(self, t, theta) -> np.ndarray:
        """Closed-form Jacobian J_ik = d(dtheta_i/dt)/dtheta_k, shape (..., n, n).

        With w_ij the weights, s_ij = sin(theta_j - theta_i), c_ij = cos(theta_j - theta_i) and
        F_i = dtheta_i/dt: off the diagonal J_ik = w_ik (c_ik - beta s_ik^2 + beta s_ik F_i) for SA
        (the last term is the derivative of Z_{beta,i}) and w_ik (c_ik - beta s_ik^2) for USA; the
        diagonal is minus the sum of the row's other entries (a common rotation of all angles leaves
        the field unchanged). Masked entries (k > i, causal) are 0. The Field state (..., n, 1) gives
        the Field Jacobian layout (..., n, 1, n, 1) (what :func:`riemattn.dynamics.jacobians.jacobian`
        returns). Tensors in, a tensor out, as for the field's value ``field(t, theta)``.
        """
        like = theta
        theta = as_float_array(theta, "theta")
        column = theta.ndim >= 2 and theta.shape[-1] == 1
        theta = theta[..., 0] if column else theta
        if self._checked:  # unchecked (inside integrate): non-finite angles give NaN, as __call__
            theta = _angles(theta)
            check_time(t)
        w, diff = self._weights(theta)
        s, c = np.sin(diff), np.cos(diff)
        A = c - self.beta * s * s
        if self.model == "sa":
            A += self.beta * s * np.sum(w * s, axis=-1, keepdims=True)
        A *= w
        n = theta.shape[-1]
        idx = np.arange(n)
        A[..., idx, idx] = 0.0
        A[..., idx, idx] = -np.sum(A, axis=-1)
        A = A[..., :, None, :, None] if column else A
        return convert(A, like) if is_torch(like) else A

    def _rescaled(self, rescaled) -> bool:
        return self.rescaled if rescaled is None else check_rescaled(rescaled)

    def energy(self, theta, *, rescaled=None, log: bool = False) -> np.ndarray:
        """E_beta(theta) = 1/(2 beta n^2) sum_{i,j} e^{beta cos(theta_i - theta_j)}, shape (...).

        At beta = 0 the limit of E_beta - 1/(2 beta), the Kuramoto energy
        1/(2n^2) sum cos(theta_i - theta_j).
        Equal to :func:`riemattn.analysis.gradient_flow.energy` of :func:`to_points` (theta), with
        the same options: ``rescaled`` (default: the field's own) gives e^{-beta} E_beta, finite
        at every beta; ``log=True`` the natural log (of the plain or rescaled energy; beta > 0).
        """
        theta = _angles(theta)
        rescaled, n = self._rescaled(rescaled), theta.shape[-1]
        diff = theta[..., None, :] - theta[..., :, None]
        c = np.cos(diff)
        if log:
            if self.beta == 0.0:
                raise ValidationError("energy(log=True) needs beta > 0 (E_beta = +inf at beta = 0).")
            S = self.beta * (c - 1.0)  # <= 0, and 0 on the diagonal
            lse = np.log(np.sum(np.exp(S), axis=(-2, -1)))
            return lse - np.log(2.0 * n * n) - np.log(self.beta) + (0.0 if rescaled else self.beta)
        if self.beta == 0.0:
            return np.sum(c, axis=(-2, -1)) / (2.0 * n * n)
        K = self._kernel(diff, rescaled, "energy terms")
        return np.sum(K, axis=(-2, -1)) / (2.0 * n * n) / self.beta

    def energy_gradient(self, theta, *, rescaled=None) -> np.ndarray:
        """dE_beta/dtheta_i = (1/n^2) sum_j e^{beta cos(theta_i - theta_j)} sin(theta_j - theta_i).

        Shape (..., n); ``rescaled`` (default: the field's own) gives e^{-beta} times it.

        So USA = n * this and SA = (n^2 / Z_{beta,i}) * this (a gradient ascent in a weighted metric).
        """
        theta = _angles(theta)
        n = theta.shape[-1]
        diff = theta[..., None, :] - theta[..., :, None]
        K = self._kernel(diff, self._rescaled(rescaled), "energy gradient terms")
        return np.sum(K * np.sin(diff), axis=-1) / (n * n)

    def solve(
        self,
        theta0,
        t_span,
        t_eval=None,
        *,
        rtol: float = 1e-12,
        atol: float = 1e-12,
        method: str = "DOP853",
    ):
        """Integrate the angles with SciPy's ``solve_ivp`` (all configurations at once).

        Parameters
        ----------
        theta0 : array_like, shape (..., n)
        t_span : (t0, t1)
        t_eval : array_like, optional
            Output times (default: t0 and t1).
        rtol, atol : float
        method : str
            A ``solve_ivp`` method; the default DOP853 reaches ~1e-12.

        Returns
        -------
        t : ndarray, shape (m,)
        theta : ndarray, shape (m, ..., n)
            Unwrapped angles (continuous in time); :func:`wrap` reduces them.
        """
        theta0 = _angles(theta0, "theta0")
        if isinstance(t_span, (str, bytes)) or np.ndim(t_span) != 1 or len(t_span) != 2:
            raise InputTypeError(f"t_span must be a pair (t0, t1) of real numbers, got {t_span!r}.")
        t0, t1 = (check_real(v, "t_span") for v in t_span)
        t_eval = np.array([t0, t1]) if t_eval is None else check_times(t_eval, "t_eval")
        lo, hi = min(t0, t1), max(t0, t1)
        if t_eval.ndim != 1 or np.any(t_eval < lo) or np.any(t_eval > hi):
            raise ValidationError(f"t_eval must be a 1-D array of times in t_span = {(t0, t1)}, got "
                                  f"shape {t_eval.shape} with values in [{np.min(t_eval, initial=lo)}, "
                                  f"{np.max(t_eval, initial=hi)}].")
        rtol, atol = check_positive(rtol, "rtol"), check_positive(atol, "atol")
        method = check_choice(method, "method", ("RK23", "RK45", "DOP853", "Radau", "BDF", "LSODA"))
        shape = theta0.shape
        sol = solve_ivp(
            lambda t, z: self(t, z.reshape(shape)).ravel(),
            (t0, t1),
            theta0.ravel(),
            method=method,
            t_eval=t_eval,
            rtol=rtol,
            atol=atol,
        )
        if not sol.success:
            raise IntegrationError(f"solve_ivp failed on the circle equations: {sol.message}")
        return sol.t, sol.y.T.reshape((len(sol.t),) + shape)

    def __repr__(self) -> str:
        extra = ((", rescaled=True" if self.rescaled else "") + (", mask='causal'" if self.mask == "causal" else "")
                 + (", evaluation='fourier'" if self.evaluation == "fourier" else ""))
        return f"CircleField(beta={self.beta}, model={self.model!r}{extra})"
