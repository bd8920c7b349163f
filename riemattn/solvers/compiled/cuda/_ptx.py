"""The CUDA engine's kernels compiled to PTX without a GPU (private; tests and diagnostics).

numba-cuda compiles a kernel to PTX for a given compute capability without a device
(``numba.cuda.compile_ptx(..., cc=...)``), but a kernel that calls device functions asks the
current device for its compute capability while it compiles them (numba-cuda 0.30,
``CUDADispatcher.compile_device``). :func:`kernels_ptx` answers that question with the requested
capability for the duration of the compilation, so the engine's two kernels -- with every device
function they call, the field's kernels included -- compile for, e.g., sm_90 (H100) on a machine
without a GPU or driver; it needs libNVVM (the ``cu12`` extra of numba-cuda ships it).

The proxy figures (``benchmarks/gpu_ptx.py``, tests/solvers/test_cuda_ptx.py) come from the PTX:
:func:`assemble` runs ``ptxas -v`` (registers, stack frame, spill bytes) and writes the cubin,
:func:`sass` disassembles it (``nvdisasm``), :func:`step_loop` finds the kernel's step loop in the
SASS (the strongly connected part of its control-flow graph with the most instructions: the
outermost loop, the solve's ``while``) and counts its instructions and its local (LDL/STL) and
global (LDG/STG) memory instructions; :mod:`._sass` does the parsing.
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
import shutil
import subprocess
import sys

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


def tool(name):
    """Path of the CUDA tool ``name`` ("ptxas", "nvdisasm") or None: ``$RIEMATTN_<NAME>``, the PATH, then
    the NVIDIA pip wheels on sys.path (``nvidia-cuda-nvcc-cu12`` ships ptxas, ``nvidia-cuda-nvdisasm``
    nvdisasm)."""
    env = os.environ.get("RIEMATTN_" + name.upper())
    if env:
        return env if os.path.isfile(env) else None
    found = shutil.which(name)
    if found:
        return found
    for root in sys.path:
        for hit in sorted(glob.glob(os.path.join(root or ".", "nvidia", "*", "bin", name))):
            if os.access(hit, os.X_OK):
                return hit
    return None


def assemble(ptx, cc, path):
    """``ptxas -v`` on the PTX text for sm_<cc>; the cubin written to ``path``. Returns the entry's
    {"registers", "stack", "spill_stores", "spill_loads"} (bytes) from ptxas's report."""
    exe = tool("ptxas")
    if exe is None:
        raise FileNotFoundError("ptxas not found (pip install nvidia-cuda-nvcc-cu12, or set RIEMATTN_PTXAS)")
    src = path + ".ptx"
    with open(src, "w") as fh:
        fh.write(ptx)
    arch = "sm_%d%d" % tuple(cc)
    out = subprocess.run([exe, "-arch=" + arch, "-v", src, "-o", path], capture_output=True, text=True, check=True)
    return ptxas_info(out.stderr + out.stdout)


def ptxas_info(text):
    """The kernel entry's figures from ``ptxas -v``'s report (the first function with a register count)."""
    info = {}
    for block in re.split(r"Function properties for ", text)[1:]:
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", block)
        r = re.search(r"Used (\d+) registers", block)
        if m and r:
            info = dict(registers=int(r.group(1)), stack=int(m.group(1)), spill_stores=int(m.group(2)),
                        spill_loads=int(m.group(3)))
            break
    return info


def sass(cubin):
    """The cubin's SASS (``nvdisasm -c``)."""
    exe = tool("nvdisasm")
    if exe is None:
        raise FileNotFoundError("nvdisasm not found (pip install nvidia-cuda-nvdisasm, or set RIEMATTN_NVDISASM)")
    return subprocess.run([exe, "-c", cubin], capture_output=True, text=True, check=True).stdout


def step_loop(text):
    """Counts of the kernel's SASS and of its step loop: {"instructions", "loop", "LDL", "STL", "LDG", "STG"
    (in the loop), "STG_outside", "calls" (calls in the loop)}. See :func:`._sass.largest_loop`."""
    from ._sass import largest_loop

    return largest_loop(text)


def generated_ptx(name, ints, cc=(9, 0), dtype=np.float64, which=("adaptive", "fixed"), saves=True,
                  unroll=None, autonomous=True, diff=False, lanes=False) -> dict:
    """PTX of the kernels generated for the stepper ``name`` and the field configuration ``ints``
    (:mod:`._gen`; :mod:`._ros` for rodas4, rodas4p, auto: adaptive only, with the pack's ``autonomous`` and
    the difference form ``diff``): {"adaptive": str, "fixed": str} (the kinds in ``which``);
    ``saves=False``: the probe without the saving code; ``unroll``: as :func:`._gen.kernels`;
    ``lanes``: the lanes form (:mod:`._warp`: a lane per token; the same arguments)."""
    from numba import cuda, typeof

    from . import _gen, _ros, _warp

    is32 = np.dtype(dtype) == np.float32
    if name in _ros.METHODS:
        adaptive, fixed = _ros.kernels(name, ints, is32, autonomous, diff, saves)
    elif lanes:
        adaptive, fixed = _warp.kernels(name, ints, is32, saves)
    else:
        adaptive, fixed = _gen.kernels(name, ints, is32, saves, unroll)
    f, z = (lambda *s: np.zeros(s)), (lambda *s: np.zeros(s, dtype=dtype))
    fl, i64 = np.float64(0.0), (lambda *s: np.zeros(s, dtype=np.int64))
    sigs = {"adaptive": (adaptive, (fl, fl, fl, fl, fl, np.int64(1), f(2), f(1, 1), z(2, 2), f(2), z(2, 2, 2),
                                    i64(4, 2), f(2))),
            "fixed": (fixed, (f(2), f(2), i64(2), f(2), f(1, 1), z(2, 2), z(2, 2, 2), i64(4, 2), f(2)))}
    out = {}
    with _capability(cc):
        for kind in which:
            kern, args = sigs[kind]
            out[kind] = cuda.compile_ptx(kern.py_func, tuple(typeof(a) for a in args), cc=tuple(cc))[0]
    return out
