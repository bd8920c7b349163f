"""What the CUDA engine moves between host and device (riemattn.solvers.compiled.cuda._host), without a GPU.

Under numba-cuda's simulator (NUMBA_ENABLE_CUDASIM=1 in a subprocess: numba reads it once, at
import) the engine runs the code a GPU runs, and every copy, allocation and wait goes through
numba.cuda's API, which the script below counts:

* a repeated call copies the packed field (weights, beta) to the device no more (cached per field
  and device), allocates its outputs only, copies y0 and the save times in and the statistics and
  saved values out, and waits once (on its stream; never a device-wide synchronisation);
* a field whose pack changes numbers is copied again (the cache is checked, not trusted); a field
  that is collected leaves the cache;
* the older kernels (state in global columns, (n, B)) receive the (B, n) state and give back the
  (n_save, B, n) layout through transposes on the device: their results are the transposes
  computed by NumPy, and the same as the generated kernels' (the same operations);
* an empty batch launches nothing (a grid of 0 blocks is an error on a GPU; ``integrate`` answers it
  before any engine) and gives empty results;
* the pinned staging buffers are reused per shape, bounded in number and size, and a download is a
  copy (the next call reuses the buffer).
"""

from __future__ import annotations

import textwrap

import pytest

from _subprocess import numba_cuda, simulate_cuda


SCRIPT = textwrap.dedent(r"""
    import gc, json, weakref
    import numpy as np
    import numba.cuda as cuda
    from numba.cuda.simulator import api as sim_api
    from numba.cuda.simulator.cudadrv import devicearray as sim_da
    import riemattn as ra
    from riemattn.experiments._papers import hemisphere_heads
    from riemattn.solvers.compiled.cuda import _gen, _host

    out = {}
    counts = {}

    def counted(name, fn):
        def wrap(*a, **k):
            counts[name] = counts.get(name, 0) + 1
            return fn(*a, **k)
        return wrap

    cuda.to_device = counted("to_device", cuda.to_device)
    cuda.device_array = counted("device_array", cuda.device_array)
    cuda.synchronize = counted("device_synchronize", cuda.synchronize)
    sim_da.FakeCUDAArray.copy_to_host = counted("copy_to_host", sim_da.FakeCUDAArray.copy_to_host)
    sim_api.stream.synchronize = counted("stream_synchronize", sim_api.stream.synchronize)

    rng = np.random.default_rng(3)
    y0 = rng.normal(size=(5, 4, 3))
    y0 /= np.linalg.norm(y0, axis=-1, keepdims=True)
    field = ra.AttentionField(hemisphere_heads(), beta=np.linspace(0.5, 2.0, 5))
    kw = dict(engine="cuda", rtol=1e-6, atol=1e-6, saveat=[0.0, 0.1, 0.3])
    first = ra.integrate(field, y0, (0.0, 0.3), "dopri5", **kw)
    counts.clear()
    second = ra.integrate(field, y0, (0.0, 0.3), "dopri5", **kw)
    out["repeat"] = dict(counts, same=bool(np.array_equal(first.y, second.y)))

    counts.clear()  # the same field, other per-trajectory numbers: its pack changes, copied again
    beta_changed = ra.AttentionField(hemisphere_heads(), beta=np.linspace(0.5, 2.0, 5))
    ra.integrate(beta_changed, y0, (0.0, 0.3), "dopri5", **kw)
    out["other_field"] = dict(counts)
    entries = len(_host._PACKS)
    ref = weakref.ref(beta_changed)
    del beta_changed
    gc.collect()
    out["collected"] = dict(before=entries, after=len(_host._PACKS), dead=ref() is None)

    class Pack:  # a pack whose numbers change under the same field: copied again
        def __init__(self, floats, per):
            self.floats, self.per = floats, per
    key_field = ra.usa(2.0, 3)
    counts.clear()
    a = _host.packed(key_field, Pack(np.array([1.0, 2.0]), np.zeros((1, 1))), cuda.stream())
    b = _host.packed(key_field, Pack(np.array([1.0, 2.0]), np.zeros((1, 1))), cuda.stream())
    c = _host.packed(key_field, Pack(np.array([1.0, 3.0]), np.zeros((1, 1))), cuda.stream())
    nan1 = _host.packed(key_field, Pack(np.array([np.nan]), np.zeros((1, 1))), cuda.stream())
    nan2 = _host.packed(key_field, Pack(np.array([np.nan]), np.zeros((1, 1))), cuda.stream())
    out["validated"] = dict(copies=counts.get("to_device", 0), reused=a[0] is b[0], recopied=c[0] is not a[0],
                            values=np.asarray(c[0].copy_to_host()).tolist(), nan_reused=nan1[0] is nan2[0])

    # the older kernels: (n, B) inside, transposed on the device; the same numbers as the generated kernel
    counts.clear()
    limit, _gen.MAX_LOCAL = _gen.MAX_LOCAL, 0
    older = ra.integrate(field, y0, (0.0, 0.3), "dopri5", **kw)
    _gen.MAX_LOCAL = limit
    out["older"] = dict(counts, diff=float(np.abs(older.y - first.y).max()),
                        counts_equal=bool(np.array_equal(older.per_trajectory.nfev, first.per_trajectory.nfev)))

    s = cuda.stream()
    for B, n, k in ((1, 1, 1), (17, 30, 3), (33, 5, 2)):
        Y = rng.normal(size=(B, n))
        cols = _host.rows_to_columns(cuda.to_device(Y), s).copy_to_host()
        S = rng.normal(size=(k, n, B))
        rows = _host.columns_to_rows(cuda.to_device(S), s).copy_to_host()
        out[f"transpose {B} {n} {k}"] = bool(np.array_equal(cols, Y.T) and np.array_equal(rows, S.transpose(0, 2, 1)))

    _host._LOCAL.pinned = None
    p1 = _host._pinned((3, 4), np.float64)
    p2 = _host._pinned((3, 4), np.float64)
    for i in range(_host.PIN_ENTRIES):
        _host._pinned((i + 1,), np.float32)
    p3 = _host._pinned((3, 4), np.float64)
    big = _host._pinned((_host.PIN_MAX_BYTES // 8 + 1,), np.float64)
    d = cuda.to_device(np.arange(12.0).reshape(3, 4))
    get = _host.download(d, s)
    s.synchronize()
    first_copy = get()
    _host._pinned((3, 4), np.float64)[...] = -1.0  # the next call reuses the buffer
    out["pinned"] = dict(reused=p1 is p2, kept=len(_host._LOCAL.pinned), evicted=p3 is not p1, big=big is None,
                         copy_kept=first_copy.tolist() == np.arange(12.0).reshape(3, 4).tolist())

    from numba.cuda.simulator import kernel as sim_kernel
    grids = []
    getitem = sim_kernel.FakeCUDAKernel.__getitem__
    def record(self, conf):
        grids.append(conf[0])
        return getitem(self, conf)
    sim_kernel.FakeCUDAKernel.__getitem__ = record
    empty = {}
    for st, kw2 in (("dopri5", dict(saveat=[0.0, 0.3], rtol=1e-6, atol=1e-6)), ("rk4", dict(dt=0.1))):
        for lim in (limit, 0):  # the generated and the older kernels
            _gen.MAX_LOCAL = lim
            sol = ra.integrate(field, np.zeros((0, 4, 3)), (0.0, 0.3), st, engine="cuda", **kw2)
            empty[f"{st} {lim}"] = [list(sol.y.shape), bool(sol.success)]
    _gen.MAX_LOCAL = limit
    out["empty"] = dict(shapes=empty, grids=[int(np.prod(g)) for g in grids])
    print(json.dumps(out))
""")


pytestmark = pytest.mark.skipif(not numba_cuda(), reason="numba-cuda is not installed (pip install -e '.[cuda]')")


@pytest.fixture(scope="module")
def report():
    return simulate_cuda(SCRIPT)[-1]


def test_a_repeated_call_copies_the_state_in_and_the_results_out_only(report):
    r = report["repeat"]
    assert r["same"]
    # in: y0 (through a pinned buffer) and the save times; the field's arrays not again
    assert r["to_device"] == 2, r
    # allocated: the statistics, the failure times, the saved values -- outputs only
    assert r["device_array"] == 3, r
    # out: the statistics, the failure times, the saved values
    assert r["copy_to_host"] == 3, r
    # one wait on the call's stream (the finally's second wait finds nothing queued), never the device's
    assert r["stream_synchronize"] == 2 and r.get("device_synchronize", 0) == 0, r


def test_a_field_with_other_numbers_is_copied_again_and_collected_fields_leave_the_cache(report):
    assert report["other_field"]["to_device"] == 2 + 2, report["other_field"]  # y0, saveat + floats, per
    c = report["collected"]
    assert c["dead"] and c["after"] == c["before"] - 1, c
    v = report["validated"]
    assert v["copies"] == 2 + 2 + 2, v  # the first pack, the changed pack, the NaN pack: floats and per each
    assert v["reused"] and v["recopied"] and v["values"] == [1.0, 3.0] and v["nan_reused"], v


def test_older_kernels_transpose_on_the_device_and_agree_with_the_generated_kernel(report):
    r = report["older"]
    # the generated and the older kernels run the same operations in the same order: the same bits
    assert r["diff"] == 0.0 and r["counts_equal"], r
    assert r.get("device_synchronize", 0) == 0, r
    for key, ok in report.items():
        if key.startswith("transpose"):
            assert ok, key


def test_an_empty_batch_launches_no_empty_grid(report):
    e = report["empty"]
    # a launch of 0 blocks is an error on a GPU (the simulator runs it): none may happen
    assert all(g > 0 for g in e["grids"]), e
    for key, (shape, ok) in e["shapes"].items():
        assert ok and shape[1] == 0 and shape[-2:] == [4, 3], (key, shape)


def test_pinned_buffers_are_reused_bounded_and_downloads_are_copies(report):
    p = report["pinned"]
    assert p["reused"] and p["evicted"] and p["big"] and p["copy_kept"], p
    assert p["kept"] == 4, p  # PIN_ENTRIES
