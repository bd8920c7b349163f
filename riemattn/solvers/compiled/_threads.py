"""The threads of a compiled run (private): numba's thread count, and the rows of a batch run on a
pool of worker threads while the caller's thread waits, so that Ctrl-C reaches it.

The compiled loops release the GIL (``nogil``): the rows of a batch run in parallel, thread k
taking rows k, k + n, k + 2n, ... The pool's threads are started once per process (a start costs
about 0.1 ms, as much as a small solve).
"""

from __future__ import annotations


def threads() -> int:
    """Threads of a compiled run: numba's setting (``numba.set_num_threads``, ``NUMBA_NUM_THREADS``;
    default: one per core)."""
    import numba

    return max(1, int(numba.get_num_threads()))


_POOL: dict = {"pid": None, "queues": []}


def _worker(queue):
    """A pool thread: runs the tasks ``(fn, k, n, out, errors, done)`` of its queue until the process ends."""
    while True:
        _worker_once(*queue.get())


def _pool(n):
    """Queues of ``n`` persistent daemon worker threads (started once per process: a thread's
    start costs about 0.1 ms, a small solve's whole run; rebuilt after a fork, which copies no
    threads)."""
    import os
    import queue
    import threading

    if _POOL["pid"] != os.getpid():
        _POOL["pid"], _POOL["queues"] = os.getpid(), []
    queues = _POOL["queues"]
    while len(queues) < n:
        q = queue.SimpleQueue()
        threading.Thread(target=_worker, args=(q,), daemon=True, name=f"riemattn-compiled-{len(queues)}").start()
        queues.append(q)
    return queues[:n]


def in_threads(fn, B, halt, most=None):
    """``fn(start, stride)`` for start = 0 .. n - 1 on n threads (the compiled row loops release the
    GIL), n = min(threads, B, ``most``): row b is run by thread b mod n, whatever n, with the same
    arithmetic (``most=1``: one worker runs every row, e.g. while the streamed kernel spreads each
    evaluation over numba's threads). Returns (the calls'
    results, the exception that interrupted the wait or None). In the main thread the loops always
    run in worker threads (a pool kept for the process) while it waits: a signal's handler then
    runs at once (numba's code does not return to Python until it ends), and its exception
    (KeyboardInterrupt on Ctrl-C) sets ``halt[0] = 1``, which the loops check before every step,
    and is returned after they stopped."""
    import threading

    n = max(1, min(threads(), B, B if most is None else most))
    if most is not None:  # numba's thread count is per thread: the caller's, for the prange of the worker
        fn = _with_threads(fn, threads())
    if threading.current_thread() is not threading.main_thread():
        if n == 1:
            return [fn(0, 1)], None  # no signal reaches this thread: no need to wait in another
        queues = None  # a pool's queue may be busy with the main thread's rows: threads of its own
    else:
        queues = _pool(n)
    out, errors = [None] * n, []
    done = [threading.Event() for _ in range(n)]  # (not Thread.join: interrupted, it may report a running thread ended)
    for k in range(n):
        if queues is None:
            threading.Thread(target=_worker_once, args=(fn, k, n, out, errors, done[k]), daemon=True,
                             name=f"riemattn-compiled-{k}").start()
        else:
            queues[k].put((fn, k, n, out, errors, done[k]))
    pending = None
    for event in done:
        while not event.is_set():
            try:
                event.wait()
            except BaseException as exc:  # noqa: BLE001 -- Ctrl-C (or a handler's exception): stop the rows
                halt[0] = 1
                pending = pending or exc
    if errors:
        raise errors[0]
    return out, pending


def _with_threads(fn, nt):
    """``fn`` run with numba's thread count set to ``nt`` in the thread that runs it, and the
    iterations of its parallel loops handed out one at a time (``set_parallel_chunksize(1)``, also
    per thread; not settable in cached compiled code): a thread that another process slows down
    takes fewer of them (the streamed kernel's tasks are query tiles; their bits do not depend on it)."""
    def run(k, n):
        import numba

        numba.set_num_threads(nt)
        numba.set_parallel_chunksize(1)
        return fn(k, n)

    return run


def _worker_once(fn, k, n, out, errors, done):
    """One task of :func:`in_threads` in a thread of its own."""
    try:
        out[k] = fn(k, n)
    except BaseException as exc:  # noqa: BLE001 -- re-raised in the caller's thread
        errors.append(exc)
    finally:
        done.set()
