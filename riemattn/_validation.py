"""Input checks shared by the package. Each raises a :mod:`riemattn.errors` type naming the argument."""

from __future__ import annotations

from numbers import Real

import numpy as np

from .errors import InputTypeError, ValidationError


def as_float_array(value, name: str) -> np.ndarray:
    """Convert ``value`` to a float64 array, or raise naming ``name``."""
    if isinstance(value, (str, bytes)) or callable(value) and not isinstance(value, np.ndarray):
        raise InputTypeError(f"{name} must be an array of numbers, got {type(value).__name__}.")
    try:
        arr = np.asarray(value, dtype=float)
    except (TypeError, ValueError) as exc:
        raise InputTypeError(f"{name} must be an array of numbers, got {type(value).__name__}: {exc}") from None
    return arr


def check_finite(arr: np.ndarray, name: str) -> np.ndarray:
    if not np.all(np.isfinite(arr)):
        bad = int(np.size(arr) - np.count_nonzero(np.isfinite(arr)))
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
    if not isinstance(value, Real) or isinstance(value, bool):
        raise InputTypeError(f"{name} must be a real number, got {type(value).__name__}.")
    value = float(value)
    if not np.isfinite(value) or value <= 0.0:
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
    arr = check_finite(as_float_array(y, name), name)
    if arr.ndim < 2 or arr.shape[-2] == 0 or (arr.shape[-1] == 0 and not allow_d0):
        need = "l >= 1" if allow_d0 else "l, d >= 1"
        raise ValidationError(
            f"{name} must have shape (..., l, d) with {need}, got shape {arr.shape}."
        )
    return arr


def check_nonnegative(value, name: str) -> float:
    """A finite real number >= 0 (e.g. a tolerance); anything else raises ValidationError."""
    bad = isinstance(value, bool) or not isinstance(value, Real)
    if bad or not np.isfinite(value) or value < 0:
        raise ValidationError(f"{name} must be a finite number >= 0, got {value!r}.")
    return float(value)


def check_beta(beta, name: str = "beta") -> float:
    """An inverse temperature: finite and real (else InputTypeError), >= 0 (else ValidationError)."""
    if isinstance(beta, bool) or not isinstance(beta, Real) or not np.isfinite(beta):
        raise InputTypeError(f"{name} must be a finite real number, got {beta!r}.")
    if beta < 0:
        raise ValidationError(f"{name} must be >= 0, got {beta!r}.")
    return float(beta)
