"""The grid, the per-point random streams and the Zarr store of :func:`riemattn.runs.sweep.sweep`.

``point_seed``, ``point_rng`` and ``grid_points`` are public as :mod:`riemattn.sweep`'s.

Layout (``xr.open_zarr(store)``): one array per observable with the grid's dimensions first (for
an explicit list of points: a ``point`` dimension with the parameters as coordinates) and the
observable's own dimensions after; ``status`` (grid shape; 0 missing, 1 done, 2 failed);
attributes ``sweep_grid`` (the grid, its batch dimensions and the seed, as JSON), ``sweep_seed``
and ``failed`` (message and coordinates of each failed point). Chunks: one grid point, or one
batch of points sharing an integration.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from numbers import Integral, Real

import numpy as np

from .._validation import check_int
from ..errors import InputTypeError, ValidationError

STATUS_MISSING, STATUS_DONE, STATUS_FAILED = 0, 1, 2
_POINT_DIM = "point"


def point_seed(coords: dict, seed: int = 0) -> np.random.SeedSequence:
    """The ``SeedSequence`` of a grid point: the sweep ``seed`` and a digest of ``coords``.

    Parameters
    ----------
    coords : dict
        Parameter name -> scalar value (number, bool or string) of one point (or of one batch,
        without its batched parameters).
    seed : int
        The sweep seed.

    Returns
    -------
    numpy.random.SeedSequence
        Entropy ``[seed, w_0, ..., w_7]`` with ``w`` the eight 32-bit words of
        SHA-256(JSON of the sorted items); floats are written with ``repr`` (exact round trip).
    """
    if not isinstance(coords, dict):
        raise InputTypeError(f"coords must be a dict of parameter name -> value, got {type(coords).__name__}.")
    seed = check_int(seed, "seed", 0)
    items = sorted((str(k), _plain(v)) for k, v in coords.items())
    digest = hashlib.sha256(json.dumps(items).encode()).digest()
    words = [int.from_bytes(digest[4 * i: 4 * i + 4], "little") for i in range(8)]
    return np.random.SeedSequence([int(seed)] + words)


def point_rng(coords: dict, seed: int = 0) -> np.random.Generator:
    """``numpy.random.default_rng(point_seed(coords, seed))``: the stream a point function gets."""
    return np.random.default_rng(point_seed(coords, seed))


def _check_grid(grid):
    """(kind, dims, values): kind "product" (dict of name -> values) or "list" (list of dicts)."""
    if isinstance(grid, dict):
        if not grid:
            raise ValidationError("grid must have at least one parameter, got an empty dict.")
        dims, values = [], []
        for name, vals in grid.items():
            if not isinstance(name, str) or not name:
                raise InputTypeError(f"grid parameter names must be non-empty strings, got {name!r}.")
            if isinstance(vals, (str, bytes)) or np.ndim(vals) == 0:
                vals = [vals]
            vals = [_plain(v) for v in np.asarray(vals, dtype=object).ravel()]
            if len(vals) == 0:
                raise ValidationError(f"grid[{name!r}] has no values; give at least one.")
            if len(set(map(repr, vals))) != len(vals):
                raise ValidationError(f"grid[{name!r}] has repeated values: {vals}.")
            dims.append(name)
            values.append(vals)
        return "product", dims, values
    if isinstance(grid, (list, tuple)):
        if not grid or not all(isinstance(p, dict) for p in grid):
            raise InputTypeError("grid must be a dict (name -> values) or a non-empty list of dicts.")
        keys = list(grid[0])
        for i, p in enumerate(grid):
            if list(p) != keys:
                raise ValidationError(
                    f"grid[{i}] has parameters {sorted(p)}; every point of an explicit grid must "
                    f"have the same ones as grid[0]: {sorted(keys)}."
                )
        return "list", keys, [[_plain(p[k]) for p in grid] for k in keys]
    raise InputTypeError(f"grid must be a dict or a list of dicts, got {type(grid).__name__}.")


def grid_points(grid) -> list[dict]:
    """Every point of ``grid`` as a dict, in store order (Cartesian product in the dict's order)."""
    kind, dims, values = _check_grid(grid)
    if kind == "list":
        return [dict(zip(dims, vals)) for vals in zip(*values)]
    return [dict(zip(dims, combo)) for combo in itertools.product(*values)]


def _plain(value):
    """A coordinate value as a plain JSON-able Python scalar (numpy scalars unwrapped)."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, Integral):
        return int(value)
    if isinstance(value, Real):
        return float(value)
    raise InputTypeError(
        f"grid values must be numbers, booleans or strings, got {type(value).__name__} ({value!r})."
    )


def _grid_spec(kind, dims, values, batch_dims, seed):
    return json.dumps({"kind": kind, "dims": dims, "values": values, "batch_dims": list(batch_dims),
                       "seed": int(seed)}, sort_keys=True)


def _coord_array(vals):
    arr = np.asarray(vals)
    if arr.dtype == object:
        arr = np.asarray([str(v) for v in vals])
    return arr


def _create_store(path, kind, dims, values, batch_dims, seed, first, attrs):
    """Write the store's metadata, coordinates and empty (fill) arrays, from a first result."""
    import dask.array as da
    import xarray as xr

    if kind == "list":
        grid_dims = (_POINT_DIM,)
        grid_shape = (len(values[0]),)
        coords = {_POINT_DIM: np.arange(grid_shape[0])}
        coords.update({d: (_POINT_DIM, _coord_array(v)) for d, v in zip(dims, values)})
    else:
        grid_dims = tuple(dims)
        grid_shape = tuple(len(v) for v in values)
        coords = {d: _coord_array(v) for d, v in zip(dims, values)}
    chunk_grid = tuple(len(values[dims.index(d)]) if d in batch_dims else 1 for d in grid_dims)
    data = {}
    for name, (vdims, arr) in first["vars"].items():
        own = [d for d in vdims if d not in batch_dims]
        clash = [d for d in own if d in grid_dims or d in dims]
        if clash:
            raise ValidationError(
                f"observable {name!r} has dimension(s) {clash} that are also grid parameters; "
                "rename them or list them in batch_dims."
            )
        own_shape = arr.shape[len(batch_dims):]
        shape = grid_shape + own_shape
        if arr.dtype.kind == "f":
            dtype, fill = arr.dtype, np.nan
        else:
            dtype, fill = arr.dtype, 0
        data[name] = (grid_dims + tuple(own),
                      da.full(shape, fill, dtype=dtype, chunks=chunk_grid + own_shape))
    for d, c in first["coords"].items():
        coords[d] = c
    data["status"] = (grid_dims, da.zeros(grid_shape, dtype="i1", chunks=chunk_grid))
    ds = xr.Dataset(data, coords=coords)
    ds.attrs.update(attrs)
    ds.attrs["sweep_grid"] = _grid_spec(kind, dims, values, batch_dims, seed)
    ds.attrs["sweep_seed"] = int(seed)
    ds.attrs["failed"] = []
    encoding = {name: {"_FillValue": np.nan} for name, (_, arr) in first["vars"].items()
                if arr.dtype.kind == "f"}
    ds.to_zarr(path, mode="w", compute=False, zarr_format=2, consolidated=True, encoding=encoding)


def _consolidate(path):
    import warnings

    import zarr

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        zarr.consolidate_metadata(path)


def _observables(group):
    """Names of the observable arrays of a store (neither status nor a coordinate)."""
    coords = set()
    for name in group.array_keys():
        coords.update(str(group[name].attrs.get("coordinates", "")).split())
    dims = set()
    for name in group.array_keys():
        dims.update(group[name].attrs.get("_ARRAY_DIMENSIONS", []))
    return [n for n in group.array_keys() if n != "status" and n not in coords and n not in dims]


def _same_coords(a: dict, b: dict) -> bool:
    return a == {k: _plain(v) for k, v in b.items()}


def _jsonable(value):
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return _jsonable(value.tolist())
    if isinstance(value, np.generic):
        return value.item()
    return value


def _write_unit(group, idx, res):
    """Write one unit's arrays at ``idx`` then mark it done; return an error message or None."""
    for name, (vdims, arr) in res["vars"].items():
        if name not in group:
            return f"ValidationError: observable {name!r} is not in the store (the first point had {sorted(group)})."
        target = group[name]
        sel_shape = tuple(
            (len(range(*s.indices(n))) if isinstance(s, slice) else None)
            for s, n in zip(idx, target.shape)
        )
        want = tuple(n for n in sel_shape if n is not None) + target.shape[len(idx):]
        if arr.shape != want or arr.dtype.kind != np.dtype(target.dtype).kind:
            return (f"ValidationError: observable {name!r} has shape {arr.shape} dtype {arr.dtype}; "
                    f"the store expects {want} {target.dtype} (every point must match the first).")
    for name, (vdims, arr) in res["vars"].items():
        group[name][idx] = arr
    group["status"][idx] = STATUS_DONE
    return None
