"""Normalization as speed regulation: Post-LN, Pre-LN, Peri-LN, nGPT and Mix-LN clustering compared.

Karagodin, Ge, Polyanskiy and Rigollet write each placement of the layer norm as the sphere
dynamics theta' = s P_theta A with a speed factor s (1, 1/r, 1/(r |A|), alpha/|A|; table in
:mod:`riemattn.dynamics.layernorm`) and conclude that Peri-LN (and nGPT) move tokens fastest in early
layers while Pre-LN and Peri-LN, whose radius grows like the depth, resist collapse in deep layers.
Three parts, each from running :func:`riemattn.layernorm` models:

1. **Equiangular reduction.** n pairwise orthogonal tokens (P = beta I, U = I, softmax) under each
   placement, every beta of the grid in one batch (adaptive projected Dormand-Prince), against the
   scalar ODE for (rho, r) of :func:`riemattn.analysis.speeds.equiangular_placement` (SciPy DOP853;
   no shared code). From it: which placement is ahead at an early time, and how the gap 1 - rho
   decays late (exponentially for Post-LN and nGPT, like r^-2 ~ t^-2 for Pre-LN and Peri-LN).
2. **Heat maps** of the fraction of clustered pairs (<theta_i, theta_j> > 0.999) over (t, beta), per
   placement, in the setting of the public simuformer code (github.com/nikitus20/simuformer:
   d = 16, n = 64, 8 heads averaged, random Q^T K = G_1 G_2 / sqrt(d), V = I, softmax, steps of 0.1,
   beta in linspace(0.1, 15, 20), t up to 50), run with the ``"layer"`` stepper, i.e. each
   placement's discrete block. One random Q^T K per replicate (simuformer draws one per system).
3. **Comparison with simuformer** on a small shared case: its update rule and statistic rewritten in
   NumPy from its source (``riemattn/experiments/_simuformer.py``), run from the same tokens with the
   same matrices. Post-LN agrees to rounding. nGPT differs by the block: simuformer's
   N(x + alpha h N(A)) is ours, N(x + alpha h (N(A) - x)), with alpha / (1 - alpha h) for alpha.
   Pre-LN and Peri-LN differ by simuformer's radius rule r' = r sum_k A_k (the sum of A's
   components) where the model has r' = <theta, A>: with r' = <theta, A> in its code the maps agree
   up to the O(h) difference of the two first-order discretizations.

Claims checked (``riemattn.experiments._norm_speeds_report``). Paper claims, each with
deviations of the model or the data under which it fails (``DEVIATIONS``: Post-LN's and Peri-LN's
runs exchanged; the equiangular runs or the heat maps read backwards in time; nGPT's alpha raised
to 5):

1. Peri-LN fastest early: at t = 0.25 Peri-LN's rho is the largest of the five placements at every
   beta (its speed factor 1/(r |A|) exceeds 1, 1/r and alpha/|A| while |A| < 1, spread-out tokens);
2. Post-LN and nGPT collapse exponentially, at the rates 2 and 2 alpha of the reduction;
3. Pre-LN and Peri-LN (and Mix-LN after its switch) resist collapse: their gap closes only like
   r^-2 ~ t^-2;
4. heat maps: at the last time Post-LN has clustered more than 0.3 more of the pairs (beta-averaged)
   than Pre-LN and Peri-LN, on random Q^T K and tokens.

Identities (implementation checks, never counted for the verdict): the tokens of the equiangular
start follow the scalar ODE of the reduction (the symmetric start forces equiangularity and the
ODE is the model restricted to it), and Post-LN's heat map equals the one simuformer's update draws
(the same block and statistic computed by two codes). Observation: the differences with simuformer
per placement and radius rule.

References
----------
N. Karagodin, S. Ge, Y. Polyanskiy, P. Rigollet, "Normalization in attention dynamics",
NeurIPS 2025 (arXiv 2510.22026), section 2 and the phase diagrams; simuformer, commit 1959a8a.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from ..analysis.diagnostics import clustered_fraction
from ..analysis.speeds import equiangular_placement
from ..dynamics.attention import AttentionField
from ..dynamics.glpr import sa
from ..dynamics.layernorm import PLACEMENTS, layernorm
from ..solvers.core.integrate import integrate
from . import _simuformer
from .glpr_equiangular import orthonormal_frame

NAME = "norm-speeds"
PAPER = "KGPR"
FIGURE = "speed factors, phase diagrams"
DESCRIPTION = ("layer-norm placements as speed regulation: equiangular (rho, r) vs tokens, clustered-pair "
               "heat maps per placement, comparison with the simuformer code")
ORDER = 90

SF_PLACEMENTS = ("post", "pre", "peri", "ngpt")
RULES = ("simuformer", "model-radius")

DATA_ATTRS = {
    "placement": ("placement of the layer norm (post, pre, peri, ngpt, mix)", "1"),
    "beta_eq": ("inverse temperature of the equiangular runs", "1"),
    "time_eq": ("time of the equiangular runs", "1"),
    "rho_simulated": ("mean pairwise <theta_i, theta_j> of the token simulation", "1"),
    "rho_spread": ("max - min of the pairwise <theta_i, theta_j>", "1"),
    "r_simulated": ("mean token radius |x_i| of the simulation", "1"),
    "r_spread": ("max - min of the token radii", "1"),
    "rho_ode": ("rho(t) of the equiangular ODE", "1"),
    "r_ode": ("r(t) of the equiangular ODE", "1"),
    "beta": ("inverse temperature of the heat maps", "1"),
    "fraction": ("fraction of pairs with <theta_i, theta_j> > threshold (heat map)", "1"),
    "placement_sf": ("placement compared with simuformer", "1"),
    "rule": ("simuformer's update as published, or with its radius rule replaced by r' = <theta, A>", "1"),
    "beta_sf": ("inverse temperature of the simuformer comparison", "1"),
    "checkpoint": ("simuformer checkpoint time linspace(0, t1, K)", "1"),
    "steps_sf": ("steps taken when simuformer records each checkpoint", "1"),
    "fraction_sf": ("clustered-pair fraction under simuformer's update", "1"),
    "fraction_ours": ("clustered-pair fraction of our blocks at the same steps", "1"),
}


def config(quick: bool = False, *, smoke: bool = False) -> dict:
    """Seeded configuration. Full: simuformer's default sizes for the heat maps; quick/smoke smaller."""
    base = {
        "seed": 36,
        "alpha": 0.2,  # nGPT's factor, simuformer's value
        "switch": 5.0,  # Mix-LN: Post-LN layers up to t = 5
        "threshold": 0.999,
        "t_early": 0.25,
        "eq": {"n": 32, "betas": [0.0, 1.0, 2.0, 4.0], "t1": 40.0, "n_save": 161, "rtol": 1e-12,
               "atol": 1e-14},
        "heat": {"n": 64, "d": 16, "heads": 8, "n_beta": 20, "beta_min": 0.1, "beta_max": 15.0,
                 "configurations": 16, "replicates": 4, "t1": 50.0, "dt": 0.1, "save_every": 0.5},
        "sf": {"n": 16, "d": 16, "heads": 2, "configurations": 8, "betas": [0.1, 3.0, 6.0, 9.0, 12.0, 15.0],
               "t1": 20.0, "dt": 0.1, "checkpoints": 41},
    }
    if smoke or quick:
        base["eq"] = {**base["eq"], "n": 16, "n_save": 81, "rtol": 1e-11, "atol": 1e-13}
        base["heat"] = {**base["heat"], "n": 32, "heads": 2, "n_beta": 8, "configurations": 8,
                        "replicates": 1, "t1": 30.0, "save_every": 1.0}
    if smoke:
        base["eq"] = {**base["eq"], "n": 8, "n_save": 41, "betas": [0.0, 1.0, 2.0]}
        base["heat"] = {**base["heat"], "n": 16, "n_beta": 6, "configurations": 4}
        base["sf"] = {**base["sf"], "configurations": 4, "betas": [0.1, 5.0, 10.0]}
    return base


def _options(placement, cfg):
    """nGPT's alpha and Mix-LN's switch, for the placements that take them."""
    return {"alpha": cfg["alpha"]} if placement == "ngpt" else {"switch": cfg["switch"]} if placement == "mix" else {}


def _model(field, placement, cfg):
    return layernorm(field, placement, **_options(placement, cfg))


def _sphere(rng, shape):
    x = rng.standard_normal(shape)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def _random_P(rng, heads, d):
    """simuformer's --randomKQ 1: Q^T K = G_1 G_2 / sqrt(d) per head."""
    return np.stack([rng.standard_normal((d, d)) @ rng.standard_normal((d, d)) / np.sqrt(d) for _ in range(heads)])


def _equiangular(cfg, rng):
    eq = cfg["eq"]
    n, betas = eq["n"], np.array(eq["betas"], dtype=float)
    x0 = np.broadcast_to(orthonormal_frame(rng, n, n), (len(betas), n, n))
    t = np.union1d(np.linspace(0.0, eq["t1"], eq["n_save"]), [cfg["t_early"]])
    iu = np.triu_indices(n, k=1)
    shape = (len(PLACEMENTS), len(betas), len(t))
    out = {k: np.empty(shape) for k in ("rho_simulated", "rho_spread", "r_simulated", "r_spread", "rho_ode", "r_ode")}
    for a, p in enumerate(PLACEMENTS):
        model = _model(sa(betas, n), p, cfg)
        sol = integrate(model, x0, (0.0, eq["t1"]), stepper="dopri5", rtol=eq["rtol"], atol=eq["atol"], saveat=t)
        th, r = model.directions(sol.y), model.radii(sol.y)
        G = (th @ np.swapaxes(th, -1, -2))[..., iu[0], iu[1]]  # (time, beta, pairs)
        out["rho_simulated"][a] = G.mean(-1).T
        out["rho_spread"][a] = np.ptp(G, axis=-1).T
        out["r_simulated"][a] = r.mean(-1).T
        out["r_spread"][a] = np.ptp(r, axis=-1).T
        for b, beta in enumerate(betas):
            out["rho_ode"][a, b], out["r_ode"][a, b] = equiangular_placement(t, beta, n, p, **_options(p, cfg))
    dims = ("placement", "beta_eq", "time_eq")
    return {k: (dims, v) for k, v in out.items()}, {"beta_eq": betas, "time_eq": t}


def _heatmap(cfg, rng):
    hc = cfg["heat"]
    n, d, m = hc["n"], hc["d"], hc["configurations"]
    betas = np.linspace(hc["beta_min"], hc["beta_max"], hc["n_beta"])
    t = np.arange(0.0, hc["t1"] + 1e-9, hc["save_every"])
    frac = np.zeros((len(PLACEMENTS), len(betas), len(t)))
    for _ in range(hc["replicates"]):
        P = _random_P(rng, hc["heads"], d)
        x0 = np.broadcast_to(_sphere(rng, (m, n, d)), (len(betas), m, n, d))
        field = AttentionField(P, np.eye(d) / hc["heads"], normalization="softmax", beta=betas[:, None])
        for a, p in enumerate(PLACEMENTS):
            sol = integrate(_model(field, p, cfg), x0, (0.0, hc["t1"]), stepper="layer", dt=hc["dt"], saveat=t,
                            save_fn=lambda s, y: clustered_fraction(y, cfg["threshold"]))
            frac[a] += sol.observables["value"].mean(-1).T / hc["replicates"]
    return {"fraction": (("placement", "beta", "time"), frac)}, {"beta": betas, "time": t}


def _compare(cfg, rng):
    sc = cfg["sf"]
    n, d, m, h, eta = sc["n"], sc["d"], sc["configurations"], sc["heads"], sc["dt"]
    betas = np.array(sc["betas"], dtype=float)
    P = _random_P(rng, h, d)
    V = np.broadcast_to(np.eye(d), (h, d, d))
    M0 = _sphere(rng, (m, n, d))
    K = sc["checkpoints"]
    sf = np.empty((len(RULES), len(SF_PLACEMENTS), len(betas), K))
    ours = np.empty((len(SF_PLACEMENTS), len(betas), K))
    field = AttentionField(P, np.eye(d) / h, normalization="softmax", beta=betas[:, None])
    x0 = np.broadcast_to(M0, (len(betas), m, n, d))
    for a, p in enumerate(SF_PLACEMENTS):
        for k, rule in enumerate(RULES):
            f, steps = _simuformer.run(M0, P, V, betas, p, eta, sc["t1"], K, alpha=cfg["alpha"],
                                       radius="simuformer" if rule == "simuformer" else "model",
                                       threshold=cfg["threshold"])
            sf[k, a] = f.mean(-1)
        save = np.unique(steps) * eta
        sol = integrate(_model(field, p, cfg), x0, (0.0, float(save[-1])), stepper="layer", dt=eta, saveat=save,
                        save_fn=lambda s, y: clustered_fraction(y, cfg["threshold"]))
        ours[a] = sol.observables["value"].mean(-1)[np.searchsorted(np.unique(steps), steps)].T
    data = {"fraction_sf": (("rule", "placement_sf", "beta_sf", "checkpoint"), sf),
            "fraction_ours": (("placement_sf", "beta_sf", "checkpoint"), ours),
            "steps_sf": ("checkpoint", steps)}
    coords = {"rule": list(RULES), "placement_sf": list(SF_PLACEMENTS), "beta_sf": betas,
              "checkpoint": np.linspace(0.0, sc["t1"], K)}
    return data, coords


def run(config: dict) -> xr.Dataset:
    rng = np.random.default_rng(config["seed"])
    data, coords = {}, {"placement": list(PLACEMENTS)}
    for part in (_equiangular, _heatmap, _compare):
        dv, cv = part(config, rng)
        data.update(dv)
        coords.update(cv)
    return xr.Dataset(data, coords=coords, attrs={
        "n_eq": config["eq"]["n"], "alpha": config["alpha"], "switch": config["switch"],
        "threshold": config["threshold"], "t_early": config["t_early"]})


from ._norm_speeds_report import DEVIATIONS, claims, plot  # noqa: E402,F401  (the figure, the claims, the deviations)
