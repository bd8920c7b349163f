"""Three-valued claims and the PASS / PARTIAL / FAIL verdict of a reproduction, in the summary and the CLI."""

from __future__ import annotations

import json
import types

import numpy as np
import pytest
import xarray as xr

from riemattn import cli
from riemattn.experiments import _runner
from riemattn.experiments._verdict import NOT_CHECKED, claim, normalize, summarize_verdict, verdict

R, N, C = "reproduced", "not reproduced", NOT_CHECKED


def _claims(*statuses, extra=None):
    out = {f"c{i}": claim(s if s != C else C, i, f"claim {i}", reason="too small" if s == C else None)
           for i, s in enumerate(statuses)}
    return {**out, **(extra or {})}


@pytest.mark.parametrize(
    ("statuses", "expected"),
    [
        ((R,), "PASS"),
        ((R, R, R), "PASS"),
        ((R, N), "PARTIAL"),
        ((R, C), "PARTIAL"),
        ((R, N, C), "PARTIAL"),
        ((C,), "PARTIAL"),  # nothing checkable at this size: not a failure, not a pass
        ((C, C), "PARTIAL"),
        ((N,), "FAIL"),
        ((N, N), "FAIL"),
        ((N, C), "FAIL"),  # everything checked disagrees with the paper
        ((), "PARTIAL"),  # no paper claim at all is never a PASS
    ],
)
def test_verdict_from_statuses(statuses, expected):
    v, detail = verdict(_claims(*statuses))
    assert v == expected
    assert sorted(detail[R]) == [f"c{i}" for i, s in enumerate(statuses) if s == R]
    assert sorted(detail[N]) == [f"c{i}" for i, s in enumerate(statuses) if s == N]


def test_stand_ins_and_observations_do_not_decide():
    extra = {
        "weak": claim(True, 1, "E decreases", kind="stand-in", stands_in_for="c0"),
        "obs": claim(None, 2, "still falling", kind="observation", observed=True),
    }
    assert verdict(_claims(C, extra=extra))[0] == "PARTIAL"  # a reproduced stand-in is no PASS
    bad = {"weak": claim(False, 1, "E decreases", kind="stand-in", stands_in_for="c0")}
    assert verdict(_claims(R, extra=bad))[0] == "PASS"  # nor a failed stand-in a FAIL
    assert verdict(_claims(R), error="boom")[0] == "FAIL"


def test_claim_validation_and_legacy_form():
    with pytest.raises(ValueError, match="reason"):
        claim(C, 0, "x")
    with pytest.raises(ValueError, match="stands_in_for"):
        claim(True, 0, "x", kind="stand-in")
    with pytest.raises(ValueError, match="status"):
        claim("passed", 0, "x")
    assert claim(np.bool_(True), 0, "x")["status"] == R
    legacy = normalize({"a": {"passed": True, "value": 1, "description": "a"},
                        "b": {"passed": False, "value": 2, "description": "b"},
                        "o": {"passed": None, "value": 3, "description": "o", "observed": "x"}})
    assert [legacy[k]["status"] for k in "abo"] == [R, N, None]
    assert [legacy[k]["kind"] for k in "abo"] == ["paper", "paper", "observation"]
    assert verdict(legacy)[0] == "PARTIAL"
    assert summarize_verdict(*verdict(legacy)) == "1/2 paper claims reproduced; not reproduced: b"


def _fake_module(name, claims):
    ds = xr.Dataset({"x": ("t", np.arange(3.0))})

    def plot(ds):
        import matplotlib.pyplot as plt

        return plt.figure()

    return types.SimpleNamespace(
        NAME=name, PAPER="T", FIGURE="Fig. 0", DESCRIPTION="fake", config=lambda quick=False: {"seed": 0},
        run=lambda config: ds.copy(), plot=plot, claims=lambda ds: claims,
        DATA_ATTRS={"x": ("a fake variable", "1"), "t": ("time", "1")},
    )


def _fake_args(out):
    return types.SimpleNamespace(all=False, names=["fake"], out=str(out), quick=True, workers=1, no_progress=True,
                                 force=False, device="cpu", full=False, verbose=True)  # the claim lines


@pytest.mark.parametrize(
    ("statuses", "expected", "rc"), [((R, R), "PASS", 0), ((R, C), "PARTIAL", 0), ((N, C), "FAIL", 1)]
)
def test_summary_json_and_cli_line_carry_the_verdict(statuses, expected, rc, tmp_path, monkeypatch, capsys):
    extra = {"weak": claim(True, 5, "weaker", kind="stand-in", stands_in_for="c0")}
    module = _fake_module("fake", _claims(*statuses, extra=extra))
    monkeypatch.setattr(_runner, "get", lambda name: module)
    monkeypatch.setattr("riemattn.experiments.available", lambda: {"fake": module})
    monkeypatch.setattr(_runner, "available", lambda: {"fake": module})
    assert cli._cmd_reproduce(_fake_args(tmp_path)) == rc
    out = capsys.readouterr().out
    first = out.splitlines()[0]
    assert first.startswith(f"{expected} fake ")
    summary = json.loads((tmp_path / "fake" / "summary.json").read_text())
    assert summary["verdict"] == expected and summary["passed"] == (expected == "PASS")
    assert [summary["claims"][f"c{i}"]["status"] for i in range(2)] == list(statuses)
    assert summary["claims"]["weak"]["kind"] == "stand-in"
    assert "[stand-in reproduced] weak" in out
    if expected == "PARTIAL":
        assert "not checked at this size: c1" in first and "1/2 paper claims reproduced" in first
        assert "[not checked at this size] c1" in out and "too small" in out
    if expected == "FAIL":
        assert "not reproduced: c0" in first and "[NOT REPRODUCED] c0" in out
    # a cached run reports the same verdict
    assert cli._cmd_reproduce(_fake_args(tmp_path)) == rc
    assert capsys.readouterr().out.splitlines()[0].startswith(f"{expected} fake (cached)")


def test_cached_summary_from_before_verdicts_gets_one(tmp_path):
    legacy = {"claims": {"a": {"passed": True, "value": 1, "description": "a"},
                         "o": {"passed": None, "value": 2, "description": "o"}}, "passed": True}
    s = _runner._with_verdict(json.loads(json.dumps(legacy)))
    assert s["verdict"] == "PASS" and s["claims"]["o"]["kind"] == "observation"
