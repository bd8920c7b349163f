"""Additive attention biases as parts (``AttentionField(..., bias=...)``).

A bias ``b_ij`` (per head eta, or shared) is added to the scores the normalization sees, after
beta: ``s_ij = beta y_i^T P_eta y_j + b_ij^eta``; masked pairs stay excluded. Spellings accepted by
``AttentionField(bias=...)``:

==========================================  =====================================================
an array (l, l) or (h, l, l)                 a fixed bias for l tokens (finite, or -inf: a pair
                                             excluded, like a mask)
a callable ``(i, j) -> array``               called once per number of tokens l with the integer
                                             arrays ``i`` (l, 1) and ``j`` (1, l)
``Bias(fn, time_dependent=True)``            ``fn(t, i, j)``: a bias that changes with time
``Bias(rule, per_row=True)``                 normalised per row: ``b_ij - log sum_k exp(b_ik)`` over
                                             the keys k that query i attends to, so that the
                                             weights ``exp(b_ij)`` sum to 1 on each row
:func:`alibi` ``(slopes)``                   ALiBi: ``-m_eta |i - j|`` (Press, Smith & Lewis, ICLR
                                             2022), one slope per head or one for all
``alibi(slopes, per_row=True)``              ALiBi normalised per row, as in the lost-in-the-middle
                                             particle model: the positional weights
                                             ``w_ij = exp(-m |i - j|) / sum_k exp(-m |i - k|)``
==========================================  =====================================================

A per-row bias adds a constant to each row's scores: it changes nothing under "paper" and "softmax"
(which are invariant under such a shift) and everything under "mean" and "sigmoid", where
``alpha_ij = w_ij exp(s_ij) / l`` ("mean") carries the positional weights w_ij of the row.

The bias keeps the softmax Jacobian's form, but the closed-form Jacobians are written for plain
scores: fields with a bias use finite-difference Jacobians. Engines: the NumPy engine (NumPy and
PyTorch arrays); ``engine="compiled"`` raises :class:`~riemattn.errors.UnsupportedByEngine` naming
the bias, ``engine="auto"`` runs NumPy. (``AttentionField(alibi=m)``, the older keyword, is the same
bias as ``bias=alibi(m)``.)
"""

from __future__ import annotations

import numpy as np

from .._validation import as_float_array, check_memory, check_real, check_size
from ..errors import InputTypeError, ValidationError
from .masks import _evaluate_rule, _fixed_for

__all__ = ["Bias", "alibi", "as_bias"]


class Bias:
    """A bias part: ``array(l)`` gives the additive bias for l tokens at time t.

    Parameters
    ----------
    rule : callable or array_like, shape (l, l) or (h, l, l)
        ``rule(i, j)`` (or ``rule(t, i, j)`` when ``time_dependent``) on index arrays ``i`` (l, 1)
        and ``j`` (1, l), returning an array broadcasting to (l, l) or (h, l, l); or a fixed array.
    name : str, optional
        What ``repr`` shows.
    time_dependent : bool, default False
        Whether ``rule`` takes the time first.
    per_row : bool, default False
        Whether the field normalises the bias per row over the keys each query attends to (its mask):
        ``b_ij - log sum_k exp(b_ik)``, so that the weights ``exp(b_ij)`` of a row sum to 1.
    """

    def __init__(self, rule, name: str | None = None, *, time_dependent: bool = False, per_row: bool = False):
        for flag, value in (("time_dependent", time_dependent), ("per_row", per_row)):
            if not isinstance(value, bool):
                raise InputTypeError(f"{flag} must be True or False, got {value!r}.")
        self.per_row = per_row
        if name is not None and (not isinstance(name, str) or not name):
            raise InputTypeError(f"name must be a nonempty string or None, got {name!r}.")
        if isinstance(rule, str):
            raise InputTypeError(f"rule must be a callable of (i, j) or an array (l, l) / (h, l, l), got str {rule!r}.")
        self.time_dependent = time_dependent
        if callable(rule):
            self._rule, self._fixed = rule, None
            self.name = name or f"bias({getattr(rule, '__name__', 'callable')}{', per_row=True' if per_row else ''})"
        else:
            if time_dependent:
                raise ValidationError("a fixed bias array cannot be time dependent; give a callable fn(t, i, j).")
            arr = _checked(np.array(as_float_array(rule, "rule")), "rule")  # a copy: the user's array stays writable
            self._rule, self._fixed = None, arr
            self.name = name or f"array bias {arr.shape}{' per row' if per_row else ''}"
        self._cache: dict = {}

    engines = ("numpy",)

    @property
    def heads(self) -> int | None:
        """Heads of a fixed (h, l, l) bias (None: one bias for every head)."""
        return self._fixed.shape[0] if self._fixed is not None and self._fixed.ndim == 3 else None

    def array(self, l: int, t: float = 0.0) -> np.ndarray:
        """The bias for l tokens at time t: float, shape (l, l) or (h, l, l) (read-only)."""
        l = check_size(l, "l", 1)
        check_memory((l, l), "l")
        if self._fixed is not None:
            return _fixed_for(self._fixed, l, self.name)
        t = check_real(t, "t")
        key = (l, t) if self.time_dependent else l
        out = self._cache.get(key)
        if out is None:
            out = _evaluate_rule(self._rule, (t,) if self.time_dependent else (), l, self.name, dtype=float)
            out = _checked(np.array(out), f"the rule of {self.name}")
            if not self.time_dependent:  # a time-dependent bias is recomputed at each time
                self._cache[key] = out
        return out

    def __repr__(self) -> str:
        return self.name


def _checked(arr: np.ndarray, name: str) -> np.ndarray:
    if arr.ndim not in (2, 3) or arr.shape[-1] != arr.shape[-2] or arr.shape[-1] < 1:
        raise ValidationError(f"{name} must have shape (l, l) or (h, l, l), got {arr.shape}.")
    if np.isnan(arr).any() or np.isposinf(arr).any():
        raise ValidationError(f"{name} must be finite or -inf (an excluded pair); got NaN or +inf.")
    if np.isneginf(arr).all(axis=-1).any():
        raise ValidationError(f"{name} is -inf on a whole row: a query with no key to attend to.")
    arr.setflags(write=False)
    return arr


def alibi(slopes, per_row: bool = False) -> Bias:
    """ALiBi: the bias ``-m_eta |i - j|`` with slopes m_eta >= 0 (a float for every head, or (h,)).

    ``per_row=True``: normalised per row over the keys each query attends to,
    ``log(exp(-m |i - j|) / sum_k exp(-m |i - k|))`` (the positional weights of the lost-in-the-middle
    particle model, Duerinckx, Geshkovski & Rossi 2026, with m = lambda / l and ``mask=strict_causal()``).
    """
    m = as_float_array(slopes, "slopes")
    if m.ndim > 1 or m.size == 0 or not np.isfinite(m).all() or np.any(m < 0):
        raise ValidationError(f"slopes must be finite numbers >= 0 (one, or one per head), got {slopes!r}.")
    shown = m.tolist()

    def rule(i, j):
        dist = np.abs(i - j).astype(float)
        with np.errstate(over="ignore"):  # slopes near the float limit: -inf off the diagonal (the limit)
            return -(m[:, None, None] * dist) if m.ndim else -(m * dist)

    if not isinstance(per_row, bool):
        raise InputTypeError(f"per_row must be True or False, got {per_row!r}.")
    return Bias(rule, f"alibi({shown}{', per_row=True' if per_row else ''})", per_row=per_row)


def as_bias(bias) -> Bias | None:
    """The :class:`Bias` of any spelling ``AttentionField(bias=...)`` accepts (None: no bias)."""
    if bias is None or isinstance(bias, Bias):
        return bias
    if callable(bias):
        return Bias(bias)
    if isinstance(bias, (np.ndarray, list, tuple)):
        return Bias(_checked(np.array(as_float_array(bias, "bias")), "bias"))
    raise InputTypeError(f"bias must be an array (l, l) or (h, l, l), a callable of (i, j), a riemattn.biases.Bias "
                         f"or None; got {type(bias).__name__}.")
