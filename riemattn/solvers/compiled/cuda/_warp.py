"""Small batches on the GPU: one lane of a warp per token, several trajectories per warp (private).

The kernels of :mod:`riemattn.solvers.compiled.cuda._gen` run a whole trajectory in one thread: at
B = 16 the hemisphere ensemble keeps 16 threads of a 132-SM card busy, each evaluating the l x l
attention alone (0.44 s on an H100, issue 56). Here a trajectory of l <= 32 tokens is run by l
lanes of a warp, G = 32 // l trajectories per warp (lanes G l .. 31 idle; one warp per block):

* lane i of a trajectory holds token i: its d components of the state, the stages, the stage
  input, the error, in per-lane local arrays of constant size (registers);
* at each evaluation the lane publishes its token of the stage input (and, for a U that is not
  the identity, its value rows u_i = U_e x_i) to the trajectory's **shared-memory tile**, the
  trajectory's lanes synchronise (``cuda.syncwarp`` on the trajectory's lane mask), and each lane
  computes its own row of the attention -- the scores of its query against every key of the tile,
  the softmax, the weighted sum of the values, the tangent projection -- with the operations of
  :func:`._fast.make_rhs` for that row, in the same order; a second synchronisation lets the tile
  be rewritten;
* every sum over the trajectory's n = l d components (the error norms, the initial step's norms)
  is **the compiled engine's sum in the same order**: each lane writes its d terms to a shared
  row of n numbers, and every lane adds the n numbers in component order (n shared loads: cheap
  next to the attention's l d per head). Every lane of a trajectory therefore holds the same
  error norm, to the bit the CPU's, and takes the same decisions; a non-finite stage value of one
  token makes its terms NaN, so every lane sees the step as non-finite (the fixed-step loop's
  finiteness test is reduced the same way, :func:`._warp_parts.uniform_step`);
* the loop is the generic one (:func:`._loop.adaptive_rows`, :func:`._loop.fixed_rows`: the
  same controller, acceptance, last-step rule, statuses, saving rule and dense outputs), compiled
  with l = 1 -- each lane's arrays are one token -- and the functions it calls bound to the lane
  versions: the step is :func:`._gen.step_source` (literal coefficients printed from the compiled
  engine's Method record), the field is :func:`._warp_parts.make_rhs`, the norms and the initial step reduce
  across the trajectory's lanes, ``put`` saves the lane's token.

The field's configuration, the tableau and the sizes are folded at compile time as in ``_gen``;
kernels are cached per (method, field configuration, dtype). Under numba-cuda's simulator, which
has no ``syncwarp``, the block barrier stands in for it (the simulator's barrier waits for every
live thread of the block: a superset of the trajectory's lanes).

Which form runs (:func:`select`): :data:`FORM` or ``$RIEMATTN_CUDA_FORM`` -- "threads" (the default
until a GPU has run this form and measured the crossover), "lanes", or "auto": lanes when B <
:data:`LANES_BELOW` (and l <= 32 and the local and shared sizes fit), else a thread per trajectory.
"""

from __future__ import annotations

import os

import numpy as np
from numba import cuda, float32, float64

from ....dynamics.kernels._kernel_layout import D, H, L, MAN_FLAT, SRC_IDENTITY, U_HEADS, U_KIND
from .. import _tables
from . import _fast, _field, _gen, _loop, _steps, _warp_parts

#: Trajectories below which the lanes form runs. Reasoning (to be replaced by the crossover
#: ``benchmarks/gpu_ensemble.py --only riemattn-cuda-f64-lanes,riemattn-cuda-f64-threads`` measures
#: on a GPU; none was lent). A thread per trajectory takes a time T1 flat in B until the card is
#: full, from S ~ 10^4 trajectories on an H100 (the one-thread sketch: 0.10 s at B = 16, 0.16 s at
#: 10^4, 1.2 s at 10^5), then ~T1 B / S. The lanes form spends k = 32 / (32 // l) threads per
#: trajectory (10.7 for l = 10) and c times the work per trajectory, so it is flat at ~T1 c / k up
#: to ~S / k, then ~T1 c B / S: the two meet at B* = S / c. c from the proxy figures (sm_90,
#: dopri5, hemisphere): the lanes step loop has 11.5k SASS instructions for 3 trajectories, the
#: thread loop 24.6k for 32, so 5x the instructions per trajectory -- roughly an upper bound on c, as the
#: thread loop's instructions include 1900 local loads and stores (spills) per pass, dearer than the
#: lanes' register arithmetic; take c between 2 and 5, B* between 2000 and 5000. 3000, near the
#: geometric middle, loses at most ~1.6x at either end of that range.
LANES_BELOW = 3000
#: Which form runs: "threads" (the default), "lanes", or "auto" (the rule of :func:`form`: lanes below
#: LANES_BELOW); $RIEMATTN_CUDA_FORM, when set, overrides it. The default stays "threads" until a GPU
#: has run the lanes form: the simulator has no ``syncwarp`` (the block barrier stands in for it), so
#: the warp-synchronous code that only a card runs is untested, and the crossover is unmeasured.
FORM = "threads"
ENV = "RIEMATTN_CUDA_FORM"
#: the most numbers of local memory per lane, and bytes of shared memory per block (a warp; 48 kB: the
#: dynamic shared memory a launch gets without opting in)
MAX_LOCAL = 2048
MAX_SHARED = 48 * 1024
_CACHE: dict = {}


def sizes(name, ints):
    """(l, d, heads, G, tile, local numbers per lane, shared bytes per block) of the lanes kernel."""
    l, d, h = int(ints[L]), int(ints[D]), max(int(ints[H]), 1)
    m = _tables.method(name)
    s, dop853 = int(m.ints[1]), int(m.ints[0]) == _tables.DOP853
    n, g = l * d, max(32 // l, 1)
    nu = min(max(int(ints[U_HEADS]), 1), h) if int(ints[U_KIND]) != SRC_IDENTITY else 0
    tile = n * (1 + nu)  # the stage input's tokens, then the value rows u of each distinct U head
    local = 2 * h * d * d + h * d + l + 3 * d + (s + 9 + (16 + 7 if dop853 else 2)) * d + 2
    shared = 8 * g * (2 * n + tile)  # the rows of the sums, then the tiles (float64 bound; dynamic shared memory)
    return l, d, h, g, tile, local, shared


def fits(name, ints):
    """Whether the lanes kernel exists for this method and configuration (l <= 32, sizes)."""
    if name not in _gen.METHODS:
        return False
    l, _, _, _, _, local, shared = sizes(name, ints)
    return l <= 32 and local <= MAX_LOCAL and shared <= MAX_SHARED


def form(B, l):
    """"lanes" or "threads" for a batch of B trajectories of l tokens: $RIEMATTN_CUDA_FORM, else
    :data:`FORM`; "auto": the rule, lanes for 2 <= l <= 32 and B < LANES_BELOW."""
    chosen = os.environ.get(ENV) or FORM or "auto"
    if chosen not in ("lanes", "threads", "auto"):
        raise ValueError(f"{ENV} / riemattn.solvers.compiled.cuda._warp.FORM must be 'lanes', 'threads' or 'auto', "
                         f"not {chosen!r}")
    if chosen != "auto":
        return chosen
    return "lanes" if 2 <= l <= 32 and B < LANES_BELOW else "threads"


def select(name, ints, is32, B):
    """(adaptive_kernel, fixed_kernel, (blocks, threads)) of the lanes form for this call, or None (a
    thread per trajectory: the rule says so, or the shape does not fit). The kernels take the
    arguments of :func:`._gen.kernels`' kernels, in the same (B, ...) layout."""
    if form(B, int(ints[L])) != "lanes" or not fits(name, ints):
        return None
    g = sizes(name, ints)[3]
    return kernels(name, ints, is32) + (((B + g - 1) // g, 32),)


def kernels(name, ints, is32, saves=True):
    """(adaptive_kernel, fixed_kernel) of the lanes form (cached per (name, ints, dtype, saves))."""
    key = (name, tuple(int(v) for v in ints), bool(is32), bool(saves), bool(_sim()))
    if key not in _CACHE:
        _CACHE[key] = _build(*key)
    return _CACHE[key]


def _sim():
    from numba.core import config

    return bool(config.ENABLE_CUDASIM)


def _build(name, ints, is32, saves, sim):
    m = _tables.method(name)
    INTS = np.array(ints, dtype=np.int64)
    l, d, h, g, tile = sizes(name, INTS)[:5]
    options = _fast.field_options(INTS)
    flat = options[0] == MAN_FLAT
    sync = _warp_parts._syncblock if sim else _warp_parts._syncwarp
    rhs = _warp_parts.make_rhs(l, d, h, is32, options, sync)
    group_sums = _warp_parts.make_reductions(l, d, sync)
    steps = _field.device_functions(_steps, ("normalize", "tangent_error", "fsal_next", "dopri5_dense", "dop853_extra",
                                             "dop853_prepare", "dop853_dense", "axpy", "hsum", "last_nonzero"),
                                    {"rhs": rhs})
    rms_norm, dop853_norm, initial_step = _warp_parts.make_norms(l, d, group_sums, rhs, steps["normalize"])
    # the generated step on one token per lane (l = 1: the lane's d components)
    step = _gen._device_step(m, dict(L=1, D=d, N=d, FLAT=flat, rhs=rhs, normalize=steps["normalize"],
                                     tangent_error=steps["tangent_error"]), True)
    put = _put(l, d)
    common = dict(steps, rhs=rhs, SAVES=saves, put=put, rms_norm=rms_norm, dop853_norm=dop853_norm,
                  initial_step=initial_step)
    adaptive = _field.device_functions(_loop, ("adaptive_rows",), dict(common, rk_step=step))["adaptive_rows"]
    fixed = _field.device_functions(_loop, ("fixed_rows",), dict(
        common, rk_step=_warp_parts.uniform_step(step, group_sums, d)))["fixed_rows"]
    shared = 8 * g * 2 * l * d + (4 if is32 else 8) * g * tile
    return (_Launch(_adaptive_kernel(adaptive, m, INTS, flat, is32, g, tile), shared),
            _Launch(_fixed_kernel(fixed, m, INTS, flat, is32, g, tile), shared))


class _Launch:
    """A kernel whose launch ``[blocks, threads]`` adds its dynamic shared memory (bytes per block)."""

    def __init__(self, kernel, shared):
        self.kernel, self.shared, self.py_func = kernel, shared, kernel.py_func

    def __getitem__(self, config):
        config = tuple(config) if isinstance(config, tuple) else (config,)
        if len(config) == 2:  # no stream: the default one
            config += (0,)
        return self.kernel[config[:3] + (self.shared,)]


def _put(l, d):
    L_, D_ = l, d

    @cuda.jit(device=True)
    def put(saved, q, p, b, v):
        """``saved[q, b, i d + p] = v`` for the lane's token i (the layout (n_save, B, n) of _gen's kernels)."""
        saved[q, b, (cuda.laneid % L_) * D_ + p] = v

    return put


def _adaptive_kernel(rows, m, INTS, flat, is32, g, tile):
    MI, CTRL, A, BB, C, E, E3, DENSE, CX = _gen._constants(m)
    DT = float32 if is32 else float64
    L_, D_, S, G, T = int(INTS[L]), int(INTS[D]), int(m.ints[1]), g, tile
    OFF = G * 2 * L_ * D_ * (2 if is32 else 1)  # the sums' rows, in tile elements
    KX, FD = (16, 7) if int(m.ints[0]) == _tables.DOP853 else (1, 1)
    FLAT = flat

    @cuda.jit
    def adaptive_kernel(t0, t1, rtol, atol, h_first, max_steps, floats, per_all, Y, saveat, saved, stats, t_fail_out):
        lane = cuda.laneid
        gi = lane // L_
        b = cuda.blockIdx.x * G + gi
        if gi >= G or b >= Y.shape[0]:  # idle lanes: in no trajectory's mask
            return
        i = lane - gi * L_
        dyn = cuda.shared.array(0, DT)  # after the rows of the sums (float64, _warp_parts.make_reductions)
        w = dyn[OFF + gi * T:OFF + (gi + 1) * T]
        y = cuda.local.array(D_, DT)
        K = cuda.local.array((S, D_), DT)
        Kx = cuda.local.array((KX, D_), DT)
        Fd = cuda.local.array((FD, D_), DT)
        x = cuda.local.array(D_, DT)
        X = cuda.local.array(D_, DT)
        y_new = cuda.local.array(D_, DT)
        err = cuda.local.array(D_, DT)
        e3 = cuda.local.array(D_, DT)
        k1 = cuda.local.array(D_, DT)
        k_next = cuda.local.array(D_, DT)
        u = cuda.local.array(D_, DT)
        r = cuda.local.array(1, DT)
        r_new = cuda.local.array(1, DT)
        for a in range(D_):
            y[a] = Y[b, i * D_ + a]
        per = per_all[b if per_all.shape[0] > 1 else 0]
        rows(MI, CTRL, A, BB, C, E, E3, DENSE, CX, FLAT, t0, t1, rtol, atol, h_first, max_steps, INTS, floats, per,
             b, 1, D_, y, w, K, Kx, Fd, x, X, y_new, err, e3, k1, k_next, u, r, r_new, saveat, saved, stats,
             t_fail_out)

    return adaptive_kernel


def _fixed_kernel(rows, m, INTS, flat, is32, g, tile):
    MI, _, A, BB, C, E = _gen._constants(m)[:6]
    DT = float32 if is32 else float64
    L_, D_, S, G, T = int(INTS[L]), int(INTS[D]), int(m.ints[1]), g, tile
    OFF = G * 2 * L_ * D_ * (2 if is32 else 1)  # the sums' rows, in tile elements
    FLAT = flat

    @cuda.jit
    def fixed_kernel(gt, gh, gslot, floats, per_all, Y, saved, stats, t_fail_out):
        lane = cuda.laneid
        gi = lane // L_
        b = cuda.blockIdx.x * G + gi
        if gi >= G or b >= Y.shape[0]:
            return
        i = lane - gi * L_
        dyn = cuda.shared.array(0, DT)  # after the rows of the sums (float64, _warp_parts.make_reductions)
        w = dyn[OFF + gi * T:OFF + (gi + 1) * T]
        y = cuda.local.array(D_, DT)
        K = cuda.local.array((S, D_), DT)
        x = cuda.local.array(D_, DT)
        X = cuda.local.array(D_, DT)
        y_new = cuda.local.array(D_, DT)
        err = cuda.local.array(D_, DT)
        r = cuda.local.array(1, DT)
        r_new = cuda.local.array(1, DT)
        for a in range(D_):
            y[a] = Y[b, i * D_ + a]
        per = per_all[b if per_all.shape[0] > 1 else 0]
        rows(MI, A, BB, C, E, FLAT, gt, gh, gslot, INTS, floats, per, b, 1, D_, y, w, K, x, X, y_new, err, r, r_new,
             saved, stats, t_fail_out)

    return fixed_kernel


