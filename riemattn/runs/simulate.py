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
    saves = 101             # number of saved times, evenly spaced in [0, t1], both ends included: >= 2

Matrix recipes: "uniform" (entries uniform in [-scale, scale], the papers' choice), "gaussian"
(entries N(0, scale^2)), "symmetric" (A + A^T, A uniform), "spd" (A A^T + scale I), "identity"
(scale * I; for U, "identity" is I itself and U_scale is not used). Outputs in ``--out``:
``data.nc``, ``misalignment.png``, ``trajectories.png`` (d = 3 only) and ``summary.json``.
``data.nc`` holds the trajectories ``y``, the misalignment, and the matrices actually drawn and
used: ``P`` (head, row, column; with ``modulation = "sinusoid"`` the P'_eta of
P_eta(t) = D_eta(t) P'_eta, whose ``omega`` and ``phi`` (head, row) are stored too), ``U``
(the identity when ``U = "identity"``) and ``W`` (the identity on the sphere); every variable has
``long_name`` and ``units`` (CF), and the dataset the package version and the command.

The configuration is checked before any work (:func:`validate_config`): unknown keys, TOML types
(an integer key takes an integer: ``tokens = 2.7`` or ``true`` is an error, not truncated; a number
key takes an integer or a float), ranges (``seed >= 0``, ``trajectories, tokens, heads >= 1``,
``d >= 2``, ``W_cond >= 1``, ``P_scale, U_scale >= 0``, ``t1, dt, rtol, atol > 0``, ``saves >= 2``;
every number finite), matrix shapes, an explicit ``W`` symmetric positive definite. The first
problem raises :class:`~riemattn.errors.InputTypeError` (type) or
:class:`~riemattn.errors.ValidationError` (value) naming the key as written (``integration.saves``).
Keys that do not apply are accepted and not used: ``W`` and ``W_cond`` on the sphere, ``dt`` with
an adaptive stepper, ``rtol``/``atol`` with a fixed-step one, ``P_scale``/``U_scale`` with an explicit
matrix.
"""

from __future__ import annotations

import json

import numpy as np

from ._cf import annotate
from ._paths import check_output_dir
from ._simulate_config import DEFAULTS, RECIPES, load_config, validate_config
from .._validation import as_float_array, check_choice, check_finite, check_memory, check_real, check_size
from ..dynamics.attention import AttentionField
from ..analysis.diagnostics import misalignment
from ..errors import InputTypeError, ValidationError
from .plotting import plot_sphere_trajectories, styled
from ..solvers.core.integrate import integrate
from ..solvers.explicit.steppers import get_stepper

__all__ = [
    "DEFAULTS", "build_model", "load_config", "random_matrix", "simulate_config", "simulate_file", "validate_config",
]

#: long_name and units of the variables of simulate's data.nc (see riemattn.runs._cf)
DATA_ATTRS = {
    "misalignment": ("misalignment E(y) of ICML eq. (9), per trajectory", "1"),
    "P": ("head matrices P_eta as used (with modulation: P'_eta of P_eta(t) = D_eta(t) P'_eta)", "1"),
    "U": ("value matrices U_eta as used", "1"),
    "W": ("matrix W of the ellipsoid {x : x^T W x = 1} as used (identity: the sphere)", "1"),
    "omega": ("angular frequency of (D_eta)_jj(t) = |2 sin(omega t + phi)|, per unit of model time",
              "rad"),
    "phi": ("phase of (D_eta)_jj(t) = |2 sin(omega t + phi)|", "rad"),
}


def random_matrix(recipe, d: int, scale: float, rng: np.random.Generator, name: str) -> np.ndarray:
    """A (d, d) matrix from a recipe name (see module docstring) or an explicit matrix.

    ``d``: 1 <= d <= 2**31 - 1 with (d, d) fitting in memory; ``scale`` a finite real; ``rng`` a
    NumPy Generator; ``name`` (a str) labels the matrix in messages. ValidationError /
    InputTypeError otherwise, naming the argument.
    """
    if not isinstance(name, str):
        raise InputTypeError(f"name must be a str (the matrix's label in messages), got {type(name).__name__}.")
    d = check_size(d, "d", 1)
    check_memory((d, d), "d")
    scale = check_real(scale, "scale")
    if not isinstance(rng, np.random.Generator):
        raise InputTypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}.")
    if not isinstance(recipe, str):
        M = check_finite(as_float_array(recipe, f"{name} (recipe)"), f"{name} (recipe)")
        if M.shape != (d, d):
            raise ValidationError(f"{name} (recipe) must be a ({d}, {d}) matrix, got shape {M.shape}.")
        return M
    check_choice(recipe, f"{name} (recipe)", RECIPES)
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
    if isinstance(spec, list) and np.ndim(spec) == 3:  # a list of h matrices (checked by validate_config)
        return np.asarray(spec, dtype=float)
    return np.stack([random_matrix(spec, d, scale, rng, name) for _ in range(h)])


def _random_spd(d, cond, rng):
    Q, _ = np.linalg.qr(rng.normal(size=(d, d)))
    lam = np.geomspace(1.0, cond, d)
    return (Q * lam) @ Q.T


def build_model(cfg: dict, beta=None):
    """(field, y0, t_save) from a configuration (checked with :func:`validate_config` first).

    ``beta`` (optional) replaces ``attention.beta``: a float, or an array broadcasting over the
    leading axes of the batch (used by ``riemattn sweep`` to carry several beta in one integration).
    """
    field, y0, t_save, _ = _build(cfg, beta)
    return field, y0, t_save


def _build(cfg: dict, beta=None):
    """:func:`build_model`, and the matrices drawn: {"P", "U", "W"[, "omega", "phi"]} (arrays)."""
    cfg = validate_config(cfg)
    rng = np.random.default_rng(cfg["seed"])
    d, ell, n_traj = cfg["d"], cfg["tokens"], cfg["trajectories"]
    man = cfg["manifold"]
    W = None
    if man["kind"] == "ellipsoid":
        W = _random_spd(d, float(man["W_cond"]), rng) if man["W"] == "random-spd" else np.asarray(man["W"], float)
    att = cfg["attention"]
    h = att["heads"]
    P0 = _heads(att["P"], h, d, float(att["P_scale"]), rng, "attention.P")
    # U = "identity" is the identity itself (U_scale applies to U's other recipes)
    U = None if att["U"] == "identity" else _heads(att["U"], h, d, float(att["U_scale"]), rng, "attention.U")
    drawn = {"P": P0, "U": np.broadcast_to(np.eye(d), (h, d, d)) if U is None else U,
             "W": np.eye(d) if W is None else W}
    if att["modulation"] == "sinusoid":
        omega = rng.uniform(0.0, 1.0, (h, d))
        phi = rng.uniform(0.0, 2 * np.pi, (h, d))
        drawn.update(omega=omega, phi=phi)

        def P(t):
            return np.abs(2.0 * np.sin(omega * t + phi))[:, :, None] * P0

    else:
        P = P0
    field = AttentionField(P, U, W=W, mask=att["mask"], normalization=att["normalization"],
                           beta=float(att["beta"]) if beta is None else beta)
    if cfg["initial"]["distribution"] == "cube":
        y0 = rng.uniform(-0.5, 0.5, (n_traj, ell, d))
    else:
        y0 = rng.normal(size=(n_traj, ell, d)) @ field.manifold.inv_sqrt_W
    y0 = field.manifold.projection(y0)
    integ = cfg["integration"]
    t_save = np.linspace(0.0, float(integ["t1"]), integ["saves"])
    return field, y0, t_save, drawn


def simulate_config(cfg: dict, out="simulation", progress=False, device=None, command=None) -> dict:
    """Run a configuration and write data.nc, plots and summary.json into ``out``.

    ``cfg`` is checked (:func:`validate_config`) and ``out`` must be a directory that exists or can
    be created, before anything is computed. ``device`` ("cpu", "cuda", "cuda:N"; None = "cpu")
    is where the integration runs (:func:`riemattn.use_device`); the outputs are the same files.
    ``command`` is recorded in data.nc's attributes (the CLI passes its command line; default:
    this call).
    """
    from .._backend import check_device, use_device

    device = None if device is None else check_device(device, "device")
    cfg = validate_config(cfg)
    out = check_output_dir(out, "out")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    field, y0, t_save, drawn = _build(cfg)
    integ = cfg["integration"]
    stepper = get_stepper(integ["stepper"])
    if stepper.adaptive:
        kwargs = {"rtol": float(integ["rtol"]), "atol": float(integ["atol"])}
    else:
        kwargs = {"dt": float(integ["dt"])}
    with use_device(device):
        sol = integrate(field, y0, (0.0, t_save[-1]), stepper=stepper, saveat=t_save, progress=progress,
                        **kwargs)
    out.mkdir(parents=True, exist_ok=True)
    E = misalignment(sol.y)  # (time, trajectory)
    ds = sol.to_xarray()
    ds["misalignment"] = (("time", "batch"), E)
    ds["P"] = (("head", "row", "column"), drawn["P"])
    ds["U"] = (("head", "row", "column"), np.asarray(drawn["U"]))
    ds["W"] = (("row", "column"), drawn["W"])
    if "omega" in drawn:
        ds["omega"] = (("head", "row"), drawn["omega"])
        ds["phi"] = (("head", "row"), drawn["phi"])
    ds.attrs["config"] = json.dumps(cfg, sort_keys=True)
    ds = annotate(ds, DATA_ATTRS, command=command or f"riemattn.simulate_config(config, out={str(out)!r})")
    ds.to_netcdf(out / "data.nc", engine="scipy")
    files = ["data.nc"]
    for name, draw in (("misalignment.png", _plot_misalignment), ("trajectories.png", _plot_trajectories)):
        fig = draw(sol, E, field)
        if fig is not None:
            fig.savefig(out / name, dpi=120)
            plt.close(fig)
            files.append(name)
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


@styled
def _plot_misalignment(sol, E, field):
    import textwrap

    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.semilogy(sol.t, np.maximum(E, 1e-17), lw=0.8)
    ax.set_xlabel("t")
    ax.set_ylabel("misalignment E(t)")
    # the whole description, wrapped to the figure's width (constrained layout makes room)
    ax.set_title(textwrap.fill(f"{E.shape[1]} trajectories, {field!r}", 95), fontsize=7)
    return fig


@styled
def _plot_trajectories(sol, E, field):
    """Trajectories of the first batch element on S^2 or the ellipsoid (d = 3 only, else None)."""
    if field.d != 3:
        return None
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(5, 5))
    ax = fig.add_subplot(projection="3d")
    inv = None if field.W is None else field.manifold.inv_sqrt_W
    plot_sphere_trajectories(ax, sol.y[:, 0], inv_sqrt_W=inv)
    ax.set_title("the tokens of trajectory 1 (white: start, gray: end)")
    return fig


def simulate_file(path, out="simulation", progress=False, device=None) -> dict:
    """Read a TOML configuration (see the module docstring), run it, write the outputs.

    The file, its schema (:func:`validate_config`) and ``out`` are all checked before any work.
    """
    import shlex

    return simulate_config(load_config(path), out=out, progress=progress, device=device,
                           command=shlex.join(["riemattn", "simulate", str(path), "--out", str(out)]))
