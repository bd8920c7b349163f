"""The CUDA engine (integrate(..., engine="cuda"), riemattn.solvers.compiled.cuda) without a GPU.

* Under numba-cuda's simulator (NUMBA_ENABLE_CUDASIM=1, set in a SUBPROCESS: numba reads it once,
  at import, so it must not leak into this process or other tests), the kernels -- the same
  device code a GPU compiles -- run in Python, one simulated thread per trajectory, and must
  agree with the compiled CPU engine to rounding, step for step (equal counts of evaluations,
  steps and rejections: the same decisions), for every supported stepper, saveat with points
  inside steps (dense output), per-trajectory beta and weights, batches of 1-4, float32, every
  normalization, mask, head kind (the compact row-separable sines too) and manifold the engine
  runs. Every case runs the kernels generated per method and field configuration
  (riemattn.solvers.compiled.cuda._gen) but the fallback cases (the older kernels: the field
  fused, ``_fast``; the generic ones); one case runs both the generated and the older kernel and
  finds the same numbers.
* The lanes form (riemattn.solvers.compiled.cuda._warp: a lane per token, 32 // l trajectories per
  warp) under the simulator against the compiled engine, for each stepper, with idle lanes and a
  batch that is not a multiple of the trajectories per warp: its sums over a trajectory's
  components are added in the compiled engine's order (each lane adds the n terms of the shared
  row), so the tolerance is the thread-per-trajectory kernels' (exp/sin ulps carried by the flow)
  and the counts are equal; two cases find the generated thread-per-trajectory kernel's numbers
  exactly. The rule that chooses the form: test_lanes_form_is_chosen_by_batch_size.
* The kernels compile to PTX for sm_90 (H100) without a device, where libNVVM is installed: the
  generic ones and those specialised to one shape (the field fused, scratch in local memory). The
  generated kernels' PTX and SASS: tests/solvers/test_cuda_ptx.py.
* Without a GPU (and without the simulator) engine="cuda" raises UnsupportedByEngine saying why.
"""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

import riemattn as ra
from riemattn.errors import UnsupportedByEngine

from _subprocess import numba_cuda, simulate_cuda


needs_numba_cuda = pytest.mark.skipif(not numba_cuda(), reason="numba-cuda is not installed (pip install -e '.[cuda]')")

# Each case: the CUDA engine under the simulator against the compiled engine (same process, the
# simulator does not change numba's CPU target). Printed as JSON lines.
SCRIPT = textwrap.dedent(r"""
    import json, numpy as np, riemattn as ra
    from riemattn.experiments._papers import hemisphere_heads
    from riemattn.dynamics.schedules import PiecewiseConstantHeads, TimeVaryingHeads
    from riemattn.solvers.compiled.cuda import _fast, _gen, _warp
    from riemattn.solvers.compiled._kernel import pack_field
    from riemattn.dynamics.kernels import _kernel_layout as lay
    SLOTS = ("MANIFOLD", "MASK", "NORM", "RESCALED", "BETA_LOC", "P_KIND", "P_LOC", "P_HEADS", "U_KIND", "U_LOC",
             "U_HEADS")
    rng = np.random.default_rng(7)
    _warp.FORM = "threads"  # a thread per trajectory unless a case asks for the lanes form

    def tokens(shape):
        y = rng.uniform(-0.5, 0.5, shape)
        return y / np.linalg.norm(y, axis=-1, keepdims=True)

    def case(name, field, y0, span, stepper, dtype=None, older=False, lanes=False, **kw):
        yc = y0 if dtype is None else y0.astype(dtype)  # (float32 tokens: projected, in float64, on entry)
        _fast._CACHE.clear()
        _gen._CACHE.clear()
        _warp._CACHE.clear()
        _warp.FORM = "lanes" if lanes else "threads"
        a = ra.integrate(field, yc, span, stepper, engine="cuda", project=dtype is not None, **kw)
        specialised, generated, warp = len(_fast._CACHE), len(_gen._CACHE), len(_warp._CACHE)
        _warp.FORM = "threads"
        diff_older = None
        if older:  # the same call on the older kernels (_fast: state in global columns), or, for the lanes
            # form, on the generated thread-per-trajectory kernel: the same operations
            limit, _gen.MAX_LOCAL = _gen.MAX_LOCAL, (_gen.MAX_LOCAL if lanes else 0)
            o = ra.integrate(field, yc, span, stepper, engine="cuda", **kw)
            _gen.MAX_LOCAL = limit
            diff_older = float(np.abs(a.y - o.y).max())
        c = ra.integrate(field, y0, span, stepper, engine="compiled", **kw)
        ints = pack_field(field, tuple(np.shape(yc))).ints
        slots = {k: int(ints[getattr(lay, k)]) for k in SLOTS}
        pa, pc = a.per_trajectory, c.per_trajectory
        nan = np.isnan(np.asarray(c.y))  # the slots a stopped trajectory does not reach: NaN in both
        print(json.dumps(dict(name=name, diff=float(np.abs(a.y - c.y)[~nan].max()), t_equal=bool(np.array_equal(a.t, c.t)),
                              nan_equal=bool(np.array_equal(np.isnan(np.asarray(a.y)), nan)),
                              shape_equal=a.y.shape == c.y.shape, dtype=str(a.y.dtype), engine=a.engine,
                              nfev=int(np.max(pc.nfev)), counts_equal=bool(
                                  np.array_equal(pa.nfev, pc.nfev) and np.array_equal(pa.n_steps, pc.n_steps)
                                  and np.array_equal(pa.n_rejected, pc.n_rejected)),
                              status_equal=bool(np.array_equal(pa.status, pc.status)), success=bool(a.success),
                              specialised=specialised, generated=generated, lanes=warp, diff_older=diff_older,
                              slots=slots)))

    hemi = hemisphere_heads()
    beta = np.array([0.5, 1.0, 2.0])
    for st in ("dopri5", "dop853"):
        case(st + " hemisphere beta per trajectory, saveat inside steps",
             ra.AttentionField(hemi, beta=beta), tokens((3, 4, 3)), (0.0, 0.5), st, rtol=1e-6, atol=1e-6,
             saveat=[0.0, 0.13, 0.5], older=st == "dopri5")
    P = rng.normal(size=(2, 1, 3, 3))
    U = rng.normal(size=(2, 1, 3, 3))
    case("dop853 per-trajectory P and U, causal softmax", ra.AttentionField(P, U, mask="causal", normalization="softmax"),
         tokens((2, 5, 3)), (0.0, 1.0), "dop853", rtol=1e-7, atol=1e-7, saveat=[0.3, 1.0])
    case("dopri5 one trajectory, first_step, scalar U", ra.AttentionField(hemi, 1.5 * np.eye(3)[None]),
         tokens((1, 4, 3)), (0.0, 0.4), "dopri5",
         rtol=1e-5, atol=1e-5, saveat=[0.4], first_step=0.05)
    Usteps = PiecewiseConstantHeads([0.0, 0.2], rng.normal(size=(2, 2, 3, 3)) / 2)
    case("rk4 batch saveat, piecewise-constant U", ra.AttentionField(hemi, Usteps, beta=np.array([1.0, 3.0, 0.2, 1.5])),
         tokens((4, 3, 3)),
         (0.0, 0.5), "rk4", dt=0.1, saveat=[0.0, 0.25, 0.5])
    case("rk4 single trajectory, every step", ra.AttentionField(hemi), tokens((3, 3)), (0.0, 0.3), "rk4", dt=0.1)
    W = np.diag([2.0, 1.0, 0.5])
    # a time-varying P whose terms are not row-separable: the dense SRC_SINES kind (hemi packs compact)
    dense = TimeVaryingHeads(rng.normal(size=(1, 3, 3)) / 2, rng.normal(size=(2, 1, 3, 3)) / 2, [3.0, 5.0], [0.0, 0.5])
    ell = ra.AttentionField(dense, rng.normal(size=(1, 3, 3)) / 2, W=W, mask="causal", normalization="mean", beta=0.8)
    case("dopri5 ellipsoid, causal mean, time-varying P (dense) and constant U", ell,
         ell.manifold.projection(rng.normal(size=(2, 4, 3))), (0.0, 0.6), "dopri5", rtol=1e-6, atol=1e-6,
         saveat=[0.0, 0.31, 0.6])
    steps = PiecewiseConstantHeads([0.0, 0.25], rng.normal(size=(2, 1, 3, 3)))
    case("dop853 piecewise-constant P, time-varying U (dense), per-trajectory beta",
         ra.AttentionField(steps, dense, beta=np.array([1.0, 2.0])),
         tokens((2, 3, 3)), (0.0, 0.5), "dop853", rtol=1e-7, atol=1e-7, saveat=[0.2, 0.5])
    case("dopri5 float32", ra.AttentionField(hemi), tokens((2, 4, 3)), (0.0, 0.3), "dopri5", dtype=np.float32,
         rtol=1e-4, atol=1e-4, saveat=[0.3])
    case("dopri5 USA rescaled (scalar P, mean)", ra.usa(4.0, 3, rescaled=True), tokens((2, 4, 3)), (0.0, 0.4),
         "dopri5", rtol=1e-6, atol=1e-6, saveat=[0.2, 0.4])
    case("rk4 two constant heads P and U, softmax", ra.AttentionField(
         rng.normal(size=(2, 3, 3)) / 2, rng.normal(size=(2, 3, 3)) / 2, normalization="softmax"),
         tokens((2, 3, 3)), (0.0, 0.3), "rk4", dt=0.1, saveat=[0.0, 0.3])
    case("dopri5 max_steps reached (later slots NaN)", ra.AttentionField(hemi, beta=np.array([1.0, 8.0])),
         tokens((2, 4, 3)), (0.0, 2.0), "dopri5", rtol=1e-9, atol=1e-9, saveat=[0.0, 0.01, 1.0, 2.0], max_steps=6)
    rs = np.random.default_rng(11)  # row-separable sines (SRC_ROWSINES) with B: P per trajectory, U shared
    A = np.zeros((3, 2, 1, 3, 3))
    for k, r in enumerate((2, 0, 1)):
        A[k, :, 0, r] = rs.normal(size=(2, 3))
    A2 = np.zeros((2, 1, 3, 3))
    A2[0, 0, 1], A2[1, 0, 0] = rs.normal(size=3), rs.normal(size=3)
    sepP = TimeVaryingHeads(rs.normal(size=(2, 1, 3, 3)) / 2, A, rs.uniform(0.5, 3, 3), rs.uniform(-3, 3, 3))
    sepU = TimeVaryingHeads(rs.normal(size=(1, 3, 3)) / 2, A2, rs.uniform(0.5, 3, 2), rs.uniform(-3, 3, 2))
    case("dopri5 row-separable sines P per trajectory and U, with B", ra.AttentionField(sepP, sepU),
         tokens((2, 3, 3)), (0.0, 0.4), "dopri5", rtol=1e-6, atol=1e-6, saveat=[0.2, 0.4])
    _gen.UNROLL = False  # the loops over tokens kept (the number of tokens at run time): the same arithmetic
    case("dop853 generated with loops (UNROLL = False), ellipsoid", ell, ell.manifold.projection(
         rng.normal(size=(2, 4, 3))), (0.0, 0.3), "dop853", rtol=1e-6, atol=1e-6, saveat=[0.1, 0.3], older=True)
    case("rk4 generated with loops (UNROLL = False)", ra.AttentionField(hemi), tokens((2, 3, 3)), (0.0, 0.3), "rk4",
         dt=0.1, saveat=[0.0, 0.3])
    _gen.UNROLL = True
    _gen.MAX_LOCAL = 0  # the older kernels (fused field, state in global columns): the fallback for larger shapes
    case("dop853 fast kernels, hemisphere, saveat inside steps", ra.AttentionField(hemi), tokens((2, 3, 3)),
         (0.0, 0.3), "dop853", rtol=1e-6, atol=1e-6, saveat=[0.1, 0.3])
    _fast.MAX_LOCAL = 0  # the generic kernels (the fallback for large shapes): field scratch in global memory
    for st in ("dopri5", "dop853"):
        case(st + " generic kernels, ellipsoid causal mean, per-trajectory beta", ra.AttentionField(
             hemi, rng.normal(size=(1, 3, 3)) / 2, W=W, mask="causal", normalization="mean", beta=np.array([0.8, 1.3])),
             ell.manifold.projection(rng.normal(size=(2, 4, 3))), (0.0, 0.4), st, rtol=1e-6, atol=1e-6,
             saveat=[0.0, 0.17, 0.4])
    case("rk4 generic kernels", ra.AttentionField(hemi), tokens((2, 3, 3)), (0.0, 0.3), "rk4", dt=0.1)
    _fast.MAX_LOCAL, _gen.MAX_LOCAL = 4096, 8192
    # the lanes form (_warp): a lane per token, 32 // l trajectories per warp, idle lanes and trajectories
    case("dopri5 lanes, hemisphere 10 tokens, beta per trajectory, saveat inside steps, B = 4 (3 + 1 per warp)",
         ra.AttentionField(hemi, beta=np.array([0.5, 1.0, 2.0, 1.5])), tokens((4, 10, 3)), (0.0, 0.3), "dopri5",
         rtol=1e-6, atol=1e-6, saveat=[0.0, 0.07, 0.3], lanes=True, older=True)
    case("dop853 lanes, hemisphere, saveat inside steps", ra.AttentionField(hemi, beta=np.array([0.5, 2.0, 1.0])),
         tokens((3, 4, 3)), (0.0, 0.5), "dop853", rtol=1e-6, atol=1e-6, saveat=[0.0, 0.13, 0.5], lanes=True,
         older=True)
    case("rk4 lanes, batch saveat", ra.AttentionField(hemi, beta=np.array([1.0, 3.0, 0.2])), tokens((3, 3, 3)),
         (0.0, 0.5), "rk4", dt=0.1, saveat=[0.0, 0.25, 0.5], lanes=True)
    case("dopri5 lanes, ellipsoid, causal mean, time-varying P and constant U", ell,
         ell.manifold.projection(rng.normal(size=(2, 4, 3))), (0.0, 0.6), "dopri5", rtol=1e-6, atol=1e-6,
         saveat=[0.0, 0.31, 0.6], lanes=True)
    case("dop853 lanes, piecewise-constant P, per-trajectory beta", ra.AttentionField(steps, beta=np.array([1.0, 2.0])),
         tokens((2, 3, 3)), (0.0, 0.3), "dop853", rtol=1e-6, atol=1e-6, saveat=[0.2, 0.3], lanes=True)
    case("dopri5 lanes, float32", ra.AttentionField(hemi), tokens((2, 4, 3)), (0.0, 0.3), "dopri5", dtype=np.float32,
         rtol=1e-4, atol=1e-4, saveat=[0.3], lanes=True)
    case("dopri5 lanes, USA rescaled (scalar P, mean)", ra.usa(4.0, 3, rescaled=True), tokens((2, 4, 3)), (0.0, 0.4),
         "dopri5", rtol=1e-6, atol=1e-6, saveat=[0.2, 0.4], lanes=True)
    case("rk4 lanes, two constant heads P and U, softmax", ra.AttentionField(
         rng.normal(size=(2, 3, 3)) / 2, rng.normal(size=(2, 3, 3)) / 2, normalization="softmax"),
         tokens((2, 3, 3)), (0.0, 0.3), "rk4", dt=0.1, saveat=[0.0, 0.3], lanes=True)
    case("dopri5 lanes, max_steps reached (later slots NaN)", ra.AttentionField(hemi, beta=np.array([1.0, 8.0])),
         tokens((2, 4, 3)), (0.0, 2.0), "dopri5", rtol=1e-9, atol=1e-9, saveat=[0.0, 0.01, 1.0, 2.0], max_steps=6,
         lanes=True)
""")


@pytest.fixture(scope="module")
def simulated():
    if not numba_cuda():
        pytest.skip("numba-cuda is not installed (pip install -e '.[cuda]')")
    return simulate_cuda(SCRIPT)


N_CASES = 28


def test_simulator_runs_every_case(simulated):
    assert len(simulated) == N_CASES
    steppers = {r["name"].split()[0] for r in simulated}
    assert steppers == {"rk4", "dopri5", "dop853"}
    # the generated kernels (riemattn.solvers.compiled.cuda._gen) ran every case but the fallbacks: the
    # older kernels with the field fused (_fast) and the generic ones, and the lanes form (_warp)
    for r in simulated:
        older, lanes = "fast" in r["name"] or "generic" in r["name"], "lanes" in r["name"]
        assert (r["generated"] == 0) == (older or lanes), r
        assert (r["specialised"] == 1) == ("fast" in r["name"]), r
        assert r["lanes"] == int(lanes), r
    assert sum("lanes" in r["name"] for r in simulated) == 9


def _values(prefix):
    """Every value of the kernel layout's constants named ``prefix*`` (riemattn.dynamics.kernels._kernel_layout)."""
    from riemattn.dynamics.kernels import _kernel_layout as lay

    return {v for k, v in vars(lay).items() if k.startswith(prefix) and isinstance(v, int)}


def test_generated_kernel_cases_cover_every_option_the_engine_accepts(simulated):
    """Enumerated, not listed: each value of each option of the packed field that the CUDA engine
    runs (every manifold, mask, normalization, rescaling, location of beta and the weights, head
    kind of P and U -- read from the kernel layout's constants, so a kind added there needs a case
    here) is run by at least one generated-kernel case, and P and U with one and with several heads."""
    from riemattn.dynamics.kernels import _kernel_layout as lay

    seen: dict = {}
    for r in simulated:
        if r["generated"]:
            for k, v in r["slots"].items():
                seen.setdefault(k, set()).add(v)
    # flat space: the compiled kernels' pack refuses the attention field on it (MAN_FLAT is the layer-norm
    # placements' state), so does the CUDA engine (test_unsupported_calls_are_named)
    domains = dict(MANIFOLD=_values("MAN_") - {lay.MAN_FLAT}, MASK=_values("MASK_"), NORM=_values("NORM_"), RESCALED={0, 1},
                   BETA_LOC=_values("LOC_"), P_LOC=_values("LOC_"), U_LOC=_values("LOC_"),
                   P_KIND=_values("SRC_") - {lay.SRC_IDENTITY}, U_KIND=_values("SRC_"))
    for slot, values in domains.items():
        assert values <= seen[slot], (slot, sorted(values - seen[slot]))
    for slot in ("P_HEADS", "U_HEADS"):
        assert 1 in seen[slot] and max(seen[slot]) > 1, (slot, seen[slot])


def test_generated_kernels_compute_what_the_older_ones_do(simulated):
    """The generated dopri5 kernel (literal tableau, state in local arrays), the generated dop853 one
    with its loops kept (UNROLL = False), and the older kernel with the state in global columns: the
    same operations in the same order, hence the same numbers. The lanes form (dopri5 on 10 tokens,
    B = 4; dop853) against the generated thread-per-trajectory kernel: each lane computes its row of
    the fused field with the same operations, and every sum over the components (the norms, the
    initial step) is added in the same order, hence the same numbers too."""
    rows = [r for r in simulated if r["diff_older"] is not None]
    assert len(rows) == 4 and all(r["diff_older"] == 0.0 for r in rows), rows


@pytest.mark.parametrize("k", range(N_CASES))
def test_simulated_cuda_engine_agrees_with_compiled_engine(simulated, k):
    r = simulated[k]
    assert r["engine"] == "cuda" and (r["success"] != ("max_steps" in r["name"])), r
    assert r["shape_equal"] and r["t_equal"] and r["status_equal"] and r["nan_equal"], r
    if r["dtype"] == "float32":
        # float32 storage of every state and stage (the shared kernel source computes its sums in
        # float64): each of the ~nfev evaluations rounds the state to float32 (eps 6e-8), and
        # the flow over t <= 0.5 amplifies by at most e^(|F'| t) < 10 -> 10 * nfev * eps32
        assert r["diff"] <= 10 * r["nfev"] * np.finfo(np.float32).eps, r
        return
    # float64: the same operations in the same order as the compiled engine (the simulator runs the
    # device code in Python floats); exp/sin may differ by an ulp between Python's math and LLVM's,
    # carried through nfev evaluations and the flow's growth (< 10 over these short spans)
    assert r["counts_equal"], r
    assert r["diff"] <= 10 * r["nfev"] * np.finfo(float).eps, r


@needs_numba_cuda
def test_kernels_compile_to_ptx_for_sm90_without_a_device():
    try:  # libNVVM compiles, NVRTC names the supported architectures (numba-cuda's cu12 extra has both)
        from numba.cuda.cudadrv import nvrtc, nvvm

        nvvm.NVVM()
        nvrtc.get_supported_ccs()
    except Exception as exc:  # noqa: BLE001 -- the CUDA toolkit's wheels are not installed: say so
        pytest.skip(f"libNVVM or NVRTC is not available (pip install 'numba-cuda[cu12]'): {exc}")
    from riemattn.solvers.compiled.cuda._ptx import kernels_ptx

    ptx = kernels_ptx(cc=(9, 0), which=("fixed",))
    text = ptx["fixed"]
    assert ".target sm_90" in text
    assert ".entry" in text and "fixed_kernel" in text
    # the field's kernels (compiled from riemattn.dynamics.kernels._kernel_attention) are device functions of it
    for name in ("forward", "heads_at", "tangent_rows", "rk_step"):
        assert name in text, name


@needs_numba_cuda
def test_specialised_kernels_compile_to_ptx_for_sm90_with_the_field_fused():
    try:
        from numba.cuda.cudadrv import nvrtc, nvvm

        nvvm.NVVM()
        nvrtc.get_supported_ccs()
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"libNVVM or NVRTC is not available (pip install 'numba-cuda[cu12]'): {exc}")
    from riemattn.solvers.compiled.cuda._ptx import kernels_ptx

    text = kernels_ptx(cc=(9, 0), which=("fixed",), shape=(10, 3, 2))["fixed"]
    assert ".target sm_90" in text and ".entry" in text and "fixed_kernel" in text
    assert "rk_step" in text and "heads_at" in text
    # the fused field (riemattn.solvers.compiled.cuda._fast) replaces the generic one and its scratch is
    # per-thread local memory: the generic forward is not in the kernel, local loads/stores are
    assert "forward" not in text
    assert "ld.local" in text and "st.local" in text


@pytest.mark.skipif(numba_cuda() and __import__("riemattn.solvers.compiled.cuda._engine", fromlist=["why_not"]).why_not()
                    is None, reason="a GPU (or the simulator) is available here")
def test_engine_cuda_without_gpu_raises_naming_why():
    field = ra.AttentionField(np.eye(3)[None])
    y0 = np.tile(np.eye(3)[None], (2, 1, 1))
    with pytest.raises(UnsupportedByEngine, match="engine='cuda' cannot run"):
        ra.integrate(field, y0, (0, 1), "dopri5", engine="cuda")


@needs_numba_cuda
def test_unsupported_calls_are_named():
    from riemattn.solvers.steppers import get_stepper
    from riemattn.solvers.compiled.cuda._engine import unsupported

    field = ra.AttentionField(np.eye(3)[None])
    y0 = np.tile(np.eye(3)[None], (2, 1, 1))
    why, _ = unsupported(field, get_stepper("heun"), y0, saveat=np.array([1.0]), save_fn=None, events=(),
                         progress=False, dense_output=False)
    assert any("'heun'" in w for w in why)
    why, _ = unsupported(field, get_stepper("dopri5"), y0[0], saveat=None, save_fn=print, events=("e",),
                         progress=True, dense_output=True)
    assert {"a save_fn", "events", "progress=True", "dense_output=True"} <= set(why)
    assert any("saveat" in w for w in why)
    why, _ = unsupported(ra.layernorm(field, "pre"), get_stepper("dopri5"), y0, saveat=np.array([1.0]),
                         save_fn=None, events=(), progress=False, dense_output=False)
    assert any("layer-norm" in w for w in why)
    flat = ra.AttentionField(np.eye(3)[None], W="flat")  # the compiled kernels' pack refuses it: so does cuda
    why, pack = unsupported(flat, get_stepper("dopri5"), y0, saveat=np.array([1.0]), save_fn=None, events=(),
                            progress=False, dense_output=False)
    assert pack is None and any("flat space" in w for w in why) and not any(w.endswith(".") for w in why), why


def test_a_refusal_names_the_engines_that_can_run_the_call(monkeypatch):
    """One sentence per reason, and the advice of an engine that runs the call: the compiled engine
    only where it can pack the field (dispatch with a GPU assumed: the refusal comes before any
    device work)."""
    from riemattn.solvers.compiled.cuda import _engine
    from riemattn.solvers.steppers import get_stepper

    monkeypatch.setattr(_engine, "why_not", lambda: None)
    y0 = np.tile(np.eye(3)[None], (2, 1, 1))
    args = (0.0, 1.0, None, 1e-6, 1e-6, None, np.array([1.0]), 100, (), None, False, False)
    with pytest.raises(UnsupportedByEngine) as flat:
        _engine.dispatch(ra.AttentionField(np.eye(3)[None], W="flat"), get_stepper("dopri5"), y0, *args)
    msg = str(flat.value)
    assert "flat space" in msg and "'compiled'" not in msg and "engine='numpy'" in msg and ".." not in msg, msg
    with pytest.raises(UnsupportedByEngine) as heun:
        _engine.dispatch(ra.AttentionField(np.eye(3)[None]), get_stepper("heun"), y0, *args)
    msg = str(heun.value)
    assert "'heun'" in msg and "engine='compiled' or 'numpy'" in msg and ".." not in msg, msg


@needs_numba_cuda
def test_block_size_gives_every_multiprocessor_work():
    from riemattn.solvers.compiled.cuda._engine import threads_per_block

    assert threads_per_block(100_000, sms=132) == 128  # 782 blocks of 128
    assert threads_per_block(10_000, sms=132) == 64  # 128 would give 79 blocks for 132 SMs; 64 gives 157
    assert threads_per_block(16, sms=132) == 32  # one warp
    assert threads_per_block(1000, sms=0) == 128  # no count known (the simulator): the default


@needs_numba_cuda
def test_lanes_form_is_chosen_by_batch_size(monkeypatch):
    """A thread per trajectory by default (FORM = "threads": the lanes form has not run on a GPU);
    FORM = "auto": below LANES_BELOW trajectories (and 2 <= l <= 32, the sizes fitting) a lane per
    token, else a thread per trajectory; $RIEMATTN_CUDA_FORM overrides FORM; anything else is named;
    the launch is one warp per block, ceil(B / G) blocks for G = 32 // l trajectories per warp."""
    from riemattn.experiments._papers import hemisphere_heads
    from riemattn.solvers.compiled._kernel import pack_field
    from riemattn.solvers.compiled.cuda import _warp

    monkeypatch.delenv(_warp.ENV, raising=False)
    assert _warp.FORM == "threads" and _warp.form(16, 10) == "threads"
    monkeypatch.setattr(_warp, "FORM", "auto")
    below = _warp.LANES_BELOW
    assert _warp.form(16, 10) == "lanes" and _warp.form(below - 1, 10) == "lanes"
    assert _warp.form(below, 10) == "threads" and _warp.form(10**6, 10) == "threads"
    assert _warp.form(16, 33) == "threads" and _warp.form(16, 1) == "threads"
    monkeypatch.setenv(_warp.ENV, "lanes")
    assert _warp.form(10**6, 10) == "lanes"
    monkeypatch.setattr(_warp, "FORM", "threads")
    monkeypatch.setenv(_warp.ENV, "auto")
    assert _warp.form(16, 10) == "lanes"
    monkeypatch.setenv(_warp.ENV, "sideways")
    with pytest.raises(ValueError, match="'lanes', 'threads' or 'auto'"):
        _warp.form(16, 10)
    monkeypatch.delenv(_warp.ENV)
    monkeypatch.setattr(_warp, "FORM", "auto")
    ints = pack_field(ra.AttentionField(hemisphere_heads()), (16, 10, 3)).ints
    picked = _warp.select("dopri5", ints, False, 16)
    assert picked is not None and picked[2] == (6, 32)  # 3 trajectories per warp: 6 warps for 16
    assert _warp.select("dopri5", ints, False, below) is None
    assert _warp.select("heun", ints, False, 16) is None  # no generated step for it
    wide = pack_field(ra.AttentionField(np.eye(40)[None] / 40), (4, 8, 40)).ints  # 40 x 40 heads per lane
    assert not _warp.fits("dop853", wide) and _warp.select("dop853", wide, False, 4) is None


# The lanes form's reductions alone (riemattn.solvers.compiled.cuda._warp_parts), under the simulator:
# 8 trajectories of 4 tokens (d = 3) fill a warp; token 1 of trajectory 1 (lane 5) has an infinite
# component. Printed: the sums, the RMS norm and the fixed-step loop's finiteness, per lane.
LANE_PARTS = textwrap.dedent(r"""
    import json, math, numpy as np
    from numba import cuda, float64
    from riemattn.solvers.compiled.cuda import _warp_parts as wp
    L, D = 4, 3
    sync = wp._syncblock
    group_sums = wp.make_reductions(L, D, sync)
    rms_norm = wp.make_norms(L, D, group_sums, None, None)[0]

    @cuda.jit(device=True)
    def inner(A, bb, c, e, s, adaptive, flat, t, y, h, K, has_k1, b, ints, floats, per, w, x, X, r, y_new, r_new,
              err, l, d):
        for a in range(D):
            y_new[a] = 1.0 + 0.25 * a + cuda.laneid / 7.0
        if cuda.laneid == 5:
            y_new[2] = math.inf
        return 4

    step = wp.uniform_step(inner, group_sums, D)

    @cuda.jit
    def kernel(terms, sums, norms, finite):
        lane = cuda.laneid
        u = cuda.local.array(D, float64)
        y = cuda.local.array(D, float64)
        y_new = cuda.local.array(D, float64)
        err = cuda.local.array(D, float64)
        for a in range(D):
            u[a] = terms[lane, a]
            y[a] = 1.0
            err[a] = 1e-7 * (a + 1) * (lane + 1)
        su, sv = group_sums(u, u)
        sums[lane] = su
        step(u, u, u, u, 0, False, False, 0.0, y, 0.1, u, False, 0, u, u, u, u, u, u, u, y_new, u, u, 1, D)
        ok = 1
        for a in range(D):
            if not math.isfinite(y_new[a]):
                ok = 0
        finite[lane] = ok
        norms[lane] = rms_norm(err, y, y_new, 1e-6, 1e-6, D)

    terms = np.random.default_rng(0).uniform(0.0, 1.0, (32, D)) * 10.0 ** np.arange(-8, 8, 0.5)[:, None]
    sums, norms, finite = np.zeros(32), np.zeros(32), np.zeros(32, dtype=np.int64)
    kernel[1, 32, 0, 8 * 8 * 2 * L * D](terms, sums, norms, finite)
    print(json.dumps(dict(terms=terms.tolist(), sums=sums.tolist(), norms=norms.tolist(), finite=finite.tolist())))
""")


@needs_numba_cuda
def test_lanes_sum_in_the_compiled_engines_order_and_agree_on_non_finite_steps():
    """Every lane of a trajectory gets the sum of its n = l d terms added in component order (the
    compiled engine's loop: the same number, to the bit, over terms spanning 16 decades, where
    another order rounds differently); an infinite component in one token makes the RMS error norm
    NaN and the fixed-step loop's step non-finite in every lane of that trajectory and of no other
    (so all lanes of a trajectory take the same decision)."""
    r = simulate_cuda(LANE_PARTS, timeout=300)[-1]
    terms = np.array(r["terms"])
    for g in range(8):
        seq = 0.0
        for v in terms[4 * g:4 * g + 4].ravel():  # token-major, component order
            seq += v
        assert all(r["sums"][lane] == seq for lane in range(4 * g, 4 * g + 4)), (g, seq, r["sums"])
    assert np.sum(terms[:4].ravel()[::-1]) != r["sums"][0]  # the order matters for these terms
    assert r["finite"] == [0 if 4 <= lane < 8 else 1 for lane in range(32)], r["finite"]
    norms = np.array(r["norms"])
    assert np.isnan(norms[4:8]).all() and np.isfinite(np.delete(norms, range(4, 8))).all(), norms
    assert all(len(set(norms[4 * g:4 * g + 4])) == 1 for g in (0, 2, 3, 4, 5, 6, 7)), norms


def test_auto_never_picks_cuda_for_numpy_input():
    field = ra.AttentionField(np.eye(3)[None])
    y0 = np.tile(np.eye(3)[None], (2, 1, 1))
    assert ra.integrate(field, y0, (0, 0.1), "dopri5", engine="auto").engine != "cuda"
