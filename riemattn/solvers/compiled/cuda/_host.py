"""What the CUDA engine moves between host and device, and on which stream (private).

Issue 56 measured ~18 synchronous copies and ~20 allocations per call of the engine, with the
transposes of the state and of the saved values done on the host. Here:

* **one stream per call** (:func:`stream_for`): every copy and every launch of a call is queued on
  it and the host waits once, before it reads the statistics. For a PyTorch CUDA tensor the stream
  is PyTorch's current stream on the tensor's device (``cuda.external_stream``), so the solve is
  ordered after the operations that made the tensor and before those that read the result, with
  no device-wide synchronisation;
* **the packed field's arrays cached per field** (:func:`packed`): the pack's ``floats`` (W,
  heads, beta) and ``per`` (per-trajectory weights) are copied to a device once per (field,
  device) and reused while the field packs to the same numbers -- checked on the host at each call
  by comparing with the copy kept (O(size of the weights), no transfer); a field that is garbage
  collected takes its entry with it (weak keys). The older kernels' method tables are cached per
  (method, device) (:func:`tables`);
* **pinned staging** (:func:`upload`, :func:`download`): copies go through page-locked host
  buffers, kept per (shape, dtype) and thread (:data:`PIN_ENTRIES` of them, each at most
  :data:`PIN_MAX_BYTES`; larger arrays are copied from pageable memory), so that they run
  asynchronously on the call's stream and at the bus's full rate. A download returns a copy of the
  staging buffer (the buffer is reused by the next call);
* **transposes on the device** (:func:`rows_to_columns`, :func:`columns_to_rows`): the older
  kernels keep the trajectory as the last axis (coalesced global columns); the (B, n) state is
  transposed into that layout, and the saved (n_save, n, B) values back into (n_save, B, n), by
  kernels, never on the host.

Whether pinned staging and one stream save time on a given card is for a GPU to measure
(``benchmarks/gpu_ensemble.py``); none was lent to this work. The simulator runs the same code
(its pinned arrays are ordinary arrays, its streams do nothing): the tests count the copies and
allocations of a call (``tests/solvers/test_cuda_host.py``).
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict

import numpy as np
from numba import cuda

#: page-locked staging buffers kept per thread (least recently used dropped first)
PIN_ENTRIES = 4
#: the largest array copied through a page-locked buffer (larger: from pageable memory)
PIN_MAX_BYTES = 256 * 2**20
#: threads per block of the transposes (TILE x TILE tiles)
TILE = 16

_PACKS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_TABLES: dict = {}
_LOCAL = threading.local()
_LOCK = threading.Lock()


def device_id() -> int:
    """The current device's ordinal (0 under the simulator, whose device has none)."""
    return int(getattr(cuda.get_current_device(), "id", 0))


def stream_for(y0):
    """The stream of a call: PyTorch's current stream on a CUDA tensor's device, else a new one."""
    from ...._backend import is_torch

    if is_torch(y0) and y0.device.type == "cuda":
        import torch

        handle = torch.cuda.current_stream(y0.device).cuda_stream
        return cuda.external_stream(handle) if handle else cuda.default_stream()  # 0: the legacy default stream
    return cuda.stream()


def packed(field, pack, stream):
    """(floats, per) of ``pack`` on the current device, cached per (field, device)."""
    floats = np.ascontiguousarray(pack.floats, dtype=np.float64)
    per = np.ascontiguousarray(pack.per, dtype=np.float64)
    key = device_id()
    with _LOCK:
        try:
            entries = _PACKS.setdefault(field, {})
        except TypeError:  # a field that takes no weak reference: no cache
            entries = {}
        hit = entries.get(key)
    if hit is not None and _same(hit[0], floats) and _same(hit[1], per):
        return hit[2], hit[3]
    floats_d, per_d = cuda.to_device(floats, stream=stream), cuda.to_device(per, stream=stream)
    with _LOCK:
        entries[key] = (floats.copy(), per.copy(), floats_d, per_d)
    return floats_d, per_d


def _same(kept, now):
    """The same numbers, NaNs included (a NaN weight packs to the same bits every call)."""
    return kept.shape == now.shape and kept.tobytes() == now.tobytes()


def tables(name, arrays, stream):
    """The older kernels' method tables (a dict of host arrays) on the current device, cached per
    (method, device)."""
    key = (name, device_id())
    with _LOCK:
        hit = _TABLES.get(key)
    if hit is None:
        hit = {k: cuda.to_device(np.ascontiguousarray(v), stream=stream) for k, v in arrays.items()}
        with _LOCK:
            _TABLES[key] = hit
    return hit


def _pinned(shape, dtype):
    """A page-locked buffer of this shape and dtype, reused per thread; None above PIN_MAX_BYTES."""
    dtype = np.dtype(dtype)
    if int(np.prod(shape, dtype=np.int64)) * dtype.itemsize > PIN_MAX_BYTES:
        return None
    cache = getattr(_LOCAL, "pinned", None)
    if cache is None:
        cache = _LOCAL.pinned = OrderedDict()
    key = (tuple(int(s) for s in shape), dtype.str)
    buf = cache.pop(key, None)
    if buf is None:
        buf = cuda.pinned_array(key[0], dtype=dtype)
    cache[key] = buf
    while len(cache) > PIN_ENTRIES:
        cache.popitem(last=False)
    return buf


def upload(host, stream):
    """``host`` on the device, copied on ``stream`` through a pinned buffer where it fits. The
    buffer is reused only by a later call, which the caller's single synchronisation orders after
    this copy."""
    host = np.ascontiguousarray(host)
    buf = _pinned(host.shape, host.dtype)
    if buf is None:
        return cuda.to_device(host, stream=stream)
    buf[...] = host
    return cuda.to_device(buf, stream=stream)


def download(dev, stream):
    """Queue the copy of the device array ``dev`` to the host on ``stream``; returns a function
    that, after the stream is synchronised, gives the host array (a copy of the pinned buffer)."""
    buf = _pinned(dev.shape, dev.dtype)
    if buf is None:
        out = np.empty(dev.shape, dtype=dev.dtype)
        dev.copy_to_host(out, stream=stream)
        return lambda: out
    dev.copy_to_host(buf, stream=stream)
    return lambda: np.array(buf)


@cuda.jit
def _transpose(src, dst):
    """dst[k, j, i] = src[k, i, j] for 3-D arrays (one thread per (i, j), looping over k)."""
    i, j = cuda.grid(2)
    if i < src.shape[1] and j < src.shape[2]:
        for k in range(src.shape[0]):
            dst[k, j, i] = src[k, i, j]


def _launch_transpose(src, dst, stream):
    if src.size:
        grid = ((src.shape[1] + TILE - 1) // TILE, (src.shape[2] + TILE - 1) // TILE)
        _transpose[grid, (TILE, TILE), stream](src, dst)


def rows_to_columns(Y, stream):
    """(B, n) on the device -> a new (n, B) device array (the older kernels' layout)."""
    out = cuda.device_array((Y.shape[1], Y.shape[0]), dtype=Y.dtype, stream=stream)
    _launch_transpose(Y.reshape((1,) + Y.shape), out.reshape((1,) + out.shape), stream)
    return out


def columns_to_rows(saved, stream):
    """(n_save, n, B) on the device -> a new (n_save, B, n) device array (the result's layout)."""
    out = cuda.device_array((saved.shape[0], saved.shape[2], saved.shape[1]), dtype=saved.dtype, stream=stream)
    _launch_transpose(saved, out, stream)
    return out
