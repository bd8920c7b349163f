"""Shared helpers of the strategies: bounded floats and arrays, size and shape arguments."""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from hypothesis.strategies import SearchStrategy

from ..errors import InputTypeError, ValidationError

#: Default sizes (re-exported by strategies): d in 2..5, h in 1..3 (each shrinks toward its smallest).
DIMS = st.integers(2, 5)
HEADS = st.integers(1, 3)


def _floats(lo, hi):
    return st.floats(lo, hi, allow_nan=False, allow_infinity=False, allow_subnormal=False)


def _matrix(shape, lo=-1.0, hi=1.0):
    return hnp.arrays(np.float64, shape, elements=_floats(lo, hi))


def _size(draw, value, name, minimum):
    """An int, or a draw from a strategy of int; at least ``minimum``."""
    if isinstance(value, SearchStrategy):
        value = draw(value)
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise InputTypeError(f"{name} must be an int or a Hypothesis strategy of int, got {value!r}.")
    if value < minimum:
        raise ValidationError(f"{name} must be >= {minimum}, got {value}.")
    return int(value)


def _shape(draw, value):
    if isinstance(value, SearchStrategy):
        value = draw(value)
    try:
        shape = tuple(int(s) for s in value)
    except (TypeError, ValueError):
        raise InputTypeError(f"batch_shape must be a tuple of int or a strategy of tuples, got {value!r}.") from None
    if any(s < 0 for s in shape):
        raise ValidationError(f"batch_shape must have nonnegative sides, got {shape}.")
    return shape


def _positive(value, name, minimum=0.0):
    if isinstance(value, bool) or not isinstance(value, Real) or not np.isfinite(value) or value <= minimum:
        raise ValidationError(f"{name} must be a finite number > {minimum}, got {value!r}.")
    return float(value)


def _flag(value, name, allow_none=False):
    """True or False (None too with ``allow_none``: drawn), else InputTypeError naming ``name``."""
    if (value is None and allow_none) or isinstance(value, (bool, np.bool_)):
        return value
    raise InputTypeError(f"{name} must be True or False{' or None' if allow_none else ''}, got {value!r}.")


def _options(value, name):
    """A tuple of options (not a bare string, whose characters would be read as options)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (tuple, list, set, frozenset)):
        raise InputTypeError(f"{name} must be a tuple of options, got {value!r}.")
    return tuple(value)


def _nonzero_rows(x):
    """Rows shorter than 0.1 get e_1 added: no zero token, and all-zero draws shrink to e_1."""
    small = np.linalg.norm(x, axis=-1) < 0.1
    x = x.copy()
    x[small, 0] += 1.0
    return x
