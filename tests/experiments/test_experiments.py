"""The reproductions of the papers' figures: the module contract, and their private helpers.

Every module discovered by :func:`riemattn.experiments.available` is run through the runner at the
test suite's size, with its expected verdict, and its paper claims are shown to fail under its
declared deviations, in ``tests/suites/test_falsification.py``. Here: the module contract, and the
helpers private to the figures against independent computations.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import xarray as xr

import riemattn as ra
from riemattn.experiments import available, get
from riemattn.experiments._runner import config_hash
from riemattn.experiments._verdict import NOT_REPRODUCED, REPRODUCED

NAMES = list(available())

MINE = [
    "arxiv-fig4",
    "arxiv-fig5",
    "glpr-fig3",
    "glpr-fig4",
    "glpr-equiangular",
    "glpr-circle",
    "glpr-pure-sa",
]


def test_all_figures_of_the_issue_are_registered():
    assert set(MINE) <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_module_contract(name):
    module = get(name)
    for attr in ("NAME", "PAPER", "FIGURE", "DESCRIPTION"):
        assert isinstance(getattr(module, attr), str) and getattr(module, attr)
    assert module.NAME == name
    for quick in (False, True):
        cfg = module.config(quick=quick)
        json.dumps(cfg)  # JSON-serializable
        assert "seed" in cfg
    # quick is a different (smaller) run than full, so the hashes differ
    assert config_hash(name, module.config(quick=True)) != config_hash(name, module.config())


# ---------------------------------------------------------------------------------------------
# private pieces of the figures, against independent computations
# ---------------------------------------------------------------------------------------------
def test_glpr_fig3_array_beta_batch_equals_separate_layer_runs():
    """The figure integrates all betas as one batch (sa with an array beta, stepper "layer"):
    each row equals GLPR's scheme x <- normalize(x + h softmax(beta <x_i, x_j>) x) run alone."""
    rng = np.random.default_rng(0)
    betas = np.array([0.0, 0.7, 9.0])
    x = rng.standard_normal((5, 7, 4))
    x /= np.linalg.norm(x, axis=-1, keepdims=True)
    xb = np.broadcast_to(x, (3, 5, 7, 4))
    got = ra.integrate(ra.sa(betas[:, None], 4), xb, (0.0, 0.3), stepper="layer", dt=0.1).y[-1]
    for k, beta in enumerate(betas):
        y = x.copy()
        for _ in range(3):
            S = beta * y @ np.swapaxes(y, -1, -2)
            A = np.exp(S - S.max(axis=-1, keepdims=True))
            y = y + 0.1 * (A / A.sum(axis=-1, keepdims=True)) @ y
            y /= np.linalg.norm(y, axis=-1, keepdims=True)
        np.testing.assert_allclose(got[k], y, rtol=1e-12, atol=1e-14)


def test_glpr_fig3_empirical_boundary_interpolates():
    from riemattn.experiments.glpr_fig3 import empirical_boundary

    betas = np.array([0.0, 1.0, 2.0, 3.0])
    prob = np.array([[1.0, 1.0, 0.2], [1.0, 0.8, 0.0], [1.0, 0.2, 0.0], [1.0, 0.0, 0.0]])
    out = empirical_boundary(prob, betas)
    assert out[0] == np.inf  # clustered at every beta
    assert out[1] == pytest.approx(1.5)  # 0.8 at beta=1, 0.2 at beta=2: crosses 1/2 halfway
    assert np.isnan(out[2])  # never above 1/2


def _phase_dataset(prob):
    """A synthetic phase-diagram dataset (d = 2, 128; 10 betas; t = 0, 10, 20, 30), with the
    equiangular curve tabulated as the figure stores it."""
    from riemattn.analysis.theory import clustering_time

    beta_curve = np.linspace(0.0, 9.0, 73)
    T = [clustering_time(b, 32, 1e-3, "sa") for b in beta_curve]
    return xr.Dataset(
        {"probability": (("d", "beta", "time"), prob), "equiangular_clustering_time": ("beta_curve", T)},
        coords={"d": [2, 128], "beta": np.linspace(0, 9, 10), "time": [0.0, 10.0, 20.0, 30.0],
                "beta_curve": beta_curve},
        attrs={"n": 32, "eps": 1e-3},
    )


def test_glpr_fig3_stored_curve_inverts_to_phase_boundary():
    """The claims read beta*(t) from the stored curve T(beta) (73 betas, step 0.125) by linear
    interpolation: within 2e-3 of phase_boundary at the check times (measured 1.5e-3 at most)."""
    from riemattn.analysis.theory import phase_boundary
    from riemattn.experiments.glpr_fig3 import equiangular_boundary

    ds = _phase_dataset(np.ones((2, 10, 4)))
    for t in (10.0, 20.0, 30.0):
        assert abs(equiangular_boundary(ds, t) - phase_boundary(t, 32, 1e-3)) < 2e-3
    assert np.isnan(equiangular_boundary(ds, 1.0))  # before the curve's first time: no boundary


def test_glpr_fig3_boundary_claim_can_fail():
    from riemattn.analysis.theory import phase_boundary

    mod = get("glpr-fig3")
    betas = np.linspace(0, 9, 10)
    # a sharp step exactly at the equiangular curve passes; the same step shifted by 1 in beta fails
    for shift, ok in ((0.0, True), (1.0, False)):
        b = np.r_[np.nan, phase_boundary(np.array([10.0, 20.0, 30.0]), 32)] + shift
        prob = np.stack([(betas[:, None] <= np.nan_to_num(b, nan=-1))] * 2).astype(float)
        prob[:, 0, :] = 1.0  # beta = 0 clusters
        got = mod.claims(_phase_dataset(prob))["boundary_matches_equiangular_d128"]
        assert got["passed"] == ok, got["value"]
    everywhere = mod.claims(_phase_dataset(np.ones((2, 10, 4))))  # no boundary at all
    assert not everywhere["boundary_matches_equiangular_d128"]["passed"]


def test_glpr_pure_sa_rescaled_equation():
    """z = e^{-tV} x solves eq. (9.3): compare d/dt of the rescaled solution by finite differences."""
    from scipy.linalg import expm

    from riemattn.experiments.glpr_pure_sa import MatrixExponential, pure_sa, rescaled_sa

    rng = np.random.default_rng(1)
    V = rng.uniform(0, 1, (2, 2))
    QK = np.eye(2)
    x = rng.uniform(-2, 2, (6, 2))
    t, h = 0.7, 1e-5
    np.testing.assert_allclose(MatrixExponential(V)(t), expm(t * V), rtol=1e-12)

    def z_of(s):  # z(s) = e^{-sV} x(s), x(s) to first order around t
        xs = x + (s - t) * pure_sa(x, V, QK)
        return xs @ expm(-s * V).T

    fd = (z_of(t + h) - z_of(t - h)) / (2 * h)
    np.testing.assert_allclose(rescaled_sa(t, z_of(t), V, QK), fd, rtol=1e-6, atol=1e-8)


@pytest.mark.filterwarnings("error:__array_wrap__ must accept:DeprecationWarning")
def test_glpr_pure_sa_fields_compute_on_tensors_in_torch():
    """Under a device context the fields get torch tensors: they compute in torch (a NumPy ufunc or a
    product with a NumPy matrix would wrap its result back through torch's ``__array_wrap__``, which
    NumPy 2 deprecates) and give the NumPy values."""
    torch = pytest.importorskip("torch")
    from riemattn.experiments.glpr_pure_sa import MatrixExponential, pure_sa, rescaled_sa

    rng = np.random.default_rng(3)
    V, QK, x = rng.uniform(0, 1, (2, 2)), rng.uniform(-1, 1, (2, 2)), rng.uniform(-2, 2, (3, 5, 2))
    xt, E = torch.as_tensor(x), MatrixExponential(V)
    for got, want in ((pure_sa(xt, V, QK), pure_sa(x, V, QK)),
                      (rescaled_sa(0.3, xt, V, QK), rescaled_sa(0.3, x, V, QK)),
                      (rescaled_sa(0.3, xt, V, QK, E), rescaled_sa(0.3, x, V, QK, E))):
        assert isinstance(got, torch.Tensor)
        # the same formula in two libraries: a few roundings of values of size <= 10 each
        np.testing.assert_allclose(got.numpy(), want, rtol=0, atol=64 * np.finfo(float).eps * 10)


def test_arxiv_fig5_heads_match_the_paper_formula():
    from riemattn.experiments.arxiv_fig5 import RandomDiagonalHeads

    rng = np.random.default_rng(2)
    Pp, om, ph = (
        rng.uniform(-0.5, 0.5, (2, 4, 4)),
        rng.uniform(0, 1, (2, 4)),
        rng.uniform(0, 6, (2, 4)),
    )
    heads = RandomDiagonalHeads(Pp, om, ph)
    t = 1.3
    for eta in range(2):
        D = np.diag(np.abs(2 * np.sin(om[eta] * t + ph[eta])))
        np.testing.assert_allclose(heads(t)[eta], D @ Pp[eta], rtol=1e-15)


def test_arxiv_fig4_initial_tokens_in_the_theorem_domain():
    from riemattn.experiments._papers import U_FIG4
    from riemattn.experiments.arxiv_fig4 import initial_tokens

    _, vecs = np.linalg.eigh(U_FIG4)
    v = vecs[:, -1]
    y0 = initial_tokens(np.random.default_rng(3), 50, v)
    np.testing.assert_allclose(np.linalg.norm(y0, axis=-1), 1.0, rtol=1e-14)
    assert np.all(y0 @ v > 0)


def test_claims_can_fail():
    """Claims are not vacuous: corrupting the data makes them fail."""
    m4 = get("arxiv-fig4")
    t = np.linspace(0, 10, 11)
    V = np.exp(-t)[:, None] * np.array([0.1, 0.3, 0.5])
    ds = xr.Dataset(
        {
            "V": (("time", "token"), V),
            "distance_to_v": ("time", np.sqrt(2 * V.max(axis=1))),
            "U_eigenvalues": ("component", [-1.0, 0.1, 0.5]),
        },
        coords={"time": t},
    )
    ds["V"][-1] = 0.0
    ds["distance_to_v"][-1] = 0.0
    assert all(c["passed"] for c in m4.claims(ds).values())
    bad = ds.copy(deep=True)
    bad["V"][5, 0] = bad["V"][4, 0] + 1e-6  # V_1 increases once
    assert not m4.claims(bad)["V1_non_increasing"]["passed"]
    bad = ds.copy(deep=True)
    bad["distance_to_v"][-1] = 0.1
    assert not m4.claims(bad)["consensus_at_v"]["passed"]

    m5 = get("arxiv-fig5")
    E = xr.Dataset(
        {"E": (("time", "trajectory"), np.full((5, 3), 1e-3))}, coords={"time": np.arange(5.0)}
    )
    E.attrs["y1_drift"] = 0.0
    assert not m5.claims(E)["E_below_1e-6_every_trajectory"]["passed"]


def test_hemisphere_heads_equal_hemisphere_P():
    """The TimeVaryingHeads form of ARXIV Figures 2-3's heads (what the compiled engine reads)
    equals the closed form: each entry is 2 P'_ij sin(omega t + phi) against 2 P'_ij cos(omega t)
    (or sin), so the difference is the rounding of the argument omega t + pi/2 (|omega t| + 2 ulps)
    times the entry's size, a few times over."""
    from riemattn.experiments._papers import _HEMI_P, hemisphere_heads, hemisphere_P

    T = 10.0
    t = np.linspace(0.0, T, 1001)
    H = hemisphere_heads()
    bound = 4 * 2 * np.abs(_HEMI_P).max() * (10 * np.pi * T + 2) * np.finfo(float).eps
    assert np.abs(H(t) - hemisphere_P(t)).max() <= bound
    assert np.abs(H(0.37) - hemisphere_P(0.37)).max() <= bound


def test_hardmax_leaders_identities_and_exit_times():
    """hardmax-leaders (smoke): the hexagon's identity checks fail on a token pushed 1e-9 off its line
    (the paper claims' deviations are in tests/suites/test_falsification.py); the entry / exit times
    of a hand-written state sequence."""
    m = get("hardmax-leaders")
    ds = m.run(m.config(quick=True, smoke=True))
    ok = m.claims(ds)
    assert all(c["status"] == REPRODUCED for c in ok.values() if c["kind"] in ("paper", "identity"))
    bad = ds.copy(deep=True)
    bad["y_hardmax"][3, m.K, 0] += 1e-9
    assert m.claims(bad)["straight_lines"]["status"] == NOT_REPRODUCED
    bad = ds.copy(deep=True)
    bad["cloud_hull"][0] = 0  # no hull vertex: every leader outside the hull
    assert m.claims(bad)["leaders_are_hull_vertices"]["status"] == NOT_REPRODUCED
    ts = np.arange(6.0)
    assert m._exit_times(ts, np.array([0, 0, 1, 1, 0, 1], bool)) == (2.0, 4.0)
    enter, leave = m._exit_times(ts, np.array([0, 1, 1, 1, 1, 1], bool))
    assert enter == 1.0 and np.isnan(leave)


def test_position_bias_cumulative_and_claims_can_fail():
    """position-bias (smoke): the cumulative attention equals the product of the layers written out
    with np.linalg.multi_dot (rounding of T products of row-stochastic l x l matrices), and the claims
    (paper claims and identities) turn to 'not reproduced' when min_i P_i1 drops once (identity), when
    the decay does not localise (identity), when the first position's share does not grow with depth
    or when the half-influence depth does not grow with the slope (paper; the deviations are in
    tests/suites/test_falsification.py)."""
    m = get("position-bias")
    rng = np.random.default_rng(3)
    A = rng.uniform(size=(6, 5, 5))
    A /= A.sum(-1, keepdims=True)
    P = m.cumulative(A)
    for t in range(6):
        expect = A[0] if t == 0 else np.linalg.multi_dot(list(A[t::-1]))
        assert np.abs(P[t] - expect).max() <= 6 * 5 * np.finfo(float).eps
    ds = m.run(m.config(quick=True, smoke=True))
    ok = m.claims(ds)
    assert all(c["status"] == REPRODUCED for c in ok.values() if c["kind"] in ("paper", "identity"))
    assert {k for k, c in ok.items() if c["kind"] == "identity"} == {"min_first_never_decreases", "decay_within_layer"}
    bad = ds.copy(deep=True)
    bad["min_first"][0, 5] = bad["min_first"][0, 4] - 1e-6
    assert m.claims(bad)["min_first_never_decreases"]["status"] == NOT_REPRODUCED
    bad = ds.copy(deep=True)
    bad["first_share"][0, -1] = bad["first_share"][0, 0]  # no larger at T than after one layer
    assert m.claims(bad)["causal_bias_grows"]["status"] == NOT_REPRODUCED
    bad = ds.copy(deep=True)
    bad["mean_distance"][2] = bad["mean_distance"][1]  # the largest slope no more local than the next
    assert m.claims(bad)["decay_within_layer"]["status"] == NOT_REPRODUCED
    bad = ds.copy(deep=True)
    bad["t_half"][:] = 5.0
    assert m.claims(bad)["tradeoff_with_depth"]["status"] == NOT_REPRODUCED
