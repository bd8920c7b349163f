"""ARXIV Figures 2-3 / ICML Figures 1-3: the hemisphere theorem with two time-varying heads.

Ten tokens on S^2, full attention, h = 2, U = I, P_eta(t) = D_eta(t) P'_eta with the printed P'_1,
P'_2 and D_1 = 2 diag(cos 10 pi t, sin 10 pi t, cos 6 pi t), D_2 = 2 diag(cos 6 pi t, sin 6 pi t,
cos 4 pi t). The theorem (ICML Thm 3.2 = ARXIV Thm 4.1): tokens starting in the open hemisphere
H+(v), v = (1, 0, 0), stay in it, V(y) = max_i (1 - v^T y_i) never increases, and the tokens reach
consensus.

Initial tokens: uniform in the cube [-0.5, 0.5]^3 with the first coordinate replaced by its absolute
value (so that all start in H+(v), as the theorem requires and the paper's figure shows), projected
onto the sphere. The papers do not print the horizon; we use t in [0, 10].

Claims checked, all paper claims (each fails under a deviation: ``DEVIATIONS``): the tokens stay in
H+(v) at every saved time (forward invariance: only t = 0 is set by the initial condition); V(y) =
max_i (1 - v^T y_i) never increases; the misalignment E(y(t1)) < 1e-6 (consensus). The theorem
holds for any P_eta(t) (the attention weights are positive whatever P is), so a head's sign flipped
in P is *not* a deviation that should break it; its hypothesis U = I is: with U = -I (a value head's
sign flipped) every token is pushed away from the weighted mean of the others, and they leave the
hemisphere, V rises and no consensus forms. The time axis reversed makes V increase and ends the run
spread out.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from ..dynamics.attention import AttentionField
from ..analysis.diagnostics import hemisphere_lyapunov, misalignment
from ..solvers.core.integrate import integrate
from ._deviations import deviation, read_backwards
from ._papers import hemisphere_P
from ._verdict import claim
from ..runs.plotting import draw_great_circle, draw_point, legend_below, plot_sphere_trajectories, styled

NAME = "arxiv-fig2"
PAPER = "ARXIV"
FIGURE = "Figs. 2-3 (ICML Figs. 1-3)"
DESCRIPTION = "hemisphere theorem: 10 tokens on S^2, two time-varying heads, Lyapunov max_i(1 - v.y_i)"
ORDER = 20

#: long_name and units of data.nc's variables (see riemattn.runs._cf)
DATA_ATTRS = {
    "y": ("token positions y_i(t) on S^2", "1"),
    "time_fine": ("time of the Frobenius-norm samples (model units)", "1"),
    "P_frobenius": ("Frobenius norm of the head matrix P_eta(t) = D_eta(t) P'_eta", "1"),
    "lyapunov": ("hemisphere Lyapunov function max_i (1 - v^T y_i), v = (1, 0, 0)", "1"),
    "min_vy": ("smallest v^T y_i over the tokens (> 0: all in the hemisphere H+(v))", "1"),
    "misalignment": ("misalignment E(y) of ICML eq. (9)", "1"),
}

V = (1.0, 0.0, 0.0)


def config(quick: bool = False) -> dict:
    # U: the value matrix, "identity" (the paper's) or "minus identity" (a deviation)
    return {"seed": 3, "U": "identity", "tokens": 10, "t1": 10.0, "dt": 2e-3, "stepper": "rk4", "n_save": 501 if not quick else 251}


def run(config: dict) -> xr.Dataset:
    rng = np.random.default_rng(config["seed"])
    field = AttentionField(hemisphere_P, -np.eye(3) if config.get("U", "identity") == "minus identity" else None)
    y0 = rng.uniform(-0.5, 0.5, size=(config["tokens"], 3))
    y0[:, 0] = np.abs(y0[:, 0])
    y0 = field.manifold.projection(y0)
    t_save = np.linspace(0.0, config["t1"], config["n_save"])
    sol = integrate(field, y0, (0.0, config["t1"]), stepper=config["stepper"], dt=config["dt"], saveat=t_save)
    # ||P_eta(t)||_F oscillates with periods down to 0.1: sample it on its own fine grid over [0, 2]
    t_fine = np.linspace(0.0, min(2.0, config["t1"]), 2001)
    P = np.stack([hemisphere_P(t) for t in t_fine])  # (time_fine, head, d, d)
    ds = sol.to_xarray()
    ds = ds.assign_coords(time_fine=t_fine)
    ds["P_frobenius"] = (("time_fine", "head"), np.linalg.norm(P, axis=(-2, -1)))
    ds["lyapunov"] = ("time", hemisphere_lyapunov(sol.y, V))
    ds["min_vy"] = ("time", np.min(sol.y @ np.asarray(V), axis=-1))
    ds["misalignment"] = ("time", misalignment(sol.y))
    ds.attrs["v"] = "1 0 0"
    return ds


@styled
def plot(ds: xr.Dataset):
    import matplotlib.pyplot as plt

    v = np.array([float(c) for c in ds.attrs["v"].split()])
    fig = plt.figure(figsize=(13, 4.4))
    ax0 = fig.add_subplot(1, 3, 1)
    for h in range(ds.sizes["head"]):
        ax0.plot(ds.time_fine, ds.P_frobenius[:, h], lw=0.8, label=f"$\\|P_{h + 1}(t)\\|_F$")
    ax0.set_xlabel("t")
    ax0.set_ylabel("Frobenius norm")
    ax0.set_title("ARXIV Fig. 2: Frobenius norms")
    legend_below(ax0, ncol=2)
    ax1 = fig.add_subplot(1, 3, 2, projection="3d")
    plot_sphere_trajectories(ax1, ds.y.values)
    draw_great_circle(ax1, v, label="boundary $v^T y = 0$ of $H^+(v)$")
    draw_point(ax1, v, "v")
    ax1.view_init(elev=20, azim=-35)  # v = (1, 0, 0) points towards the viewer
    ax1.set_title("ARXIV Fig. 3a: tokens on $S^2$ stay in $H^+(v)$")
    legend_below(ax1, ncol=1)
    ax2 = fig.add_subplot(1, 3, 3)
    ax2.plot(ds.time, ds.lyapunov, color="C0")
    ax2.set_xlabel("t")
    ax2.set_ylabel("$V(y)$")
    ax2.set_title("ARXIV Fig. 3b: $V(y) = \\max_i (1 - v^T y_i)$, v = (1,0,0)")
    return fig


def claims(ds: xr.Dataset) -> dict:
    lyap = ds.lyapunov.values
    increase = float(np.max(np.diff(lyap)))
    return {
        "tokens_stay_in_hemisphere": claim(
            bool(ds.min_vy.min() > 0), float(ds.min_vy.min()),
            "min over saved times and tokens of v^T y_i(t) > 0 (H+(v) forward invariant)"),
        "lyapunov_non_increasing": claim(
            increase <= 1e-12, increase, "largest increase of V between saved times <= 1e-12 (rounding)"),
        "consensus": claim(
            float(ds.misalignment[-1]) < 1e-6, float(ds.misalignment[-1]),
            "misalignment E(y(t1)) < 1e-6 (tokens reach consensus)"),
    }



DEVIATIONS = (
    deviation("U = -I (value sign flipped)", ("tokens_stay_in_hemisphere", "lyapunov_non_increasing", "consensus"),
              "the theorem's hypothesis U = I replaced by U = -I: each token moves away from the attention-weighted "
              "mean of the others, so the tokens leave H+(v), V rises and they do not meet (run to t = 2, "
              "the same save spacing: the tokens are out of H+(v) long before)",
              config=lambda cfg: {**cfg, "U": "minus identity", "t1": 2.0,
                                  "n_save": int(round(2.0 * (cfg["n_save"] - 1) / cfg["t1"])) + 1}),
    deviation("time axis reversed", ("lyapunov_non_increasing", "consensus"),
              "the trajectory read backwards: V increases and the run ends with the initial, spread tokens",
              data=read_backwards("time")),
)
