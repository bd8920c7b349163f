"""Populations of tokens that attend to each other: cross-attention where the context moves too.

A state ``y`` of shape (..., L, d) holds populations of ``sizes = (l_0, l_1, ...)`` tokens, one after
the other along the token axis (L = sum of the sizes). Population a moves by the sum of the
attention fields it is given, one per population b it attends to::

    dy_a/dt = sum_b F_ab(t, y_a; keys and values y_b)

with ``F_aa`` self-attention (the field as it is: any mask, bias, positions, normalization) and, for
b != a, cross-attention (the field's scores beta y_i^T P_eta c_j and update sum_j alpha_ij U_eta c_j
with c = y_b, projected on the tangent space at y_i: what ``AttentionField(..., context=y_b)`` computes,
with a context that is now a state). A population with no field does not move (a fixed context is
the special case ``AttentionField(context=C)``). Examples: an encoder's tokens moving by
self-attention while a decoder's tokens attend to themselves (causally) and to the encoder
(``{(0, 0): enc, (1, 1): dec, (1, 0): cross}``); two species with attraction inside and repulsion
across (``U = -I`` on the cross fields).

Every field lives on the same manifold (the sphere, one ellipsoid, or flat space of the same d); a
cross field has mask "full" and no bias, ALiBi, RoPE or Sinkhorn normalization (positions and masks
relate a query to keys of its own sequence). The field is a :class:`~riemattn.dynamics.fields.Field`:
``integrate`` (NumPy engine, any explicit, Lie-group-free or stiff stepper with finite-difference
Jacobians), events and the batch axes work as for any field; the compiled engines do not run it
(``engine="compiled"`` raises :class:`~riemattn.errors.UnsupportedByEngine`).
"""

from __future__ import annotations

from numbers import Integral

import numpy as np

from .._backend import namespace, size
from .._validation import check_points, check_time
from ..errors import InputTypeError, ValidationError
from ._parts import cross_call, cross_conflicts
from .attention import AttentionField
from .fields import _CheckedField

__all__ = ["Populations"]


class Populations(_CheckedField):
    """Several populations of tokens in one state, each moved by attention to some of them.

    Parameters
    ----------
    sizes : sequence of int
        Tokens per population (each >= 1), in the order they are stacked along the token axis.
    fields : dict
        ``{(a, b): AttentionField}``: population a attends to population b with that field
        (a == b: self-attention; a != b: cross-attention, mask "full", no bias or positions).

    Notes
    -----
    ``field(t, y)`` for y of shape (..., sum(sizes), d) returns the tangent field of the same shape;
    ``split(y)`` gives the populations as views. References: the encoder-decoder transformer of
    Vaswani et al. (2017) in the continuous-time form of docs/attention_parts.md.
    """

    def __init__(self, sizes, fields):
        if isinstance(sizes, (str, bytes)) or not hasattr(sizes, "__len__") or len(sizes) < 1:
            raise InputTypeError(f"sizes must be a sequence of positive integers, got {sizes!r}.")
        if any(isinstance(s, bool) or not isinstance(s, Integral) or s < 1 for s in sizes):
            raise ValidationError(f"sizes must be positive integers (tokens per population), got {list(sizes)!r}.")
        self.sizes = tuple(int(s) for s in sizes)
        self._bounds = np.concatenate([[0], np.cumsum(self.sizes)]).tolist()
        if not isinstance(fields, dict) or not fields:
            raise InputTypeError("fields must be a nonempty dict {(a, b): AttentionField} (a attends to b).")
        p = len(self.sizes)
        self.fields = {}
        for key, f in fields.items():
            if (not isinstance(key, tuple) or len(key) != 2 or any(isinstance(k, bool) or not isinstance(k, Integral)
                                                                   or not 0 <= k < p for k in key)):
                raise ValidationError(f"fields' keys must be pairs (a, b) of populations 0..{p - 1}, got {key!r}.")
            if not isinstance(f, AttentionField):
                raise InputTypeError(f"fields[{key}] must be an AttentionField, got {type(f).__name__}.")
            if key[0] != key[1]:
                if f.context is not None:
                    raise ValidationError(f"fields[{key}] has a fixed context; the cross field's keys are population "
                                          f"{key[1]}: build it without context=.")
                bad = cross_conflicts(f)
                if bad:
                    raise ValidationError(f"fields[{key}] (cross-attention from population {key[0]} to {key[1]}) "
                                          f"does not combine with {', '.join(bad)}; use mask='full'.")
            self.fields[(int(key[0]), int(key[1]))] = f
        first = next(iter(self.fields.values()))
        for key, f in self.fields.items():
            if f.d != first.d or type(f.manifold) is not type(first.manifold) or not _same_w(f, first):
                raise ValidationError(f"fields[{key}] lives on {f.manifold!r}, another field on {first.manifold!r}: "
                                      "every population must live on the same manifold.")
        self.manifold = first.manifold
        self._checked = True

    def split(self, y):
        """The populations of y (..., sum(sizes), d), finite, as a list of views (..., l_a, d)."""
        return self._split(self._check(y))

    def _split(self, y):
        b = self._bounds
        return [y[..., b[a]:b[a + 1], :] for a in range(len(self.sizes))]

    def _check(self, y):
        y = check_points(y, "y", self.manifold, on_manifold=False)
        if y.shape[-2] != self._bounds[-1]:
            raise ValidationError(f"y has {y.shape[-2]} tokens; the populations {self.sizes} have "
                                  f"{self._bounds[-1]} together.")
        return y

    def __call__(self, t, y):
        """Tangent field (..., sum(sizes), d): population a's rows are sum_b F_ab(t, y_a; y_b)."""
        y, t = (self._check(y), check_time(t)) if self._checked else (y, t)
        xp = namespace(y)
        if size(y) == 0:
            return xp.zeros_like(y)
        parts = self._split(y)
        out = []
        for a, ya in enumerate(parts):
            total = None
            for (qa, kb), f in self.fields.items():
                if qa != a:
                    continue
                twin = f._unchecked()
                v = twin(t, ya) if kb == a else cross_call(twin, t, ya, parts[kb])
                total = v if total is None else total + v
            out.append(xp.zeros_like(ya) if total is None else total)
        return xp.concatenate(out, axis=-2) if type(y) is np.ndarray else xp.cat(out, dim=-2)

    def take(self, index, batch_shape: tuple):
        """These populations for the trajectories ``index`` (each field's ``take``), or None."""
        taken = {}
        for key, f in self.fields.items():
            g = f.take(index, batch_shape)
            if g is None:
                return None
            taken[key] = g
        if all(taken[k] is self.fields[k] for k in taken):
            return self
        out = Populations(self.sizes, taken)
        out._checked = self._checked
        return out

    def __repr__(self) -> str:
        links = ", ".join(f"{a}<-{b}" if a != b else f"{a}<-{a} (self)" for a, b in self.fields)
        return f"Populations(sizes={self.sizes}, {links}, manifold={self.manifold!r})"


def _same_w(f, g) -> bool:
    return (f.W is None) == (g.W is None) and (f.W is None or np.array_equal(f.W, g.W))
