"""Time-dependent head matrices of the package's own kinds: smooth sinusoids and per-layer steps.

Both are callables ``t -> (h, d, d)`` that :class:`~riemattn.dynamics.attention.AttentionField`
takes for ``P`` or ``U`` (the NumPy engine calls them like any callable; an array of ``k`` times
gives ``(k, h, d, d)``, so they are evaluated once per step for a whole batch), and that the
compiled engine (:func:`riemattn.dynamics.kernels.pack_field`) reads as data: their parameters
are stored in the kernel pack and evaluated inside the compiled code. A user's own callable
P(t) runs on the NumPy engine only.

- :class:`TimeVaryingHeads`: ``M_eta(t) = B_eta + sum_k A_{eta,k} sin(omega_k t + phi_k)``,
  bounded and smooth (the property tests' time-varying weights; ARXIV eq. 7 with
  ``P_eta(t) = D_eta(t) P'_eta``).
- :class:`PiecewiseConstantHeads`: one stack of head matrices per layer, ``M(t) = stacks[k]`` for
  ``times[k] <= t < times[k + 1]`` -- a transformer whose layers have different weights, each
  layer lasting one interval of time.

References
----------
Rodriguez Abella, Silvestre, Tabuada, "Consensus is all you get", ICML 2025, eq. (6) (time-dependent
P_eta(t), U_eta(t)); Geshkovski, Letrouit, Polyanskiy, Rigollet, "A mathematical perspective on
Transformers", section 2.1 (the layer index as a time variable).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._validation import as_float_array, check_finite, check_time, check_times
from ..errors import InputTypeError, ValidationError

__all__ = ["TimeVaryingHeads", "PiecewiseConstantHeads"]


@dataclass
class TimeVaryingHeads:
    """M_eta(t) = B_eta + sum_k A_{eta,k} sin(omega_k t + phi_k), shape (h, d, d): bounded and
    uniformly continuous in t.

    Parameters
    ----------
    B : ndarray, shape (h, d, d)
    A : ndarray, shape (K, h, d, d)
        ``K >= 0`` sinusoidal terms.
    omega, phi : ndarray, shape (K,)
        Angular frequencies and phases.
    symmetric : bool, default False
        Return exactly symmetric matrices at every t (B and every A_k must then be exactly
        symmetric, else ValidationError): the value is symmetrized, (M + M^T) / 2, after the sum,
        because the rounding of ``sin(omega t + phi) @ A`` depends on the BLAS kernel and on the
        position of an entry (AVX-512 kernels rounded mirrored entries differently). The average
        of two floats is symmetric in them, so the result is symmetric bit for bit, and it
        changes the exact sum by at most its rounding.

    Notes
    -----
    ``bound[eta]`` bounds the spectral norm of M_eta(t) for all t (the sum of the Frobenius norms
    of B_eta and of the A_{eta,k}); every entry satisfies |M(t)_ij| <= |B_ij| + sum_k |A_k,ij|
    (``entry_bound``) for all t. Called with a float t it returns (h, d, d); with an array of
    k times, (k, h, d, d) (so it also serves ``AttentionField(..., time_vectorized=True)``).
    With batch axes (``B`` of shape (..., h, d, d), ``A`` of shape (K, ..., h, d, d)) it is one
    stack per trajectory (per-trajectory weights): (..., h, d, d) at a float t, (k, ..., h, d, d)
    at k times; ``bound`` then has shape (..., h). :meth:`derivative` is dM/dt (the compiled engine's exact time derivative uses the same
    formula).

    References
    ----------
    Rodriguez Abella, Silvestre, Tabuada, "Consensus is all you get", ICML 2025, eq. (6).
    """

    B: np.ndarray  # (h, d, d)
    A: np.ndarray  # (K, h, d, d)
    omega: np.ndarray  # (K,)
    phi: np.ndarray  # (K,)
    symmetric: bool = False

    def __post_init__(self):
        B = check_finite(as_float_array(self.B, "B"), "B")
        if B.ndim < 3 or B.shape[-1] != B.shape[-2]:
            raise ValidationError(f"B must have shape (..., h, d, d), got shape {B.shape}.")
        omega, phi = (check_finite(as_float_array(v, n), n) for v, n in ((self.omega, "omega"), (self.phi, "phi")))
        if omega.ndim != 1 or phi.shape != omega.shape:
            raise ValidationError(f"omega and phi must have shape (K,), got {omega.shape} and {phi.shape}.")
        A = check_finite(as_float_array(self.A, "A"), "A")
        if A.shape != omega.shape + B.shape:
            raise ValidationError(f"A must have shape (K,) + B.shape = {omega.shape + B.shape}, got {A.shape}.")
        if not isinstance(self.symmetric, (bool, np.bool_)):
            raise InputTypeError(f"symmetric must be True or False, got {self.symmetric!r}.")
        self.B, self.A, self.omega, self.phi = B, A, omega, phi
        if self.symmetric and not (_is_symmetric(self.B) and _is_symmetric(self.A)):
            raise ValidationError("TimeVaryingHeads(symmetric=True) needs exactly symmetric B and A_k.")
        self._A2 = self.A.reshape(self.A.shape[0], self.B.size)

    def __call__(self, t):  # unchecked: called at every field evaluation with the solver's t
        if self._A2.shape[0] == 0:
            return self.B if np.ndim(t) == 0 else np.broadcast_to(self.B, np.shape(t) + self.B.shape)
        # |sin| <= 1 is what the entry bound uses; the clip guards it against any libm's rounding
        s = np.clip(np.sin(np.multiply.outer(t, self.omega) + self.phi), -1.0, 1.0)
        out = self.B + (s @ self._A2).reshape(np.shape(t) + self.B.shape)
        return _sym(out) if self.symmetric else out

    def derivative(self, t):
        """dM/dt = sum_k A_{eta,k} omega_k cos(omega_k t + phi_k), shape (h, d, d) (or (k, h, d, d))."""
        t = check_times(t, "t")
        c = np.cos(np.multiply.outer(t, self.omega) + self.phi) * self.omega
        out = (c @ self._A2).reshape(np.shape(t) + self.B.shape)
        return _sym(out) if self.symmetric else out

    @property
    def bound(self) -> np.ndarray:
        """Upper bounds of |M_eta(t)|_2 over all t, shape (h,)."""
        return _frobenius(self.B) + np.sum(_frobenius(self.A), axis=0)

    @property
    def entry_bound(self) -> np.ndarray:
        """|B| + sum_k |A_k|: entrywise bounds of |M(t)| over all t, shape (h, d, d)."""
        return np.abs(self.B) + np.sum(np.abs(self.A), axis=0)


class PiecewiseConstantHeads:
    """Per-layer head matrices: ``M(t) = stacks[k]`` for ``times[k] <= t < times[k + 1]``.

    Parameters
    ----------
    times : array_like, shape (m,)
        Strictly increasing start times of the m layers (finite). Before ``times[0]`` the first
        stack applies, from ``times[-1]`` on the last (the field is defined for every t).
    stacks : array_like, shape (m, d, d) or (m, h, d, d)
        The head matrices of each layer (finite).

    Notes
    -----
    ``M(t)`` is right-continuous: at a breakpoint ``times[k]`` the new layer's matrices apply.
    Called with a float it returns (h, d, d); with an array of k times, (k, h, d, d) (one
    vectorised evaluation per step for a batch of trajectories at different times). The field
    jumps at the breakpoints: an adaptive stepper sees the jump as a large local error and
    shortens its steps there; to step exactly onto the layer boundaries, integrate layer by
    layer or save at ``times``. ``derivative`` is 0 (between breakpoints).

    Examples
    --------
    >>> import numpy as np
    >>> import riemattn as ra
    >>> from riemattn.dynamics.schedules import PiecewiseConstantHeads
    >>> P = PiecewiseConstantHeads([0.0, 1.0], np.stack([np.eye(3), 2.0 * np.eye(3)]))
    >>> P(0.5)[0, 0, 0], P(1.0)[0, 0, 0], P(np.array([0.2, 1.7])).shape
    (np.float64(1.0), np.float64(2.0), (2, 1, 3, 3))
    >>> field = ra.AttentionField(P)  # two layers, each lasting one unit of time

    References
    ----------
    Geshkovski, Letrouit, Polyanskiy, Rigollet, "A mathematical perspective on Transformers",
    section 2.1 (the layer index as a time variable).
    """

    def __init__(self, times, stacks):
        times = check_finite(as_float_array(times, "times"), "times")
        stacks = check_finite(as_float_array(stacks, "stacks"), "stacks")
        if times.ndim != 1 or times.size == 0:
            raise ValidationError(f"times must have shape (m,) with m >= 1 layers, got shape {times.shape}.")
        if times.size > 1 and not np.all(np.diff(times) > 0):
            raise ValidationError(f"times must be strictly increasing, got {times.tolist()}.")
        if stacks.ndim == 3:
            stacks = stacks[:, None]
        if stacks.ndim != 4 or stacks.shape[0] != times.size or stacks.shape[-1] != stacks.shape[-2]:
            raise ValidationError(
                f"stacks must have shape ({times.size}, d, d) or ({times.size}, h, d, d) (one stack "
                f"per time in times), got shape {stacks.shape}."
            )
        if stacks.shape[1] == 0 or stacks.shape[-1] == 0:
            raise ValidationError(f"stacks must have h >= 1 heads and d >= 1, got shape {stacks.shape}.")
        self.times, self.stacks = times, stacks

    def index(self, t):
        """The layer index k of each time (``times[k] <= t < times[k + 1]``, clipped to [0, m - 1]);
        ``t`` finite real (ValidationError / InputTypeError naming t)."""
        return self._index(check_time(t))

    def _index(self, t):
        k = np.searchsorted(self.times, t, side="right") - 1
        return np.maximum(k, 0)

    def __call__(self, t):  # unchecked: called at every field evaluation with the solver's t
        k = self._index(t)
        return self.stacks[k] if np.ndim(k) == 0 else self.stacks[k.reshape(-1)].reshape(np.shape(t) + self.stacks.shape[1:])

    def derivative(self, t):
        """0 (between breakpoints), shape (h, d, d) (or (k, h, d, d)); ``t`` finite real."""
        return np.zeros(np.shape(check_time(t)) + self.stacks.shape[1:])

    def __repr__(self) -> str:
        m, h, d, _ = self.stacks.shape
        return f"PiecewiseConstantHeads({m} layers from t = {self.times[0]:.4g}, h={h}, d={d})"


def _frobenius(M):
    """Frobenius norms over the last two axes, scaled first so that tiny entries do not underflow."""
    s = np.max(np.abs(M), axis=(-2, -1), initial=0.0)
    safe = np.where(s > 0, s, 1.0)
    return s * np.linalg.norm(M / safe[..., None, None], axis=(-2, -1))


def _sym(M):
    return 0.5 * (M + np.swapaxes(M, -1, -2))


def _is_symmetric(M):
    return bool(np.array_equal(M, np.swapaxes(M, -1, -2)))
