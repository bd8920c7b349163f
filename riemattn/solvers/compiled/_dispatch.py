"""``integrate(..., engine=...)``: which engine runs a call.

``"numpy"``: the NumPy engine. ``"compiled"``: the compiled engine, or
:class:`~riemattn.errors.UnsupportedByEngine` naming what in the call it cannot run. ``"auto"``
(the default): the compiled engine when it supports the call, it pays (:func:`pays`) and its
loops are ready (:func:`ready`), else the NumPy engine -- so a call never waits for a compilation;
where it would pay but is not ready, a background process compiles it
(:mod:`riemattn.solvers.compiled._warmup`; ``RIEMATTN_BACKGROUND_COMPILE=0``: not). The
environment variable ``RIEMATTN_ENGINE`` changes what ``"auto"`` means: ``compiled`` -- the compiled engine wherever it supports the call
(compiling on first use, whatever the size); ``numpy`` -- never the compiled engine.
``"cuda"``: the CUDA engine (:mod:`riemattn.solvers.compiled.cuda`), or UnsupportedByEngine naming why
not; ``"auto"`` never chooses it.
"""

from __future__ import annotations

import math
import os

from ...errors import IntegrationError, UnsupportedByEngine, ValidationError

ENGINES = ("auto", "numpy", "compiled", "cuda")
ENV = "RIEMATTN_ENGINE"


def check_engine(engine) -> str:
    if not isinstance(engine, str) or engine not in ENGINES:
        raise ValidationError(f"engine must be one of {list(ENGINES)}, got {engine!r}.")
    return engine


def _preference() -> str:
    value = os.environ.get(ENV, "").strip().lower()
    return value if value in ("compiled", "numpy") else ""


#: loops found compiled in this process (``signatures`` hashes numba types: 40 us a call)
_READY: dict = {}


def ready(adaptive) -> bool:
    """Whether the compiled code a call would use (the field kernel and the loop: ``adaptive`` True,
    False, or ``"lanes"`` for the ensembles' lane loop) is compiled in this
    process, or in numba's on-disk cache for this CPU, completely written (loading it takes a
    fraction of a second; compiling it, about a minute). A cache built for another CPU
    (``NUMBA_CPU_NAME``, a shared home, a container image) does not count."""
    if _READY.get(adaptive):
        return True
    try:
        import numba

        if numba.config.DISABLE_JIT:
            return False
        from ...dynamics.kernels._kernel_cache import cached_for_this_cpu
        from . import _kernel

        if adaptive == "lanes":
            from ._lanes import solve_lanes as loop
        elif adaptive:
            from ._adaptive import solve_rows as loop
        else:
            from ._fixed import fixed_rows as loop
        if loop.overloads and _kernel.evaluate.overloads:  # compiled in this process: for good
            _READY[adaptive] = True
            return True
        return all(cached_for_this_cpu(f) and _written(f) for f in (_kernel.evaluate, loop))
    except Exception:  # noqa: BLE001 -- a numba without these internals: never auto-compile
        return False


def stream_ready() -> bool:
    """Whether the streamed kernel of many tokens (:mod:`riemattn.dynamics.kernels._kernel_stream`)
    is compiled in this process, or in numba's on-disk cache for this CPU, completely written."""
    if _READY.get("stream"):
        return True
    try:
        import numba

        if numba.config.DISABLE_JIT:
            return False
        from ...dynamics.kernels._kernel_cache import cached_for_this_cpu
        from ...dynamics.kernels._kernel_stream import evaluate_streamed

        if evaluate_streamed.overloads:
            _READY["stream"] = True
            return True
        return cached_for_this_cpu(evaluate_streamed) and _written(evaluate_streamed)
    except Exception:  # noqa: BLE001 -- a numba without these internals: never auto-compile
        return False


def _written(dispatcher) -> bool:
    """Whether the data files of ``dispatcher``'s cache entries for this CPU exist: numba writes an
    entry's index before its data (each by an atomic rename), so while a background compile is
    writing, the index may name a file not there yet (loading it would compile in this process)."""
    from ...dynamics.kernels._kernel_cache import this_cpu

    cache = dispatcher._cache
    cpu = this_cpu()
    names = [name for key, name in cache._cache_file._load_index().items() if key[1] == cpu]
    return bool(names) and all(os.path.exists(os.path.join(cache.cache_path, name)) for name in names)


#: Where "auto" chooses the compiled engine for explicit steppers (docs/performance.md, "Which engine
#: when"; measured with benchmarks/compiled.py (c) on the 2-core development machine after the kernels
#: were vectorised, best of 5 calls). The batch's work per evaluation is B h w, w = l d (l + d) + 2 l^2
#: for one trajectory. Up to 1e5 the compiled engine was faster in every measured cell (100
#: trajectories of 10 x 3: 1.6x); the NumPy engine won at one trajectory of 200 x 2 tokens (w =
#: 1.6e5; its BLAS products and vectorised exp over long rows of few components). With
#: time-dependent weights (P(t), U(t): the NumPy engine forms them per trajectory) up to 4e5 (the
#: hemisphere ensemble: compiled 2.1x faster at B = 100, equal at 1000). From d = 8 on the kernels
#: vectorise: while one trajectory's w <= 6e5 (64 x 64, w = 5.3e5: one trajectory, 2026-11-27,
#: best of 10 calls, three alternations: dopri5 compiled 8.2--8.6 ms, NumPy 9.2--11.6 ms; rk4 per
#: step compiled 438--445 us, NumPy 417--434 us, within 5 %; a batch, on two threads: 1.6x at B = 10
#: and 100; until 2026-11-26 one trajectory stopped at 3e5, where the engines had measured within
#: 5 % for dopri5 -- re-measured, NumPy's 12 % was outside the rule's 10 %). And once a batch's
#: attention matrices, B h l^2 numbers, pass 2e6 (16 MB), the NumPy engine's arrays leave the
#: cache: compiled 1.4x faster at 100 trajectories of 200 x 2 (the NumPy engine 1.3x faster at 10).
#: Where dopri5 or dop853 runs eight trajectories at a time (``_engine.lanes_apply``: small tokens, a
#: batch of at least 8 per thread), "auto" takes the compiled engine whatever the work: measured faster
#: than the NumPy engine in every such cell (dopri5, B = 16 to 1000; 10 x 3: 2.6--7.5x, 32 x 8:
#: 1.6--2.4x, 200 x 2: 1.3--2.6x; dop853 at tol 1e-8, one head, B = 16 / 100: 10 x 3 3.0 / 4.1x,
#: 32 x 8 1.9 / 2.4x, 16 x 16 3.2 / 2.9x, 80 x 4 2.2 / 2.3x, 200 x 2 2.1 / 2.8x; docs/performance.md),
#: the rule below deciding for the other calls.
EXPLICIT_WORK, TIMED_WORK = 1.0e5, 4.0e5
WIDE_D, WIDE_WORK = 8, 6.0e5
SCORES_OUT_OF_CACHE = 2.0e6
#: Rosenbrock steppers (and "auto"): the compiled engine was faster at every measured size, 11.7x
#: at l d = 18 down to 1.1x at l d = 384 for one trajectory (its dense LU is unblocked scalar code).
STIFF_SIZE = 400


def work(pack, batch_size) -> float:
    """The batch's arithmetic per field evaluation in :func:`pays`' units: B h (l d (l + d) + 2 l^2)."""
    from ...dynamics.kernels import _kernel_layout as lay

    l, d, h = (int(pack.ints[k]) for k in (lay.L, lay.D, lay.H))
    return float(batch_size) * max(h, 1) * (l * d * (l + d) + 2 * l * l)


def pays(pack, step, batch_size) -> bool:
    """Whether "auto" runs a supported call on the compiled engine: Rosenbrock steppers (and
    ``"auto"``) while l d <= :data:`STIFF_SIZE`; explicit ones while :func:`work` <=
    :data:`EXPLICIT_WORK` (:data:`TIMED_WORK` for time-dependent weights), and for attention
    fields also while d >= :data:`WIDE_D` and one trajectory's work is at most :data:`WIDE_WORK`,
    or for a batch whose attention matrices hold at least :data:`SCORES_OUT_OF_CACHE` numbers, or
    where the attention is streamed (``_stream.applies``: from 256 tokens)."""
    from ...dynamics.kernels import _kernel_layout as lay
    from . import _stream, _tables

    kind = _tables.SUPPORTED[step.name][1]
    l, d = int(pack.ints[lay.L]), int(pack.ints[lay.D])
    if kind in (_tables.ROSENBROCK, _tables.AUTO):
        return l * d <= STIFF_SIZE
    if _stream.applies(step, pack):  # many tokens, streamed: faster than the NumPy engine at every measured
        return True  # size (2026-11-29, SA on S^2, one evaluation: 256 tokens ~0.11 ms against the NumPy
        # field's 0.25 ms and its engine's ~0.2-0.5 ms a step; 1000: 1.6 against 6.4-21 ms; 4000: 25 against
        # 400-640 ms; benchmarks/large_n.py)
    timed = any(int(pack.ints[k]) in (lay.SRC_SINES, lay.SRC_ROWSINES, lay.SRC_STEPS)
                for k in (lay.P_KIND, lay.U_KIND))
    attention = int(pack.ints[lay.KIND]) == lay.KIND_ATTENTION
    if work(pack, batch_size) <= (TIMED_WORK if timed and attention else EXPLICIT_WORK):
        return True
    if not attention or int(pack.ints[lay.PLACEMENT]) != lay.PL_POST:  # (measured: plain attention)
        return False
    h = max(int(pack.ints[lay.H]), 1)
    if d >= WIDE_D and work(pack, 1) <= WIDE_WORK:
        return True
    return batch_size >= 2 and batch_size * h * l * l >= SCORES_OUT_OF_CACHE


def empty_engine(engine, field, step, y0, save_fn, events, progress, dense_output) -> str:
    """The engine of an empty batch's result (nothing runs on either engine): ``"compiled"`` where
    ``engine="compiled"`` and it supports the call (else :class:`~riemattn.errors.UnsupportedByEngine`,
    as for a non-empty batch), else ``"numpy"``."""
    if check_engine(engine) != "compiled":
        return "numpy"
    from . import _engine

    why, _ = _engine.unsupported(field, step, y0, save_fn=save_fn, events=events or (), progress=progress,
                                 dense_output=dense_output)
    if why:
        raise UnsupportedByEngine(_refusal(why))
    return "compiled"


def _refusal(why) -> str:
    return ("engine='compiled' cannot run this call: " + "; ".join(why)
            + ". Use engine='numpy' (or 'auto', which falls back to it).")


def dispatch(engine, field, step, y0, t0, t1, dt, rtol, atol, first_step, saveat, max_steps, events, event_tol,
             save_fn, progress, dense_output, raise_on_failure, precision=None):
    """The compiled (or CUDA) engine's Trajectory for this call (arguments validated by integrate),
    or None: run the NumPy engine. ``precision``: ``"float32"`` runs the CUDA engine in float32
    (a float32 NumPy y0; tensors keep their dtype)."""
    engine = check_engine(engine)
    if engine == "numpy":
        return None
    if engine == "cuda":  # never chosen by "auto" (docs/performance.md, "GPU ensembles")
        from .cuda._engine import dispatch as cuda_dispatch

        sol = cuda_dispatch(field, step, y0, t0, t1, dt, rtol, atol, first_step, saveat, max_steps, events,
                            save_fn, progress, dense_output, precision)
        if raise_on_failure and not sol.success:
            raise IntegrationError(sol.message)
        return sol
    preference = _preference()
    if engine == "auto" and preference == "numpy":
        return None
    from . import _engine

    why, pack = _engine.unsupported(field, step, y0, save_fn=save_fn, events=events or (), progress=progress,
                                    dense_output=dense_output)
    if why:
        if engine == "compiled":
            raise UnsupportedByEngine(_refusal(why))
        return None
    lanes = _engine.lanes_apply(step, pack, y0, saveat, events)
    if engine == "auto" and preference != "compiled":
        from ._warmup import start_background

        if lanes and not ready("lanes"):  # compile it in another process; meanwhile, as without lanes
            start_background(True)
            lanes = False
        if not lanes and not pays(pack, step, math.prod(y0.shape[:-2])):
            return None
        from . import _stream

        streamed = _stream.applies(step, pack)
        if not lanes and not (ready(step.adaptive) and (not streamed or stream_ready())):  # compile it for later
            start_background(step.adaptive)
            return None
    sol = _engine.run(field, step, y0, t0, t1, dt=dt, rtol=rtol, atol=atol, first_step=first_step,
                      saveat=saveat, max_steps=max_steps, events=events or (), event_tol=event_tol, pack=pack,
                      lanes=lanes)
    if raise_on_failure and not sol.success:
        raise IntegrationError(sol.message)
    return sol
