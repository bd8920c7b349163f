"""Field families of the output-mode suite (tests/suites/test_output_modes.py): a registry, so that a
family added here is covered by every test that enumerates :data:`FAMILIES`.

Each family builds a small problem (a few tokens, a span of a few dozen adaptive steps at the
suite's tolerance) whose tokens cluster, so that the suite's consensus event ("distance": the
largest distance to the first token) falls through its thresholds. Deterministic seeds.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np

import riemattn as ra
from riemattn.dynamics.circle import CircleField
from riemattn.dynamics.schedules import TimeVaryingHeads


class Case(NamedTuple):
    field: object
    y0: np.ndarray
    t_span: tuple


#: name -> builder of a :class:`Case`
FAMILIES: dict[str, Callable[[], Case]] = {}
#: families for the steppers that declare ``stiff`` only (explicit fixed steps blow up on them,
#: explicit adaptive ones take thousands of steps)
STIFF_ONLY: set[str] = set()
#: the families of attention parts (below): run on one stepper of each kind (the suite's ONE_PER_KIND)
PART_FAMILIES: set[str] = set()


def family(name, stiff_only=False, part=False):
    def deco(fn):
        FAMILIES[name] = fn
        if stiff_only:
            STIFF_ONLY.add(name)
        if part:
            PART_FAMILIES.add(name)
        return fn
    return deco


def _spd(rng, d):
    G = rng.standard_normal((d, d))
    return G @ G.T / d + np.eye(d)


def _sphere_points(rng, shape, d):
    return ra.Sphere(d - 1).projection(rng.standard_normal(shape + (d,)))


@family("sphere")
def _sphere():
    rng = np.random.default_rng(11)
    return Case(ra.usa(2.0, 3), _sphere_points(rng, (5,), 3), (0.0, 1.5))


@family("ellipsoid")
def _ellipsoid():
    rng = np.random.default_rng(12)
    W = _spd(rng, 3)
    P = np.stack([np.eye(3), _spd(rng, 3)]) / 2
    field = ra.AttentionField(P, W=W, normalization="softmax", beta=2.0)
    return Case(field, ra.Ellipsoid(W).projection(rng.standard_normal((5, 3))), (0.0, 1.5))


@family("flat")
def _flat():
    """Euclidean tokens: GLPR's angles on the line (CircleField's Field form, tokens (n, 1))."""
    rng = np.random.default_rng(13)
    return Case(CircleField(1.5, "sa"), rng.uniform(-1.2, 1.2, (6, 1)), (0.0, 2.0))


@family("causal")
def _causal():
    rng = np.random.default_rng(14)
    return Case(ra.sa(3.0, 3, mask="causal"), _sphere_points(rng, (5,), 3), (0.0, 1.5))


@family("time_varying_heads")
def _time_varying():
    rng = np.random.default_rng(15)
    B = np.eye(3)[None]
    A = 0.5 * rng.standard_normal((1, 1, 3, 3))
    heads = TimeVaryingHeads(B, A, np.array([3.0]), np.array([0.4]))
    return Case(ra.AttentionField(heads, beta=2.0), _sphere_points(rng, (5,), 3), (0.0, 1.5))


@family("per_trajectory_beta_and_weights")
def _per_trajectory():
    """A batch of 3 with one beta and one P per trajectory (P of shape (3, 1, d, d))."""
    rng = np.random.default_rng(16)
    P = np.stack([np.eye(3), _spd(rng, 3) / 2, np.diag([1.0, 0.5, 0.25])])[:, None]
    field = ra.AttentionField(P, beta=np.array([1.0, 2.0, 3.0]), normalization="softmax")
    return Case(field, _sphere_points(rng, (3, 4), 3), (0.0, 1.5))


@family("layer_norm")
def _layer_norm():
    """Pre-LN tokens (on R^d, radii growing) around a softmax attention field."""
    rng = np.random.default_rng(17)
    inner = ra.AttentionField(np.eye(3)[None], 0.5 * np.eye(3)[None], normalization="softmax", beta=2.0)
    return Case(ra.layernorm(inner, "pre"), _sphere_points(rng, (4,), 3), (0.0, 1.5))


@family("circle")
def _circle():
    rng = np.random.default_rng(18)
    return Case(ra.usa(2.0, 2), _sphere_points(rng, (6,), 2), (0.0, 1.5))


@family("stiff", stiff_only=True)
def _stiff():
    """USA at beta = 9 (weights up to e^9 / 4): "auto" switches to RODAS4P on about half of its
    175 steps and back (measured), so its dense output runs through both methods."""
    rng = np.random.default_rng(0)
    return Case(ra.usa(9.0, 3), _sphere_points(rng, (4,), 3), (0.0, 20.0))


# ---------------------------------------------------------------------------------------------
# Attention from parts (issue 55), enumerated from the registries: every mask and bias part of the
# edges suite (tests/_edge_problems.py: MASK_PARTS, BIAS_PARTS), every normalization outside the
# softmax family but hardmax (riemattn.dynamics.attention.OTHER_NORMALIZATIONS: hardmax is
# discontinuous, adaptive steps and events straddle its switches; the edges suite draws it), the
# uncentred flat update, a fixed context and two populations. A part added to a registry is a family
# the day it lands.
# ---------------------------------------------------------------------------------------------
def _parts_case(seed, **kw):
    rng = np.random.default_rng(seed)
    return Case(ra.AttentionField(np.eye(3), beta=2.0, **kw), _sphere_points(rng, (5,), 3), (0.0, 1.5))


def _register_parts():
    import zlib

    from riemattn.dynamics.attention import OTHER_NORMALIZATIONS
    from _edge_problems import BIAS_PARTS, MASK_PARTS, ROWLESS_MASKS

    def seed(name):
        return zlib.crc32(name.encode()) % 2**16

    for m, make in MASK_PARTS.items():
        if m in ("full", "causal"):  # the families above
            continue
        norm = "mean" if m in ROWLESS_MASKS else "softmax"
        family(f"mask-{m}", part=True)(lambda m=m, make=make, norm=norm: _parts_case(
            seed(m), mask=make(), normalization=norm))
    for b, make in BIAS_PARTS.items():
        if b == "none":
            continue
        family(f"bias-{b}", part=True)(lambda b=b, make=make: _parts_case(
            seed(b), mask="causal", bias=make(), normalization="mean" if "row" in b else "softmax"))
    for n in OTHER_NORMALIZATIONS:
        if n == "hardmax":
            continue
        family(f"normalization-{n}", part=True)(lambda n=n: _parts_case(seed(n), normalization=n))


_register_parts()


@family("uncentred", part=True)
def _uncentred():
    """Flat space, sum_j alpha_ij U y_j with U = -I/2 (a contraction: the tokens meet near 0)."""
    rng = np.random.default_rng(19)
    field = ra.AttentionField(np.eye(3), -0.5 * np.eye(3), W="flat", normalization="softmax", update="uncentred")
    return Case(field, rng.standard_normal((5, 3)), (0.0, 1.5))


@family("context", part=True)
def _context():
    """Cross-attention to a fixed context of 3 keys (one per trajectory of a batch of 2)."""
    rng = np.random.default_rng(20)
    C = _sphere_points(rng, (2, 3), 3)
    field = ra.AttentionField(np.eye(3), beta=2.0, normalization="softmax", context=C)
    return Case(field, _sphere_points(rng, (2, 4), 3), (0.0, 1.5))


@family("populations", part=True)
def _populations():
    """Two populations: 0 attends to itself causally and to 1; 1 attends to itself."""
    rng = np.random.default_rng(21)
    field = ra.Populations((3, 2), {(0, 0): ra.AttentionField(np.eye(3), beta=2.0, mask="causal"),
                                    (0, 1): ra.AttentionField(np.eye(3), beta=2.0),
                                    (1, 1): ra.AttentionField(np.eye(3), beta=2.0, normalization="mean")})
    return Case(field, _sphere_points(rng, (5,), 3), (0.0, 1.5))
