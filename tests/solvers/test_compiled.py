"""The compiled engine (issue 37): the same algorithms as the NumPy engine, run in numba loops.

The two engines must take the same steps (per-trajectory accepted and rejected counts, statuses)
and agree to rounding. Rounding bound: each step of either engine rounds differently (the
summation order of the field's reductions, the LU solve against NumPy's explicit inverse for the
Rosenbrock steppers), a few ulp per operation; the fields here are contractive or mildly
expanding over the short horizons used, so the difference after n steps stays below
``ROUNDING * n`` with ROUNDING = 1e3 eps (measured: at most 2e-15 after 60 steps; the margin
covers the LU solve of a (l d)^2 = 225-entry matrix, conditioning ~ 1e2).

Adaptive step sizes agree to less: the error estimate is a difference of O(1) stage values that
is about rtol in size, so its rounding is about eps / rtol relative, and each step size inherits
it (err^(-1/k)), and the times add the steps up. Step times of the two engines therefore agree
to ``100 eps / rtol`` relative (measured: 2e-6 at rtol = 1e-10, 7e-9 at rtol = 1e-6, after fewer
than 10 steps), and states saved at step times to that
times |F| <= 1 more; the step sequences (counts, accept/reject) are the same.
"""

from __future__ import annotations

import numpy as np
import pytest

import riemattn as ra
from riemattn.analysis import events as rae
from riemattn.errors import UnsupportedByEngine, ValidationError

EPS = np.finfo(float).eps
ROUNDING = 1e3 * EPS
FIXED = ("layer", "euler", "heun", "rk4")
ADAPTIVE = ("dopri5", "dop853", "rodas4", "rodas4p", "auto")


def tokens(rng, batch, l, d):
    y = rng.standard_normal(tuple(batch) + (l, d))
    return y / np.linalg.norm(y, axis=-1, keepdims=True)


@pytest.fixture(scope="module")
def problem():
    rng = np.random.default_rng(37)
    d, l = 3, 5
    P = rng.standard_normal((d, d))
    field = ra.AttentionField(P, beta=np.array([0.5, 1.0, 2.0]))
    return field, tokens(rng, (3,), l, d)


def both(field, y0, t_span, stepper, **kw):
    a = ra.integrate(field, y0, t_span, stepper, engine="numpy", **kw)
    b = ra.integrate(field, y0, t_span, stepper, engine="compiled", **kw)
    assert (a.engine, b.engine) == ("numpy", "compiled")
    return a, b


def assert_same_steps(a, b, nfev=True, rtol=None):
    """Same statuses and step counts; times and states equal to rounding (``rtol``: the
    tolerance of an adaptive solve whose step times are compared, see the module docstring)."""
    pa, pb = a.per_trajectory, b.per_trajectory
    np.testing.assert_array_equal(pb.status, pa.status)
    np.testing.assert_array_equal(pb.n_steps, pa.n_steps)
    np.testing.assert_array_equal(pb.n_rejected, pa.n_rejected)
    if nfev:
        np.testing.assert_array_equal(pb.nfev, pa.nfev)
    tol_t = 0.0 if rtol is None else 100 * EPS / rtol
    np.testing.assert_allclose(b.t, a.t, rtol=tol_t, atol=0)
    n = max(1, int(pa.n_steps.max()) + int(pa.n_rejected.max()))
    np.testing.assert_allclose(b.y, a.y, rtol=0, atol=ROUNDING * n + tol_t * np.abs(a.t).max())
    np.testing.assert_allclose(pb.t_fail, pa.t_fail, rtol=tol_t, atol=0)


@pytest.mark.parametrize("stepper", FIXED)
def test_fixed_steppers_agree(problem, stepper):
    field, y0 = problem
    a, b = both(field, y0, (0.0, 2.0), stepper, dt=0.1)
    assert_same_steps(a, b)
    assert b.y.shape == (21, 3, 5, 3)


@pytest.mark.parametrize("stepper", ADAPTIVE)
def test_adaptive_steppers_agree(problem, stepper):
    field, y0 = problem
    a, b = both(field, y0, (0.0, 3.0), stepper, rtol=1e-7, atol=1e-9, saveat=np.linspace(0, 3, 7))
    # (saveat: values from the dense output between steps, which agree to rounding)
    # DOP853's dense output costs 3 evaluations; NumPy counts them for every row of the batch when
    # one row needs it (per trajectory, alone, the counts agree: test_single_trajectory_...)
    assert_same_steps(a, b, nfev=stepper != "dop853")
    assert (b.per_trajectory.nfev <= a.per_trajectory.nfev).all()
    assert a.per_trajectory.n_steps.min() >= 5


def test_single_trajectory_saves_every_step(problem):
    _, y0 = problem
    field = ra.AttentionField(np.eye(3) + 0.3, beta=1.5)
    for stepper in ("dopri5", "rodas4"):
        a, b = both(field, y0[1], (0.0, 2.0), stepper, rtol=1e-6, atol=1e-9)
        assert_same_steps(a, b, rtol=1e-6)
        assert len(b.t) == b.n_steps + 1
    a, b = both(field, y0[2], (0.0, 2.0), "dop853", rtol=1e-9, atol=1e-9, saveat=[0.3, 1.1, 2.0])
    assert_same_steps(a, b)


def test_auto_switches_the_same_way():
    """GLPR's USA at beta = 9 (stiff once the tokens gather; issue 28's case) next to beta = 1:
    auto's per-trajectory switches to RODAS4P and back happen on the same steps in both engines."""
    rng = np.random.default_rng(5)
    y0 = tokens(rng, (2,), 6, 3)
    field = ra.AttentionField(np.eye(3), normalization="mean", beta=np.array([1.0, 9.0]))
    a, b = both(field, y0, (0.0, 20.0), "auto", rtol=1e-8, atol=1e-10)
    # nfev: NumPy counts a mixed batch's evaluations of both methods on every row
    assert_same_steps(a, b, nfev=False, rtol=1e-8)
    stiff = ra.usa(9.0, 3)
    # (the engines agree, see above; the explicit reference takes ~25 000 steps: compiled)
    rodas = ra.integrate(stiff, y0[1], (0.0, 20.0), "rodas4p", rtol=1e-8, atol=1e-10, engine="compiled")
    dopri = ra.integrate(stiff, y0[1], (0.0, 20.0), "dopri5", rtol=1e-8, atol=1e-10, engine="compiled")
    assert a.per_trajectory.n_steps[1] not in (rodas.n_steps, dopri.n_steps)  # it did switch
    assert a.per_trajectory.n_steps[1] < dopri.n_steps / 10


def test_max_steps_and_status(problem):
    field, y0 = problem
    a, b = both(field, y0, (0.0, 3.0), "dopri5", rtol=1e-10, atol=1e-12, max_steps=7)
    assert_same_steps(a, b, rtol=1e-10)
    assert (b.per_trajectory.status == -1).all() and not b.success
    assert b.message.split("(")[0] == a.message.split("(")[0]
    a, b = both(field, y0, (0.0, 3.0), "rk4", dt=0.1, max_steps=12)
    assert_same_steps(a, b)
    assert (b.per_trajectory.status == -1).all()
    np.testing.assert_array_equal(b.per_trajectory.t_fail, a.per_trajectory.t_fail)


def test_saveat_fixed_and_first_step(problem):
    field, y0 = problem
    save = np.array([0.25, 0.5, 1.7, 2.0])
    a, b = both(field, y0, (0.0, 2.0), "heun", dt=0.3, saveat=save)
    assert_same_steps(a, b)
    a, b = both(field, y0, (0.0, 2.0), "dop853", rtol=1e-9, atol=1e-12, first_step=0.01, saveat=save)
    assert_same_steps(a, b, nfev=False)  # DOP853's dense output: see test_adaptive_steppers_agree


@pytest.mark.parametrize("stepper, kw", [("rk4", dict(dt=0.05)), ("dopri5", dict(rtol=1e-8, atol=1e-10)),
                                         ("dop853", dict(rtol=1e-8, atol=1e-10)),
                                         ("rodas4", dict(rtol=1e-8, atol=1e-10))])
def test_events_agree(problem, stepper, kw):
    field, y0 = problem
    events = [rae.consensus(0.05), rae.leave_hemisphere(np.array([0.0, 0.0, 1.0])),
              rae.lyapunov_level(np.array([1.0, 0.0, 0.0]), 1.5),
              *rae.cluster_merges(0.3, [3, 2])]
    tol = 1e-10
    a, b = both(field, y0, (0.0, 30.0), stepper, events=events, event_tol=tol, **kw)
    assert_same_steps(a, b, nfev=False)  # nfev: NumPy counts the batch's root finding on every row
    ea, eb = a.events, b.events
    np.testing.assert_array_equal(eb.count, ea.count)
    np.testing.assert_array_equal(eb.which, ea.which)
    # each engine reports the end, after the crossing, of a bracket at most tol long around the
    # dense output's zero: the two times differ by at most tol (the tokens by |F| tol, |F| <= 1)
    # (plus the shift of the zero between the two dense outputs, whose steps differ by rounding:
    # measured 2e-12; allowed: another tol)
    np.testing.assert_allclose(eb.t, ea.t, rtol=0, atol=2 * tol)
    np.testing.assert_allclose(eb.y, ea.y, rtol=0, atol=4 * tol)
    np.testing.assert_allclose(eb.t_stop, ea.t_stop, rtol=0, atol=2 * tol)
    assert (eb.count > 0).any()


def test_thread_count_does_not_change_results(problem):
    numba = pytest.importorskip("numba")
    field, y0 = problem
    y0 = np.concatenate([y0] * 3)
    field = ra.AttentionField(field.P()[0] / field.beta[0], beta=np.linspace(0.5, 3.0, len(y0)))
    before = numba.get_num_threads()
    out = []
    try:
        for n in (1, min(2, numba.config.NUMBA_NUM_THREADS)):
            numba.set_num_threads(n)
            out.append(ra.integrate(field, y0, (0.0, 3.0), "dopri5", rtol=1e-8, atol=1e-10, engine="compiled"))
    finally:
        numba.set_num_threads(before)
    np.testing.assert_array_equal(out[0].y, out[1].y)  # bitwise: each row's arithmetic is its own
    np.testing.assert_array_equal(out[0].per_trajectory.nfev, out[1].per_trajectory.nfev)


def test_unsupported_calls_name_what(problem):
    field, y0 = problem
    M = ra.Sphere(2)

    def flow(t, y):
        return M.to_tangent(np.roll(y, 1, axis=-1), y)

    cases = [
        (dict(field=ra.dynamics.fields.VectorField(flow, M)), "VectorField"),
        (dict(save_fn=lambda t, y: y[..., 0, 0]), "save_fn"),
        (dict(events=[ra.solvers.events.Event(lambda t, y: y[:, 0, 0])]), "events without a compiled form"),
        (dict(stepper="rkmk4"), "rkmk4"),
        (dict(progress=True), "progress"),
        (dict(field=ra.AttentionField(lambda t: np.cos(t) * np.eye(3))), "callable P"),
    ]
    for kw, what in cases:
        args = dict(field=field, stepper="rk4", dt=0.1)
        args.update(kw)
        f, st = args.pop("field"), args.pop("stepper")
        with pytest.raises(UnsupportedByEngine, match=what):
            ra.integrate(f, y0, (0.0, 1.0), st, engine="compiled", **args)
        sol = ra.integrate(f, y0, (0.0, 1.0), st, engine="auto", **args)
        assert sol.engine == "numpy"
    torch = pytest.importorskip("torch")
    with pytest.raises(UnsupportedByEngine, match="torch tensors"):
        ra.integrate(field, torch.as_tensor(y0), (0.0, 1.0), "rk4", dt=0.1, engine="compiled")
    with pytest.raises(UnsupportedByEngine, match="dense_output"):
        ra.integrate(field, y0, (0.0, 1.0), "dopri5", dense_output=True, engine="compiled")
    with pytest.raises(ValidationError, match="engine must be one of"):
        ra.integrate(field, y0, (0.0, 1.0), "rk4", dt=0.1, engine="numba")


@pytest.mark.parametrize("stepper", ["rk4", "dopri5"])
def test_edges(problem, stepper):
    _, y0 = problem
    field = ra.AttentionField(np.eye(3) + 0.3, beta=1.5)
    kw = dict(dt=0.1) if stepper == "rk4" else dict(rtol=1e-6, atol=1e-9)
    empty = ra.integrate(field, y0[:0], (0.0, 1.0), stepper, engine="compiled", **kw)
    assert empty.y.shape[1:] == (0, 5, 3) and empty.success  # nothing ran (engine "numpy")
    long = dict(dt=10.0) if stepper == "rk4" else dict(rtol=1e-6, atol=1e-9, first_step=10.0)
    a, b = both(field, y0, (0.0, 1.0), stepper, **long)  # a step longer than the horizon
    assert_same_steps(a, b)


@pytest.mark.parametrize("stepper", FIXED + ADAPTIVE)
def test_zero_length_span_returns_the_initial_state(problem, stepper):
    """t_span = (t0, t0), as on the NumPy engine (issue 34 item 8): the initial state itself, no
    step, no evaluation, whatever the stepper, batch or saveat."""
    field, y0 = problem
    kw = dict(rtol=1e-6, atol=1e-9) if stepper in ADAPTIVE else dict(dt=0.1)
    single = ra.AttentionField(np.eye(3) + 0.3, beta=1.5)
    for f, y, saveat in ((field, y0, None), (field, y0, [0.5]), (single, y0[1], None)):
        a, b = both(f, y, (0.5, 0.5), stepper, saveat=saveat, **kw)
        np.testing.assert_array_equal(b.t, a.t)
        np.testing.assert_array_equal(b.y, a.y)
        np.testing.assert_array_equal(b.y, y[None])  # exactly y0 (not a retracted step of size 0)
        assert b.nfev == 0 and b.n_steps == 0 and (b.per_trajectory.nfev == 0).all()
        assert_same_steps(a, b)
        assert b.success and b.message == a.message


@pytest.mark.parametrize("stepper", ["rk4", "layer"])
def test_fixed_steps_save_as_numpy_around_terminal_events(problem, stepper):
    """The saving rule of the fixed-step loop (docs/events.md "Saved values"): no saveat -- a
    single trajectory saves every step, the last one at the event (t_stop, y_stop); a batch the
    grid up to the last time some trajectory runs, NaN after each one's stop; saveat -- NaN after
    the stop. (The compiled engine used to save the next grid time, and frozen states.)"""
    field, y0 = problem
    stop = [rae.consensus(0.05)]  # terminal: rows 0 and 3 stop (at 4.78 and 4.25), rows 1, 2 run to t1
    rows = ra.AttentionField(field.P()[0] / field.beta[0], beta=np.array([0.5, 1.0, 2.0, 0.4]))
    y4 = y0[[0, 1, 2, 0]]
    single = ra.AttentionField(field.P()[0] / field.beta[0], beta=0.5)  # row 0 alone
    cases = ((single, y0[0], None), (rows, y4, None), (rows, y4, np.linspace(0.0, 30.0, 13)),
             (rows, y4[[0, 3]], None))  # (a batch that stops before t1: its grid ends at 4.7)
    for f, y, saveat in cases:
        if f is rows:
            f = ra.AttentionField(f.P()[0] / f.beta[0], beta=f.beta[[0, 1, 2, 3] if len(y) == 4 else [0, 3]])
        a, b = both(f, y, (0.0, 30.0), stepper, dt=0.1, events=stop, event_tol=1e-10, saveat=saveat)
        pa, pb = a.per_trajectory, b.per_trajectory
        np.testing.assert_array_equal(pb.status, pa.status)
        np.testing.assert_array_equal(pb.n_steps, pa.n_steps)
        # the times and states of the stops: located to event_tol by each engine (test_events_agree)
        np.testing.assert_allclose(b.t, a.t, rtol=0, atol=2e-10)
        np.testing.assert_array_equal(np.isnan(b.y), np.isnan(a.y))
        np.testing.assert_allclose(b.y, a.y, rtol=0, atol=4e-10)
        assert (b.per_trajectory.status == 2).any() and np.isnan(b.y).any() == (y.ndim == 3)
    assert b.t[-1] < 5.0 and len(a.t) == len(b.t)


def test_environment_variable_makes_auto_compiled(problem, monkeypatch):
    field, y0 = problem
    monkeypatch.setenv("RIEMATTN_ENGINE", "compiled")
    assert ra.integrate(field, y0, (0.0, 1.0), "rk4", dt=0.1).engine == "compiled"
    monkeypatch.setenv("RIEMATTN_ENGINE", "numpy")
    assert ra.integrate(field, y0, (0.0, 1.0), "rk4", dt=0.1).engine == "numpy"


def test_auto_uses_the_compiled_engine_only_once_compiled(problem, monkeypatch, tmp_path):
    """A fresh cache (nothing compiled): "auto" runs NumPy and compiles nothing; after the cache
    holds the loops (another process compiled them), "auto" runs them."""
    import subprocess
    import sys

    monkeypatch.delenv("RIEMATTN_ENGINE", raising=False)
    code = ("import numpy as np, riemattn as ra\n"
            "f = ra.AttentionField(np.eye(3), beta=2.0)\n"
            "y = f.manifold.projection(np.random.default_rng(0).normal(size=(2, 4, 3)))\n"
            "print(ra.integrate(f, y, (0.0, 1.0), 'rk4', dt=0.1).engine)\n")
    env = dict(__import__("os").environ, NUMBA_CACHE_DIR=str(tmp_path))
    env.pop("RIEMATTN_ENGINE", None)
    first = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert first.stdout.split() == ["numpy"], first.stderr
    assert not any(tmp_path.rglob("*.nbi"))  # nothing was compiled
    field, y0 = problem
    ra.integrate(field, y0, (0.0, 1.0), "rk4", dt=0.1, engine="compiled")  # compiled (or loaded) here
    assert ra.integrate(field, y0, (0.0, 1.0), "rk4", dt=0.1).engine == "compiled"


@pytest.mark.parametrize("placement", ["post", "pre", "peri", "ngpt", "mix"])
def test_layer_step_of_every_placement_agrees(placement):
    """The "layer" step runs each placement's own block (LayerNormField.block): Mix-LN keeps the
    radii before its switch (r_i N_W(theta_i + h A_i)) and is Pre-LN after it."""
    rng = np.random.default_rng(12)
    kw = {"switch": 0.5} if placement == "mix" else {"alpha": 0.7} if placement == "ngpt" else {}
    model = ra.layernorm(ra.AttentionField(rng.standard_normal((3, 3)), beta=1.5), placement, **kw)
    y0 = tokens(rng, (2,), 5, 3) * (rng.uniform(0.5, 2.0, (2, 5, 1)) if placement in ("pre", "peri", "mix") else 1.0)
    a, b = both(model, y0, (0.0, 1.0), "layer", dt=0.1)
    assert_same_steps(a, b)
    if placement == "mix":  # the 5 blocks before the switch keep the radii (a few roundings each)
        np.testing.assert_allclose(np.linalg.norm(b.y[5], axis=-1), np.linalg.norm(y0, axis=-1), rtol=5 * 8 * EPS)


def test_auto_keeps_large_problems_on_the_numpy_engine(monkeypatch):
    """The size rule of "auto" (docs/performance.md, "Which engine when"): explicit steppers run
    compiled while B h (l d (l + d) + 2 l^2) <= 1e5 (4e5 with time-dependent weights), or for
    attention with d >= 8 while one trajectory's work is at most 3e5 (6e5 for a batch), or when the
    batch's attention matrices hold at least 2e6 numbers, or from 256 tokens (the streamed kernel);
    Rosenbrock steppers while l d <= 400; engine="compiled" and
    RIEMATTN_ENGINE=compiled ignore it."""
    from riemattn.dynamics.kernels import pack_field
    from riemattn.dynamics.schedules import TimeVaryingHeads
    from riemattn.solvers.compiled import _dispatch

    monkeypatch.delenv("RIEMATTN_ENGINE", raising=False)
    rng = np.random.default_rng(5)
    field = ra.AttentionField(np.eye(3), beta=2.0)
    small, big = tokens(rng, (4,), 6, 3), tokens(rng, (200,), 10, 3)  # work 4 * 234, 200 * 590
    assert _dispatch.work(pack_field(field, small.shape), 4) == 4 * (6 * 3 * 9 + 2 * 36)
    ra.integrate(field, small, (0.0, 0.5), "rk4", dt=0.1, engine="compiled")  # compiled (or loaded) here
    ra.integrate(field, small, (0.0, 0.5), "rodas4p", engine="compiled")
    assert ra.integrate(field, small, (0.0, 0.5), "rk4", dt=0.1).engine == "compiled"
    assert ra.integrate(field, big, (0.0, 0.5), "rk4", dt=0.1).engine == "numpy"
    assert ra.integrate(field, big, (0.0, 0.5), "rk4", dt=0.1, engine="compiled").engine == "compiled"
    assert ra.integrate(field, big, (0.0, 0.5), "rodas4p").engine == "compiled"  # l d = 30 <= 400
    wide = tokens(rng, (), 30, 16)  # l d = 480: NumPy's LAPACK for the Rosenbrock solves
    field16 = ra.AttentionField(np.eye(16), beta=2.0)
    assert ra.integrate(field16, wide, (0.0, 0.1), "rodas4p", max_steps=3, raise_on_failure=False).engine == "numpy"
    timed = ra.AttentionField(TimeVaryingHeads(np.eye(3)[None], np.eye(3)[None, None], [1.0], [0.0]))
    assert ra.integrate(timed, big, (0.0, 0.5), "rk4", dt=0.1).engine == "compiled"  # 1.2e5 <= 4e5
    # work up to 1e5 (here 100 * 590); one trajectory of 200 x 2 (w = 1.6e5): NumPy
    rk4 = ra.STEPPERS["rk4"]()
    assert _dispatch.pays(pack_field(field, (100, 10, 3)), rk4, 100)
    f2 = ra.AttentionField(np.eye(2), beta=2.0)
    assert not _dispatch.pays(pack_field(f2, (200, 2)), rk4, 1)
    # d >= 8: the vectorised kernels, while one trajectory's work is at most 6e5
    f8, f64 = ra.AttentionField(np.eye(8), beta=2.0), ra.AttentionField(np.eye(64), beta=2.0)
    wide8 = tokens(rng, (50,), 32, 8)  # 50 * (256 * 40 + 2048) = 6.1e5 > 1e5, w = 12 288
    assert _dispatch.pays(pack_field(f8, wide8.shape), rk4, 50)
    assert ra.integrate(f8, wide8, (0.0, 0.2), "rk4", dt=0.1).engine == "compiled"
    assert _dispatch.pays(pack_field(f64, (10, 64, 64)), rk4, 10)  # w = 5.3e5 <= 6e5
    assert _dispatch.pays(pack_field(f64, (64, 64)), rk4, 1)  # one trajectory too (measured: docs)
    assert not _dispatch.pays(pack_field(f64, (2, 80, 64)), rk4, 2)  # w = 7.5e5
    assert not _dispatch.pays(pack_field(f64, (80, 64)), rk4, 1)
    # a batch's attention matrices beyond 2e6 numbers: compiled; below, or one trajectory: NumPy
    assert _dispatch.pays(pack_field(f2, (100, 200, 2)), rk4, 100)  # 100 * 200^2 = 4e6
    assert not _dispatch.pays(pack_field(f2, (10, 200, 2)), rk4, 10)  # 4e5
    # from STREAM_MIN_TOKENS tokens the streamed kernel (riemattn.solvers.compiled._stream): compiled
    assert _dispatch.pays(pack_field(f2, (2000, 2)), rk4, 1)
    assert not _dispatch.pays(pack_field(ra.AttentionField(np.eye(2), beta=2.0), (255, 2)), rk4, 1)
    monkeypatch.setenv("RIEMATTN_ENGINE", "compiled")
    assert ra.integrate(field, big, (0.0, 0.5), "rk4", dt=0.1).engine == "compiled"


@pytest.mark.parametrize("stepper", ["dopri5", "rodas4p", "auto", "rk4"])
def test_per_trajectory_weights_agree(stepper):
    """P of shape (B, 1, d, d), one single-head matrix per trajectory (docs/index.md "Per-trajectory
    weights"), also broadcast against a (2, B) batch: the kernels pack one row of weights per
    trajectory; the engines take the same steps. The NumPy engine compacts the batch as rows
    finish (``take``); the compiled engine runs each row on its own, so its results for a row do
    not depend on the batch around it (bitwise equal to the row run alone)."""
    rng = np.random.default_rng(36)
    B, l, d = 4, 5, 3
    P = rng.standard_normal((B, 1, d, d)) * np.array([0.3, 1.0, 2.0, 3.0])[:, None, None, None]
    field = ra.AttentionField(P, beta=1.5)
    y0 = tokens(rng, (2, B), l, d)
    kw = dict(dt=0.1) if stepper == "rk4" else dict(rtol=1e-7, atol=1e-9)
    save = np.linspace(0.0, 3.0, 4)
    for y in (y0[0], y0):
        a, b = both(field, y, (0.0, 3.0), stepper, saveat=save, **kw)
        assert_same_steps(a, b, nfev=stepper != "auto")  # (auto: NumPy counts both groups' evaluations)
        assert len(set(b.per_trajectory.n_steps.ravel().tolist())) > 1 or stepper == "rk4"
    for k in (0, 3):  # row k of the (2, B) batch alone, with its own P
        alone = ra.integrate(ra.AttentionField(P[k, 0], beta=1.5), y0[1, k], (0.0, 3.0), stepper, saveat=save,
                             engine="compiled", **kw)
        np.testing.assert_array_equal(alone.y, b.y[:, 1, k])
        assert alone.per_trajectory.n_steps == b.per_trajectory.n_steps[1, k]


def test_stiff_plateaus_are_crossed_as_on_the_numpy_engine():
    """tests/solvers/test_stiff_plateaus.py's configuration (5 particles, dynamic-metastability paper) with
    SA at beta = 1000 (the compiled kernels have no rescaled USA yet): RODAS4P and auto evaluate the
    field in the difference form on the compiled engine too, so the sphere crosses the plateaus in
    as few steps as the angle equations (without it: > 5 000, max_steps). The step counts are not
    compared with the NumPy engine's: on this problem a 1e-16 change of the initial angles
    changes either engine's count by up to ~10 (measured); the merge times agree to the plateaus'
    conditioning (dT / T ~ beta sin(delta) d(delta), see test_stiff_plateaus: bound 5e-6)."""
    from riemattn.analysis.events import cluster_merges
    from riemattn.dynamics.circle import CircleField, to_points

    th0 = 0.5 * np.array([0.0, 0.5, 2.0, 4.0, 7.0]) * np.log(2000.0) / np.sqrt(2000.0)
    kw = dict(rtol=1e-8, atol=1e-10, max_steps=5000)
    angles = ra.integrate(CircleField(1000.0, "sa"), th0[:, None], (0.0, 1e13), "rodas4p", **kw)
    field = ra.AttentionField(1000.0 * np.eye(2), normalization="softmax")
    for stepper in ("rodas4p", "auto"):
        a, b = both(field, to_points(th0), (0.0, 1e13), stepper, events=cluster_merges(0.01, [4, 3, 2]),
                    event_tol=1e-8, **kw)
        assert b.success and b.n_steps <= 1.5 * angles.n_steps, (stepper, b.n_steps, angles.n_steps)
        assert b.events.count == 3
        np.testing.assert_allclose(b.events.t, a.events.t, rtol=5e-6)


def test_steps_beyond_the_precision_of_the_solve_are_rejected():
    """h gamma eps |J|_inf > SOLVE_LIMIT: the step is rejected (error inf) on both engines, the same
    attempts (a step of twice the limit, then of FACMIN times it, accepted); before, the compiled
    engine took it (error 0)."""
    from riemattn.dynamics.circle import to_points
    from riemattn.solvers.rosenbrock import SOLVE_LIMIT, ProjectedRodas4P

    y = to_points(np.array([0.0708731, 0.0708731, 0.0708731, 0.4673101, 0.4673101]))
    field = ra.AttentionField(1000.0 * np.eye(2), normalization="softmax")
    st = ProjectedRodas4P()
    J = st.step(field, 0.0, y, 1.0).stages[2]
    h_max = SOLVE_LIMIT / (EPS * st.tableau.gamma * np.max(np.sum(np.abs(J), -1)))
    a, b = both(field, y, (0.0, 4 * h_max), "rodas4p", first_step=2 * h_max, max_steps=1, rtol=1e-8, atol=1e-10)
    assert (a.n_rejected, a.n_steps) == (1, 0)
    assert_same_steps(a, b)
    a, b = both(field, y, (0.0, 4 * h_max), "rodas4p", first_step=2 * h_max, max_steps=2, rtol=1e-8, atol=1e-10)
    assert (a.n_rejected, a.n_steps) == (1, 1)
    assert_same_steps(a, b, rtol=1e-8)
