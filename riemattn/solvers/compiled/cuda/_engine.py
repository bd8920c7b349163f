"""The CUDA engine's host side: availability, what it runs, the memory layout and the result (private).

:func:`why_not` says why no GPU can run a call (numba-cuda missing, no driver or device);
:func:`unsupported` lists what in a call the engine cannot run; :func:`run` packs the field (the
compiled engine's ``pack_field``), reads the stepper's arrays (the compiled engine's
:func:`~riemattn.solvers.compiled._tables.method`), launches one kernel for the whole batch -- the
kernel generated for the method and the field's configuration
(:mod:`riemattn.solvers.compiled.cuda._gen`: literal tableau, state in per-thread local arrays,
the (B, n) layout in and out; only the outputs are allocated; :mod:`._ros` for rodas4, rodas4p and auto,
tokens of l d <= 64 numbers, float64), else, for shapes too large for
local memory, the older kernels (:mod:`._fast`, :mod:`riemattn.solvers.compiled.cuda._loop`: state
in global columns, the trajectory as the last axis, transposed to and from on the device) -- and
builds the same :class:`~riemattn.solvers.integrate.Trajectory` as the other engines. What crosses
the bus, on which stream, and what is cached per field: :mod:`riemattn.solvers.compiled.cuda._host`.
"""

from __future__ import annotations

import math

import numpy as np

from ...._backend import is_torch
from ....errors import UnsupportedByEngine

#: the steppers the CUDA engine runs (exactly these classes, as the compiled engine's SUPPORTED)
STEPPERS = ("rk4", "dopri5", "dop853", "rodas4", "rodas4p", "auto")
#: threads per block of the kernels at large batches (:func:`threads_per_block`)
THREADS = 128
SIM_ENV = "NUMBA_ENABLE_CUDASIM"


def simulator() -> bool:
    """Whether numba's CUDA simulator is on (``NUMBA_ENABLE_CUDASIM=1`` before numba is imported)."""
    try:
        from numba.core import config
    except ImportError:
        return False
    return bool(config.ENABLE_CUDASIM)


def why_not() -> str | None:
    """Why the CUDA engine cannot run in this process (None: it can)."""
    try:
        import numba
        from numba import cuda
    except ImportError as exc:
        return f"numba-cuda is not importable ({exc}); install it with pip install 'riemattn[cuda]'"
    if simulator():
        return None
    if getattr(cuda, "implementation", "") != "NVIDIA":
        return (f"numba {numba.__version__}'s built-in CUDA target is in use, not numba-cuda; install it with "
                "pip install 'riemattn[cuda]'")
    try:
        ok = cuda.is_available()
    except Exception as exc:  # noqa: BLE001 -- a broken driver install: say so
        return f"the CUDA driver failed to initialise ({exc})"
    if not ok:
        return ("numba.cuda finds no usable GPU (no NVIDIA driver or device; numba-cuda's simulator is off: "
                f"{SIM_ENV}=1 before numba is imported runs the engine on the CPU, slowly, for tests)")
    return None


def unsupported(field, step, y0, *, saveat, save_fn, events, progress, dense_output):
    """What the CUDA engine cannot run in this call: (reasons, pack or None)."""
    from ....dynamics.kernels import _kernel_layout as lay
    from .. import _tables
    from .._kernel import pack_field

    why = []
    if is_torch(y0) and y0.device.type != "cuda":
        why.append(f"a torch tensor on {y0.device} (the CUDA engine takes NumPy arrays or CUDA tensors)")
    name = getattr(step, "name", None)
    if name not in STEPPERS or type(step) is not _tables.SUPPORTED[name][0]:
        why.append(f"the stepper {getattr(step, 'name', step)!r} (cuda: {', '.join(STEPPERS)})")
    elif step.adaptive and saveat is None:
        why.append("every accepted step of a single trajectory (no saveat): pass saveat")
    if name in ("rodas4", "rodas4p", "auto") and len(y0.shape) >= 2:  # the Rosenbrock kernels' limit on l d
        from ._ros import unsupported as ros_unsupported

        why += ros_unsupported(name, int(y0.shape[-2]), int(y0.shape[-1]), False)
    if save_fn is not None:
        why.append("a save_fn")
    if events:
        why.append("events")
    if progress:
        why.append("progress=True")
    if dense_output:
        why.append("dense_output=True")
    pack = None
    try:
        pack = pack_field(field, tuple(y0.shape))
    except UnsupportedByEngine as exc:
        # the compiled engine's reason without its advice (dispatch gives the advice for this engine)
        why.append(str(exc).split("; use engine=")[0].rstrip(".").replace("the compiled engine", "the CUDA engine"))
    if pack is not None and (int(pack.ints[lay.KIND]) != lay.KIND_ATTENTION or int(pack.ints[lay.PLACEMENT])):
        why.append("the circle form and the layer-norm placements (cuda: the attention field itself)")
    return why, pack


def _dtype(y0, precision):
    if is_torch(y0):
        return np.float32 if str(y0.dtype) == "torch.float32" else np.float64
    return np.float32 if precision == "float32" else np.float64


def run(field, step, y0, t0, t1, *, dt, rtol, atol, first_step, saveat, max_steps, pack, precision=None):
    """Integrate on the GPU (every argument already validated by integrate)."""
    from .. import _tables
    from . import _gen, _host, _ros, _warp

    batch = tuple(y0.shape[:-2])
    l, d = (int(v) for v in y0.shape[-2:])
    B, n = math.prod(batch), l * d
    dtype = _dtype(y0, precision)
    torch_in = is_torch(y0)
    m = _tables.method(step.name)
    lanes = _warp.select(step.name, pack.ints, dtype == np.float32, B)  # small batches: a lane per token (_warp)
    # else a thread per trajectory, state in local arrays, constants folded (_gen)
    gen = lanes[:2] if lanes is not None else _gen.kernels(step.name, pack.ints, dtype == np.float32)
    if step.name in _ros.METHODS:  # the Rosenbrock and auto kernels (generated too; float64, l d <= _ros.MAX_N)
        gen = _ros_kernels(field, step.name, pack, l, d, dtype)
    rows = gen is not None  # the generated kernels take and give the (B, n) layout; the older ones (n, B)
    stream = _host.stream_for(y0)  # every copy and launch of the call on it; one wait, at the end
    try:
        return _run(field, step, y0, t0, t1, dt, rtol, atol, first_step, saveat, max_steps, pack, batch, l, d, B, n,
                    dtype, torch_in, m, gen, rows, stream, None if lanes is None else lanes[2])
    finally:
        stream.synchronize()  # also after an error: the pinned buffers are reused by the next call


def _run(field, step, y0, t0, t1, dt, rtol, atol, first_step, saveat, max_steps, pack, batch, l, d, B, n, dtype,
         torch_in, m, gen, rows, stream, launch):
    from numba import cuda

    from ....dynamics.kernels import _kernel_layout as lay
    from ...core._status import message
    from .. import _tables
    from .._engine import fixed_grid, saved_layout
    from ...core._trajectory import PerTrajectory, Trajectory  # not integrate: it imports the engines
    from . import _fast, _host, _loop

    y_start, Y = _state(y0, B, n, dtype, torch_in, rows, stream)
    floats, per = _host.packed(field, pack, stream)  # cached per field and device
    threads = threads_per_block(B)
    blocks = (B + threads - 1) // threads
    if launch is not None:  # the lanes form: one warp per block, G = 32 // l trajectories per warp
        blocks, threads = launch
    new = lambda *shape: cuda.device_array(shape, dtype=dtype, stream=stream)  # noqa: E731 (written first)
    if gen is None:  # the older kernels: the field fused where the shape allows, the state in global columns
        ints = cuda.to_device(np.ascontiguousarray(pack.ints, dtype=np.int64), stream=stream)
        flat = bool(field.manifold.normalize(np.ones((1, d)))[1] is None)
        s = max(int(m.ints[1]), 1)
        fast = _fast.kernels(l, d, int(pack.ints[lay.H]), dtype == np.float32)
        adaptive_kernel, fixed_kernel = fast if fast is not None else (_loop.adaptive_kernel, _loop.fixed_kernel)
        work = 1 if fast is not None else max(pack.work, 1)  # the specialised field needs no global scratch
        W, K, X1, X2, Yn, Er = new(work, B), new(s, n, B), new(n, B), new(n, B), new(n, B), new(n, B)
        R, Rn = new(l, B), new(l, B)
        dev = _host.tables(step.name, dict(
            mi=m.ints, A=m.A if m.A.size else np.zeros((1, 1)), b=m.b, c=m.c, e=m.e,
            e3=m.e3 if m.e3.size else np.zeros(1), dense=m.dense if m.dense.size else np.zeros((1, 1)),
            cx=m.cx if m.cx.size else np.zeros(1), ctrl=m.ctrl), stream)
    layout = (lambda k: (k, B, n)) if rows else (lambda k: (k, n, B))  # noqa: E731
    # outputs only: the kernels write every statistic and every save slot (NaN where not reached)
    stats_d = cuda.device_array((4, B), dtype=np.int64, stream=stream)
    t_fail_d = cuda.device_array(B, stream=stream)
    fixed = not step.adaptive and t1 != t0
    if t1 == t0:  # nothing to integrate: the initial state, no step, no call (as the other engines)
        times = np.array([t0]) if saveat is None else saveat.copy()
        saved = cuda.to_device(np.full(layout(len(times)), np.nan, dtype=dtype), stream=stream)
    elif step.adaptive:
        times = saveat.copy()
        saved = new(*layout(len(times)))  # slot 0 at t0: y_start, set below
        saveat_d = cuda.to_device(saveat.astype(float), stream=stream)
        h0 = float(first_step) if first_step is not None else math.nan
        if gen is not None:
            gen[0][blocks, threads, stream](float(t0), float(t1), float(rtol), float(atol), h0, int(max_steps), floats,
                                            per, Y, saveat_d, saved, stats_d, t_fail_d)
        else:
            interior = bool(np.any((saveat > t0) & (saveat < t1)))
            dop853 = int(m.ints[0]) == _tables.DOP853
            Kx = new(16 if dop853 else 1, n, B if (interior and dop853) else 1)
            Fd = new(7 if dop853 else 1, n, B if (interior and dop853) else 1)
            adaptive_kernel[blocks, threads, stream](
                dev["mi"], dev["ctrl"], dev["A"], dev["b"], dev["c"], dev["e"], dev["e3"], dev["dense"], dev["cx"],
                flat, float(t0), float(t1), float(rtol), float(atol), cuda.to_device(np.full(B, h0), stream=stream),
                int(max_steps), ints, floats, per, W, Y, K, Kx, Fd, X1, X2, Yn, Er, new(n, B), new(n, B), new(n, B),
                new(n, B), R, Rn, saveat_d, saved, stats_d, t_fail_d)
    else:
        # the grid is built up to max_steps steps only (the compiled engine's rule: never beyond)
        gt, gh, gtn, slot, capped = fixed_grid(t0, t1, dt, saveat, limit=max_steps)
        times = np.concatenate([[t0], gtn]) if saveat is None else saveat.copy()
        saved = cuda.to_device(np.full(layout(len(times)), np.nan, dtype=dtype), stream=stream)
        grid = [cuda.to_device(a, stream=stream) for a in (gt, gh, slot)]
        if gen is not None:
            gen[1][blocks, threads, stream](*grid, floats, per, Y, saved, stats_d, t_fail_d)
        else:
            fixed_kernel[blocks, threads, stream](dev["mi"], dev["A"], dev["b"], dev["c"], dev["e"], flat, *grid, ints,
                                                  floats, per, W, Y, K, X1, X2, Yn, Er, R, Rn, saved, stats_d,
                                                  t_fail_d)
    if not rows:  # the older kernels' (n_save, n, B) into the result's (n_save, B, n), on the device
        saved = _host.columns_to_rows(saved, stream)
    stats_h, t_fail_h = _host.download(stats_d, stream), _host.download(t_fail_d, stream)
    saved_h = None if torch_in else _host.download(saved, stream)
    stream.synchronize()  # the call's only wait
    if t1 == t0:
        zeros = np.zeros(B, dtype=np.int64)
        stats, t_fail = np.stack([zeros, zeros, zeros, zeros]), np.full(B, np.nan)
    else:
        stats, t_fail = stats_h(), t_fail_h()
    if step.adaptive or t1 == t0:
        n_rej, status = stats[2], stats[3]
    else:
        status, stop = stats[2].copy(), stats[3]
        if capped:  # riemattn.solvers.core._loops.run_fixed stops the rows still running at max_steps
            alive = stop == 0
            status[alive] = -1
            t_fail[alive] = gtn[-1] if len(gtn) else t0
        n_rej = np.zeros(B, dtype=np.int64)
    nfev, n_steps = stats[0], stats[1]
    y = _result(saved if torch_in else saved_h(), y_start, torch_in, y0, batch, l, d,
                saveat is None or saveat[0] == t0)
    if fixed:  # the fixed loop's saving rule (compiled engine's saved_layout)
        y, times = _fixed_layout(y, times, saveat, slot, gtn, stop, status, saved_layout, torch_in, batch == ())
    ok = (status == 0) | (status == 2)
    pt = PerTrajectory(nfev.reshape(batch), n_steps.reshape(batch), n_rej.reshape(batch), status.reshape(batch),
                       ok.reshape(batch), t_fail.reshape(batch))
    return Trajectory(
        t=times, y=y, nfev=int(nfev.max(initial=0)), n_steps=int(n_steps.max(initial=0)),
        n_rejected=int(n_rej.max(initial=0)), success=bool(ok.all()), message=message(status, t_fail, None),
        per_trajectory=pt, stepper=step.name, engine="cuda")


def _ros_kernels(field, name, pack, l, d, dtype):
    """The Rosenbrock kernel for this call (the difference form where the compiled engine uses it),
    or UnsupportedByEngine naming why not."""
    from ....dynamics._tangent import applies
    from ....dynamics.kernels import _kernel_layout as lay
    from . import _ros

    why = _ros.unsupported(name, l, d, dtype == np.float32, max(int(pack.ints[lay.H]), 1))
    if why:
        raise UnsupportedByEngine("engine='cuda' cannot run this call: " + "; ".join(why)
                                  + ". Use engine='compiled' or 'numpy' (or 'auto').")
    return _ros.kernels(name, pack.ints, False, bool(pack.autonomous), bool(applies(field, np.ones((1, l, d)))))


def _state(y0, B, n, dtype, torch_in, rows, stream):
    """(y_start (B, n) on y0's side, Y on the device: (B, n) for ``rows``, else (n, B), transposed on
    the device)."""
    from numba import cuda

    from . import _host

    if torch_in:
        import torch

        tdt = torch.float32 if dtype == np.float32 else torch.float64
        y_start = y0.detach().reshape(B, n).to(tdt).contiguous()  # on PyTorch's current stream: the call's
        Y = cuda.as_cuda_array(y_start)
    else:
        y_start = np.asarray(y0, dtype=dtype).reshape(B, n)
        Y = _host.upload(y_start, stream)
    # the generated kernels only read Y; the older ones overwrite their (n, B) copy with the end state
    return y_start, (Y if rows else _host.rows_to_columns(Y, stream))


def threads_per_block(B, sms=None):
    """Threads per block: the largest of 128 and 64 that still gives every multiprocessor a block
    (at least ``sms`` blocks: 64 at B = 10^4 on 132 SMs), else 32 (the warp)."""
    if sms is None:
        from numba import cuda

        try:
            sms = int(getattr(cuda.get_current_device(), "MULTIPROCESSOR_COUNT", 0))
        except Exception:  # noqa: BLE001 -- the simulator's device has no such attribute: any size
            sms = 0
    for t in (THREADS, THREADS // 2):
        if -(-B // t) >= sms:
            return t
    return 32


def _result(saved, y_start, torch_in, y0, batch, l, d, at_t0):
    """The saved values (n_save, B, n) -- on the device for a tensor, on the host for NumPy -- as
    (n_save,) + batch + (l, d) on y0's side, slot 0 the initial state where it is at t0."""
    if torch_in:
        import torch

        out = torch.as_tensor(saved, device=y0.device)
        if out.shape[0] and at_t0:
            out[0] = y_start
        return out.reshape((out.shape[0],) + batch + (l, d))
    out = saved
    if out.shape[0] and at_t0:
        out[0] = y_start
    return out.reshape((out.shape[0],) + batch + (l, d))


def _fixed_layout(y, times, saveat, slot, gtn, stop, status, saved_layout, torch_in, single):
    B = stop.shape[0]
    lead = y.shape[0]
    flat_y = y.reshape((lead, B) + tuple(y.shape[-2:]))
    host = flat_y.cpu().numpy() if torch_in else flat_y
    out, times = saved_layout(np.array(host), times, saveat is None, saveat is None or saveat[0] == times[0],
                              single, slot, gtn, stop, status == 2, np.full(B, np.nan))
    out = out.reshape((out.shape[0],) + tuple(y.shape[1:]))
    if torch_in:
        import torch

        out = torch.as_tensor(out, device=y.device)
    return out, times


def dispatch(field, step, y0, t0, t1, dt, rtol, atol, first_step, saveat, max_steps, events, save_fn, progress,
             dense_output, precision=None):
    """The CUDA engine's Trajectory for this call (``engine="cuda"``), or UnsupportedByEngine naming why not."""
    reason = why_not()
    if reason is not None:
        raise UnsupportedByEngine(f"engine='cuda' cannot run: {reason}.")
    why, pack = unsupported(field, step, y0, saveat=saveat, save_fn=save_fn, events=events, progress=progress,
                            dense_output=dense_output)
    if why:
        other = "engine='compiled' or 'numpy'" if pack is not None else "engine='numpy'"  # no pack: nor compiled
        raise UnsupportedByEngine("engine='cuda' cannot run this call: " + "; ".join(why)
                                  + f". Use {other} (or 'auto').")
    kw = dict(dt=dt, rtol=rtol, atol=atol, first_step=first_step, saveat=saveat, max_steps=max_steps, pack=pack,
              precision=precision)
    if is_torch(y0) and y0.device.index is not None:  # the tensor's GPU runs it (numba's current device)
        from numba import cuda

        with cuda.gpus[y0.device.index]:
            return run(field, step, y0, t0, t1, **kw)
    return run(field, step, y0, t0, t1, **kw)

