"""A self-test of riemattn.testing (issue 41, Deliver 3): its checkers never fail correct code and
always fail planted bugs.

``TABLE`` maps every checker of ``riemattn.testing.__all__`` (``assert_*`` and ``check_*``,
discovered) to a correct case and its planted bugs; a checker added later and missing here fails
``test_every_checker_is_registered``. Each case draws its problem with the package's own
strategies, at the edges:

* degenerate draws: ``token_configurations`` (coincident and antipodal tokens), one token, d = 2;
* token counts 1 .. 200 (``TOKENS``);
* magnitudes of the tokens 1e-8 .. 1e8 (``SCALES``): the problem on E_W with tokens y, scaled by s,
  is the problem on E_{W / s^2} with tokens s y (an attention field's P becomes P / s^2, a
  gradient s grad f(y / s)): every checker must judge it as it judges s = 1;
* large magnitudes: attention at beta up to 1e3 (softmax), unnormalised weights and a user's
  field of size e^beta with beta up to 600 (``BIG``: e^709 is the largest finite double, and the
  projection multiplies by W), costs up to 1e6;
* condition numbers of W up to 1e10 (``manifolds(max_condition=1e10)``; ``check_order`` up to
  1e2, see ``order_correct``).

The checkers are called with their default tolerances: the point is that those are right.
The planted bug classes: missing projection, wrong-side projection (I - W y y^T), a head's sign
(U -> -U: repulsive attention), a missing W^-1 in a gradient, a gradient times 1/2, a
non-tangent field; and, for the checkers those do not concern, an unretracted token, a
first-order retraction, a retraction that does nothing, a stepper of lower order than claimed (at
every magnitude, and an order-2 stepper claimed as order 4 at tiny tokens, 1e-8 .. 1e-4); complex
tokens are refused by every checker (``COMPLEX``).

tools/checker_rates.py runs the same cases with thousands of random draws each and counts the
false failures and false passes (the rates are in CHANGELOG.md). A planted case must raise
``AssertionError`` on every example drawn; where a draw can make a bug invisible (a normal part
that is zero at that point, a gradient that vanishes) the case ``assume``-s it away, with the
threshold stated, so every example kept carries the bug.

Run time: examples per case in ``EXAMPLES`` (all of them scaled by the profile: ``budget``).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import riemattn as ra
from riemattn import testing as rt
from riemattn.errors import InputTypeError, ValidationError
from riemattn.testing import strategies as rs

from _edges import budget

CHECKERS = sorted(n for n in rt.__all__ if n.startswith(("assert_", "check_")))
COND = 1e10
DIMS = st.integers(2, 4)
#: token counts 1 .. 200, mostly small (the edges: one token, two)
TOKENS = st.one_of(st.integers(1, 4), st.integers(5, 200))
#: the tokens' magnitude s: the problem scaled by s (E_{W / s^2}, tokens s y)
SCALES = st.one_of(st.just(1.0), st.sampled_from([1e-8, 1e8]), st.floats(-8.0, 8.0).map(lambda e: 10.0 ** e))
BETAS = st.one_of(rs.betas(max_value=2.0), rs.betas(min_value=100.0, max_value=1e3), st.just(0.0))
CURVED = ("sphere", "ellipsoid")
#: the largest beta of a field of size e^beta: its projection computes y^T W v, up to
#: cond(W) (d + 1) e^beta = 5e10 e^600 ~ 2e271, finite (e^700 overflowed there: 1e10 e^700 > 1.8e308)
BIG = 600.0


def _manifold(data, max_condition=COND, kinds=CURVED, dims=DIMS, scales=SCALES):
    """A drawn manifold, scaled by a drawn magnitude s: ``(M, s)`` with M = E_{W / s^2}."""
    M = data.draw(rs.manifolds(dims=dims, kinds=kinds, max_condition=max_condition))
    s = data.draw(scales)
    if s == 1.0 or isinstance(M, ra.Euclidean):
        return M, 1.0
    return ra.Ellipsoid((np.eye(M.ambient_dim) if isinstance(M, ra.Sphere) else M.W) / s**2), s


def _W(M):
    return None if isinstance(M, ra.Sphere) else M.W


def _attention(data, M, s=1.0, *, normalization=None, beta=BETAS, U=None):
    """Attention on M = E_{W / s^2} with P / s^2: the field at s y is s times the field at y."""
    d = M.ambient_dim
    h = data.draw(st.integers(1, 2))
    P = data.draw(rs.head_matrices(h, d))
    if U is None:
        U = data.draw(st.sampled_from([None, "drawn"]))
        U = None if U is None else data.draw(rs.head_matrices(h, d))
    normalization = normalization or data.draw(st.sampled_from(["softmax", "paper"]))
    return ra.AttentionField(P / s**2, U, W=_W(M), beta=data.draw(beta), normalization=normalization)


# --- assert_on_manifold ------------------------------------------------------------------------
def on_manifold_correct(data):
    M, _ = _manifold(data, kinds=rs.MANIFOLD_KINDS)
    y = data.draw(rs.token_configurations(M, tokens=TOKENS, batch_shape=st.sampled_from([(), (3,)])))
    rt.assert_on_manifold(M, y, times=np.arange(3.0) if y.ndim == 3 else None)


def on_manifold_unretracted(data):
    """A projected Euler step without its retraction: off by dt^2 |F|^2 (2nd order), dt = 0.1."""
    M, s = _manifold(data)
    field = _attention(data, M, s, beta=rs.betas(max_value=2.0))
    y = data.draw(rs.points(M, tokens=TOKENS))
    F = field(0.0, y)
    z = y + 0.1 * F
    dev = np.abs(M.inner(z, z) - 1.0)
    assume(np.max(dev - 1e3 * (1e-10 + inner_rounding(M, z, z))) > 0)  # a step that moves off it
    rt.assert_on_manifold(M, z)


# --- assert_tangent ----------------------------------------------------------------------------
def _big(data, M, generic=None, tangent=1.0):
    """v(z) = e^beta z K (beta <= BIG): K = I (the projection removes all of it) or I + tangent times a
    drawn head matrix (tangent = 1e-6: the value before the projection ~1e6 times the projected one)."""
    K = np.eye(M.ambient_dim)
    if data.draw(st.booleans()) if generic is None else generic:
        K = K + tangent * data.draw(rs.head_matrices(1, M.ambient_dim))[0]
    big = np.exp(data.draw(rs.betas(max_value=BIG)))
    return lambda t, z: big * (z @ K)


def _big_field(data, M, generic=None):
    """A user's field of size e^beta before its projection, projected by VectorField(project=True)."""
    return ra.VectorField(_big(data, M, generic), M, project=True)


def tangent_correct(data):
    M, s = _manifold(data)
    y = data.draw(rs.token_configurations(M, tokens=TOKENS, batch_shape=st.sampled_from([(), (2,)])))
    kind = data.draw(st.sampled_from(["attention", "unnormalised", "user", "projects itself"]))
    if kind == "attention":  # softmax / paper weights, beta up to 1e3
        field = _attention(data, M, s)
    elif kind == "unnormalised":  # weights up to e^beta (scores <= |y|_2^2 <= 1 with P = I)
        field = ra.AttentionField(np.eye(M.ambient_dim)[None] / s**2, W=_W(M), normalization="mean",
                                  beta=data.draw(rs.betas(max_value=BIG)))
    elif kind == "user":
        field = _big_field(data, M)
    else:  # the user's function projects v itself (not visible to the checker), v up to 1e6 |F|
        v = _big(data, M, tangent=data.draw(st.sampled_from([1.0, 1e-3, 1e-6])))
        field = ra.VectorField(lambda t, z: M.tangent(z, v(t, z)), M)
    rt.assert_tangent(field, y)


def _W_norm(M, x, W=True):
    """|x|_W (or |x|_2) without overflow for |x| up to e^600 (|x|^2 is inf there), shape (...)."""
    m = np.max(np.abs(x), axis=-1)
    unit = x / np.where(m > 0, m, 1.0)[..., None]
    return m * (M.norm(unit) if W else np.linalg.norm(unit, axis=-1))


def inner_rounding(M, a, b):
    """32 d eps |a|_2 ||W||_2 |b|_2: the rounding level of a^T W b (as docs/testing.md states it;
    written here, not imported, so a wrong one in riemattn.testing cannot hide a planted bug)."""
    W = 1.0 if isinstance(M, ra.Euclidean) else np.linalg.norm(M.W, 2)
    return 32 * a.shape[-1] * np.finfo(float).eps * _W_norm(M, a, W=False) * W * _W_norm(M, b, W=False)


#: assert_tangent's probe of a field that projects inside its own function (docs/testing.md)
PROBE = 2.0 ** -10


def _normal_part(M, y, bad, before=None):
    """|y^T W F| of the planted field ``bad`` against 10 times the tolerance assert_tangent states
    for it (a plain function: the value before its projection is probed at (1 + PROBE) y; the test's
    own ``before``, where it knows one, counted too): the bug shows at this draw."""
    F = bad(0.0, y)
    probed = np.abs(M.inner(y, bad(0.0, (1.0 + PROBE) * y))) / (2 * PROBE + PROBE**2)
    v2 = _W_norm(M, F, W=False) + probed * _W_norm(M, y, W=False)
    vW = _W_norm(M, F) + probed * _W_norm(M, y)
    if before is not None:
        v2, vW = np.maximum(v2, _W_norm(M, before, W=False)), np.maximum(vW, _W_norm(M, before))
    dev = np.abs(M.inner(y, y) - 1.0)
    unit = y / _W_norm(M, y, W=False)[..., None]  # inner_rounding(y, v) = |y|_2 |v|_2 inner_rounding(unit, unit)
    tol = (1e-12 * _W_norm(M, y) * _W_norm(M, F) + dev * _W_norm(M, y) * vW
           + inner_rounding(M, unit, unit) * _W_norm(M, y, W=False) * v2)
    return np.max(np.abs(M.inner(y, F)) - 10 * tol) > 0


def tangent_missing_projection(data):
    M, s = _manifold(data)
    field = _attention(data, M, s)
    y = data.draw(rs.token_configurations(M, tokens=TOKENS))
    bad = ra.VectorField(lambda t, z: field.update(t, z), M)  # the update, never projected
    assume(_normal_part(M, y, field.update))
    rt.assert_tangent(bad, y)


def tangent_wrong_side(data):
    """(I - W y y^T) v in place of (I - y y^T W) v: tangent on the sphere only."""
    M = data.draw(rs.ellipsoids(dims=DIMS, max_condition=COND))
    s = data.draw(SCALES)
    M = ra.Ellipsoid(M.W / s**2)
    field = _attention(data, M, s)
    y = data.draw(rs.token_configurations(M, tokens=TOKENS))

    def wrong(t, z):
        v = field.update(t, z)
        return v - (z @ M.W) * np.sum(z * v, axis=-1, keepdims=True)

    assume(_normal_part(M, y, wrong))
    rt.assert_tangent(ra.VectorField(wrong, M), y)


def tangent_non_tangent(data):
    """A normal component 0.1 (|v_i|_2 + |y_i|_2) y_i / |y_i|_2 added to a correct field F = P v
    (attention, or of size up to e^600: its tolerance must not overflow to inf) -- relative to what
    the field projected, v, and to the tokens (a zero field gets one of the tokens' size)."""
    M, s = _manifold(data)
    if data.draw(st.booleans()):
        field = _attention(data, M, s)
        before = field.update
    else:
        before = _big(data, M, generic=True)
        field = ra.VectorField(before, M, project=True)
    y = data.draw(rs.token_configurations(M, tokens=TOKENS))

    def bad(t, z):
        size = _W_norm(M, before(t, z), W=False) + _W_norm(M, z, W=False)
        return field(t, z) + 0.1 * (size / _W_norm(M, z, W=False))[..., None] * z

    assume(_normal_part(M, y, bad, before(0.0, y)))
    rt.assert_tangent(ra.VectorField(bad, M), y)


# --- assert_forward_invariant ------------------------------------------------------------------
def _invariant_problem(data, sign, beta=BETAS, tokens=TOKENS, coincident=True, normalization="softmax"):
    # cond(W) <= 1e6: integrate refuses tokens off E_W by more than 1e-8 (absolute), which the
    # rounding of a correct retraction exceeds from cond ~1e7 on (found by this test at 1e10)
    M, s = _manifold(data, max_condition=1e6)
    y0, v = data.draw(rs.hemisphere_points(M, tokens=tokens))
    if coincident and data.draw(st.booleans()):
        y0 = np.broadcast_to(y0[..., :1, :], y0.shape).copy()  # coincident: an equilibrium
    d = M.ambient_dim
    # U = sign I: positive weights pull every token toward the others (ICML Theorem 3.2), -I pushes
    field = ra.AttentionField(data.draw(rs.head_matrices(1, d)) / s**2, sign * np.eye(d)[None], W=_W(M),
                              beta=data.draw(beta), normalization=normalization)
    return field, y0, v


def forward_invariant_correct(data):
    kind = data.draw(st.sampled_from(["rk4", "dopri5", "dopri5 unnormalised"]))
    if kind == "rk4":  # fixed steps: beta <= 2, so that dt = 0.05 is stable
        field, y0, v = _invariant_problem(data, 1.0, beta=rs.betas(max_value=2.0))
        rt.assert_forward_invariant(field, y0, v=v, stepper="rk4", t_span=(0.0, 0.3), dt=0.05, nondecreasing=True)
    elif kind == "dopri5":  # adaptive: beta up to 1e3
        field, y0, v = _invariant_problem(data, 1.0)
        rt.assert_forward_invariant(field, y0, v=v, stepper="dopri5", t_span=(0.0, 0.3), nondecreasing=True)
    else:  # issue 41's case: unnormalised weights (USA-like), long enough for m(t) to plateau, where
        # the solve's own error (~rtol) shows as decreases of 1e-11 .. 1e-9
        field, y0, v = _invariant_problem(data, 1.0, beta=rs.betas(min_value=1.0, max_value=6.0), normalization="mean")
        rt.assert_forward_invariant(field, y0, v=v, stepper="dopri5", t_span=(0.0, 2.0), nondecreasing=True)


def forward_invariant_head_sign(data):
    """U -> -U: d/dt v^T y_i = -sum_j alpha_ij (v^T y_j - <y_i, y_j>_W v^T y_i) < 0 at the lowest
    token whenever another token differs from it (each term >= v^T y_i (1 - <y_i, y_j>_W) > 0)."""
    # beta <= 2: at beta ~ 1e3 the weights of the other tokens can be e^-1e3 (no push)
    field, y0, v = _invariant_problem(data, -1.0, beta=rs.betas(max_value=2.0), tokens=st.integers(2, 200),
                                      coincident=False)
    # not all at one point
    M = field.manifold
    assume(np.max(M.norm(y0 - y0[..., :1, :])) > 1e-2)  # |y_i|_W = 1 at every magnitude
    rt.assert_forward_invariant(field, y0, v=v, stepper="dopri5", t_span=(0.0, 0.3), nondecreasing=True)


# --- check_order -------------------------------------------------------------------------------
FIXED = sorted(n for n, s in ra.STEPPERS.items() if not s.adaptive and n not in ("layer", "lie-euler", "euler"))


def order_correct(data):
    """Every fixed-step stepper of order >= 2 (the first-order ones are the planted case). Condition
    number up to 1e2: the field's derivatives grow with sqrt(cond W) per order, and the steps
    (1/4 .. 1/32) must stay in the asymptotic range."""
    M, s = _manifold(data, max_condition=1e2, dims=st.integers(2, 3))
    field = _attention(data, M, s, beta=rs.betas(max_value=2.0))
    y0 = data.draw(rs.token_configurations(M, tokens=TOKENS))
    stepper = data.draw(st.sampled_from(FIXED))
    ref = rt.reference_solution(field, y0, (0.0, 1.0))
    # tokens that barely move have no measurable order (errors at the reference's floor:
    # check_order says so with a ValidationError, its documented answer)
    assume(np.max(np.abs(ref - y0)) > 1e-2 * s)
    _judge_order(stepper, field, y0, ref, None)


#: the step counts tried, the finest first (the asymptotic range); check_order refuses those that
#: do not show an order (errors at the floor: "choose larger steps"; errors not yet asymptotic:
#: "choose other steps") and the next are tried
STEP_SETS = ((16, 32, 64, 128), (8, 16, 32, 64), (4, 8, 16, 32))


def _judge_order(stepper, field, y0, ref, expected):
    for steps in STEP_SETS:
        try:
            fit = rt.check_order(stepper, field, y0, steps=steps, reference=ref, expected=expected)
            break
        except ValidationError as error:
            assert "choose" in str(error) and "steps" in str(error)
    else:
        assume(False)  # no steps of these show an order: refused every time, never passed
    fit.assert_slope(tol=0.2)


def _lower_order(data, stepper, expected, scales):
    M, s = _manifold(data, max_condition=1e2, dims=st.integers(2, 3), scales=scales)
    field = _attention(data, M, s, beta=rs.betas(min_value=0.5, max_value=2.0))
    y0 = data.draw(rs.points(M, tokens=st.integers(2, 3)))
    ref = rt.reference_solution(field, y0, (0.0, 1.0))
    assume(np.max(np.abs(ref - y0)) > 1e-2 * s)  # the tokens move: the error is not at the floor
    _judge_order(stepper, field, y0, ref, expected)


def order_lower_than_claimed(data):
    """Euler claimed to be of order 3, at every magnitude. Not 2: projected Euler is of order 2 where
    the flow is a rotation at constant speed (a step advances the angle by atan(h w) = h w + O(h^3)),
    and tools/checker_rates.py --seed 4 drew such a problem (slope 2.09 at 4 .. 32 steps): there a
    claim of 2 is true. No problem makes it of order 3."""
    _lower_order(data, "euler", 3, SCALES)


def order_two_claimed_four_at_tiny_tokens(data):
    """Heun (order 2) claimed as order 4 on tokens of size 1e-8 .. 1e-4, where an absolute floor
    (1e-11) put every error at it and passed the claim as "exact"."""
    _lower_order(data, "heun", 4, st.floats(-8.0, -4.0).map(lambda e: 10.0 ** e))


# --- check_retraction --------------------------------------------------------------------------
def _point_direction(data, M, s=1.0):
    y = data.draw(rs.token_configurations(M, tokens=TOKENS))
    u = data.draw(rs.tangent_vectors(M, y, scale=s))
    assume(np.all(M.norm(u) > 1e-3))  # |u|_W: relative to the tokens' size (|y|_W = 1)
    return y, u


def retraction_correct(data):
    M, s = _manifold(data)
    y, u = _point_direction(data, M, s)
    rt.check_retraction(M, base_point=y, tangent_vector=u,
                        against=data.draw(st.sampled_from(["line", "exp"]))).assert_slope(tol=0.2)


class _FirstOrder:
    """A manifold whose retraction is off by O(t^2): pi_W(z + (|z|_W^2 - 1) e)."""

    def __init__(self, M):
        self.M, self.e = M, M.retract(np.ones(M.ambient_dim))

    def __getattr__(self, name):
        return getattr(self.M, name)

    def retract(self, z):
        return self.M.retract(z + (self.M.inner(z, z) - 1.0)[..., None] * self.e)


class _DoesNothing(_FirstOrder):
    """A manifold whose retraction returns its input unchanged."""

    def retract(self, z):
        return z


def retraction_does_nothing(data):
    M, s = _manifold(data)
    y, u = _point_direction(data, M, s)
    rt.check_retraction(_DoesNothing(M), base_point=y, tangent_vector=u,
                        against=data.draw(st.sampled_from(["line", "exp"]))).assert_slope(tol=0.2)


def retraction_first_order(data):
    M, s = _manifold(data, max_condition=1e4)
    y, u = _point_direction(data, M, s)
    # the planted O(t^2) term is t^2 times the tangent part of e (u of unit W-length, as the check
    # uses it): visible where it leads the right retraction's own O(t^3) error at every default t
    # (10 times: the slope of their sum is then within ~0.1 of 2); a draw where e is nearly normal,
    # or the curvature's t^3 term is as large, carries no visible bug (one such draw in 2000 passed)
    bad, w = _FirstOrder(M), u / M.norm(u)[..., None]
    for t in np.logspace(-3, -1, 9):
        exp = M.metric.exp(t * w, y)
        assume(np.max(M.norm(bad.retract(y + t * w) - exp)) > 10 * np.max(M.norm(M.retract(y + t * w) - exp)))
    rt.check_retraction(bad, base_point=y, tangent_vector=u, against="exp").assert_slope(tol=0.2)


# --- check_riemannian_gradient -----------------------------------------------------------------
def _energy(M, beta, c, *, factor=1.0, missing_Winv=False, project=True):
    """f(y) = c sum_ij expm1(beta (<y_i, y_j>_W - 1)) / (2 beta) (beta > 0; its limit c sum_ij
    (<y_i, y_j>_W - 1) / 2 at beta < 1e-150, where the two differ by O(beta) relative) and its
    W-gradient c (I - y_i y_i^T W) sum_j exp(beta (<y_i, y_j>_W - 1)) y_j (the Euclidean gradient is W
    times the sum: W^-1 cancels it), with the planted bugs. expm1, not exp: the constant l^2 / (2 beta)
    that exp carries overflowed at tiny beta (200 tokens, beta ~ 1e-306: a cost of inf, which the
    checker rightly refuses; tools/checker_rates.py found 5 in 2000)."""
    W = np.asarray(M.W, dtype=float)

    def weights(y):
        G = y @ W @ np.swapaxes(y, -1, -2)
        return np.exp(beta * (G - 1.0)), G

    def cost(y):
        G = weights(y)[1]
        return float(c * (np.sum(np.expm1(beta * (G - 1.0))) / (2 * beta) if beta > 1e-150 else np.sum(G - 1.0) / 2))

    def gradient(y):
        E, _ = weights(y)
        v = c * (E @ y)  # W^-1 (Euclidean gradient)
        if missing_Winv:
            v = v @ W  # the Euclidean gradient, not converted to the W-metric
        return factor * (M.tangent(y, v) if project else v)

    return cost, gradient


def _quadratic(M, A, c, *, factor=1.0, missing_Winv=False, project=True):
    """f(y) = c sum_i y_i A y_i^T (A symmetric) and its W-gradient c P_y (2 W^-1 A y_i). W^-1 A y_i by a
    solve, not by inv(W): at cond(W) ~ 1e10 the explicit inverse's error made the "correct" gradient
    wrong by ~1e-4 relative (slope 1; 50 of 50 directions at one such W, 1 of 50 with the solve)."""

    def gradient(y):
        b = 2 * c * (y @ A)
        v = b if missing_Winv else np.linalg.solve(M.W, b.reshape(-1, b.shape[-1]).T).T.reshape(b.shape)
        return factor * (M.tangent(y, v) if project else v)

    return (lambda y: float(c * np.sum((y @ A) * y))), gradient


def _gradient_problem(data, max_condition=COND, tokens=TOKENS):
    M, _ = _manifold(data, max_condition=max_condition)  # the energy and the quadratic are written for any W
    c = data.draw(st.sampled_from([1.0, 1e3, 1e6]))
    if data.draw(st.booleans()):
        cost, gradient = _energy(M, data.draw(BETAS), c)
    else:
        d = M.ambient_dim
        A = data.draw(rs.head_matrices(1, d, symmetric=True))[0] + 2 * np.eye(d)
        cost, gradient = _quadratic(M, A, c)
    y = data.draw(rs.token_configurations(M, tokens=tokens))
    return M, cost, gradient, y


def gradient_correct(data):
    M, cost, gradient, y = _gradient_problem(data)
    rt.check_riemannian_gradient(M, cost, gradient, y, seed=data.draw(st.integers(0, 2**16))).assert_slope(tol=0.2)


def _gradient_bug_shows(data, M, cost, good, bad, y, curvature):
    """Check ``bad`` along u = the tangent part of (bad - good)(y), unit: the model's error is
    t |bad - good|_W + O(curvature t^2). At the fitted steps (t <= ~3e-4) the bug shows as slope
    ~1 when |bad - good|_W > 0.01 curvature (then the t^2 term is below 3 % of the t term); draws
    below that are assumed away (no bug to see there: e.g. a gradient that vanishes)."""
    u = M.tangent(y, bad(y) - good(y))
    size = np.sqrt(np.sum(M.inner(u, u)))
    assume(size > 0.01 * curvature)
    rt.check_riemannian_gradient(M, cost, bad, y, direction=u / size).assert_slope(tol=0.2)


def _gradient_case(data, **bug):
    M, _ = _manifold(data, max_condition=1e4)
    c = data.draw(st.sampled_from([1.0, 1e3, 1e6]))
    energy = data.draw(st.booleans())
    if energy:
        beta = data.draw(rs.betas(min_value=0.1, max_value=10.0))
        (cost, good), (_, bad) = _energy(M, beta, c), _energy(M, beta, c, **bug)
        curvature = c * (1 + beta) * 4  # its second derivative along a unit u: l <= 4 tokens, weights <= 1
    else:
        d = M.ambient_dim
        A = data.draw(rs.head_matrices(1, d, symmetric=True))[0] + 2 * np.eye(d)
        (cost, good), (_, bad) = _quadratic(M, A, c), _quadratic(M, A, c, **bug)
        curvature = c * np.linalg.norm(A, 2) / np.linalg.eigvalsh(M.W)[0]  # |u|_2^2, |y|_2^2 <= 1 / lambda_min(W)
    y = data.draw(rs.points(M, tokens=st.integers(2, 4)))
    return M, cost, good, bad, y, curvature


def gradient_half(data):
    M, cost, good, bad, y, curvature = _gradient_case(data, factor=0.5)
    _gradient_bug_shows(data, M, cost, good, bad, y, curvature)


def gradient_missing_Winv(data):
    M, cost, good, bad, y, curvature = _gradient_case(data, missing_Winv=True)
    assume(not isinstance(M, ra.Sphere) and np.linalg.cond(M.W) > 1.5)  # W = I: no W^-1 to miss
    _gradient_bug_shows(data, M, cost, good, bad, y, curvature)


def gradient_missing_projection(data):
    M, cost, good, bad, y, _ = _gradient_case(data, project=False)
    v = bad(y)
    lam = np.linalg.eigvalsh(M.W)  # |W^-1 grad_E f| = |v| <= cond(W) |v|: the size the checker judges against
    assume(np.max(np.abs(M.inner(y, v)) - 1e3 * 1e-10 * np.linalg.norm(y, axis=-1) * lam[-1]
                  * np.linalg.norm(v, axis=-1) * lam[-1] / lam[0]) > 0)
    rt.check_riemannian_gradient(M, cost, bad, y)


TABLE = {
    "assert_on_manifold": (on_manifold_correct, {"unretracted token": on_manifold_unretracted}),
    "assert_tangent": (tangent_correct, {"missing projection": tangent_missing_projection,
                                         "wrong-side projection": tangent_wrong_side,
                                         "non-tangent field": tangent_non_tangent}),
    "assert_forward_invariant": (forward_invariant_correct, {"a head's sign": forward_invariant_head_sign}),
    "check_order": (order_correct, {"lower order than claimed": order_lower_than_claimed,
                                    "order 2 claimed as 4 at tiny tokens": order_two_claimed_four_at_tiny_tokens}),
    "check_retraction": (retraction_correct, {"first-order retraction": retraction_first_order,
                                              "a retraction that does nothing": retraction_does_nothing}),
    "check_riemannian_gradient": (gradient_correct, {"gradient x 1/2": gradient_half,
                                                     "missing W^-1": gradient_missing_Winv,
                                                     "missing projection": gradient_missing_projection}),
}
PLANTED = [(name, bug) for name, (_, bugs) in sorted(TABLE.items()) for bug in sorted(bugs)]
#: examples per case (check_order: four integrations and a tight SciPy solve each)
EXAMPLES = {"check_order": 4, "assert_forward_invariant": 12}
DEFAULT_EXAMPLES = 25


def _complex(y):
    """Tokens with an imaginary part: every checker refuses them (as integrate does)."""
    return y + 1e-3j * np.ones_like(y)


def _complex_case(name, data):
    M, s = _manifold(data, max_condition=1e2)
    y = data.draw(rs.points(M, tokens=st.integers(1, 3)))
    field = _attention(data, M, s, beta=rs.betas(max_value=2.0))
    cost, gradient = _energy(M, 1.0, 1.0)
    {"assert_on_manifold": lambda: rt.assert_on_manifold(M, _complex(y)),
     "assert_tangent": lambda: rt.assert_tangent(field, _complex(y)),
     "assert_forward_invariant": lambda: rt.assert_forward_invariant(field, _complex(y)),
     "check_order": lambda: rt.check_order("rk4", field, _complex(y)),
     "check_retraction": lambda: rt.check_retraction(M, base_point=_complex(y)),
     "check_riemannian_gradient": lambda: rt.check_riemannian_gradient(M, cost, gradient, _complex(y)),
     }[name]()


def test_every_checker_is_registered():
    missing = sorted(set(CHECKERS) - set(TABLE))
    assert not missing, f"checkers not registered in the self-test's table (TABLE): {missing}"
    assert sorted(TABLE) == CHECKERS, f"TABLE names checkers that riemattn.testing does not export: {sorted(TABLE)}"


@pytest.mark.parametrize("name", CHECKERS)
def test_checker_refuses_complex_tokens(name):
    @settings(max_examples=budget(4))
    @given(data=st.data())
    def run(data):
        with pytest.raises(InputTypeError, match="real"):
            _complex_case(name, data)

    run()


@pytest.mark.parametrize("name", CHECKERS)
def test_checker_passes_correct_code(name):
    @settings(max_examples=budget(EXAMPLES.get(name, DEFAULT_EXAMPLES)))
    @given(data=st.data())
    def run(data):
        TABLE[name][0](data)

    run()


@pytest.mark.parametrize("name, bug", PLANTED)
def test_checker_fails_planted_bug(name, bug):
    @settings(max_examples=budget(EXAMPLES.get(name, DEFAULT_EXAMPLES)))
    @given(data=st.data())
    def run(data):
        with pytest.raises(AssertionError):
            TABLE[name][1][bug](data)

    run()
