"""ARXIV Figure 1: the gradient flow of Theorem 3.2 on the ellipsoid E_P.

Ten tokens in R^3 on E_P = {x : x^T P x = 1} with the SPD matrix printed in ARXIV section 7.1::

    P = [[ 0.9432,  0.0587, -0.1813],
         [ 0.0587,  0.8450, -0.1013],
         [-0.1813, -0.1013,  0.5519]]

follow dy_i/dt = sum_j alpha_ij (y_j - (y_i^T P y_j) y_i) (ARXIV eq. 8: h = 1, U = I, W = P, the paper
normalization Z_i = sqrt(3) sum_j e^{y_i^T P y_j}). By Theorem 3.1 this is -grad_{g_P} V_P with
V(x) = -1/2 sum_{i,j} e^{x_i^T P x_j} (eq. 10), so V_P is non-increasing; by Theorem 3.2 the tokens
converge to an equilibrium, which in the paper's run (and here) is a consensus point, where
V_P = -l^2 e / 2.

Left panel: trajectories on a wireframe of E_P (white: start, gray: end). Right panel: V_P(t).
Initial tokens: uniform in the cube [-0.5, 0.5]^3, projected onto E_P (ARXIV section 7): not in a
common hemisphere, so consensus is a result of the dynamics, not of the initial condition. The paper
does not print the horizon or the step; we use RK4 with dt = 0.01 on t in [0, 40].

Claims checked. Paper claims (each fails under a deviation of the model or the data: ``DEVIATIONS``):

1. V_P never increases along the run (Theorem 3.1: a gradient flow);
2. the tokens converge to an equilibrium: |grad_{g_P} V_P|(t1) < 1e-6 and below 1e-6 of its
   maximum (Theorem 3.2);
3. the equilibrium is a consensus point (the paper's Figure 1): spread < 1e-6, V_P = -l^2 e / 2.

Identity (an implementation check, never counted for the verdict): dV_P/dt = -|grad_{g_P} V_P|^2
along the run. Theorem 3.1 is an algebraic identity of the field (eq. 8 with U = I, W = P *is*
-grad_{g_P} of eq. 10's V_P), true for every initial condition; the check compares the package's
field with its potential and metric (central differences in t).

Deviations: the value matrix U = -I (a head's sign flipped: the field becomes +grad V_P, gradient
ascent, which spreads the tokens); the time axis reversed (V_P rises, the run leaves the equilibrium).
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from ..analysis.gradient_flow import arxiv_field, metric, potential
from ..solvers.core.integrate import integrate
from ..dynamics.attention import AttentionField
from ._deviations import deviation, read_backwards
from ._papers import P_FIG1
from ._verdict import claim
from ..runs.plotting import plot_sphere_trajectories, styled

NAME = "arxiv-fig1"
PAPER = "ARXIV"
FIGURE = "Fig. 1"
DESCRIPTION = (
    "gradient flow (Thm 3.2): 10 tokens on the ellipsoid E_P with the printed P, "
    "V_P(t) decreasing to consensus"
)
ORDER = 10

#: long_name and units of data.nc's variables (see riemattn.runs._cf)
DATA_ATTRS = {
    "y": ("token positions y_i(t) on the ellipsoid E_P", "1"),
    "V": ("potential V_P = V restricted to E_P (ARXIV eq. 10)", "1"),
    "grad_norm": ("norm of grad V_P in the metric g_P", "1"),
    "spread": ("largest distance between two tokens, max_ij |y_i - y_j|", "1"),
    "P": ("the SPD matrix P of E_P = {x : x^T P x = 1} (ARXIV section 7.1)", "1"),
}


def config(quick: bool = False) -> dict:
    """Seeded configuration; ``quick`` takes a 4x coarser step over the same horizon. ``U``: the value
    matrix, "identity" (the paper's) or "minus identity" (a deviation: gradient ascent)."""
    return {
        "seed": 0,
        "U": "identity",
        "tokens": 10,
        "P": P_FIG1.tolist(),
        "t1": 40.0,
        "dt": 0.04 if quick else 0.01,
        "stepper": "rk4",
    }


def run(config: dict) -> xr.Dataset:
    """Integrate the tokens and record V_P(t), |grad V_P|_{g_P}(t) and the spread of the tokens."""
    rng = np.random.default_rng(config["seed"])
    P = np.asarray(config["P"], dtype=float)
    field = arxiv_field(P)
    if config.get("U", "identity") == "minus identity":  # a deviation: +grad_{g_P} V_P
        field = AttentionField(P, -np.eye(P.shape[0]), W=P, normalization="paper")
    y0 = field.manifold.projection(rng.uniform(-0.5, 0.5, size=(int(config["tokens"]), 3)))
    sol = integrate(
        field, y0, (0.0, float(config["t1"])), stepper=config["stepper"], dt=float(config["dt"])
    )
    Y = field(0.0, sol.y)  # = -grad_{g_P} V_P (Theorem 3.1)
    ds = sol.to_xarray()
    ds["V"] = ("time", potential(sol.y, P))
    ds["grad_norm"] = ("time", np.sqrt(metric(sol.y, Y, Y, P)))
    ds["spread"] = (
        "time",
        np.max(np.linalg.norm(sol.y[:, :, None] - sol.y[:, None, :], axis=-1), axis=(-2, -1)),
    )
    ds["P"] = (("row", "col"), P)
    ds.attrs["normalization"] = "paper"
    ds.attrs["V_consensus"] = float(-0.5 * config["tokens"] ** 2 * np.e)
    return ds


@styled
def plot(ds: xr.Dataset):
    """Left: trajectories on the wireframe of E_P; right: V_P(t)."""
    import matplotlib.pyplot as plt

    P = ds.P.values
    lam, vec = np.linalg.eigh(P)
    inv_sqrt_P = (vec / np.sqrt(lam)) @ vec.T
    fig = plt.figure(figsize=(10, 4.2))
    ax0 = fig.add_subplot(1, 2, 1, projection="3d")
    plot_sphere_trajectories(ax0, ds.y.values, inv_sqrt_W=inv_sqrt_P)
    ax0.set_title("(a) convergence to a consensus equilibrium on $\\mathcal{E}_P$")
    ax1 = fig.add_subplot(1, 2, 2)
    ax1.plot(ds.time, ds.V, color="C0")
    ax1.axhline(
        ds.attrs["V_consensus"], color="0.6", ls="--", lw=0.8, label="consensus $-\\ell^2 e/2$"
    )
    ax1.set_xlabel("t")
    ax1.set_ylabel("$V_P$")
    ax1.set_title("(b) potential $V_P = V \\circ \\iota_P$")
    ax1.legend(loc="upper right")
    fig.suptitle("ARXIV Fig. 1: gradient flow on the ellipsoid (Theorem 3.2)")
    return fig


def claims(ds: xr.Dataset) -> dict:
    """V_P non-increasing; convergence to an equilibrium, a consensus point (paper); dV_P/dt =
    -|grad|^2 (identity of the field)."""
    V = ds.V.values
    t = ds.time.values
    rise = float(np.max(np.diff(V) / np.abs(V[1:])))
    # Theorem 3.1 along the trajectory: dV_P/dt = -|grad_{g_P} V_P|^2 (central differences, O(dt^2))
    dVdt = (V[2:] - V[:-2]) / (t[2:] - t[:-2])
    g2 = ds.grad_norm.values[1:-1] ** 2
    mask = g2 > 1e-6 * g2.max()
    gap = float(np.max(np.abs(dVdt[mask] + g2[mask]) / g2[mask]))
    g = ds.grad_norm.values
    V_cons = ds.attrs["V_consensus"]
    return {
        "potential_non_increasing": claim(
            rise <= 1e-13, rise,
            "largest relative increase of V_P between steps <= 1e-13 (rounding only; Theorem 3.1)"),
        "gradient_identity": claim(
            gap <= 1e-2, gap,
            "identity of the field: dV_P/dt = -|grad_{g_P} V_P|^2 along the run, max relative gap <= 1e-2 "
            "(central differences in t). Theorem 3.1 is algebraic (eq. 8 with U = I, W = P is -grad_{g_P} "
            "V_P for every configuration): a check of the field against the potential and the metric",
            kind="identity"),
        "converges_to_equilibrium": claim(
            bool(g[-1] < 1e-6 and g[-1] < 1e-6 * g.max()), float(g[-1]),
            "|grad_{g_P} V_P|(t1) < 1e-6 and below 1e-6 of its maximum (Thm 3.2)"),
        "equilibrium_is_consensus": claim(
            bool(ds.spread[-1] < 1e-6 and abs(V[-1] / V_cons - 1.0) < 1e-9), float(ds.spread[-1]),
            "max_ij |y_i - y_j| at t1 < 1e-6 and V_P(t1) = -l^2 e/2 to 1e-9 (consensus, the paper's Fig. 1)"),
    }



DEVIATIONS = (
    deviation("U = -I (gradient ascent)", ("potential_non_increasing", "equilibrium_is_consensus"),
              "the value matrix's sign flipped: the field is +grad_{g_P} V_P, V_P rises and the tokens "
              "spread over E_P instead of meeting", config=lambda cfg: {**cfg, "U": "minus identity"}),
    deviation("time axis reversed", ("potential_non_increasing", "converges_to_equilibrium",
                                     "equilibrium_is_consensus"),
              "the trajectory read backwards: V_P increases, the gradient at the end is the initial one, "
              "the tokens end spread", data=read_backwards("time")),
)
