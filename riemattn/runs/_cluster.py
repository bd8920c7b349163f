"""The Dask side of :func:`riemattn.runs.sweep.sweep`: a LocalCluster tuned for riemattn, and clients.

``local_cluster`` is public through :mod:`riemattn.runs.sweep` (``riemattn.sweep.local_cluster``).
"""

from __future__ import annotations

import logging
import os

from ..errors import InputTypeError


def local_cluster(n_workers: int | None = None):
    """A ``distributed.LocalCluster`` tuned for riemattn: single-threaded worker processes.

    One worker process per core by default, one thread each, no dashboard on a fixed port, Dask's
    routine log lines silenced. Dask sets ``MALLOC_TRIM_THRESHOLD_=65536`` in its worker
    processes (to hand memory back to the OS); that disables glibc's adaptive mmap threshold, so
    every large temporary of an integration is mmapped and unmapped again: measured 2.7x slower
    (a 2.0 s phase-diagram task took 5.6-5.9 s). This cluster's workers start without it.
    Inside a daemonic process (which may not have children) the cluster is one in-process
    worker thread instead.
    """
    import dask
    from distributed import LocalCluster

    n = (os.cpu_count() or 1) if n_workers is None else n_workers
    # geomstats sets the root logger to INFO on import: keep Dask's routine chatter out
    for name in ("distributed", "tornado"):
        if logging.getLogger(name).getEffectiveLevel() < logging.WARNING:
            logging.getLogger(name).setLevel(logging.WARNING)
    # the worker processes read this at start (they too import geomstats). "error": a worker's
    # warnings are its side of shutting down (heartbeats to a scheduler that closed first); a
    # task's own failure reaches the client as its exception and is recorded in the store.
    os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "error")
    import multiprocessing

    if multiprocessing.current_process().daemon:
        # a daemonic process (a worker of `riemattn reproduce --workers N`, which already runs
        # figures side by side) may not start processes: one in-process worker thread. Results
        # do not depend on the cluster (each point's stream comes from its coordinates).
        return LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                            dashboard_address=":0", silence_logs=logging.WARNING)
    env = dict(dask.config.get("distributed.nanny.pre-spawn-environ", {}))
    env.pop("MALLOC_TRIM_THRESHOLD_", None)
    with dask.config.set({"logging.distributed": "warning",
                          "distributed.nanny.pre-spawn-environ": env}):
        return LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                            dashboard_address=":0", silence_logs=logging.WARNING)


def close_quietly(client, cluster) -> None:
    """Close a client and the LocalCluster riemattn made for it, without Dask's shutdown chatter.

    On a loaded machine a closing nanny logs "Worker process still alive after 4.0 seconds,
    killing" and the workers log heartbeat tracebacks for a scheduler that is already gone: what
    a cluster that riemattn owns and closes says about being closed, not a result. Those loggers
    are raised to ERROR for the duration of the close.
    """
    names = ("distributed", "distributed.nanny", "distributed.worker", "distributed.core",
             "distributed.batched", "tornado")
    saved = {name: logging.getLogger(name).level for name in names}
    try:
        for name in names:
            logging.getLogger(name).setLevel(logging.ERROR)
        client.close()
        cluster.close()
    finally:
        for name, level in saved.items():
            logging.getLogger(name).setLevel(level)


def _make_client(client, workers):
    """(client, cluster-or-None): a given Client, a Client on an address, or a new LocalCluster."""
    from distributed import Client

    if isinstance(client, Client):
        return client, None
    if isinstance(client, str):
        return Client(client), None
    if client is not None:
        raise InputTypeError(
            f"client must be None, a distributed.Client or a scheduler address string, "
            f"got {type(client).__name__}."
        )
    cluster = local_cluster(workers)
    return Client(cluster), cluster
