"""data.nc conventions: every variable and coordinate has CF ``long_name`` and ``units``, and the
dataset the package version and the command that made it (riemattn.runs._cf.annotate).

The reproductions' data.nc files are walked by ``assert_cf`` in
tests/experiments/test_experiments.py::test_reproduction_runs_and_claims_pass (every module, test-suite size);
here: the helper itself, and simulate's data.nc, which also stores the matrices actually drawn.
"""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

import riemattn as ra
from riemattn.runs._cf import COMMON, UndocumentedVariable, annotate, undocumented
from riemattn.experiments import available
from riemattn.runs.simulate import simulate_config


def assert_cf(ds, command_part=""):
    """Every variable and coordinate of ``ds`` has a non-empty long_name and units; the dataset has
    the package version and the command."""
    names = list(ds.variables)
    assert names
    for name in names:
        attrs = ds[name].attrs
        assert isinstance(attrs.get("long_name"), str) and attrs["long_name"], f"{name}: no long_name"
        assert isinstance(attrs.get("units"), str) and attrs["units"], f"{name}: no units"
    assert ds.attrs["riemattn_version"] == ra.__version__
    assert command_part in ds.attrs["command"]


def _small():
    return xr.Dataset({"E": (("time", "trajectory"), np.zeros((3, 2)))}, coords={"time": [0.0, 1.0, 2.0]})


def test_annotate_fills_from_table_and_common_and_records_provenance():
    ds = annotate(_small(), {"E": ("misalignment", "1")}, command="riemattn reproduce x")
    assert ds.E.attrs == {"long_name": "misalignment", "units": "1"}
    assert ds.time.attrs["long_name"] == COMMON["time"][0]
    assert ds.attrs["command"] == "riemattn reproduce x" and ds.attrs["riemattn_version"] == ra.__version__
    assert_cf(ds, "reproduce x")
    assert undocumented(ds) == []


def test_annotate_refuses_an_undocumented_variable_and_leaves_input_alone():
    src = _small()
    with pytest.raises(UndocumentedVariable, match="'E'"):
        annotate(src, {}, command="c")
    annotate(src, {"E": ("misalignment", "1")}, command="c")
    assert src.E.attrs == {} and "command" not in src.attrs  # a copy was annotated


def test_the_walk_fails_when_one_attribute_is_missing(tmp_path):
    """The check the reproductions' test relies on: remove one attribute from a written file."""
    ds = annotate(_small(), {"E": ("misalignment", "1")}, command="c")
    del ds["time"].attrs["units"]
    ds.to_netcdf(tmp_path / "data.nc", engine="scipy")
    with xr.open_dataset(tmp_path / "data.nc", engine="scipy") as back:
        assert undocumented(back) == ["time"]
        with pytest.raises(AssertionError, match="time: no units"):
            assert_cf(back)


def test_every_reproduction_has_a_table():
    for name, module in available().items():
        table = getattr(module, "DATA_ATTRS", None)
        assert isinstance(table, dict) and table, name
        for var, (long_name, units) in table.items():
            assert long_name and units, (name, var)


def test_simulate_data_has_cf_attrs_and_the_matrices_drawn(tmp_path):
    """simulate's data.nc: CF attributes, and P, U, W, omega, phi as used -- integrating the field
    rebuilt from the stored matrices gives the stored trajectories."""
    cfg = {
        "seed": 3, "trajectories": 2, "tokens": 4, "d": 3,
        "manifold": {"kind": "ellipsoid"},
        "attention": {"heads": 2, "modulation": "sinusoid", "U": "symmetric", "mask": "causal"},
        "integration": {"t1": 1.0, "dt": 0.05, "saves": 11},
    }
    simulate_config(cfg, out=tmp_path, command="riemattn simulate model.toml")
    ds = xr.load_dataset(tmp_path / "data.nc", engine="scipy")
    assert_cf(ds, "riemattn simulate model.toml")
    assert ds.P.shape == ds.U.shape == (2, 3, 3) and ds.W.shape == (3, 3)
    omega, phi, P0 = ds.omega.values, ds.phi.values, ds.P.values

    def P(t):
        return np.abs(2.0 * np.sin(omega * t + phi))[:, :, None] * P0

    field = ra.AttentionField(P, ds.U.values, W=ds.W.values, mask="causal")
    sol = ra.integrate(field, ds.y.values[0], (0.0, 1.0), stepper="rk4", dt=0.05, saveat=ds.time.values)
    np.testing.assert_allclose(sol.y, ds.y.values, rtol=0, atol=1e-13)


def test_simulate_sphere_stores_identity_W_and_U(tmp_path):
    simulate_config({"trajectories": 1, "tokens": 3, "integration": {"t1": 0.1, "saves": 2}}, out=tmp_path)
    ds = xr.load_dataset(tmp_path / "data.nc", engine="scipy")
    assert_cf(ds, "simulate_config")
    np.testing.assert_array_equal(ds.W.values, np.eye(3))
    np.testing.assert_array_equal(ds.U.values, np.eye(3)[None])
    assert "omega" not in ds
