"""Sinkformers: doubly stochastic attention as a gradient flow, compared with softmax attention.

Sander, Ablin, Blondel and Peyre (AISTATS 2022) replace the softmax of self-attention by Sinkhorn's
scaling to a doubly stochastic matrix and show that, for a symmetric key-query matrix, the
attention dynamics is then a Wasserstein gradient flow. The energy, derived here from the
entropic optimal-transport dual (riemattn.analysis.gradients.sinkhorn_energy): for the tokens'
empirical measure mu and the cost -beta x^T P y,

    F(x) = 1/2 OT(mu, mu),   dF/dx_k = -(beta / l) sum_j alpha_kj P x_j   (envelope theorem),

alpha the Sinkhorn matrix, so the field with U = P is -(l / beta) grad F and F decreases along it
(on the sphere: the tangent projection of that gradient).

Run: l tokens on S^2 (uniform), P = I + 0.3 A (A symmetric, seeded), U = P, beta = 2, rk4; the same
initial tokens under softmax attention (same P, U, beta).

Claims checked (paper):

1. the attention matrix is doubly stochastic: rows and columns of every head sum to 1, to the
   Sinkhorn tolerance, at every saved time;
2. the dynamics is the gradient flow of F: the field equals riemattn's ``GradientField`` of
   :func:`~riemattn.analysis.gradients.sinkhorn_energy` with weights beta / l at every saved time;
3. F does not increase along the trajectory.

Observation: the single-linkage cluster counts of the Sinkhorn and softmax runs over time.

References
----------
M. E. Sander, P. Ablin, M. Blondel, G. Peyre, "Sinkformers: Transformers with doubly stochastic
attention", AISTATS 2022 (arXiv 2110.11773), section 4 (Wasserstein gradient flow).
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from ..analysis.diagnostics import cluster_count
from ..analysis.gradient_flow import GradientField, sinkhorn_energy
from ..dynamics.attention import AttentionField
from ..geometry.manifolds import Sphere
from ..runs.plotting import legend_below, styled
from ..solvers.core.integrate import integrate
from ._verdict import claim

NAME = "sinkhorn-flow"
PAPER = "Sinkformers"
FIGURE = "gradient flow (section 4)"
DESCRIPTION = "Sinkhorn attention on S^2: doubly stochastic, the gradient flow of 1/2 OT(mu, mu), vs softmax"
ORDER = 95

DATA_ATTRS = {
    "y_sinkhorn": ("tokens under Sinkhorn attention", "1"),
    "y_softmax": ("tokens under softmax attention (same P, U, beta, initial tokens)", "1"),
    "energy": ("Sinkformers energy F = 1/2 OT(mu, mu) along the Sinkhorn run", "1"),
    "row_error": ("max_i |sum_j alpha_ij - 1| over heads", "1"),
    "column_error": ("max_j |sum_i alpha_ij - 1| over heads", "1"),
    "gradient_gap": ("max |field - GradientField(sinkhorn_energy)| at the saved times", "1"),
    "clusters_sinkhorn": ("single-linkage clusters (distance 1e-2) of the Sinkhorn run", "1"),
    "clusters_softmax": ("single-linkage clusters (distance 1e-2) of the softmax run", "1"),
}

TOL = 1e-10  # the Sinkhorn tolerance on the column sums


def config(quick: bool = False, *, smoke: bool = False) -> dict:
    if smoke:
        return {"seed": 44, "tokens": 8, "beta": 2.0, "t1": 1.0, "dt": 0.05, "n_save": 6}
    if quick:
        return {"seed": 44, "tokens": 12, "beta": 2.0, "t1": 3.0, "dt": 0.05, "n_save": 16}
    return {"seed": 44, "tokens": 24, "beta": 2.0, "t1": 8.0, "dt": 0.05, "n_save": 41}


def run(config: dict) -> xr.Dataset:
    rng = np.random.default_rng(config["seed"])
    ell, beta, d = config["tokens"], config["beta"], 3
    A = rng.normal(size=(d, d))
    P = np.eye(d) + 0.3 * (A + A.T) / 2
    y0 = rng.normal(size=(ell, d))
    y0 /= np.linalg.norm(y0, axis=1, keepdims=True)
    sink = AttentionField(P, P, normalization="sinkhorn", beta=beta, sinkhorn_tol=TOL, sinkhorn_iters=5000)
    soft = AttentionField(P, P, normalization="softmax", beta=beta)
    ts = np.linspace(0.0, config["t1"], config["n_save"])
    a = integrate(sink, y0, (0.0, config["t1"]), "rk4", dt=config["dt"], saveat=ts, engine="numpy")
    b = integrate(soft, y0, (0.0, config["t1"]), "rk4", dt=config["dt"], saveat=ts, engine="numpy")
    grad = GradientField(lambda x: sinkhorn_energy(x, P, beta, tol=1e-13), Sphere(d - 1),
                         weights=lambda x: np.full(x.shape[:-1], beta / ell))
    attn = np.stack([sink.attention(0.0, y) for y in a.y])  # (time, h, l, l)
    gap = [float(np.max(np.abs(sink(0.0, y) - grad(0.0, y)))) for y in a.y]
    return xr.Dataset(
        {
            "y_sinkhorn": (("time", "token", "coord"), a.y),
            "y_softmax": (("time", "token", "coord"), b.y),
            "energy": ("time", np.array([sinkhorn_energy(y, P, beta, tol=1e-13) for y in a.y])),
            "row_error": ("time", np.max(np.abs(attn.sum(-1) - 1), axis=(-2, -1))),
            "column_error": ("time", np.max(np.abs(attn.sum(-2) - 1), axis=(-2, -1))),
            "gradient_gap": ("time", np.array(gap)),
            "clusters_sinkhorn": ("time", cluster_count(a.y, 1e-2)),
            "clusters_softmax": ("time", cluster_count(b.y, 1e-2)),
        },
        coords={"time": ts},
        attrs={"beta": beta, "P": " ".join(f"{v:.17g}" for v in P.ravel()), "sinkhorn_tol": TOL},
    )


@styled
def plot(ds: xr.Dataset):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 3, figsize=(13, 4))
    ax[0].plot(ds.time, ds.energy, color="C0")
    ax[0].set_xlabel("t")
    ax[0].set_ylabel("$F = \\frac{1}{2} OT(\\mu, \\mu)$")
    ax[0].set_title("Sinkformers energy along the flow")
    ax[1].semilogy(ds.time, np.maximum(ds.column_error, 1e-17), label="columns")
    ax[1].semilogy(ds.time, np.maximum(ds.row_error, 1e-17), label="rows")
    ax[1].semilogy(ds.time, np.maximum(ds.gradient_gap, 1e-17), label="|field - grad flow|")
    ax[1].set_xlabel("t")
    ax[1].set_title("doubly stochastic; gradient-flow identity")
    legend_below(ax[1], ncol=3)
    ax[2].step(ds.time, ds.clusters_sinkhorn, where="post", label="Sinkhorn")
    ax[2].step(ds.time, ds.clusters_softmax, where="post", label="softmax")
    ax[2].set_xlabel("t")
    ax[2].set_ylabel("clusters (distance 1e-2)")
    ax[2].set_title("clustering, same initial tokens")
    legend_below(ax[2], ncol=2)
    return fig


def claims(ds: xr.Dataset) -> dict:
    rows, cols = float(ds.row_error.max()), float(ds.column_error.max())
    # rows: one normalisation of l terms (a few l eps); columns: the tolerance plus that rounding
    floor = 64 * ds.sizes["token"] * np.finfo(float).eps
    gap = float(ds.gradient_gap.max())
    rise = float(np.max(np.diff(ds.energy.values)))
    return {
        "doubly_stochastic": claim(rows <= floor and cols <= ds.attrs["sinkhorn_tol"] + floor, {"rows": rows, "columns": cols},
                                   "rows and columns of the attention sum to 1 (rows to rounding, columns to the "
                                   "Sinkhorn tolerance 1e-10) at every saved time"),
        "gradient_flow": claim(gap <= 1e-9, gap, "the field equals GradientField(sinkhorn_energy, weights beta/l): "
                               "-(l/beta) grad F projected, max gap <= 1e-9 (potentials to 1e-13)"),
        "energy_nonincreasing": claim(rise <= 1e-12, rise, "F = 1/2 OT(mu, mu) never increases between saved times"),
        "clusters": claim(None, {"sinkhorn": int(ds.clusters_sinkhorn[-1]), "softmax": int(ds.clusters_softmax[-1])},
                          "clusters at the final time, Sinkhorn vs softmax (same tokens)", kind="observation"),
    }
