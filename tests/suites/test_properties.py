"""Hypothesis property tests of the theorems (the table in docs/diagnostics.md) and of the model's structure.

Each test states the result it checks. Problems are small (d <= 5, l <= 5, h <= 3, short
horizons) so that the ``ci`` profile's 200 examples per property stay cheap.

Numerical tolerances are rounding-level wherever the property holds exactly for the discrete
method too (see the notes in each test); where a bound is compared with a numerical solution of
higher-order accuracy, the slack is stated with the solver's accuracy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import assume, given, note
from hypothesis import strategies as st
from scipy.linalg import expm

import riemattn as ra
from riemattn import diagnostics as dg

from riemattn.testing import assert_tangent
from riemattn.testing import strategies as rs

from _tolerances import eps_bound

dims, head_counts = rs.DIMS, rs.HEADS  # d in 2..5, h in 1..3
token_counts = st.integers(2, 5)  # at least two tokens: every property here is about interactions


def _W(manifold):
    """None for the sphere, W for an ellipsoid (the fields' W argument)."""
    return None if isinstance(manifold, ra.Sphere) else manifold.W

STEPPER_NAMES = sorted(ra.STEPPERS)  # the Lie-group steppers appear here automatically
ROUND = 1e-12  # rounding-level slack for properties that hold exactly for the discrete methods


def _solve(field, y0, T, stepper, dt=0.01, rtol=1e-10, atol=1e-12):
    """Every step is recorded (saveat=None)."""
    if ra.STEPPERS[stepper].adaptive:
        sol = ra.integrate(field, y0, (0.0, T), stepper=stepper, rtol=rtol, atol=atol)
    else:
        sol = ra.integrate(field, y0, (0.0, T), stepper=stepper, dt=dt)
    assert sol.success, sol.message
    return sol


def _on_manifold_tol(sol, W, d):
    """|y|_W - 1 after sol.n_steps steps: each step (a projection, or a Lie-group step's
    exponentials of generators acting on the tokens) rounds O(d) W-products of size <= cond(W), and
    the Lie steppers never renormalize, so the roundings add up over the steps: at most
    (n + 1) * 16 d * cond(W) * eps (tests/_tolerances.py)."""
    cond = 1.0 if W is None else float(np.linalg.cond(W))
    return eps_bound((sol.n_steps + 1) * 16 * d, cond)


def _w_norm(y, W):
    if W is None:
        return np.linalg.norm(y, axis=-1)
    return np.sqrt(np.einsum("...i,ij,...j->...", y, W, y))


@dataclass
class HemisphereProblem:
    d: int
    l: int
    h: int
    W: np.ndarray | None
    P: object
    v: np.ndarray
    y0: np.ndarray


@st.composite
def hemisphere_problems(draw, with_P=True):
    """Full attention, U = I, h in {1, 2, 3}, bounded P_eta(t), W SPD or I, tokens in H+(v).

    ``with_P=False``: no P drawn (P = None), for a test that builds its own heads (drawing a
    time-varying stack of up to 225 floats was most of such a test's cost)."""
    d, l, h = draw(dims), draw(token_counts), draw(head_counts)
    M = draw(rs.manifolds(dims=d))
    P = draw(rs.head_matrices(h, d, time_varying=True)) if with_P else None
    y0, v = draw(rs.hemisphere_points(M, tokens=l))
    return HemisphereProblem(d, l, h, _W(M), P, v, y0)


# ----------------------------------------------------------------------------------------------
# ICML Theorem 3.2 (= ARXIV Theorem 4.1): forward invariance of H+(v)
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("stepper", STEPPER_NAMES)
@given(pb=hemisphere_problems())
def test_hemisphere_min_never_decreases_along_solutions(stepper, pb):
    """ICML Thm 3.2: full attention, any h, U_eta = I, bounded P_eta(t), any SPD W: if every
    token starts in H+(v) = {y in E_W : v^T y > 0}, then m(t) = min_i v^T y_i(t) never decreases
    (Danskin: at the minimizing token k, d/dt v^T y_k = sum_j alpha_kj (v^T y_j - <y_k, y_j>_W m)
    >= m sum_j alpha_kj (1 - <y_k, y_j>_W) >= 0 by Cauchy-Schwarz in the W inner product), so the
    tokens stay in H+(v).

    Numerics. For the projected RK methods with nonnegative coefficients (euler, heun, rk4) the
    same argument applies to every stage (a positive combination followed by pi_W), so m is
    non-decreasing *exactly* for every step size and only rounding-level slack is allowed. For
    dopri5 (negative tableau entries) and the Lie-group methods no such discrete argument is
    known; a loss of m needs a first-order gain v^T F_k that is small against the second-order
    term, and v^T F_k ~ m (1 - <y_k, y_j>) while |F_k|^2 ~ 1 - <y_k, y_j>, so the loss is O(h)
    relative to the gain. Measured: over 300 random problems with dt = 0.02 (rtol = 1e-10 for
    the adaptive ones) the largest decrease of m was 2.2e-16 for every stepper.
    """
    field = ra.AttentionField(pb.P, W=pb.W)
    sol = _solve(field, pb.y0, 0.2, stepper, dt=0.02)
    m = np.min(sol.y @ pb.v, axis=-1)
    note(f"m(t) = {m}")
    assert np.all(m > 0)
    # The stiff (Rosenbrock) steppers solve linear systems per stage: where the minimizing token
    # barely moves, m can drift by the local error, bounded by the tolerance (measured: 1.5e-12)
    slack = 1e-10 if getattr(ra.STEPPERS[stepper], "stiff", False) else ROUND  # the tolerance rtol
    assert np.all(np.diff(m) >= -slack)
    np.testing.assert_allclose(_w_norm(sol.y, pb.W), 1.0, atol=_on_manifold_tol(sol, pb.W, pb.d))


@given(pb=hemisphere_problems())
def test_hemisphere_lyapunov_never_increases(pb):
    """ICML eq. (7): V(y) = max_i (1 - v^T y_i) is non-increasing along the solutions of
    Thm 3.2's setting (it is 1 - m(t) of the previous test, evaluated here through
    ra.diagnostics.hemisphere_lyapunov, along RK4 and along stacked transformer layers)."""
    field = ra.AttentionField(pb.P, W=pb.W)
    sol = _solve(field, pb.y0, 0.5, "rk4", dt=0.05)
    V = dg.hemisphere_lyapunov(sol.y, pb.v)
    assert np.all(np.diff(V) <= ROUND)
    assert np.all(V < 1.0)  # still inside H+(v)


@given(
    pb=hemisphere_problems(with_P=False),  # the layer has its own Q, K
    log_tau=st.lists(st.floats(-3.0, 3.0), min_size=3, max_size=3),
    QK=st.integers(0, 2**32 - 1),
    layers=st.integers(1, 4),
)
def test_transformer_layer_preserves_hemisphere_exactly(pb, log_tau, QK, layers):
    """Discrete model y <- pi_W(y + tau f) (ICML eqs. 1, 4) with W_eta V_eta = tau_eta I, any tau_eta > 0 (here
    1e-3 .. 1e3), any Q, K, any SPD W: one layer maps y_i to pi_W(y_i + sum_j a_ij y_j) with
    a_ij = tau_eta alpha_ij >= 0, a positive combination, so v^T y_i' > 0, and in fact
    v^T y_i' >= m (1 + sum a) / |y_i + sum a y_j|_W >= m. Exact for every tau: only rounding slack."""
    rng = np.random.default_rng(QK)
    d, h = pb.d, pb.h
    Q = rng.uniform(-2, 2, (h, d, d))
    K = rng.uniform(-2, 2, (h, d, d))
    taus = 10.0 ** np.array(log_tau[:h])
    Vm = np.broadcast_to(np.eye(d), (h, d, d))
    Wo = taus[:, None, None] * np.eye(d)
    layer = ra.TransformerLayer(Q, K, Vm, Wo, W=pb.W)
    y = pb.y0
    m = [np.min(y @ pb.v)]
    for _ in range(layers):
        y = layer(y)
        m.append(np.min(y @ pb.v))
    note(f"taus = {taus}, m = {m}")
    assert np.all(np.array(m) > 0)
    assert np.all(np.diff(m) >= -ROUND)
    np.testing.assert_allclose(_w_norm(y, pb.W), 1.0, atol=1e-12)


# ----------------------------------------------------------------------------------------------
# ICML Theorem 4.2 (= ARXIV Theorem 5.1): causal attention, U = I
# ----------------------------------------------------------------------------------------------
@st.composite
def causal_problems(draw):
    d, l, h = draw(dims), draw(token_counts), draw(head_counts)
    P = draw(rs.head_matrices(h, d, time_varying=True, scale=0.5))
    S = ra.Sphere(d - 1)
    if draw(st.booleans()):  # all tokens in H+(y_1): the quantitative bound below applies to all
        rest, v = draw(rs.hemisphere_points(S, tokens=l))
        y0 = np.concatenate([v[None], rest[1:]])
    else:
        y0 = draw(rs.points(S, tokens=l))
    assume(y0[1] @ y0[0] > -1 + 1e-3)  # token 2 away from the antipode -y_1
    return d, l, h, P, y0


def _tanh_bound(c0, rate, t):
    """Solution of c' = rate (1 - c^2), c(0) = c0: tanh(artanh(c0) + rate t)."""
    return np.tanh(np.arctanh(np.clip(c0, -1 + 1e-15, 1 - 1e-15)) + rate * t)


@given(pr=causal_problems())
def test_causal_identity_first_token_fixed_and_others_approach_it(pr):
    """ICML Thm 4.2: causal attention, W = I, any h, U_eta = I, bounded P_eta(t): y_1 is fixed
    (it attends only to itself and the projection kills y_1), and every token approaches y_1.

    Quantitative form checked here. With a = sum_eta e^{-2 p_eta} / (sqrt(d) l) <= alpha_i1
    (p_eta bounds |P_eta(t)|_2), c_i = y_1^T y_i obeys
      * token 2: c_2' = alpha_21 (1 - c_2^2)  =>  c_2(t) >= tanh(artanh c_2(0) + a t) -> 1;
      * if all c_i(0) > 0: at the minimizing token every other term of c_k' is >= 0, so
        m = min_i c_i obeys D^+ m >= a (1 - m^2)  =>  m(t) >= tanh(artanh m(0) + a t) -> 1.
    Solved with dopri5 at rtol 1e-9 (measured: <= 5.4e-10 from an rtol-1e-13 solution over 100
    random problems), slack 1e-7 on the bounds."""
    d, l, h, P, y0 = pr
    field = ra.AttentionField(P, mask="causal")
    sol = _solve(field, y0, 3.0, "dopri5", rtol=1e-9, atol=1e-11)
    assert np.max(np.abs(sol.y[:, 0] - y0[0])) <= ROUND
    a = np.sum(np.exp(-2 * P.bound)) / (np.sqrt(d) * l)
    c = np.einsum("tld,d->tl", sol.y, y0[0])
    note(f"a = {a}, c(t) = {c}")
    assert np.all(c[:, 1] >= _tanh_bound(c[0, 1], a, sol.t) - 1e-7)
    if np.all(c[0, 1:] > 0):
        m = c[:, 1:].min(axis=-1)
        assert np.all(m >= _tanh_bound(m[0], a, sol.t) - 1e-7)


# ----------------------------------------------------------------------------------------------
# ICML Theorem 4.5 (= ARXIV Theorem 6.1): causal attention, symmetric U
# ----------------------------------------------------------------------------------------------
@st.composite
def symmetric_U_problems(draw):
    d, l = draw(dims), draw(token_counts)
    P = draw(rs.head_matrices(1, d, time_varying=True, scale=0.5))
    U, v = draw(rs.symmetric_with_top_eigenvector(d))
    y0, _ = draw(rs.hemisphere_points(ra.Sphere(d - 1), v=v, tokens=l))
    return d, l, P, U, v, y0


@given(pr=symmetric_U_problems())
def test_causal_symmetric_U_tokens_approach_top_eigenvector(pr):
    """ICML Thm 4.5: causal, W = I, h = 1, U symmetric with simple top eigenvalue lam > 0 and
    unit eigenvector v; tokens with v^T y_i(0) > 0 approach v. Checked quantitatively:
      * token 1: alpha_11 = 1/sqrt(d) exactly, so y_1(t) = e^{tU/sqrt d} y_1(0) / |...| (closed form)
        and V_1 = 1 - v^T y_1 decreases to 0;
      * m = min_i v^T y_i: at the minimizer, m' >= -(|U|_2 - lam)_+ m / sqrt(d) (rows of alpha sum
        to 1/sqrt(d)), so m(t) >= m(0) e^{-(|U|_2 - lam)_+ t / sqrt d} > 0: H+(v) is invariant;
      * if lam = |U|_2 (dominant): m' >= a (lam - lam_2) m (1 - m^2) with a = e^{-2p}/(sqrt(d) l),
        so m(t) >= (1 + (m0^-2 - 1) e^{-2 a (lam - lam_2) t})^{-1/2} -> 1: every token approaches v.
    dopri5 at rtol 1e-9 (error <= 5.4e-10 measured, see above); slack 1e-7 on the bounds."""
    d, l, P, U, v, y0 = pr
    field = ra.AttentionField(P, U, mask="causal")
    T = 3.0
    sol = _solve(field, y0, T, "dopri5", rtol=1e-9, atol=1e-11)
    lam = np.linalg.eigvalsh(U)
    lam1, lam2, normU = lam[-1], lam[-2], np.max(np.abs(lam))
    # token 1: closed form
    w, Qm = np.linalg.eigh(U)  # e^{tU/sqrt d} y = Q diag(e^{t w / sqrt d}) Q^T y
    E = (np.exp(np.outer(sol.t, w) / np.sqrt(d)) * (Qm.T @ y0[0])) @ Qm.T
    E /= np.linalg.norm(E, axis=-1, keepdims=True)
    np.testing.assert_allclose(E[-1], expm(T * U / np.sqrt(d)) @ y0[0] / np.linalg.norm(
        expm(T * U / np.sqrt(d)) @ y0[0]), atol=1e-12)  # the eigen form agrees with scipy's expm
    assert np.max(np.abs(sol.y[:, 0] - E)) < 1e-7
    V1 = 1 - sol.y[:, 0] @ v
    assert np.all(np.diff(V1) <= 1e-12)
    # all tokens: H+(v) invariant with the rate bound
    m = np.min(sol.y @ v, axis=-1)
    note(f"lam = {lam}, m(t) = {m}")
    assert np.all(m >= m[0] * np.exp(-max(normU - lam1, 0.0) * sol.t / np.sqrt(d)) - 1e-7)
    if lam1 >= normU:
        a = np.exp(-2 * P.bound[0]) / (np.sqrt(d) * l) * (lam1 - lam2)
        lower = 1.0 / np.sqrt(1.0 + (1.0 / m[0] ** 2 - 1.0) * np.exp(-2 * a * sol.t))
        assert np.all(m >= lower - 1e-7)


# ----------------------------------------------------------------------------------------------
# Structure of the model
# ----------------------------------------------------------------------------------------------
@st.composite
def general_fields(draw, h=None):
    d, l = draw(dims), draw(token_counts)
    h = draw(head_counts) if h is None else h
    M = draw(rs.manifolds(dims=d))
    W = _W(M)
    P = draw(rs.head_matrices(h, d, time_varying=True))
    U = None if draw(st.booleans()) else draw(rs.head_matrices(h, d, time_varying=True))
    mask = draw(st.sampled_from(["full", "causal"]))
    norm = draw(st.sampled_from(["paper", "softmax", "mean"]))
    y = draw(rs.points(M, tokens=l))
    t = draw(st.floats(0.0, 10.0))
    field = ra.AttentionField(P, U, W=W, mask=mask, normalization=norm)
    return field, W, y, t


@given(fw=general_fields())
def test_field_is_tangent(fw):
    """ICML eq. (3), (6): F_i = (I - y_i y_i^T W) f_i lies in T_{y_i} E_W = {u : y_i^T W u = 0}."""
    field, W, y, t = fw
    Wm = np.eye(y.shape[-1]) if W is None else W
    # rounding of the projection: relative to the size of the un-projected update
    scale = 1.0 + np.linalg.norm(field.update(t, y), axis=-1) * np.linalg.norm(Wm, 2)
    assert_tangent(field, y, t=t, atol=1e-13 * scale, rtol=0.0)


# the projected RK methods and "layer" end every step with pi_W, so only the Lie-group steppers,
# which move tokens by group elements and never normalize, have something to show here
LIE_NAMES = sorted(n for n, c in ra.STEPPERS.items() if c.__module__ == "riemattn.solvers.lie_group.lie")


@pytest.mark.parametrize("stepper", LIE_NAMES)
@given(fw=general_fields())
def test_tokens_stay_on_manifold(stepper, fw):
    """Every Lie-group stepper keeps every token on E_W (|y_i|_W = 1) at every step, for general
    fields (time-varying P and U, causal or full, every normalization), without normalizing."""
    field, W, y, t = fw
    sol = _solve(field, y, 0.06, stepper, dt=0.02, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(_w_norm(sol.y, W), 1.0, atol=_on_manifold_tol(sol, W, y.shape[-1]))


@given(fw=general_fields())
def test_attention_rows_sum_to_normalization_constant(fw):
    """Attention field (ICML eq. 6): each row of alpha^eta sums to 1/sqrt(n+1) ("paper"), 1 ("softmax"), or is
    sum_j e^{y_i^T P y_j} / l ("mean", GLPR's USA); entries are positive where allowed."""
    field, W, y, t = fw
    A = field.attention(t, y)
    d, l = y.shape[-1], y.shape[-2]
    if field.normalization == "paper":
        np.testing.assert_allclose(A.sum(-1), 1 / np.sqrt(d), rtol=1e-13)
    elif field.normalization == "softmax":
        np.testing.assert_allclose(A.sum(-1), 1.0, rtol=1e-13)
    else:
        S = np.einsum("id,hde,je->hij", y, field.P(t), y)
        if field.mask == "causal":
            S = np.where(np.tril(np.ones((l, l), bool)), S, -np.inf)
        np.testing.assert_allclose(A.sum(-1), np.exp(S).sum(-1) / l, rtol=1e-12)
    allowed = np.tril(np.ones((l, l), bool)) if field.mask == "causal" else np.ones((l, l), bool)
    assert np.all(A[..., allowed] > 0)


@given(fw=general_fields())
def test_causal_attention_is_lower_triangular(fw):
    """ICML section 4: alpha_ij = 0 for j > i and Z_i sums over j <= i only."""
    field, W, y, t = fw
    causal = ra.AttentionField(field.P(t) / field.beta, field.U(t), W=W, mask="causal",
                               normalization=field.normalization)
    A = causal.attention(t, y)
    l = y.shape[-2]
    assert np.all(A[..., np.triu(np.ones((l, l), bool), 1)] == 0.0)
    # token i's row equals full attention restricted to the first i tokens
    full = ra.AttentionField(field.P(t) / field.beta, field.U(t), W=W, normalization=field.normalization)
    for i in range(l):
        Ai = full.attention(t, y[: i + 1])[..., i, :]
        if field.normalization == "mean":
            Ai = Ai * (i + 1) / l  # "mean" divides by l (all tokens) also for causal attention
        np.testing.assert_allclose(A[..., i, : i + 1], Ai, rtol=1e-13)


@given(fw=general_fields(), perm_seed=st.integers(0, 2**32 - 1))
def test_full_attention_is_permutation_equivariant(fw, perm_seed):
    """Full attention: F(t, y o pi) = F(t, y) o pi and alpha(y o pi) = pi^T alpha(y) pi."""
    field, W, y, t = fw
    full = ra.AttentionField(field.P(t) / field.beta, field.U(t), W=W, normalization=field.normalization)
    pi = np.random.default_rng(perm_seed).permutation(y.shape[-2])
    F, Fp = full(t, y), full(t, y[pi])
    np.testing.assert_allclose(Fp, F[pi], rtol=1e-12, atol=1e-13 * (1 + np.abs(F).max()))
    A, Ap = full.attention(t, y), full.attention(t, y[pi])
    np.testing.assert_allclose(Ap, A[:, pi][:, :, pi], rtol=1e-12)


@given(
    l=token_counts, d=dims, data=st.data(),
)
def test_misalignment_zero_exactly_at_consensus(l, d, data):
    """ICML eq. (9): E(y) = 0 when all tokens are positive multiples of y_1 (consensus), and
    E(y) > 0 otherwise (E = (1/l) sum_i (1 - cos angle(y_1, y_i)))."""
    x = data.draw(rs.unit_vectors(d))
    scales = np.array(data.draw(st.lists(st.floats(0.1, 10.0), min_size=l, max_size=l)))
    cons = scales[:, None] * x
    assert abs(dg.misalignment(cons)) <= 1e-15 * l
    y = data.draw(rs.points(ra.Sphere(d - 1), tokens=l))
    cosines = y @ y[0]
    assume(np.min(cosines) < 1 - 1e-6)  # not a consensus: some token is off the direction of y_1
    E = dg.misalignment(y)
    assert E > 0
    np.testing.assert_allclose(E, np.mean(1 - cosines), atol=1e-15)
