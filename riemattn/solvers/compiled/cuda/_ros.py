"""The CUDA engine's Rosenbrock kernels (``rodas4``, ``rodas4p``, ``auto``), generated per (method, field configuration) (private).

One thread per trajectory runs the compiled engine's Rosenbrock solve
(:func:`riemattn.solvers.compiled._rosenbrock.ros_step` inside
:func:`riemattn.solvers.compiled._adaptive.solve_rows`, kind ``ROSENBROCK``) with everything per
trajectory in ``cuda.local.array`` of compile-time size, as the explicit kernels of
:mod:`riemattn.solvers.compiled.cuda._gen` do:

* the step is **generated source** (:func:`step_source`, :func:`dense_source`): the RODAS form's
  stages one after another, the coefficients ``a``, ``C``, ``c``, ``d``, ``m``, ``m - m_hat``,
  ``H`` and ``gamma`` float literals printed (``repr``) from the compiled engine's
  :class:`~riemattn.solvers.compiled._tables.Method` record (generated, never restated), every
  sum over the stages in the CPU step's order, zero coefficients included (the same operations);
* the lifted field's **exact Jacobian** ``dG/dx`` is the CPU kernel's: the Python bodies of
  ``_kernel_attention.forward`` (``OP_LIFTED_JAC``), ``update_jacobian`` and ``lift`` compiled as
  device functions (:func:`riemattn.solvers.compiled.cuda._field.device_functions`), their
  scratch a local array of the pack's ``work_length``; the stiff steps' **difference form**
  (kernel op ``RHS_DIFF``: ``forward`` then ``difference_form``) likewise, where the compiled
  engine uses it (``riemattn.dynamics._tangent.applies``: the host's ``diff``); the plain value is
  the fused field of :func:`riemattn.solvers.compiled.cuda._fast.make_rhs`;
* ``I / (h gamma) - J`` and its **LU with partial pivoting** live in one (n, n) local array
  (``lu_factor``, ``lu_solve``, ``norm_inf``: the CPU functions' Python bodies compiled for the
  device; ``|J|_inf`` is taken before the matrix is formed in J's place, the value the CPU step
  takes from its separate copy), n = l d at most :data:`MAX_N` (4096 numbers; larger tokens raise
  UnsupportedByEngine naming the size and the limit);
* the loop is :func:`riemattn.solvers.compiled.cuda._rosloop.ros_rows` (the same initial step, PI
  controller, acceptance, last-step rule, statuses, saving with ``ros_dense``), compiled with the
  generated step bound to its names; for ``auto`` it is :func:`._autoloop.auto_rows` (the
  switch, with DOPRI5's generated step too: :mod:`riemattn.solvers.compiled.cuda._autoloop`).
  float64 only: the solve's limit ``h gamma eps |J|_inf`` is float64's.
"""

from __future__ import annotations

import numpy as np
from numba import cuda, float64, int64

from ....dynamics.kernels import _kernel_attention as _src
from ....dynamics.kernels._kernel_layout import D, H, L, MAN_FLAT, OP_LIFTED_JAC, OP_RHS_DIFF, work_length
from ...stiff.rosenbrock import DT_FACTOR
from .. import _rosenbrock, _tables
from . import _autoloop, _fast, _field, _gen, _loop, _rosloop, _steps

#: the Rosenbrock steppers with generated kernels (``auto``: the explicit/stiff switch, :mod:`._autoloop`)
METHODS = ("rodas4", "rodas4p", "auto")
#: the largest l d the Rosenbrock kernels take: the (n, n) matrix is 4096 numbers (32 kB) per thread
MAX_N = 64
#: the most numbers of per-thread local memory (:func:`local_size`; 256 kB, half the 512 kB a CUDA
#: thread may have): many heads at l d <= 64 (the field's scratch holds h l^2 attention weights twice)
MAX_LOCAL = 32768
_CACHE: dict = {}


def unsupported(name, l, d, is32, h=1):
    """Why the Rosenbrock kernel cannot run tokens (l, d) with h heads in this dtype (a list of reasons)."""
    why = []
    if l * d > MAX_N:
        why.append(f"{name} for tokens of l d = {l} x {d} = {l * d} numbers (cuda: l d <= {MAX_N}, the dense "
                   f"(l d)^2 Jacobian and its LU in per-thread local memory)")
    elif local_size(l, d, h, name) > MAX_LOCAL:
        why.append(f"{name} for {l} x {d} tokens and {h} heads: {local_size(l, d, h, name)} numbers of per-thread local "
                   f"memory (cuda: at most {MAX_LOCAL})")
    if is32:
        why.append(f"{name} in float32 (cuda: float64 only; the solve's limit h gamma eps |J|_inf is float64's)")
    return why


def local_size(l, d, h, name="rodas4"):
    """Numbers of per-thread local memory of the Rosenbrock kernel (the fused field's, the Jacobian's
    scratch, the matrix, the stages and the loop's vectors; ``auto``: DOPRI5's 7 stages too)."""
    n = l * d
    ints = np.zeros(max(L, D, H) + 1, dtype=np.int64)
    ints[L], ints[D], ints[H] = l, d, h
    extra = 7 * n if name == "auto" else 0
    return _fast.local_size(l, d, h) + work_length(ints) + n * n + n + 6 * n + 11 * n + 2 * l + extra


def _sum(coefs, row, p="p"):
    """``acc = 0.0; acc += c_j * Us[j, p]`` for every j in order (zeros included: the CPU's operations)."""
    return ["acc = 0.0"] + [f"acc += {_gen._lit(c)} * Us[{j}, {p}]" for j, c in enumerate(coefs[:row])]


def step_source(m, autonomous, diff):
    """Source of ``ros_step`` for the Method record m (``_rosenbrock.ros_step`` on flat arrays of n = N
    numbers, stages Us (6, N), the matrix JM (N, N)); ``evaluate`` is the field in the steps' form
    (the difference form where ``diff``), ``rhs`` the plain value. Returns (nfev, |J|_inf)."""
    stages = m.rmm.shape[1]
    ind = "    "
    lines = ["def ros_step(t, y, h, k1, has_k1, b, ints, floats, per, w, JM, piv, Us, Ft, F0, x, X, r, x1, y_new,",
             "             r_new, err, k_next):",
             "    nfev = 0",
             f"    if {bool(diff)} or not has_k1:",
             "        evaluate(t, y, b, ints, floats, per, w, F0)",
             "        nfev += 1",
             "    else:",
             "        for p in range(N):",
             "            F0[p] = k1[p]",
             "    jac(t, y, b, ints, floats, per, w, JM)",
             "    jn = norm_inf(JM)  # |J|_inf before the matrix takes J's place",
             f"    hg = h * {_gen._lit(m.rgamma)}",
             "    for i in range(N):",
             "        for j in range(N):",
             "            JM[i, j] = (1.0 if i == j else 0.0) / hg - JM[i, j]",
             "    lu_factor(JM, piv)"]
    if not autonomous:  # forward difference in t (the plain value, as the CPU step)
        lines += ["    dt = DT_FACTOR * max(1.0, abs(t))",
                  "    rhs(t + dt, y, b, ints, floats, per, w, Ft)",
                  "    for p in range(N):",
                  "        Ft[p] = (Ft[p] - F0[p]) / dt",
                  "    nfev += 1"]
    for i in range(stages):
        if i == 0:
            lines += ["    for p in range(N):", "        Us[0, p] = F0[p]"]
        else:
            lines += ["    for p in range(N):"] + [2 * ind + s for s in _sum(m.ra[i], i)]
            lines += ["        x[p] = y[p] + acc",
                      "    normalize(x, L, D, FLAT, ints, floats, X, r)",
                      f"    evaluate(t + {_gen._lit(m.rc[i])} * h, X, b, ints, floats, per, w, Us[{i}])",
                      "    nfev += 1",
                      "    for q in range(L):",
                      "        for a in range(D):",
                      "            p = q * D + a"] + [3 * ind + s for s in _sum(m.rC[i], i)]
            lines += ["            if not FLAT:",
                      f"                Us[{i}, p] *= r[q]",
                      f"            Us[{i}, p] += acc / h"]
        if not autonomous and m.rd[i] != 0.0:
            lines += [f"    hd = h * {_gen._lit(m.rd[i])}", "    for p in range(N):", f"        Us[{i}, p] += hd * Ft[p]"]
        lines.append(f"    lu_solve(JM, piv, Us[{i}])")
    lines += ["    for p in range(N):"] + [2 * ind + s for s in _sum(m.rmm[0], stages)] + ["        x1[p] = y[p] + acc"]
    if int(m.ints[6]):  # stiffly accurate: the error estimate is the last stage
        lines.append(f"        x[p] = Us[{stages - 1}, p]")
    else:
        lines += [2 * ind + s for s in _sum(m.rmm[1], stages)] + ["        x[p] = acc"]
    lines += ["    normalize(x1, L, D, FLAT, ints, floats, y_new, r_new)",
              "    tangent_error(x, y_new, r_new, L, D, FLAT, ints, floats, err)",
              f"    if abs(hg) * jn > {_gen._lit(m.ctrl[10])}:  # beyond the precision of the solve",
              "        for p in range(N):",
              "            err[p] = math.inf",
              "    evaluate(t + 1.0 * h, y_new, b, ints, floats, per, w, k_next)",
              "    nfev += 1",
              "    return nfev, jn"]
    return "\n".join(lines) + "\n"


def dense_source(m):
    """Source of ``ros_dense(y, x1, Us, theta, ints, floats, x, out, r)``: ``_rosenbrock.ros_dense``,
    retract((1 - s) y + s (x1 + (1 - s) (k_a + s k_b))), k_a, k_b = H U."""
    stages = m.rmm.shape[1]
    lines = ["def ros_dense(y, x1, Us, theta, ints, floats, x, out, r):",
             "    s = theta",
             "    for p in range(N):",
             "        ka = 0.0",
             "        kb = 0.0"]
    for j in range(stages):
        lines += [f"        ka += {_gen._lit(m.rH[0, j])} * Us[{j}, p]", f"        kb += {_gen._lit(m.rH[1, j])} * Us[{j}, p]"]
    lines += ["        x[p] = (1.0 - s) * y[p] + s * (x1[p] + (1.0 - s) * (ka + s * kb))",
              "    normalize(x, L, D, FLAT, ints, floats, out, r)"]
    return "\n".join(lines) + "\n"


def _device(code, name, glob):
    g = dict(glob)
    exec(compile(code, f"<riemattn generated {name}>", "exec"), g)  # noqa: S102
    return cuda.jit(device=True)(g[name])


#: the CPU kernel functions the Jacobian and the difference form need beyond _field.SHARED
JAC = ("update_jacobian", "lift", "difference_form")


def _field_ops(l, d, flat, diff, rhs):
    """(evaluate, jac): the field in the steps' form and the lifted Jacobian, device functions of
    the CPU kernel's sources (tokens (l, d) as constants)."""
    dev = _field.device_functions(_src, JAC, dict(_field._DEV, source=_field.source))
    forward, update_jacobian, lift, difference_form = (_field.forward, dev["update_jacobian"], dev["lift"],
                                                       dev["difference_form"])
    L_, D_, FLAT = l, d, flat

    @cuda.jit(device=True)
    def jac(t, y, b, ints, floats, per, w, J):
        cU = forward(OP_LIFTED_JAC, t, y, b, ints, floats, per, w, L_, D_)
        update_jacobian(ints, y, w, cU, J, L_, D_)
        if not FLAT:
            lift(ints, floats, y, w, J, L_, D_)

    if not diff:
        return rhs, jac

    @cuda.jit(device=True)
    def evaluate(t, y, b, ints, floats, per, w, out):
        forward(OP_RHS_DIFF, t, y, b, ints, floats, per, w, L_, D_)
        difference_form(ints, floats, y, w, out, L_, D_)

    return evaluate, jac


def kernels(name, ints, is32, autonomous, diff, saves=True):
    """(adaptive_kernel, None) for the Rosenbrock stepper ``name``, the field configuration ``ints``,
    ``autonomous`` (the pack's) and ``diff`` (the difference form, as the compiled engine decides);
    None where not :data:`METHODS` or :func:`unsupported`. The kernel's arguments are those of
    :func:`._gen.kernels`' adaptive kernel. Cached per (name, ints, autonomous, diff)."""
    l, d = int(ints[L]), int(ints[D])
    if name not in METHODS or unsupported(name, l, d, is32, max(int(ints[H]), 1)):
        return None
    key = (name, tuple(int(v) for v in ints), bool(autonomous), bool(diff), bool(saves))
    if key not in _CACHE:
        _CACHE[key] = (_build(*key), None)
    return _CACHE[key]


def _build(name, ints, autonomous, diff, saves):
    m = _tables.method(name)
    INTS = np.array(ints, dtype=np.int64)
    l, d, h = int(INTS[L]), int(INTS[D]), max(int(INTS[H]), 1)
    options = _fast.field_options(INTS)
    flat = options[0] == MAN_FLAT
    rhs = _fast.make_rhs(l, d, h, False, options)
    evaluate, jac = _field_ops(l, d, flat, diff, rhs)
    steps = _field.device_functions(_steps, ("normalize", "tangent_error", "rms_norm"), {"rhs": rhs})
    lu = _field.device_functions(_rosenbrock, ("lu_factor", "lu_solve", "norm_inf"), {})
    glob = dict(L=l, D=d, N=l * d, FLAT=flat, DT_FACTOR=DT_FACTOR, math=__import__("math"), rhs=rhs,
                evaluate=evaluate, jac=jac, **steps, **lu)
    step = _device(step_source(m, autonomous, diff), "ros_step", glob)
    dense = _device(dense_source(m), "ros_dense", glob)
    if name == "auto":  # the explicit/stiff switch: DOPRI5's generated step and this Rosenbrock step
        return _autoloop.build(m, INTS, l, d, flat, work_length(INTS), rhs, step, dense, saves)
    init = _field.device_functions(_loop, ("initial_step",), dict(steps, rhs=rhs))
    rows = _field.device_functions(_rosloop, ("ros_rows",), dict(steps, rhs=rhs, ros_step=step, ros_dense=dense,
                                                                 SAVES=saves, put=_gen.put, N=l * d, **init))
    return _kernel(rows["ros_rows"], m, INTS, l, d, flat, work_length(INTS))


def _kernel(rows, m, INTS, l, d, flat, work):
    MI, CTRL = np.ascontiguousarray(m.ints), np.ascontiguousarray(m.ctrl)
    L_, D_, N, S, WORK, FLAT = l, d, l * d, int(m.rmm.shape[1]), max(int(work), 1), flat

    @cuda.jit
    def ros_kernel(t0, t1, rtol, atol, h_first, max_steps, floats, per_all, Y, saveat, saved, stats, t_fail_out):
        b = cuda.grid(1)
        if b >= Y.shape[0]:
            return
        y = cuda.local.array(N, float64)
        JM = cuda.local.array((N, N), float64)
        piv = cuda.local.array(N, int64)
        Us = cuda.local.array((S, N), float64)
        w = cuda.local.array(WORK, float64)
        Ft = cuda.local.array(N, float64)
        F0 = cuda.local.array(N, float64)
        x = cuda.local.array(N, float64)
        X = cuda.local.array(N, float64)
        x1 = cuda.local.array(N, float64)
        y_new = cuda.local.array(N, float64)
        err = cuda.local.array(N, float64)
        k1 = cuda.local.array(N, float64)
        k_next = cuda.local.array(N, float64)
        u = cuda.local.array(N, float64)
        r = cuda.local.array(L_, float64)
        r_new = cuda.local.array(L_, float64)
        for p in range(N):
            y[p] = Y[b, p]
        per = per_all[b if per_all.shape[0] > 1 else 0]
        rows(MI, CTRL, FLAT, t0, t1, rtol, atol, h_first, max_steps, INTS, floats, per, b, L_, D_, y, w, JM, piv,
             Us, Ft, F0, x, X, x1, y_new, err, k1, k_next, u, r, r_new, saveat, saved, stats, t_fail_out)

    return ros_kernel
