"""The CUDA engine's kernels generated per (method, l, d, heads, field options, dtype) (private).

The kernels of :mod:`riemattn.solvers.compiled.cuda._loop` keep every per-trajectory array -- the
state, the stages, the stage input, the error -- in columns of global arrays and read the tableau,
the controller's constants and the sizes from arrays at run time: numba-cuda compiles kernel
arguments without ``noalias``, so after each store to a column the compiler reloads what it had,
and nothing unrolls (issue 56: 43k SASS instructions in the step loop, 1365 local loads, 1772
local stores, 511 global loads per loop pass, measured by ``benchmarks/gpu_ptx.py``). Here, for one
method and one shape:

* the step is **generated source** (:func:`step_source`): straight-line stages whose coefficients
  are float literals printed (``repr``, which reads back exactly) from the compiled engine's
  :class:`~riemattn.solvers.compiled._tables.Method` record -- the same arrays the CPU engines read,
  never restated --, each stage combination one loop over the n = l d components (zero
  coefficients left out: adding ``0 * k`` changes nothing for a finite stage, and a non-finite
  stage makes every later stage, hence the step, non-finite either way);
* the loop is the generic one (:func:`~riemattn.solvers.compiled.cuda._loop.adaptive_rows`,
  :func:`~riemattn.solvers.compiled.cuda._loop.fixed_rows`), compiled again with that step and
  the fused field bound to its names, and given the Method's arrays (kind, stage count,
  controller constants, dense-output coefficients) as **constant arrays** of the module, indexed
  at constant positions: folded into the code, so the other methods' branches vanish;
* l, d, n and the stage count are compile-time constants, and the state, stages, stage input,
  error and scratch are ``cuda.local.array`` of constant size (per-thread, in registers where
  the compiler can keep them): the step loop reads global memory for the weights (the field's
  heads) and the save times only, and writes the saved states at the save times; y0 is read
  before it, the statistics written after it;
* the field's configuration (the pack's ``ints``: manifold, mask, normalization, rescaling, head
  kinds and the offsets of its data) is a constant array of the module too, so every branch on it
  folds; the field is :func:`riemattn.solvers.compiled.cuda._fast.make_rhs` with those options
  fixed (:func:`._fast.field_options`). The kernels are cached per configuration: fields with the
  same ``ints`` (other weights, other beta) share them.

The arithmetic is the generic kernels' in the same order (the simulator tests compare every
method with the compiled CPU engine, step for step). A shape whose local arrays exceed
:data:`MAX_LOCAL` numbers uses the older kernels (:mod:`._fast`, :mod:`._loop`).
"""

from __future__ import annotations

import numpy as np
from numba import cuda, float32, float64

from ....dynamics.kernels._kernel_layout import D, H, L, MAN_FLAT
from .. import _tables
from . import _fast, _field, _loop, _steps

#: the steppers with generated kernels
METHODS = ("rk4", "dopri5", "dop853")
#: the most numbers of per-thread local memory a generated kernel may use (else the older kernels)
MAX_LOCAL = 8192
#: False: the number of tokens is passed at run time, so the loops over tokens and components are not
#: unrolled and the per-token arrays stay addressed local arrays (nearly no spills, loads and stores
#: in loops: docs/performance.md, proxy figures); True (the default): everything unrolled. Which is
#: faster is for a GPU to measure; the arithmetic is the same.
UNROLL = True
_CACHE: dict = {}


def _lit(v):
    """A float literal that reads back as exactly v."""
    return repr(float(v))


def _combine(out, coef, base, n="N", indent="    "):
    """Lines computing ``out[p] = (sum_j coef_j K[j, p]) * h (+ base[p])`` in j order (zeros left out)."""
    terms = [f"{_lit(cj)} * K[{j}, p]" for j, cj in enumerate(coef) if cj != 0.0]
    body = [f"{indent}for p in range({n}):", f"{indent}    acc = {terms[0] if terms else '0.0'}"]
    body += [f"{indent}    acc += {t}" for t in terms[1:]]
    body.append(f"{indent}    {out}[p] = acc * h" + (f" + {base}[p]" if base else ""))
    return body


def step_source(m, unroll=True):
    """Source of ``rk_step`` (the signature of ``_steps.rk_step``, whose tableau arguments it ignores)
    for the Method record m: the stages one after another, the coefficients literals; the sizes the
    constants L, D, N (``unroll``) or its arguments l, d."""
    s, adaptive = int(m.ints[1]), bool(m.ints[5])
    L, D, N = ("L", "D", "N") if unroll else ("l", "d", "l * d")
    lines = ["def rk_step(A, bb, c, e, s, adaptive, flat, t, y, h, K, has_k1, b, ints, floats, per, w, x, X, r,",
             "            y_new, r_new, err, l, d):",
             "    nfev = 0",
             "    if not has_k1:",
             "        rhs(t, y, b, ints, floats, per, w, K[0])",
             "        nfev += 1"]
    for i in range(1, s):
        lines += _combine("x", m.A[i][:i], "y", N)
        lines += [f"    normalize(x, {L}, {D}, FLAT, ints, floats, X, r)",
                  f"    rhs(t + {_lit(m.c[i])} * h, X, b, ints, floats, per, w, K[{i}])",
                  "    if not FLAT:",
                  f"        for p in range({L}):",
                  f"            for a in range({D}):",
                  f"                K[{i}, p * {D} + a] *= r[p]",
                  "    nfev += 1"]
    lines += _combine("x", m.b[:s], "y", N)
    lines.append(f"    normalize(x, {L}, {D}, FLAT, ints, floats, y_new, r_new)")
    if adaptive:
        lines += _combine("x", m.e[:s], None, N)
        lines.append(f"    tangent_error(x, y_new, r_new, {L}, {D}, FLAT, ints, floats, err)")
    lines.append("    return nfev")
    return "\n".join(lines) + "\n"


def _device_step(m, namespace, unroll):
    code = step_source(m, unroll)
    glob = dict(namespace)
    exec(compile(code, f"<riemattn generated rk_step {int(m.ints[0])}/{int(m.ints[1])}>", "exec"), glob)  # noqa: S102
    return cuda.jit(device=True)(glob["rk_step"])


@cuda.jit(device=True)
def put(saved, q, p, b, v):
    """``saved[q, b, p] = v``: the generated kernels save in the layout (n_save, B, n) of the result."""
    saved[q, b, p] = v


def local_size(name, l, d, h):
    """Numbers of per-thread local memory of the generated kernel (the field's and the loop's)."""
    m = _tables.method(name)
    n, s = l * d, int(m.ints[1])
    dop853 = int(m.ints[0]) == _tables.DOP853
    return _fast.local_size(l, d, h) + (s + 9 + (16 + 7 if dop853 else 2)) * n + 2 * l


def _constants(m):
    """The Method's arrays as the loop reads them (empty ones as one zero, as the engine passes them)."""
    one = lambda a, shape: np.ascontiguousarray(a if a.size else np.zeros(shape))  # noqa: E731
    return (np.ascontiguousarray(m.ints), np.ascontiguousarray(m.ctrl), one(m.A, (1, 1)), one(m.b, 1),
            one(m.c, 1), one(m.e, 1), one(m.e3, 1), one(m.dense, (1, 1)), one(m.cx, 1))


def kernels(name, ints, is32, saves=True, unroll=None):
    """(adaptive_kernel, fixed_kernel) generated for the stepper ``name``, the field configuration
    ``ints`` (a :class:`~riemattn.dynamics.kernels.KernelPack`'s: l, d, heads, options, offsets) and
    float32 (``is32``) or float64 states; None where the method has no generated kernel or the local
    arrays exceed MAX_LOCAL. Cached per (name, ints, dtype). Arguments: ``adaptive_kernel(t0, t1,
    rtol, atol, h_first (NaN: the initial step's rule), max_steps, floats, per, Y (B, n), saveat,
    saved (n_save, B, n), stats (4, B), t_fail (B,))``, ``fixed_kernel(gt, gh, gslot, floats, per, Y,
    saved, stats, t_fail)``: the trajectory's layout, (B, ...), in and out (no transposes).
    ``saves=False``: a probe without the saving code (the proxy test: what the step loop stores);
    ``unroll``: :data:`UNROLL` when None."""
    l, d, h = int(ints[L]), int(ints[D]), max(int(ints[H]), 1)
    if name not in METHODS or local_size(name, l, d, h) > MAX_LOCAL:
        return None
    key = (name, tuple(int(v) for v in ints), bool(is32), bool(saves), bool(UNROLL if unroll is None else unroll))
    if key not in _CACHE:
        _CACHE[key] = _build(*key)
    return _CACHE[key]


def _build(name, ints, is32, saves, unroll):
    m = _tables.method(name)
    INTS = np.array(ints, dtype=np.int64)
    l, d, h = int(INTS[L]), int(INTS[D]), max(int(INTS[H]), 1)
    options = _fast.field_options(INTS)
    flat = options[0] == MAN_FLAT
    rhs = _fast.make_rhs(l, d, h, is32, options)
    sizes = dict(L=l, D=d, N=l * d, FLAT=flat)
    steps = _field.device_functions(_steps, ("normalize", "tangent_error", "fsal_next", "rms_norm", "dop853_norm",
                                             "dopri5_dense", "dop853_extra", "dop853_prepare", "dop853_dense", "axpy",
                                             "hsum", "last_nonzero"), {"rhs": rhs})
    step = _device_step(m, dict(sizes, rhs=rhs, normalize=steps["normalize"], tangent_error=steps["tangent_error"]),
                        unroll)
    init = _field.device_functions(_loop, ("initial_step",), dict(steps, rhs=rhs))
    rows = _field.device_functions(_loop, ("adaptive_rows", "fixed_rows"),
                                   dict(steps, rhs=rhs, rk_step=step, SAVES=saves, put=put, **init))
    return (_adaptive_kernel(rows["adaptive_rows"], m, INTS, flat, is32, unroll),
            _fixed_kernel(rows["fixed_rows"], m, INTS, flat, is32, unroll))


def _adaptive_kernel(rows, m, INTS, flat, is32, unroll):
    MI, CTRL, A, BB, C, E, E3, DENSE, CX = _constants(m)
    DT = float32 if is32 else float64
    L_, D_, S = int(INTS[L]), int(INTS[D]), int(m.ints[1])
    N = L_ * D_
    KX, FD = (16, 7) if int(m.ints[0]) == _tables.DOP853 else (1, 1)
    FLAT, UNROLLED = flat, unroll

    @cuda.jit
    def adaptive_kernel(t0, t1, rtol, atol, h_first, max_steps, floats, per_all, Y, saveat, saved, stats, t_fail_out):
        b = cuda.grid(1)
        if b >= Y.shape[0]:
            return
        y = cuda.local.array(N, DT)
        K = cuda.local.array((S, N), DT)
        Kx = cuda.local.array((KX, N), DT)
        Fd = cuda.local.array((FD, N), DT)
        x = cuda.local.array(N, DT)
        X = cuda.local.array(N, DT)
        y_new = cuda.local.array(N, DT)
        err = cuda.local.array(N, DT)
        e3 = cuda.local.array(N, DT)
        k1 = cuda.local.array(N, DT)
        k_next = cuda.local.array(N, DT)
        u = cuda.local.array(N, DT)
        r = cuda.local.array(L_, DT)
        r_new = cuda.local.array(L_, DT)
        w = cuda.local.array(1, DT)
        for p in range(N):
            y[p] = Y[b, p]
        per = per_all[b if per_all.shape[0] > 1 else 0]
        lr = L_ if UNROLLED else Y.shape[1] // D_  # run time: the loops over tokens stay loops
        rows(MI, CTRL, A, BB, C, E, E3, DENSE, CX, FLAT, t0, t1, rtol, atol, h_first, max_steps, INTS, floats, per,
             b, lr, D_, y, w, K, Kx, Fd, x, X, y_new, err, e3, k1, k_next, u, r, r_new, saveat, saved, stats,
             t_fail_out)

    return adaptive_kernel


def _fixed_kernel(rows, m, INTS, flat, is32, unroll):
    MI, _, A, BB, C, E = _constants(m)[:6]
    DT = float32 if is32 else float64
    L_, D_, S = int(INTS[L]), int(INTS[D]), int(m.ints[1])
    N = L_ * D_
    FLAT, UNROLLED = flat, unroll

    @cuda.jit
    def fixed_kernel(gt, gh, gslot, floats, per_all, Y, saved, stats, t_fail_out):
        b = cuda.grid(1)
        if b >= Y.shape[0]:
            return
        y = cuda.local.array(N, DT)
        K = cuda.local.array((S, N), DT)
        x = cuda.local.array(N, DT)
        X = cuda.local.array(N, DT)
        y_new = cuda.local.array(N, DT)
        err = cuda.local.array(N, DT)
        r = cuda.local.array(L_, DT)
        r_new = cuda.local.array(L_, DT)
        w = cuda.local.array(1, DT)
        for p in range(N):
            y[p] = Y[b, p]
        per = per_all[b if per_all.shape[0] > 1 else 0]
        lr = L_ if UNROLLED else Y.shape[1] // D_  # run time: the loops over tokens stay loops
        rows(MI, A, BB, C, E, FLAT, gt, gh, gslot, INTS, floats, per, b, lr, D_, y, w, K, x, X, y_new, err, r, r_new,
             saved, stats, t_fail_out)

    return fixed_kernel
