"""`riemattn sweep` / `sweep-plot`: TOML grids over simulate parameters, and glpr-fig5's claims."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from riemattn.cli import main
from riemattn.errors import ValidationError
from riemattn.sweep import point_rng
from riemattn.runs.sweep_config import load_sweep_config

TOML = """
seed = 4
observables = ["misalignment", "clustered_fraction", "cluster_count", "time_to_threshold"]
threshold = 0.05
cluster_tol = 0.05
batch = ["beta"]

[grid]
beta = [0.0, 2.0]
d = [2, 3]
mask = ["full", "causal"]

[model]
tokens = 4
trajectories = 2
[model.attention]
P = "identity"
P_scale = 1.0
normalization = "softmax"
[model.integration]
stepper = "rk4"
t1 = 2.0
dt = 0.1
saves = 5
"""


def test_cli_sweep_equals_the_point_function_run_serially(tmp_path, capsys):
    cfg = tmp_path / "s.toml"
    cfg.write_text(TOML)
    store = tmp_path / "s.zarr"
    assert main(["sweep", str(cfg), "--out", str(store), "--workers", "2", "--no-progress"]) == 0
    assert "8 points, 8 computed" in capsys.readouterr().out
    ds = xr.open_zarr(store).load()
    assert ds.misalignment.dims == ("beta", "d", "mask", "time", "trajectory")
    assert ds.time_to_threshold.dims == ("beta", "d", "mask", "trajectory")
    spec = load_sweep_config(cfg)
    fn = spec["point_fn"]
    for d in (2, 3):
        for mask in ("full", "causal"):
            coords = {"d": d, "mask": mask}
            ref = fn({"beta": np.array([0.0, 2.0]), **coords}, point_rng(coords, 4))
            got = ds.sel(d=d, mask=mask)
            for name in ref.data_vars:
                np.testing.assert_array_equal(got[name].transpose(*ref[name].dims).values, ref[name].values)
            # time_to_threshold: the first saved time where the misalignment is <= 0.05
            E = ref.misalignment.values  # (beta, time, trajectory)
            for b in range(2):
                for k in range(2):
                    hit = np.nonzero(E[b, :, k] <= 0.05)[0]
                    want = ref.time.values[hit[0]] if hit.size else np.nan
                    np.testing.assert_equal(ref.time_to_threshold.values[b, k], want)
    # the model really depends on the grid: beta = 0 and 2 differ
    assert not np.array_equal(ds.misalignment.sel(beta=0.0).values, ds.misalignment.sel(beta=2.0).values)
    # re-running computes nothing
    assert main(["sweep", str(cfg), "--out", str(store), "--workers", "1", "--no-progress"]) == 0
    assert "0 computed, 8 already done" in capsys.readouterr().out
    png = tmp_path / "slice.png"
    assert main(["sweep-plot", str(store), "--var", "clustered_fraction", "--x", "time", "--y", "beta",
                 "--sel", "d=3", "mask=full", "--out", str(png)]) == 0
    assert png.stat().st_size > 1000
    assert main(["sweep-plot", str(store), "--var", "nope", "--out", str(png)]) == 2


@pytest.mark.parametrize(
    "edit, match",
    [
        (("beta = [0.0, 2.0]", "gamma = [1.0]"), "grid key 'gamma'"),
        (('batch = ["beta"]', 'batch = ["d"]'), "batch may only name"),
        (('observables = ["misalignment",', 'observables = ["entropy",'), "observables must be one of"),
        (("seed = 4", "seed = -1"), "seed must be"),
        (("[grid]", "[gird]"), "unknown key"),
    ],
)
def test_config_errors_name_the_key(tmp_path, edit, match):
    cfg = tmp_path / "s.toml"
    cfg.write_text(TOML.replace(*edit))
    with pytest.raises(ValidationError, match=match):
        load_sweep_config(cfg)


def _fig5(prob):
    """A synthetic glpr-fig5 dataset: prob (V, d, beta, time) with times 0, 10, 20, 30."""
    return xr.Dataset({"probability": (("V", "d", "beta", "time"), prob)},
                      coords={"V": ["identity"], "d": [8], "beta": np.linspace(0, 9, 10),
                              "time": [0.0, 10.0, 20.0, 30.0]})


def test_glpr_fig5_claims_can_fail():
    from riemattn.experiments import get

    claims = get("glpr-fig5").claims
    betas = np.linspace(0, 9, 10)
    moving = np.stack([np.zeros(10)] + [np.where(betas <= b, 1.0, 0.3) for b in (3.5, 5.5, 7.5)], axis=-1)
    ok = claims(_fig5(moving[None, None]))
    assert ok["probability_increases_with_t_for_every_beta"]["passed"]
    assert ok["half_contour_moves_to_larger_beta"]["passed"]
    still = np.stack([np.zeros(10)] + [np.where(betas <= 3.5, 1.0, 0.3)] * 3, axis=-1)
    got = claims(_fig5(still[None, None]))
    assert not got["half_contour_moves_to_larger_beta"]["passed"]  # the contour does not move
    never = np.stack([np.zeros(10)] + [(betas <= b).astype(float) for b in (3.5, 5.5, 7.5)], axis=-1)
    # at beta = 9 the probability is still 0 = P(t = 0) at t1: it did not increase
    assert not claims(_fig5(never[None, None]))["probability_increases_with_t_for_every_beta"]["passed"]
    falling = moving.copy()
    falling[0, 2] = 0.5  # P(beta = 0) drops from 1 at t = 10 to 0.5 at t = 20
    assert not claims(_fig5(falling[None, None]))["probability_increases_with_t_for_every_beta"]["passed"]


def test_random_qkv_scales():
    from riemattn.experiments._phase import random_qkv

    rng = np.random.default_rng(0)
    P, V = random_qkv(256, rng, "wishart")
    assert abs(np.var(P) - 1.0) < 0.05  # Q^T K / sqrt(d): entries of variance 1
    lam = np.linalg.eigvalsh(V)
    assert lam.min() > -1e-12 and abs(lam.mean() - 1.0) < 0.05  # PSD, mean eigenvalue 1
    np.testing.assert_array_equal(random_qkv(4, rng, "identity")[1], np.eye(4))
