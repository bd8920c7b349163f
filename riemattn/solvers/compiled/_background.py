"""Background processes that compile parts of the compiled engine (private): the switch, the process
start, and the compile of a field kernel specialised to a token shape
(:mod:`riemattn.dynamics.kernels._kernel_shaped`), which the engine asks for when a call needs a
shape not yet compiled (``riemattn.solvers.compiled._kernel.field_kernel``). The process runs
``python -m riemattn.solvers.compiled._warmup``; :mod:`riemattn.solvers.compiled._warmup` holds
the rest (the whole engine's background compile and :func:`~riemattn.warmup`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
from pathlib import Path

ENV = "RIEMATTN_BACKGROUND_COMPILE"
log = logging.getLogger("riemattn")
_SHAPES: dict = {}  # (l, d) -> the background process compiling that shape's kernel (one per shape)
_QUIET: list = []  # non-empty inside no_shape_compiles()


def background_enabled() -> bool:
    """Whether background compiles may start (``RIEMATTN_BACKGROUND_COMPILE`` not 0/false/no/off): the
    engine's, which ``"auto"`` starts, and a token shape's, which any compiled call starts."""
    return os.environ.get(ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def _spawn(argv):
    """``python -m riemattn.solvers.compiled._warmup *argv``, detached, this package first on its path."""
    root = str(Path(__file__).resolve().parents[3])  # the directory holding the riemattn package
    env = dict(os.environ, **{ENV: "0"})
    env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env.pop("RIEMATTN_ENGINE", None)
    return subprocess.Popen([sys.executable, "-m", "riemattn.solvers.compiled._warmup", *argv], env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


@contextlib.contextmanager
def no_shape_compiles():
    """Inside, no shape's background compile starts (:func:`warmup`'s own solves on 2 x 3 tokens:
    without it, ``riemattn warmup`` left a process compiling a shape nobody asked for)."""
    _QUIET.append(True)
    try:
        yield
    finally:
        _QUIET.pop()


def start_shape(l: int, d: int) -> bool:
    """Compile the field kernel specialised to tokens (l, d) in a background process (once per shape
    and process; not where background compiles are switched off or nothing can be cached), which
    waits for any other compile to finish first; True where this call started it. One such process
    at a time per process: while one runs, another shape is not started (nor recorded: a later call
    asks again), so that a sweep over many shapes does not start a process (~110 MB) for each."""
    from ...dynamics.kernels import _kernel_cache

    if _QUIET or (l, d) in _SHAPES or not background_enabled() or not _kernel_cache.CACHED:
        return False
    if any(proc is not None and proc.poll() is None for proc in _SHAPES.values()):
        return False
    try:
        _SHAPES[(l, d)] = _spawn(["shape", str(int(l)), str(int(d))])
    except OSError as exc:
        _SHAPES[(l, d)] = None
        log.info("riemattn: could not compile the kernel for %d x %d tokens in the background (%s).", l, d, exc)
        return False
    log.info("riemattn: compiling the field kernel specialised to %d x %d tokens in a background process "
             "(pid %d); until it is ready the generic kernel runs (the same results).", l, d, _SHAPES[(l, d)].pid)
    return True
