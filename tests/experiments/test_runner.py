"""The reproduction runner: resume after a kill, skip finished figures, parallel workers.

Issue 6, "done when": killing ``reproduce --all`` halfway and running it again recomputes nothing
that finished, and the final outputs equal those of an uninterrupted run. The test does exactly that
on a list of cheap figures at the test suite's size, with the kill delivered to a real subprocess
(SIGKILL, no cleanup) as soon as its first ``summary.json`` appears.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import xarray as xr

from riemattn.experiments import reproduce
from riemattn.experiments._runner import run_one

# cheap at smoke size, and several of them so that a kill lands in the middle of the list
NAMES = ["glpr-equiangular", "arxiv-fig4", "glpr-pure-sa", "glpr-circle"]

_CHILD = """
import sys
from riemattn.experiments import reproduce
reproduce(sys.argv[2:], out=sys.argv[1], smoke=True, progress=False)
"""


def _summaries(out: Path) -> dict:
    found = {}
    for name in NAMES:
        f = out / name / "summary.json"
        if f.exists():
            found[name] = json.loads(f.read_text())
    return found


def _mtimes(out: Path, names) -> dict:
    return {n: (out / n / "data.nc").stat().st_mtime_ns for n in names}


def _strip(summary: dict) -> dict:
    """The parts of a summary that must be equal between runs (not runtime, not cached)."""
    return {k: v for k, v in summary.items() if k not in ("runtime_s", "cached")}


def test_killed_run_resumes_without_recomputing(tmp_path):
    interrupted, clean = tmp_path / "interrupted", tmp_path / "clean"
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(interrupted), *NAMES],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    try:
        while not _summaries(interrupted) and time.monotonic() < deadline:
            if child.poll() is not None:
                pytest.fail(f"child exited early: {child.stderr.read().decode()[-2000:]}")
            time.sleep(0.05)
    finally:
        os.killpg(child.pid, signal.SIGKILL)  # the child's own session: nothing else is touched
        child.wait()
        child.stderr.close()
    finished = _summaries(interrupted)
    assert finished, "no figure finished within the deadline"
    assert len(finished) < len(NAMES), "the kill came too late to interrupt the run"
    before = _mtimes(interrupted, finished)

    resumed = reproduce(NAMES, out=interrupted, smoke=True, progress=False)
    by_name = {s["name"]: s for s in resumed}
    for name in NAMES:
        assert by_name[name]["passed"]
        assert by_name[name]["cached"] == (name in finished), name
    # finished figures were not recomputed: their data files were not rewritten
    assert _mtimes(interrupted, finished) == before

    # the final outputs equal those of an uninterrupted run
    reproduce(NAMES, out=clean, smoke=True, progress=False)
    for name in NAMES:
        a = json.loads((interrupted / name / "summary.json").read_text())
        b = json.loads((clean / name / "summary.json").read_text())
        assert _strip(a) == _strip(b), name
        with (
            xr.open_dataset(interrupted / name / "data.nc", engine="scipy") as da,
            xr.open_dataset(clean / name / "data.nc", engine="scipy") as db,
        ):
            xr.testing.assert_identical(da.load(), db.load())
        assert (interrupted / name / "figure.png").stat().st_size > 0


def test_force_recomputes_and_changed_config_is_not_cached(tmp_path, monkeypatch):
    name = "glpr-equiangular"
    first = run_one(name, quick=True, out=tmp_path, smoke=True)
    assert not first["cached"]
    assert run_one(name, quick=True, out=tmp_path, smoke=True)["cached"]
    t0 = (tmp_path / name / "data.nc").stat().st_mtime_ns
    assert not run_one(name, quick=True, out=tmp_path, smoke=True, force=True)["cached"]
    assert (tmp_path / name / "data.nc").stat().st_mtime_ns != t0
    # a different configuration is a different hash, hence recomputed
    import riemattn.experiments.glpr_equiangular as mod

    original = mod.config
    monkeypatch.setattr(
        mod, "config", lambda quick=False, smoke=False: {**original(quick, smoke=smoke), "seed": 99}
    )
    assert not run_one(name, quick=True, out=tmp_path, smoke=True)["cached"]


def test_workers_give_byte_identical_outputs(tmp_path):
    """Issue 14: data.nc does not depend on --workers (one BLAS thread per figure, whatever N).
    glpr-fig3 runs through ra.sweep: inside a (daemonic) reproduce worker its Dask cluster must
    not start processes (it did, and the figure failed with --workers 2)."""
    names = ["glpr-equiangular", "arxiv-fig4", "glpr-fig3"]
    serial = reproduce(names, out=tmp_path / "serial", smoke=True, progress=False)
    parallel = reproduce(names, out=tmp_path / "parallel", smoke=True, progress=False, workers=2)
    assert [s["name"] for s in parallel] == names
    for a, b in zip(serial, parallel):
        assert a["passed"] and b["passed"]
        assert _strip(a) == _strip(b)
        for f in ("data.nc", "figure.pdf"):
            da = (tmp_path / "serial" / a["name"] / f).read_bytes()
            db = (tmp_path / "parallel" / a["name"] / f).read_bytes()
            assert da == db, (a["name"], f)


def test_failure_becomes_a_failed_summary(tmp_path, monkeypatch):
    import riemattn.experiments.glpr_equiangular as mod

    def broken(config):
        raise RuntimeError("boom")

    monkeypatch.setattr(mod, "run", broken)
    (s,) = reproduce(["glpr-equiangular"], out=tmp_path, smoke=True, progress=False)
    assert not s["passed"] and "boom" in s["error"]
    assert not (tmp_path / "glpr-equiangular" / "summary.json").exists()
