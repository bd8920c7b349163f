"""Hypothesis strategies for token manifolds, token configurations and attention fields.

Every strategy draws *small* problems by default (d <= 5, l <= 5, h <= 3), so one example costs
well under a millisecond to draw, and every size shrinks toward its smallest value (small ``l``,
``d``, ``h``) and every entry toward 0, so a failing example is reported small. Sizes (``d``,
``h``, ``tokens``) are an ``int`` or a strategy of ``int``; ``batch_shape`` a tuple or a strategy
of tuples (e.g. ``hypothesis.extra.numpy.array_shapes(min_dims=0, max_side=3)``).

Guarantees (each is itself a property test, tests/testing/test_testing.py):

* :func:`spd_matrices` -- symmetric, eigenvalues in [1, ``max_condition``] (rounding aside), so
  the condition number is at most ``max_condition``;
* :func:`points` -- ``|y_i^T W y_i - 1| <= 1e-12`` for every token (Sphere, Ellipsoid);
* :func:`hemisphere_points` -- on the manifold, and ``v^T y_i >= min_margin`` for every token;
* :func:`tangent_vectors` -- ``|y_i^T W u_i|`` at rounding level;
* :func:`head_matrices` -- entries within ``[-scale, scale]`` at every time (exactly symmetric
  with ``symmetric=True``), spectral norms at most ``bound`` for all times;
* :func:`betas` -- finite, within ``[min_value, max_value]``.

References
----------
Rodriguez Abella, Silvestre, Tabuada, "Consensus is all you get", ICML 2025, eqs. (3), (6) and
Theorems 3.2, 4.5 (the settings these strategies draw).
D. R. MacIver et al., "Hypothesis: a new approach to property-based testing", JOSS 4 (2019) 1891.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from .._validation import as_float_array
from ..errors import InputTypeError, ValidationError
from ..geometry.manifolds import Ellipsoid, Euclidean, Sphere
from ._draw import DIMS, HEADS, _floats, _matrix, _nonzero_rows, _positive, _shape, _size
from ._attention import attention_fields, betas, head_matrices, symmetric_with_top_eigenvector
from ._manifolds import MANIFOLD_KINDS, ellipsoids, manifolds, orthogonal_matrices, spd_matrices, spheres
from ._heads import TimeVaryingHeads
from .checks import _t_span, inner_rounding

__all__ = [
    "CONFIGURATIONS",
    "DIMS",
    "HEADS",
    "MANIFOLD_KINDS",
    "TOKENS",
    "TimeVaryingHeads",
    "attention_fields",
    "betas",
    "ellipsoids",
    "head_matrices",
    "hemisphere_points",
    "manifolds",
    "orthogonal_matrices",
    "points",
    "spd_matrices",
    "spheres",
    "step_sizes",
    "symmetric_with_top_eigenvector",
    "tangent_vectors",
    "token_configurations",
    "unit_vectors",
]

#: Default sizes: d in 2..5, l in 1..5, h in 1..3 (each shrinks toward its smallest value).
TOKENS = st.integers(1, 5)  # (DIMS and HEADS: defined with the drawing helpers, _draw)
#: The token configurations of :func:`token_configurations`: where a first experiment lands.
CONFIGURATIONS = ("generic", "coincident", "antipodal")


def _manifold(draw, manifold):
    if isinstance(manifold, SearchStrategy):
        manifold = draw(manifold)
    if not isinstance(manifold, (Sphere, Ellipsoid, Euclidean)):
        raise InputTypeError(
            f"manifold must be a riemattn Sphere, Ellipsoid or Euclidean (or a strategy of them), "
            f"got {type(manifold).__name__}."
        )
    return manifold


# ---------------------------------------------------------------------------------------------
# points
@st.composite
def points(draw, manifold, *, tokens=TOKENS, batch_shape=()):
    """Token configurations on ``manifold``, shape ``batch_shape + (l, d)``.

    Each token is pi_W(x) for x with entries in [-1, 1] (tokens shorter than 0.1 get e_1 added,
    so no token is zero); on the Euclidean space, x itself. Guarantee: |y^T W y - 1| <= 1e-12.
    Shrinks toward all tokens equal to pi_W(e_1).
    """
    manifold = _manifold(draw, manifold)
    l = _size(draw, tokens, "tokens", 1)
    shape = _shape(draw, batch_shape) + (l, manifold.ambient_dim)
    x = draw(_matrix(shape))
    if isinstance(manifold, Euclidean):
        return x
    return manifold.retract(_nonzero_rows(x))


@st.composite
def token_configurations(draw, manifold, *, tokens=TOKENS, batch_shape=(), kinds=CONFIGURATIONS):
    """Token configurations at the edges a first experiment reaches, shape ``batch_shape + (l, d)``.

    Parameters
    ----------
    manifold : Sphere, Ellipsoid or Euclidean, or a strategy of them
    tokens, batch_shape :
        As in :func:`points`.
    kinds : subset of :data:`CONFIGURATIONS`
        ``"generic"``: :func:`points`; ``"coincident"``: one token repeated l times (consensus, an
        equilibrium of every attention field); ``"antipodal"``: a token and its antipode -y
        alternating (on a Sphere or Ellipsoid -y is on the manifold; the cut locus of y, where
        log_y is not unique). The kind is drawn per configuration of the batch.

    Guarantee: as :func:`points` (|y^T W y - 1| <= 1e-12, no zero token); coincident tokens are
    equal bit for bit, antipodal ones exact negatives. Shrinks toward the first kind.
    """
    manifold = _manifold(draw, manifold)
    kinds = tuple(kinds)
    bad = [k for k in kinds if k not in CONFIGURATIONS]
    if not kinds or bad:
        raise ValidationError(f"kinds must be a nonempty subset of {CONFIGURATIONS}, got {kinds!r}.")
    l = _size(draw, tokens, "tokens", 1)
    batch = _shape(draw, batch_shape)
    y = draw(points(manifold, tokens=l, batch_shape=batch))
    flat = y.reshape((-1, l, manifold.ambient_dim))
    for k in range(len(flat)):
        kind = draw(st.sampled_from(kinds))
        if kind == "coincident":
            flat[k] = flat[k, 0]
        elif kind == "antipodal":
            flat[k] = np.where((np.arange(l) % 2 == 0)[:, None], flat[k, 0], -flat[k, 0])
    return flat.reshape(y.shape)


def step_sizes(t_span, *, max_steps=16, max_factor=4.0):
    """Step sizes dt for ``integrate`` over ``t_span = (t0, t1)``, from the whole horizon down.

    Draws ``(t1 - t0) / n`` for n in 1..``max_steps`` (1: one step as long as the horizon), or a
    step longer than the horizon, ``(t1 - t0) * f`` with f in (1, ``max_factor``] (integrate then
    takes one step, clipped to t1). Tiny steps come from a tiny horizon. Shrinks toward one step
    over the whole horizon. A span of length 0 gives ``just(1.0)`` (any step is clipped to it).
    """
    t0, t1 = _t_span(t_span)
    T = abs(t1 - t0)
    if not np.isfinite(T):
        raise ValidationError(f"t_span must be finite, got {t_span!r}.")
    max_steps = _size(None, max_steps, "max_steps", 1)  # an int (no draw needed)
    max_factor = _positive(max_factor, "max_factor", 1.0)
    if T == 0:
        return st.just(1.0)
    inside = st.integers(1, max_steps).map(lambda n: T / n)
    beyond = _floats(1.0, max_factor).filter(lambda f: f > 1.0).map(lambda f: T * f)
    return st.one_of(inside, beyond)


@st.composite
def unit_vectors(draw, d):
    """A vector of unit Euclidean length, shape (d,); shrinks toward e_1."""
    x = _nonzero_rows(draw(_matrix((_size(draw, d, "d", 1),))))
    return x / np.linalg.norm(x)


@st.composite
def hemisphere_points(draw, manifold, *, v=None, tokens=TOKENS, batch_shape=(), min_margin=None):
    """``(y, v)``: tokens on E_W in the open hemisphere H+(v) = {y : v^T y > 0}, and v.

    Parameters
    ----------
    manifold : Sphere or Ellipsoid, or a strategy of them
    v : array_like, shape (d,), optional
        The hemisphere's direction; drawn (unit Euclidean length) when None.
    tokens, batch_shape :
        As in :func:`points`; one v certifies every configuration of the batch.
    min_margin : float, optional
        Guarantee: ``v^T y_i >= min_margin`` for every token (up to 1e-15 relative rounding).
        Must be below ``max_{y in E_W} v^T y = kappa = sqrt(v^T W^{-1} v)``. Default
        ``min(1e-3, kappa / 2)``: 1e-3 unless W is so elongated along v that the whole
        ellipsoid lies within 2e-3 of v-perp (lambda_max(W) > 2.5e5 for a unit v), so every
        manifold drawn by :func:`manifolds` composes with it.

    Returns
    -------
    y : ndarray, shape ``batch_shape + (l, d)``
    v : ndarray, shape (d,)

    Notes
    -----
    With the pole u = W^{-1} v / kappa (kappa = sqrt(v^T W^{-1} v), the maximizer of v^T y on
    E_W), each x (entries in [-1, 1]) is reflected through v-perp where v^T x < 0, moved to
    x + c u with c = |x|_W m / (kappa - m), and retracted: v^T y >= c kappa / (|x|_W + c) = m.
    """
    manifold = _manifold(draw, manifold)
    if isinstance(manifold, Euclidean):
        raise ValidationError("hemisphere_points needs a Sphere or an Ellipsoid, got Euclidean.")
    d = manifold.ambient_dim
    m = None if min_margin is None else _positive(min_margin, "min_margin")
    Winv = np.linalg.inv(manifold.W)
    if v is None and m is not None:
        # a unit v has kappa >= 1 / sqrt(lambda_max(W)); check the margin against that first
        kmin = 1.0 / np.sqrt(np.linalg.eigvalsh(manifold.W)[-1])
        if m >= kmin:
            raise ValidationError(f"min_margin must be < 1 / sqrt(lambda_max(W)) = {kmin:.6g}, got {m}.")
    if v is None:
        v = draw(unit_vectors(d))
    else:
        v = as_float_array(v, "v")
        if v.shape != (d,) or not np.isfinite(np.linalg.norm(v)) or not np.any(v):
            raise ValidationError(f"v must be a finite nonzero vector of shape ({d},), got {v!r}.")
    kappa = float(np.sqrt(v @ Winv @ v))
    if m is None:
        m = min(1e-3, 0.5 * kappa)
    if m >= kappa:
        raise ValidationError(f"min_margin must be < max v^T y = sqrt(v^T W^-1 v) = {kappa:.6g}, got {m}.")
    u = Winv @ v / kappa
    l = _size(draw, tokens, "tokens", 1)
    x = draw(_matrix(_shape(draw, batch_shape) + (l, d)))
    s = x @ v
    x = x - 2.0 * np.minimum(s, 0.0)[..., None] * v / (v @ v)  # reflect through v-perp
    small = np.linalg.norm(x, axis=-1) < 0.1
    x[small] = u  # no zero token; all-zero draws shrink to the pole u
    c = manifold.norm(x) * m / (kappa - m)
    return manifold.retract(x + c[..., None] * u), v


@st.composite
def tangent_vectors(draw, manifold, base_point, *, scale=1.0):
    """Tangent vectors at ``base_point`` (shape (..., d)), same shape: (I - y y^T W) u.

    u has entries in [-scale, scale]; guarantee |y^T W u| at rounding level
    (<= 1e-15 d |W|_2 scale); on the Euclidean space u itself. Shrinks toward 0.

    Raises ``ValidationError`` if ``base_point`` is not finite or not on the manifold
    (|y^T W y - 1| > 1e-10 + its rounding level, :func:`riemattn.testing.checks.inner_rounding`):
    the projection (I - y y^T W) is tangent only at points of the manifold.
    """
    manifold = _manifold(draw, manifold)
    y = as_float_array(base_point, "base_point")
    if y.ndim < 1 or y.shape[-1] != manifold.ambient_dim:
        raise ValidationError(
            f"base_point must have shape (..., {manifold.ambient_dim}) for {manifold!r}, got {y.shape}."
        )
    if not np.all(np.isfinite(y)):
        raise ValidationError(f"base_point must be finite, got a NaN or inf in shape {y.shape}.")
    if not isinstance(manifold, Euclidean) and y.size:
        dev = np.abs(manifold.inner(y, y) - 1.0)
        tol = 1e-10 + inner_rounding(manifold, y, y)
        if np.any(dev > tol):
            k = tuple(int(i) for i in np.unravel_index(np.argmax(dev - tol), dev.shape))
            raise ValidationError(f"base_point must lie on {manifold!r}: |y^T W y - 1| = {dev[k]:.2e} > {tol[k]:.1e} "
                                  f"at point {k}.")
    scale = _positive(scale, "scale")
    return manifold.tangent(y, draw(_matrix(y.shape, -scale, scale)))
