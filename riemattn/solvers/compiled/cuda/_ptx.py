"""The CUDA engine's kernels compiled to PTX without a GPU (private; tests and diagnostics).

numba-cuda compiles a kernel to PTX for a given compute capability without a device
(``numba.cuda.compile_ptx(..., cc=...)``), but a kernel that calls device functions asks the
current device for its compute capability while it compiles them (numba-cuda 0.30,
``CUDADispatcher.compile_device``). :func:`kernels_ptx` answers that question with the requested
capability for the duration of the compilation, so the engine's two kernels -- with every device
function they call, the field's kernels included -- compile for, e.g., sm_90 (H100) on a machine
without a GPU or driver; it needs libNVVM (the ``cu12`` extra of numba-cuda ships it).
"""

from __future__ import annotations

import contextlib

import numpy as np


@contextlib.contextmanager
def _capability(cc):
    from numba.cuda import dispatcher

    class _Device:
        compute_capability = tuple(cc)

    saved = dispatcher.get_current_device
    dispatcher.get_current_device = lambda: _Device()
    try:
        yield
    finally:
        dispatcher.get_current_device = saved


def _signatures(dtype):
    """numba types of the kernels' arguments (the engine's layout; sizes do not matter)."""
    from numba import typeof

    f, i64 = (lambda *s: np.zeros(s)), (lambda *s: np.zeros(s, dtype=np.int64))
    z = lambda *s: np.zeros(s, dtype=dtype)  # noqa: E731
    fl = np.float64(0.0)
    adaptive = (i64(9), f(11), f(2, 2), f(2), f(2), f(2), f(2), f(2, 2), f(2), True, fl, fl, fl, fl, f(2),
                np.int64(1), i64(32), f(2), f(1, 1), z(2, 2), z(2, 2), z(2, 2, 2), z(2, 2, 2), z(2, 2, 2)) + tuple(
        z(2, 2) for _ in range(10)) + (f(2), z(2, 2, 2), i64(4, 2), f(2))
    fixed = (i64(9), f(2, 2), f(2), f(2), f(2), True, f(2), f(2), i64(2), i64(32), f(2), f(1, 1), z(2, 2),
             z(2, 2), z(2, 2, 2)) + tuple(z(2, 2) for _ in range(6)) + (z(2, 2, 2), i64(4, 2), f(2))
    return (tuple(typeof(a) for a in adaptive), tuple(typeof(a) for a in fixed))


def kernels_ptx(cc=(9, 0), dtype=np.float64, which=("adaptive", "fixed"), shape=None) -> dict:
    """PTX of the engine's kernels ``which`` for compute capability ``cc``: {"adaptive": str, "fixed": str};
    the generic kernels, or those specialised to ``shape`` = (l, d, heads) (:mod:`._fast`)."""
    from numba import cuda

    from ._loop import adaptive_kernel, fixed_kernel

    if shape is not None:
        from ._fast import kernels

        adaptive_kernel, fixed_kernel = kernels(*shape, np.dtype(dtype) == np.float32)

    sig_a, sig_f = _signatures(dtype)
    out = {}
    with _capability(cc):
        for name, kern, sig in (("adaptive", adaptive_kernel, sig_a), ("fixed", fixed_kernel, sig_f)):
            if name not in which:
                continue
            ptx, _ = cuda.compile_ptx(kern.py_func, sig, cc=tuple(cc))
            out[name] = ptx
    return out
