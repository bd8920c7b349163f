"""The attention field on the GPU: the compiled engine's kernel sources compiled for CUDA (private).

The field's value comes from the same Python functions as the CPU kernels of
:mod:`riemattn.dynamics.kernels`: the plain-Python bodies (``py_func``) of ``forward``,
``tangent_rows`` and their helpers in ``riemattn.dynamics.kernels._kernel_attention`` (which allocate
nothing and call no function pointer) are compiled again by numba-cuda as device functions
(``numba.cuda.jit(device=True)``), with the names they call rebound to the device versions
(:func:`device_functions`). What is new here, and why:

* :func:`rhs` -- ``kernels.evaluate``'s first branch (``RHS`` of the attention field without a
  layer-norm placement). ``evaluate`` itself reshapes its (l, d) arguments into flat vectors,
  which numba allows for contiguous arrays only; on the GPU every per-trajectory array is a
  strided column of a (n, B) array (trajectory index fastest, so that neighbouring threads read
  neighbouring addresses), already flat.
* :func:`source` -- ``_kernel_attention.source`` returns a row ``per[b]`` of the per-trajectory
  data, and a CUDA device function may return only an array it was passed: on the GPU the kernel
  passes the trajectory's row itself as ``per`` (``per_row``), and ``source`` returns it or
  ``floats``.
* :func:`wnorm_token` -- ``kernels.wnorm`` for one token of such a flat column (``kernels.wnorm``
  takes an (l, d) array).

Every argument ``y``, ``w``, ``out`` is a 1-D column view (any stride); ``ints``, ``floats``,
``per`` are the :class:`~riemattn.dynamics.kernels.KernelPack`'s arrays.
"""

from __future__ import annotations

import math
import types

from numba import cuda

from ....dynamics.kernels import _kernel_attention as _src
from ....dynamics.kernels import _kernel_rows as _rows
from ....dynamics.kernels._kernel_layout import D, H, L, LOC_PER, MAN_ELLIPSOID, MAN_FLAT, MANIFOLD, OP_RHS, W_OFF

#: the kernel functions compiled from their CPU sources (each calls only functions of this list
#: and :func:`source`)
SHARED = ("heads_at", "load_heads", "offsets", "norm_scale", "apply_W", "rows_times", "forward", "tangent_rows")


@cuda.jit(device=True)
def source(loc, floats, per_row, b):
    """The array a datum lives in: ``floats`` or the trajectory's row of the per-trajectory data."""
    if loc == LOC_PER:
        return per_row
    return floats


def device_functions(module, names, extra):
    """CUDA device versions of the jitted functions ``names`` of ``module`` (defined there or
    imported into it): each function's Python body (``dispatcher.py_func``) with the globals of the
    module that defines it, in which the functions of ``names`` are replaced by their device
    versions and those of ``extra`` (a dict of device functions) by those (so that device code
    calls device code)."""
    globs = {}  # the defining modules' globals, one copy each (id of the original: the copy)
    out = {}
    for name in names:
        py = getattr(module, name).py_func
        glob = globs.get(id(py.__globals__))
        if glob is None:
            glob = globs[id(py.__globals__)] = dict(py.__globals__)
            glob.update(extra)
        fn = types.FunctionType(py.__code__, glob, py.__name__, py.__defaults__, py.__closure__)
        out[name] = cuda.jit(device=True)(fn)
    for glob in globs.values():
        glob.update(out)
    return out


@cuda.jit(device=True)
def exp_shifted(row, n, shift, lo, hi):
    """``_kernel_rows.exp_shifted`` with the device's ``exp`` (the CPU version's polynomial writes the
    exponent bits through an integer view, which a strided column does not allow)."""
    z = 0.0
    for j in range(n):
        x = math.exp(row[j] - shift)
        row[j] = x
        z += x
    return z


#: the row helpers of ``forward`` (riemattn.dynamics.kernels._kernel_rows), compiled from their CPU sources
ROWS = ("transposed_rows", "transposed_cols", "scores", "max_min", "normalize_row", "mean_rows", "softmax_rows",
        "weighted_rows")
_DEV = device_functions(_src, SHARED, dict(device_functions(_rows, ROWS, {"exp_shifted": exp_shifted}), source=source))
forward = _DEV["forward"]
offsets = _DEV["offsets"]
tangent_rows = _DEV["tangent_rows"]


@cuda.jit(device=True)
def rhs(t, y, b, ints, floats, per, w, out):
    """out = F(t, y): the attention field's value (``kernels.evaluate(RHS, ...)``, no placement);
    ``per`` the trajectory's row of the per-trajectory data."""
    l, d, h = ints[L], ints[D], ints[H]
    n = l * d
    forward(OP_RHS, t, y, b, ints, floats, per, w, l, d)
    of = offsets(l, d, h)[11]  # the update f
    if ints[MANIFOLD] == MAN_FLAT:
        for m in range(n):
            out[m] = w[of + m]
    else:  # F = (I - y y^T W) f, W f into the scratch slot after f and W y
        tangent_rows(ints, floats, y, w, of, w, of + 2 * n, out, l, d)


@cuda.jit(device=True)
def winner_token(y, v, i, d, ints, floats):
    """y_i^T W v_i for token i of flat columns (``kernels._winner``; 0 on flat space)."""
    man = ints[MANIFOLD]
    if man == MAN_FLAT:
        return 0.0
    w0 = ints[W_OFF]
    acc = 0.0
    for a in range(d):
        if man == MAN_ELLIPSOID:
            wa = 0.0
            for c in range(d):
                wa += floats[w0 + a * d + c] * v[i * d + c]
            acc += y[i * d + a] * wa
        else:
            acc += y[i * d + a] * v[i * d + a]
    return acc


@cuda.jit(device=True)
def wnorm_token(x, i, d, ints, floats):
    """|x_i|_W of token i of the flat column x (``kernels.wnorm``; 1 on flat space)."""
    if ints[MANIFOLD] == MAN_FLAT:
        return 1.0
    return math.sqrt(winner_token(x, x, i, d, ints, floats))  # the same sums, in the same order
