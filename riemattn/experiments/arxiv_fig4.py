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

Claims checked. Paper claims (each fails under a deviation of the model or the data: ``DEVIATIONS``):
V_1 never increases; V_1 and V_2 tend to 0; every token reaches v. Identity (a check of the
construction, never counted): the theorem's hypotheses hold -- U is the printed matrix (symmetric,
top eigenvalue simple and positive) and the initial tokens were flipped into {v^T y > 0}.

Deviations (the configuration keys ``U`` and ``tokens_side`` default to the paper's): U made
non-symmetric (U + S, S skew with unit entries: the top eigenvalues become a complex pair, there is no
consensus point and the first token keeps turning); the tokens flipped into {v^T y < 0}, outside the
theorem's domain (they converge to -v); the time axis reversed. v is always the top eigenvector of
the symmetric part of U (U itself for the paper's), so it stays the paper's v under the deviations.

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
from ._deviations import deviation, read_backwards
from ._papers import D1, P_FIG4, U_FIG4
from ._verdict import claim
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
    "v": ("unit top eigenvector v of U's symmetric part (the consensus point)", "1"),
    "U_eigenvalues": ("eigenvalues of the symmetric part of the value matrix U, ascending", "1"),
    "U_asymmetry": ("largest entry of |U - U^T| (0: U symmetric)", "1"),
}

#: a skew-symmetric matrix with unit entries: U + SKEW is the non-symmetric deviation's value matrix
SKEW = np.array([[0.0, 1.0, -1.0], [-1.0, 0.0, 1.0], [1.0, -1.0, 0.0]])


def P_fig4(t):
    """P(t) = D_1(t) P' (ARXIV section 7.3), shape (3, 3)."""
    return D1(t) @ P_FIG4


def config(quick: bool = False, *, smoke: bool = False) -> dict:
    """Seeded configuration. ``quick``: shorter horizon, coarser step; ``smoke``: for the test suite.

    ``U``: "printed" (the paper's) or "non-symmetric" (U + SKEW, a deviation); ``tokens_side``: "domain"
    (flipped into {v^T y > 0}, the theorem's hypothesis) or "opposite" (into {v^T y < 0}, a deviation).
    """
    model = {"seed": 4, "U": "printed", "tokens_side": "domain", "tokens": 10, "stepper": "rk4"}
    if smoke:
        return {**model, "t1": 36.0, "dt": 0.02, "n_save": 361}
    if quick:
        return {**model, "t1": 40.0, "dt": 0.01, "n_save": 401}
    return {**model, "t1": 60.0, "dt": 0.005, "n_save": 1201}


def initial_tokens(rng, tokens: int, v: np.ndarray) -> np.ndarray:
    """Uniform in [-0.5, 0.5]^3, projected, flipped into {v^T y > 0}; shape (tokens, 3)."""
    y0 = rng.uniform(-0.5, 0.5, size=(tokens, 3))
    y0 /= np.linalg.norm(y0, axis=-1, keepdims=True)
    return y0 * np.sign(y0 @ v)[:, None]


def run(config: dict) -> xr.Dataset:
    rng = np.random.default_rng(config["seed"])
    U = U_FIG4 + (SKEW if config.get("U", "printed") == "non-symmetric" else 0.0)
    sym = (U + U.T) / 2
    v = consensus_points(sym)[0]  # the printed U's v, also when U is made non-symmetric
    field = AttentionField(P_fig4, U, mask="causal")
    y0 = initial_tokens(rng, config["tokens"], v)
    if config.get("tokens_side", "domain") == "opposite":  # outside the theorem's domain
        y0 = -y0
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
    ds["U_eigenvalues"] = ("component", np.linalg.eigvalsh(sym))
    ds["U_asymmetry"] = float(np.abs(U - U.T).max())
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
    asym = float(ds.U_asymmetry) if "U_asymmetry" in ds else 0.0
    return {
        "theorem_assumptions": claim(
            bool(asym == 0.0 and lam[-1] > 0 and lam[-1] - lam[-2] > 1e-6 and np.min(vy0) > 0),
            {"top_eigenvalues": lam[-2:].tolist(), "min_v_y0": float(np.min(vy0)), "U_asymmetry": asym},
            "identity (the construction): U is symmetric with a simple positive top eigenvalue (the printed "
            "matrix) and v^T y_i(0) > 0 for every token (the initial tokens are flipped into that domain)",
            kind="identity"),
        "V1_non_increasing": claim(
            increase <= 1e-12, increase,
            "largest increase of V_1 = 1 - v^T y_1 between saved times <= 1e-12 (rounding)"),
        "V1_V2_to_zero": claim(
            bool(abs(V1[-1]) < 1e-8 and abs(V2[-1]) < 1e-8), [float(V1[-1]), float(V2[-1])],
            "|V_1(t1)| and |V_2(t1)| < 1e-8 (the first two tokens reach v)"),
        "consensus_at_v": claim(
            float(ds.distance_to_v[-1]) < 1e-3, float(ds.distance_to_v[-1]),
            "max_i |y_i(t1) - v| < 1e-3 (all tokens reach the consensus point (v, ..., v))"),
    }



_ALL = ("V1_non_increasing", "V1_V2_to_zero", "consensus_at_v")
DEVIATIONS = (
    deviation("U non-symmetric", _ALL,
              "U + S with S skew-symmetric (unit entries): the theorem's hypothesis U = U^T fails, U's top "
              "eigenvalues are a complex pair (-0.53 +- 1.48i), the first token turns instead of climbing to v",
              config=lambda cfg: {**cfg, "U": "non-symmetric"}),
    deviation("tokens outside the domain", _ALL,
              "the initial tokens flipped into {v^T y < 0} (the theorem's hypothesis v^T y_i(0) > 0 fails): "
              "they converge to -v, V_1 rises to 2",
              config=lambda cfg: {**cfg, "tokens_side": "opposite"}),
    deviation("time axis reversed", _ALL,
              "the trajectory read backwards: V_1 increases and the run ends at the initial tokens",
              data=read_backwards("time")),
)
