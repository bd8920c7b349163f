"""rodas4 and rodas4p on the CUDA engine (riemattn.solvers.compiled.cuda._ros) without a GPU.

* Under numba-cuda's simulator (NUMBA_ENABLE_CUDASIM=1 in a SUBPROCESS, as in
  tests/solvers/test_cuda_engine.py) the generated Rosenbrock kernel -- the device code a GPU
  compiles -- agrees with the compiled CPU engine's Rosenbrock loop step for step (equal
  evaluations, steps, rejections and statuses) and to rounding in the values: USA at beta = 9 near
  a pole (stiff: the counts show it against dopri5), per-trajectory beta, the difference form and
  the plain value, time-varying heads (the forward difference in t), the ellipsoid with a causal
  mask and a value matrix, saveat inside steps (the dense output), a first step, max_steps reached.
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

    def case(name, field, y0, span, stepper, **kw):
        _ros._CACHE.clear()
        a = ra.integrate(field, y0, span, stepper, engine="cuda", **kw)
        generated = len(_ros._CACHE)
        c = ra.integrate(field, y0, span, stepper, engine="compiled", **kw)
        pa, pc = a.per_trajectory, c.per_trajectory
        nan = np.isnan(np.asarray(c.y))
        row = dict(name=name, diff=float(np.abs(a.y - c.y)[~nan].max()), t_equal=bool(np.array_equal(a.t, c.t)),
                   nan_equal=bool(np.array_equal(np.isnan(a.y), nan)), shape_equal=a.y.shape == c.y.shape,
                   engine=a.engine, stepper=a.stepper, nfev=int(np.max(pc.nfev)), steps=pc.n_steps.tolist(),
                   rejected=pc.n_rejected.tolist(), counts_equal=bool(
                       np.array_equal(pa.nfev, pc.nfev) and np.array_equal(pa.n_steps, pc.n_steps)
                       and np.array_equal(pa.n_rejected, pc.n_rejected)),
                   status_equal=bool(np.array_equal(pa.status, pc.status)), success=bool(a.success),
                   generated=generated)
        if "stiff" in name:  # the explicit method on the same problem: the stiffness in the counts
            e = ra.integrate(field, y0, span, "dopri5", engine="compiled", **kw)
            row["dopri5_steps"] = e.per_trajectory.n_steps.tolist()
        print(json.dumps(row), flush=True)

    def raises(name, *args, **kw):
        try:
            ra.integrate(*args, engine="cuda", **kw)
            msg = None
        except UnsupportedByEngine as exc:
            msg = str(exc)
        print(json.dumps(dict(name=name, raised=msg)), flush=True)

    usa9 = ra.usa(9.0, 3)
    case("rodas4 stiff USA beta = 9 near a pole, saveat inside steps", usa9, near_pole(2, 4), (0.0, 0.3), "rodas4",
         rtol=1e-6, atol=1e-6, saveat=[0.0, 0.1, 0.3])
    case("rodas4p stiff USA per-trajectory beta (9, 5), first_step", ra.usa(np.array([9.0, 5.0]), 3),
         near_pole(2, 3), (0.0, 0.3), "rodas4p", rtol=1e-7, atol=1e-7, saveat=[0.05, 0.3], first_step=1e-3)
    case("rodas4 hemisphere time-varying heads, per-trajectory beta", ra.AttentionField(
         hemisphere_heads(), beta=np.array([0.5, 2.0])), near_pole(2, 3, 1.0), (0.0, 0.4), "rodas4",
         rtol=1e-6, atol=1e-6, saveat=[0.0, 0.13, 0.4])
    W = np.diag([2.0, 1.0, 0.5])
    ell = ra.AttentionField(hemisphere_heads(), rng.normal(size=(1, 3, 3)) / 2, W=W, mask="causal",
                            normalization="mean", beta=0.8)
    case("rodas4 ellipsoid, causal mean, time-varying P and constant U", ell,
         ell.manifold.projection(rng.normal(size=(2, 3, 3))), (0.0, 0.3), "rodas4", rtol=1e-6, atol=1e-6,
         saveat=[0.11, 0.3])
    case("rodas4 constant P and U, softmax, full attention", ra.AttentionField(
         rng.normal(size=(1, 3, 3)), rng.normal(size=(1, 3, 3)) / 2, normalization="softmax"),
         near_pole(1, 4, 1.0), (0.0, 0.5), "rodas4", rtol=1e-6, atol=1e-6, saveat=[0.2, 0.5])
    case("rodas4 max_steps reached (later slots NaN)", usa9, near_pole(2, 4), (0.0, 0.3), "rodas4", rtol=1e-8,
         atol=1e-8, saveat=[0.0, 0.001, 0.2, 0.3], max_steps=5)
    y32 = near_pole(2, 3).astype(np.float32)
    raises("float32", usa9, y32, (0.0, 0.1), "rodas4", saveat=[0.1], project=True)
    raises("l d = 66", ra.usa(9.0, 3), near_pole(1, 22), (0.0, 0.1), "rodas4", saveat=[0.1])
    raises("l d = 63", ra.usa(9.0, 3), near_pole(1, 21), (0.0, 0.0), "rodas4", saveat=[0.0])
""")
N_CASES = 6


@pytest.fixture(scope="module")
def simulated():
    if not numba_cuda():
        pytest.skip("numba-cuda is not installed (pip install -e '.[cuda]')")
    rows = simulate_cuda(SCRIPT)
    return [r for r in rows if "raised" not in r], {r["name"]: r["raised"] for r in rows if "raised" in r}


def test_simulator_runs_every_case(simulated):
    cases, _ = simulated
    assert len(cases) == N_CASES
    assert {r["stepper"] for r in cases} == {"rodas4", "rodas4p"}
    assert all(r["generated"] == 1 and r["engine"] == "cuda" for r in cases), cases


@pytest.mark.parametrize("k", range(N_CASES))
def test_simulated_rodas_agrees_with_compiled_engine(simulated, k):
    r = simulated[0][k]
    assert r["success"] != ("max_steps" in r["name"]), r
    assert r["shape_equal"] and r["t_equal"] and r["status_equal"] and r["nan_equal"], r
    # the same decisions: every accepted and rejected step, every evaluation
    assert r["counts_equal"], r
    # the same operations in the same order (the Jacobian, the matrix, its LU and the solves are the
    # CPU kernel's and step's, compiled for the device) but the field's exp, within an ulp or two
    # of the CPU's: each of the nfev evaluations (and the Jacobian at each step) perturbs its stage
    # by ~eps; the RODAS map damps the stiff directions (L-stable) and the flow grows the others by
    # < 10 over these short spans -> 10 nfev eps
    assert r["diff"] <= 10 * r["nfev"] * np.finfo(float).eps, r


def test_stiff_cases_are_stiff(simulated):
    """USA at beta = 9 near a pole: dopri5 needs more than ten times the steps (stability-bound); at
    beta = 5 (the second trajectory of the per-trajectory case) it is not stiff, and dopri5 needs fewer."""
    stiff = [r for r in simulated[0] if "stiff" in r["name"]]
    assert len(stiff) == 2
    first, per_beta = stiff
    assert all(10 * s < e for s, e in zip(first["steps"], first["dopri5_steps"])), first
    assert 10 * per_beta["steps"][0] < per_beta["dopri5_steps"][0], per_beta
    assert per_beta["dopri5_steps"][1] < per_beta["steps"][1], per_beta


def test_float32_and_large_tokens_raise_naming_why(simulated):
    raised = simulated[1]
    assert raised["float32"] is not None and "float64 only" in raised["float32"], raised
    assert raised["l d = 66"] is not None and "66" in raised["l d = 66"] and "l d <= 64" in raised["l d = 66"], raised
    assert raised["l d = 63"] is None, raised  # at the limit: runs


@pytest.mark.skipif(not numba_cuda(), reason="numba-cuda is not installed")
def test_unsupported_names_the_size_limit():
    from riemattn.solvers.compiled.cuda._engine import unsupported
    from riemattn.solvers.steppers import get_stepper

    field = ra.usa(9.0, 4)
    for name in ("rodas4", "rodas4p"):
        why, _ = unsupported(field, get_stepper(name), np.tile(np.eye(4)[0], (2, 17, 1)), saveat=np.array([1.0]),
                             save_fn=None, events=(), progress=False, dense_output=False)
        assert any("68 numbers" in w and "l d <= 64" in w for w in why), why
        why, _ = unsupported(field, get_stepper(name), np.tile(np.eye(4)[0], (2, 16, 1)), saveat=np.array([1.0]),
                             save_fn=None, events=(), progress=False, dense_output=False)
        assert why == [], why


@pytest.mark.skipif(not numba_cuda(), reason="numba-cuda is not installed")
def test_many_heads_beyond_the_local_memory_limit_are_named():
    from riemattn.solvers.compiled.cuda import _ros

    # 32 x 2 tokens: the matrix is 4096 numbers, the field's scratch ~2400 per head (2 h l^2 weights)
    assert _ros.unsupported("rodas4", 32, 2, False, 1) == []
    assert _ros.local_size(32, 2, 10) <= _ros.MAX_LOCAL < _ros.local_size(32, 2, 11)
    (why,) = _ros.unsupported("rodas4", 32, 2, False, 11)
    assert "11 heads" in why and f"at most {_ros.MAX_LOCAL}" in why, why


def test_rodas4_kernel_compiles_and_assembles_for_sm90(tmp_path):
    why = ptx_tools()
    if why:
        pytest.skip(why)
    from riemattn.solvers.compiled._kernel import pack_field
    from riemattn.solvers.compiled.cuda import _ptx

    ints = pack_field(ra.usa(9.0, 3), (16, 2, 3)).ints  # 2 tokens: the smallest kernel (~15 s to PTX and SASS)
    ptx = _ptx.generated_ptx("rodas4", ints, which=("adaptive",), diff=True)["adaptive"]
    assert ".target sm_90" in ptx and ".entry" in ptx and "ros_kernel" in ptx
    # the generated step, the device LU and the CPU kernel's Jacobian are in the kernel
    for name in ("ros_step", "lu_factor", "lu_solve", "update_jacobian", "lift", "difference_form"):
        assert name in ptx, name
    row = _ptx.assemble(ptx, (9, 0), str(tmp_path / "rodas4.cubin"))
    assert 0 < row["registers"] <= 255, row
    # the (6, 6) matrix, the 6 stages and the field's scratch are per-thread local memory: a stack frame
    assert row["stack"] >= 6 * 6 * 8, row
