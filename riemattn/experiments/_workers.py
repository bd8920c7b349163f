"""Worker processes for ``reproduce --workers N``: stoppable at once, dying with their parent.

- Workers are fresh processes (``spawn``: no state copied from the parent, no fork of a threaded
  process), each running one task at a time, sent by the parent through a pipe.
- They ignore SIGINT (inherited as ignored through exec, so even during start-up): a Ctrl-C in a
  terminal reaches the whole process group, and the parent decides.
- They die with their parent: on Linux the kernel sends them SIGKILL when the parent dies
  (``prctl(PR_SET_PDEATHSIG)`` through ctypes), and on every system a thread in each worker exits
  it within half a second of the parent's death (its parent pid changes).
- While :func:`run_parallel` runs in the main thread, SIGINT and SIGTERM raise :class:`Stop` (a
  ``KeyboardInterrupt``) in the parent, which kills every worker (SIGKILL) and removes the ``.part``
  files of the tasks they were writing before the exception goes on.
- Every worker limits BLAS/OpenMP to the same number of threads (threadpoolctl), so results do
  not depend on the number of workers.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections import deque
from multiprocessing.connection import wait as wait_for


class Stop(KeyboardInterrupt):
    """Raised in the main thread by SIGINT or SIGTERM while :func:`signals_raise` is active."""

    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum


def thread_limit(threads: int | None):
    """Context limiting BLAS/OpenMP threads (threadpoolctl), or a no-op when unavailable/None."""
    if threads is None:
        return contextlib.nullcontext()
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # optional
        return contextlib.nullcontext()
    return threadpool_limits(limits=threads)


def _die_with_parent(parent_pid: int) -> None:
    """End this process when ``parent_pid`` dies: PR_SET_PDEATHSIG on Linux, and a watching thread."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            import ctypes

            PR_SET_PDEATHSIG = 1
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)

    def watch():
        while os.getppid() == parent_pid:
            time.sleep(0.5)
        os._exit(1)

    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)
    threading.Thread(target=watch, name="riemattn-watch-parent", daemon=True).start()


def _worker_main(conn, parent_pid, log_level, threads, target, args):
    """A worker: ``target(task, *args)`` for each task the parent sends, the result sent back."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent(parent_pid)
    # as quiet as the parent (the CLI keeps matplotlib's font chatter out)
    logging.getLogger("matplotlib").setLevel(log_level)
    with thread_limit(threads):
        while True:
            try:
                task = conn.recv()
            except EOFError:
                return
            if task is None:
                return
            conn.send(target(task, *args))


@contextlib.contextmanager
def signals_raise():
    """While inside, SIGINT and SIGTERM raise :class:`Stop` (main thread only; else a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise Stop(signum)

    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@contextlib.contextmanager
def _signals_ignored(signals=(signal.SIGINT, signal.SIGTERM)):
    """``signals`` ignored while inside (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.signal(s, signal.SIG_IGN) for s in signals}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _quiet_resource_tracker() -> None:
    """Start multiprocessing's resource tracker (shared with the workers) without its leak warning.

    A worker killed on Ctrl-C leaves the semaphores it created (e.g. a Dask cluster's); the
    tracker still removes them, but would also print a two-line warning after the run's one-line
    report. Its warnings come from its own process, started with the interpreter's -W options.
    """
    from multiprocessing import resource_tracker

    saved = list(sys.warnoptions)
    sys.warnoptions.append("ignore:resource_tracker:UserWarning")
    try:
        resource_tracker.ensure_running()
    finally:
        sys.warnoptions[:] = saved


class _Worker:
    def __init__(self, ctx, threads, target, args, pool):
        self.conn, child = ctx.Pipe()
        level = logging.getLogger("matplotlib").level
        self.proc = ctx.Process(
            target=_worker_main, args=(child, os.getpid(), level, threads, target, args), daemon=True
        )
        self.task = None
        pool.append(self)  # before it starts: a signal during the start still finds it
        # the worker starts with SIGINT ignored (inherited through exec): a Ctrl-C during its
        # start-up gives no traceback from it. (A Ctrl-C in these few milliseconds is lost.)
        with _signals_ignored((signal.SIGINT,)):
            self.proc.start()
        child.close()

    def send(self, task):
        """Give ``task`` to this worker. A worker already dead (killed before it read it) gets it
        anyway: the pipe has no reader, so nothing is written, and the main loop finds the death
        through the process's sentinel and reports the task as failed."""
        self.task = task
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.conn.send(task)


def run_parallel(tasks, workers, target, args, on_done, on_died, partial_files, threads=1):
    """Run ``target(task, *args)`` for every task in ``workers`` processes, each limited to
    ``threads`` BLAS/OpenMP threads.

    ``target`` is a module-level function (it is sent to the workers by reference); it should not
    raise (turn exceptions into results). ``on_done(result)`` is called in the parent as each task
    finishes; a worker that dies without an answer gives ``on_done(on_died(task, exitcode))`` and
    is replaced. ``partial_files(task)`` lists the files to remove when a worker is killed in the
    middle of ``task``. Call inside :func:`signals_raise` to make SIGINT/SIGTERM stop everything.
    """
    ctx = multiprocessing.get_context("spawn")
    _quiet_resource_tracker()
    queue = deque(tasks)
    pool: list[_Worker] = []
    try:
        for _ in range(min(workers, len(queue))):
            _Worker(ctx, threads, target, args, pool).send(queue.popleft())
        while any(w.task is not None for w in pool):
            busy = [w for w in pool if w.task is not None]
            ready = wait_for([w.conn for w in busy] + [w.proc.sentinel for w in busy], timeout=1.0)
            for w in busy:
                if w.conn not in ready and w.proc.sentinel not in ready:
                    continue
                answered = False
                with contextlib.suppress(EOFError, OSError):
                    if w.conn.poll():
                        result, answered = w.conn.recv(), True
                if not answered:  # died without an answer (killed, out of memory, a crash)
                    w.proc.join(1.0)
                    result = on_died(w.task, w.proc.exitcode)
                    pool.remove(w)
                    w.conn.close()
                    if queue:
                        w = _Worker(ctx, threads, target, args, pool)
                on_done(result)
                w.task = None
                if queue:
                    w.send(queue.popleft())
        for w in pool:
            with contextlib.suppress(OSError):
                w.conn.send(None)
        for w in pool:
            w.proc.join(5.0)
    finally:
        with _signals_ignored():  # a second Ctrl-C does not interrupt the clean-up
            started = [w for w in pool if w.proc.pid is not None]
            for w in started:
                if w.proc.is_alive():
                    w.proc.kill()
            for w in started:
                w.proc.join(2.0)
            for w in pool:
                w.conn.close()
                if w.task is not None:
                    for path in partial_files(w.task):
                        with contextlib.suppress(OSError):
                            os.unlink(path)
