"""Vector fields on token manifolds: the one interface steppers and :func:`riemattn.integrate` use.

A *field* maps ``(t, y)``, ``y`` of shape ``(..., l, d)`` on a manifold, to tangent vectors of the
same shape; it knows nothing about stepping. ``t`` is a float, or an array of one time per
trajectory (shape ``y.shape[:-2]``) when the trajectories of a batch are at different times
(adaptive steps are chosen per trajectory). Every field has a ``manifold``
(:class:`~riemattn.geometry.manifolds.Sphere`, :class:`~riemattn.geometry.manifolds.Ellipsoid` or
:class:`~riemattn.geometry.manifolds.Euclidean`).

Two optional extensions: :class:`~riemattn.dynamics.attention.AttentionField` also has ``update(t, y)``,
the un-normalised attention update that the ``"layer"`` stepper (one transformer layer) uses; and
a field given by its Lie-algebra element (:class:`AlgebraField`) has ``lie_generator(t, y)``,
which the Lie-group steppers use instead of the tangent values.
"""

from __future__ import annotations

import copy
import warnings
from typing import Callable

import numpy as np

from .._backend import convert, is_torch, namespace, to_numpy
from .._validation import (
    as_float_array, as_token_array, call_user, call_user_on_device, check_finite, check_flag, check_spd, check_time, plain,
)
from ..errors import InputTypeError, ValidationError

__all__ = ["Field", "VectorField", "AlgebraField", "LinearField", "generator_matrix"]


def _check_manifold(manifold):
    if not all(hasattr(manifold, a) for a in ("tangent", "normalize", "ambient_dim")):
        raise InputTypeError(
            "manifold must be a riemattn Sphere, Ellipsoid or Euclidean, got "
            f"{type(manifold).__name__}."
        )
    return manifold


class Field:
    """Base class of vector fields on a :class:`~riemattn.geometry.manifolds.Sphere`, ``Ellipsoid`` or ``Euclidean``.

    Subclasses set ``self.manifold`` and implement ``__call__(t, y)`` returning tangent vectors.
    """

    manifold = None

    def __call__(self, t, y: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    @property
    def d(self) -> int:
        """Dimension of the ambient space R^d the tokens live in."""
        return self.manifold.ambient_dim

    def take(self, index, batch_shape: tuple):
        """This field for some trajectories of a batch, or None where that is not known.

        Parameters
        ----------
        index : ndarray of int, shape (k,)
            Indices into the flattened batch of shape ``batch_shape``.
        batch_shape : tuple
            The leading (batch) shape of the tokens the field was meant for.

        Returns
        -------
        Field or None
            A field to be evaluated on tokens of shape ``(k, l, d)``: the trajectories ``index``.
            :func:`riemattn.integrate` uses it to evaluate adaptive steps on the unfinished
            trajectories only; with None (the default, safe for fields with per-trajectory
            parameters) it evaluates the whole batch and freezes the finished trajectories.
            Fields whose value for a trajectory depends only on that trajectory's ``t`` and ``y``
            return ``self``.
        """
        return None


def _check_output(out, y, t):
    """The value of a user's ``func(t, y)``: a real array of the shape of ``y`` (of y's kind:
    a NumPy result for tensor tokens is moved to their device)."""
    if is_torch(y):
        out = convert(as_token_array(out, "func(t, y)"), y)
    else:
        out = as_float_array(out, "func(t, y)")
    if tuple(out.shape) != tuple(y.shape):
        raise ValidationError(
            f"func(t, y) returned shape {out.shape} at t = {plain(t)}; expected the shape of y, {y.shape} "
            "(one tangent vector per token)."
        )
    return out


#: How a :class:`VectorField`'s function is given the times of a batch whose trajectories are at
#: different times: the whole array (shape ``y.shape[:-2]``), the array with two trailing axes
#: (shape ``y.shape[:-2] + (1, 1)``, so that ``t * y`` broadcasts), or one call per distinct time.
TIME_MODES = ("array", "column", "per-time")

#: Trajectories (at distinct times) on which a VectorField detects its ``TIME_MODES``.
_PROBE_ROWS = 3



class _CheckedField(Field):
    """A field whose public calls validate the tokens (``self._checked``, set True by ``__init__``)
    and which :func:`riemattn.integrate` steps through an unchecked twin (private)."""

    def _unchecked(self):
        """This field's twin whose calls skip the token checks (made once, then cached).

        ``integrate`` checks y0 once and steps the twin: steppers evaluate it at stage points, which
        are not retracted onto the manifold, and a non-finite stage point (a step far too long for
        a stiff stepper) then gives NaN derivatives, so that the integration reports the trajectory
        failed instead of raising.
        """
        if not self._checked:
            return self
        twin = self.__dict__.get("_twin")
        if twin is None:
            twin = copy.copy(self)
            twin._checked = False
            self._prepare_twin(twin)
            twin._twin = twin
            self._twin = twin
        return twin

    def _prepare_twin(self, twin):
        """Adjust the twin before it is cached (a wrapper unchecks the field it wraps)."""


class VectorField(Field):
    """Wrap a function ``func(t, y) -> tangent vectors`` as a field on ``manifold``.

    Parameters
    ----------
    func : callable
        ``func(t, y)`` with ``y`` of shape ``(..., l, d)``, returning an array of the same shape.
        Leading axes of ``y`` are independent trajectories (unless ``time_vectorized=True``).
    manifold : Sphere, Ellipsoid or Euclidean
        The manifold the tokens live on.
    project : bool, default False
        If True, the output of ``func`` is projected onto the tangent space
        (``(I - y y^T W) v``), so ``func`` may return any ambient vector. If False, ``func`` must
        already return tangent vectors.
    time_vectorized : bool or None, default None
        How ``func`` gets the times when the trajectories of a batch are at different times
        (adaptive steps are chosen per trajectory; a time shared by the whole batch is always
        passed as a float).

        - True: ``func`` accepts ``t`` as an array of one time per trajectory (shape
          ``y.shape[:-2]``) and always sees the whole batch (it may rely on its layout).
        - False: ``func`` is called once per distinct time with the trajectories at that time,
          flattened to ``(k, l, d)``: a float time every call, at the cost of one call per
          trajectory and stage in an adaptive batch.
        - None (default): detected at the first call with different times, on three of its
          trajectories at distinct times, flattened to ``(3, l, d)``: ``func`` is called on each
          of them with its float time (the reference values), then once on the three with the
          times as an array of shape ``(3,)`` and, if that raises or differs, of shape
          ``(3, 1, 1)`` (so ``np.cos(t) * y`` broadcasts). The first result of the right shape
          equal to the reference (1e-12 relative, warnings silenced) fixes that way of passing
          times (shape ``y.shape[:-2]``, or with ``(1, 1)`` appended) for the rest of the
          field's life (``time_mode``); otherwise ``func`` keeps being called once per
          distinct time. A time-independent ``func``
          (``t`` unused) is always detected. A ``func`` that uses ``t`` as a Python number
          (``math.cos(t)``, ``float(t)``, ``if t > 1``) raises on arrays and is called per time.
          How detection can be wrong: a ``func`` that reduces over the array of times
          (``np.max(t)``, ``np.all(t < 1)``) agrees with the reference whenever the times it is
          probed at happen to give the same result; and detection makes 4 or 5 extra calls (a
          ``func`` with side effects sees them). Pass True or False to skip detection. If a
          vectorised call later raises, the field falls back to one call per time for good.

    Attributes
    ----------
    n_calls : int
        Calls of ``func`` so far (all of them: per-time calls and the detection's probes
        included). :func:`riemattn.integrate` reports the calls made during a solve as
        ``Trajectory.nfev``.
    time_mode : str or None
        ``"array"``, ``"column"`` or ``"per-time"`` (``TIME_MODES``): how ``func`` gets the
        times of a batch at different times; None until detected (``time_vectorized=None``).

    Notes
    -----
    Measured (``benchmarks/vectorfield_calls.py``, B = 100 trajectories of 5 tokens on S^2, a
    time-independent sigmoid-attention ``func``, dopri5, rtol 1e-8, T = 10): with one call per
    time, 22 765 calls of ``func`` for 248 batch evaluations; detected as ``"array"``, 249 calls
    (one probe) and 9 to 10 times less wall time, as with ``time_vectorized=True``.
    """

    def __init__(self, func: Callable, manifold, *, project: bool = False, time_vectorized: bool | None = None):
        if not callable(func):
            raise InputTypeError(f"func must be callable as func(t, y), got {type(func).__name__}.")
        self.func = func
        self.manifold = _check_manifold(manifold)
        self.project = check_flag(project, "project")
        self.time_vectorized = None if time_vectorized is None else check_flag(time_vectorized, "time_vectorized")
        self.time_mode = {None: None, True: "array", False: "per-time"}[self.time_vectorized]
        self.n_calls = 0

    def take(self, index, batch_shape: tuple):
        """``self`` (see :meth:`Field.take`): ``func`` treats leading axes as independent
        trajectories -- except with ``time_vectorized=True``, where ``func`` always sees the whole
        batch and may rely on its layout (then None)."""
        return None if self.time_vectorized else self

    def _func(self, t, y):
        self.n_calls += 1
        return self.func(t, y)

    def _eval(self, t, y):
        if is_torch(y):
            return self._eval_tensor(t, y)
        out = call_user(self._func, "func(t, y)", t, t, y)
        if type(out) is not type(y) or out.shape != y.shape or out.dtype != y.dtype:
            out = _check_output(out, y, t)
        return self.manifold.tangent(y, out) if self.project else out

    def _eval_tensor(self, t, y):
        """``func`` on tensors; a function written for NumPy that raises on tensors is called with
        NumPy copies from then on (its result moved back to the tokens' device and dtype)."""
        t_host = lambda: to_numpy(t) if is_torch(t) else t  # noqa: E731
        out, on_host = call_user_on_device(self, self._func, "func(t, y)", t, (t, y),
                                           lambda: (t_host(), to_numpy(y)))
        if on_host or not is_torch(out) or out.shape != y.shape or out.dtype != y.dtype:
            out = _check_output(out, y, t_host() if on_host else t)
        return self.manifold.tangent(y, out) if self.project else out

    @staticmethod
    def _times(t, mode):
        """The per-trajectory times ``t`` (batch shape) as passed to ``func`` in ``mode``."""
        return t if mode == "array" else t[..., None, None]

    def _per_time(self, t, y, xp):
        out = xp.empty_like(y)
        for tk in xp.unique_values(t).tolist():
            rows = t == tk
            out[rows] = self._eval(tk, y[rows])
        return out

    def _detect(self, t, y, xp):
        """How ``func`` takes the times (``TIME_MODES``), decided on a few trajectories at
        distinct times: the first of "array", "column" whose call equals their per-time values."""
        flat_t, flat_y = t.reshape(-1), y.reshape((-1,) + tuple(y.shape[-2:]))
        _, first = np.unique(to_numpy(flat_t), return_index=True)
        rows = first[:_PROBE_ROWS]  # rows at distinct times
        rows = rows if not is_torch(t) else xp.asarray(rows, device=t.device)
        ts, ys = flat_t[rows], flat_y[rows]
        ref = to_numpy(self._per_time(ts, ys, xp))
        scale = max(1.0, float(np.max(np.abs(ref)))) if ref.size else 1.0
        for mode in ("array", "column"):
            try:
                with warnings.catch_warnings(), np.errstate(all="ignore"):
                    warnings.simplefilter("ignore")
                    out = to_numpy(self._eval(self._times(ts, mode), ys))
            except Exception:  # noqa: BLE001 - any failure means "not vectorised this way"
                continue
            if out.shape == ref.shape and np.allclose(out, ref, rtol=1e-12, atol=1e-12 * scale):
                return mode
        return "per-time"

    def __call__(self, t, y):
        if np.ndim(t) == 0 or self.time_vectorized:
            return self._eval(t, y)
        xp = namespace(t, y)
        t = xp.broadcast_to(t if is_torch(t) else np.asarray(t, dtype=float), tuple(y.shape[:-2]))
        first = t.reshape(-1)[0]
        if bool(xp.all(t == first)):  # one host decision per call for tensors
            return self._eval(float(first), y)
        if self.time_mode is None:
            self.time_mode = self._detect(t, y, xp)
        if self.time_mode != "per-time":
            try:
                return self._eval(self._times(t, self.time_mode), y)
            except Exception:  # noqa: BLE001 - detection was wrong for these times: per time, for good
                self.time_mode = "per-time"
        return self._per_time(t, y, xp)

    def __repr__(self) -> str:
        return f"VectorField({getattr(self.func, '__name__', 'func')}, manifold={self.manifold!r})"


def generator_matrix(F, y, W=None):
    """The dense Lie-algebra element ``A = F y^T W - y F^T W`` with ``A y = F`` (for tests, small d).

    Parameters
    ----------
    F, y : ndarray, shape (..., d)
        Tangent vector and base point on E_W.
    W : ndarray, shape (d, d), optional (None: identity)

    Returns
    -------
    ndarray, shape (..., d, d)
    """
    y = check_finite(as_float_array(y, "y"), "y")
    F = check_finite(as_float_array(F, "F"), "F")
    if y.ndim < 1 or F.shape != y.shape:
        raise ValidationError(f"F and y must have the same shape (..., d), got F {F.shape} and y {y.shape}.")
    d = y.shape[-1]
    Wm = np.eye(d) if W is None else check_spd(W, "W", d)
    M = F[..., :, None] * y[..., None, :] - y[..., :, None] * F[..., None, :]
    return M @ Wm



class AlgebraField(Field):
    r"""A field ``F(t, y) = xi(t, y) y`` given by its Lie-algebra element ``xi(t, y) in o(W)``.

    Parameters
    ----------
    generator : callable
        ``generator(t, y)`` with ``y`` of shape ``(..., l, d)`` returning W-skew matrices of shape
        ``(d, d)`` (one for all tokens) or ``(..., l, d, d)`` (one per token).
    manifold : Sphere or Ellipsoid

    Notes
    -----
    Lie-group steppers use ``lie_generator`` directly (dense exponentials), so e.g. a constant
    ``xi = A`` is integrated exactly, ``y(t) = expm(t A) y0``, for every step size. Projected
    Runge--Kutta steppers use ``field(t, y)`` like any other field.
    """

    def __init__(self, generator, manifold):
        if not callable(generator):
            raise InputTypeError(f"generator must be callable as generator(t, y), got {type(generator).__name__}.")
        self._generator = generator
        self.manifold = _check_manifold(manifold)

    def take(self, index, batch_shape: tuple):
        """``self``: ``generator`` treats leading axes as independent trajectories (see :meth:`Field.take`)."""
        return self

    def lie_generator(self, t, y):
        """The algebra element(s) xi(t, y): shape (d, d) or (..., l, d, d).

        An exception raised by ``generator`` is re-raised as ValidationError (the original as
        ``__cause__``); an output of another shape raises ValidationError naming ``generator(t, y)``.
        """
        X = call_user(self._generator, "generator(t, y)", t, check_time(t), y)
        if is_torch(y):  # tensors stay tensors; a NumPy generator is moved to y's device
            if not is_torch(X):
                X = convert(as_float_array(X, "generator(t, y)"), y)
        elif type(X) is not np.ndarray or X.dtype != np.float64:
            X = as_float_array(X, "generator(t, y)")
        d = y.shape[-1]
        shape, ys = tuple(X.shape), tuple(y.shape)
        if shape != (d, d) and shape != ys + (d,):
            raise ValidationError(
                f"generator(t, y) returned shape {shape} at t = {plain(t)}; expected ({d}, {d}) or "
                f"{ys + (d,)} (one matrix per token)."
            )
        return X

    def __call__(self, t, y):
        y = y if is_torch(y) else np.asarray(y, dtype=float)
        X = self.lie_generator(t, y)
        return y @ X.mT if X.ndim == 2 else (X @ y[..., None])[..., 0]


class LinearField(AlgebraField):
    r"""The linear field ``y' = A y`` for a constant ``A`` in ``o(W)`` (``A^T W + W A = 0``).

    Parameters
    ----------
    A : array_like, shape (d, d)
        W-skew matrix (checked to 1e-10 relative to |A| |W|).
    manifold : Sphere or Ellipsoid
        ``Sphere(d - 1)`` or ``Ellipsoid(W)``.

    Notes
    -----
    Exact flow: ``y(t) = expm(t A) y0``; every Lie-group stepper reproduces it for every step size.
    """

    def __init__(self, A, manifold):
        A = check_finite(as_float_array(A, "A"), "A")
        d = _check_manifold(manifold).ambient_dim
        if A.shape != (d, d):
            raise ValidationError(f"A must have shape ({d}, {d}) to match {manifold!r}, got {A.shape}.")
        W = manifold.W
        res = float(np.max(np.abs(A.T @ W + W @ A)))
        scale = float(np.max(np.abs(A))) * float(np.max(np.abs(W))) + 1e-300
        if res > 1e-10 * scale:
            raise ValidationError(
                f"A must lie in o(W) (A^T W + W A = 0); max |A^T W + W A| = {res:.3g} (relative {res / scale:.3g})."
            )
        self.A = A
        super().__init__(lambda t, y: self.A, manifold)
