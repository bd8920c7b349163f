"""``riemattn simulate CONFIG.toml``: any attention model from a TOML file.

Example (every key is optional; these are the defaults)::

    seed = 0
    trajectories = 4        # independent initial conditions, integrated together as one batch
    tokens = 10             # l
    d = 3                   # tokens live in R^d

    [manifold]
    kind = "sphere"         # "sphere" | "ellipsoid"
    W = "random-spd"        # ellipsoid only: a (d, d) SPD matrix or "random-spd"
    W_cond = 4.0            # condition number of the random SPD W

    [attention]
    heads = 1
    P = "uniform"           # a matrix, a list of h matrices, or a recipe (below)
    P_scale = 0.5
    modulation = "none"     # "none" | "sinusoid": P_eta(t) = D_eta(t) P_eta, D diagonal |2 sin(w t + phi)|
    U = "identity"          # a matrix, a list of h matrices, or a recipe
    U_scale = 0.5
    mask = "full"           # "full" | "causal"
    normalization = "paper" # "paper" | "softmax" | "mean"
    beta = 1.0

    [initial]
    distribution = "cube"   # "cube": uniform in [-0.5, 0.5]^d, projected (the papers'); "uniform": on the manifold

    [integration]
    stepper = "rk4"
    t1 = 10.0
    dt = 0.01               # fixed-step steppers
    rtol = 1e-6             # adaptive steppers
    atol = 1e-9
    saves = 101             # number of saved times in [0, t1]

Matrix recipes: "uniform" (entries uniform in [-scale, scale], the papers' choice), "gaussian"
(entries N(0, scale^2)), "symmetric" (A + A^T, A uniform), "spd" (A A^T + scale I), "identity"
(scale * I). Outputs in ``--out``: ``data.nc``, ``misalignment.png``, ``trajectories.png`` (d = 3 only) and
``summary.json``.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import numpy as np

from ._validation import check_choice
from .attention import AttentionField
from .diagnostics import misalignment
from .errors import InputTypeError, ValidationError
from .integrate import integrate
from .steppers import STEPPERS, get_stepper

__all__ = ["simulate_file", "simulate_config", "build_model", "DEFAULTS", "random_matrix"]

DEFAULTS = {
    "seed": 0,
    "trajectories": 4,
    "tokens": 10,
    "d": 3,
    "manifold": {"kind": "sphere", "W": "random-spd", "W_cond": 4.0},
    "attention": {
        "heads": 1, "P": "uniform", "P_scale": 0.5, "modulation": "none", "U": "identity",
        "U_scale": 0.5, "mask": "full", "normalization": "paper", "beta": 1.0,
    },
    "initial": {"distribution": "cube"},
    "integration": {"stepper": "rk4", "t1": 10.0, "dt": 0.01, "rtol": 1e-6, "atol": 1e-9, "saves": 101},
}

RECIPES = ("uniform", "gaussian", "symmetric", "spd", "identity")


def _merge(defaults: dict, given: dict, where: str) -> dict:
    out = {}
    for key, value in given.items():
        if key not in defaults:
            raise ValidationError(f"unknown key {where}{key!r} in the configuration; known: {sorted(defaults)}.")
    for key, default in defaults.items():
        value = given.get(key, default)
        if isinstance(default, dict):
            if not isinstance(value, dict):
                raise ValidationError(f"{where}{key} must be a table ([{key}]), got {value!r}.")
            value = _merge(default, value, f"{where}{key}.")
        out[key] = value
    return out


def random_matrix(recipe, d: int, scale: float, rng: np.random.Generator, name: str) -> np.ndarray:
    """A (d, d) matrix from a recipe name (see module docstring) or an explicit matrix."""
    if not isinstance(recipe, str):
        M = np.asarray(recipe, dtype=float)
        if M.shape != (d, d):
            raise ValidationError(f"{name} must be a ({d}, {d}) matrix, got shape {M.shape}.")
        return M
    check_choice(recipe, name, RECIPES)
    if recipe == "identity":
        return scale * np.eye(d)
    if recipe == "gaussian":
        return rng.normal(0.0, scale, (d, d))
    A = rng.uniform(-scale, scale, (d, d))
    if recipe == "symmetric":
        return A + A.T
    if recipe == "spd":
        return A @ A.T + scale * np.eye(d)
    return A


def _heads(spec, h, d, scale, rng, name):
    if isinstance(spec, list) and spec and isinstance(spec[0], list) and spec and np.ndim(spec) == 3:
        M = np.asarray(spec, dtype=float)
        if M.shape != (h, d, d):
            raise ValidationError(f"{name} must have shape ({h}, {d}, {d}) for {h} heads, got {M.shape}.")
        return M
    return np.stack([random_matrix(spec, d, scale, rng, name) for _ in range(h)])


def _random_spd(d, cond, rng):
    Q, _ = np.linalg.qr(rng.normal(size=(d, d)))
    lam = np.geomspace(1.0, cond, d)
    return (Q * lam) @ Q.T


def build_model(cfg: dict, beta=None):
    """(field, y0, t_save) from a merged configuration.

    ``beta`` (optional) replaces ``attention.beta``: a float, or an array broadcasting over the
    leading axes of the batch (used by ``riemattn sweep`` to carry several beta in one integration).
    """
    rng = np.random.default_rng(cfg["seed"])
    d, ell, n_traj = int(cfg["d"]), int(cfg["tokens"]), int(cfg["trajectories"])
    for key, value in (("d", d), ("tokens", ell), ("trajectories", n_traj)):
        if value < 1 or (key == "d" and value < 2):
            raise ValidationError(f"{key} must be >= {2 if key == 'd' else 1}, got {value}.")
    man = cfg["manifold"]
    check_choice(man["kind"], "manifold.kind", ("sphere", "ellipsoid"))
    W = None
    if man["kind"] == "ellipsoid":
        W = _random_spd(d, float(man["W_cond"]), rng) if man["W"] == "random-spd" else man["W"]
    att = cfg["attention"]
    h = int(att["heads"])
    if h < 1:
        raise ValidationError(f"attention.heads must be >= 1, got {h}.")
    P0 = _heads(att["P"], h, d, float(att["P_scale"]), rng, "attention.P")
    U = None if att["U"] == "identity" and float(att["U_scale"]) == 1.0 else _heads(
        att["U"], h, d, float(att["U_scale"]), rng, "attention.U")
    if att["U"] == "identity":
        U = None
    check_choice(att["modulation"], "attention.modulation", ("none", "sinusoid"))
    if att["modulation"] == "sinusoid":
        omega = rng.uniform(0.0, 1.0, (h, d))
        phi = rng.uniform(0.0, 2 * np.pi, (h, d))

        def P(t):
            return np.abs(2.0 * np.sin(omega * t + phi))[:, :, None] * P0

    else:
        P = P0
    field = AttentionField(P, U, W=W, mask=att["mask"], normalization=att["normalization"],
                           beta=float(att["beta"]) if beta is None else beta)
    dist = check_choice(cfg["initial"]["distribution"], "initial.distribution", ("cube", "uniform"))
    if dist == "cube":
        y0 = rng.uniform(-0.5, 0.5, (n_traj, ell, d))
    else:
        y0 = rng.normal(size=(n_traj, ell, d)) @ field.manifold.inv_sqrt_W
    y0 = field.manifold.projection(y0)
    integ = cfg["integration"]
    t1 = float(integ["t1"])
    if not t1 > 0:
        raise ValidationError(f"integration.t1 must be > 0, got {t1}.")
    t_save = np.linspace(0.0, t1, int(integ["saves"]))
    return field, y0, t_save


def simulate_config(cfg: dict, out="simulation", progress=False) -> dict:
    """Run a merged configuration and write data.nc, plots and summary.json into ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    field, y0, t_save = build_model(cfg)
    integ = cfg["integration"]
    if integ["stepper"] not in STEPPERS:
        raise ValidationError(f"integration.stepper must be one of {sorted(STEPPERS)}, got {integ['stepper']!r}.")
    stepper = get_stepper(integ["stepper"])
    kwargs = dict(rtol=float(integ["rtol"]), atol=float(integ["atol"])) if stepper.adaptive else dict(dt=float(integ["dt"]))
    sol = integrate(field, y0, (0.0, t_save[-1]), stepper=stepper, saveat=t_save, progress=progress, **kwargs)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    E = misalignment(sol.y)  # (time, trajectory)
    ds = sol.to_xarray()
    ds["misalignment"] = (("time", "batch"), E)
    ds.attrs["config"] = json.dumps(cfg, sort_keys=True)
    ds.to_netcdf(out / "data.nc", engine="scipy")
    files = ["data.nc"]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.semilogy(sol.t, np.maximum(E, 1e-17), lw=0.8)
    ax.set_xlabel("t")
    ax.set_ylabel("misalignment E(t)")
    ax.set_title(f"{y0.shape[0]} trajectories, {field!r}"[:90], fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "misalignment.png", dpi=120)
    plt.close(fig)
    files.append("misalignment.png")
    if field.d == 3:
        from .experiments._plotting import plot_sphere_trajectories

        fig = plt.figure(figsize=(5, 5))
        ax = fig.add_subplot(projection="3d")
        inv = None if field.W is None else field.manifold.inv_sqrt_W
        plot_sphere_trajectories(ax, sol.y[:, 0], inv_sqrt_W=inv)
        fig.savefig(out / "trajectories.png", dpi=120)
        plt.close(fig)
        files.append("trajectories.png")
    summary = {
        "config": cfg,
        "success": bool(sol.success),
        "message": sol.message,
        "nfev": int(sol.nfev),
        "n_steps": int(sol.n_steps),
        "final_misalignment": [float(e) for e in E[-1]],
        "max_final_misalignment": float(np.max(E[-1])),
        "files": files + ["summary.json"],
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def simulate_file(path, out="simulation", progress=False) -> dict:
    """Read a TOML configuration (see the module docstring), run it, write the outputs."""
    path = Path(path)
    if not path.is_file():
        raise ValidationError(f"config file {str(path)!r} does not exist.")
    try:
        given = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ValidationError(f"config file {str(path)!r} is not valid TOML: {exc}") from None
    if not isinstance(given, dict):
        raise InputTypeError("the configuration must be a TOML table.")
    return simulate_config(_merge(DEFAULTS, given, ""), out=out, progress=progress)
