"""ra.layernorm: the five placements of the layer norm, their blocks, speed factors and reduction.

Independent references: the blocks written out in NumPy with a hand-made softmax, a tight DOP853
solve (orders), the scalar ODE of riemattn.analysis.speeds (SciPy; shares no code with the
tokens), finite differences (gradients), and the simuformer update rule rewritten from its source.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy.optimize import brentq

import riemattn as ra
from riemattn.analysis.speeds import equiangular_placement
from riemattn.errors import InputTypeError, ValidationError
from riemattn.experiments import _simuformer as sf

PLACES = ["post", "pre", "peri", "ngpt", "mix"]
KW = {"ngpt": {"alpha": 0.7}, "mix": {"switch": 0.45}}


def _spd(rng, d):
    G = rng.standard_normal((d, d))
    return G @ G.T / d + np.eye(d)


def _field(rng, d=4, W=None, **kw):
    return ra.AttentionField(rng.standard_normal((2, d, d)), rng.standard_normal((2, d, d)) / 2, W=W, **kw)


def _on(W, y):
    return y / np.sqrt(np.einsum("...i,ij,...j->...", y, W, y))[..., None]


def _A(field, t, theta):
    """sum_eta sum_j alpha_ij U_eta theta_j by a direct softmax ("softmax" normalization, full mask)."""
    P, U = field.P(t), field.U(t)
    out = np.zeros_like(theta)
    for Pe, Ue in zip(P, U):
        S = np.einsum("...ia,ab,...jb->...ij", theta, Pe, theta)
        E = np.exp(S - S.max(-1, keepdims=True))
        out += (E / E.sum(-1, keepdims=True)) @ (theta @ Ue.T)
    return out


@pytest.mark.parametrize("placement", PLACES)
def test_blocks_are_the_written_formulas(placement):
    rng = np.random.default_rng(1)
    d, W = 4, _spd(rng, 4)
    f = _field(rng, d, W=W, normalization="softmax")
    model = ra.layernorm(f, placement, **KW.get(placement, {}))
    x = rng.standard_normal((3, 5, d)) * rng.uniform(0.5, 2.0, (3, 5, 1))
    if placement in ("post", "ngpt"):
        x = _on(W, x)
    h, t = 0.3, 0.2
    r = np.sqrt(np.einsum("...i,ij,...j->...", x, W, x))[..., None]
    th = x / r
    A = _A(f, t, th)
    nA = _on(W, A)
    want = {"post": _on(W, x + h * A), "pre": x + h * A, "peri": x + h * nA,
            "ngpt": _on(W, x + 0.7 * h * (nA - x)), "mix": r * _on(W, th + h * A)}[placement]
    np.testing.assert_allclose(model.block(t, x, h), want, rtol=1e-12, atol=1e-12)
    if placement == "mix":  # after the switch: the Pre-LN block
        np.testing.assert_allclose(model.block(0.5, x, h), x + h * _A(f, 0.5, th), rtol=1e-12, atol=1e-12)
        # one time per trajectory: each trajectory gets the block of its own time
        ts = np.array([0.1, 0.5, 0.2])
        got = model.block(ts, x, h)
        np.testing.assert_allclose(got[1], model.block(0.5, x, h)[1], rtol=1e-14)
        np.testing.assert_allclose(got[0], model.block(0.1, x, h)[0], rtol=1e-14)


@pytest.mark.parametrize("placement", PLACES)
def test_layer_block_converges_to_the_model_at_order_one(placement):
    rng = np.random.default_rng(2)
    d, W = 4, _spd(rng, 4)
    f = _field(rng, d, W=W, mask="causal", beta=np.array([[1.0], [2.5]]))
    model = ra.layernorm(f, placement, **KW.get(placement, {}))
    y0 = _on(W, rng.standard_normal((2, 2, 5, d)))
    ref = ra.integrate(model, y0, (0.0, 1.0), stepper="dop853", rtol=1e-12, atol=1e-13).y[-1]
    steps = np.array([40, 80, 160])
    err = [np.max(np.abs(ra.integrate(model, y0, (0.0, 1.0), stepper="layer", dt=1.0 / n).y[-1] - ref))
           for n in steps]
    order = np.polyfit(np.log(1.0 / steps), np.log(err), 1)[0]  # slope of log error vs log h
    assert abs(order - 1.0) < 0.2, (placement, err, order)


def _frame(rng, n, W):
    """n pairwise W-orthonormal vectors (rows) in R^n."""
    Q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    w, V = np.linalg.eigh(W)
    return Q @ (V @ np.diag(w ** -0.5) @ V.T)  # rows q_i W^{-1/2}: <., .>_W orthonormal


@pytest.mark.parametrize("normalization", ["softmax", "paper", "mean"])
@pytest.mark.parametrize("placement", PLACES)
def test_equiangular_reduction_matches_the_token_system(placement, normalization):
    rng = np.random.default_rng(3)
    n, betas = 5, np.array([0.0, 1.5, 3.0])
    W = _spd(rng, n) if normalization == "softmax" else None
    field = ra.AttentionField(np.eye(n) if W is None else W, W=W, normalization=normalization, beta=betas)
    model = ra.layernorm(field, placement, **KW.get(placement, {}))
    x0 = np.broadcast_to(_frame(rng, n, np.eye(n) if W is None else W), (3, n, n))
    t = np.linspace(0.0, 3.0, 13)
    sol = ra.integrate(model, x0, (0.0, 3.0), stepper="dop853", rtol=1e-12, atol=1e-14, saveat=t)
    th = model.directions(sol.y)
    Wm = np.eye(n) if W is None else W
    G = np.einsum("...ia,ab,...jb->...ij", th, Wm, th)[..., np.triu_indices(n, 1)[0], np.triu_indices(n, 1)[1]]
    r = model.radii(sol.y)
    kw = dict(KW.get(placement, {}), normalization=normalization, d=n)
    for b, beta in enumerate(betas):
        rho_ode, r_ode = equiangular_placement(t, beta, n, placement, **kw)
        # both solved at rtol 1e-12 over t <= 3 with rates O(1): errors ~1e-11; 1e-8 is the claim
        assert np.max(np.abs(G[:, b] - rho_ode[:, None])) < 1e-8
        assert np.max(np.abs(r[:, b] - r_ode[:, None])) < 1e-8


def test_post_is_the_attention_field_itself():
    rng = np.random.default_rng(4)
    f = _field(rng)
    post = ra.layernorm(f, "post")
    y0 = ra.Sphere(3).projection(rng.standard_normal((2, 4, 4)))
    for stepper in ("layer", "rk4"):
        a = ra.integrate(post, y0, (0, 1), stepper=stepper, dt=0.1).y
        b = ra.integrate(f, y0, (0, 1), stepper=stepper, dt=0.1).y
        np.testing.assert_array_equal(a, b)


def test_pre_radius_crosses_a_level_when_the_ode_says():
    """An event on the radius of Pre-LN tokens, located on the dense output, vs the scalar ODE."""
    n = 4
    model = ra.layernorm(ra.sa(1.0, n), "pre")
    ev = ra.solvers.events.Event(lambda t, y: ra.diagnostics.radii(y).mean(-1) - 1.5, terminal=True)
    sol = ra.integrate(model, np.eye(n), (0.0, 5.0), stepper="dopri5", rtol=1e-10, atol=1e-12, events=[ev])
    t_ode = brentq(lambda s: equiangular_placement(s, 1.0, n, "pre")[1] - 1.5, 0.1, 5.0, xtol=1e-13)
    assert abs(float(sol.events.t_stop) - t_ode) < 1e-7


def test_array_beta_batch_equals_separate_runs_with_compaction():
    rng = np.random.default_rng(5)
    betas = np.array([0.5, 4.0, 1.0])
    P = rng.standard_normal((4, 4))
    y0 = ra.Sphere(3).projection(rng.standard_normal((3, 5, 4)))
    batch = ra.integrate(ra.layernorm(ra.AttentionField(P, beta=betas), "peri"), y0, (0, 2.0),
                         stepper="dopri5", rtol=1e-8, atol=1e-10)
    for b, beta in enumerate(betas):
        one = ra.integrate(ra.layernorm(ra.AttentionField(P, beta=beta), "peri"), y0[b], (0, 2.0),
                           stepper="dopri5", rtol=1e-8, atol=1e-10)
        np.testing.assert_allclose(batch.y[-1, b], one.y[-1], atol=1e-7)


def test_torch_tokens_and_gradients():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(6)
    f = _field(rng, normalization="softmax")
    y0 = rng.standard_normal((2, 4, 4))
    for p in PLACES:
        model = ra.layernorm(f, p, **KW.get(p, {}))
        y = _on(np.eye(4), y0)
        a = ra.integrate(model, y, (0, 1), stepper="rk4", dt=0.1).y[-1]
        b = ra.integrate(model, torch.tensor(y), (0, 1), stepper="rk4", dt=0.1).y[-1]
        np.testing.assert_allclose(b.numpy(), a, rtol=1e-12, atol=1e-12)
    # d/dbeta of the final mean radius of Pre-LN blocks, vs a central difference
    def radius(beta):
        model = ra.layernorm(ra.AttentionField(f.P()[0], beta=beta), "pre")
        y = ra.integrate(model, torch.tensor(_on(np.eye(4), y0)), (0, 1), stepper="layer", dt=0.1).y[-1]
        return ra.diagnostics.radii(y).mean()
    beta = torch.tensor(0.7, dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(radius(beta), beta)
    eps = 1e-6
    fd = (radius(torch.tensor(0.7 + eps, dtype=torch.float64)) - radius(torch.tensor(0.7 - eps, dtype=torch.float64))) / (2 * eps)
    assert abs(float(g) - float(fd)) < 1e-7 * max(1.0, abs(float(fd)))


def test_stiff_and_lie_steppers_run_on_every_placement():
    rng = np.random.default_rng(7)
    f = _field(rng)
    y0 = _on(np.eye(4), rng.standard_normal((4, 4)))
    for p in PLACES:
        model = ra.layernorm(f, p, **KW.get(p, {}))
        ref = ra.integrate(model, y0, (0, 1), stepper="dop853", rtol=1e-11, atol=1e-12).y[-1]
        for stepper, kw in (("rodas4", {"rtol": 1e-8, "atol": 1e-10}), ("rkmk4", {"dt": 0.01})):
            got = ra.integrate(model, y0, (0, 1), stepper=stepper, **kw).y[-1]
            # Mix-LN's field jumps at the switch: a fixed step whose last stage sits on it is O(dt)
            # off in that one step (|jump| dt ~ 1e-2 * 1e-2); the adaptive steppers resolve it
            tol = 1e-3 if p == "mix" and stepper == "rkmk4" else 1e-6
            np.testing.assert_allclose(got, ref, atol=tol, err_msg=f"{p} {stepper}")


def test_zero_values_give_a_zero_update_without_warnings():
    f = ra.AttentionField(np.eye(3), np.zeros((3, 3)))
    y = np.eye(3)[None] * 2.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for p in ("peri", "ngpt", "pre"):
            model = ra.layernorm(f, p, **KW.get(p, {}))
            y0 = y / 2.0 if p == "ngpt" else y
            assert np.all(model(0.0, y0) == 0.0)
            np.testing.assert_array_equal(model.block(0.0, y0, 0.5), y0)


def test_bad_arguments_raise_clear_errors():
    f = ra.sa(1.0, 3)
    with pytest.raises(ValidationError, match="placement must be one of"):
        ra.layernorm(f, "middle")
    with pytest.raises(InputTypeError, match="AttentionField"):
        ra.layernorm(ra.VectorField(lambda t, y: y, ra.Euclidean(3)), "pre")
    with pytest.raises(ValidationError, match="alpha"):
        ra.layernorm(f, "pre", alpha=0.5)
    with pytest.raises(ValidationError, match="alpha"):
        ra.layernorm(f, "ngpt", alpha=0.0)
    with pytest.raises(ValidationError, match="switch"):
        ra.layernorm(f, "mix")
    with pytest.raises(ValidationError, match="switch"):
        ra.layernorm(f, "peri", switch=1.0)
    with pytest.raises(ValidationError, match="zero token"):
        ra.layernorm(f, "pre")(0.0, np.zeros((2, 3)))
    with pytest.raises(ValidationError, match="shape"):
        ra.layernorm(f, "pre")(0.0, np.ones((2, 4)))
    empty = np.zeros((0, 2, 3))
    assert ra.layernorm(f, "pre").block(0.0, empty, 0.1).shape == (0, 2, 3)


def test_simuformer_post_rule_is_our_post_block_and_ngpt_differs_by_alpha_over_one_minus_alpha_h():
    rng = np.random.default_rng(8)
    d, h, eta, alpha = 6, 2, 0.1, 0.2
    P = np.stack([rng.standard_normal((d, d)) for _ in range(h)])
    V = np.broadcast_to(np.eye(d), (h, d, d))
    f = ra.AttentionField(P, np.eye(d) / h, normalization="softmax", beta=2.0)
    M = ra.Sphere(d - 1).projection(rng.standard_normal((3, 7, d)))
    A = sf.attention(M, P, V, 2.0)
    np.testing.assert_allclose(A, f.update(0.0, M), rtol=1e-12, atol=1e-14)
    post = ra.layernorm(f, "post").block(0.0, M, eta)
    np.testing.assert_allclose(sf.step(M, None, A, "post", eta)[0], post, rtol=1e-13, atol=1e-14)
    ngpt = ra.layernorm(f, "ngpt", alpha=alpha).block(0.0, M, eta)
    theirs = sf.step(M, None, A, "ngpt", eta, alpha=alpha / (1 - alpha * eta))[0]
    np.testing.assert_allclose(theirs, ngpt, atol=1e-8)  # equal up to simuformer's 1e-9 in N(A)
    assert np.max(np.abs(sf.step(M, None, A, "ngpt", eta, alpha=alpha)[0] - ngpt)) > 1e-5


def test_simuformer_radius_rule_differs_from_the_model():
    """simuformer's r' = r sum_k A_k vs the model's r' = <theta, A> (its own comment says <r, A>)."""
    rng = np.random.default_rng(9)
    d = 5
    f = ra.sa(1.0, d)
    x = ra.Sphere(d - 1).projection(rng.standard_normal((4, d)))
    A = f.update(0.0, x)
    r = np.ones(4)
    _, r_sf = sf.step(x, r, A, "pre", 0.01)
    _, r_model = sf.step(x, r, A, "pre", 0.01, radius="model")
    x1 = ra.layernorm(f, "pre").block(0.0, x, 0.01)
    r_ours = np.linalg.norm(x1, axis=-1)
    np.testing.assert_allclose(r_model, r_ours, atol=1e-4)  # first order in h = 0.01
    np.testing.assert_allclose(r_sf, 1 + 0.01 * A.sum(-1), rtol=1e-14)
    assert np.max(np.abs(r_sf - r_ours)) > 1e-3


def test_radius_and_direction_diagnostics():
    rng = np.random.default_rng(10)
    W = _spd(rng, 3)
    y = rng.standard_normal((2, 4, 3))
    r = ra.diagnostics.radii(y, W)
    np.testing.assert_allclose(r, np.sqrt(np.einsum("...i,ij,...j->...", y, W, y)), rtol=1e-14)
    np.testing.assert_allclose(ra.diagnostics.directions(y, W) * r[..., None], y, rtol=1e-14)
    z = np.array([[[1.0, 0, 0], [3.0, 0, 0], [0, 1.0, 0], [0, 2.0, 1e-3]]])
    # pairs (0, 1) and (2, 3) have parallel-enough directions, the other four do not
    assert ra.diagnostics.clustered_fraction(z, 0.999)[0] == pytest.approx(2 / 6)
    with pytest.raises(ValidationError, match="zero token"):
        ra.diagnostics.directions(np.zeros((1, 2, 3)))


def test_edges_coincident_tokens_huge_beta_and_one_block_over_the_horizon():
    """Coincident tokens under SA: A = theta, so Pre-LN/Peri-LN radii grow exactly as 1 + t and the
    directions stay; one block as long as the horizon gives the same; beta = 1e6 is finite."""
    theta = np.tile(np.array([0.6, 0.0, 0.8]), (4, 1))
    for beta in (0.0, 1e6):
        for p in ("pre", "peri", "mix"):
            model = ra.layernorm(ra.sa(beta, 3), p, **KW.get(p, {}))
            for kw in ({"stepper": "layer", "dt": 2.0}, {"stepper": "rk4", "dt": 0.5}):
                if p == "mix" and kw["stepper"] == "rk4":
                    continue  # a step across the switch mixes the two fields (tested elsewhere)
                y = ra.integrate(model, theta, (0.0, 2.0), **kw).y[-1]
                r_want = 1.0 if p == "mix" else 3.0  # mix: one block at t = 0 < switch, radius kept
                np.testing.assert_allclose(ra.diagnostics.radii(y), r_want, rtol=1e-14)
                np.testing.assert_allclose(ra.diagnostics.directions(y), theta, atol=1e-15)
    # antipodal pair on the circle with W = I under nGPT: an equilibrium (A along each token)
    y = np.array([[1.0, 0.0], [-1.0, 0.0]])
    np.testing.assert_allclose(ra.layernorm(ra.sa(1.0, 2), "ngpt").block(0.0, y, 1.0), y, atol=1e-15)
