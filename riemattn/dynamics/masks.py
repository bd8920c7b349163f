"""Attention masks as parts: which token attends to which (``AttentionField(..., mask=...)``).

A mask says, for each head eta and each pair of positions (i, j) (token i the query, token j the
key; positions 0, ..., l - 1 along the token axis), whether i attends to j. Masked pairs get the
weight 0 in every normalization (their score is -inf before it). Spellings accepted by
``AttentionField(mask=...)``:

=====================================  ==========================================================
``"full"``                              every i attends to every j
``"causal"``                            j <= i
:func:`strict_causal` ``()``            j < i (no token attends to itself; the first token attends
                                        to nothing: "mean" and "sigmoid" only)
:func:`window` ``(k)``                  i - k < j <= i (the last k positions, sliding window)
:func:`prefix` ``(k)``                  j <= max(i, k - 1): the first k tokens attend to each
                                        other, the rest causally (prefix-LM)
a boolean array (l, l) or (h, l, l)     True where i attends to j (a fixed number of tokens l)
a callable ``(i, j) -> bool array``     called once per number of tokens l with the integer arrays
                                        ``i`` (l, 1) and ``j`` (1, l) (NumPy broadcasting), e.g.
                                        ``lambda i, j: (j <= i) & (i - j < 4)``
=====================================  ==========================================================

A row with no key (a query that attends to nothing, e.g. the first token under
:func:`strict_causal`) is allowed with the normalizations that do not normalise rows ("mean",
"sigmoid"): its weights are 0 and so is the token's update. The others ("paper", "softmax",
"hardmax", "sinkhorn") have no weights to normalise there and refuse it, naming the query. Engines: "full" and "causal" run on every
engine; the other masks run on the NumPy engine (``engine="auto"`` picks it; ``engine="compiled"``
raises :class:`~riemattn.errors.UnsupportedByEngine` naming the mask). Jacobians of fields with
those masks are formed by finite differences (the closed forms cover "full" and "causal").
"""

from __future__ import annotations

from numbers import Integral

import numpy as np

from .._validation import check_int, check_memory, check_size
from ..errors import InputTypeError, ValidationError

__all__ = ["Mask", "full", "causal", "strict_causal", "window", "prefix", "as_mask"]


class Mask:
    """A mask part: ``array(l)`` gives the boolean admissibility for l tokens.

    Parameters
    ----------
    rule : callable (i, j) -> bool array, or array_like of bool, shape (l, l) or (h, l, l)
        The rule, evaluated on index arrays ``i`` (l, 1) and ``j`` (1, l); or a fixed array.
    name : str
        What ``repr`` shows (e.g. ``"window(4)"``).
    builtin : str, optional
        ``"full"`` or ``"causal"`` for the two masks every engine runs.
    """

    def __init__(self, rule, name: str, builtin: str | None = None):
        if not isinstance(name, str) or not name:
            raise InputTypeError(f"name must be a nonempty string, got {name!r}.")
        if builtin not in (None, "full", "causal"):
            raise ValidationError(f"builtin must be None, 'full' or 'causal', got {builtin!r}.")
        self.name, self.builtin = name, builtin
        if isinstance(rule, str):
            raise InputTypeError(f"rule must be a callable of (i, j) or a boolean array, got str {rule!r} "
                                 "(the strings 'full' and 'causal' are spellings of AttentionField's mask).")
        if callable(rule):
            self._rule, self._fixed = rule, None
        else:
            arr = _bool_array(rule, "rule")
            if arr.dtype != bool or arr.ndim not in (2, 3) or arr.shape[-1] != arr.shape[-2] or arr.shape[-1] < 1:
                raise ValidationError(f"mask rule must be a boolean array of shape (l, l) or (h, l, l), got "
                                      f"{arr.dtype} of shape {arr.shape}.")
            self._rule, self._fixed = None, arr.copy()
            self._fixed.setflags(write=False)
        self._cache: dict = {}

    @property
    def engines(self) -> tuple:
        """The engines that run this mask."""
        return ("numpy", "compiled", "cuda") if self.builtin else ("numpy",)

    @property
    def heads(self) -> int | None:
        """Heads of a fixed (h, l, l) mask (None: one mask for every head)."""
        return self._fixed.shape[0] if self._fixed is not None and self._fixed.ndim == 3 else None

    def array(self, l: int) -> np.ndarray:
        """Admissibility for l tokens: bool, shape (l, l) or (h, l, l) (read-only, cached)."""
        l = check_size(l, "l", 1)
        check_memory((l, l), "l")
        if self._fixed is not None:
            return _fixed_for(self._fixed, l, f"mask {self.name}")
        if l not in self._cache:
            out = _evaluate_rule(self._rule, (), l, f"mask {self.name}")
            if out.dtype != bool:
                raise ValidationError(f"mask {self.name}: the callable rule must return a bool array, got {out.dtype}.")
            out = np.array(out)
            out.setflags(write=False)
            self._cache[l] = out
        return self._cache[l]

    def __repr__(self) -> str:
        return self.name


def _bool_array(value, name: str) -> np.ndarray:
    """``value`` as an array (a ragged nesting is a ValidationError naming ``name``)."""
    try:
        return np.asarray(value)
    except (ValueError, TypeError) as exc:
        raise ValidationError(f"{name} must be a boolean array of shape (l, l) or (h, l, l); got a ragged or "
                              f"unconvertible {type(value).__name__} ({exc}).") from None


def _fixed_for(arr: np.ndarray, l: int, label: str) -> np.ndarray:
    """A part's fixed array (..., l', l') for l tokens: itself when l' = l (else a ValidationError)."""
    if arr.shape[-1] != l:
        raise ValidationError(f"{label} is a fixed array for {arr.shape[-1]} tokens; the tokens have l = {l}.")
    return arr


def _evaluate_rule(rule, args: tuple, l: int, label: str, dtype=None) -> np.ndarray:
    """``rule(*args, i, j)`` on the index arrays i (l, 1), j (1, l), broadcast to (l, l) or (h, l, l) (a
    read-only view); the user's errors and wrong shapes are a ValidationError naming ``label``."""
    i, j = np.arange(l)[:, None], np.arange(l)[None, :]
    try:
        out = np.asarray(rule(*args, i, j), dtype=dtype)
    except Exception as exc:  # noqa: BLE001 - the user's callable: say which call failed
        raise ValidationError(f"{label}: the callable rule raised {type(exc).__name__}: {exc} when called with index "
                              f"arrays i (l, 1), j (1, l) for l = {l}.") from exc
    try:
        out = np.broadcast_to(out, out.shape[:-2] + (l, l) if out.ndim >= 2 else (l, l))
    except ValueError:
        raise ValidationError(f"{label}: the callable rule returned shape {out.shape}; expected (l, l) or (h, l, l) "
                              f"with l = {l}.") from None
    if out.ndim not in (2, 3):
        raise ValidationError(f"{label}: expected (l, l) or (h, l, l), got shape {out.shape}.")
    return out


def _keeps_a_key(arr: np.ndarray, name, normalization: str) -> np.ndarray:
    """``arr`` (a mask's admissibility, (l, l) or (h, l, l)) if every query keeps a key, else a
    ValidationError naming the query and ``normalization`` (which must normalise the row)."""
    empty = np.argwhere(~arr.any(axis=-1))
    if empty.size:
        where = ", ".join(str(tuple(int(v) for v in e)) for e in empty[:4])
        raise ValidationError(f"mask {name} leaves a query with no key to attend to (head, query index: {where}); "
                              f"normalization={normalization!r} normalises each row, so every row needs at least one "
                              "True (normalization 'mean' or 'sigmoid' gives such a query the weights 0).")
    return arr


def full() -> Mask:
    """Every token attends to every token."""
    return Mask(lambda i, j: np.ones(np.broadcast_shapes(i.shape, j.shape), dtype=bool), "'full'", "full")


def causal() -> Mask:
    """Token i attends to j <= i."""
    return Mask(lambda i, j: j <= i, "'causal'", "causal")


def strict_causal() -> Mask:
    """Token i attends to j < i (not to itself; the first token attends to nothing).

    The causal interaction of Karagodin, Polyanskiy & Rigollet (2024) and of the lost-in-the-middle
    particle model (Duerinckx, Geshkovski & Rossi, 2026), where the first token stays where it is. Its
    first row is empty: normalization "mean" or "sigmoid" only (see the module docstring).
    """
    return Mask(lambda i, j: j < i, "strict_causal()")


def _positive(k, name: str) -> int:
    if isinstance(k, bool) or not isinstance(k, Integral):
        raise InputTypeError(f"{name} must be a positive integer, got {type(k).__name__} {k!r}.")
    return check_int(k, name, 1)


def window(k: int) -> Mask:
    """Sliding window: token i attends to j with i - k < j <= i (its last k positions, itself included).

    ``window(1)`` is attention to oneself only; a k beyond the number of tokens is the causal mask.
    """
    k = _positive(k, "k")
    return Mask(lambda i, j: (j <= i) & (j > i - k), f"window({k})")


def prefix(k: int) -> Mask:
    """Prefix-LM: j <= max(i, k - 1) (the first k tokens attend to each other, the rest causally)."""
    k = _positive(k, "k")
    return Mask(lambda i, j: j <= np.maximum(i, k - 1), f"prefix({k})")


def as_mask(mask) -> Mask:
    """The :class:`Mask` of any spelling ``AttentionField(mask=...)`` accepts (module docstring)."""
    if isinstance(mask, Mask):
        return mask
    if isinstance(mask, str):
        if mask == "full":
            return full()
        if mask == "causal":
            return causal()
        raise ValidationError(f"mask must be 'full', 'causal', a riemattn.masks mask, a boolean array (l, l) or "
                              f"(h, l, l) or a callable of (i, j); got {mask!r}.")
    if callable(mask):
        return Mask(mask, f"mask({getattr(mask, '__name__', 'callable')})")
    if isinstance(mask, (np.ndarray, list, tuple)):
        arr = _bool_array(mask, "mask")
        return Mask(arr, f"array mask {arr.shape}")
    raise InputTypeError(f"mask must be a string, a riemattn.masks mask, a boolean array or a callable of (i, j); "
                         f"got {type(mask).__name__}.")
