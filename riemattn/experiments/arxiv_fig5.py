"""ARXIV Figure 5 / ICML Figure 4: causal attention in high dimension, 100 trajectories, E(t) -> 0.

50 tokens on S^499 (d = 500, "comparable to GPT-2"), causal attention, h = 2 heads, U = I,
P_eta(t) = D_eta(t) P'_eta with P'_eta drawn uniformly in [-0.5, 0.5] and D_eta(t) diagonal with
entries |2 sin(omega_j t + phi_j)|, omega_j ~ U(0, 1), phi_j ~ U(0, 2 pi) (one pair per diagonal
entry and head). Initial tokens uniform in the cube [-0.5, 0.5]^500, projected onto the sphere;
100 independent initial configurations (one draw of the matrices, shared by all of them, as in the
paper). The theorem (ICML Thm 4.2 = ARXIV Thm 5.1): the consensus at y_1(0) is asymptotically
stable for causal attention with U = I, so the misalignment E(y) = 1 - (1/l) sum_i y_1^T y_i /
(|y_1| |y_i|) of ICML eq. (9) tends to 0 on every trajectory.

The whole ensemble is one array of shape (100, 50, 500) integrated in one call of
:func:`riemattn.integrate` (projected RK4, fixed step 0.5; the field varies on time scales >= 1)
that stores only E(t), the drift of y_1 and finiteness at the saved times (``save_fn``), so the
tokens are never kept: the peak memory stays a few times the state (measured in docs/figures.md).
With the paper's normalization Z_i = sqrt(d) sum_j e^{...} the attention rows sum to 1/sqrt(500),
so consensus is slow: E falls below 1e-6 near t = 240 (measured); we integrate to t = 300
(the paper's figure shows t up to about 200, where E is ~1e-5). ``quick`` keeps d = 500, 50 tokens
and h = 2 but takes 4 trajectories, a step of 1 (measured: the tokens differ from the step-0.5
solution by < 1e-4) and t1 = 260.

Claims checked. Paper claim (fails under the deviations ``DEVIATIONS``): E(y(t1)) < 1e-6 on every
trajectory. Observation: the first saved time from which every trajectory stays below 1e-6 (it
exists exactly when the paper claim holds, so it is reported, not counted again). Identity (an
implementation check of the causal mask): the first token never moves -- it attends only to itself
and the tangent projection of y_1 at y_1 is 0, for any P and U.

Deviations: U = -I (a value head's sign flipped: each token flees the attention-weighted mean of the
tokens before it, so the tokens do not meet; the configuration key ``U``); the time axis reversed.

References
----------
Rodriguez Abella, Silvestre, Tabuada, "Asymptotic behavior of continuous-time attention" (ARXIV),
section 7.4, Figure 5, Theorem 5.1, eq. (25); "Consensus is all you get", ICML 2025, Theorem 4.2,
eq. (9), Figure 4.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from ..dynamics.attention import AttentionField
from ..analysis.diagnostics import misalignment
from ..solvers.core.integrate import integrate
from ..runs.plotting import legend_below, styled
from ._deviations import deviation, read_backwards
from ._verdict import claim

NAME = "arxiv-fig5"
PAPER = "ARXIV"
FIGURE = "Fig. 5 (ICML Fig. 4)"
DESCRIPTION = (
    "causal, U = I: 50 tokens on S^499, 2 heads with random D(t) P', 100 trajectories, E(t) -> 0"
)
ORDER = 50

#: long_name and units of data.nc's variables (see riemattn.runs._cf)
DATA_ATTRS = {
    "E": ("misalignment E(y) of ICML eq. (9), per trajectory", "1"),
    "time_fine": ("time of the D_1(t) samples: a 0.01 grid plus the zeros of each entry", "1"),
    "D_example": ("diagonal entry (D_1)_jj(t) = |2 sin(omega_j t + phi_j)| of head 1", "1"),
    "D_omega": ("angular frequency omega_j of (D_1)_jj, per unit of model time", "rad"),
    "D_phi": ("phase phi_j of (D_1)_jj", "rad"),
}


def config(quick: bool = False, *, smoke: bool = False) -> dict:
    """Seeded configuration; ``quick`` and ``smoke`` take fewer trajectories and a larger step."""
    base = {
        "seed": 5,
        "U": "identity",  # the value matrix: "identity" (the paper's) or "minus identity" (a deviation)
        "tokens": 50,
        "d": 500,
        "heads": 2,
        "t1": 300.0,
        "n_save": 301,
        "stepper": "rk4",
    }
    if smoke:
        return {**base, "d": 100, "trajectories": 3, "t1": 160.0, "n_save": 81, "dt": 2.0}
    if quick:
        return {**base, "trajectories": 4, "t1": 260.0, "n_save": 261, "dt": 1.0}
    return {**base, "trajectories": 100, "dt": 0.5}


class RandomDiagonalHeads:
    """P_eta(t) = D_eta(t) P'_eta, (D_eta)_jj = |2 sin(omega_eta,j t + phi_eta,j)|; call gives (h, d, d).

    Parameters
    ----------
    P_prime : ndarray, shape (h, d, d)
    omega, phi : ndarray, shape (h, d)
    """

    def __init__(self, P_prime, omega, phi):
        self.P_prime = np.asarray(P_prime, dtype=float)
        self.omega = np.asarray(omega, dtype=float)
        self.phi = np.asarray(phi, dtype=float)

    def diagonal(self, t):
        """Diagonals of D_eta(t), shape (h, d)."""
        return np.abs(2.0 * np.sin(self.omega * t + self.phi))

    def __call__(self, t):
        return self.diagonal(t)[:, :, None] * self.P_prime


def draw(config: dict):
    """The seeded random heads and initial tokens: (RandomDiagonalHeads, y0 of shape (m, l, d))."""
    rng = np.random.default_rng(config["seed"])
    h, d = config["heads"], config["d"]
    P_prime = rng.uniform(-0.5, 0.5, size=(h, d, d))
    omega = rng.uniform(0.0, 1.0, size=(h, d))
    phi = rng.uniform(0.0, 2.0 * np.pi, size=(h, d))
    y0 = rng.uniform(-0.5, 0.5, size=(config["trajectories"], config["tokens"], d))
    y0 /= np.linalg.norm(y0, axis=-1, keepdims=True)
    return RandomDiagonalHeads(P_prime, omega, phi), y0


#: the figure's third panel: the first D_ENTRIES diagonal entries of D_1(t) for t in [0, D_WINDOW]
D_ENTRIES, D_WINDOW = 3, 30.0


def d_example_times(heads, t_end, step=0.01):
    """Times at which the figure samples (D_1)_jj(t), j < D_ENTRIES: a grid of ``step`` on
    [0, t_end] plus every zero of |2 sin(omega_j t + phi_j)| in it (t = (k pi - phi_j) / omega_j),
    so each cusp of the curves is drawn down to 0 (a plain grid misses them by up to omega step)."""
    grid = np.linspace(0.0, t_end, int(round(t_end / step)) + 1)
    zeros = []
    for w, p in zip(heads.omega[0, :D_ENTRIES], heads.phi[0, :D_ENTRIES]):
        if w > 0:
            k = np.arange(np.ceil(p / np.pi), np.floor((w * t_end + p) / np.pi) + 1)
            zeros.append((k * np.pi - p) / w)
    t = np.unique(np.concatenate([grid, *zeros]))
    return t[(t >= 0.0) & (t <= t_end)]


def run(config: dict) -> xr.Dataset:
    heads, y0 = draw(config)
    U = -np.eye(config["d"]) if config.get("U", "identity") == "minus identity" else None
    field = AttentionField(heads, U, mask="causal")
    t_save = np.linspace(0.0, config["t1"], config["n_save"])
    # One integrate call that keeps only what the figure needs (save_fn): saving every token at
    # every time would take n_save * 100 * 50 * 500 * 8 bytes = 6 GB at full size.
    first0 = y0[:, 0, :]

    def observe(t, y):
        return {"E": misalignment(y), "y1_drift": np.linalg.norm(y[:, 0, :] - first0, axis=-1),
                "finite": np.isfinite(y).all(axis=(-2, -1))}

    sol = integrate(field, y0, (0.0, config["t1"]), stepper=config["stepper"], dt=config["dt"],
                    saveat=t_save, save_fn=observe)
    E, obs = sol.observables["E"], sol.observables
    nfev, n_steps, success = sol.nfev, sol.n_steps, sol.success
    y1_drift = float(np.max(obs["y1_drift"][-1]))
    t_fine = d_example_times(heads, min(D_WINDOW, config["t1"]))
    ds = xr.Dataset(
        {
            "E": (("time", "trajectory"), E),
            "D_example": (
                ("time_fine", "entry"),
                np.stack([heads.diagonal(t)[0, :D_ENTRIES] for t in t_fine]),
            ),
            "D_omega": ("entry", heads.omega[0, :D_ENTRIES]),
            "D_phi": ("entry", heads.phi[0, :D_ENTRIES]),
        },
        coords={"time": t_save, "time_fine": t_fine},
        attrs={
            "nfev": int(nfev),
            "n_steps": int(n_steps),
            "success": int(success),
            "y1_drift": float(y1_drift),
            "all_finite": int(np.all(obs["finite"][-1])),
            "shape": " ".join(str(s) for s in y0.shape),
        },
    )
    return ds


@styled
def plot(ds: xr.Dataset):
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(14, 4.4))
    t = ds.time.values
    E = ds.E.values
    axes[0].plot(t, E, color="C0", lw=0.6, alpha=0.6)
    axes[0].set_xlabel("t")
    axes[0].set_ylabel("E(y(t))")
    axes[0].set_title(f"ARXIV Fig. 5: E(t) on {E.shape[1]} trajectories")
    axes[1].semilogy(t, np.maximum(E, 1e-17), color="C0", lw=0.6, alpha=0.6)
    axes[1].axhline(1e-6, color="k", ls="--", lw=0.8, label="$10^{-6}$")
    axes[1].set_xlabel("t")
    axes[1].set_ylabel("E(y(t))")
    axes[1].set_title("E(t), log scale")
    legend_below(axes[1])
    for k in range(ds.sizes["entry"]):
        axes[2].plot(
            ds.time_fine, ds.D_example[:, k], lw=0.8, label=f"$(D_1)_{{{k + 1}{k + 1}}}(t)$"
        )
    axes[2].set_xlabel("t")
    axes[2].set_xlim(0.0, float(ds.time_fine[-1]))
    axes[2].set_ylim(bottom=0.0)
    axes[2].set_title(f"{ds.sizes['entry']} diagonal entries of $D_1(t)$, t ≤ {float(ds.time_fine[-1]):g}")
    legend_below(axes[2])
    return fig


def claims(ds: xr.Dataset) -> dict:
    E = ds.E.values
    final = float(np.max(E[-1]))
    t = ds.time.values
    below = np.all(E < 1e-6, axis=1)
    # first saved time after which every trajectory stays below 1e-6
    idx = len(t) - int(np.argmin(below[::-1])) if not below.all() else 0
    t_below = float(t[idx]) if idx < len(t) else float("nan")
    drift = float(ds.attrs["y1_drift"])
    return {
        "E_below_1e-6_every_trajectory": claim(
            final < 1e-6, final, "max over trajectories of E(y(t1)) < 1e-6 (consensus on every trajectory)"),
        "time_all_below_1e-6": claim(
            None, t_below, "first saved time from which every trajectory has E < 1e-6 (nan: none before t1)",
            kind="observation", observed=bool(np.isfinite(t_below))),
        "first_token_fixed": claim(
            drift < 1e-10, drift,
            "identity of the causal mask: |y_1(t1) - y_1(0)| < 1e-10 on every trajectory (the first token "
            "attends only to itself and P_{y_1}^perp y_1 = 0, for any P and U)", kind="identity"),
    }



DEVIATIONS = (
    deviation("U = -I (value sign flipped)", "E_below_1e-6_every_trajectory",
              "the theorem's U = I replaced by U = -I: each token moves away from the attention-weighted mean "
              "of the tokens before it, so no consensus forms", config=lambda cfg: {**cfg, "U": "minus identity"}),
    deviation("time axis reversed", "E_below_1e-6_every_trajectory",
              "E read backwards: the run ends with the initial, spread tokens", data=read_backwards("time")),
)
