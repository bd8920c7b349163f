"""ARXIV Figure 4 / ICML Figures 5-6: causal attention with a symmetric value matrix U.

Ten tokens on S^2, causal attention, h = 1, P(t) = D_1(t) P' with the printed P' and U
(ARXIV section 7.3) and D_1(t) = 2 diag(cos 10 pi t, sin 10 pi t, cos 6 pi t). The theorem
(ICML Thm 4.5 = ARXIV Thm 6.1): U symmetric with a simple positive top eigenvalue lambda and unit
eigenvector v; if v^T y_i(0) > 0 for every token, the tokens converge to the consensus point
(v, ..., v). V_1 = 1 - v^T y_1 is a Lyapunov function (the first token only sees itself);
V_2 = 1 - v^T y_2 need not be monotone but tends to 0.

The printed U has eigenvalues (-1.418, -0.021, 0.439): the top one is simple and positive, so the
theorem applies. v is :func:`riemattn.analysis.theory.consensus_points` (U)[0] (sign: largest component
positive). Initial tokens: uniform in the cube [-0.5, 0.5]^3, projected onto the sphere, and each
token with v^T y_i < 0 replaced by -y_i, so that all start in the theorem's domain {v^T y > 0}
(the paper's figure shows all tokens converging to one point, which the theorem only guarantees
in that domain). The papers do not print the horizon; we integrate to t = 60 (quick: 40), when
V_1, V_2 are below 1e-9.

References
----------
Rodriguez Abella, Silvestre, Tabuada, "Asymptotic behavior of continuous-time attention" (ARXIV),
section 7.3, Figure 4, Theorem 6.1; "Consensus is all you get", ICML 2025, Theorem 4.5, Figs. 5-6.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from ..dynamics.attention import AttentionField
from ..analysis.diagnostics import misalignment, token_lyapunov
from ..solvers.core.integrate import integrate
from ..analysis.theory import consensus_points
from ._papers import D1, P_FIG4, U_FIG4
from ..runs.plotting import draw_point, plot_sphere_trajectories, styled

NAME = "arxiv-fig4"
PAPER = "ARXIV"
FIGURE = "Fig. 4 (ICML Figs. 5-6)"
DESCRIPTION = (
    "causal attention, symmetric U: 10 tokens on S^2 reach (v,...,v); V_1 = 1 - v.y_1 monotone"
)
ORDER = 40

#: long_name and units of data.nc's variables (see riemattn.runs._cf)
DATA_ATTRS = {
    "y": ("token positions y_i(t) on S^2", "1"),
    "V": ("token Lyapunov function V_i = 1 - v^T y_i", "1"),
    "misalignment": ("misalignment E(y) of ICML eq. (9)", "1"),
    "distance_to_v": ("largest distance of a token to v, max_i |y_i - v|", "1"),
    "v": ("unit top eigenvector v of U (the consensus point)", "1"),
    "U_eigenvalues": ("eigenvalues of the value matrix U, ascending", "1"),
}


def P_fig4(t):
    """P(t) = D_1(t) P' (ARXIV section 7.3), shape (3, 3)."""
    return D1(t) @ P_FIG4


def config(quick: bool = False, *, smoke: bool = False) -> dict:
    """Seeded configuration. ``quick``: shorter horizon, coarser step; ``smoke``: for the test suite."""
    if smoke:
        return {"seed": 4, "tokens": 10, "t1": 36.0, "dt": 0.02, "stepper": "rk4", "n_save": 361}
    if quick:
        return {"seed": 4, "tokens": 10, "t1": 40.0, "dt": 0.01, "stepper": "rk4", "n_save": 401}
    return {"seed": 4, "tokens": 10, "t1": 60.0, "dt": 0.005, "stepper": "rk4", "n_save": 1201}


def initial_tokens(rng, tokens: int, v: np.ndarray) -> np.ndarray:
    """Uniform in [-0.5, 0.5]^3, projected, flipped into {v^T y > 0}; shape (tokens, 3)."""
    y0 = rng.uniform(-0.5, 0.5, size=(tokens, 3))
    y0 /= np.linalg.norm(y0, axis=-1, keepdims=True)
    return y0 * np.sign(y0 @ v)[:, None]


def run(config: dict) -> xr.Dataset:
    rng = np.random.default_rng(config["seed"])
    v = consensus_points(U_FIG4)[0]
    field = AttentionField(P_fig4, U_FIG4, mask="causal")
    y0 = initial_tokens(rng, config["tokens"], v)
    t_save = np.linspace(0.0, config["t1"], config["n_save"])
    sol = integrate(
        field, y0, (0.0, config["t1"]), stepper=config["stepper"], dt=config["dt"], saveat=t_save
    )
    ds = sol.to_xarray()
    V = token_lyapunov(sol.y, v)  # (time, token)
    ds["V"] = (("time", "token"), V)
    ds["misalignment"] = ("time", misalignment(sol.y))
    ds["distance_to_v"] = ("time", np.max(np.linalg.norm(sol.y - v, axis=-1), axis=-1))
    ds["v"] = ("component", v)
    ds["U_eigenvalues"] = ("component", np.linalg.eigvalsh(U_FIG4))
    return ds


@styled
def plot(ds: xr.Dataset):
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(12, 4.5))
    ax1 = fig.add_subplot(1, 3, 1, projection="3d", computed_zorder=False)
    plot_sphere_trajectories(ax1, ds.y.values)
    draw_point(ax1, ds.v.values, "v")  # drawn over the final positions, which sit at v
    ax1.set_title("ARXIV Fig. 4a: causal, symmetric U\n(white: start, gray: end, ×: v)")
    ax2 = fig.add_subplot(1, 3, 2)
    ax2.plot(ds.time, ds.V[:, 0], label="$V_1 = 1 - y_1^T v$")
    ax2.plot(ds.time, ds.V[:, 1], label="$V_2 = 1 - y_2^T v$")
    ax2.set_xlabel("t")
    ax2.set_ylabel("$V_i$")
    ax2.set_xlim(0, min(15.0, float(ds.time[-1])))
    ax2.set_title("ARXIV Fig. 4b: $V_1$, $V_2$")
    ax2.legend()
    ax3 = fig.add_subplot(1, 3, 3)
    ax3.semilogy(ds.time, np.maximum(ds.V[:, 0], 1e-17), label="$V_1$")
    ax3.semilogy(ds.time, np.maximum(ds.V[:, 1], 1e-17), label="$V_2$")
    ax3.semilogy(
        ds.time, np.maximum(ds.V.max("token"), 1e-17), "k--", lw=0.8, label="$\\max_i V_i$"
    )
    ax3.set_xlabel("t")
    ax3.set_ylabel("$V_i$")
    ax3.set_title("log scale")
    ax3.legend(loc="upper right")
    return fig


def claims(ds: xr.Dataset) -> dict:
    V1 = ds.V[:, 0].values
    V2 = ds.V[:, 1].values
    increase = float(np.max(np.diff(V1)))
    lam = ds.U_eigenvalues.values
    vy0 = 1.0 - ds.V[0].values
    return {
        "theorem_assumptions": {
            "passed": bool(lam[-1] > 0 and lam[-1] - lam[-2] > 1e-6 and np.min(vy0) > 0),
            "value": {"top_eigenvalues": lam[-2:].tolist(), "min_v_y0": float(np.min(vy0))},
            "description": "U's top eigenvalue is simple and positive, and v^T y_i(0) > 0 for every token",
        },
        "V1_non_increasing": {
            "passed": increase <= 1e-12,
            "value": increase,
            "description": "largest increase of V_1 = 1 - v^T y_1 between saved times <= 1e-12 (rounding)",
        },
        "V1_V2_to_zero": {
            "passed": bool(abs(V1[-1]) < 1e-8 and abs(V2[-1]) < 1e-8),
            "value": [float(V1[-1]), float(V2[-1])],
            "description": "|V_1(t1)| and |V_2(t1)| < 1e-8 (the first two tokens reach v)",
        },
        "consensus_at_v": {
            "passed": float(ds.distance_to_v[-1]) < 1e-3,
            "value": float(ds.distance_to_v[-1]),
            "description": "max_i |y_i(t1) - v| < 1e-3 (all tokens reach the consensus point (v, ..., v))",
        },
    }
