"""A self-test of riemattn.testing (issue 41, Deliver 3): its checkers never fail correct code and
always fail planted bugs.

``TABLE`` maps every checker of ``riemattn.testing.__all__`` (``assert_*`` and ``check_*``,
discovered) to a correct case and its planted bugs; a checker added later and missing here fails
``test_every_checker_is_registered``. Each case draws its problem with the package's own
strategies, at the edges:

* degenerate draws: ``token_configurations`` (coincident and antipodal tokens), one token, d = 2;
* large magnitudes: attention at beta up to 1e3 (softmax), unnormalised weights and a user's
  field of size e^beta with beta up to 600 (``BIG``: e^709 is the largest finite double, and the
  projection multiplies by W), costs up to 1e6;
* condition numbers of W up to 1e10 (``manifolds(max_condition=1e10)``; ``check_order`` up to
  1e2, see ``order_correct``).

The checkers are called with their default tolerances: the point is that those are right.
The planted bug classes: missing projection, wrong-side projection (I - W y y^T), a head's sign
(U -> -U: repulsive attention), a missing W^-1 in a gradient, a gradient times 1/2, a
non-tangent field; and, for the checkers those do not concern, an unretracted token, a
first-order retraction, a stepper of lower order than claimed. A planted case must raise
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
from riemattn.errors import ValidationError
from riemattn.testing import strategies as rs

from _edges import budget

CHECKERS = sorted(n for n in rt.__all__ if n.startswith(("assert_", "check_")))
COND = 1e10
DIMS = st.integers(2, 4)
TOKENS = st.integers(1, 4)
BETAS = st.one_of(rs.betas(max_value=2.0), rs.betas(min_value=100.0, max_value=1e3), st.just(0.0))
CURVED = ("sphere", "ellipsoid")
#: the largest beta of a field of size e^beta: its projection computes y^T W v, up to
#: cond(W) (d + 1) e^beta = 5e10 e^600 ~ 2e271, finite (e^700 overflowed there: 1e10 e^700 > 1.8e308)
BIG = 600.0


def _manifold(data, max_condition=COND, kinds=CURVED, dims=DIMS):
    return data.draw(rs.manifolds(dims=dims, kinds=kinds, max_condition=max_condition))


def _W(M):
    return None if isinstance(M, ra.Sphere) else M.W


def _attention(data, M, *, normalization=None, beta=BETAS, U=None):
    d = M.ambient_dim
    h = data.draw(st.integers(1, 2))
    P = data.draw(rs.head_matrices(h, d))
    if U is None:
        U = data.draw(st.sampled_from([None, "drawn"]))
        U = None if U is None else data.draw(rs.head_matrices(h, d))
    normalization = normalization or data.draw(st.sampled_from(["softmax", "paper"]))
    return ra.AttentionField(P, U, W=_W(M), beta=data.draw(beta), normalization=normalization)


# --- assert_on_manifold ------------------------------------------------------------------------
def on_manifold_correct(data):
    M = _manifold(data, kinds=rs.MANIFOLD_KINDS)
    y = data.draw(rs.token_configurations(M, tokens=TOKENS, batch_shape=st.sampled_from([(), (3,)])))
    rt.assert_on_manifold(M, y, times=np.arange(3.0) if y.ndim == 3 else None)


def on_manifold_unretracted(data):
    """A projected Euler step without its retraction: off by dt^2 |F|^2 (2nd order), dt = 0.1."""
    M = _manifold(data)
    field = _attention(data, M, beta=rs.betas(max_value=2.0))
    y = data.draw(rs.points(M, tokens=TOKENS))
    F = field(0.0, y)
    z = y + 0.1 * F
    dev = np.abs(M.inner(z, z) - 1.0)
    assume(np.max(dev - 1e3 * (1e-10 + inner_rounding(M, z, z))) > 0)  # a step that moves off it
    rt.assert_on_manifold(M, z)


# --- assert_tangent ----------------------------------------------------------------------------
def _big_field(data, M, generic=None):
    """A user's field of size e^beta (beta <= BIG) before its projection: e^beta y K, K = I (the
    projection removes all of it) or I + a drawn head matrix."""
    K = np.eye(M.ambient_dim)
    if data.draw(st.booleans()) if generic is None else generic:
        K = K + data.draw(rs.head_matrices(1, M.ambient_dim))[0]
    big = np.exp(data.draw(rs.betas(max_value=BIG)))
    return ra.VectorField(lambda t, z: big * (z @ K), M, project=True)


def tangent_correct(data):
    M = _manifold(data)
    y = data.draw(rs.token_configurations(M, tokens=TOKENS, batch_shape=st.sampled_from([(), (2,)])))
    kind = data.draw(st.sampled_from(["attention", "unnormalised", "user"]))
    if kind == "attention":  # softmax / paper weights, beta up to 1e3
        field = _attention(data, M)
    elif kind == "unnormalised":  # weights up to e^beta (scores <= |y|_2^2 <= 1 with P = I)
        field = ra.AttentionField(np.eye(M.ambient_dim)[None], W=_W(M), normalization="mean",
                                  beta=data.draw(rs.betas(max_value=BIG)))
    else:
        field = _big_field(data, M)
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


def _normal_part(M, y, v):
    """|y^T W v| against 1e3 times the tolerance of assert_tangent for a field whose value before
    the projection it cannot see (the planted fields are plain functions: default atol 1e-12):
    the bug shows at this draw."""
    tol = 1e-12 + 1e-12 * _W_norm(M, y) * _W_norm(M, v) + inner_rounding(M, y, v)
    return np.max(np.abs(M.inner(y, v)) - 1e3 * tol) > 0


def tangent_missing_projection(data):
    M = _manifold(data)
    field = _attention(data, M)
    y = data.draw(rs.token_configurations(M, tokens=TOKENS))
    bad = ra.VectorField(lambda t, z: field.update(t, z), M)  # the update, never projected
    assume(_normal_part(M, y, field.update(0.0, y)))
    rt.assert_tangent(bad, y)


def tangent_wrong_side(data):
    """(I - W y y^T) v in place of (I - y y^T W) v: tangent on the sphere only."""
    M = data.draw(rs.ellipsoids(dims=DIMS, max_condition=COND))
    field = _attention(data, M)
    y = data.draw(rs.token_configurations(M, tokens=TOKENS))

    def wrong(t, z):
        v = field.update(t, z)
        return v - (z @ M.W) * np.sum(z * v, axis=-1, keepdims=True)

    assume(_normal_part(M, y, wrong(0.0, y)))
    rt.assert_tangent(ra.VectorField(wrong, M), y)


def tangent_non_tangent(data):
    """A normal component 0.1 (1 + max_k |F_k|) y added to a correct field (attention, or of size
    up to e^600: its tolerance must not overflow to inf)."""
    M = _manifold(data)
    field = _attention(data, M) if data.draw(st.booleans()) else _big_field(data, M, generic=True)
    y = data.draw(rs.token_configurations(M, tokens=TOKENS))

    def bad(t, z):
        F = field(t, z)
        return F + 0.1 * (1.0 + np.max(np.abs(F), axis=-1))[..., None] * z

    assume(_normal_part(M, y, bad(0.0, y)))
    rt.assert_tangent(ra.VectorField(bad, M), y)


# --- assert_forward_invariant ------------------------------------------------------------------
def _invariant_problem(data, sign, beta=BETAS, tokens=TOKENS, coincident=True, normalization="softmax"):
    # cond(W) <= 1e6: integrate refuses tokens off E_W by more than 1e-8 (absolute), which the
    # rounding of a correct retraction exceeds from cond ~1e7 on (found by this test at 1e10)
    M = _manifold(data, max_condition=1e6)
    y0, v = data.draw(rs.hemisphere_points(M, tokens=tokens))
    if coincident and data.draw(st.booleans()):
        y0 = np.broadcast_to(y0[..., :1, :], y0.shape).copy()  # coincident: an equilibrium
    d = M.ambient_dim
    # U = sign I: positive weights pull every token toward the others (ICML Theorem 3.2), -I pushes
    field = ra.AttentionField(data.draw(rs.head_matrices(1, d)), sign * np.eye(d)[None], W=_W(M),
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
    field, y0, v = _invariant_problem(data, -1.0, beta=rs.betas(max_value=2.0), tokens=st.integers(2, 4),
                                      coincident=False)
    assume(np.max(np.linalg.norm(y0 - y0[..., :1, :], axis=-1)) > 1e-2)  # not all at one point
    rt.assert_forward_invariant(field, y0, v=v, stepper="dopri5", t_span=(0.0, 0.3), nondecreasing=True)


# --- check_order -------------------------------------------------------------------------------
FIXED = sorted(n for n, s in ra.STEPPERS.items() if not s.adaptive and n not in ("layer", "lie-euler", "euler"))


def order_correct(data):
    """Every fixed-step stepper of order >= 2 (the first-order ones are the planted case). Condition
    number up to 1e2: the field's derivatives grow with sqrt(cond W) per order, and the steps
    (1/4 .. 1/32) must stay in the asymptotic range."""
    M = _manifold(data, max_condition=1e2, dims=st.integers(2, 3))
    field = _attention(data, M, beta=rs.betas(max_value=2.0))
    y0 = data.draw(rs.token_configurations(M, tokens=st.integers(1, 3)))
    stepper = data.draw(st.sampled_from(FIXED))
    ref = rt.reference_solution(field, y0, (0.0, 1.0))
    # tokens that barely move have no measurable order (errors at the reference's floor:
    # check_order says so with a ValidationError, its documented answer)
    assume(np.max(np.abs(ref - y0)) > 1e-2)
    try:
        fit = rt.check_order(stepper, field, y0, steps=(8, 16, 32, 64), reference=ref)
    except ValidationError as error:  # its documented answer when the steps are too fine: follow it
        assert "choose larger steps" in str(error)
        fit = rt.check_order(stepper, field, y0, steps=(2, 4, 8, 16), reference=ref)
    fit.assert_slope(tol=0.2)


def order_lower_than_claimed(data):
    """Euler claimed to be of order 2 (slope 1)."""
    M = _manifold(data, max_condition=1e2, dims=st.integers(2, 3))
    field = _attention(data, M, beta=rs.betas(min_value=0.5, max_value=2.0))
    y0 = data.draw(rs.points(M, tokens=st.integers(2, 3)))
    ref = rt.reference_solution(field, y0, (0.0, 1.0))
    assume(np.max(np.abs(ref - y0)) > 1e-2)  # the tokens move: the error is not at the floor
    rt.check_order("euler", field, y0, steps=(4, 8, 16, 32), expected=2, reference=ref).assert_slope(tol=0.2)


# --- check_retraction --------------------------------------------------------------------------
def _point_direction(data, M):
    y = data.draw(rs.token_configurations(M, tokens=TOKENS))
    u = data.draw(rs.tangent_vectors(M, y))
    assume(np.all(M.norm(u) > 1e-3))
    return y, u


def retraction_correct(data):
    M = _manifold(data)
    y, u = _point_direction(data, M)
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


def retraction_first_order(data):
    M = _manifold(data, max_condition=1e4)
    y, u = _point_direction(data, M)
    # the planted O(t^2) term is (|u|_W^2 t^2) times the tangent part of e: visible unless e is normal
    e_tan = M.tangent(y, np.broadcast_to(_FirstOrder(M).e, y.shape))
    assume(np.max(M.norm(e_tan) * M.norm(u) ** 2) > 1e-3)
    rt.check_retraction(_FirstOrder(M), base_point=y, tangent_vector=u, against="exp").assert_slope(tol=0.2)


# --- check_riemannian_gradient -----------------------------------------------------------------
def _energy(M, beta, c, *, factor=1.0, missing_Winv=False, project=True):
    """f(y) = c sum_ij exp(beta (<y_i, y_j>_W - 1)) / (2 beta) (beta > 0; c sum_ij <y_i, y_j>_W / 2 at
    beta = 0) and its W-gradient c (I - y_i y_i^T W) sum_j exp(beta (<y_i, y_j>_W - 1)) y_j (the
    Euclidean gradient is W times the sum: W^-1 cancels it), with the planted bugs."""
    W = np.asarray(M.W, dtype=float)

    def weights(y):
        G = y @ W @ np.swapaxes(y, -1, -2)
        return np.exp(beta * (G - 1.0)), G

    def cost(y):
        E, G = weights(y)
        return float(c * (np.sum(E) / (2 * beta) if beta > 0 else np.sum(G) / 2))

    def gradient(y):
        E, _ = weights(y)
        v = c * (E @ y)  # W^-1 (Euclidean gradient)
        if missing_Winv:
            v = v @ W  # the Euclidean gradient, not converted to the W-metric
        return factor * (M.tangent(y, v) if project else v)

    return cost, gradient


def _quadratic(M, A, c, *, factor=1.0, missing_Winv=False, project=True):
    """f(y) = c sum_i y_i A y_i^T (A symmetric) and its W-gradient c P_y (2 W^-1 A y_i)."""
    Winv = np.linalg.inv(M.W)

    def gradient(y):
        v = 2 * c * (y @ A) @ (np.eye(len(A)) if missing_Winv else Winv)
        return factor * (M.tangent(y, v) if project else v)

    return (lambda y: float(c * np.sum((y @ A) * y))), gradient


def _gradient_problem(data, max_condition=COND, tokens=TOKENS):
    M = _manifold(data, max_condition=max_condition)
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
    M = _manifold(data, max_condition=1e4)
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
        curvature = c * np.linalg.norm(A, 2)
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
    assume(np.max(np.abs(M.inner(y, v)) - 1e3 * 1e-10 * np.linalg.norm(y, axis=-1) * np.linalg.norm(M.W, 2)
                  * np.linalg.norm(v, axis=-1) / np.linalg.eigvalsh(M.W)[0]) > 0)
    rt.check_riemannian_gradient(M, cost, bad, y)


TABLE = {
    "assert_on_manifold": (on_manifold_correct, {"unretracted token": on_manifold_unretracted}),
    "assert_tangent": (tangent_correct, {"missing projection": tangent_missing_projection,
                                         "wrong-side projection": tangent_wrong_side,
                                         "non-tangent field": tangent_non_tangent}),
    "assert_forward_invariant": (forward_invariant_correct, {"a head's sign": forward_invariant_head_sign}),
    "check_order": (order_correct, {"lower order than claimed": order_lower_than_claimed}),
    "check_retraction": (retraction_correct, {"first-order retraction": retraction_first_order}),
    "check_riemannian_gradient": (gradient_correct, {"gradient x 1/2": gradient_half,
                                                     "missing W^-1": gradient_missing_Winv,
                                                     "missing projection": gradient_missing_projection}),
}
PLANTED = [(name, bug) for name, (_, bugs) in sorted(TABLE.items()) for bug in sorted(bugs)]
#: examples per case (check_order: four integrations and a tight SciPy solve each)
EXAMPLES = {"check_order": 4, "assert_forward_invariant": 12}
DEFAULT_EXAMPLES = 25


def test_every_checker_is_registered():
    missing = sorted(set(CHECKERS) - set(TABLE))
    assert not missing, f"checkers not registered in the self-test's table (TABLE): {missing}"
    assert sorted(TABLE) == CHECKERS, f"TABLE names checkers that riemattn.testing does not export: {sorted(TABLE)}"


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
