"""``sweep``: a function of one grid point, run over a grid on Dask, written to a Zarr store.

A *point function* ``point_fn(params, rng) -> xarray.Dataset`` computes the observables of one
grid point; :func:`sweep` runs it for every point of a grid as Dask tasks (an embedded
``LocalCluster`` by default, or any ``distributed.Client`` / scheduler address), writes each result
into a Zarr store as soon as it arrives, labelled by the grid's coordinates, and returns a
:class:`SweepResult`; the assembled data is ``xarray.open_zarr(store)``.

- **Determinism.** The random stream of a point is ``numpy.random.default_rng(point_seed(coords,
  seed))``: a ``SeedSequence`` of the sweep seed and a SHA-256 digest of the point's sorted
  coordinate items (never Python's ``hash``), so a value does not depend on the number of
  workers, the order the points run in, or a restart. Each task limits BLAS to one thread.
- **Batches.** ``batch_dims=("beta",)`` hands all values of those grid parameters to one call
  (``params["beta"]`` is then the 1-D array of them, and the Dataset must carry a ``beta``
  dimension of that length): one integration can carry every beta of one seed (the field's
  ``beta`` broadcasts over the batch). The random stream then derives from the other coordinates,
  so the points of a batch share it (common random numbers).
- **Resume.** The store holds ``status`` (per grid point: 0 missing, 1 done, 2 failed), written
  after the point's data; re-running on the same store computes only the points not done.
- **Faults.** A worker that dies costs only its in-flight tasks (Dask reruns them elsewhere); an
  exception raised by ``point_fn`` is caught in the task and recorded (``status = 2`` and the
  store's ``failed`` attribute: coordinates and message) while the other points go on.

Storage layout (Zarr format 2, consolidated metadata): one array per observable with dimensions
``(grid dims..., point dims...)`` chunked one grid point per chunk; the grid's coordinates; the
``status`` array over the grid dims; attributes ``sweep_seed``, ``sweep_grid`` (JSON) and ``failed``.
Results are written by the client process (the workers only compute), so workers need not see the
store's file system. See ``docs/sweeps.md``.
"""

from __future__ import annotations

import inspect
import itertools
import os
import time
import traceback
from dataclasses import dataclass, field
from numbers import Integral
from pathlib import Path

import numpy as np

from ..errors import InputTypeError, ValidationError

__all__ = ["sweep", "SweepResult", "point_seed", "point_rng", "grid_points", "local_cluster", "STATUS_MISSING",
           "STATUS_DONE", "STATUS_FAILED"]

from ._cluster import _make_client, close_quietly, local_cluster  # noqa: F401 - local_cluster is public here
from ._sweep_store import (  # noqa: F401 - status codes, streams and grids are public here
    _POINT_DIM,
    STATUS_DONE,
    STATUS_FAILED,
    STATUS_MISSING,
    _consolidate,
    _create_store,
    _grid_spec,
    _jsonable,
    _observables,
    _same_coords,
    _write_unit,
    _check_grid,
    grid_points,
    point_rng,
    point_seed,
)


# ----------------------------------------------------------------------------------------------
# the task a worker runs

def _run_unit(point_fn, params, seed_coords, seed, batch_dims, blas_threads):
    """Run ``point_fn`` on one unit (a point or a batch); never raises for the function's errors.

    Returns ``{"ok": True, "vars": {name: (dims, ndarray)}, "coords": {dim: ndarray}}`` or
    ``{"ok": False, "error": "Type: message", "traceback": str}``.
    """
    import xarray as xr

    try:
        try:
            from threadpoolctl import threadpool_limits

            limit = threadpool_limits(limits=blas_threads) if blas_threads else None
        except ImportError:  # pragma: no cover - threadpoolctl is a dependency
            limit = None
        try:
            ds = point_fn(dict(params), point_rng(seed_coords, seed))
        finally:
            if limit is not None:
                limit.restore_original_limits()
        if isinstance(ds, xr.DataArray):
            ds = ds.to_dataset(name=ds.name or "value")
        if not isinstance(ds, xr.Dataset):
            raise InputTypeError(
                f"point_fn must return an xarray.Dataset, got {type(ds).__name__}."
            )
        out = {}
        for name, var in ds.data_vars.items():
            arr = np.asarray(var.values)
            if arr.dtype.kind not in "biuf":
                raise InputTypeError(
                    f"observable {name!r} has dtype {arr.dtype}; a sweep stores numbers or booleans."
                )
            for b in batch_dims:
                if b not in var.dims or var.sizes[b] != len(params[b]):
                    raise ValidationError(
                        f"observable {name!r} has dims {dict(var.sizes)}; with batch_dims it must "
                        f"have the dimension {b!r} of length {len(params[b])}."
                    )
            # batched dims first, in batch_dims order, then the point's own dims
            dims = tuple(batch_dims) + tuple(d for d in var.dims if d not in batch_dims)
            out[str(name)] = (dims, np.array(var.transpose(*dims).values, order="C"))
        coords = {
            str(d): np.asarray(ds[d].values) for d in ds.dims if d in ds.coords and d not in batch_dims
        }
        return {"ok": True, "vars": out, "coords": coords}
    except Exception as exc:  # noqa: BLE001 - recorded in the store, the sweep goes on
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}


# ----------------------------------------------------------------------------------------------
# the store

@dataclass
class SweepResult:
    """Summary of a :func:`sweep` call.

    Attributes
    ----------
    store : str
        The Zarr store's path.
    n_points : int
        Grid points in the store.
    computed : int
        Points computed by this call (successful or failed).
    skipped : int
        Points already done in the store (not recomputed).
    failed : list of dict
        Every failed point of the store: ``{"coords": {...}, "error": "Type: message"}``.
    wall_s : float
        Seconds this call took, cluster start included.
    """

    store: str
    n_points: int
    computed: int
    skipped: int
    failed: list = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def complete(self) -> bool:
        """Whether every point of the grid is done (none missing, none failed)."""
        return not self.failed and self.computed + self.skipped == self.n_points

    def open(self):
        """The assembled results: ``xarray.open_zarr(self.store)``."""
        import xarray as xr

        return xr.open_zarr(self.store)

    def __str__(self) -> str:
        lines = [f"sweep {self.store}: {self.n_points} points, {self.computed} computed, "
                 f"{self.skipped} already done, {len(self.failed)} failed ({self.wall_s:.1f} s)"]
        for f in self.failed:
            lines.append(f"  failed {f['coords']}: {f['error']}")
        return "\n".join(lines)


# ----------------------------------------------------------------------------------------------

def sweep(point_fn, grid, store="out.zarr", client=None, *, seed: int = 0, batch_dims=(),
          workers: int | None = None, progress: bool = False, attrs: dict | None = None,
          overwrite: bool = False, blas_threads: int | None = 1) -> SweepResult:
    """Run ``point_fn`` at every point of ``grid`` on Dask; write the results into a Zarr store.

    Parameters
    ----------
    point_fn : callable
        ``point_fn(params, rng) -> xarray.Dataset``: ``params`` is the dict of the point's
        parameters (with ``batch_dims``, the batched ones are 1-D arrays), ``rng`` the point's
        ``numpy.random.Generator`` (see :func:`point_seed`). Its data variables (numbers or
        booleans, any dimensions of its own, e.g. ``time``) are the observables; every point
        must return the same variables with the same shapes. It must be picklable (functions
        defined in a module are; cloudpickle also ships lambdas and closures).
    grid : dict or list of dict
        ``{name: values}``: the Cartesian product, one store dimension per name in this order;
        or an explicit list of points ``[{name: value, ...}, ...]``: one dimension ``point``
        with one coordinate per name. Values are numbers, booleans or strings.
    store : str or path
        The Zarr store (a directory). An existing store of the same sweep (same grid, seed and
        ``batch_dims``) is resumed: only points not done are computed.
    client : None, distributed.Client or str
        None: an embedded ``LocalCluster`` with ``workers`` single-threaded worker processes
        (default: one per core), closed at the end. A ``Client``: used as is (not closed).
        A string: the address of a running scheduler (``"tcp://host:8786"``).
    seed : int
        The sweep seed (with the coordinates, the only source of every point's randomness).
    batch_dims : sequence of str
        Grid parameters whose values go to one call together (``grid`` must be a dict).
    workers : int, optional
        Worker processes of the embedded cluster (ignored with ``client``).
    progress : bool
        Show a tqdm progress bar of the finished tasks.
    attrs : dict, optional
        Attributes stored on the Dataset (JSON-able) when the store is created.
    overwrite : bool
        Start afresh even if ``store`` holds another sweep (otherwise that is an error).
    blas_threads : int or None
        BLAS/OpenMP threads a task may use (threadpoolctl); None leaves them alone.

    Returns
    -------
    SweepResult
        Counts, failed points (coordinates and message) and ``.open()``. Dimensions of the
        store: the grid's (or ``point``) then each observable's own.

    References
    ----------
    Geshkovski, Letrouit, Polyanskiy, Rigollet, "A mathematical perspective on Transformers",
    section 6.3 and Problems 1-2: the phase diagrams and open questions these sweeps serve.
    """
    import xarray as xr
    import zarr

    start = time.perf_counter()
    if not callable(point_fn):
        raise InputTypeError(f"point_fn must be callable, got {type(point_fn).__name__}.")
    if isinstance(seed, bool) or not isinstance(seed, Integral) or seed < 0:
        raise ValidationError(f"seed must be a non-negative integer, got {seed!r}.")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, Integral)
                                or workers < 1):
        raise ValidationError(f"workers must be a positive integer, got {workers!r}.")
    if blas_threads is not None and (not isinstance(blas_threads, Integral) or blas_threads < 1):
        raise ValidationError(f"blas_threads must be a positive integer or None, got {blas_threads!r}.")
    if isinstance(store, (str, os.PathLike)):
        store = str(store)
    else:
        raise InputTypeError(f"store must be a path (str or os.PathLike), got {type(store).__name__}.")
    kind, dims, values = _check_grid(grid)
    if isinstance(batch_dims, str):
        batch_dims = (batch_dims,)
    batch_dims = tuple(batch_dims)
    if batch_dims and kind == "list":
        raise ValidationError("batch_dims needs a Cartesian grid (a dict), got an explicit list of points.")
    for b in batch_dims:
        if b not in dims:
            raise ValidationError(f"batch_dims entry {b!r} is not a grid parameter; grid has {dims}.")
    try:
        sig = inspect.signature(point_fn).parameters.values()
        positional = sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in sig)
        if positional < 2 and not any(p.kind == p.VAR_POSITIONAL for p in sig):
            raise InputTypeError(
                "point_fn must accept two positional arguments (params, rng), got the signature "
                f"{inspect.signature(point_fn)}."
            )
    except (TypeError, ValueError) as exc:  # builtins and some callables have no signature
        if isinstance(exc, InputTypeError):
            raise

    spec = _grid_spec(kind, dims, values, batch_dims, seed)
    path = Path(store)
    status = None
    failed_old = []
    if path.exists() and not overwrite:
        try:
            old = xr.open_zarr(store)
        except Exception as exc:  # noqa: BLE001
            raise ValidationError(
                f"store {store!r} exists but is not a sweep's Zarr store ({exc}); choose another "
                "path or pass overwrite=True."
            ) from None
        if old.attrs.get("sweep_grid") != spec:
            raise ValidationError(
                f"store {store!r} holds a different sweep (grid, seed or batch_dims differ); "
                "choose another path or pass overwrite=True."
            )
        status = np.asarray(zarr.open_group(store, mode="r")["status"][...])
        failed_old = list(old.attrs.get("failed", []))

    # units of work: the Cartesian product of the non-batched parameters (or the listed points)
    if kind == "list":
        unit_index = [((i,), dict(zip(dims, vals)), dict(zip(dims, vals)))
                      for i, vals in enumerate(zip(*values))]
    else:
        free = [i for i, d in enumerate(dims) if d not in batch_dims]
        unit_index = []
        for combo in itertools.product(*[range(len(values[i])) for i in free]):
            idx = [slice(None)] * len(dims)
            params = {}
            for i, j in zip(free, combo):
                idx[i] = j
                params[dims[i]] = values[i][j]
            seed_coords = dict(params)
            for b in batch_dims:
                params[b] = np.asarray(values[dims.index(b)])
            unit_index.append((tuple(idx), params, seed_coords))
    n_points = int(np.prod([len(v) for v in values])) if kind == "product" else len(values[0])

    def unit_done(idx):
        return status is not None and bool(np.all(status[idx] == STATUS_DONE))

    def unit_size(idx):
        return int(np.prod([len(values[dims.index(d)]) for d in batch_dims])) if batch_dims else 1

    todo = [u for u in unit_index if not unit_done(u[0])]
    skipped = n_points - sum(unit_size(u[0]) for u in todo)
    failed_keep = [f for f in failed_old
                   if not any(_same_coords(f["coords"], u[2]) for u in todo)]
    failed_new = []
    computed = 0
    if todo:
        from distributed import as_completed

        dclient, cluster = _make_client(client, workers)
        group = zarr.open_group(store, mode="r+") if status is not None else None
        has_schema = group is not None and bool(_observables(group))
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(todo), desc="sweep", unit="task")
        try:
            futures = {}
            for u in todo:
                fut = dclient.submit(_run_unit, point_fn, u[1], u[2], seed, batch_dims, blas_threads,
                                     pure=False)
                futures[fut] = u
            for fut in as_completed(futures):
                idx, params, seed_coords = futures.pop(fut)
                try:
                    res = fut.result()
                except Exception as exc:  # noqa: BLE001 - e.g. KilledWorker after too many deaths
                    res = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
                fut.release()
                if res["ok"] and not has_schema:
                    # the first result fixes the observables' names, shapes and dtypes
                    _create_store(store, kind, dims, values, batch_dims, seed, res, attrs or {})
                    group = zarr.open_group(store, mode="r+")
                    has_schema = True
                if res["ok"]:
                    err = _write_unit(group, idx, res)
                    if err is not None:
                        res = {"ok": False, "error": err}
                if not res["ok"]:
                    failed_new.append({"coords": seed_coords, "error": res["error"]})
                    if group is not None:
                        group["status"][idx] = STATUS_FAILED
                computed += unit_size(idx)
                if bar is not None:
                    bar.update()
        finally:
            if bar is not None:
                bar.close()
            if cluster is not None:
                close_quietly(dclient, cluster)
            if group is None and failed_new:
                # every unit failed: a store of the status and the failures only
                _create_store(store, kind, dims, values, batch_dims, seed, {"vars": {}, "coords": {}},
                              attrs or {})
                group = zarr.open_group(store, mode="r+")
                for f in failed_new:
                    idx = next(u[0] for u in unit_index if u[2] == f["coords"])
                    group["status"][idx] = STATUS_FAILED
            if group is not None:
                group.attrs["failed"] = _jsonable(failed_keep + failed_new)
                _consolidate(store)
    return SweepResult(store=store, n_points=n_points, computed=computed, skipped=skipped,
                       failed=_jsonable(failed_keep + failed_new), wall_s=time.perf_counter() - start)
