"""Compiling the compiled engine before it is needed (private): :func:`warmup` (``ra.warmup()``,
``riemattn warmup``) and the background compile that ``engine="auto"`` starts.

The engine is three compiled functions (the field kernel ``kernels.evaluate``, the fixed-step loop
and the adaptive loop; every stepper, field, manifold and event runs through them), cached on disk
by numba (:mod:`riemattn.dynamics.kernels._kernel_cache`). :func:`warmup` compiles them (or loads them from
the cache) by running a tiny problem on each loop. A process compiles them while it holds a file
lock in the cache directory (:func:`locked`), so concurrent processes (pytest-xdist, Dask workers)
never compile at once: the second waits and then loads the first one's code from the cache.

The background compile: the first call that ``"auto"`` would run on the compiled engine while it
is not compiled for this CPU (:func:`riemattn.solvers.compiled._dispatch.ready`) starts
``python -m riemattn.solvers.compiled._warmup`` (:func:`start_background`, once per process, at
lower priority, detached; the loop the call needs first), runs on the NumPy engine and says so
once on the ``riemattn`` logger; the calls after the cache is ready use the compiled engine.
``RIEMATTN_BACKGROUND_COMPILE=0`` switches this off (the test suite does, so that its timings do
not depend on it).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time

try:
    import fcntl
except ImportError:  # Windows: no lock (numba's cache writes are atomic renames)
    fcntl = None

from ._background import ENV, _spawn, background_enabled, no_shape_compiles

LOCK_NAME = "riemattn-compile.lock"
log = logging.getLogger("riemattn")
_STARTED: list = []  # the background process started by this process (at most one)


def _lock_path():
    from ...dynamics.kernels._kernel_cache import cache_dir
    from . import _kernel

    where = cache_dir(_kernel.evaluate)
    return None if where is None else os.path.join(where, LOCK_NAME)


@contextlib.contextmanager
def locked(block: bool = True):
    """Hold the engine's compile lock while inside; yields False where ``block`` is False and another
    process holds it (True where there is no cache directory or no ``fcntl``: nothing to protect)."""
    path = _lock_path()
    if path is None or fcntl is None:
        yield True
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "a+b") as f:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | (0 if block else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def compiling() -> bool:
    """Whether a process holds the compile lock now (its cache entries may be half written)."""
    path = _lock_path()
    if path is None or fcntl is None or not os.path.exists(path):
        return False
    try:
        with open(path, "rb") as f:
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)
    except OSError:
        return False
    return False


def _tiny():
    import numpy as np

    from ...dynamics.attention import AttentionField

    field = AttentionField(np.eye(3), beta=1.0)
    y = field.manifold.projection(np.random.default_rng(0).standard_normal((2, 3)))
    return field, y


def _kernels_task():
    import numpy as np

    from . import _kernel

    field, y = _tiny()
    pack = _kernel.pack_field(field, y.shape)
    out = np.zeros_like(y)
    _kernel.evaluate(_kernel.RHS, 0.0, y, 0, np.array(pack.ints, dtype=np.int64), np.array(pack.floats, dtype=float),
                     np.array(pack.per, dtype=float), np.empty(max(pack.work, 1)), out)
    _kernel.evaluate_streamed.compile(_kernel.evaluate_type().signature)  # many tokens (compiled._stream)


def _loop_task(stepper, **kw):
    def task():
        from ..core.integrate import integrate

        field, y = _tiny()
        integrate(field, y, (0.0, 0.1), stepper, engine="compiled", **kw)

    return task


def _lanes_task():
    """An ensemble large enough for the lane loop (riemattn.solvers.compiled._lanes) on this machine."""
    import numpy as np

    from ..core.integrate import integrate
    from ._engine import LANES_MIN_PER_THREAD
    from ._threads import threads

    field, y = _tiny()
    batch = np.broadcast_to(y, (LANES_MIN_PER_THREAD * threads(),) + y.shape).copy()
    integrate(field, batch, (0.0, 0.1), "dopri5", engine="compiled", saveat=[0.1])


#: what :func:`warmup` compiles, in order: (name, function)
TASKS = (("field kernels", _kernels_task), ("fixed-step loop", _loop_task("rk4", dt=0.05)),
         ("adaptive loop", _loop_task("dopri5")), ("ensemble loop", _lanes_task))


def _shape_task(l, d):
    def task():
        from . import _kernel
        from ...dynamics.kernels import _kernel_shaped

        _kernel_shaped.compile_now(l, d, _kernel.evaluate_type().signature)

    return task


def _check_shapes(shapes):
    """``shapes`` as a list of (l, d) pairs of positive ints (:func:`riemattn._validation.check_int` for each)."""
    from ..._validation import check_int
    from ...errors import ValidationError

    try:
        pairs = [tuple(s) for s in shapes]
    except TypeError:
        pairs = None
    if pairs is None or any(len(s) != 2 for s in pairs):
        raise ValidationError(f"shapes must be a sequence of (l, d) pairs of positive ints (tokens l of dimension "
                              f"d), got {shapes!r}.")
    out = [tuple(check_int(v, f"shapes[{k}]", 1, f" ({'l' if a == 0 else 'd'})") for a, v in enumerate(s))
           for k, s in enumerate(pairs)]
    from ...dynamics.kernels._kernel_shaped import SHAPED_MAX_SIZE

    for k, (l, d) in enumerate(out):  # no kernel is specialised beyond l d = 64: nothing to compile
        if l * d > SHAPED_MAX_SIZE:
            raise ValidationError(f"shapes[{k}] = ({l}, {d}) has l d = {l * d} numbers; kernels are specialised to "
                                  f"shapes of at most l d = {SHAPED_MAX_SIZE} (docs/performance.md).")
    return out


def warmup(progress=None, shapes=()) -> dict:
    """Compile the compiled engine now (or load it from numba's on-disk cache), with a progress bar.

    ``integrate(..., engine="auto")`` uses the compiled engine only once it is compiled, and a first
    ``engine="compiled"`` call compiles it (about a minute of one core, once per install and CPU);
    this does it up front -- the same as ``riemattn warmup`` on the command line. If another process
    is compiling it, this waits for it and then loads its code from the cache.

    Parameters
    ----------
    progress : bool or None
        Show a progress bar (tqdm) on stderr; None: where stderr is a terminal.
    shapes : sequence of (l, d)
        Also compile the field kernel specialised to each token shape (l tokens in R^d, l d <= 64,
        else ValidationError; used for the attention field with no layer-norm placement, the same results, faster:
        docs/performance.md, "Kernels specialised to the shape"; seconds each). The engine compiles
        a shape in the background at its first call; this does it now.

    Returns
    -------
    dict
        Seconds per part (``"field kernels"``, ``"fixed-step loop"``, ``"adaptive loop"``,
        ``"ensemble loop"``: dopri5 on eight trajectories at a time; ``"shape l x d"`` for each of
        ``shapes``; a part loaded from the cache takes a fraction of a second) and ``"total"``; ``"cached"``: whether
        the code is cached on disk for later processes (False: no writable cache directory).

    Raises
    ------
    riemattn.errors.UnsupportedByEngine
        numba's JIT is off (``NUMBA_DISABLE_JIT=1``).
    """
    import numba
    from tqdm.auto import tqdm

    from ..._validation import check_flag
    from ...dynamics.kernels import _kernel_cache
    from ...errors import UnsupportedByEngine

    if progress is not None:  # checked before compiling (minutes)
        check_flag(progress, "progress")
    tasks = list(TASKS) + [(f"shape {l} x {d}", _shape_task(l, d)) for l, d in _check_shapes(shapes)]

    if numba.config.DISABLE_JIT:
        raise UnsupportedByEngine("warmup: NUMBA_DISABLE_JIT=1 turns numba's JIT off, so there is nothing to "
                                  "compile (unset it to use the compiled engine).")
    times = {}
    start = time.perf_counter()
    with locked(block=True), no_shape_compiles():  # (its solves' 2 x 3 tokens are no shape to compile)
        bar = tqdm(tasks, desc="riemattn warmup", unit="part", disable=(None if progress is None else not progress),
                   leave=False)
        for name, task in bar:
            bar.set_postfix_str(name)
            t = time.perf_counter()
            task()
            times[name] = time.perf_counter() - t
        bar.close()
    times["total"] = time.perf_counter() - start
    times["cached"] = bool(_kernel_cache.CACHED)
    log.info("riemattn: the compiled engine is ready (%.1f s).", times["total"])
    return times


def start_background(adaptive: bool = True) -> bool:
    """Start the background compile (once per process; not where switched off or where nothing can
    be cached), the loop of the call that started it (``adaptive`` or not) first; True where this
    call started it."""
    from ...dynamics.kernels import _kernel_cache

    if _STARTED or not background_enabled() or not _kernel_cache.CACHED:
        return False
    try:
        proc = _spawn(["adaptive" if adaptive else "fixed"])
    except OSError as exc:
        _STARTED.append(None)
        log.warning("riemattn: could not start compiling the compiled engine in the background (%s); "
                    "engine='auto' runs the NumPy engine. Compile it with riemattn.warmup().", exc)
        return False
    _STARTED.append(proc)
    log.warning("riemattn: engine='auto' runs on the NumPy engine while the compiled engine compiles in a "
                "background process (pid %d, about a minute of one core, once per install); later calls use "
                "it once ready. Wait for it: riemattn.warmup() or `riemattn warmup`; switch this off: %s=0.",
                proc.pid, ENV)
    return True


def _main(first: str = "adaptive", *shape) -> None:
    """The background process: compile (the kernels, the ``first`` loop, the others) unless
    another process is compiling; each loop is usable by other processes as soon as it is written.
    ``first="shape"``: the kernel for tokens ``shape`` = (l, d), after any other compile."""
    with contextlib.suppress(OSError):
        os.nice(5)
    if first == "shape":
        with locked(block=True):
            _shape_task(int(shape[0]), int(shape[1]))()
        return
    kernels, fixed, adaptive, lanes = TASKS
    order = (kernels, adaptive, lanes, fixed) if first == "adaptive" else (kernels, fixed, adaptive, lanes)
    with locked(block=False) as held:
        if held:
            for _, task in order:
                task()


if __name__ == "__main__":
    _main(*sys.argv[1:4])
