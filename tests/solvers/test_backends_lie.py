"""One code path, two array kinds: the Lie-group steppers, their frames and low-rank exponentials,
and the trajectory diagnostics give on PyTorch tensors (CPU) what they give on NumPy arrays.

float64 tensors must match NumPy to 1e-12; float32 tensors must stay float32 (and agree to
float32 accuracy). Every result must be a tensor on the input's device. Fields here are written
once against the array API (``namespace(y)``), so the same callable serves both kinds.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

import riemattn as ra  # noqa: E402
from riemattn import diagnostics as dg  # noqa: E402
from riemattn._backend import constant, namespace  # noqa: E402
from riemattn.experiments._papers import hemisphere_P  # noqa: E402
from riemattn.solvers.lie import LieStepper, LinearField  # noqa: E402
from riemattn.geometry.lowrank import WOrthoBasis, expm_small_action, lowrank_expm_action, rank2_expm_action  # noqa: E402

from riemattn.testing import strategies as rs  # noqa: E402

LIE = sorted(name for name, cls in ra.STEPPERS.items() if issubclass(cls, LieStepper))
D = 4


def _W():
    rng = np.random.default_rng(3)
    B = rng.standard_normal((D, D))
    return B @ B.T / D + 0.5 * np.eye(D)


MANIFOLDS = {
    "sphere": lambda: ra.Sphere(D - 1),
    "ellipsoid": lambda: ra.Ellipsoid(_W()),
    "euclidean": lambda: ra.manifolds.Euclidean(D),
}


class GenericField:
    """``F(t, y) = tangent(y, (1 + a sin(omega t)) y B^T)``, written once for NumPy and tensors.

    ``t`` a float or one time per trajectory (NumPy array or tensor); ``omega = 0`` is a constant
    field. ``B`` is converted once per device and dtype (riemattn._backend.constant)."""

    def __init__(self, manifold, omega=0.0, seed=0):
        self.manifold = manifold
        self.omega = omega
        self.B = 0.6 * np.random.default_rng(seed).standard_normal((D, D))
        self._consts = {}
        self.calls = []

    def __call__(self, t, y):
        xp = namespace(y)
        self.calls.append(type(t).__name__)
        v = y @ constant(self._consts, "B", self.B, y).mT if xp is not np else y @ self.B.T
        if self.omega:
            if isinstance(t, (float, int)):
                v = v * (1.0 + 0.5 * float(np.sin(self.omega * t)))
            else:
                s = xp.sin(self.omega * t)
                v = v * (1.0 + 0.5 * s)[..., None, None]
        return self.manifold.tangent(y, v)


def _tokens(manifold, shape=(3, 5, D), seed=1):
    return manifold.retract(np.random.default_rng(seed).standard_normal(shape))


def _check_kind(out, like):
    assert torch.is_tensor(out), type(out)
    assert out.device == like.device and out.dtype == like.dtype, (out.device, out.dtype)


# ----------------------------------------------------------------------------------------------
# steppers
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("omega", [0.0, 3.0], ids=["constant", "time-dependent"])
@pytest.mark.parametrize("mname", sorted(MANIFOLDS))
@pytest.mark.parametrize("name", LIE)
def test_step_torch_float64_equals_numpy(name, mname, omega):
    M = MANIFOLDS[mname]()
    f = GenericField(M, omega)
    y = _tokens(M)
    stepper = ra.STEPPERS[name]()
    ref = stepper.step(f, 0.3, y, 0.25)
    yt = torch.as_tensor(y)
    res = stepper.step(f, 0.3, yt, 0.25)
    _check_kind(res.y, yt)
    assert res.nfev == ref.nfev
    np.testing.assert_allclose(res.y.numpy(), ref.y, rtol=0, atol=1e-12)
    if ref.error is None:
        assert res.error is None
    else:
        _check_kind(res.error, yt)
        np.testing.assert_allclose(res.error.numpy(), ref.error, rtol=0, atol=1e-12)
    if mname != "euclidean":
        assert M.deviation(res.y) < 1e-13


@pytest.mark.parametrize("mname", ["sphere", "ellipsoid"])
@pytest.mark.parametrize("name", LIE)
def test_step_float32_stays_float32(name, mname):
    M = MANIFOLDS[mname]()
    f = GenericField(M, 3.0)
    y = _tokens(M)
    y32 = torch.as_tensor(y, dtype=torch.float32)
    res = ra.STEPPERS[name]().step(f, 0.3, y32, 0.25)
    _check_kind(res.y, y32)
    ref = ra.STEPPERS[name]().step(f, 0.3, y, 0.25).y
    np.testing.assert_allclose(res.y.double().numpy(), ref, rtol=0, atol=2e-6)
    assert M.deviation(res.y) < 1e-5


@pytest.mark.parametrize("name", LIE)
def test_step_per_trajectory_h_as_tensor(name):
    """Step sizes of one value per trajectory, given as a tensor (the frames' combinations and
    single exponentials), with a field that needs no time (the time arithmetic is steppers.py's)."""
    M = MANIFOLDS["ellipsoid"]()
    f = GenericField(M, 0.0)
    y = _tokens(M)
    h = np.array([0.1, 0.25, 0.4])
    ref = ra.STEPPERS[name]().step(f, 0.0, y, h)
    try:
        res = ra.STEPPERS[name]().step(f, 0.0, torch.as_tensor(y), torch.as_tensor(h))
    except TypeError as exc:  # pragma: no cover - steppers.shifted_time not yet backend-generic
        pytest.skip(f"steppers.shifted_time on tensors: {exc}")
    _check_kind(res.y, torch.as_tensor(y))
    np.testing.assert_allclose(res.y.numpy(), ref.y, rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", LIE)
def test_linear_field_dense_frame_on_tensors(name):
    """A field with ``lie_generator`` (dense frame) whose generator is a NumPy constant: the step
    converts it to the tokens' kind and reproduces expm(h A) y exactly, as on NumPy."""
    rng = np.random.default_rng(4)
    S = rng.standard_normal((D, D))
    M = MANIFOLDS["ellipsoid"]()
    A = np.linalg.solve(M.W, S - S.T)
    f = LinearField(A, M)
    y = _tokens(M, (2, 3, D))
    yt = torch.as_tensor(y)
    res = ra.STEPPERS[name]().step(f, 0.0, yt, 0.7)
    _check_kind(res.y, yt)
    np.testing.assert_allclose(res.y.numpy(), y @ scipy.linalg.expm(0.7 * A).T, rtol=0, atol=1e-12)
    y32 = torch.as_tensor(y, dtype=torch.float32)
    _check_kind(ra.STEPPERS[name]().step(f, 0.0, y32, 0.7).y, y32)


def test_several_steps_follow_numpy():
    """Twenty RKMK4 steps of the time-dependent field on the ellipsoid: the trajectories agree."""
    M = MANIFOLDS["ellipsoid"]()
    f = GenericField(M, 3.0)
    y = _tokens(M)
    yt = torch.as_tensor(y)
    st_ = ra.STEPPERS["rkmk4"]()
    for k in range(20):
        y = st_.step(f, 0.1 * k, y, 0.1).y
        yt = st_.step(f, 0.1 * k, yt, 0.1).y
    np.testing.assert_allclose(yt.numpy(), y, rtol=0, atol=1e-12)


# ----------------------------------------------------------------------------------------------
# low-rank exponentials
# ----------------------------------------------------------------------------------------------
def test_lowrank_functions_on_tensors():
    rng = np.random.default_rng(5)
    W = _W()
    U, V = rng.standard_normal((2, 2, 3, D))
    x = rng.standard_normal((2, D))
    ref = lowrank_expm_action(U, V, x, W)
    for dtype, tol in ((torch.float64, 1e-12), (torch.float32, 2e-5)):
        xt = torch.as_tensor(x, dtype=dtype)
        out = lowrank_expm_action(torch.as_tensor(U), V, xt, torch.as_tensor(W))
        _check_kind(out, xt)
        np.testing.assert_allclose(out.double().numpy(), ref, rtol=0, atol=tol)
    u, v = U[:, 0], V[:, 0]
    ref = rank2_expm_action(u, v, x, W, increment=True)
    out = rank2_expm_action(torch.as_tensor(u), torch.as_tensor(v), torch.as_tensor(x), W, increment=True)
    _check_kind(out, torch.as_tensor(x))
    np.testing.assert_allclose(out.numpy(), ref, rtol=0, atol=1e-12)
    # small exponentials: the Taylor path, the scaled path and the matrix_exp path (norm > 128)
    for scale in (0.5, 20.0, 400.0):
        S = rng.standard_normal((3, 4, 4))
        K = scale * (S - S.swapaxes(-1, -2))  # skew, as the steppers' generators
        w = rng.standard_normal((3, 4))
        out = expm_small_action(torch.as_tensor(K), torch.as_tensor(w))
        _check_kind(out, torch.as_tensor(w))
        exact = np.einsum("bij,bj->bi", scipy.linalg.expm(K), w)
        np.testing.assert_allclose(out.numpy(), expm_small_action(K, w), rtol=1e-11, atol=1e-11 * np.abs(exact).max())
    basis = WOrthoBasis((3,), 4, D, W, like=torch.as_tensor(x, dtype=torch.float32))
    assert basis.Q.dtype == torch.float32 and basis.W.dtype == torch.float32


# ----------------------------------------------------------------------------------------------
# diagnostics
# ----------------------------------------------------------------------------------------------
def _diagnostic_cases(y, v, f):
    return {
        "misalignment": lambda a: dg.misalignment(a),
        "hemisphere_lyapunov": lambda a: dg.hemisphere_lyapunov(a, v),
        "token_lyapunov": lambda a: dg.token_lyapunov(a, v),
        "cluster_count": lambda a: dg.cluster_count(a, 0.5),
        "consensus_distance": lambda a: dg.consensus_distance(a),
        "is_consensus": lambda a: dg.is_consensus(a, 0.8),
        "field_norm": lambda a: dg.field_norm(f, 0.2, a),
        "is_equilibrium": lambda a: dg.is_equilibrium(f, 0.2, a, tol=0.5),
    }


@pytest.mark.parametrize("case", list(_diagnostic_cases(None, None, None)))
def test_diagnostics_on_tensors(case):
    M = MANIFOLDS["sphere"]()
    y = _tokens(M, (4, 6, D), seed=7)
    y[1] = y[1, :1]  # a consensus configuration
    y[2, 3:] = y[2, 0] + 1e-3  # a cluster
    v = np.array([1.0, 0.5, -0.2, 0.1])
    v /= np.linalg.norm(v)
    f = GenericField(M, 3.0)
    fn = _diagnostic_cases(y, v, f)[case]
    ref = np.asarray(fn(y))
    for dtype in (torch.float64, torch.float32):
        yt = torch.as_tensor(y, dtype=dtype)
        out = fn(yt)
        assert torch.is_tensor(out) and out.device == yt.device
        assert tuple(out.shape) == ref.shape
        if ref.dtype == bool or np.issubdtype(ref.dtype, np.integer):
            assert out.dtype in (torch.bool, torch.int64)
            np.testing.assert_array_equal(out.numpy(), ref)
        else:
            assert out.dtype == dtype
            tol = 1e-12 if dtype == torch.float64 else 1e-5
            np.testing.assert_allclose(out.double().numpy(), ref, rtol=0, atol=tol)
    # v given as a tensor as well
    if "lyapunov" in case:
        out = getattr(dg, case)(torch.as_tensor(y), torch.as_tensor(v))
        np.testing.assert_allclose(out.numpy(), ref, rtol=0, atol=1e-12)


def test_diagnostics_validation_on_tensors():
    y = torch.as_tensor(_tokens(MANIFOLDS["sphere"](), (2, D)))
    with pytest.raises(ra.errors.ValidationError):
        dg.hemisphere_lyapunov(y, torch.ones(D + 1, dtype=torch.float64))
    with pytest.raises(ra.errors.ValidationError):
        dg.misalignment(torch.zeros((2, D), dtype=torch.float64))
    with pytest.raises(ra.errors.ValidationError):
        dg.field_norm(lambda t, a: a[..., :1, :], 0.0, y)


@settings(max_examples=25, deadline=None)
@given(l=st.integers(2, 5), d=rs.DIMS, data=st.data())
def test_misalignment_and_clusters_agree_on_tensors(l, d, data):
    """Hypothesis variant of test_properties' misalignment property: tensors give NumPy's values."""
    y = data.draw(rs.points(ra.Sphere(d - 1), tokens=l))
    yt = torch.as_tensor(y)
    np.testing.assert_allclose(dg.misalignment(yt).numpy(), dg.misalignment(y), rtol=0, atol=1e-12)
    tol = data.draw(st.floats(0.0, 2.0))
    np.testing.assert_array_equal(dg.cluster_count(yt, tol).numpy(), dg.cluster_count(y, tol))


@settings(max_examples=15, deadline=None)
@given(data=st.data(), name=st.sampled_from(LIE), h=st.floats(0.01, 1.5))
def test_lie_step_stays_on_ellipsoid_on_tensors(data, name, h):
    """Hypothesis variant of test_lie's manifold preservation, on tensors: one step of any size
    keeps every token on E_W, and equals the NumPy step."""
    M = MANIFOLDS["ellipsoid"]()
    y = data.draw(rs.points(M, tokens=3))
    f = GenericField(M, 3.0, seed=data.draw(st.integers(0, 100)))
    res = ra.STEPPERS[name]().step(f, 0.0, torch.as_tensor(y), h).y
    assert M.deviation(res) < 1e-12
    np.testing.assert_allclose(res.numpy(), ra.STEPPERS[name]().step(f, 0.0, y, h).y, rtol=0, atol=1e-11)


# ----------------------------------------------------------------------------------------------
# the papers' time-dependent heads
# ----------------------------------------------------------------------------------------------
def test_hemisphere_P_on_tensors():
    t = np.linspace(0.0, 1.0, 7)
    ref = hemisphere_P(t)
    tt = torch.as_tensor(t)
    out = hemisphere_P(tt)
    _check_kind(out, tt)
    assert out.shape == (7, 2, 3, 3)
    np.testing.assert_allclose(out.numpy(), ref, rtol=0, atol=1e-15)
    t32 = tt.to(torch.float32)
    _check_kind(hemisphere_P(t32), t32)
    np.testing.assert_allclose(hemisphere_P(torch.tensor(0.3, dtype=torch.float64)).numpy(), hemisphere_P(0.3),
                               rtol=0, atol=1e-15)
    assert isinstance(hemisphere_P(0.3), np.ndarray) and hemisphere_P(0.3).shape == (2, 3, 3)
