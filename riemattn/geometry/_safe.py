r"""Smooth, overflow-safe scalar functions of the metrics' closed forms (NumPy or torch).

The closed forms of :mod:`riemattn.geometry.metrics` are smooth functions of s = |v|^2, but the
textbook spelling through theta = sqrt(s) is not: autograd differentiates sqrt at s = 0 to inf and
returns NaN for exp_x(0), log_x(x), dist(x, x)^2 and the transport along a zero direction, where
the functions are smooth. Here each is a function of s, with its Taylor series on
s < ``SERIES_BELOW`` (the other branch is evaluated on a harmless stand-in there, the "double
where", so that neither forward values nor gradients see an inf):

- ``cos_sinc(s)`` = (cos sqrt(s), sin sqrt(s) / sqrt(s)); series to s^3, truncation
  < s^4 / 8! < 3e-21 on s < 1e-4;
- ``atan_ratio(s, c)`` = atan2(sqrt(s), c) / sqrt(s) for c > 0: (1 / c) atan(w) / w, w^2 = z = s / c^2,
  atan(w) / w = 1 - z / 3 + z^2 / 5 - z^3 / 7 + z^4 / 9 - ..., used for z < 1e-4 (truncation
  < z^5 / 11 < 1e-21);
- ``safe_sqrt(s)``: sqrt(s) with the subgradient 0 at s = 0 (torch.linalg.norm's convention).

:func:`check_plane` is the shared test of the sectional curvatures that two vectors span a plane.
"""

from __future__ import annotations

import numpy as np

import contextlib

from .._backend import is_torch, namespace, to_numpy
from ..errors import ValidationError
from ._fast import check_broadcast, same_kind

#: s (resp. s / c^2) below which the Taylor series replace the closed forms.
SERIES_BELOW = 1e-4

_EPS = float(np.finfo(np.float64).eps)


def cos_sinc(s):
    """(cos sqrt(s), sin sqrt(s) / sqrt(s)) for s >= 0, smooth at s = 0 for autograd; shapes of s."""
    xp = namespace(s)
    small = s < SERIES_BELOW
    big = xp.where(small, xp.ones_like(s), s)
    t = xp.sqrt(big)
    cos_series = 1.0 - s / 2.0 + s * s / 24.0 - s * s * s / 720.0
    sinc_series = 1.0 - s / 6.0 + s * s / 120.0 - s * s * s / 5040.0
    return xp.where(small, cos_series, xp.cos(t)), xp.where(small, sinc_series, xp.sin(t) / t)


def atan_ratio(s, c):
    """atan2(sqrt(s), c) / sqrt(s) (s >= 0), smooth at s = 0 where c > 0; shape of s.

    Where s = 0 and c <= 0 (antipodal points) the value is not defined: callers replace it.
    """
    xp = namespace(s, c)
    small = (c > 0) & (s < SERIES_BELOW * c * c)
    cs = xp.where(small, c, xp.ones_like(c))
    z = xp.where(small, s, xp.zeros_like(s)) / (cs * cs)
    series = (1.0 - z / 3.0 + z * z / 5.0 - z * z * z / 7.0 + z * z * z * z / 9.0) / cs
    sd = xp.where(small | (s <= 0), xp.ones_like(s), s)
    r = xp.sqrt(sd)
    return xp.where(small, series, xp.atan2(r, c) / r)


def safe_sqrt(s):
    """sqrt(max(s, 0)) whose gradient at s <= 0 is 0 (not inf)."""
    xp = namespace(s)
    pos = s > 0
    return xp.where(pos, xp.sqrt(xp.where(pos, s, xp.ones_like(s))), xp.zeros_like(s))


def scaled(v):
    """(v / m, m) with m = max |v_i| over the last axis (1 where v = 0): |v / m| <= 1, no overflow."""
    xp = namespace(v)
    m = xp.max(xp.abs(v), axis=-1)
    m = xp.where(m > 0, m, xp.ones_like(m))
    return v / m[..., None], m


def check_plane(aa, bb, ab, d: int, cond: float):
    """Raise ValidationError unless every pair spans a plane: |a|^2 |b|^2 - <a, b>^2 > tol |a|^2 |b|^2.

    tol = 8 (d + 2) cond(W) eps: the rounding level of the Gram determinant (each inner product
    of d terms has error <~ d eps cond(W) relative to |a|_W |b|_W, and the determinant cancels two
    of them). Below it the plane's direction -- and any curvature computed from it -- is rounding
    noise. Returns the Gram determinant.
    """
    den = aa * bb - ab * ab
    tol = 8.0 * (d + 2) * cond * _EPS
    bad = ~(to_numpy(den) > tol * to_numpy(aa * bb))
    if bad.any():
        nb = int(bad.sum())
        worst = float(np.max(np.where(bad, to_numpy(den), -np.inf)))
        raise ValidationError(
            f"tangent_vec_a and tangent_vec_b must be linearly independent (the sectional curvature is that of "
            f"the plane they span): {nb} of {bad.size} pair(s) have |a|^2 |b|^2 - <a, b>^2 <= {tol:.3g} "
            f"|a|^2 |b|^2 (rounding level; largest such value {worst:.3g}), a zero vector included."
        )
    return den


def pair(a, b, names):
    """``a``, ``b`` of the same kind, after checking that their batch shapes broadcast (ValidationError)."""
    a, b = same_kind(a, b)
    check_broadcast((a, b), names)
    return a, b


def _safe_div(num, den):
    """num / den with 0 / 0 -> 0 (elementwise, any namespace)."""
    xp = namespace(num, den)
    ok = den != 0
    return xp.where(ok, num / xp.where(ok, den, xp.ones_like(den)), xp.zeros_like(num))


def angle_direction(space, x, v):
    """(|P v|_W, P v / |P v|_W) computed from v / max|v_i| (no overflow); P the tangent projection at x."""
    vs, m = scaled(v)
    vs = space.tangent(x, vs)
    n = safe_sqrt(space.inner(vs, vs))
    return m * n, _safe_div(vs, n[..., None])


def quiet(like):
    """NumPy's over/invalid warnings silenced (a context; nothing for tensors): for closed forms whose
    overflowed entries are recomputed afterwards."""
    return contextlib.nullcontext() if is_torch(like) else np.errstate(over="ignore", invalid="ignore")
