"""Sinkhorn (doubly stochastic) attention: a plain NumPy reference, convergence, autograd, and the
Sinkformers gradient-flow structure through riemattn.analysis (sinkhorn_energy, GradientField)."""

import itertools

import numpy as np
import pytest

import riemattn as ra
from riemattn.analysis.gradient_flow import GradientField, sinkhorn_energy
from riemattn.dynamics.attention import AttentionField

EPS = np.finfo(float).eps


def plain_sinkhorn(K, sweeps=20000):
    """Alternate row and column normalisations of a positive matrix (no logs), ending with rows."""
    K = K.copy()
    for _ in range(sweeps):
        K /= K.sum(axis=1, keepdims=True)
        K /= K.sum(axis=0, keepdims=True)
    return K / K.sum(axis=1, keepdims=True)


def reference(y, P, U, beta, W=None, flat=False):
    ell, d = y.shape
    W = np.eye(d) if W is None else W
    out = np.zeros_like(y)
    for eta in range(P.shape[0]):
        K = np.array([[np.exp(beta * (y[i] @ P[eta] @ y[j])) for j in range(ell)] for i in range(ell)])
        A = plain_sinkhorn(K)
        Ue = U[eta] if U.shape[0] > 1 else U[0]
        for i in range(ell):
            for j in range(ell):
                out[i] += A[i, j] * (Ue @ (y[j] - y[i]) if flat else Ue @ y[j])
    if not flat:
        out -= np.einsum("ia,ab,ib->i", y, W, out)[:, None] * y
    return out


def tokens(rng, ell, d, flat=False):
    y = rng.normal(size=(ell, d))
    return y if flat else y / np.linalg.norm(y, axis=1, keepdims=True)


@pytest.mark.parametrize("space,h,values", list(itertools.product(["sphere", "ellipsoid", "flat"], [1, 2],
                                                                    ["identity", "matrices"])))
def test_sinkhorn_field_matches_reference(space, h, values):
    rng = np.random.default_rng(7 + 3 * h + (values == "matrices"))
    d, ell, beta = 3, 6, 1.3
    W = None
    if space == "ellipsoid":
        Q, _ = np.linalg.qr(rng.normal(size=(d, d)))
        W = (Q * [1.0, 2.0, 3.0]) @ Q.T
    P = rng.normal(size=(h, d, d))
    U = np.eye(d)[None] if values == "identity" else rng.normal(size=(h, d, d))
    y = tokens(rng, ell, d, space == "flat")
    if W is not None:
        y /= np.sqrt(np.einsum("ia,ab,ib->i", y, W, y))[:, None]
    field = AttentionField(P, None if values == "identity" else U, W="flat" if space == "flat" else W,
                           normalization="sinkhorn", beta=beta, sinkhorn_tol=1e-14)
    # both scalings converge to the same doubly stochastic matrix; the field's columns are within
    # 1e-14 of 1 (its rows exact), and the scaling's sensitivity at these sizes is O(10): 1e-12 is
    # ample for the attention and the mixing (l h terms of |U| |y|^2)
    np.testing.assert_allclose(field(0.0, y), reference(y, P, U, beta, W, space == "flat"),
                               rtol=0, atol=1e-11 * np.abs(U).max() * np.abs(y).max() ** 2)


@pytest.mark.parametrize("beta", [0.5, 2.0, 5.0])
def test_sinkhorn_convergence_rows_and_columns(beta):
    rng = np.random.default_rng(1)
    y = tokens(rng, 8, 4)
    field = AttentionField(rng.normal(size=(2, 4, 4)), normalization="sinkhorn", beta=beta, sinkhorn_tol=1e-9)
    A = field.attention(0.0, y)
    # rows: one normalisation of l terms (exp(S + f + g) rounded relative to |S| ~ beta |P|)
    row_tol = 8 * 8 * EPS * (1 + beta * np.abs(field.P(0.0)).max() * 4)
    assert np.abs(A.sum(-1) - 1).max() <= row_tol
    assert np.abs(A.sum(-2) - 1).max() <= 1e-9 + row_tol
    assert (A >= 0).all()
    sweeps, err = field._work.sinkhorn
    assert err <= 1e-9 and 1 <= sweeps < field.sinkhorn_iters


def test_sinkhorn_iteration_cap_and_huge_beta():
    rng = np.random.default_rng(2)
    y = tokens(rng, 6, 3)
    P = rng.normal(size=(3, 3))
    capped = AttentionField(P, normalization="sinkhorn", beta=5.0, sinkhorn_iters=1,
                            on_nonconvergence="ignore").attention(0.0, y)[0]
    K = np.exp(5.0 * y @ P @ y.T)
    one = K / K.sum(1, keepdims=True)
    one = one / one.sum(0, keepdims=True)
    np.testing.assert_allclose(capped, one / one.sum(1, keepdims=True), rtol=1e-12)  # one sweep, then rows
    # beta = 1e6: exp(S) overflows, the log domain does not; rows sum to 1 to the rounding of S ~ 1e6
    A = AttentionField(P, normalization="sinkhorn", beta=1e6, sinkhorn_iters=200).attention(0.0, y)[0]
    assert np.isfinite(A).all()
    assert np.abs(A.sum(-1) - 1).max() <= 64 * 1e6 * np.abs(P).max() * EPS


def test_sinkhorn_symmetric_scores_give_a_symmetric_matrix():
    rng = np.random.default_rng(3)
    y = tokens(rng, 7, 3)
    A0 = rng.normal(size=(3, 3))
    A = AttentionField(A0 + A0.T, normalization="sinkhorn", beta=2.0, sinkhorn_tol=1e-14).attention(0.0, y)[0]
    np.testing.assert_allclose(A, A.T, rtol=0, atol=1e-13)


def test_sinkhorn_gradcheck_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    y = torch.tensor(tokens(rng, 4, 3), requires_grad=True)
    # a fixed number of sweeps (tol unreachable), so the map is the same at every perturbed point; at
    # most NEWTON_AFTER = 20 sweeps is the truncated iteration on both backends (no Newton on NumPy)
    field = AttentionField(rng.normal(size=(2, 3, 3)), rng.normal(size=(3, 3)), normalization="sinkhorn",
                           beta=1.5, sinkhorn_iters=20, sinkhorn_tol=1e-300, alibi=0.2, rope=[0.7],
                           on_nonconvergence="ignore")
    assert torch.autograd.gradcheck(lambda x: field(0.0, x), (y,), eps=1e-6, atol=1e-7, rtol=1e-6)
    out = field(0.0, y.detach()).numpy()
    np.testing.assert_allclose(out, field(0.0, y.detach().numpy()), rtol=0, atol=1e-13)


def sym(rng, d):
    A = rng.normal(size=(d, d))
    return (A + A.T) / 2


@pytest.mark.parametrize("beta", [0.7, 3.0])
def test_sinkhorn_field_is_the_gradient_flow_of_the_energy(beta):
    """Sinkformers: for symmetric P and U = P the field is -(l / beta) grad F (F = 1/2 OT(mu, mu)),
    compared with riemattn's GradientField of sinkhorn_energy (autograd), and with central
    differences of the energy."""
    rng = np.random.default_rng(5)
    ell, d = 6, 3
    P = sym(rng, d)
    y = tokens(rng, ell, d)
    field = AttentionField(P, P, normalization="sinkhorn", beta=beta, sinkhorn_tol=1e-14, sinkhorn_iters=10**5)
    grad_field = GradientField(lambda x: sinkhorn_energy(x, P, beta), ra.Sphere(d - 1),
                               weights=lambda x: np.full(x.shape[:-1], beta / ell))
    np.testing.assert_allclose(field(0.0, y), grad_field(0.0, y), rtol=0, atol=1e-12)
    # central differences of F (step 1e-5: truncation ~1e-10 |F'''|, rounding ~1e-11 |F|)
    h, G = 1e-5, np.zeros_like(y)
    for i, a in itertools.product(range(ell), range(d)):
        e = np.zeros_like(y)
        e[i, a] = h
        G[i, a] = (sinkhorn_energy(y + e, P, beta) - sinkhorn_energy(y - e, P, beta)) / (2 * h)
    flat = AttentionField(P, P, W="flat", normalization="sinkhorn", beta=beta, sinkhorn_tol=1e-14)
    uncentred = flat.update(0.0, y) + y @ P  # rows of alpha sum to 1: add back sum_j alpha_ij P y_i
    np.testing.assert_allclose(uncentred, -(ell / beta) * G, rtol=0, atol=1e-8)


def test_sinkhorn_energy_decreases_along_a_trajectory():
    rng = np.random.default_rng(6)
    ell, d, beta = 10, 3, 2.0
    P = sym(rng, d)
    y0 = tokens(rng, ell, d)
    field = AttentionField(P, P, normalization="sinkhorn", beta=beta, sinkhorn_tol=1e-12)
    sol = ra.integrate(field, y0, (0.0, 1.0), "rk4", dt=0.05)
    E = np.array([sinkhorn_energy(yk, P, beta, tol=1e-12) for yk in sol.y])
    # dE/dt = -(beta / l) sum_i |grad_i E|^2 <= 0: every step decreases E (measured: by >= 3e-3,
    # far above the O(dt^5) step error and the 1e-12 Sinkhorn tolerance)
    assert np.all(np.diff(E) < 0)
    assert E[-1] < E[0] - 0.1


def test_sinkhorn_energy_rejects_nonsymmetric_p():
    with pytest.raises(ra.errors.ValidationError, match="symmetric"):
        sinkhorn_energy(np.eye(3)[:2], np.arange(9.0).reshape(3, 3))


def test_sinkhorn_at_beta_near_the_float_limit_is_tangent_and_warning_free():
    """beta = 1e300: column sums beyond e^709 make expm1 overflow in the convergence check (a
    deviation of inf, i.e. not converged yet); no RuntimeWarning escapes and the field stays a
    finite tangent field (y_i . F_i = 0 to rounding: |F_i| <= 2, so 4 eps per token)."""
    import warnings

    rng = np.random.default_rng(4)
    y = rng.normal(size=(5, 3))
    y /= np.linalg.norm(y, axis=-1, keepdims=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        F = ra.AttentionField(np.eye(3), beta=1e300, normalization="sinkhorn")(0.0, y)
    assert np.all(np.isfinite(F))
    assert np.max(np.abs(np.sum(y * F, axis=-1))) <= 4 * np.finfo(float).eps * 3


# ---------------------------------------------------------------------------------------------
# convergence at low temperature (Newton's finisher) and on_nonconvergence
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("ell, beta", [(64, 100.0), (128, 1e3), (40, 1e5)])
def test_sinkhorn_converges_at_low_temperature_or_warns(ell, beta, recwarn):
    """64 tokens at beta = 100 left the columns 3e-5 from 1 after 1000 sweeps, silently. The scaling
    of exp(S) to a doubly stochastic matrix is unique (Sinkhorn's theorem), so a result of the form
    exp(f + S + g) with both marginals at 1 is the answer: check the marginals, no warning."""
    from riemattn.dynamics._normalize import sinkhorn_potentials

    rng = np.random.default_rng(11)
    y = tokens(rng, ell, 3)
    field = AttentionField(np.eye(3), normalization="sinkhorn", beta=beta)
    A = field.attention(0.0, y)[0]
    # rows: one normalisation of l terms rounded relative to |S| <= beta; columns: the tolerance
    row_tol = 4 * ell * EPS * (1 + beta)
    assert np.abs(A.sum(-1) - 1).max() <= row_tol
    assert np.abs(A.sum(-2) - 1).max() <= field.sinkhorn_tol + row_tol
    assert 0.0 <= field.sinkhorn_error <= field.sinkhorn_tol
    assert not [w for w in recwarn if "sinkhorn" in str(w.message)]
    S = beta * y @ y.T
    f, g, (sweeps, err) = sinkhorn_potentials(S[:, None, :], 1000, 1e-10)
    # the field is that scaling, from scores rounded differently (beta folded into P): both meet the
    # marginals to 1e-10, and the entries of the unique scaling move by about as much
    assert err <= 1e-10
    np.testing.assert_allclose(np.exp(f + S[:, None, :] + g)[:, 0, :], A, rtol=0, atol=1e-10)


@pytest.mark.parametrize("mode", ["warn", "raise", "ignore"])
def test_on_nonconvergence(mode, recwarn):
    from riemattn.errors import SinkhornConvergenceWarning
    from riemattn.errors import IntegrationError

    rng = np.random.default_rng(12)
    y = tokens(rng, 5, 3)
    # 3 sweeps (the truncated iteration, no Newton) cannot reach 1e-15 at beta = 4
    field = AttentionField(np.eye(3), normalization="sinkhorn", beta=4.0, sinkhorn_iters=3, sinkhorn_tol=1e-15,
                           on_nonconvergence=mode)
    if mode == "raise":
        with pytest.raises(IntegrationError, match="sinkhorn_tol = 1e-15"):
            field(0.0, y)
    elif mode == "warn":
        with pytest.warns(SinkhornConvergenceWarning, match="above sinkhorn_tol = 1e-15"):
            field(0.0, y)
    else:
        field(0.0, y)
        assert not [w for w in recwarn if issubclass(w.category, SinkhornConvergenceWarning)]
    assert field.sinkhorn_error > 1e-15
    with pytest.raises(ra.ValidationError, match="on_nonconvergence"):
        AttentionField(np.eye(3), normalization="sinkhorn", on_nonconvergence="maybe")


def test_nonconvergence_raises_through_integrate():
    from riemattn.errors import IntegrationError

    rng = np.random.default_rng(13)
    y = tokens(rng, 5, 3)
    field = AttentionField(np.eye(3), normalization="sinkhorn", beta=4.0, sinkhorn_iters=3, sinkhorn_tol=1e-15,
                           on_nonconvergence="raise")
    with pytest.raises(IntegrationError, match="sinkhorn"):
        ra.integrate(field, y, (0.0, 0.1), "rk4", dt=0.05)


def test_the_worst_marginal_error_is_recorded_on_the_solve():
    """sol.attrs["sinkhorn_error"]: the largest column error of the evaluations of this solve, and the
    field's running maximum follows. 3 sweeps leave an error; the first evaluation is at y0 exactly, so the
    recorded value is at least the column error of the attention at y0, computed here from its columns."""
    rng = np.random.default_rng(14)
    y = tokens(rng, 5, 3)
    field = AttentionField(np.eye(3), normalization="sinkhorn", beta=4.0, sinkhorn_iters=3, sinkhorn_tol=1e-15,
                           on_nonconvergence="ignore")
    at_y0 = float(np.abs(field.attention(0.0, y)[0].sum(axis=0) - 1.0).max())
    field.sinkhorn_error = 0.0
    sol = ra.integrate(field, y, (0.0, 0.2), "rk4", dt=0.05)
    assert sol.attrs["sinkhorn_error"] >= at_y0 * (1 - 1e-6) > 1e-15
    assert field.sinkhorn_error == sol.attrs["sinkhorn_error"]
    assert sol.to_xarray().attrs["sinkhorn_error"] == sol.attrs["sinkhorn_error"]
    converged = AttentionField(np.eye(3), normalization="sinkhorn", beta=4.0)
    assert ra.integrate(converged, y, (0.0, 0.2), "rk4", dt=0.05).attrs["sinkhorn_error"] <= converged.sinkhorn_tol
    assert "sinkhorn_error" not in ra.integrate(AttentionField(np.eye(3)), y, (0.0, 0.2), "rk4", dt=0.05).attrs
