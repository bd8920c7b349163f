"""``auto`` (the explicit/stiff switch) on the CUDA engine (riemattn.solvers.compiled.cuda._autoloop) without a GPU.

* Under numba-cuda's simulator (NUMBA_ENABLE_CUDASIM=1 in a SUBPROCESS, as in
  tests/solvers/test_cuda_rodas.py) the generated auto kernel -- DOPRI5's generated step, the
  generated RODAS4P step and both dense outputs in one loop, the device code a GPU compiles --
  agrees with the compiled CPU engine's AUTO loop step for step (equal evaluations, steps,
  rejections and statuses) and to rounding in the values: USA at beta = 9 near a pole, which
  switches (the compiled engine's every-step record shows the explicit steps first, then steps far
  beyond DOPRI5's stability bound), with saveat inside an explicit and inside a stiff step;
  hemisphere heads (time-varying, not stiff: the counts are DOPRI5's, it stays explicit);
  per-trajectory beta whose trajectories switch at different times or not at all, with a first
  step; max_steps reached after the switch; slots in the step that decides the switch and in the
  first stiff one; a trajectory that goes stiff, explicit again and stiff again (the NumPy engine's
  AutoSwitch records the mode of every attempt).
* float32 and tokens of l d > 64 numbers raise UnsupportedByEngine naming why.
* The kernel compiles to PTX for sm_90 and assembles (ptxas), where the tools are installed.
"""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

import riemattn as ra

from _subprocess import numba_cuda, ptx_tools, simulate_cuda


SCRIPT = textwrap.dedent(r"""
    import json, numpy as np, riemattn as ra
    from riemattn.errors import UnsupportedByEngine
    from riemattn.experiments._papers import hemisphere_heads
    from riemattn.solvers.compiled.cuda import _ros
    rng = np.random.default_rng(3)

    def near_pole(B, l, spread=0.3):
        y = np.array([1.0, 0.0, 0.0]) + spread * rng.normal(size=(B, l, 3))
        return y / np.linalg.norm(y, axis=-1, keepdims=True)

    def records(fields, y0, span, **kw):
        # the compiled engine's every accepted step of auto and of dopri5, trajectory by trajectory
        # (no saveat): where auto's steps leave dopri5's (the switch), and the step sizes around the slots
        out = []
        for b, f in enumerate(fields):
            a = ra.integrate(f, y0[b], span, "auto", engine="compiled", **kw)
            e = ra.integrate(f, y0[b], span, "dopri5", engine="compiled", **kw)
            m = min(len(a.t), len(e.t))
            leave = int(np.argmax(a.t[:m] != e.t[:m])) if np.any(a.t[:m] != e.t[:m]) else m
            out.append(dict(t=a.t.tolist(), leave=leave, dopri5_h_max=float(np.diff(e.t).max()),
                            dopri5_steps=len(e.t) - 1))
        return out

    def modes(field, y0, span, **kw):
        # the NumPy engine's AutoSwitch (the algorithm the compiled engine mirrors), one trajectory: every
        # attempted step as (t, h, the mode that takes it: StepResult.state's), and the steps
        from riemattn.solvers.stiff import auto
        log, step = [], auto.AutoSwitch.step
        one = lambda v: float(np.asarray(v, dtype=float).reshape(-1)[0])  # noqa: E731

        def logged(self, field, t, y, h, k1=None, state=None):
            log.append((one(t), one(h), 0 if state is None else int(one(state[..., 0]))))
            return step(self, field, t, y, h, k1, state)

        auto.AutoSwitch.step = logged
        try:
            sol = ra.integrate(field, y0, span, "auto", engine="numpy", **kw)
        finally:
            auto.AutoSwitch.step = step
        return log, int(sol.n_steps)

    def case(name, field, y0, span, fields=None, **kw):
        _ros._CACHE.clear()
        a = ra.integrate(field, y0, span, "auto", engine="cuda", **kw)
        generated = len(_ros._CACHE)
        c = ra.integrate(field, y0, span, "auto", engine="compiled", **kw)
        pa, pc = a.per_trajectory, c.per_trajectory
        nan = np.isnan(np.asarray(c.y))
        e = ra.integrate(field, y0, span, "dopri5", engine="compiled", **kw).per_trajectory
        row = dict(name=name, diff=float(np.abs(a.y - c.y)[~nan].max()), t_equal=bool(np.array_equal(a.t, c.t)),
                   nan_equal=bool(np.array_equal(np.isnan(a.y), nan)), shape_equal=a.y.shape == c.y.shape,
                   engine=a.engine, stepper=a.stepper, nfev=int(np.max(pc.nfev)), steps=pc.n_steps.tolist(),
                   nfevs=pc.nfev.tolist(), rejected=pc.n_rejected.tolist(), counts_equal=bool(
                       np.array_equal(pa.nfev, pc.nfev) and np.array_equal(pa.n_steps, pc.n_steps)
                       and np.array_equal(pa.n_rejected, pc.n_rejected)),
                   status_equal=bool(np.array_equal(pa.status, pc.status)), success=bool(a.success),
                   generated=generated, dopri5_steps=e.n_steps.tolist(), dopri5_nfev=e.nfev.tolist(),
                   saveat=[float(v) for v in kw.get("saveat", [])])
        if fields is not None:
            rec = {k: v for k, v in kw.items() if k in ("rtol", "atol", "first_step")}
            row["records"] = records(fields, y0, span, **rec)
        if "switches back" in name:
            row["attempts"], row["numpy_steps"] = modes(field, y0, span, **kw)
        print(json.dumps(row), flush=True)

    def raises(name, *args, **kw):
        try:
            ra.integrate(*args, engine="cuda", **kw)
            msg = None
        except UnsupportedByEngine as exc:
            msg = str(exc)
        print(json.dumps(dict(name=name, raised=msg)), flush=True)

    usa9 = ra.usa(9.0, 3)
    y_switch = near_pole(2, 4)
    case("switch: USA beta = 9 near a pole, saveat inside an explicit and a stiff step", usa9, y_switch,
         (0.0, 0.3), [usa9] * 2, rtol=1e-6, atol=1e-6, saveat=[0.0, 0.0005, 0.1, 0.3])
    case("stays explicit: hemisphere time-varying heads, per-trajectory beta", ra.AttentionField(
         hemisphere_heads(), beta=np.array([0.5, 2.0])), near_pole(2, 3, 1.0), (0.0, 2.0), rtol=1e-8, atol=1e-8,
         saveat=[0.0, 0.13, 1.1, 2.0])
    case("switch at different times: USA per-trajectory beta (9, 5, 14), first_step", ra.usa(
         np.array([9.0, 5.0, 14.0]), 3), near_pole(3, 3), (0.0, 0.3), [ra.usa(b, 3) for b in (9.0, 5.0, 14.0)], rtol=1e-6, atol=1e-6,
         saveat=[0.05, 0.3], first_step=1e-4)
    case("max_steps reached after the switch (later slots NaN)", usa9, near_pole(2, 4), (0.0, 0.3), [usa9] * 2,
         rtol=1e-8, atol=1e-8, saveat=[0.0, 0.0005, 0.2, 0.3], max_steps=68)
    # slots inside the step whose attempt decides the switch and inside the first RODAS4P step: each
    # step's own dense output, whatever the mode after it. The first stiff step still has DOPRI5's
    # size (the controller's, from the explicit step before it): the record leaves DOPRI5's times
    # at the end of the second stiff step, t[i], when the first is accepted (the case here)
    rec = records([usa9], y_switch[:1], (0.0, 0.3), rtol=1e-6, atol=1e-6)[0]
    t, i = np.array(rec["t"]), rec["leave"]
    case("the switching step: slots in the last explicit and the first stiff step", usa9, y_switch[:1], (0.0, 0.3),
         rtol=1e-6, atol=1e-6, saveat=[0.5 * (t[i - 3] + t[i - 2]), 0.5 * (t[i - 2] + t[i - 1]), 0.3])
    y_back = np.array([1.0, 0.0, 0.0]) + np.random.default_rng(5).normal(size=(1, 4, 3))
    case("switches back: USA beta = 9, spread tokens, stiff, explicit at t ~ 0.386, stiff again", usa9,
         y_back / np.linalg.norm(y_back, axis=-1, keepdims=True), (0.0, 0.45), rtol=1e-6, atol=1e-6,
         saveat=[0.2, 0.388, 0.45])
    y32 = near_pole(2, 3).astype(np.float32)
    raises("float32", usa9, y32, (0.0, 0.1), "auto", saveat=[0.1], project=True)
    raises("l d = 66", ra.usa(9.0, 3), near_pole(1, 22), (0.0, 0.1), "auto", saveat=[0.1])
""")
N_CASES = 6
EPS = np.finfo(float).eps


@pytest.fixture(scope="module")
def simulated():
    if not numba_cuda():
        pytest.skip("numba-cuda is not installed (pip install -e '.[cuda]')")
    rows = simulate_cuda(SCRIPT)
    return [r for r in rows if "raised" not in r], {r["name"]: r["raised"] for r in rows if "raised" in r}


def test_simulator_runs_every_case(simulated):
    cases, _ = simulated
    assert len(cases) == N_CASES
    assert all(r["generated"] == 1 and r["engine"] == "cuda" and r["stepper"] == "auto" for r in cases), cases


@pytest.mark.parametrize("k", range(N_CASES))
def test_simulated_auto_agrees_with_compiled_engine(simulated, k):
    r = simulated[0][k]
    assert r["success"] != ("max_steps" in r["name"]), r
    assert r["shape_equal"] and r["t_equal"] and r["status_equal"] and r["nan_equal"], r
    # the same decisions: every accepted and rejected step, every switch, every evaluation
    assert r["counts_equal"], r
    # the same operations in the same order but the field's exp, within an ulp or two of the CPU's:
    # each of the nfev evaluations perturbs its stage by ~eps; the explicit steps are held inside
    # DOPRI5's stability region and the RODAS map damps the stiff directions (L-stable), the flow
    # grows the others by < 10 over these short spans -> 10 nfev eps (as test_cuda_rodas)
    assert r["diff"] <= 10 * r["nfev"] * EPS, r


def _step_containing(t, s):
    """(index, size) of the accepted step of the record t whose interval holds the time s."""
    i = int(np.searchsorted(t, s)) - 1
    return i, t[i + 1] - t[i]


def test_the_switching_case_runs_both_modes(simulated):
    """From the compiled engine's every-step records: auto's first steps are DOPRI5's (the same times:
    it starts explicit), it leaves them after at least SWITCH_AFTER = 15 attempts, and then takes
    steps more than ten times DOPRI5's largest (its steps are held by stability: those are RODAS4P's).
    The slot at 0.0005 lies inside an explicit step, the one at 0.1 inside a stiff one."""
    r = simulated[0][0]
    assert all(10 * s < e for s, e in zip(r["steps"], r["dopri5_steps"])), r
    for rec in r["records"]:
        t = np.array(rec["t"])
        assert 15 <= rec["leave"] < len(t), rec["leave"]
        i, _ = _step_containing(t, 0.0005)
        assert i < 15 <= rec["leave"], i  # before any switch: an explicit step
        i, h = _step_containing(t, 0.1)
        assert i >= rec["leave"] and h > 10 * rec["dopri5_h_max"], (i, h, rec["dopri5_h_max"])


def test_hemisphere_heads_stay_explicit(simulated):
    """Not stiff: auto's counts are DOPRI5's (the same steps, the same evaluations), over more steps
    than a switch needs (SWITCH_AFTER = 15)."""
    r = simulated[0][1]
    assert min(r["steps"]) > 15 and r["steps"] == r["dopri5_steps"] and r["nfevs"] == r["dopri5_nfev"], r


def test_per_trajectory_beta_switches_at_different_times(simulated):
    """beta = 9 and 14 switch (far fewer steps than DOPRI5) at different times: their records leave
    DOPRI5's at t ~ 1e-2 and ~ 1e-4 (beta = 14's explicit steps are ~100 times shorter); beta = 5
    stays explicit (DOPRI5's counts)."""
    r = simulated[0][2]
    s, e = r["steps"], r["dopri5_steps"]
    assert 10 * s[0] < e[0] and 10 * s[2] < e[2] and s[1] == e[1] and r["nfevs"][1] == r["dopri5_nfev"][1], r
    leave = [rec["leave"] for rec in r["records"]]
    assert leave[0] >= 15 and leave[2] >= 15, leave
    t_switch = [rec["t"][i] for rec, i in zip(r["records"], leave) if i < len(rec["t"])]
    assert len(t_switch) == 2 and t_switch[0] > 10 * t_switch[1], t_switch
    assert leave[1] == len(r["records"][1]["t"]), leave  # never leaves DOPRI5's steps


def test_max_steps_case_switched_before_stopping(simulated):
    """Each trajectory stops at 68 attempted steps, after its switch: it had accepted more steps than
    where its (unlimited) record leaves DOPRI5's."""
    r = simulated[0][3]
    assert all(s + j == 68 for s, j in zip(r["steps"], r["rejected"])), r
    assert all(15 <= rec["leave"] < s for rec, s in zip(r["records"], r["steps"])), (r["steps"], [
        rec["leave"] for rec in r["records"]])


def test_float32_and_large_tokens_raise_naming_why(simulated):
    raised = simulated[1]
    assert raised["float32"] is not None and "auto in float32" in raised["float32"], raised
    assert raised["l d = 66"] is not None and "66" in raised["l d = 66"] and "l d <= 64" in raised["l d = 66"], raised


@pytest.mark.skipif(not numba_cuda(), reason="numba-cuda is not installed")
def test_unsupported_names_auto_and_the_size_limit():
    from riemattn.solvers.compiled.cuda import _ros
    from riemattn.solvers.compiled.cuda._engine import STEPPERS, unsupported
    from riemattn.solvers.steppers import get_stepper

    assert "auto" in STEPPERS and "auto" in _ros.METHODS
    field = ra.usa(9.0, 4)
    why, _ = unsupported(field, get_stepper("auto"), np.tile(np.eye(4)[0], (2, 17, 1)), saveat=np.array([1.0]),
                         save_fn=None, events=(), progress=False, dense_output=False)
    assert any(w.startswith("auto for tokens") and "68 numbers" in w and "l d <= 64" in w for w in why), why
    why, _ = unsupported(field, get_stepper("auto"), np.tile(np.eye(4)[0], (2, 16, 1)), saveat=np.array([1.0]),
                         save_fn=None, events=(), progress=False, dense_output=False)
    assert why == [], why
    # DOPRI5's 7 stages on top of the Rosenbrock kernel's local memory
    assert _ros.local_size(8, 8, 1, "auto") == _ros.local_size(8, 8, 1) + 7 * 64


@pytest.mark.slow
def test_auto_kernel_compiles_and_assembles_for_sm90(tmp_path):
    """The simulator runs Python: the device compiler's typing (the Rosenbrock step's (nfev, |J|_inf),
    the signal of either mode) is checked here (~18 s to PTX and SASS)."""
    why = ptx_tools()
    if why:
        pytest.skip(why)
    from riemattn.solvers.compiled._kernel import pack_field
    from riemattn.solvers.compiled.cuda import _ptx

    ints = pack_field(ra.usa(9.0, 3), (16, 2, 3)).ints  # 2 tokens: the smallest kernel
    ptx = _ptx.generated_ptx("auto", ints, which=("adaptive",), diff=True)["adaptive"]
    assert ".target sm_90" in ptx and ".entry" in ptx and "auto_kernel" in ptx
    # both generated steps, both dense outputs, the stiffness test and the device LU are in the kernel
    for name in ("rk_step", "ros_step", "dopri5_dense", "ros_dense", "explicit_signal", "lu_factor", "update_jacobian"):
        assert name in ptx, name
    row = _ptx.assemble(ptx, (9, 0), str(tmp_path / "auto.cubin"))
    assert 0 < row["registers"] <= 255, row
    # DOPRI5's 7 stages, the 6 RODAS stages and the (6, 6) matrix are per-thread local memory
    assert row["stack"] >= (7 + 6 + 6) * 6 * 8, row


def test_a_trajectory_switches_back_and_forth(simulated):
    """USA at beta = 9 from spread tokens: stiff after ~0.013, explicit again at ~0.386 (h |J|_inf < 0.6
    for 15 attempts), stiff again at ~0.391 -- the NumPy engine's AutoSwitch, whose steps the compiled
    engine takes (equal counts), records the mode of every attempt; the slot at 0.388 lies inside an
    explicit step of the interlude, the one at 0.2 inside a stiff step (the dense output of each)."""
    r = simulated[0][5]
    assert r["numpy_steps"] == r["steps"][0], r["numpy_steps"]
    att = r["attempts"]
    mode = [m for _, _, m in att]
    phases = [mode[0]] + [b for a, b in zip(mode, mode[1:]) if a != b]
    assert phases == [0, 1, 0, 1], phases

    def taking(slot):  # the mode of the accepted step holding the slot (the last attempt from t <= slot)
        t, h, m = [a for a in att if a[0] <= slot][-1]
        assert t < slot < t + h
        return m

    assert taking(0.388) == 0 and taking(0.2) == 1
