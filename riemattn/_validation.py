"""Input checks shared by the package. Each raises a :mod:`riemattn.errors` type naming the argument."""

from __future__ import annotations

import math
import os
from numbers import Integral, Real

import numpy as np

from ._backend import is_torch, namespace, requires_grad, size, to_numpy
from .errors import InputTypeError, ValidationError
from ._precision import ON_MANIFOLD_ATOL, ROUNDING_FACTOR, dtype_eps, manifold_atol, token_atol  # noqa: F401


def _describe(value) -> str:
    """A short description of a received value for messages: its type, dtype and shape."""
    shape = getattr(value, "shape", None)
    dtype = getattr(value, "dtype", None)
    if shape is not None and dtype is not None:
        return f"{type(value).__name__} of dtype {dtype} and shape {tuple(shape)}"
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"


def plain(value, max_items: int = 6) -> str:
    """``value`` written for a message as plain numbers: no ``np.float64(...)``, ``array(...)``
    or ``tensor(...)`` wrappers.

    A NumPy or torch scalar (or 0-d array) prints as the Python number it holds; an array whose
    entries are all equal prints as that one number (``[2.5, 2.5]`` is one time); other arrays
    as a list of at most ``max_items`` numbers, longer ones as ``"k values in [min, max]"``;
    tuples and lists of numbers element by element (``(2,)`` for a token index). Anything else
    is ``repr``.
    """
    if isinstance(value, (tuple, list)):
        inner = ", ".join(plain(v, max_items) for v in value)
        return f"({inner},)" if isinstance(value, tuple) and len(value) == 1 else (
            f"({inner})" if isinstance(value, tuple) else f"[{inner}]")
    if is_torch(value):
        value = value.detach().cpu().numpy()
    if isinstance(value, (np.ndarray, np.generic)):
        arr = np.asarray(value)
        if arr.dtype.kind not in "biuf":
            return repr(value)
        flat = arr.reshape(-1)
        if flat.size == 0:
            return "[]"
        if flat.size == 1 or bool(np.all(flat == flat[0])) and not (arr.dtype.kind == "f" and np.isnan(flat[0])):
            return repr(flat[0].item())
        if flat.size <= max_items:
            return "[" + ", ".join(repr(v) for v in flat.tolist()) + "]"
        with np.errstate(invalid="ignore"):
            return f"{flat.size} values in [{np.nanmin(flat).item()!r}, {np.nanmax(flat).item()!r}]"
    return repr(value)


def as_float_array(value, name: str) -> np.ndarray:
    """Convert ``value`` to a float64 array, or raise :class:`InputTypeError` naming ``name``.

    Accepted: real numbers and arrays of them (NumPy of any integer or float dtype, e.g.
    float32, lists, CPU torch tensors); converted to float64. Rejected (InputTypeError): None,
    strings, callables, booleans, complex numbers (their imaginary part would be lost), ragged
    or non-numeric sequences.
    """
    if value is None or isinstance(value, (str, bytes)) or callable(value) and not isinstance(value, np.ndarray):
        raise InputTypeError(f"{name} must be an array of real numbers, got {_describe(value)}.")
    if is_torch(value):  # values only: a tensor that requires a gradient is detached here
        value = value.detach().cpu()
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError) as exc:
        raise InputTypeError(f"{name} must be an array of real numbers, got {type(value).__name__}: {exc}") from None
    kind = arr.dtype.kind
    if kind == "c":
        raise InputTypeError(
            f"{name} must be real, got complex dtype {arr.dtype}; pass the real part explicitly if that is meant."
        )
    if kind == "b" or isinstance(value, bool):
        raise InputTypeError(f"{name} must be an array of real numbers, got booleans ({_describe(value)}).")
    if kind not in "iuf":
        try:
            arr = arr.astype(float)
        except (TypeError, ValueError) as exc:
            hint = ("; HIPS autograd cannot trace riemattn's solvers: differentiate with PyTorch tensors "
                    "instead (docs/autodiff.md)") if type(value).__name__ == "ArrayBox" else ""
            raise InputTypeError(
                f"{name} must be an array of real numbers, got {_describe(value)}: {exc}{hint}") from None
        return arr
    return arr.astype(float, copy=False)


def as_token_array(value, name: str):
    """:func:`as_float_array`, except that a PyTorch tensor stays a tensor on its device.

    A floating tensor keeps its dtype (float64, or float32 where the user asks for it); integer
    tensors become float64; bool and complex tensors are rejected like NumPy arrays.
    """
    if not is_torch(value):
        return as_float_array(value, name)
    if value.is_complex():
        raise InputTypeError(
            f"{name} must be real, got complex dtype {value.dtype}; pass the real part explicitly if that is meant."
        )
    if value.dtype == namespace(value).bool:
        raise InputTypeError(f"{name} must be an array of real numbers, got booleans ({_describe(value)}).")
    return value if value.is_floating_point() else value.to(dtype=namespace(value).float64)


def check_int(value, name: str, minimum: int | None = None, what: str = "", maximum: int | None = None) -> int:
    """An integer (Python or NumPy, not bool; else InputTypeError) >= ``minimum`` and <= ``maximum``
    (else ValidationError)."""
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise InputTypeError(f"{name}{what} must be an integer, got {_describe(value)}.")
    if minimum is not None and value < minimum:
        raise ValidationError(f"{name}{what} must be >= {minimum}, got {int(value)}.")
    if maximum is not None and value > maximum:
        raise ValidationError(f"{name}{what} must be <= {maximum}, got {int(value)}.")
    return int(value)


#: The largest value of a size parameter (a dimension, a number of tokens, samples, modes, terms,
#: iterations): 2**31 - 1, NumPy's index range on every platform. Arrays built from sizes must
#: also fit in memory (:func:`check_memory`).
MAX_SIZE = 2**31 - 1


def check_size(value, name: str, minimum: int = 0, maximum: int = MAX_SIZE, what: str = "") -> int:
    """A size: an integer in ``[minimum, maximum]`` (InputTypeError / ValidationError naming the bound)."""
    return check_int(value, name, minimum, what, maximum)


def _memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # not POSIX: a bound of 1 TiB
        return 2**40


def check_memory(shape, name: str, itemsize: int = 8) -> None:
    """Refuse, before allocating it, an array of ``shape`` (entries of ``itemsize`` bytes) larger than
    the machine's physical memory; the ValidationError names ``name`` (the parameter(s) it comes from)."""
    need = math.prod(int(s) for s in shape) * itemsize
    have = _memory_bytes()
    if need > have:
        raise ValidationError(
            f"{name} asks for an array of shape {tuple(int(s) for s in shape)} ({need / 2**30:.3g} GiB), more "
            f"than this machine's memory ({have / 2**30:.3g} GiB); smaller sizes.")


def check_real(value, name: str) -> float:
    """A finite real number (not bool): InputTypeError for other types, ValidationError for NaN/inf."""
    if isinstance(value, bool) or not isinstance(value, Real):
        if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "iuf":
            value = value.item()
        else:
            raise InputTypeError(f"{name} must be a finite real number, got {_describe(value)}.")
    value = float(value)
    if not np.isfinite(value):
        raise ValidationError(f"{name} must be a finite real number, got {value!r}.")
    return value


def check_times(t, name: str = "t") -> np.ndarray:
    """A time or an array of times: real (InputTypeError otherwise) and finite (ValidationError)."""
    return check_finite(as_float_array(t, name), name)


def check_time(t, name: str = "t"):
    """A field's time (a real number, or an array or tensor of them: one per trajectory), real
    (InputTypeError) and finite (ValidationError), returned unchanged; integrate's twins skip it."""
    if type(t) is float:  # the common case, O(1)
        if not math.isfinite(t):
            raise ValidationError(f"{name} must be a finite real number, got {t!r}.")
        return t
    if is_torch(t) or np.ndim(t):
        check_times(t, name)
    else:
        check_real(t, name)
    return t


def check_finite(arr: np.ndarray, name: str) -> np.ndarray:
    xp = namespace(arr)
    if not bool(xp.all(xp.isfinite(arr))):
        bad = int(size(arr) - int(xp.count_nonzero(xp.isfinite(arr))))
        raise ValidationError(f"{name} contains {bad} NaN or infinite entries; expected finite numbers.")
    return arr


def check_square_matrix(value, name: str, dim: int | None = None) -> np.ndarray:
    arr = check_finite(as_float_array(value, name), name)
    if arr.ndim != 2 or arr.shape[0] != arr.shape[1]:
        raise ValidationError(f"{name} must be a square matrix of shape (d, d), got shape {arr.shape}.")
    if dim is not None and arr.shape[0] != dim:
        raise ValidationError(f"{name} must have shape ({dim}, {dim}) to match d = {dim}, got {arr.shape}.")
    return arr


def check_spd(value, name: str, dim: int | None = None, rtol: float = 1e-10) -> np.ndarray:
    """Return ``value`` as a symmetric positive definite float matrix, or raise naming ``name``."""
    arr = check_square_matrix(value, name, dim)
    if arr.size == 0:
        raise ValidationError(f"{name} must be a nonempty square matrix of shape (d, d) with d >= 1, got shape {arr.shape}.")
    scale = max(float(np.max(np.abs(arr))), 1e-300)
    asym = float(np.max(np.abs(arr - arr.T)))
    if asym > rtol * scale:
        raise ValidationError(
            f"{name} must be symmetric; max |{name} - {name}^T| = {asym:.3g} (relative {asym / scale:.3g})."
        )
    arr = 0.5 * (arr + arr.T)
    lam_min = float(np.linalg.eigvalsh(arr)[0])
    if lam_min <= 0.0:
        raise ValidationError(
            f"{name} must be positive definite; its smallest eigenvalue is {lam_min:.3g}."
        )
    return arr


def check_positive(value, name: str) -> float:
    """A finite real number > 0: InputTypeError for other types, ValidationError for other values."""
    value = check_real(value, name)
    if value <= 0.0:
        raise ValidationError(f"{name} must be a positive finite number, got {value!r}.")
    return value


def check_choice(value, name: str, choices) -> str:
    if value not in choices:
        raise ValidationError(f"{name} must be one of {sorted(choices)}, got {value!r}.")
    return value


def check_tokens(y, name: str, dim: int) -> np.ndarray:
    """Check a token array of shape ``(..., l, d)`` with ``d == dim``, finite, with l >= 1."""
    arr = check_finite(as_float_array(y, name), name)
    if arr.ndim < 2:
        raise ValidationError(
            f"{name} must have shape (..., l, d) (at least 2 axes: tokens, components), got shape {arr.shape}."
        )
    if arr.shape[-1] != dim:
        raise ValidationError(
            f"{name} has tokens of dimension {arr.shape[-1]} (last axis), but the manifold lives in R^{dim}."
        )
    if arr.shape[-2] == 0:
        raise ValidationError(f"{name} holds no tokens (shape {arr.shape}); expected at least one token.")
    if arr.size == 0:
        raise ValidationError(f"{name} is empty (shape {arr.shape}).")
    return arr


def check_token_array(y, name: str, *, allow_d0: bool = False) -> np.ndarray:
    """Check finite tokens of shape ``(..., l, d)``, l >= 1, d >= 1 (or d >= 0 with ``allow_d0``).

    Unlike :func:`check_tokens` no dimension d is imposed, and the leading (batch) axes may be
    empty.
    """
    arr = check_finite(as_token_array(y, name), name)
    if arr.ndim < 2 or arr.shape[-2] == 0 or (arr.shape[-1] == 0 and not allow_d0):
        need = "l >= 1" if allow_d0 else "l, d >= 1"
        raise ValidationError(
            f"{name} must have shape (..., l, d) with {need}, got shape {arr.shape}."
        )
    return arr


def check_nonnegative(value, name: str) -> float:
    """A finite real number >= 0 (e.g. a tolerance): InputTypeError / ValidationError otherwise."""
    value = check_real(value, name)
    if value < 0:
        raise ValidationError(f"{name} must be a finite number >= 0, got {value!r}.")
    return value


def check_beta(beta, name: str = "beta") -> float:
    """An inverse temperature: a real number (else InputTypeError), finite and >= 0 (else ValidationError)."""
    beta = check_real(beta, name)
    if beta < 0:
        raise ValidationError(f"{name} must be >= 0, got {beta!r}.")
    return beta


def check_vector(v, name: str, d: int, what: str = "the tokens y") -> np.ndarray:
    """A finite vector of shape (d,)."""
    v = check_finite(as_float_array(v, name), name)
    if v.shape != (d,):
        raise ValidationError(f"{name} must have shape ({d},) to match {what} (d = {d}), got shape {v.shape}.")
    return v


def check_nonzero_tokens(arr: np.ndarray, name: str) -> np.ndarray:
    """Raise if some token (row over the last axis) of ``arr`` is the zero vector."""
    xp = namespace(arr)
    if size(arr) and not bool(xp.all(xp.any(arr != 0.0, axis=-1))):
        bad = int(xp.sum(~xp.any(arr != 0.0, axis=-1)))
        raise ValidationError(f"{name} contains {bad} zero token(s); expected nonzero vectors.")
    return arr


def check_points(y, name: str, manifold, *, on_manifold: bool = True, min_axes: int = 2,
                 atol: float = ON_MANIFOLD_ATOL, finite: bool = True) -> np.ndarray:
    """Tokens for ``manifold``: real (InputTypeError), finite, last axis ``manifold.ambient_dim``,
    at least ``min_axes`` axes (2: ``(..., l, d)`` with l >= 1; 1: points ``(..., d)``), and, with
    ``on_manifold``, |y^T W y - 1| <= :func:`manifold_atol` (``atol`` for float64; the rule of the
    dtype ``y`` was given in otherwise) (ValidationError). Leading axes may be empty.
    """
    given = y
    arr = as_token_array(y, name)
    if finite:
        check_finite(arr, name)
    d = manifold.ambient_dim
    if arr.ndim < min_axes:
        layout = "(..., l, d) (at least 2 axes: tokens, components)" if min_axes == 2 else "(..., d)"
        raise ValidationError(
            f"{name} must have shape {layout} with d = {d} for {manifold!r}, got shape {arr.shape}."
        )
    if arr.shape[-1] != d:
        layout = f"(..., l, {d})" if min_axes == 2 else f"(..., {d})"
        raise ValidationError(
            f"{name} must have shape {layout} for {manifold!r} in R^{d}, got shape {arr.shape} "
            f"(points of dimension {arr.shape[-1]})."
        )
    if min_axes == 2 and arr.shape[-2] == 0:
        raise ValidationError(f"{name} holds no tokens (shape {arr.shape}); expected l >= 1 tokens.")
    if on_manifold and size(arr):
        atol = manifold_atol(given, manifold, atol)
        dev = manifold.deviation(arr)
        if not dev <= atol:
            raise ValidationError(
                f"{name} is not on {manifold!r}: max |y^T W y - 1| = {dev:.3g} > {atol:g}; "
                "normalize it with manifold.projection."
            )
    return arr


def call_user(fn, label: str, t, *args):
    """``fn(*args)`` for a user's callable ``label`` (e.g. ``"P(t)"``) evaluated at time ``t``.

    The package's convention: an exception it raises is re-raised as :class:`ValidationError`
    naming the callable and the time, with the original exception as ``__cause__``.
    """
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001 - re-raised with the callable's name and the time
        raise ValidationError(f"{label} raised {exc!r} at t = {plain(t)}.") from exc


def call_user_on_device(owner, fn, label: str, t, args, host_args):
    """``fn(*args)`` on tensors, falling back for good to ``fn(*host_args())`` if that raises.

    A callable written for NumPy often cannot take tensors (on a GPU it raises). The first time
    ``fn`` raises on ``args``, ``owner`` remembers it (``owner._host_fallback``) and from then on
    ``fn`` gets the NumPy copies ``host_args()`` (one transfer per call); errors raised there
    are the user's own and are wrapped as in :func:`call_user`. Returns ``(out, on_host)``.
    """
    if not owner.__dict__.get("_host_fallback"):
        try:
            return fn(*args), False
        except Exception:  # noqa: BLE001 - NumPy code given tensors: retried on the host below
            owner._host_fallback = True
    if is_torch(t) and t.ndim == 0:  # on the host path already: the time as a number
        t = float(t)
    return call_user(fn, label, t, *host_args()), True


def check_beta_batch(beta):
    """beta as a float, or as a float array (one inverse temperature per trajectory); a tensor
    that requires a gradient stays that tensor (a differentiable parameter, values checked)."""
    if requires_grad(beta):
        check_finite(as_float_array(beta, "beta"), "beta")
        return beta
    if isinstance(beta, Real) and not isinstance(beta, bool):
        return check_real(beta, "beta")
    arr = check_finite(as_float_array(beta, "beta"), "beta")
    return float(arr) if arr.ndim == 0 else arr


def check_flag(value, name: str) -> bool:
    """A flag: True or False (Python or NumPy bool), else InputTypeError naming ``name``.

    0, 1, None and strings are refused: ``project="no"`` would otherwise read as True."""
    if not isinstance(value, (bool, np.bool_)):
        raise InputTypeError(f"{name} must be True or False, got {type(value).__name__} {value!r}.")
    return bool(value)


def check_rescaled(rescaled, other: str | None = None, beta=None) -> bool:
    """The ``rescaled`` flag (e^{-beta} times USA, see riemattn.dynamics._softmax): a bool; with
    ``other`` (e.g. "normalization='softmax'") True is refused (that form is finite at every beta
    already); beta >= 0."""
    if not isinstance(rescaled, (bool, np.bool_)):
        raise InputTypeError(f"rescaled must be True or False, got {type(rescaled).__name__}.")
    if rescaled and other is not None:
        raise ValidationError(
            f"rescaled=True is e^(-beta) times USA (normalization='mean'); {other} is finite at every "
            "beta already (it divides by the row sums of the weights): drop rescaled."
        )
    if rescaled and beta is not None and not requires_grad(beta) and bool(np.any(to_numpy(beta) < 0)):
        raise ValidationError(f"rescaled=True needs beta >= 0, got beta = {beta!r}.")
    return bool(rescaled)
