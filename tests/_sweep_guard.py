"""The guards of tests/suites/test_api_sweep.py (issue 58): a time limit on every call, and inputs
that must come out of a call unchanged.

* :func:`time_limit` raises :class:`Hang` in the block after ``seconds`` (SIGALRM), and ends the
  process (``faulthandler``) where compiled code never returns to Python.
* :func:`freeze` makes every NumPy array of an argument a read-only copy; :func:`snapshot` copies
  the data of an argument (arrays, tensors, containers of them) and :func:`mutated` says which
  argument differs from its snapshot after the call.
"""

from __future__ import annotations

import contextlib
import faulthandler
import signal
import sys

import numpy as np

#: Seconds one call may take before it counts as a hang (the issue's bound).
TIME_LIMIT = 5.0


class Hang(BaseException):
    """Raised by the alarm: a BaseException, so that no ``except Exception`` in the code swallows it."""


#: A call still running this long after its limit (a loop in compiled code, which the alarm cannot
#: interrupt) ends the process with the stacks of its threads: the run fails, naming the test (under
#: pytest-xdist the worker's crash is reported against the test it was running).
BACKSTOP = 60.0


@contextlib.contextmanager
def time_limit(seconds=None):
    """Raise :class:`Hang` in the block when it runs longer than ``seconds``.

    Two clocks, both cheap: SIGALRM (``setitimer``) raises :class:`Hang` at the next Python
    bytecode after ``seconds`` -- the tests run in the main thread of the process, pytest-xdist's
    workers included (``execmodel=main_thread_only``); and :func:`faulthandler.dump_traceback_later`
    at ``seconds + BACKSTOP`` ends the process from its own C thread when compiled code (numba,
    a NumPy loop) never returns to Python.
    """

    seconds = TIME_LIMIT if seconds is None else seconds  # read at the call: a test may lower it

    def handler(signum, frame):
        raise Hang(f"longer than {seconds} s")

    old = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    faulthandler.dump_traceback_later(seconds + BACKSTOP, exit=True, file=sys.__stderr__ or sys.stderr)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


# ------------------------------------------------------------------------------------------------
# inputs never mutated (issue 58)
# ------------------------------------------------------------------------------------------------
_OPAQUE = object()


def freeze(value, depth=0):
    """``value`` with every NumPy array in it replaced by a read-only copy (lists, tuples and
    dicts copied; other objects as they are): writing into an argument raises at the write."""
    if isinstance(value, np.ndarray):
        out = value.copy()
        out.flags.writeable = False
        return out
    if depth < 3 and type(value) in (list, tuple):
        return type(value)(freeze(v, depth + 1) for v in value)
    if depth < 3 and type(value) is dict:
        return {k: freeze(v, depth + 1) for k, v in value.items()}
    return value


def snapshot(value, depth=0):
    """A copy of the data in ``value`` (arrays, tensors, containers of them) to compare after the call."""
    if isinstance(value, np.ndarray):
        return value.copy()
    if type(value).__module__.startswith("torch") and hasattr(value, "detach"):
        return value.detach().cpu().clone()
    if depth < 3 and type(value) in (list, tuple):
        return type(value)(snapshot(v, depth + 1) for v in value)
    if depth < 3 and type(value) is dict:
        return {k: snapshot(v, depth + 1) for k, v in value.items()}
    return _OPAQUE


def changed(value, snap, depth=0) -> str | None:
    """How ``value`` differs from its :func:`snapshot` ``snap`` (None: unchanged)."""
    if snap is _OPAQUE:
        return None
    if isinstance(snap, (list, tuple, dict)):
        if type(value) is not type(snap) or len(value) != len(snap):
            return f"its length changed from {len(snap)} to {len(value) if hasattr(value, '__len__') else '?'}"
        keys = snap.keys() if isinstance(snap, dict) else range(len(snap))
        for k in keys:
            if isinstance(snap, dict) and k not in value:
                return f"key {k!r} removed"
            why = changed(value[k], snap[k], depth + 1)
            if why:
                return f"[{k!r}] {why}"
        return None
    now = np.asarray(value.detach().cpu() if hasattr(value, "detach") else value)
    was = np.asarray(snap)
    if now.shape != was.shape or now.dtype != was.dtype:
        return f"shape/dtype changed from {was.shape}/{was.dtype} to {now.shape}/{now.dtype}"
    try:
        same = np.array_equal(now, was, equal_nan=now.dtype.kind in "fc")
    except TypeError:
        same = np.array_equal(now, was)
    if same:
        return None
    if now.dtype.kind in "fc":
        with np.errstate(all="ignore"):
            return f"changed by up to {np.nanmax(np.abs(now - was)):.3g}"
    return "changed"


def mutated(watched: dict, snaps: dict) -> str | None:
    """The first argument of ``watched`` ({name: value passed}) whose data differs from ``snaps``."""
    for name, value in watched.items():
        why = changed(value, snaps[name])
        if why:
            return f"argument {name} mutated: {why}"
    return None
