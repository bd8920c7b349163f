"""One float-precision rule for "is this point on the manifold" (issue 41, item 8):
atol = max(1e-8, 4 (d + 2) cond(W) eps(dtype)) with the dtype the points were given in, the same
for NumPy arrays and torch tensors, in check_point, the metrics (the induced one included) and
integrate's initial-point check (riemattn._validation.manifold_atol)."""

import numpy as np
import pytest

import riemattn as ra
from riemattn._validation import ON_MANIFOLD_ATOL, ROUNDING_FACTOR, manifold_atol
from riemattn.errors import ValidationError

torch = pytest.importorskip("torch")

EPS32 = float(np.finfo(np.float32).eps)


def random_spd(rng, d, cond):
    Q, _ = np.linalg.qr(rng.normal(size=(d, d)))
    return (Q * np.geomspace(1.0, cond, d)) @ Q.T


def normalized_f32(rng, n, W32, how):
    """n points normalized in float32 arithmetic (NumPy or torch), returned as float32 NumPy."""
    y = rng.normal(size=(n, W32.shape[0])).astype(np.float32)
    if how == "numpy":
        return (y / np.sqrt(np.einsum("ij,ij->i", y, y @ W32))[:, None]).astype(np.float32)
    yt, Wt = torch.tensor(y), torch.tensor(W32)
    return (yt / torch.sqrt(((yt @ Wt) * yt).sum(-1, keepdim=True))).numpy()


@pytest.mark.parametrize("d", [2, 3, 8, 64, 768])
@pytest.mark.parametrize("cond", [1.0, 1e2, 1e4])
def test_float32_points_normalized_in_float32_are_within_the_rule(d, cond):
    """The rule's justification, measured: points normalized in float32 (NumPy or torch) deviate by
    at most (d + 2) cond(W) eps32 (measured <= 0.53 of it), checked in float64 or in float32, so c = 4
    has room; and both kinds are accepted by check_point."""
    rng = np.random.default_rng(int(d * cond) % 2**31)
    W = np.eye(d) if cond == 1.0 else random_spd(rng, d, cond)
    M = ra.Sphere(d - 1) if cond == 1.0 else ra.Ellipsoid(W)
    W32 = W.astype(np.float32)
    scale = (d + 2) * np.linalg.cond(W) * EPS32
    for how in ("numpy", "torch"):
        x = normalized_f32(rng, 500, W32, how)
        dev64 = M.deviation(x.astype(np.float64))
        dev32 = M.deviation(torch.tensor(x))  # computed in float32, as a float32 check runs
        assert max(dev64, dev32) <= scale  # c = 1 already holds; the rule takes c = 4
        assert manifold_atol(x, M) == manifold_atol(torch.tensor(x), M) == pytest.approx(ROUNDING_FACTOR * scale, rel=1e-12)
        M.check_point(x)
        M.check_point(torch.tensor(x))


def test_the_rule_is_the_same_for_numpy_and_torch_and_refuses_beyond_it():
    """NumPy float32 was rejected at 1e-8 (1.2e-7 off) while float32 tensors were accepted: now both
    are judged by the same number, accepted inside it and refused outside (ValidationError naming
    the argument); float64 keeps 1e-8."""
    S = ra.Sphere(2)
    atol = manifold_atol(np.float32(0), S)
    assert atol == 4 * 5 * EPS32
    base = np.array([0.6, 0.8, 0.0])
    for factor, ok in ((0.5, True), (2.0, False)):
        x32 = (base * np.sqrt(1 + factor * atol)).astype(np.float32)  # |x|^2 - 1 ~ factor atol
        for arr in (x32, torch.tensor(x32)):
            if ok:
                S.check_point(arr)
                S.metric.exp(np.zeros(3, dtype=np.float32), arr)
            else:
                with pytest.raises(ValidationError, match="base_point is not on"):
                    S.metric.exp(np.zeros(3, dtype=np.float32), arr)
    with pytest.raises(ValidationError, match="1e-08"):
        S.check_point(base * np.sqrt(1 + 2e-8))
    S.check_point(base * np.sqrt(1 + 0.5e-8))
    assert manifold_atol(base, S) == ON_MANIFOLD_ATOL


def test_integrate_accepts_float32_tokens_normalized_in_float32():
    """integrate's initial-point check (solvers/integrate.py) follows the rule: NumPy float32 tokens
    2.4e-7 off (simuformer's) failed it; NumPy and torch float32 are now accepted alike."""
    rng = np.random.default_rng(0)
    y32 = normalized_f32(rng, 6, np.eye(3, dtype=np.float32), "numpy")
    assert ra.Sphere(2).deviation(y32.astype(float)) > ON_MANIFOLD_ATOL  # the case that failed
    for y0 in (y32, torch.tensor(y32)):
        sol = ra.integrate(ra.usa(1.0, 3), y0, (0.0, 0.5), "dopri5")
        assert sol.success
    bad = (y32 * np.float32(1.001)).astype(np.float32)
    with pytest.raises(ValidationError, match="y0 is not on"):
        ra.integrate(ra.usa(1.0, 3), bad, (0.0, 0.5), "dopri5")


def test_induced_metric_accepts_what_its_check_point_accepts():
    """The induced metric rejected float32 tensors its own check_point accepted (it re-checked a
    float64 copy at 1e-8)."""
    E = ra.Ellipsoid(np.diag([1.0, 2.0, 3.0]), metric="euclidean")
    x = torch.tensor(E.projection(np.ones(3)), dtype=torch.float32)
    E.check_point(x)
    v = torch.tensor([0.0, 0.3, -0.2], dtype=torch.float32)
    y = E.metric.exp(v, x)
    assert E.deviation(y) <= 1e-12 + 10 * ROUNDING_FACTOR * 5 * 3 * EPS32  # from a float32 start
    E.metric.parallel_transport(v, x, v)
