"""Ensembles in vector lanes (riemattn.solvers.compiled._lanes, dynamics.kernels._kernel_lanes).

The lane path is an optimisation with no numerical freedom: for every form it covers, each lane
must hold the bits the per-trajectory kernel and loop compute for its trajectory. The reference
is therefore that code (itself checked against the NumPy engine and independent solutions in
test_compiled.py / test_output_modes.py), compared with ``array_equal``, no tolerance.
"""

from __future__ import annotations

import numpy as np
import pytest

import riemattn as ra
from riemattn.analysis import events as rae
from riemattn.dynamics import kernels as kk
from riemattn.dynamics.kernels._kernel_lanes import lanes_rhs, lanes_supported, lanes_work
from riemattn.dynamics.kernels._kernel_simd import LANES
from riemattn.dynamics.schedules import PiecewiseConstantHeads, TimeVaryingHeads
from riemattn.solvers.compiled import _engine, _tables
from riemattn.solvers.compiled._threads import threads

from _subprocess import interrupt_after_go


def _tv(h, d, rng):
    """Sines heads: M(t) = B + sum_k A_k sin(omega_k t + phi_k)."""
    return TimeVaryingHeads(rng.normal(size=(h, d, d)) / d, rng.normal(size=(3, h, d, d)) / d,
                            rng.uniform(0.5, 3, 3), rng.uniform(0, 6, 3))


def _steps(h, d, rng):
    return PiecewiseConstantHeads([0.0, 0.7, 1.9], rng.normal(size=(3, h, d, d)) / d)


#: (name, field factory (rng, B) -> field, l, d): every kind of P source and head layout the lane
#: kernel covers, "paper" and "softmax" rows, shared and per-trajectory data
FORMS = [
    ("const-1-head-paper", lambda rng, B: ra.AttentionField(rng.normal(size=(4, 4)) / 2, beta=1.5), 8, 4),
    ("const-2-heads-softmax", lambda rng, B: ra.AttentionField(rng.normal(size=(2, 3, 3)), normalization="softmax"),
     10, 3),
    ("scalar-P", lambda rng, B: ra.sa(2.0, 3), 6, 3),
    ("sines-2-heads", lambda rng, B: ra.AttentionField(_tv(2, 3, rng)), 10, 3),
    ("steps", lambda rng, B: ra.AttentionField(_steps(1, 3, rng), beta=2.0), 5, 3),
    ("per-trajectory-P", lambda rng, B: ra.AttentionField(rng.normal(size=(B, 1, 3, 3))), 4, 3),
    ("one-token", lambda rng, B: ra.AttentionField(np.eye(3)), 1, 3),
    ("short-rows", lambda rng, B: ra.AttentionField(np.eye(3), beta=3.0), 3, 3),  # l^2 < 16: math.exp only
]


def _tokens(rng, shape):
    y = rng.normal(size=shape)
    return y / np.linalg.norm(y, axis=-1, keepdims=True)


def _eligible(field, shape):
    return lanes_supported(kk.pack_field(field, shape).ints)


@pytest.mark.parametrize("odd", [True, False], ids=["nan-and-far-lanes", "plain"])
@pytest.mark.parametrize("name,make,l,d", FORMS, ids=[f[0] for f in FORMS])
def test_lane_kernel_is_the_per_trajectory_kernel_bit_for_bit(name, make, l, d, odd):
    """``odd``: one lane with NaN scores and one whose shifted scores pass -708 (math.exp in those
    lanes, the others on the polynomial, entry by entry); plain: every lane on the polynomial (a
    head's matrix of whole vectors then takes the one-pass shift-exp-sum of each row)."""
    rng = np.random.default_rng(7)
    field = make(rng, LANES)
    p = kk.pack_field(field, (LANES, l, d))
    assert lanes_supported(p.ints), name
    y = _tokens(rng, (LANES, l, d))
    if odd:
        y[3, 0] = np.nan
        y[5] *= 300.0
    t = rng.uniform(0, 3, LANES)
    rows = np.arange(LANES, dtype=np.int64) if p.per.shape[0] > 1 else np.zeros(LANES, dtype=np.int64)
    want = np.empty((LANES, l, d))
    work = np.empty(max(p.work, 1))
    for w in range(LANES):
        kk.evaluate(kk.RHS, t[w], np.ascontiguousarray(y[w]), rows[w], p.ints, p.floats, p.per, work, want[w])
    nr, npp = lanes_work(p.ints)
    out = np.empty(l * d * LANES)
    lanes_rhs(t, np.ascontiguousarray(np.moveaxis(y, 0, -1)).ravel(), rows, p.ints, p.floats, p.per,
              np.empty(nr * LANES), np.empty(npp), out)
    got = np.moveaxis(out.reshape(l, d, LANES), -1, 0)
    assert np.array_equal(got, want, equal_nan=True)


def _solve(monkeypatch, lanes, field, y0, T, stepper="dopri5", **kw):
    """integrate on the compiled engine, the lane path forced on or off; asserts which one ran."""
    calls = []
    real = _engine._run_lanes

    def spy(*args):
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(_engine, "_run_lanes", spy)
    monkeypatch.setattr(_engine, "LANES_MIN_PER_THREAD", 0 if lanes else 10**9)
    sol = ra.integrate(field, y0, (0.0, T), stepper, engine="compiled", **kw)
    assert sol.engine == "compiled" and bool(calls) == lanes
    return sol


def _same(a, b):
    assert np.array_equal(a.t, b.t)
    assert np.array_equal(a.y, b.y, equal_nan=True)
    for k in ("nfev", "n_steps", "n_rejected", "status"):
        assert np.array_equal(getattr(a.per_trajectory, k), getattr(b.per_trajectory, k)), k
    assert np.array_equal(a.per_trajectory.t_fail, b.per_trajectory.t_fail, equal_nan=True)
    assert a.success == b.success and a.message == b.message


@pytest.mark.parametrize("stepper", _engine.LANE_STEPPERS)
@pytest.mark.parametrize("B", [3, 2 * LANES + 5])
@pytest.mark.parametrize("name,make,l,d", FORMS, ids=[f[0] for f in FORMS])
def test_lanes_give_the_per_trajectory_loop_bits(monkeypatch, name, make, l, d, B, stepper):
    """A batch not a multiple of 8 (lanes refill and run empty), interior save times (the
    per-trajectory dense output inside a step), a step size given for some rows and not others."""
    rng = np.random.default_rng(11)
    field = make(rng, B)
    y0 = _tokens(rng, (B, l, d))
    assert _eligible(field, y0.shape), name
    kw = dict(rtol=1e-7, atol=1e-7, saveat=[0.0, 0.37, 1.2, 2.5], stepper=stepper)
    _same(_solve(monkeypatch, True, field, y0, 2.5, **kw), _solve(monkeypatch, False, field, y0, 2.5, **kw))


@pytest.mark.parametrize("stepper", _engine.LANE_STEPPERS)
def test_lanes_stop_as_the_loop_does(monkeypatch, stepper):
    """max_steps reached by some rows (status MAX_STEPS), an empty interval and huge beta (overflow:
    the NumPy field's error, as on the per-trajectory loop)."""
    rng = np.random.default_rng(3)
    field = ra.AttentionField(rng.normal(size=(3, 3)), beta=4.0)
    y0 = _tokens(rng, (2 * LANES + 1, 6, 3))
    kw = dict(rtol=1e-10, atol=1e-10, saveat=[0.0, 5.0], max_steps=25, stepper=stepper)
    a, b = _solve(monkeypatch, True, field, y0, 5.0, **kw), _solve(monkeypatch, False, field, y0, 5.0, **kw)
    _same(a, b)
    assert not a.success and "max_steps" in a.message
    assert set(a.per_trajectory.status.tolist()) <= {0, -1} and -1 in a.per_trajectory.status
    with np.errstate(over="ignore"):  # beta P overflows: inf scores, NaN weights
        huge = ra.AttentionField(4.0 * np.eye(3), beta=1e308)
    errors = []
    for lanes in (True, False):
        with pytest.raises(ra.ValidationError) as exc:
            _solve(monkeypatch, lanes, huge, y0, 1.0, stepper, saveat=[1.0])
        errors.append(str(exc.value))
    assert errors[0] == errors[1] and "beta" in errors[0]


def test_the_lane_steppers_are_fsal():
    """The lane loop carries each lane's last evaluation into its next step (no other first
    stage is coded there): a stepper added to LANE_STEPPERS must be FSAL and adaptive."""
    for name in _engine.LANE_STEPPERS:
        cls = ra.STEPPERS[name]
        assert cls.fsal and cls.adaptive, name


def test_the_lane_path_is_taken_where_it_applies(monkeypatch):
    """A stepper of LANE_STEPPERS (every other stepper the compiled engine runs stays on the
    per-trajectory loop) on a lane form with at least LANES_MIN_PER_THREAD trajectories per thread, saveat
    given, no events, tokens small enough (LANES_MAX_SIZE numbers, or LANES_ANY_L_D components);
    everything else stays on the per-trajectory loop."""
    calls = []
    real = _engine._run_lanes
    monkeypatch.setattr(_engine, "_run_lanes", lambda *a: calls.append(1) or real(*a))
    rng = np.random.default_rng(0)
    B = _engine.LANES_MIN_PER_THREAD * threads()
    y0 = _tokens(rng, (B, 4, 3))
    ok = ra.AttentionField(np.eye(3))

    def runs(field, y, stepper="dopri5", **kw):
        calls.clear()
        kw.setdefault("saveat", [0.5])
        ra.integrate(field, y, (0.0, 0.5), stepper, engine="compiled", **kw)
        return bool(calls)

    assert runs(ok, y0)
    assert not runs(ok, y0[:-1])  # fewer trajectories than lanes per thread
    for name, (cls, _kind) in _tables.SUPPORTED.items():
        kw = {} if cls.adaptive else dict(dt=0.1)
        assert runs(ok, y0, name, **kw) == (name in _engine.LANE_STEPPERS), name
    assert not runs(ra.AttentionField(np.eye(3), mask="causal"), y0)
    assert not runs(ra.usa(2.0, 3), y0)  # "mean" rows
    assert not runs(ra.AttentionField(np.eye(3), U=2 * np.eye(3)), y0)
    W = np.diag([1.0, 2.0, 3.0])
    ell = ra.AttentionField(np.eye(3), W=W)
    assert not runs(ell, ell.manifold.projection(y0))
    assert not runs(ok, y0, events=[rae.consensus(1e-3)])
    # the size rule: tokens of at most 256 numbers, or of at most 4 components whatever l
    wide = ra.AttentionField(np.eye(17))
    assert not runs(wide, _tokens(rng, (B, 16, 17)))
    assert runs(ra.AttentionField(np.eye(16)), _tokens(rng, (B, 16, 16)))
    assert runs(ra.AttentionField(np.eye(4)), _tokens(rng, (B, 80, 4)))


CTRL_C = """
    import signal, sys, numpy as np, riemattn as ra
    signal.signal(signal.SIGINT, signal.default_int_handler)  # (see test_compiled_user.CTRL_C)
    f = ra.AttentionField(np.eye(3), beta=1.0)
    # 20 000 trajectories at rtol 1e-12 to T = 200: far longer than the test waits, on any machine
    y0 = f.manifold.projection(np.random.default_rng(1).normal(size=(20000, 10, 3)))
    ra.integrate(f, y0[:64], (0, 0.1), "dopri5", engine="compiled", saveat=[0.1])  # compiled before the signal
    print("go", flush=True)
    try:
        ra.integrate(f, y0, (0, 200.0), "dopri5", rtol=1e-12, atol=1e-12, engine="compiled", saveat=[0.0, 200.0])
        print("finished", flush=True)
    except KeyboardInterrupt as exc:
        sol = exc.trajectory
        st = sol.per_trajectory.status.ravel()
        stopped = st == 1
        print("stopped", sol.engine, int(stopped.sum() > 0), bool(np.isnan(sol.y[-1][stopped]).all()),
              bool(np.isfinite(sol.y[0]).all()), set(st.tolist()) <= {0, 1}, flush=True)
"""


def test_ctrl_c_stops_the_lanes_within_a_second():
    """SIGINT during a long ensemble on the lane path: KeyboardInterrupt within a second, with the
    trajectories not finished marked so (status 1, NaN at the last save time)."""
    line, waited, err = interrupt_after_go(CTRL_C)
    assert line == ["stopped", "compiled", "1", "True", "True", "True"], (line, err)
    assert waited < 1.0
