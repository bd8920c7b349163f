"""ra.sweep on a LocalCluster with 2 worker processes: serial equality, faults, resume, determinism."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr
from threadpoolctl import threadpool_limits

import riemattn as ra
from riemattn.errors import InputTypeError, ValidationError
from riemattn.sweep import (STATUS_DONE, STATUS_FAILED, grid_points, local_cluster, point_rng,
                             point_seed)

sys.path.insert(0, str(Path(__file__).parents[1]))
import _sweep_points as pts  # noqa: E402

distributed = pytest.importorskip("distributed")

GRID = {"beta": [0.5, 2.0], "d": [2, 3, 4], "seed": [0, 1]}  # 2 x 3 x 2
SEED = 11


@pytest.fixture(scope="module")
def marks_dir(tmp_path_factory):
    """One directory of call markers for the module, in the environment before any worker starts."""
    d = tmp_path_factory.mktemp("marks")
    old = os.environ.get("RIEMATTN_SWEEP_MARKS")
    os.environ["RIEMATTN_SWEEP_MARKS"] = str(d)
    yield d
    if old is None:
        del os.environ["RIEMATTN_SWEEP_MARKS"]
    else:
        os.environ["RIEMATTN_SWEEP_MARKS"] = old


@pytest.fixture(scope="module")
def client(marks_dir):
    cluster = local_cluster(2)
    c = distributed.Client(cluster)
    yield c
    c.close()
    cluster.close()


@pytest.fixture
def marks(marks_dir):
    """The (emptied) directory where point functions leave one marker file per call."""
    for f in marks_dir.iterdir():
        f.unlink()
    return marks_dir


def serial(point_fn, grid, seed):
    """The point function run point by point in this process, without Dask: {coords: Dataset}."""
    out = {}
    with threadpool_limits(limits=1):
        for p in grid_points(grid):
            out[tuple(sorted(p.items()))] = point_fn(dict(p), point_rng(p, seed))
    return out


def assert_store_equals_serial(store, expected, skip=()):
    ds = xr.open_zarr(store).load()
    for key, ref in expected.items():
        if key in skip:
            continue
        sel = ds.sel(dict(key))
        assert int(sel.status) == STATUS_DONE, key
        for name in ref.data_vars:
            np.testing.assert_array_equal(sel[name].transpose(*ref[name].dims).values,
                                          ref[name].values, err_msg=f"{name} at {key}")
    return ds


def test_point_seed_is_a_digest_of_sorted_coordinates():
    a = point_seed({"beta": 0.5, "d": 3, "mask": "full"}, 7)
    b = point_seed({"mask": "full", "d": 3, "beta": 0.5}, 7)
    assert a.entropy == b.entropy
    digest = hashlib.sha256(json.dumps([["beta", 0.5], ["d", 3], ["mask", "full"]]).encode()).digest()
    words = [int.from_bytes(digest[4 * i: 4 * i + 4], "little") for i in range(8)]
    assert list(a.entropy) == [7] + words
    assert point_seed({"beta": 0.5, "d": 3, "mask": "full"}, 8).entropy != a.entropy
    assert point_seed({"beta": 0.25, "d": 3, "mask": "full"}, 7).entropy != a.entropy
    # numpy scalars are the same coordinate as Python ones
    assert point_seed({"beta": np.float64(0.5), "d": np.int64(3), "mask": "full"}, 7).entropy == a.entropy


def test_grid_completes_and_equals_serial(tmp_path, client, marks):
    res = ra.sweep(pts.sa_point, GRID, tmp_path / "s.zarr", client=client, seed=SEED)
    assert res.complete and res.computed == 12 and res.skipped == 0 and not res.failed
    assert len(list(marks.glob("start-*"))) == 12
    ds = assert_store_equals_serial(tmp_path / "s.zarr", serial(pts.sa_point, GRID, SEED))
    assert ds.misalignment.dims == ("beta", "d", "seed", "time")
    assert ds.misalignment.shape == (2, 3, 2, 6)
    # the seeds really differ: two seeds of one (beta, d) give different trajectories
    assert not np.array_equal(ds.first.isel(seed=0).values, ds.first.isel(seed=1).values)


def test_same_values_and_bytes_with_one_and_two_workers(tmp_path):
    r1 = ra.sweep(pts.sa_point, GRID, tmp_path / "one.zarr", workers=1, seed=SEED)
    r2 = ra.sweep(pts.sa_point, GRID, tmp_path / "two.zarr", workers=2, seed=SEED)
    assert r1.complete and r2.complete
    a, b = xr.open_zarr(r1.store).load(), xr.open_zarr(r2.store).load()
    xr.testing.assert_identical(a, b)
    for name in ("misalignment", "clusters", "first", "status"):
        chunks1 = sorted((tmp_path / "one.zarr" / name).iterdir())
        chunks2 = sorted((tmp_path / "two.zarr" / name).iterdir())
        assert [c.name for c in chunks1] == [c.name for c in chunks2]
        for c1, c2 in zip(chunks1, chunks2):
            assert c1.read_bytes() == c2.read_bytes(), f"{name}/{c1.name}"


def test_killed_worker_still_yields_the_complete_identical_store(tmp_path, marks, monkeypatch):
    monkeypatch.setenv("RIEMATTN_SWEEP_DELAY", "0.4")
    # a cluster of its own, started after the variable is set (its workers see it): killing one of
    # its workers cannot leave the module's shared client without workers for the next tests
    # (restarting the shared client's workers timed out under load, and the next test then waited
    # for workers forever)
    cluster = local_cluster(2)
    client = distributed.Client(cluster)
    try:
        _killed_worker_run(tmp_path, client, marks, monkeypatch)
    finally:
        client.close()
        cluster.close()


def _killed_worker_run(tmp_path, client, marks, monkeypatch):
    killed = {}

    def kill_one_busy_worker():
        deadline = time.time() + 60
        while time.time() < deadline and len(list(marks.glob("start-*"))) < 3:
            time.sleep(0.02)
        pids = client.run(os.getpid)  # {worker address: pid}
        for addr, keys in client.processing().items():
            if keys:
                pid = pids[addr]
                killed["pid"], killed["in_flight"] = pid, len(keys)
                os.kill(pid, signal.SIGKILL)
                return

    t = threading.Thread(target=kill_one_busy_worker)
    t.start()
    res = ra.sweep(pts.sa_point, GRID, tmp_path / "k.zarr", client=client, seed=SEED)
    t.join()
    assert killed, "no worker was killed"
    with pytest.raises(ProcessLookupError):
        os.kill(killed["pid"], 0)
    assert res.complete and not res.failed
    starts = len(list(marks.glob("start-*")))
    assert starts > 12, f"the killed worker's in-flight point was not rerun ({starts} calls)"
    monkeypatch.delenv("RIEMATTN_SWEEP_DELAY")
    assert_store_equals_serial(tmp_path / "k.zarr", serial(pts.sa_point, GRID, SEED))


INTERRUPTED = """
import signal, sys
# like a terminal's Ctrl-C whatever started the tests: a background job (CI runners, `cmd &`)
# inherits SIGINT ignored, and the interrupt below would then be lost
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.path.insert(0, {tests!r})
import riemattn as ra, _sweep_points as pts
ra.sweep(pts.sa_point, {grid!r}, {store!r}, workers=2, seed={seed})
"""


def test_interrupted_client_rerun_recomputes_nothing_finished(tmp_path, marks, client):
    store = tmp_path / "i.zarr"
    # the interrupted run leaves its markers in a directory of its own, so that nothing another
    # test's workers write can make the interrupt come early
    sub_marks = tmp_path / "marks-interrupted"
    sub_marks.mkdir()
    env = {**os.environ, "RIEMATTN_SWEEP_DELAY": "0.4", "RIEMATTN_SWEEP_MARKS": str(sub_marks)}
    script = INTERRUPTED.format(tests=str(Path(__file__).parents[1]), grid=GRID, store=str(store), seed=SEED)
    proc = subprocess.Popen([sys.executable, "-c", script], env=env, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while time.time() < deadline and len(list(sub_marks.glob("end-*"))) < 5 and proc.poll() is None:
        time.sleep(0.02)
    assert proc.poll() is None, "the sweep finished before it could be interrupted"
    proc.send_signal(signal.SIGINT)  # Ctrl-C in the client
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    status = np.asarray(zarr.open_group(str(store), mode="r")["status"][...])
    n_done = int(np.sum(status == STATUS_DONE))
    assert 0 < n_done < 12, f"interrupt came too early or too late: {n_done} points done"
    for f in marks.iterdir():
        f.unlink()
    client.wait_for_workers(2, timeout=120)  # a clear failure, never a hang, if workers are gone
    res = ra.sweep(pts.sa_point, GRID, store, client=client, seed=SEED)
    calls = len(list(marks.glob("start-*")))
    assert calls == 12 - n_done and res.computed == 12 - n_done and res.skipped == n_done
    assert res.complete
    # a third run computes nothing at all
    res = ra.sweep(pts.sa_point, GRID, store, client=client, seed=SEED)
    assert res.computed == 0 and res.skipped == 12 and len(list(marks.glob("start-*"))) == calls
    assert_store_equals_serial(store, serial(pts.sa_point, GRID, SEED))


def test_failing_point_is_recorded_and_the_rest_continue(tmp_path, client, marks):
    store = tmp_path / "f.zarr"
    res = ra.sweep(pts.failing_point, GRID, store, client=client, seed=SEED)
    bad = [{"beta": 2.0, "d": 3, "seed": 0}, {"beta": 2.0, "d": 3, "seed": 1}]
    assert sorted(json.dumps(f["coords"], sort_keys=True) for f in res.failed) == \
        sorted(json.dumps(b, sort_keys=True) for b in bad)
    assert all("FloatingPointError: deliberate failure at d=3, beta=2.0" == f["error"] for f in res.failed)
    assert not res.complete and res.computed == 12
    assert "failed {'beta': 2.0, 'd': 3, 'seed': 0}" in str(res)
    expected = serial(pts.sa_point, GRID, SEED)
    skip = [tuple(sorted(b.items())) for b in bad]
    ds = assert_store_equals_serial(store, expected, skip=skip)
    assert int((ds.status == STATUS_FAILED).sum()) == 2
    assert ds.status.sel(beta=2.0, d=3).values.tolist() == [2, 2]
    assert np.all(np.isnan(ds.misalignment.sel(beta=2.0, d=3).values))
    assert len(ds.attrs["failed"]) == 2
    # a re-run retries only the failed points
    for f in marks.iterdir():
        f.unlink()
    res = ra.sweep(pts.failing_point, GRID, store, client=client, seed=SEED)
    assert len(list(marks.glob("start-*"))) == 0  # they raise before the marker
    assert res.computed == 2 and res.skipped == 10 and len(res.failed) == 2


def test_batch_dims_carry_all_betas_of_one_point_in_one_call(tmp_path, client, marks):
    res = ra.sweep(pts.sa_point, GRID, tmp_path / "b.zarr", client=client, seed=SEED,
                   batch_dims=("beta",))
    assert res.complete and res.computed == 12
    assert len(list(marks.glob("start-*"))) == 6  # one call per (d, seed)
    ds = xr.open_zarr(res.store).load()
    for d in GRID["d"]:
        for s in GRID["seed"]:
            for beta in GRID["beta"]:  # each beta alone, with the batch's stream (no beta in it)
                ref = pts.sa_point({"beta": beta, "d": d, "seed": s}, point_rng({"d": d, "seed": s}, SEED))
                got = ds.sel(beta=beta, d=d, seed=s)
                np.testing.assert_allclose(got.misalignment.values, ref.misalignment.values,
                                           rtol=0, atol=1e-12)
                assert int(got.clusters) == int(ref.clusters)


def test_explicit_list_grid(tmp_path, client):
    points = [{"beta": 1.0, "d": 2, "seed": 0}, {"beta": 3.0, "d": 4, "seed": 5}]
    res = ra.sweep(pts.sa_point, points, tmp_path / "l.zarr", client=client, seed=SEED)
    ds = xr.open_zarr(res.store).load()
    assert ds.misalignment.dims == ("point", "time")
    assert ds.d.values.tolist() == [2, 4]
    for i, p in enumerate(points):
        ref = pts.sa_point(dict(p), point_rng(p, SEED))
        np.testing.assert_array_equal(ds.misalignment.isel(point=i).values, ref.misalignment.values)


def test_validation_names_the_argument(tmp_path, client):
    with pytest.raises(InputTypeError, match="point_fn"):
        ra.sweep(3, GRID, tmp_path / "v.zarr", client=client)
    with pytest.raises(InputTypeError, match="two positional arguments"):
        ra.sweep(lambda p: p, GRID, tmp_path / "v.zarr", client=client)
    with pytest.raises(InputTypeError, match="two positional arguments"):
        ra.sweep(lambda p, *, rng: p, GRID, tmp_path / "v.zarr", client=client)
    with pytest.raises(ValidationError, match="grid\\['d'\\] has no values"):
        ra.sweep(pts.sa_point, {"d": []}, tmp_path / "v.zarr", client=client)
    with pytest.raises(ValidationError, match="batch_dims entry 'gamma'"):
        ra.sweep(pts.sa_point, GRID, tmp_path / "v.zarr", client=client, batch_dims=("gamma",))
    with pytest.raises(ValidationError, match="seed"):
        ra.sweep(pts.sa_point, GRID, tmp_path / "v.zarr", client=client, seed=-1)
    with pytest.raises(InputTypeError, match="client"):
        ra.sweep(pts.sa_point, GRID, tmp_path / "v.zarr", client=42)
    with pytest.raises(InputTypeError, match="grid values"):
        ra.sweep(pts.sa_point, {"d": [object()]}, tmp_path / "v.zarr", client=client)
    small = {"beta": [1.0], "d": [2], "seed": [0]}
    ra.sweep(pts.sa_point, small, tmp_path / "v.zarr", client=client)
    with pytest.raises(ValidationError, match="holds a different sweep"):
        ra.sweep(pts.sa_point, {**small, "d": [3]}, tmp_path / "v.zarr", client=client)
    res = ra.sweep(pts.sa_point, {**small, "d": [3]}, tmp_path / "v.zarr", client=client, overwrite=True)
    assert res.complete and xr.open_zarr(res.store).d.values.tolist() == [3]
