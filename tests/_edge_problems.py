"""Problems at the edges, drawn with riemattn.testing's own strategies (tests/suites/test_edges.py).

A :class:`Problem` is a field on a manifold, initial tokens, a time span and a step size. Fields:

* ``"attention"``: an :class:`~riemattn.AttentionField` (Sphere or Ellipsoid) with head matrices
  from ``head_matrices`` (constant or time-varying), U = I, drawn, or 0, P possibly 0, beta from
  ``betas`` or 0 -- the zero-weight and beta = 0 edges;
* ``"user"``: a user's function wrapped in :class:`~riemattn.VectorField` that counts its calls:
  F(y) = (I - y y^T W)(y K + a) (the projection of an affine field; on the Euclidean space y K + a
  itself), K and a with entries up to 3 -- with K skew and W = I this is issue 34's rotation field
  a x y + a - <y, a> y;
* ``"circle"``: a :class:`~riemattn.dynamics.circle.CircleField` (SA, USA or rescaled USA, beta from
  ``betas`` or 0, direct or Fourier evaluation) on ``Euclidean(1)``, angles as a column (..., n, 1): generic, coincident or
  antipodal (theta, theta + pi) angles.

``FIELD_KINDS`` maps each field kind to the manifold kinds it is drawn on: a new kind of field
added there is drawn by every property of the suite.

Tokens from ``token_configurations`` (generic, coincident, antipodal), batches (), (2,) and the
empty (0,); horizons from 1e-9 to 3 and step sizes from ``step_sizes`` (one step over the whole
horizon, down to horizon / 12, and steps longer than the horizon).
"""

from __future__ import annotations

from dataclasses import dataclass, field as dc_field

import numpy as np
from hypothesis import strategies as st

import riemattn as ra
from riemattn.dynamics.circle import CircleField
from riemattn.testing import strategies as rs

HORIZONS = (0.7, 3.0, 0.05, 1e-9)  # shrinks toward the first
BATCHES = ((), (2,), (0,))
SMALL_DIMS = st.integers(2, 3)
SMALL_TOKENS = st.integers(1, 3)
#: field kind -> the manifold kinds it is drawn on (the registry of the suite's fields)
FIELD_KINDS = {"user": rs.MANIFOLD_KINDS, "attention": ("sphere", "ellipsoid"), "circle": ("euclidean",),
               # attention beyond softmax (issue 44): on flat space too (W="flat"); positions drawn
               "hardmax": ("sphere", "ellipsoid", "euclidean"), "sinkhorn": ("sphere", "ellipsoid", "euclidean"),
               # issue 55's parts: sigmoid attention; masks and biases of riemattn.masks / .biases below
               "sigmoid": ("sphere", "ellipsoid", "euclidean")}
#: every public constructor of riemattn.masks and riemattn.biases, as drawn (tests/suites/test_edges.py
#: checks that a new one is registered here)
MASK_PARTS = {"full": lambda: "full", "causal": lambda: "causal", "window": lambda: ra.masks.window(2),
              "prefix": lambda: ra.masks.prefix(2), "Mask": lambda: ra.masks.Mask(lambda i, j: j >= i, "anticausal"),
              "strict_causal": lambda: ra.masks.strict_causal()}
#: Masks that leave a query with no key: only with the normalizations that do not normalise rows.
ROWLESS_MASKS = {"strict_causal"}
BIAS_PARTS = {"none": lambda: None, "alibi": lambda: ra.biases.alibi(0.5),
              "alibi-per-row": lambda: ra.biases.alibi(0.5, per_row=True),
              "Bias": lambda: ra.biases.Bias(lambda t, i, j: -np.cos(t) * np.abs(i - j), time_dependent=True)}


@dataclass
class Problem:
    manifold: object
    field: object
    y0: np.ndarray
    t_span: tuple
    dt: float
    field_kind: str
    manifold_kind: str
    calls: list = dc_field(default_factory=lambda: [0])

    def batched(self, n):
        """The same problem on a batch of n configurations: the first as given, the others rotated
        copies of it (so their adaptive steps differ)."""
        y = [self.y0] + [np.roll(self.y0, k, axis=-1) for k in range(1, n)]
        return Problem(self.manifold, self.field, np.stack(y), self.t_span, self.dt, self.field_kind,
                       self.manifold_kind, self.calls)

    def __repr__(self):
        return (f"Problem({self.field_kind} field on {self.manifold!r}, y0 {self.y0.shape} = {self.y0.tolist()}, "
                f"t_span {self.t_span}, dt {self.dt!r})")


def kind_of(manifold) -> str:
    return {ra.Sphere: "sphere", ra.Ellipsoid: "ellipsoid", ra.Euclidean: "euclidean"}[type(manifold)]


def user_field(manifold, K, a, calls):
    """F(t, y) = (I - y y^T W)(y K + a) (y K + a on R^d), counting its calls in ``calls[0]``."""
    flat = isinstance(manifold, ra.Euclidean)

    def f(t, y):
        calls[0] += 1
        v = y @ K + a
        return v if flat else manifold.tangent(y, v)

    return ra.VectorField(f, manifold)


@st.composite
def attention(draw, manifold, normalization="paper"):
    d = manifold.ambient_dim
    h = draw(st.integers(1, 2))
    P = draw(st.one_of(rs.head_matrices(h, d, time_varying=None), st.just(np.zeros((h, d, d)))))
    U = draw(st.sampled_from(["identity", "drawn", "zero"]))
    U = {"identity": None, "zero": np.zeros((h, d, d))}.get(U) if U != "drawn" else draw(rs.head_matrices(h, d))
    beta = draw(st.one_of(rs.betas(max_value=2.0), st.just(0.0)))
    W = None if isinstance(manifold, ra.Sphere) else "flat" if isinstance(manifold, ra.Euclidean) else manifold.W
    masks = ["full"] if normalization == "sinkhorn" else [
        m for m in MASK_PARTS if m not in ROWLESS_MASKS or normalization in ("mean", "sigmoid")]
    extra = {}
    if normalization != "paper":  # positional scores: ALiBi slopes and RoPE frequencies, or none; bias parts
        extra["alibi"] = draw(st.one_of(st.none(), st.floats(0.0, 2.0)))
        extra["rope"] = draw(st.one_of(st.none(), st.just([0.7])))
        extra["bias"] = BIAS_PARTS[draw(st.sampled_from(list(BIAS_PARTS)))]()
    if isinstance(manifold, ra.Euclidean) and draw(st.booleans()):
        extra["update"] = "uncentred"
    return ra.AttentionField(P, U, W=W, beta=beta, mask=MASK_PARTS[draw(st.sampled_from(masks))](),
                             normalization=normalization, **extra)


@st.composite
def circle_field(draw):
    model = draw(st.sampled_from(["sa", "usa"]))
    rescaled = model == "usa" and draw(st.booleans())
    return CircleField(draw(st.one_of(rs.betas(max_value=2.0), st.just(0.0))), model, rescaled=rescaled,
                       evaluation=draw(st.sampled_from(["direct", "fourier"])))


@st.composite
def circle_angles(draw, batch_shape):
    """Angles (batch + (n, 1)): generic, coincident (equal bit for bit) or antipodal (theta, theta + pi)."""
    n = draw(SMALL_TOKENS)
    batch = draw(batch_shape)
    theta = np.empty(batch + (n, 1))
    flat = theta.reshape((-1, n))
    for k in range(len(flat)):
        kind = draw(st.sampled_from(rs.CONFIGURATIONS))
        first = draw(st.floats(-np.pi, np.pi))
        if kind == "generic":
            flat[k] = [first] + [draw(st.floats(-np.pi, np.pi)) for _ in range(n - 1)]
        else:
            flat[k] = first + (np.pi * (np.arange(n) % 2) if kind == "antipodal" else 0.0)
    return theta


@st.composite
def problems(draw, *, field_kinds=tuple(FIELD_KINDS), batches=BATCHES, horizons=HORIZONS):
    field_kind = draw(st.sampled_from(field_kinds))
    calls = [0]
    if field_kind == "circle":
        M, F = ra.Euclidean(1), draw(circle_field())
        y0 = draw(circle_angles(st.sampled_from(batches)))
        T = draw(st.sampled_from(horizons))
        return Problem(M, F, y0, (0.0, T), draw(rs.step_sizes((0.0, T), max_steps=12)), field_kind, "euclidean", calls)
    M = draw(rs.manifolds(dims=SMALL_DIMS, kinds=FIELD_KINDS[field_kind]))
    d = M.ambient_dim
    if field_kind == "user":
        K = draw(rs.head_matrices(1, d, scale=3.0))[0]
        a = draw(rs.head_matrices(1, d, scale=3.0))[0][0]
        F = user_field(M, K, a, calls)
    else:
        F = draw(attention(M, "paper" if field_kind == "attention" else field_kind))
    y0 = draw(rs.token_configurations(M, tokens=SMALL_TOKENS, batch_shape=st.sampled_from(batches)))
    T = draw(st.sampled_from(horizons))
    dt = draw(rs.step_sizes((0.0, T), max_steps=12))
    return Problem(M, F, y0, (0.0, T), dt, field_kind, kind_of(M), calls)


def issue_rotation_problem(dt, T):
    """Issue 34 item 3: S^2, F = a x y + a - <y, a> y, a = (0, 0, 3), y0 = pi((1, .2, -.5))."""
    S = ra.Sphere(2)
    a = np.array([0.0, 0.0, 3.0])
    K = np.array([[0.0, a[2], -a[1]], [-a[2], 0.0, a[0]], [a[1], -a[0], 0.0]])  # y K = a x y
    calls = [0]
    return Problem(S, user_field(S, K, a, calls), S.projection(np.array([[1.0, 0.2, -0.5]])), (0.0, float(T)),
                   float(dt), "user", "sphere", calls)


def tiny_problem(field_kind, manifold_kind):
    """One small fixed problem of each kind (for ``_edges.refusal``)."""
    if field_kind == "circle":
        return Problem(ra.Euclidean(1), CircleField(1.0, "usa"), np.array([[0.0], [0.3], [2.0]]), (0.0, 0.1), 0.05,
                       field_kind, manifold_kind)
    M = {"sphere": ra.Sphere(2), "ellipsoid": ra.Ellipsoid(np.diag([1.0, 2.0, 4.0])),
         "euclidean": ra.Euclidean(3)}[manifold_kind]
    y0 = M.projection(np.array([[1.0, 0.2, -0.5], [0.3, 1.0, 0.1]]))
    if field_kind == "user":
        F = user_field(M, np.eye(3)[::-1], np.ones(3), [0])
    else:
        W = None if manifold_kind == "sphere" else "flat" if manifold_kind == "euclidean" else M.W
        F = ra.AttentionField(np.eye(3), W=W, normalization="paper" if field_kind == "attention" else field_kind)
    return Problem(M, F, y0, (0.0, 0.1), 0.05, field_kind, manifold_kind)
