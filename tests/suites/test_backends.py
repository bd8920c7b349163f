"""The PyTorch backend: the same field, steppers and ``integrate`` on tensors as on NumPy arrays.

The reference of every comparison is the NumPy path (itself tested against exact solutions,
independent loop formulas and tight SciPy solves elsewhere). float64 tensors on the CPU must give
the NumPy results to 1e-12 with the same step sequence (per-trajectory step counts, rejections,
field evaluations); outputs keep the tokens' kind, device and dtype. CUDA tests are marked
``cuda`` and skipped without a GPU.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

import riemattn as ra  # noqa: E402
from riemattn.experiments._papers import hemisphere_P  # noqa: E402
from riemattn.solvers.steppers import get_stepper  # noqa: E402

from riemattn.testing import strategies as rs  # noqa: E402

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
TOL = 1e-12


def _rng(seed=0):
    return np.random.default_rng(seed)


def _fields():
    """AttentionFields covering the code paths: P constant / scalar (SA, USA) / time-dependent /
    time-vectorized, U given, masks, normalizations, ellipsoid, per-trajectory beta."""
    rng = _rng(1)
    P = rng.uniform(-1, 1, (2, 3, 3))
    U = rng.uniform(-1, 1, (2, 3, 3))
    W = np.diag([1.0, 2.0, 4.0])
    return {
        "full": ra.AttentionField(P),
        "causal-U": ra.AttentionField(P, U, mask="causal"),
        "ellipsoid-softmax": ra.AttentionField(P, W=W, normalization="softmax"),
        "usa-mean": ra.usa(2.0, 3),
        "sa-beta-array": ra.sa(np.array([0.5, 1.0, 3.0, 9.0]), 3),
        "time-P": ra.AttentionField(lambda t: np.cos(3 * t) * P),
        "time-vectorized-P": ra.AttentionField(hemisphere_P, time_vectorized=True),
        "time-U": ra.AttentionField(P, lambda t: (1 + np.sin(t)) * U),
        **_part_fields(P, U),
    }


def _part_fields(P, U):
    """Attention from parts (issue 55), enumerated from the edges suite's registries: every mask and bias
    part (a time-dependent bias at per-trajectory times too), every normalization outside the softmax
    family (hardmax on flat space), the uncentred update, a context; a part added there is covered here."""
    from _edge_problems import BIAS_PARTS, MASK_PARTS, ROWLESS_MASKS
    from riemattn.dynamics.attention import OTHER_NORMALIZATIONS

    out = {}
    for m, make in MASK_PARTS.items():
        out[f"mask-{m}"] = ra.AttentionField(P, U, mask=make(), normalization="mean" if m in ROWLESS_MASKS else "softmax")
    for b, make in BIAS_PARTS.items():
        out[f"bias-{b}"] = ra.AttentionField(P, U, mask="causal", bias=make(), normalization="mean")
    for n in OTHER_NORMALIZATIONS:
        out[f"normalization-{n}"] = ra.AttentionField(P, U, normalization=n, W="flat" if n == "hardmax" else None)
    out["uncentred"] = ra.AttentionField(P, U, W="flat", normalization="softmax", update="uncentred")
    out["context"] = ra.AttentionField(P, U, context=_rng(2).normal(size=(3, 3)))
    return out


FIELDS = _fields()


def _y0(field, batch=(4,), l=5, seed=0):
    y = _rng(seed).normal(size=batch + (l, field.d))
    return field.manifold.projection(y)


def _same(a, b_tensor, tol=TOL):
    assert isinstance(b_tensor, torch.Tensor)
    np.testing.assert_allclose(b_tensor.detach().cpu().numpy(), a, rtol=0, atol=tol)


# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(FIELDS))
def test_field_update_attention_equal_numpy(name):
    field = FIELDS[name]
    y = _y0(field)
    t = np.array([0.1, 0.4, 0.4, 0.9])  # per-trajectory times
    for tt in (0.3, t):
        tt_t = tt if np.ndim(tt) == 0 else torch.as_tensor(tt)
        _same(field(tt, y), field(tt_t, torch.as_tensor(y)))
        _same(field.update(tt, y), field.update(tt_t, torch.as_tensor(y)))
    _same(field.attention(0.3, y), field.attention(0.3, torch.as_tensor(y)))


STEP_CASES = [(s, f) for s in sorted(ra.STEPPERS) for f in ("full", "time-vectorized-P", "ellipsoid-softmax")]


@pytest.mark.parametrize("stepper,name", STEP_CASES)
def test_every_stepper_one_step_equals_numpy(stepper, name):
    """One step with per-trajectory times and step sizes, every registered stepper."""
    field, step = FIELDS[name], get_stepper(stepper)
    y = _y0(field)
    t = np.array([0.0, 0.2, 0.5, 1.0])
    h = np.array([0.05, 0.1, 0.02, 0.07])
    a = step.step(field, t, y, h)
    b = step.step(field, torch.as_tensor(t), torch.as_tensor(y), torch.as_tensor(h))
    _same(a.y, b.y)
    assert a.nfev == b.nfev


def _run(field, y0, stepper, **kw):
    T = kw.pop("T", 2.0)
    if ra.STEPPERS[stepper].adaptive:
        kw.setdefault("rtol", 1e-8)
        kw.setdefault("atol", 1e-10)
    else:
        kw.setdefault("dt", 0.05)
    # the NumPy engine's array backends are compared (tensors run there only; the compiled
    # engine counts per-trajectory evaluations its own way: docs/performance.md)
    kw.setdefault("engine", "numpy")
    return ra.integrate(field, y0, (0.0, T), stepper=stepper, **kw)


#: The stiff steppers step tensors on the host with NumPy: the same arithmetic, but einsum's SIMD
#: reductions round differently with the alignment of the (copied) arrays, and the per-stage
#: linear solves amplify that (measured: up to 3e-12 after 2 time units; step sequences equal).
STIFF_TOL = 1e-11


def _same_solution(a, b, tol=TOL):
    _same(a.y, b.y, tol)
    pa, pb = a.per_trajectory, b.per_trajectory
    for key in ("nfev", "n_steps", "n_rejected", "status"):
        np.testing.assert_array_equal(getattr(pa, key), getattr(pb, key), err_msg=key)
    assert a.nfev == b.nfev and a.success and b.success
    np.testing.assert_array_equal(a.t, b.t)


@pytest.mark.parametrize("stepper", sorted(ra.STEPPERS))
def test_integrate_every_stepper_equals_numpy(stepper):
    """Whole integrations: same tokens to 1e-12, same per-trajectory step sequence."""
    field = FIELDS["time-vectorized-P"]
    y0 = _y0(field, batch=(3,))
    saveat = np.linspace(0.0, 2.0, 5)
    tol = STIFF_TOL if getattr(ra.STEPPERS[stepper], "stiff", False) else TOL
    _same_solution(_run(field, y0, stepper, saveat=saveat),
                   _run(field, torch.as_tensor(y0), stepper, saveat=saveat), tol)


@pytest.mark.parametrize("name", ["sa-beta-array", "causal-U", "time-P", "usa-mean"])
def test_adaptive_batch_with_compaction_and_dense_output_equals_numpy(name):
    """Per-trajectory steps: trajectories finish at different steps (beta from 0.5 to 9), the
    batch is compacted, save points come from the dense output."""
    field = FIELDS[name]
    y0 = _y0(field, batch=(4,), l=6, seed=3)
    for stepper in ("dopri5", "dop853"):
        kw = dict(saveat=np.linspace(0.0, 3.0, 13), T=3.0)
        a = _run(field, y0, stepper, **kw)
        b = _run(field, torch.as_tensor(y0), stepper, **kw)
        _same_solution(a, b)
        if name == "sa-beta-array" and stepper == "dopri5":
            assert len(set(a.per_trajectory.n_steps.tolist())) > 1  # the steps really differ


def test_save_fn_observables_stay_tensors():
    field = FIELDS["full"]
    y0 = _y0(field)

    def obs(t, y):
        return {"first": y[..., 0, 0], "sq": (y ** 2).sum(-1)}

    a = ra.integrate(field, y0, (0, 1), "dopri5", saveat=[0, 0.5, 1], save_fn=obs)
    b = ra.integrate(field, torch.as_tensor(y0), (0, 1), "dopri5", saveat=[0, 0.5, 1], save_fn=obs)
    for k in ("first", "sq"):
        _same(a.observables[k], b.observables[k])
    empty = torch.zeros((0,) + tuple(y0.shape), dtype=torch.float64)  # an empty batch keeps them
    c = ra.integrate(field, empty, (0, 1), "dopri5", saveat=[0, 0.5, 1], save_fn=obs)
    assert {k: (type(v), tuple(v.shape), v.dtype) for k, v in c.observables.items()} == {
        k: (torch.Tensor, (3, 0) + tuple(v.shape[1:]), v.dtype) for k, v in b.observables.items()}


def test_empty_batch_and_single_trajectory():
    field = FIELDS["full"]
    empty = torch.zeros((0, 5, 3), dtype=torch.float64)
    sol = ra.integrate(field, empty, (0, 1), "rk4", dt=0.1)
    assert isinstance(sol.y, torch.Tensor) and sol.y.shape[1:] == (0, 5, 3)
    y0 = _y0(field, batch=())
    kw = dict(saveat=[0.0, 0.25, 1.0])
    _same_solution(ra.integrate(field, y0, (0, 1), "dop853", **kw),
                   ra.integrate(field, torch.as_tensor(y0), (0, 1), "dop853", **kw))
    # saveat=None saves at every step: the step endpoints agree to rounding of the step-size
    # control. The error estimate is a difference of nearly equal stage sums (here ~1e-13 against
    # stages of size 1), so rounding differences of 1e-16 between the libraries' products move
    # the step sizes by ~1e-7 relative; the step sequence (counts, accept/reject) is the same.
    a = ra.integrate(field, y0, (0, 1), "dop853")
    b = ra.integrate(field, torch.as_tensor(y0), (0, 1), "dop853")
    assert a.n_steps == b.n_steps and a.n_rejected == b.n_rejected and len(a.t) == len(b.t)
    np.testing.assert_allclose(b.t, a.t, rtol=1e-6)


def test_failures_reported_per_trajectory_like_numpy():
    """max_steps and non-finite values give the same statuses on both backends."""
    field = FIELDS["sa-beta-array"]
    y0 = _y0(field)
    a = ra.integrate(field, y0, (0, 5), "dopri5", rtol=1e-10, max_steps=15)
    b = ra.integrate(field, torch.as_tensor(y0), (0, 5), "dopri5", rtol=1e-10, max_steps=15)
    np.testing.assert_array_equal(a.per_trajectory.status, b.per_trajectory.status)
    assert a.message == b.message and not b.success

    def blowup(t, y):
        return torch.where(torch.as_tensor(t > 0.3), torch.nan, 0.0) * y

    ff = ra.fields.VectorField(lambda t, y: y * 0 + (np.nan if t > 0.3 else 0.0), ra.Euclidean(2))
    z = torch.ones((2, 1, 2), dtype=torch.float64)
    sol = ra.integrate(ff, z, (0, 1), "rk4", dt=0.1)
    assert (sol.per_trajectory.status == -3).all()
    assert isinstance(sol.y, torch.Tensor)


@pytest.mark.parametrize("stepper", ["rk4", "dop853"])
def test_float32_stays_float32(stepper):
    """float32 is allowed where the user asks for it: outputs stay float32 and agree with the
    float64 solution to float32 accuracy."""
    field = FIELDS["time-vectorized-P"]
    y0 = _y0(field, batch=(2,))
    y32 = torch.as_tensor(y0, dtype=torch.float32)
    kw = dict(rtol=1e-5, atol=1e-6) if stepper == "dop853" else {}
    b = _run(field, y32, stepper, saveat=[0.0, 1.0, 2.0], **kw)
    assert b.y.dtype == torch.float32 and field(0.0, y32).dtype == torch.float32
    a = _run(field, y0, stepper, saveat=[0.0, 1.0, 2.0], **kw)  # float64, same tolerances
    np.testing.assert_allclose(b.y.numpy(), a.y, atol=1e-4)
    np.testing.assert_allclose(np.linalg.norm(b.y.numpy(), axis=-1), 1.0, atol=1e-5)


def test_layer_equals_numpy():
    rng = _rng(5)
    d, h = 4, 2
    Q, K, V = (rng.normal(size=(h, d, d)) for _ in range(3))
    Wo = rng.normal(size=(h, d, d))
    layer = ra.TransformerLayer(Q, K, V, Wo)
    y = layer.manifold.projection(rng.normal(size=(3, 6, d)))
    _same(layer(y), layer(torch.as_tensor(y)))


def test_numpy_results_unchanged_by_importing_torch():
    """Sanity: NumPy in, NumPy out (no tensor leaks into the NumPy path)."""
    field = FIELDS["causal-U"]
    sol = _run(field, _y0(field), "dopri5")
    assert type(sol.y) is np.ndarray and sol.y.dtype == np.float64


# ----------------------------------------------------------------------------------------------
# property test on both backends: ICML Thm 3.2 (forward invariance of the hemisphere H+(v))
@settings(max_examples=40)
@given(d=st.integers(2, 4), l=st.integers(1, 5), h=st.integers(1, 2), data=st.data())
def test_hemisphere_invariance_property_on_tensors(d, l, h, data):
    M = data.draw(rs.manifolds(dims=d))
    P = data.draw(rs.head_matrices(h, d, time_varying=True))
    y0, v = data.draw(rs.hemisphere_points(M, tokens=l))
    field = ra.AttentionField(P, W=None if isinstance(M, ra.Sphere) else M.W)
    a = ra.integrate(field, y0, (0, 0.2), "rk4", dt=0.02)
    b = ra.integrate(field, torch.as_tensor(y0), (0, 0.2), "rk4", dt=0.02)
    m = (b.y.numpy() @ v).min(axis=-1)
    assert np.all(m > 0) and np.all(np.diff(m) >= -1e-12)
    np.testing.assert_allclose(b.y.numpy(), a.y, atol=1e-12)


# ----------------------------------------------------------------------------------------------
@pytest.mark.cuda
@CUDA
@pytest.mark.parametrize("stepper", ["rk4", "dopri5", "dop853"])
def test_cuda_matches_cpu(stepper):
    field = FIELDS["time-vectorized-P"]
    y0 = torch.as_tensor(_y0(field, batch=(8,)))
    a = _run(field, y0, stepper, saveat=[0.0, 1.0, 2.0])
    b = _run(field, y0.cuda(), stepper, saveat=[0.0, 1.0, 2.0])
    assert b.y.device.type == "cuda"
    np.testing.assert_allclose(b.y.cpu().numpy(), a.y.numpy(), atol=1e-10)


# ----------------------------------------------------------------------------------------------
# riemattn.use_device and the CLI's --device
def test_use_device_rejects_bad_devices():
    for bad in ("gpu", "cuda:x", "", "CPU"):
        with pytest.raises(ra.ValidationError, match="device"):
            with ra.use_device(bad):
                pass
    if not torch.cuda.is_available():
        with pytest.raises(ra.ValidationError, match="no such CUDA device"):
            with ra.use_device("cuda:0"):
                pass


def test_device_context_runs_numpy_inputs_through_torch(monkeypatch):
    """Under a device context NumPy tokens are integrated as tensors and the results come back as
    NumPy (what --device does). The CUDA device itself is exercised by the cuda-marked tests; the
    torch path is forced on the CPU here through the context variable."""
    from riemattn import _backend

    field = FIELDS["time-P"]
    y0 = _y0(field)
    seen = []

    def obs(t, y):
        seen.append(type(y))
        return y[..., 0, :]

    a = ra.integrate(field, y0, (0, 1), "dopri5", saveat=[0, 0.5, 1], save_fn=obs)
    token = _backend._DEVICE.set("cpu")
    try:
        calls = []
        orig = ra.integrate.__globals__["convert"]
        monkeypatch.setitem(ra.integrate.__globals__, "convert",
                            lambda v, like, dtype=None: calls.append(like.device) or orig(v, like, dtype))
        b = ra.integrate(field, y0, (0, 1), "dopri5", saveat=[0, 0.5, 1], save_fn=obs)
    finally:
        _backend._DEVICE.reset(token)
    assert calls, "the NumPy input was not converted to a tensor"
    assert type(b.observables["value"]) is np.ndarray and set(seen) == {np.ndarray}
    np.testing.assert_allclose(b.observables["value"], a.observables["value"], rtol=0, atol=1e-12)


def test_cli_simulate_device_is_checked(tmp_path, capsys):
    from pathlib import Path

    from riemattn.cli import main

    cfg = Path(__file__).resolve().parents[2] / "examples" / "two_heads_ellipsoid.toml"
    assert main(["simulate", str(cfg), "--out", str(tmp_path / "o"), "--device", "gpu"]) == 2
    assert "device must be 'cpu', 'cuda' or 'cuda:N'" in capsys.readouterr().err
    assert not (tmp_path / "o" / "data.nc").exists()


def test_to_xarray_and_to_numpy_from_tensors():
    field = FIELDS["full"]
    y0 = _y0(field)
    a = ra.integrate(field, y0, (0, 1), "rk4", dt=0.1)
    b = ra.integrate(field, torch.as_tensor(y0), (0, 1), "rk4", dt=0.1)
    np.testing.assert_allclose(b.to_xarray()["y"].values, a.to_xarray()["y"].values, atol=1e-12)
    assert type(b.to_numpy().y) is np.ndarray and isinstance(b.y, torch.Tensor)


def test_linear_field_exact_flow_on_tensors():
    """LinearField (y' = A y, A in o(W)): the Lie-group steppers reproduce expm(tA) y0 on tensors."""
    from scipy.linalg import expm

    W = np.diag([1.0, 2.0, 3.0])
    S = np.array([[0.0, 1.0, -0.5], [-1.0, 0.0, 2.0], [0.5, -2.0, 0.0]])
    A = np.linalg.solve(W, S)  # W A is skew, so A^T W + W A = 0
    field = ra.LinearField(A, ra.Ellipsoid(W))
    y0 = field.manifold.projection(_rng(7).normal(size=(2, 3, 3)))
    exact = y0 @ expm(0.7 * A).T
    for stepper in ("rkmk4", "cf4"):
        b = ra.integrate(field, torch.as_tensor(y0), (0, 0.7), stepper, dt=0.1)
        _same(exact, b.y[-1], tol=1e-12)
    _same(field(0.2, y0), field(0.2, torch.as_tensor(y0)))


# ----------------------------------------------------------------------------------------------
# the reproductions through the torch path (what `reproduce --device cuda` runs), forced on the CPU
from riemattn.experiments import available  # noqa: E402
from riemattn.experiments._runner import accepts_device, config_for  # noqa: E402

NUMERIC = [n for n, m in available().items() if not accepts_device(m)]
#: reproductions that draw noise: their torch run is a different sample of the same law
STOCHASTIC = {"glpr-noise"}


@pytest.mark.parametrize("name", NUMERIC)
def test_reproduction_through_torch_gives_the_numpy_data(name):
    """Each numerical reproduction (smoke size) run under a device context, its integrations on
    torch tensors: same variables, dims and values as the NumPy run (to 1e-6 relative: adaptive
    step sizes follow rounding, see test_empty_batch_and_single_trajectory)."""
    from riemattn import _backend

    module = available()[name]
    cfg = config_for(module, smoke=True)
    a = module.run(cfg)
    token = _backend._DEVICE.set("cpu")
    try:
        b = module.run(cfg)
    finally:
        _backend._DEVICE.reset(token)
    timings = set(getattr(module, "TIMINGS", ()))
    assert set(a.data_vars) == set(b.data_vars)
    if name in STOCHASTIC:
        # NumPy's and torch's random streams differ (riemattn.solvers.sde): the same layout and the
        # same verdict on every claim, not the same numbers
        for v in a.data_vars:
            assert a[v].dims == b[v].dims, v
        status = lambda ds: {k: c.get("status", c.get("passed")) for k, c in module.claims(ds).items()}
        assert status(a) == status(b)
        return
    for v in a.data_vars:
        assert a[v].dims == b[v].dims, v
        if v in timings or a[v].dtype.kind not in "fiu":
            continue
        np.testing.assert_allclose(b[v].values, a[v].values, rtol=1e-6, atol=1e-8, err_msg=v)


def _numpy_only(fn, calls):
    """``fn`` that refuses tensors (as NumPy code on CUDA tensors does) and logs what it got."""
    def wrapped(*args):
        kinds = tuple(type(a).__module__.split(".")[0] for a in args)
        calls.append(kinds)
        if "torch" in kinds:
            raise TypeError("this function takes NumPy arrays")
        return fn(*args)
    return wrapped


def test_numpy_only_callables_fall_back_to_host_copies():
    """A VectorField func or time-vectorized P(t) that raises on tensors is retried with NumPy
    copies, once for all (later calls go straight to the host), and gives the NumPy result."""
    y0 = ra.Sphere(2).projection(_rng(5).normal(size=(3, 4, 3)))
    vf_calls, p_calls = [], []
    fields = {
        "vector": (ra.VectorField(_numpy_only(lambda t, y: ra.usa(2.0, 3)(t, y), vf_calls), ra.Sphere(2)),
                   ra.VectorField(lambda t, y: ra.usa(2.0, 3)(t, y), ra.Sphere(2)), vf_calls),
        "P": (ra.AttentionField(_numpy_only(hemisphere_P, p_calls), time_vectorized=True),
              ra.AttentionField(hemisphere_P, time_vectorized=True), p_calls),
    }
    for name, (host_only, plain, calls) in fields.items():
        a = ra.integrate(plain, y0, (0, 1), "dopri5", rtol=1e-9, atol=1e-9)
        calls.clear()
        b = ra.integrate(host_only, torch.as_tensor(y0), (0, 1), "dopri5", rtol=1e-9, atol=1e-9)
        assert isinstance(b.y, torch.Tensor), name
        np.testing.assert_allclose(b.y.numpy(), a.y, rtol=0, atol=TOL, err_msg=name)
        tensor_calls = [c for c in calls if "torch" in c]
        assert len(tensor_calls) == 1, (name, tensor_calls)  # tried once, then host copies only
        after = calls[calls.index(tensor_calls[0]) + 1:]
        assert len(after) > 10 and all("torch" not in c for c in after), name


def test_numpy_only_callable_errors_on_the_host_name_the_callable():
    """After the fallback, the callable's own errors are wrapped as ValidationError naming it and
    the time as a number."""
    def bad(t, y):
        if not isinstance(y, np.ndarray):
            raise TypeError("NumPy only")
        raise ZeroDivisionError("user bug")

    field = ra.VectorField(bad, ra.Sphere(1))
    y = torch.as_tensor(ra.Sphere(1).projection(np.ones((2, 2))))
    with pytest.raises(ra.ValidationError, match=r"func\(t, y\) raised ZeroDivisionError.*at t = 0.5\.") as info:
        field(torch.tensor(0.5, dtype=torch.float64), y)
    assert isinstance(info.value.__cause__, ZeroDivisionError)
