"""The riemattn command line: list, simulate (TOML), reproduce, errors."""

import json

import numpy as np
import pytest
import xarray as xr

from riemattn.cli import main
from riemattn.experiments import available


def test_list_one_line_per_reproduction_name_first(capsys):
    assert main(["list"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    names = list(available())
    assert len(lines) == len(names) and "arxiv-fig2" in names
    for line, name in zip(lines, names):
        assert line.split()[0] == name
        assert available()[name].PAPER in line


def test_simulate_writes_data_plots_and_summary(tmp_path, capsys):
    cfg = tmp_path / "model.toml"
    cfg.write_text(
        """
seed = 2
trajectories = 3
tokens = 5
d = 3
[manifold]
kind = "ellipsoid"
[attention]
heads = 2
modulation = "sinusoid"
mask = "causal"
[integration]
stepper = "heun"
t1 = 2.0
dt = 0.01
saves = 21
"""
    )
    out = tmp_path / "out"
    assert main(["simulate", str(cfg), "--out", str(out), "--no-progress"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["success"] and summary["config"]["attention"]["heads"] == 2
    for name in ("data.nc", "misalignment.png", "trajectories.png"):
        assert (out / name).stat().st_size > 0
    ds = xr.load_dataset(out / "data.nc")
    assert ds.y.shape == (21, 3, 5, 3)
    np.testing.assert_allclose(ds.misalignment[-1], summary["final_misalignment"])
    # causal attention with U = I: the first token of every trajectory does not move
    np.testing.assert_allclose(ds.y[-1, :, 0], ds.y[0, :, 0], atol=1e-14)


@pytest.mark.parametrize(
    "text, words",
    [
        ("tokenz = 3", ["unknown key", "tokenz"]),
        ("[attention]\nmask = 'sideways'", ["mask", "causal"]),
        ("[attention]\nP = [[1.0, 0.0], [0.0, 1.0]]", ["attention.P", "(3, 3)"]),
        ("[integration]\nstepper = 'rk45'", ["integration.stepper", "rk45"]),
        ("[integration]\ndt = -1.0", ["dt", "positive"]),
        ("seed = ", ["not valid TOML"]),
    ],
)
def test_simulate_bad_config_fails_clearly(tmp_path, capsys, text, words):
    cfg = tmp_path / "bad.toml"
    cfg.write_text(text + "\n")
    assert main(["simulate", str(cfg), "--out", str(tmp_path / "o"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    for word in words:
        assert word in err


def test_simulate_missing_file(tmp_path, capsys):
    assert main(["simulate", str(tmp_path / "nope.toml")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_reproduce_unknown_name(capsys):
    assert main(["reproduce", "fig-99", "--no-progress"]) == 2
    assert "fig-99" in capsys.readouterr().err


def test_reproduce_hemisphere_writes_outputs(tmp_path, capsys):
    assert main(["reproduce", "arxiv-fig2", "--quick", "--out", str(tmp_path), "--no-progress"]) == 0
    summary = json.loads((tmp_path / "arxiv-fig2" / "summary.json").read_text())
    assert summary["passed"] and set(summary["claims"]) >= {"tokens_stay_in_hemisphere", "lyapunov_non_increasing"}
    for name in ("figure.png", "figure.pdf", "data.nc"):
        assert (tmp_path / "arxiv-fig2" / name).stat().st_size > 0
    assert "PASS arxiv-fig2" in capsys.readouterr().out
