"""Differentiating through a solve on the PyTorch backend (docs/autodiff.md).

Every gradient is checked against central finite differences of the same discrete map computed
independently with NumPy float64 (no autograd involved): for fixed-step steppers the solve itself,
for adaptive ones the same sequence of steps replayed as a fixed grid (the step-size decisions
are constants of the differentiated map). The per-stepper test is parametrised over
``riemattn.STEPPERS``, so steppers registered later are covered too.
"""

from __future__ import annotations

import numpy as np
import pytest

import riemattn as ra
from riemattn.analysis.diagnostics import misalignment
from riemattn.errors import ValidationError
from riemattn.geometry.manifolds import project
from riemattn.solvers.steppers import get_stepper

torch = pytest.importorskip("torch")

L, D, T, DT = 3, 3, 1.0, 0.1
FD_EPS = 1e-5
#: the bar of the issue: relative error of the gradient against central differences (float64)
RTOL = 1e-6
#: tolerances of the adaptive runs (6 to 18 accepted steps on [0, T])
ADAPTIVE = dict(rtol=1e-10, atol=1e-12)
#: the stiff steppers (order 4, a dense Jacobian by autodiff per step): 19 accepted steps on [0, T]
STIFF = dict(rtol=1e-7, atol=1e-9)


def _problem(batch):
    """A small problem: one head P, U, an ellipsoid W, beta (one per trajectory), tokens y0."""
    rng = np.random.default_rng(7)
    A = rng.normal(size=(D, D))
    W = A @ A.T / D + np.eye(D)
    y0 = project(rng.normal(size=batch + (L, D)), W)
    beta = np.linspace(1.0, 1.5, batch[0]) if batch else np.array(1.2)
    return {"y0": y0, "P": rng.normal(size=(D, D)), "U": rng.normal(size=(D, D)) + np.eye(D),
            "beta": beta, "W": W}


def _field(p):
    return ra.AttentionField(p["P"], p["U"], W=p["W"], beta=p["beta"])


def _grid_solve(stepper, field, y0, grid, modes=None):
    """The stepper's steps over the fixed grid of times (an adaptive run's accepted steps).

    A stepper that carries a state across steps (``"auto"``: its mode and counter per trajectory)
    gets it from step to step as in ``integrate``, so the replay takes the run's method choices;
    ``modes`` (a list) receives each step's ``state[..., 0]`` (1: the stiff method)."""
    field = field._unchecked()
    y = field.manifold.projection(y0)
    k1 = field(grid[0], y) if stepper.fsal else None
    state = None
    for t, h in zip(grid[:-1], np.diff(grid)):
        res = stepper.step(field, float(t), y, float(h), k1, **({} if state is None else {"state": state}))
        if modes is not None and res.state is not None:
            modes.append(np.asarray(res.stages[0], dtype=float).copy())
        y, k1, state = res.y, (res.k_next if stepper.fsal else None), res.state
    return y


def _observable(name, p, grid=None):
    """sum of the misalignment at T (NumPy or torch, by the kind of p's arrays)."""
    spec = get_stepper(name)
    field = _field(p)
    if grid is not None:
        yT = _grid_solve(spec, field, p["y0"], grid)
    else:
        kw = ADAPTIVE if spec.adaptive else dict(dt=DT)
        yT = ra.integrate(field, p["y0"], (0.0, T), name, project=True, raise_on_failure=True, **kw).y[-1]
    return misalignment(yT).sum()


def _directions(key, value, n=4):
    """``n`` random unit directions (seeded; symmetric ones for W, which must stay symmetric)."""
    rng = np.random.default_rng([ord(c) for c in key])
    out = []
    for _ in range(n):
        E = rng.normal(size=np.shape(value))
        if key == "W":
            E = E + E.T
        out.append(E / np.linalg.norm(E))
    return out


def _fd_check(fn, params, grads):
    """Relative error of each gradient against central differences of ``fn`` (NumPy): the
    directional derivatives along four random directions, ``|ad - fd| / |fd|`` over them."""
    errors = {}
    for key, value in params.items():
        dirs = _directions(key, value)
        fd, ad = [], []
        for E in dirs:
            plus = dict(params, **{key: value + FD_EPS * E})
            minus = dict(params, **{key: value - FD_EPS * E})
            fd.append((fn(plus) - fn(minus)) / (2 * FD_EPS))
            ad.append(float(np.sum(grads[key] * E)))
        fd, ad = np.array(fd), np.array(ad)
        errors[key] = float(np.linalg.norm(ad - fd) / np.linalg.norm(fd))
    return errors


def _torch_params(params):
    return {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in params.items()}


@pytest.mark.parametrize("name", sorted(ra.STEPPERS))
def test_gradients_match_finite_differences(name):
    """d(misalignment at T)/d(y0, P, U, beta, W) for every stepper, rel. error <= 1e-6.

    Fixed steps: a batch of two trajectories with one beta each. Adaptive: one trajectory; the
    finite differences replay the accepted steps of the differentiated run as a fixed grid (step
    sizes are constants of the differentiated map, as in torchdiffeq and diffrax). The stiff
    steppers (``"rodas4"``, ``"rodas4p"``, ``"auto"``) take their differentiable torch path here;
    the replay is their NumPy path. ``"auto"`` replays its method choices too (the state carried
    from step to step), and the finite differences must take the same ones: on this non-stiff
    problem it stays with Dormand--Prince on every step (checked).
    """
    spec = get_stepper(name)
    params = _problem(() if spec.adaptive else (2,))
    tp = _torch_params(params)
    grid = None
    if spec.adaptive:
        tol = STIFF if getattr(spec, "stiff", False) and name != "auto" else ADAPTIVE
        sol = ra.integrate(_field(tp), tp["y0"], (0.0, T), name, project=True, raise_on_failure=True, **tol)
        grid = np.asarray(sol.t, dtype=float)  # a single trajectory saves every accepted step
        assert len(grid) >= 6
        value = misalignment(sol.y[-1]).sum()
    else:
        value = _observable(name, tp)
    grads = dict(zip(tp, (g.numpy() for g in torch.autograd.grad(value, list(tp.values())))))
    modes = []
    assert abs(float(value.detach()) - float(misalignment(_grid_solve(spec, _field(params), params["y0"], grid, modes)).sum()
                                             if grid is not None else _observable(name, params))) < 1e-12
    if name == "auto":
        assert len(modes) == len(grid) - 1 and not np.any(modes)  # explicit on every step
    errors = _fd_check(lambda p: float(_observable(name, p, grid)), params, grads)
    assert max(errors.values()) <= RTOL, errors


def test_adaptive_gradient_is_that_of_the_fixed_grid_not_of_the_step_size_choice():
    """The step sizes are constants: the gradient matches the replayed grid's finite differences,
    which differ measurably from those of the adaptive solve with its step-size control (the step
    sizes, hence y(T), move with the parameters)."""
    params = _problem(())
    tp = _torch_params(params)
    loose = dict(rtol=1e-3, atol=1e-6)
    grid = ra.integrate(_field(params), params["y0"], (0.0, T), "dopri5", **loose).t
    solve = ra.integrate(_field(tp), tp["y0"], (0.0, T), "dopri5", project=True, **loose)
    grads = dict(zip(tp, (g.numpy() for g in torch.autograd.grad(misalignment(solve.y[-1]).sum(), list(tp.values())))))

    def adaptive(p):
        sol = ra.integrate(_field(p), p["y0"], (0.0, T), "dopri5", project=True, **loose)
        return float(misalignment(sol.y[-1]).sum())

    sub = {"P": params["P"]}
    same = _fd_check(lambda p: float(_observable("dopri5", dict(params, **p), grid)), sub, grads)
    free = _fd_check(lambda p: adaptive(dict(params, **p)), sub, grads)
    assert same["P"] <= RTOL  # measured 9e-11
    assert free["P"] > 1000 * same["P"]  # measured 1.3e-6: the step sizes' dependence is visible


def test_adaptive_batch_with_per_trajectory_beta_gives_each_trajectorys_gradient():
    """Adaptive steps are per trajectory (the batch is compacted as trajectories finish): the
    gradient of a batch with one beta per trajectory equals that of each trajectory solved alone."""
    params = _problem((2,))
    tp = _torch_params(params)
    solve = ra.integrate(_field(tp), tp["y0"], (0.0, T), "dopri5", project=True, **ADAPTIVE)
    batch = torch.autograd.grad(misalignment(solve.y[-1]).sum(), [tp["beta"], tp["P"]])
    beta_alone, P_alone = [], 0.0
    for k in range(2):
        q = _torch_params(dict(params, y0=params["y0"][k], beta=params["beta"][k]))
        sol = ra.integrate(_field(q), q["y0"], (0.0, T), "dopri5", project=True, **ADAPTIVE)
        g = torch.autograd.grad(misalignment(sol.y[-1]), [q["beta"], q["P"]])
        beta_alone.append(float(g[0]))
        P_alone = P_alone + g[1]
    np.testing.assert_allclose(batch[0].numpy(), beta_alone, rtol=1e-12)
    np.testing.assert_allclose(batch[1].numpy(), P_alone.numpy(), rtol=1e-12)


@pytest.mark.parametrize("stepper, kw", [("rk4", dict(dt=0.25)),
                                         ("dopri5", dict(rtol=1e3, atol=1e3, first_step=0.05))])
def test_gradients_through_saveat_and_save_fn(stepper, kw):
    """Saved values (fixed steps landing on saveat; adaptive dense output) and save_fn observables
    are differentiable. Adaptive: tolerances so loose that every step is accepted and grows by the
    controller's largest factor, so the step sequence does not change under the perturbations."""
    params = _problem((2,))
    saveat = np.array([0.0, 0.3, 0.55, 0.8])

    def solve(p):
        return ra.integrate(_field(p), p["y0"], (0.0, 0.8), stepper, saveat=saveat, project=True, **kw)

    def observable(p):
        sol = solve(p)
        sol_fn = ra.integrate(_field(p), p["y0"], (0.0, 0.8), stepper, saveat=saveat, project=True,
                              save_fn=lambda t, y: {"m": misalignment(y)}, **kw)
        m = sol_fn.observables["m"]  # (4, 2)
        return (sol.y[1:, ..., 0] ** 3).sum() + m[1].sum() + 2 * m[2].sum() + 3 * m[3].sum()

    tp = _torch_params(params)
    if stepper == "dopri5":
        assert solve(params).n_steps == 3  # 0.05, then 0.5 (x10), then the rest: clipped growth
    grads = dict(zip(tp, (g.numpy() for g in torch.autograd.grad(observable(tp), list(tp.values())))))
    errors = _fd_check(lambda p: float(observable(p)), params, grads)
    assert max(errors.values()) <= RTOL, errors


def test_callable_P_and_U_of_time_receive_gradients():
    """A user's torch callable P(t) (and U(t)) built from parameters: gradients flow through it."""
    params = _problem((2,))
    A0 = np.random.default_rng(3).normal(size=(D, D))

    def observable(p, A):
        field = ra.AttentionField(lambda t: p["P"] + float(np.sin(t)) * A, lambda t: p["U"] * (1.0 + 0.5 * t),
                                  W=p["W"], beta=p["beta"])
        sol = ra.integrate(field, p["y0"], (0.0, T), "rk4", dt=DT, project=True)
        return misalignment(sol.y[-1]).sum()

    tp = _torch_params(params)
    tA = torch.tensor(A0, requires_grad=True)
    grads = torch.autograd.grad(observable(tp, tA), [tp["P"], tp["U"], tA])
    err = _fd_check(lambda q: float(observable(dict(params, P=q["P"], U=q["U"]), q["A"])),
                    {"P": params["P"], "U": params["U"], "A": A0},
                    {"P": grads[0].numpy(), "U": grads[1].numpy(), "A": grads[2].numpy()})
    assert max(err.values()) <= RTOL, err


def test_transformer_layer_gradients_in_Q_K_V_Wo():
    """Three layers of TransformerLayer(Q, K, V, Wo): gradients against central differences."""
    rng = np.random.default_rng(5)
    h, w = 2, 2
    params = {"Q": rng.normal(size=(h, w, D)), "K": rng.normal(size=(h, w, D)),
              "V": rng.normal(size=(h, w, D)) / 2, "Wo": rng.normal(size=(h, D, w)) / 2}
    y0 = project(rng.normal(size=(2, L, D)))

    def observable(p):
        layer = ra.TransformerLayer(p["Q"], p["K"], p["V"], p["Wo"])
        y = torch.tensor(y0) if torch.is_tensor(p["Q"]) else y0
        for _ in range(3):
            y = layer(y)
        return misalignment(y).sum()

    tp = _torch_params(params)
    grads = dict(zip(tp, (g.numpy() for g in torch.autograd.grad(observable(tp), list(tp.values())))))
    errors = _fd_check(lambda p: float(observable(p)), params, grads)
    assert max(errors.values()) <= RTOL, errors


# --- torch.autograd.gradcheck ----------------------------------------------------------------
def _gradcheck_inputs():
    p = _problem((2,))
    return tuple(torch.tensor(p[k], requires_grad=True) for k in ("y0", "P", "U", "beta"))


def test_gradcheck_field():
    def fn(y, P, U, beta):
        return ra.AttentionField(P, U, beta=beta)(0.3, y / y.norm(dim=-1, keepdim=True))

    assert torch.autograd.gradcheck(fn, _gradcheck_inputs())


@pytest.mark.parametrize("name", ["rk4", "cf4", "rodas4p"])
def test_gradcheck_one_step(name):
    """One projected stepper (rk4), one Lie-group stepper (cf4) and one stiff stepper (rodas4p,
    its Jacobian by autodiff in the graph), one step on the sphere."""
    stepper = get_stepper(name)

    def fn(y, P, U, beta):
        field = ra.AttentionField(P, U, beta=beta)._unchecked()
        return stepper.step(field, 0.0, y / y.norm(dim=-1, keepdim=True), 0.2).y

    assert torch.autograd.gradcheck(fn, _gradcheck_inputs())


# --- the stiff steppers' torch path ----------------------------------------------------------
def _stiff_fields(p, time_dependent):
    """An attention field on the ellipsoid W with one beta per trajectory, P constant or P(t)."""
    P = (lambda t: p["P"] * (1.0 + 0.5 * np.sin(t))) if time_dependent else p["P"]
    return ra.AttentionField(P, p["U"], W=p["W"], beta=p["beta"])._unchecked()


@pytest.mark.parametrize("name", ["rodas4", "rodas4p"])
@pytest.mark.parametrize("time_dependent", [False, True])
def test_stiff_torch_path_equals_the_numpy_path(name, time_dependent):
    """Three steps (per-trajectory step sizes, then a row kept still with h = 0) of the torch path
    against the NumPy path: tokens, error, k_next, Jacobian and dense output to 1e-12. For P(t),
    both paths take G_t as the forward difference (G(t + dt) - G(t)) / dt with dt = 1.5e-8: field
    values that differ by rounding (2e-16 |G|) differ by 1.5e-8 |G| in G_t, which enters the stages
    as h d_i G_t (h <= 0.2, |d_i| <= 0.5, |G| < 1): the bound there is 3e-9 (measured: 3e-12 for
    the tokens, 1.3e-10 for the error estimate)."""
    stepper = get_stepper(name)
    params = _problem((2,))
    tp = _torch_params(params)
    fn, ft = _stiff_fields(params, time_dependent), _stiff_fields(tp, time_dependent)
    atol = 3e-9 if time_dependent else 1e-12
    y, yt, k, kt = params["y0"], tp["y0"], None, None
    t = np.zeros(2)
    for h in (np.array([0.1, 0.07]), np.array([0.2, 0.15]), np.array([0.1, 0.0])):  # per trajectory
        r, rt = stepper.step(fn, t, y, h, k), stepper.step(ft, torch.tensor(t), yt, torch.tensor(h), kt)
        assert rt.y.requires_grad and torch.is_tensor(rt.stages[0])  # the torch path, in the graph
        for a, b in [(r.y, rt.y), (r.error, rt.error), (r.k_next, rt.k_next), (r.stages[2], rt.stages[2])]:
            np.testing.assert_allclose(b.detach().numpy(), a, rtol=0, atol=atol)
        theta = np.array([0.4, 0.8])
        u = stepper.interpolant(fn, t, y, h, r)(theta)
        ut = stepper.interpolant(ft, torch.tensor(t), yt, torch.tensor(h), rt)(torch.tensor(theta))
        np.testing.assert_allclose(ut.detach().numpy(), u, rtol=0, atol=atol)
        y_prev, y, yt, k, kt, t = yt, r.y, rt.y, r.k_next, rt.k_next, t + h
    assert torch.equal(rt.y[1], y_prev[1]) and not rt.error[1].any()  # the row with h = 0 kept still


@pytest.mark.parametrize("modes", [[0.0, 1.0], [1.0, 1.0]])
def test_auto_torch_path_equals_the_numpy_path(modes):
    """``"auto"`` on differentiated tensors, a mixed batch (one row explicit, one stiff) and an
    all-stiff one: values, the new state and the dense output equal the NumPy path's."""
    stepper = get_stepper("auto")
    params = _problem((2,))
    tp = _torch_params(params)
    fn, ft = _stiff_fields(params, False), _stiff_fields(tp, False)
    state = np.array([[m, 3.0, 0.0] for m in modes])
    h = np.array([0.1, 0.05])
    r = stepper.step(fn, 0.0, params["y0"], h, state=state)
    rt = stepper.step(ft, 0.0, tp["y0"], torch.tensor(h), state=torch.tensor(state))
    assert rt.y.requires_grad and torch.is_tensor(rt.state)
    for a, b in [(r.y, rt.y), (r.error, rt.error), (r.k_next, rt.k_next)]:
        np.testing.assert_allclose(b.detach().numpy(), a, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(rt.state.numpy(), r.state)
    theta = np.array([0.3, 0.9])
    u = stepper.interpolant(fn, 0.0, params["y0"], h, r)(theta)
    ut = stepper.interpolant(ft, 0.0, tp["y0"], torch.tensor(h), rt)(torch.tensor(theta))
    np.testing.assert_allclose(ut.detach().numpy(), u, rtol=0, atol=1e-12)


def _clustered_usa(P):
    """GLPR's USA at beta = 9 (normalization "mean", P = I to start with) and 4 tokens gathered
    near a pole: stiff from the start (dopri5 needs 747 steps on [0, 0.3] at tolerance 1e-6)."""
    return ra.AttentionField(P, beta=9.0, normalization="mean")


@pytest.mark.parametrize("name", ["rodas4p", "auto"])
def test_gradients_through_a_stiff_solve(name):
    """d(C . y(T))/d(y0, P) (C fixed: a direction of the consensus point) on a stiff problem
    against central differences of the replayed grid, rel. error <= 1e-6; rodas4p takes steps far
    beyond the explicit stability limit, auto switches to it during the solve, and the finite
    differences replay the same method on every step (checked)."""
    rng = np.random.default_rng(1)
    y0 = project(np.array([1.0, 0.0, 0.0]) + 0.3 * rng.normal(size=(4, 3)))
    C = rng.normal(size=(4, 3))
    T, tol = 0.3, dict(rtol=1e-6, atol=1e-6)
    params = {"y0": y0, "P": np.eye(3)}
    tp = _torch_params(params)
    sol = ra.integrate(_clustered_usa(tp["P"]), tp["y0"], (0.0, T), name, project=True, raise_on_failure=True, **tol)
    value = (sol.y[-1] * torch.tensor(C)).sum()
    grads = dict(zip(tp, (g.numpy() for g in torch.autograd.grad(value, list(tp.values())))))
    grid = np.asarray(sol.t, dtype=float)
    assert len(grid) - 1 <= 40  # measured 28 (rodas4p) and 33 (auto) against 747 for dopri5
    stepper = get_stepper(name)
    modes = []
    y_replay = _grid_solve(stepper, _clustered_usa(params["P"]), y0, grid, modes)
    assert abs(float(value.detach()) - float(np.sum(y_replay * C))) < 1e-12
    if name == "auto":
        modes = np.ravel(modes)
        assert modes[0] == 0 and modes[-1] == 1  # started explicit, switched to rodas4p (measured: 6 stiff steps)

    def replay(p):
        seen = []
        y = _grid_solve(stepper, _clustered_usa(p["P"]), p["y0"], grid, seen)
        assert np.array_equal(np.ravel(seen), np.ravel(modes))  # the same method on every step
        return float(np.sum(y * C))

    errors = _fd_check(replay, params, grads)
    assert max(errors.values()) <= RTOL, errors  # measured: 9e-9 to 5e-8


def test_auto_mixed_batch_gradients_are_each_trajectorys(monkeypatch):
    """A batch in which one trajectory (beta = 9) runs rodas4p while the other (beta = 4) is still
    with dopri5 (the mixed path: each group stepped on its own field, results put back in place):
    the gradients equal those of each trajectory solved alone, which never mixes, up to rounding
    that the stiff trajectory amplifies (measured relative differences: y0 1e-12, beta 6e-9, P
    2e-12)."""
    from riemattn.solvers.stiff import _rosenbrock_torch

    mixed = []
    inner = _rosenbrock_torch._mixed
    monkeypatch.setattr(_rosenbrock_torch, "_mixed", lambda *a: mixed.append(1) or inner(*a))
    rng = np.random.default_rng(1)
    y0 = project(np.array([1.0, 0.0, 0.0]) + 0.3 * rng.normal(size=(2, 4, 3)))
    C = torch.tensor(rng.normal(size=(4, 3)))
    betas, T, tol = np.array([4.0, 9.0]), 3.0, dict(rtol=1e-6, atol=1e-6)

    def grads(y, beta):
        q = _torch_params({"y0": y, "beta": beta, "P": np.eye(3)})
        field = ra.AttentionField(q["P"], beta=q["beta"], normalization="mean")
        sol = ra.integrate(field, q["y0"], (0.0, T), "auto", saveat=[T / 2, T], raise_on_failure=True, **tol)
        return torch.autograd.grad((sol.y[-1] * C).sum(), [q["y0"], q["beta"], q["P"]])

    batch = grads(y0, betas)
    assert len(mixed) >= 3  # measured 5 mixed steps
    alone = [grads(y0[k], betas[k]) for k in range(2)]
    for k in range(2):
        assert float((batch[0][k] - alone[k][0]).norm()) <= 1e-9 * float(alone[k][0].norm())
        assert abs(float(batch[1][k]) - float(alone[k][1])) <= 1e-7 * abs(float(alone[k][1]))
    P_alone = alone[0][2] + alone[1][2]
    assert float((batch[2] - P_alone).norm() / P_alone.norm()) <= 1e-9


def test_the_jacobians_dependence_on_the_parameters_is_differentiated(monkeypatch):
    """The discrete map of a Rosenbrock step depends on the parameters through J too: with J
    detached, the gradient misses that part and disagrees with the finite differences (measured
    7e-4 for P, against 1e-10 with J in the graph: test_gradients_match_finite_differences)."""
    from riemattn.solvers.stiff import _rosenbrock_torch

    jac = _rosenbrock_torch.lifted_jacobian_torch
    monkeypatch.setattr(_rosenbrock_torch, "lifted_jacobian_torch", lambda f, t, y: jac(f, t, y).detach())
    params = _problem(())
    tp = _torch_params(params)
    sol = ra.integrate(_field(tp), tp["y0"], (0.0, T), "rodas4p", project=True, **STIFF)
    grid = np.asarray(sol.t, dtype=float)
    (gP,) = torch.autograd.grad(misalignment(sol.y[-1]).sum(), [tp["P"]])
    err = _fd_check(lambda p: float(_observable("rodas4p", dict(params, **p), grid)), {"P": params["P"]},
                    {"P": gP.numpy()})
    assert err["P"] > 1e-5, err


# --- requires_grad inputs at documented entry points: no raw torch / NumPy errors -----------------
def test_requires_grad_inputs_are_accepted_and_checked():
    p = _torch_params(_problem((2,)))
    field = ra.AttentionField(p["P"], p["U"], W=p["W"], beta=p["beta"])
    assert field(0.0, p["y0"]).requires_grad
    assert field.attention(0.0, p["y0"]).requires_grad
    assert field.update(0.0, p["y0"]).requires_grad
    np_out = field(0.0, p["y0"].detach().numpy())  # NumPy tokens: detached values, a NumPy result
    assert isinstance(np_out, np.ndarray)
    np.testing.assert_allclose(np_out, field(0.0, p["y0"]).detach().numpy(), rtol=1e-12, atol=1e-14)
    assert "array(2,)" in repr(field) and field.P().shape == (2, 1, D, D)
    manifold = ra.Ellipsoid(p["W"])
    assert manifold.projection(p["y0"]).requires_grad
    assert ra.Sphere(D - 1).projection(p["y0"]).requires_grad
    for M in (manifold, ra.Sphere(D - 1)):  # checks answer NumPy booleans for tensors
        y = M.projection(p["y0"])
        assert M.is_tangent(M.to_tangent(p["y0"], y), y).all() and M.belongs(y).all()
    with pytest.raises(ValidationError, match="P must have shape"):
        ra.AttentionField(torch.ones(2, 3, requires_grad=True))
    with pytest.raises(ValidationError, match="P contains 1 NaN"):
        ra.AttentionField(torch.tensor([[1.0, float("nan")], [0.0, 1.0]], requires_grad=True))
    with pytest.raises(ValidationError, match="W must be symmetric"):
        ra.Ellipsoid(torch.tensor([[1.0, 0.5], [0.0, 1.0]], requires_grad=True))
    with pytest.raises(ValidationError, match="beta contains"):
        ra.AttentionField(np.eye(2), beta=torch.tensor([1.0, float("inf")], requires_grad=True))
    with pytest.raises(ValidationError, match=r"P\(t\) returned NaN"):
        ra.AttentionField(lambda t: p["P"] * (float("nan") if t > 0 else 1.0))(0.5, p["y0"])
    with pytest.raises(ValidationError, match="beta of shape"):
        ra.integrate(ra.AttentionField(p["P"], beta=p["beta"]), p["y0"][None].expand(3, 2, L, D)[:, 0],
                     (0, 1), "dopri5", project=True)
    with pytest.raises(ValidationError, match="K must have shape"):
        ra.TransformerLayer(p["P"], torch.ones(2, 2, requires_grad=True), p["P"], p["P"])


# --- gradient checkpointing --------------------------------------------------------------------
@pytest.mark.parametrize("stepper", ["rk4", "rkmk4"])
def test_checkpointed_solve_gives_the_plain_solve_and_its_gradient(stepper):
    """Fixed steps: the same steps grouped into segments; values and gradients equal to rounding."""
    params = _problem((2,))
    tp = _torch_params(params)
    plain = ra.integrate(_field(tp), tp["y0"], (0.0, T), stepper, dt=0.04, project=True)
    expected = torch.autograd.grad(misalignment(plain.y[-1]).sum(), list(tp.values()))
    sol = ra.integrate_checkpointed(_field(tp), tp["y0"], (0.0, T), stepper, dt=0.04, project=True)
    assert sol.y.shape == (6, 2, L, D) and sol.n_steps == plain.n_steps == 25  # 5 segments of 5
    assert sol.nfev == plain.nfev and sol.success
    torch.testing.assert_close(sol.y[-1], plain.y[-1], rtol=0, atol=1e-14)
    misalignment(sol.y[-1]).sum().backward()
    for (key, value), g in zip(tp.items(), expected):
        assert float((value.grad - g).norm() / g.norm()) < 1e-12, key


@pytest.mark.parametrize("stepper, tol", [("dopri5", ADAPTIVE), ("rodas4p", STIFF)], ids=["dopri5", "rodas4p"])
def test_checkpointed_adaptive_segments_match_unsegmented_autograd(stepper, tol):
    """Adaptive: each segment is its own adaptive solve; the checkpointed gradient equals the
    gradient of the same segmented solves kept in one graph. (rodas4p: the checkpoint's forward
    pass runs without grad mode, and its steps must be those of the recomputation.)"""
    params = _problem(())
    tp = _torch_params(params)
    y = tp["y0"]
    for a, b in zip(np.linspace(0, T, 4)[:-1], np.linspace(0, T, 4)[1:]):
        y = ra.integrate(_field(tp), y, (a, b), stepper, saveat=[a, b], project=a == 0, **tol).y[-1]
    expected = torch.autograd.grad(misalignment(y).sum(), list(tp.values()))
    sol = ra.integrate_checkpointed(_field(tp), tp["y0"], (0.0, T), stepper, segments=3, project=True,
                                    **tol)
    torch.testing.assert_close(sol.y[-1], y, rtol=0, atol=1e-14)
    misalignment(sol.y[-1]).sum().backward()
    for (key, value), g in zip(tp.items(), expected):
        assert float((value.grad - g).norm() / g.norm()) < 1e-12, key


def test_checkpointed_bad_inputs():
    from riemattn.errors import InputTypeError

    field = ra.AttentionField(np.eye(D))
    with pytest.raises(InputTypeError, match="torch tensor"):
        ra.integrate_checkpointed(field, project(np.ones((L, D))), (0, 1), dt=0.1)
    y0 = torch.tensor(project(np.ones((L, D))))
    with pytest.raises(ValidationError, match="dt is required"):
        ra.integrate_checkpointed(field, y0, (0, 1))
    with pytest.raises(ValidationError, match="t1 > t0"):
        ra.integrate_checkpointed(field, y0, (1, 0), dt=0.1)
    with pytest.raises(ValidationError, match="segments must be >= 1"):
        ra.integrate_checkpointed(field, y0, (0, 1), dt=0.1, segments=0)


# --- the gradient-flow functions on tensors ----------------------------------------------------
def test_gradient_flow_functions_take_tensors():
    """Theorem 3.1 (ARXIV): grad_{g_P} V_P = -Y_P, with the gradient from torch.autograd; the
    energy E_beta in torch differentiates to its closed-form gradient (1/n^2) sum_j e^{beta <x_i,x_j>} x_j."""
    from riemattn import gradient_flow as gf

    rng = np.random.default_rng(11)
    A = rng.normal(size=(D, D))
    P = A @ A.T + np.eye(D)
    x = ra.Ellipsoid(P).projection(rng.normal(size=(2, 4, D)))
    xt = torch.tensor(x)
    G = gf.riemannian_gradient(lambda z: gf.potential(z, P), xt, P)
    assert torch.is_tensor(G)
    np.testing.assert_allclose(G.numpy(), -ra.AttentionField(P, W=P)(0.0, x), rtol=0, atol=1e-13)
    xg = xt.clone().requires_grad_()
    (dE,) = torch.autograd.grad(gf.energy(xg, 0.7).sum(), xg)
    n = x.shape[-2]
    expected = np.exp(0.7 * x @ np.swapaxes(x, -1, -2)) @ x / n**2
    np.testing.assert_allclose(dE.numpy(), expected, rtol=1e-13, atol=0)
    for fn in (gf.normalizers, gf.potential):
        np.testing.assert_allclose(fn(xt, P).numpy(), fn(x, P), rtol=1e-13)
    np.testing.assert_allclose(gf.energy_weights(xt, 0.7).numpy(), gf.energy_weights(x, 0.7), rtol=1e-13)
    with pytest.raises(ValidationError, match="write f with torch operations"):
        gf.riemannian_gradient(lambda z: np.sum(z), xt, P)


# --- the gallery example, at a small size ------------------------------------------------------------
def test_gallery_example_learns_P_that_delays_collapse():
    """examples/plot_learn_attention.py with 3 instead of 10 Adam steps: the objective increases
    at every step and the collapse time (measured by a separate NumPy solve) moves later."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "examples" / "plot_learn_attention.py"
    src = path.read_text()
    assert "ITERATIONS = 10\n" in src
    ns = {"__name__": "__main__"}
    exec(compile(src.replace("ITERATIONS = 10\n", "ITERATIONS = 3\n"), str(path), "exec"), ns)
    plt.close(ns["fig"])
    assert np.all(np.diff(ns["objective"]) > 0)
    assert np.isfinite(ns["t0"]) and ns["t1"] > ns["t0"] + 0.2


def test_hips_autograd_boxes_get_a_clear_error():
    autograd = pytest.importorskip("autograd")
    from riemattn.errors import InputTypeError

    y0 = project(np.random.default_rng(0).normal(size=(L, D)))

    def f(P):
        return autograd.numpy.sum(ra.integrate(ra.AttentionField(P), y0, (0, 1), dt=0.5).y[-1])

    with pytest.raises(InputTypeError, match="differentiate with PyTorch tensors"):
        autograd.grad(f)(np.eye(D))


def test_event_states_are_differentiable_at_fixed_event_time():
    """Through ``events=``, the located state carries gradients; the event time, like the step
    sizes, is a constant of the differentiation (docs/autodiff.md): d y(t*) / d phi at fixed t*."""
    from riemattn.solvers.events import Event

    A = np.array([[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])  # rotation: y(t) at angle t + phi
    field = ra.LinearField(A, ra.Sphere(2))
    phi = torch.tensor(0.3, dtype=torch.float64, requires_grad=True)
    y0 = torch.stack([torch.cos(phi), torch.sin(phi), torch.zeros((), dtype=torch.float64)])[None, None, :]
    sol = ra.integrate(field, y0, (0.0, 7.0), "dop853", rtol=1e-12, atol=1e-12,
                       events=Event(lambda t, y: y[..., 0, 0] - 0.5, terminal=True), event_tol=1e-12)
    t_star = float(sol.events.t_stop[0])
    assert abs(t_star - (np.pi / 3 - 0.3)) < 1e-9
    y_event = sol.events.y[0, 0, 0]                                    # (x, y, z) at the event
    grad, = torch.autograd.grad(y_event[1], phi)
    assert abs(float(grad) - np.cos(t_star + 0.3)) < 1e-8             # d sin(t* + phi) / d phi


@pytest.mark.parametrize("name", ["rodas4p", "auto"])
def test_stiff_steppers_on_a_users_torch_field_with_a_closed_over_parameter(name):
    """A user's VectorField written in torch, closing over a parameter that requires grad (not a
    field parameter riemattn can see): the stiff steppers step it with torch (they used to hand it
    NumPy arrays and fail), and the gradient matches dopri5's (an independent stepper) at tight
    tolerance."""
    S = ra.Sphere(2)
    A = torch.tensor([[0.0, 1.0, 0.0], [-1.0, 0.0, 0.0], [0.0, 0.0, 0.0]], dtype=torch.float64)
    y0 = torch.tensor(S.projection(np.random.default_rng(0).normal(size=(4, 3))))

    def grad_k(stepper):
        k = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)

        def fn(t, y):
            v = k * (y @ A.T) + torch.sin(y)
            return v - (v * y).sum(-1, keepdim=True) * y

        sol = ra.integrate(ra.VectorField(fn, S), y0, (0.0, 1.0), stepper, rtol=1e-10, atol=1e-10, saveat=[1.0])
        return float(torch.autograd.grad(sol.y[-1].sum(), k)[0])

    ref = grad_k("dop853")
    assert abs(grad_k(name) - ref) <= 1e-6 * abs(ref)
