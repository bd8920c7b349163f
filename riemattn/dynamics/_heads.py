"""Per-head matrix stacks of the attention field (constant or time-dependent) and small-product BLAS.

Private helpers of :mod:`riemattn.dynamics.attention`: :class:`HeadMatrices` holds P_eta or U_eta, shape
``(h, d, d)`` or, one stack per trajectory, ``(..., h, d, d)`` (see :mod:`riemattn.dynamics._batch`),
constant or a callable of time, and evaluates it at one time or at one time per trajectory;
:func:`bmm` is ``a @ b`` with BLAS limited to one thread for small matrices.
"""

from __future__ import annotations

import contextlib
import copy
import math
import warnings

import numpy as np

from .._backend import constant, convert, is_torch, like_param, namespace, requires_grad, to_numpy
from .._validation import as_float_array, call_user, call_user_on_device, check_finite, plain
from ..errors import ValidationError
from ._batch import broadcast_rows, select_rows, weight_rows

__all__ = ["HeadMatrices", "as_heads", "bmm", "stack_columns"]


def as_heads(value, name: str, d: int | None) -> np.ndarray:
    """Check a finite (d, d), (h, d, d) or (..., h, d, d) array; return it as (h, d, d) or
    (..., h, d, d) (leading axes: one stack per trajectory, see :mod:`riemattn.dynamics._batch`)."""
    arr = check_finite(as_float_array(value, name), name)
    if arr.ndim == 2:
        arr = arr[None]
    if arr.ndim < 3 or arr.shape[-1] != arr.shape[-2]:
        raise ValidationError(
            f"{name} must have shape (d, d), (h, d, d) or, one stack per trajectory, (..., h, d, d); "
            f"got shape {arr.shape}."
        )
    if d is not None and arr.shape[-1] != d:
        raise ValidationError(
            f"{name} acts on R^{arr.shape[-1]} (shape {arr.shape}) but the tokens live in R^{d}."
        )
    if arr.shape[-3] == 0:
        raise ValidationError(f"{name} has zero heads (shape {arr.shape}).")
    return arr


#: Times at which a scalar-time callable is probed for vectorisation (see :class:`HeadMatrices`).
PROBE_TIMES = np.array([0.0, 0.5, 1.25])


class HeadMatrices:
    """A constant or time-dependent stack of per-head matrices, shape (h, d, d) or (..., h, d, d).

    Parameters
    ----------
    value : array_like (d, d), (h, d, d) or (..., h, d, d), or callable t -> such an array
        Leading axes before (h, d, d) are batch axes: one stack per trajectory (see
        :mod:`riemattn.dynamics._batch`).
    name : str
        The argument's name, for error messages.
    d : int or None
        Required matrix size (None: taken from ``value``).
    time_vectorized : bool or None
        True: the callable accepts a 1-D array of k times and returns shape (k, h, d, d) or
        (k, d, d) (with batch axes, (k, ..., h, d, d)). False: it is called with one float time at
        a time. None (default): detected at construction (:meth:`_probe`): the callable is called
        with the times :data:`PROBE_TIMES` as a 1-D array and, failing that, as an array of shape
        (k, 1, 1, 1) (one more 1 per batch axis), so that ``lambda t: np.cos(t) * P`` gives
        (k, 1, d, d); a result of the right shape equal to the scalar calls (to 1e-12 relative)
        makes later multi-time evaluations one call. Otherwise (an exception, a wrong shape or
        other values) it is called once per distinct time. How detection can fail: a callable
        that gives the right values at the probe times but not at others, or that has side
        effects (it is called 2 to 8 extra times at construction); pass ``time_vectorized=False``
        (or True) to skip the probe. If a detected vectorised call later fails, evaluation falls
        back to one call per time.

    Notes
    -----
    Differentiable parameters (PyTorch): a tensor ``value`` with ``requires_grad`` is kept as
    ``param`` and read afresh at every evaluation on tensor tokens (so gradients flow to it and
    an optimizer's in-place updates are seen); a callable's tensor results are kept in the graph
    on tensor tokens. NumPy tokens get detached values.

    Per-trajectory stacks restricted to some trajectories (:meth:`take`): a constant is copied
    (contiguous, one row per trajectory); a parameter or a callable keeps its full value and
    ``rows``, the flat indices of the trajectories' stacks in it.
    """

    def __init__(self, value, name: str, d: int | None, time_vectorized: bool | None = None):
        self.name = name
        self.time_vectorized = bool(time_vectorized)
        self.mode = "1d" if self.time_vectorized else None  # how many times are passed at once
        self._last = None  # (t, value) of the last scalar-time evaluation
        self.param = None
        self.rows = None  # flat indices into the stacks of ``param`` / ``fn`` (after take)
        if requires_grad(value):
            self.fn, self.const, self.param = None, None, value
            self.shape = as_heads(value, name, d).shape  # (checks the values, detached)
        elif callable(value) and not isinstance(value, np.ndarray):
            self.fn = value
            first = call_user(value, f"{name}(t)", 0.0, np.zeros(1) if self.time_vectorized else 0.0)
            if self.time_vectorized:
                first = as_float_array(first, f"{name}(t)")
                if first.ndim < 3 or first.shape[0] != 1:
                    raise ValidationError(
                        f"{name}(t) with time_vectorized=True must return shape (k, d, d), "
                        f"(k, h, d, d) or (k, ..., h, d, d) for k times; for t of shape (1,) it "
                        f"returned {first.shape}."
                    )
                first = first[0]
            self.const = None
            self.shape = self.src = as_heads(first, f"{name}(0)", d).shape
            if time_vectorized is None:
                self.mode = self._probe()
        else:
            self.fn = None
            self.const = as_heads(value, name, d)
            self.shape = self.const.shape
        self.src = self.shape  # the shape of one evaluation of ``param`` / ``fn``

    @property
    def h(self) -> int:
        """Number of heads."""
        return self.shape[-3]

    @property
    def batch(self) -> tuple:
        """The batch shape of per-trajectory stacks; () for one stack shared by all trajectories."""
        return tuple(self.shape[:-3])

    def _probe(self):
        """"1d" or "column" if the callable evaluates many times at once (see the class docstring), else None."""
        try:
            expect = np.stack([self(float(t)) for t in PROBE_TIMES])
        except Exception:  # noqa: BLE001 - the scalar calls raise again, with the package's error, when used
            return None
        scale = max(1.0, float(np.max(np.abs(expect))))
        for mode in ("1d", "column"):
            try:
                with warnings.catch_warnings(), np.errstate(all="ignore"):
                    warnings.simplefilter("ignore")
                    out = np.asarray(self.fn(self._times_arg(PROBE_TIMES, mode)), dtype=float)
            except Exception:  # noqa: BLE001 - any failure means "not vectorised this way"
                continue
            if out.shape == expect.shape[:1] + expect.shape[2:] and len(self.src) == 3 and self.src[0] == 1:
                out = out[:, None]
            if out.shape == expect.shape and np.allclose(out, expect, rtol=1e-12, atol=1e-12 * scale):
                return mode
        return None

    def _times_arg(self, times, mode):
        return times if mode == "1d" else times.reshape((-1,) + (1,) * len(self.src))

    def _many_at_once(self, flat):
        """The stacks at the 1-D times ``flat`` in one call (modes "1d" and "column")."""
        if self.time_vectorized:
            return self._check(self._call(flat), flat, True)
        try:
            return self._check(self._call(self._times_arg(flat, self.mode)), flat, True)
        except Exception:  # noqa: BLE001 - detection was wrong for these times: one call per time
            self.mode = None
            return np.stack([self(t) for t in flat.tolist()])

    def _call(self, t):
        """The user's callable at ``t`` (exceptions wrapped, see :func:`~riemattn._validation.call_user`)."""
        return call_user(self.fn, f"{self.name}(t)", t, t)

    def _expect(self, out, lead: tuple):
        """``out`` with a missing head axis added (one shared head), and the shape it must have."""
        expect = lead + self.src
        if out.ndim == len(expect) - 1 and len(self.src) == 3 and self.src[0] == 1:  # (d, d) for one head
            out = out[..., None, :, :]
        return out, expect

    def _check(self, out, t, per_time: bool, keep_tensor: bool = False) -> np.ndarray:
        if keep_tensor and is_torch(out) and out.is_floating_point():
            return self._check_tensor(out, t, per_time)
        if type(out) is not np.ndarray or out.dtype != np.float64:
            out = as_float_array(out, f"{self.name}(t)")
        lead = (len(t),) if per_time else ()
        out, expect = self._expect(out, lead)
        if out.shape != expect:
            raise ValidationError(
                f"{self.name}(t) returned shape {out.shape} at t = {plain(t)}; expected {expect} "
                f"(the shape it had at t = 0)."
            )
        if not np.isfinite(out).all():
            raise ValidationError(f"{self.name}(t) returned NaN or inf at t = {plain(t)}.")
        return select_rows(out, self.rows, len(lead))

    def _check_tensor(self, out, t, per_time: bool):
        """:meth:`_check` for a floating tensor returned by the callable (kept in the graph)."""
        lead = (len(t),) if per_time else ()
        out, expect = self._expect(out, lead)
        if tuple(out.shape) != expect:
            raise ValidationError(
                f"{self.name}(t) returned shape {tuple(out.shape)} at t = {plain(t)}; expected {expect} "
                f"(the shape it had at t = 0)."
            )
        if not bool(out.detach().isfinite().all()):
            raise ValidationError(f"{self.name}(t) returned NaN or inf at t = {plain(t)}.")
        return select_rows(out, self.rows, len(lead))

    def _eval_like(self, t: float, like):
        """The callable at one time ``t`` as an array of ``like``'s kind, device and dtype, shape
        (h, d, d) (or the per-trajectory shape); a tensor it returns stays in the autograd graph."""
        times = np.array([float(t)])
        out = self._call(times if self.time_vectorized else t)
        out = self._check(out, times if self.time_vectorized else t, self.time_vectorized, keep_tensor=True)
        out = out[0] if self.time_vectorized else out
        return like_param(out, like) if is_torch(out) else convert(out, like)

    def _param_value(self, like=None):
        """The parameter's values (detached NumPy for ``like=None``), rows taken, head axis added."""
        out = as_heads(self.param, self.name, None) if like is None else like_param(self.param, like)
        return select_rows(out[None] if out.ndim == 2 else out, self.rows, 0)

    def __call__(self, t: float) -> np.ndarray:
        """The stack at one time, shape (h, d, d) (per-trajectory stacks: ``self.shape``)."""
        if self.param is not None:
            return self._param_value()  # its current values, detached
        if self.fn is None:
            return self.const
        if self.time_vectorized:
            return self._check(self._call(np.array([float(t)])), np.array([float(t)]), True)[0]
        last = self._last
        if last is not None and last[0] == t:  # at most one call per distinct time in a row
            return last[1]
        out = self._check(self._call(t), t, False)
        self._last = (t, out)
        return out

    def many(self, times: np.ndarray) -> np.ndarray:
        """The stacks at each of ``times`` (1-D, k), shape (k,) + ``self.shape``."""
        if self.fn is None:
            return np.broadcast_to(self(0.0), (len(times),) + self.shape)
        if self.mode is not None:
            return self._many_at_once(times)
        return np.stack([self(t) for t in times.tolist()])

    def take(self, index, batch_shape: tuple) -> HeadMatrices:
        """These stacks for the trajectories ``index`` of the flattened batch ``batch_shape``.

        ``self`` for a shared stack; per-trajectory stacks are broadcast to ``batch_shape``
        (a :class:`~riemattn.errors.ValidationError` naming the argument if they do not
        broadcast) and the stacks of ``index`` kept: the result has shape (k, h, d, d).
        """
        if not self.batch:
            return self
        index = to_numpy(index)
        new = copy.copy(self)
        new._last, new.__dict__["_consts"] = None, {}
        base = self.rows if self.rows is not None else np.arange(math.prod(self.batch)).reshape(self.batch)
        rows = broadcast_rows(base, batch_shape, self.name, self.shape)[index]
        if self.const is not None:
            new.const = np.ascontiguousarray(self.const.reshape((-1,) + self.shape[-3:])[rows])
        else:
            new.rows = rows
        new.shape = (len(rows),) + self.shape[-3:]
        return new

    def at(self, t, batch_shape: tuple, like=None):
        """The stack at time ``t``: ``self.shape`` for a shared time, else batch_shape + (h, d, d).

        ``t`` is a float or an array broadcasting to ``batch_shape`` (one time per trajectory).
        A time-vectorized callable is called once with all the times; any other callable once
        per distinct time. With ``like`` (tokens that are not a NumPy float64 array) the result is
        an array of ``like``'s kind, device and dtype. Per-trajectory stacks at per-trajectory
        times: trajectory ``b`` gets its own stack at its own time (the callable evaluated at
        each distinct time, each trajectory's row taken).

        Tensors (the PyTorch backend): a time-vectorized callable receives the times as a 1-D
        tensor on the tokens' device and may return a tensor there (no host round trip); if it
        raises on a tensor (NumPy code given CUDA times) it is called with a NumPy array of the
        times from then on. Any other callable receives host floats (one synchronisation per
        evaluation).
        """
        if like is not None and not (type(like) is np.ndarray and like.dtype == np.float64):
            return self._at_device(t, batch_shape, like)
        if self.fn is None or np.ndim(t) == 0:
            return self(float(t)) if self.fn is not None else self(0.0)  # constant (or a parameter)
        t = np.broadcast_to(np.asarray(t, dtype=float), batch_shape)
        first = t.flat[0]
        if (t == first).all():
            return self(float(first))
        if self.mode is not None and not self.batch:
            flat = t.reshape(-1)
            return self._many_at_once(flat).reshape(batch_shape + self.shape)
        times, inverse = np.unique(t, return_inverse=True)
        return self._per_row(self.many(times), inverse.reshape(batch_shape), batch_shape)

    def _per_row(self, stacks, inverse, batch_shape: tuple):
        """Trajectory b's stack at its time: ``stacks[inverse[b]]`` (rows of per-trajectory stacks)."""
        if not self.batch:
            return stacks[inverse]
        flat = stacks.reshape((stacks.shape[0], -1) + self.shape[-3:])
        rows = weight_rows(self.__dict__.setdefault("_rows_cache", {}), self.batch, batch_shape, self.name,
                           self.shape)
        if is_torch(stacks):
            rows = convert(rows, stacks, namespace(stacks).int64)
        return flat[inverse, rows]

    def _at_device(self, t, batch_shape: tuple, like):
        """:meth:`at` for tokens ``like`` of another kind, device or dtype (see there)."""
        if self.param is not None:
            return self._param_value(like)
        if self.fn is None:
            return constant(self.__dict__.setdefault("_consts", {}), "const", self.const, like)
        if self.time_vectorized and is_torch(t) and t.ndim:
            flat = t.expand(batch_shape).reshape(-1) if tuple(t.shape) != batch_shape else t.reshape(-1)
            out, _ = call_user_on_device(self, self.fn, f"{self.name}(t)", "(per-trajectory times)",
                                         (flat,), lambda: (to_numpy(flat),))
            out = like_param(out, like) if requires_grad(out) else convert(out, like)
            out, expect = self._expect(out, (flat.shape[0],))
            if tuple(out.shape) != expect:
                raise ValidationError(
                    f"{self.name}(t) returned shape {tuple(out.shape)} for {flat.shape[0]} times; "
                    f"expected {expect} (time_vectorized=True)."
                )
            out = select_rows(out, self.rows, 1)
            if self.batch:  # (k, rows, h, d, d): trajectory b's row at time b
                inverse = namespace(like).arange(flat.shape[0], device=flat.device).reshape(batch_shape)
                return self._per_row(out, inverse, batch_shape)
            return out.reshape(batch_shape + self.shape)
        t_host = to_numpy(t) if is_torch(t) else t
        if not is_torch(like):
            return convert(self.at(t_host, batch_shape), like)
        # tensors: the callable's own results (tensors stay in the autograd graph)
        if np.ndim(t_host) == 0:
            return self._eval_like(float(t_host), like)
        t_host = np.broadcast_to(np.asarray(t_host, dtype=float), batch_shape)
        times, inverse = np.unique(t_host, return_inverse=True)
        stack = namespace(like).stack([self._eval_like(s, like) for s in times.tolist()])
        if len(times) == 1:
            return stack[0]
        return self._per_row(stack, convert(inverse.reshape(batch_shape), like, namespace(like).int64), batch_shape)


def stack_columns(M: np.ndarray) -> np.ndarray:
    """(..., h, d, d) -> (..., d, h*d) with block eta equal to M_eta: ``y @ out`` gives y^T M_eta per head."""
    *lead, h, d, _ = M.shape
    return M.swapaxes(-3, -2).reshape(tuple(lead) + (d, h * d))


_BLAS_LIMITER = []


def _one_blas_thread():
    """Context limiting OpenBLAS/MKL to one thread (threadpoolctl), or a no-op without it."""
    if not _BLAS_LIMITER:
        try:
            from threadpoolctl import ThreadpoolController

            _BLAS_LIMITER.append(ThreadpoolController().select(user_api="blas"))
        except Exception:  # noqa: BLE001 - optional dependency; any failure means "no limiting"
            _BLAS_LIMITER.append(None)
    ctl = _BLAS_LIMITER[0]
    if ctl is None or not ctl.lib_controllers:
        return contextlib.nullcontext()
    return ctl.limit(limits=1)


#: Matrix products of at most ``_SMALL_PRODUCT`` multiply-adds per matrix (and at least
#: ``_SMALL_TOTAL`` in all, so that tiny problems skip the ~10 us of switching) run with BLAS
#: limited to one thread. OpenBLAS splits such products over its threads, which gains little at
#: these sizes and is very costly when the cores are shared with other processes: each threaded
#: call then waits for a time slice. Measured on the 2-core development machine under load
#: (benchmarks/bench_field.py, work_precision.py): 100 products (100 x 500) @ (500 x 50) took
#: 50 ms with one thread and 0.2-2 s with two; one (50 x 500) @ (500 x 1000) product 1.6-22 ms
#: with two threads. (threadpoolctl's limit is process-wide while it lasts: BLAS calls made by
#: other Python threads during such a product also run on one thread.)
_SMALL_PRODUCT = 1 << 25
_SMALL_TOTAL = 1 << 20


def bmm(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``a @ b`` (matrices or stacks of them); one BLAS thread when the matrices are small."""
    m, k = a.shape[-2:]
    work = m * k * b.shape[-1]
    if _SMALL_TOTAL <= work * max(1, a.size // max(1, m * k)) and work <= _SMALL_PRODUCT:
        with _one_blas_thread():
            return np.matmul(a, b, out=out)
    return np.matmul(a, b, out=out)
