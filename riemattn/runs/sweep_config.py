"""``riemattn sweep CONFIG.toml``: a grid over any ``riemattn simulate`` parameter, on Dask.

Example (see ``docs/sweeps.md``)::

    seed = 0                     # the sweep seed
    observables = ["clustered_fraction", "cluster_count", "misalignment", "time_to_threshold"]
    eps = 1e-3                   # clustered pair: <x_i, x_j> >= 1 - eps (cosine on an ellipsoid)
    cluster_tol = 1e-3           # cluster_count: tokens within this distance are linked
    threshold = 1e-3             # time_to_threshold: first saved time with misalignment <= threshold
    batch = ["beta"]             # optional: all beta of one point in one integration

    [grid]                       # Cartesian product, one store dimension per key, in this order
    beta = [0.0, 1.0, 2.0, 4.0]  # aliases: beta, heads, mask, P, U, normalization, n (= tokens)
    d = [2, 3]                   # or any simulate key, dotted: "attention.P_scale" = [0.5, 1.0]
    seed = [0, 1, 2]             # replicate label: the model's randomness derives from it

    [model]                      # the fixed part: any `riemattn simulate` table (docs/simulate.md)
    tokens = 16
    trajectories = 8
    [model.attention]
    P = "identity"
    normalization = "softmax"
    [model.integration]
    stepper = "layer"
    t1 = 10.0
    dt = 0.1
    saves = 21

Each point builds the simulate model with the grid's values, seeded by the point's own random
stream (:func:`riemattn.runs.sweep.point_seed`: the grid coordinates and the sweep seed only), and
stores its observables over ``(time, trajectory)`` (``time_to_threshold`` over ``trajectory``).
"""

from __future__ import annotations

import copy
import tomllib
from pathlib import Path

import numpy as np
import xarray as xr

from .._validation import check_choice
from ..errors import InputTypeError, ValidationError

__all__ = ["SimulatePoint", "load_sweep_config", "run_sweep_file", "plot_slice", "OBSERVABLES",
           "ALIASES"]

OBSERVABLES = ("misalignment", "cluster_count", "clustered_fraction", "time_to_threshold")
ALIASES = {
    "beta": "attention.beta", "heads": "attention.heads", "mask": "attention.mask",
    "P": "attention.P", "U": "attention.U", "normalization": "attention.normalization",
    "n": "tokens", "tokens": "tokens", "d": "d", "seed": "seed", "trajectories": "trajectories",
    "P_scale": "attention.P_scale", "U_scale": "attention.U_scale", "t1": "integration.t1",
    "stepper": "integration.stepper", "manifold": "manifold.kind",
}
_TOP = {"seed", "observables", "eps", "cluster_tol", "threshold", "batch", "grid", "model"}


def _path_of(key: str) -> str:
    from .simulate import DEFAULTS

    path = ALIASES.get(key, key)
    node = DEFAULTS
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            raise ValidationError(
                f"grid key {key!r} is not a simulate parameter; use one of {sorted(ALIASES)} or a "
                "dotted simulate key such as 'attention.P_scale' (see docs/simulate.md)."
            )
        node = node[part]
    return path


def _dim_of(key: str) -> str:
    return key.rsplit(".", 1)[-1]


def _set(cfg: dict, path: str, value):
    *parents, last = path.split(".")
    node = cfg
    for p in parents:
        node = node[p]
    node[last] = value


def _pair_cosines(y, W):
    """<x_i, x_j> of unit tokens (cosines of the angles in the Euclidean metric), shape (..., l, l)."""
    if W is not None:
        y = y / np.linalg.norm(y, axis=-1, keepdims=True)
    return y @ np.swapaxes(y, -1, -2)


class SimulatePoint:
    """The point function of ``riemattn sweep``: a simulate model at one grid point.

    Parameters
    ----------
    model : dict
        The merged simulate configuration (``riemattn.runs.simulate.DEFAULTS`` filled in).
    paths : dict
        Store dimension -> simulate key path (``"beta" -> "attention.beta"``).
    observables : sequence of str
        Names in :data:`OBSERVABLES`.
    eps, cluster_tol, threshold : float

    Calling it with ``(params, rng)`` returns an ``xarray.Dataset``: each observable over
    ``(time, trajectory)`` (``time_to_threshold`` over ``trajectory``), with a leading ``beta``
    dimension when ``params["beta"]`` is an array (a batch).
    """

    def __init__(self, model, paths, observables, eps=1e-3, cluster_tol=1e-3, threshold=1e-3):
        self.model, self.paths = model, dict(paths)
        self.observables = tuple(observables)
        self.eps, self.cluster_tol, self.threshold = float(eps), float(cluster_tol), float(threshold)

    def __call__(self, params, rng):
        from ..analysis.diagnostics import cluster_count, misalignment
        from ..solvers.core.integrate import integrate
        from .simulate import build_model
        from ..solvers.explicit.steppers import get_stepper

        cfg = copy.deepcopy(self.model)
        beta = None
        for dim, value in params.items():
            path = self.paths[dim]
            if path == "seed":
                continue  # a replicate label; the randomness is the point's stream below
            if np.ndim(value) > 0:
                if path != "attention.beta":
                    raise ValidationError(f"only beta can be batched, got an array for {dim!r}.")
                beta = np.asarray(value, dtype=float)
                continue
            _set(cfg, path, value.item() if isinstance(value, np.generic) else value)
        cfg["seed"] = int(rng.integers(2**63 - 1))
        if beta is None:
            field, y0, t_save = build_model(cfg)
        else:
            field, y0, t_save = build_model(cfg, beta=beta[:, None])
            y0 = np.broadcast_to(y0, beta.shape + y0.shape)
        integ = cfg["integration"]
        stepper = get_stepper(integ["stepper"])
        kwargs = (dict(rtol=float(integ["rtol"]), atol=float(integ["atol"])) if stepper.adaptive
                  else dict(dt=float(integ["dt"])))
        W, eps, tol = field.W, self.eps, self.cluster_tol
        want = set(self.observables)

        def observe(t, y):
            out = {}
            if want & {"misalignment", "time_to_threshold"}:
                out["misalignment"] = misalignment(y)
            if "cluster_count" in want:
                out["cluster_count"] = cluster_count(y, tol)
            if "clustered_fraction" in want:
                n = y.shape[-2]
                iu = np.triu_indices(n, k=1)
                G = _pair_cosines(y, W)
                out["clustered_fraction"] = np.mean(G[..., iu[0], iu[1]] >= 1.0 - eps, axis=-1)
            return out

        sol = integrate(field, y0, (0.0, t_save[-1]), stepper=stepper, saveat=t_save,
                        save_fn=observe, **kwargs)
        lead = ("beta",) if beta is not None else ()
        data = {}
        for name in self.observables:
            if name == "time_to_threshold":
                E = sol.observables["misalignment"]  # (time, ..., trajectory)
                hit = E <= self.threshold
                first = np.where(hit.any(axis=0), t_save[np.argmax(hit, axis=0)], np.nan)
                data[name] = (lead + ("trajectory",), first)
            else:
                arr = np.moveaxis(np.asarray(sol.observables[name]), 0, -2)  # (..., time, traj)
                data[name] = (lead + ("time", "trajectory"), arr)
        return xr.Dataset(data, coords={"time": t_save})


def load_sweep_config(path) -> dict:
    """Read and check a sweep TOML file; return ``{grid, point_fn, seed, batch_dims, attrs}``."""
    from ._simulate_config import DEFAULTS, _merge

    path = Path(path)
    if not path.is_file():
        raise ValidationError(f"config file {str(path)!r} does not exist.")
    try:
        given = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ValidationError(f"config file {str(path)!r} is not valid TOML: {exc}") from None
    unknown = set(given) - _TOP
    if unknown:
        raise ValidationError(f"unknown key(s) {sorted(unknown)} in the sweep configuration; known: {sorted(_TOP)}.")
    if not isinstance(given.get("grid"), dict) or not given["grid"]:
        raise ValidationError("the sweep configuration needs a non-empty [grid] table (parameter = [values]).")
    model = _merge(DEFAULTS, given.get("model", {}), "model.")
    grid, paths = {}, {}
    for key, values in given["grid"].items():
        if isinstance(values, dict):  # a dotted key written as a TOML sub-table
            raise ValidationError(f"grid key {key!r}: write dotted keys quoted, e.g. \"attention.P_scale\" = [...].")
        p = _path_of(key)
        dim = _dim_of(key)
        if dim in paths:
            raise ValidationError(f"grid keys {key!r} and another both name the dimension {dim!r}.")
        grid[dim], paths[dim] = values if isinstance(values, list) else [values], p
    observables = given.get("observables", ["misalignment", "clustered_fraction"])
    if isinstance(observables, str) or not isinstance(observables, list) or not observables:
        raise ValidationError(f"observables must be a non-empty list of names from {list(OBSERVABLES)}, got {observables!r}.")
    for o in observables:
        check_choice(o, "observables", OBSERVABLES)
    batch = given.get("batch", [])
    if isinstance(batch, str):
        batch = [batch]
    for b in batch:
        if b not in paths or paths[b] != "attention.beta":
            raise ValidationError(f"batch may only name the grid's beta dimension, got {b!r}.")
    seed = given.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValidationError(f"seed must be a non-negative integer, got {seed!r}.")
    params = {}
    for key in ("eps", "cluster_tol", "threshold"):
        value = given.get(key, 1e-3)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
            raise ValidationError(f"{key} must be a non-negative number, got {value!r}.")
        params[key] = float(value)
    point_fn = SimulatePoint(model, paths, observables, **params)
    attrs = {"model": _json(model), "observables": list(observables), **params}
    return {"grid": grid, "point_fn": point_fn, "seed": seed, "batch_dims": tuple(batch), "attrs": attrs}


def _json(obj) -> str:
    import json

    return json.dumps(obj, sort_keys=True, default=lambda o: np.asarray(o).tolist())


def run_sweep_file(config, out, scheduler=None, workers=None, progress=True, overwrite=False):
    """Run a sweep TOML file into the Zarr store ``out``; return the :class:`~riemattn.runs.sweep.SweepResult`."""
    from .sweep import sweep

    spec = load_sweep_config(config)
    return sweep(spec["point_fn"], spec["grid"], out, client=scheduler, seed=spec["seed"],
                 batch_dims=spec["batch_dims"], workers=workers, progress=progress,
                 attrs=spec["attrs"], overwrite=overwrite)


def plot_slice(store, var, x, y, sel=None, ax=None):
    """A phase-diagram style 2-D slice of a sweep store: ``var`` over (x, y), other dims averaged.

    Parameters
    ----------
    store : str or path
        A Zarr store written by :func:`riemattn.sweep`.
    var : str
        An observable of the store.
    x, y : str
        Two of its dimensions (e.g. ``"time"`` and ``"beta"``).
    sel : dict, optional
        Dimension -> value fixing other dimensions (nearest value for numbers); every remaining
        dimension is averaged over (points that are not done are NaN and skipped by the mean).

    Returns
    -------
    matplotlib.figure.Figure
    """
    import matplotlib.pyplot as plt

    ds = xr.open_zarr(store)
    if var not in ds.data_vars or var == "status":
        raise ValidationError(f"var must be an observable of the store, one of {sorted(v for v in ds.data_vars if v != 'status')}; got {var!r}.")
    da = ds[var]
    for dim in (x, y):
        if dim not in da.dims:
            raise ValidationError(f"{dim!r} is not a dimension of {var!r}; its dimensions are {list(da.dims)}.")
    if x == y:
        raise ValidationError(f"x and y must differ, got {x!r} twice.")
    for dim, value in (sel or {}).items():
        if dim not in da.dims:
            raise ValidationError(f"sel: {dim!r} is not a dimension of {var!r} ({list(da.dims)}).")
        coord = ds[dim].values
        if coord.dtype.kind in "iuf":
            da = da.sel({dim: float(value)}, method="nearest")
        else:
            da = da.sel({dim: str(value)})
    rest = [d for d in da.dims if d not in (x, y)]
    da = da.astype(float).mean(dim=rest, skipna=True).transpose(y, x).load()
    if ax is None:
        fig, ax = plt.subplots(figsize=(5.5, 4), layout="constrained")
    else:
        fig = ax.figure
    mesh = ax.pcolormesh(da[x].values, da[y].values, da.values, shading="nearest", cmap="RdBu_r")
    fig.colorbar(mesh, ax=ax, label=var + (f" (mean over {', '.join(rest)})" if rest else ""))
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    if sel:
        ax.set_title(", ".join(f"{k} = {v}" for k, v in sel.items()), fontsize=9)
    return fig


def parse_sel(items) -> dict:
    """``["d=8", "mask=causal"]`` -> ``{"d": 8.0, "mask": "causal"}`` (numbers where they parse)."""
    out = {}
    for item in items or []:
        if "=" not in item:
            raise InputTypeError(f"--sel takes DIM=VALUE, got {item!r}.")
        k, v = item.split("=", 1)
        try:
            out[k] = float(v)
        except ValueError:
            out[k] = v
    return out
