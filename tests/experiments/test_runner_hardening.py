"""Issue 14, runs and caches: cache validity from the files themselves (the stale-cache race as a
test), no directory left by a failed figure, and ``reproduce`` stopping cleanly on SIGINT/SIGTERM
with workers that die with their parent.

The signal tests run the real CLI in a subprocess (its own session, so that every process it starts
can be found, and nothing else is touched) at ``--quick`` sizes, and signal it as soon as the first
(fast) figure has finished: the others are then in the middle of long figures (arxiv-fig5 quick
takes 10-50 s), so a worker that outlived its parent, or a queue that drained, would
show.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import xarray as xr

import riemattn
from riemattn.cli import main
from riemattn.experiments import reproduce
from riemattn.experiments._runner import Interrupted, finished_since, is_done, run_one

ROOT = Path(riemattn.__file__).resolve().parent.parent
# at --quick: the first two take about a second each, arxiv-fig5 10-50 s (idle to loaded machine)
SIGNAL_NAMES = ["arxiv-fig1", "glpr-equiangular", "arxiv-fig5", "glpr-fig3"]


# ---------------------------------------------------------------------------------------------
# reproduce: arguments checked before any work


def test_reproduce_api_rejects_bad_workers(tmp_path):
    from riemattn.errors import InputTypeError, ValidationError

    with pytest.raises(ValidationError, match="workers"):
        reproduce(["glpr-equiangular"], out=tmp_path, workers=0, progress=False)
    with pytest.raises(InputTypeError, match="workers"):
        reproduce(["glpr-equiangular"], out=tmp_path, workers=1.5, progress=False)


def test_reproduce_out_is_a_file_fails_at_once(tmp_path, capsys, monkeypatch):
    import riemattn.experiments._runner as runner

    monkeypatch.setattr(runner, "run_one", lambda *a, **k: pytest.fail("a figure ran"))
    afile = tmp_path / "results"
    afile.write_text("x")
    assert main(["reproduce", "glpr-equiangular", "--out", str(afile), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "--out" in err and "is a file" in err
    (tmp_path / "ok").mkdir()
    (tmp_path / "ok" / "glpr-equiangular").write_text("x")  # a file where the figure's directory goes
    assert main(["reproduce", "glpr-equiangular", "--out", str(tmp_path / "ok"), "--no-progress"]) == 2
    assert "glpr-equiangular" in capsys.readouterr().err


def test_reproduce_names_and_all_together_is_an_error(capsys, tmp_path):
    assert main(["reproduce", "glpr-equiangular", "--all", "--out", str(tmp_path)]) == 2
    assert "not both" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# the cache: validity from the files themselves

NAME = "glpr-equiangular"


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished smoke-size figure, copied fresh into each test that damages it."""
    out = tmp_path_factory.mktemp("finished")
    summary = run_one(NAME, quick=True, out=out, smoke=True)
    assert not summary["cached"] and summary["passed"]
    return out


def _copy(finished, tmp_path):
    shutil.copytree(finished / NAME, tmp_path / NAME)
    return tmp_path / NAME


def _digest(outdir):
    return json.loads((outdir / "summary.json").read_text())["config_hash"]


def test_cache_is_served_when_intact(finished, tmp_path):
    outdir = _copy(finished, tmp_path)
    assert is_done(outdir, _digest(outdir))
    assert run_one(NAME, quick=True, out=tmp_path, smoke=True)["cached"]


@pytest.mark.parametrize(
    "damage",
    ["delete data.nc", "truncate data.nc", "replace data.nc", "delete figure.png", "empty figure.pdf",
     "garble summary.json", "unlist summary.json"],
)
def test_damaged_outputs_are_recomputed(finished, tmp_path, damage):
    outdir = _copy(finished, tmp_path)
    action, fname = damage.split()
    path = outdir / fname
    if action == "delete":
        path.unlink()
    elif action == "truncate":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    elif action == "replace":  # same size, other bytes
        data = bytearray(path.read_bytes())
        data[-1] ^= 0xFF
        path.write_bytes(bytes(data))
    elif action == "empty":
        path.write_bytes(b"")
    elif action == "garble":
        path.write_text("{ not json")
    else:  # a summary without the list of its files (as written before the list existed)
        s = json.loads((outdir / "summary.json").read_text())
        del s["files"]
        (outdir / "summary.json").write_text(json.dumps(s))
    summary = run_one(NAME, quick=True, out=tmp_path, smoke=True)
    assert not summary["cached"], damage
    assert is_done(outdir, summary["config_hash"])
    with (
        xr.open_dataset(finished / NAME / "data.nc", engine="scipy") as a,
        xr.open_dataset(outdir / "data.nc", engine="scipy") as b,
    ):
        xr.testing.assert_identical(a.load(), b.load())


_RACE_CHILD = """
import os, signal, sys
from riemattn.experiments import _runner

real_replace = os.replace

def replace(src, dst):  # SIGKILL this process right after data.nc is replaced
    real_replace(src, dst)
    if str(dst).endswith("data.nc"):
        os.kill(os.getpid(), signal.SIGKILL)

_runner.os.replace = replace
_runner.run_one(sys.argv[2], quick=True, smoke=sys.argv[3] == "smoke", out=sys.argv[1])
"""


def test_stale_cache_race_killed_quick_run_is_not_served_to_the_full_run(finished, tmp_path):
    """Issue 14: a run at another size killed right after replacing data.nc leaves no summary that a
    later run of the first size accepts: the figure is recomputed, with that size's data."""
    outdir = _copy(finished, tmp_path)  # finished at "smoke", standing in for the full size
    digest = _digest(outdir)
    # the other size ("quick", standing in for --quick), killed by SIGKILL just after data.nc
    child = subprocess.run(
        [sys.executable, "-c", _RACE_CHILD, str(tmp_path), NAME, "quick"],
        cwd=ROOT, capture_output=True, timeout=120, check=False,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()[-2000:]
    with (
        xr.open_dataset(finished / NAME / "data.nc", engine="scipy") as a,
        xr.open_dataset(outdir / "data.nc", engine="scipy") as b,
    ):
        assert a.attrs["config"] != b.attrs["config"]  # data.nc now holds the other size's data
    assert not is_done(outdir, digest)
    summary = run_one(NAME, quick=True, out=tmp_path, smoke=True)
    assert not summary["cached"]
    assert (outdir / "data.nc").read_bytes() == (finished / NAME / "data.nc").read_bytes()


def test_failed_figure_leaves_no_directory(tmp_path, monkeypatch):
    import riemattn.experiments.glpr_equiangular as mod

    def broken_plot(ds):
        raise RuntimeError("no figure")

    monkeypatch.setattr(mod, "plot", broken_plot)
    (s,) = reproduce([NAME], out=tmp_path, smoke=True, progress=False)
    assert not s["passed"] and "no figure" in s["error"]
    assert list(tmp_path.iterdir()) == []


def test_failure_while_writing_leaves_no_directory_and_no_part_files(tmp_path, monkeypatch):
    import riemattn.experiments._runner as runner

    real = runner._atomic_write

    def fail_on_pdf(path, write):
        if path.name == "figure.pdf":
            raise OSError(28, "No space left on device")
        real(path, write)

    monkeypatch.setattr(runner, "_atomic_write", fail_on_pdf)
    (s,) = reproduce([NAME], out=tmp_path / "new" / "results", smoke=True, progress=False)
    assert not s["passed"] and "No space left" in s["error"]
    assert list(tmp_path.iterdir()) == []  # neither the figure's directory nor --out and its parent


# ---------------------------------------------------------------------------------------------
# signals and workers (real processes)


def _session_pids(sid: int) -> list[int]:
    """Processes of session ``sid`` (Linux /proc), zombies excluded."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[3]) == sid and fields[0] != "Z":  # fields: state, ppid, pgrp, session
            pids.append(int(entry))
    return pids


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat[stat.rindex(")") + 2 :].split()[1]) == pid:
                out.append(int(entry))
    return out


def _start(out, workers, names=SIGNAL_NAMES):
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.Popen(
        [sys.executable, "-m", "riemattn.cli", "reproduce", *names, "--quick", "--workers", str(workers),
         "--out", str(out), "--no-progress"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
    )


def _wait_first_summary(child, out, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any((out / n / "summary.json").exists() for n in SIGNAL_NAMES):
            return
        if child.poll() is not None:
            pytest.fail(f"child exited early: {child.stderr.read().decode()[-2000:]}")
        time.sleep(0.05)
    pytest.fail("no figure finished in time")


def _gone_within(sid, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not _session_pids(sid):
            return True
        time.sleep(0.05)
    return not _session_pids(sid)


def _cleanup(child):
    for pid in _session_pids(child.pid):  # only what the test started (its own session)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


@linux_only
def test_sigkill_of_the_parent_leaves_no_worker_behind(tmp_path):
    child = _start(tmp_path, workers=2)
    try:
        _wait_first_summary(child, tmp_path)
        assert len(_children(child.pid)) >= 2, "the workers were not running"
        os.kill(child.pid, signal.SIGKILL)  # the parent only: no clean-up code runs in it
        child.wait(5)
        assert _gone_within(child.pid, 5.0), f"left behind: {_session_pids(child.pid)}"
    finally:
        _cleanup(child)
        child.stdout.close()
        child.stderr.close()
    # nothing keeps writing afterwards
    listing = sorted(str(p) for p in tmp_path.rglob("*"))
    time.sleep(0.5)
    assert sorted(str(p) for p in tmp_path.rglob("*")) == listing


@linux_only
@pytest.mark.parametrize("signum, workers, group", [(signal.SIGINT, 2, True), (signal.SIGTERM, 1, False)])
def test_signal_stops_promptly_with_a_one_line_report(tmp_path, signum, workers, group):
    child = _start(tmp_path, workers=workers)
    try:
        _wait_first_summary(child, tmp_path)
        finished = [n for n in SIGNAL_NAMES if (tmp_path / n / "summary.json").exists()]
        sent = time.monotonic()
        if group:  # Ctrl-C in a terminal: the whole foreground process group
            os.killpg(child.pid, signum)
        else:
            os.kill(child.pid, signum)
        _, err = child.communicate(timeout=10)
        elapsed = time.monotonic() - sent
        assert elapsed < 5.0, elapsed
        assert child.returncode == 128 + signum
        err = err.decode()
        assert "Traceback" not in err, err
        lines = err.strip().splitlines()
        assert len(lines) == 1, err
        assert lines[0].startswith(f"riemattn: interrupted by {signal.Signals(signum).name}: finished")
        for name in finished:
            assert name in lines[0].split("not finished")[0]
        assert "run the same command again" in lines[0]
        assert _gone_within(child.pid, 5.0), f"left behind: {_session_pids(child.pid)}"
    finally:
        _cleanup(child)
    assert not list(tmp_path.rglob("*.part"))
    # every summary left on disk describes complete outputs
    for name in SIGNAL_NAMES:
        outdir = tmp_path / name
        if (outdir / "summary.json").exists():
            assert is_done(outdir, _digest(outdir)), name


def test_a_figure_finished_on_disk_counts_for_the_interrupt_report(tmp_path):
    """A worker writes its outputs before the parent hears of them; the report of an interrupt
    then takes figures finished on disk during this run (same configuration) as finished."""
    before = time.time()
    run_one(NAME, quick=True, out=tmp_path, smoke=True)
    after = time.time() + 1.0
    summary = finished_since(NAME, tmp_path, before, quick=True, smoke=True)
    assert summary is not None and summary["name"] == NAME and summary["verdict"]
    assert finished_since(NAME, tmp_path, after, quick=True, smoke=True) is None  # an earlier run's
    assert finished_since(NAME, tmp_path, before, quick=False) is None  # another configuration
    (tmp_path / NAME / "data.nc").write_bytes(b"truncated")  # incomplete outputs
    assert finished_since(NAME, tmp_path, before, quick=True, smoke=True) is None
    assert finished_since("glpr-circle", tmp_path, before, quick=True, smoke=True) is None  # never run


def test_interrupted_says_what_finished():
    exc = Interrupted(signal.SIGTERM, [{"name": "a", "passed": True, "cached": True}], ["b", "c"])
    assert isinstance(exc, KeyboardInterrupt)
    assert str(exc) == (
        "interrupted by SIGTERM: finished 1 of 3: a (PASS, cached); not finished: b, c; "
        "run the same command again to resume."
    )


@linux_only
def test_a_worker_killed_from_outside_fails_its_figure_and_the_run_goes_on(tmp_path):
    """A worker that dies without an answer (OOM killer, a crash) is one failed figure, not a hang."""
    import threading

    me = os.getpid()
    killed = []

    def kill_first_worker():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not killed:
            for pid in _children(me):
                try:
                    cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
                except OSError:
                    continue
                if b"spawn_main" in cmd:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                    return
            time.sleep(0.01)

    killer = threading.Thread(target=kill_first_worker)
    killer.start()
    names = ["glpr-equiangular", "arxiv-fig1", "arxiv-fig4"]
    summaries = reproduce(names, out=tmp_path, smoke=True, progress=False, workers=2)
    killer.join()
    assert killed
    died = [s for s in summaries if "error" in s]
    assert len(died) == 1 and "worker process died (exit code -9)" in died[0]["error"]
    assert [s["name"] for s in summaries] == names
    assert all(s["passed"] for s in summaries if "error" not in s)
    assert not (tmp_path / died[0]["name"] / "summary.json").exists()


def test_a_worker_dead_before_its_first_task_fails_that_task_and_the_rest_run(monkeypatch):
    """The race CI met: the worker is killed between its start and the parent's first send.

    Writing to a pipe with no reader raised BrokenPipeError out of ``run_parallel``; the death
    must instead be found through the process's sentinel, as for a worker killed mid-task.
    """
    import operator

    from riemattn.experiments import _workers

    started = []
    original = _workers._Worker.__init__

    def init_then_kill_the_first(self, *args, **kwargs):
        original(self, *args, **kwargs)
        if not started:
            self.proc.kill()
            self.proc.join(10.0)
        started.append(self.proc.pid)

    monkeypatch.setattr(_workers._Worker, "__init__", init_then_kill_the_first)
    done = []
    _workers.run_parallel(
        [1, 2, 3],
        workers=2,
        target=operator.neg,
        args=(),
        on_done=done.append,
        on_died=lambda task, code: ("died", task, code),
        partial_files=lambda task: [],
    )
    assert sorted(done, key=str) == sorted([("died", 1, -signal.SIGKILL), -2, -3], key=str)
