"""norm-speeds: the figure and the claims (the runs are in :mod:`riemattn.experiments.norm_speeds`)."""

from __future__ import annotations

import numpy as np
import xarray as xr

from ..runs.plotting import legend_below, styled
from ._deviations import deviation
from ._verdict import claim

#: the equiangular ODE and the tokens agree to this (both solved far tighter; see the claim)
MATCH_TOL = 1e-8
#: the gap 1 - rho is measured for decay laws where it lies in this window (far from rounding and
#: from the early transient)
GAP_WINDOW = (1e-10, 1e-2)


def _gap(ds, p):
    return 1.0 - ds.rho_simulated.sel(placement=p)


def exponential_rate(gap, t, window=GAP_WINDOW):
    """-d log(gap)/dt fitted (least squares) where the gap lies in ``window``, per row of ``gap``."""
    out = []
    for g in np.atleast_2d(gap):
        keep = (g > window[0]) & (g < window[1])
        out.append(float(-np.polyfit(t[keep], np.log(g[keep]), 1)[0]) if keep.sum() >= 3 else np.nan)
    return np.array(out)


def radius_exponent(gap, r):
    """d log(gap) / d log(r) over the last saved interval, per row (-2: gap ~ r^-2)."""
    g, r = np.atleast_2d(gap), np.atleast_2d(r)
    with np.errstate(divide="ignore", invalid="ignore"):  # a gap of 0 (collapsed) gives -inf or nan: no power law
        return np.log(g[:, -1] / g[:, -2]) / np.log(r[:, -1] / r[:, -2])


def claims(ds: xr.Dataset) -> dict:
    out = {}
    rel_r = float(np.max(np.abs(ds.r_simulated - ds.r_ode) / ds.r_ode))
    err_rho = float(np.max(np.abs(ds.rho_simulated - ds.rho_ode)))
    spread = float(max(ds.rho_spread.max(), (ds.r_spread / ds.r_simulated).max()))
    out["equiangular_reduction_matches_tokens"] = claim(
        err_rho < MATCH_TOL and rel_r < MATCH_TOL and spread < MATCH_TOL,
        {"max |rho_sim - rho_ode|": err_rho, "max |r_sim - r_ode| / r": rel_r, "max spread": spread},
        f"identity: every placement keeps n = {ds.attrs['n_eq']} orthogonal tokens equiangular with one radius, and "
        f"(rho, r) follow the scalar ODE of docs/theory/layernorm.md to {MATCH_TOL:g} (DOP853 vs the tokens) -- the "
        "symmetric start forces equiangularity and the ODE is the model restricted to it: checks the package's "
        "placements against their reduction", kind="identity")
    te = float(ds.attrs["t_early"])
    early = ds.rho_simulated.sel(time_eq=te)
    others = early.drop_sel(placement="peri")
    ahead = bool((early.sel(placement="peri") > others.max("placement")).all())
    out["peri_fastest_early"] = claim(
        ahead, {str(p): early.sel(placement=p).values.round(6).tolist() for p in early.placement.values},
        f"at t = {te:g} Peri-LN's rho is the largest of the five at every beta (speed factor 1/(r |A|) with "
        "|A| < 1 for spread-out tokens, against 1, 1/r and alpha/|A|)")
    t = ds.time_eq.values
    rates = {p: exponential_rate(_gap(ds, p).values, t) for p in ("post", "ngpt")}
    want = {"post": 2.0, "ngpt": 2.0 * float(ds.attrs["alpha"])}
    ok = all(np.all(np.abs(rates[p] / want[p] - 1.0) < 0.1) for p in rates)
    out["post_ngpt_collapse_exponentially"] = claim(
        ok, {p: rates[p].round(4).tolist() for p in rates},
        "the gap 1 - rho of Post-LN and nGPT decays exponentially, at the rates 2 and 2 alpha of the "
        f"reduction (fit of log(1 - rho) where it lies in {GAP_WINDOW}; within 10%)")
    expo = {p: radius_exponent(_gap(ds, p).values, ds.r_simulated.sel(placement=p).values)
            for p in ("pre", "peri", "mix")}
    late_gap = {p: float(_gap(ds, p).isel(time_eq=-1).min()) for p in ("pre", "peri")}
    ok = all(np.all(np.abs(expo[p] + 2.0) < 0.5) for p in expo) and min(late_gap.values()) > 1e-5
    out["pre_peri_resist_collapse"] = claim(
        ok, {"d log(1-rho)/d log r at t1": {p: expo[p].round(3).tolist() for p in expo},
             "min gap at t1": late_gap},
        "Pre-LN, Peri-LN (and Mix-LN after its switch) only close the gap like r^-2 ~ t^-2 (exponent "
        "d log(1 - rho)/d log r at t1 within 0.5 of -2, tending to -2; gap at t1 > 1e-5)")
    last = ds.fraction.isel(time=-1).mean("beta")
    margin = float(last.sel(placement="post") - max(last.sel(placement="pre"), last.sel(placement="peri")))
    out["heatmap_post_collapses_pre_peri_resist"] = claim(
        margin > 0.3, {str(p): round(float(last.sel(placement=p)), 4) for p in last.placement.values},
        "heat maps: at the last time the beta-averaged fraction of clustered pairs of Post-LN exceeds "
        "Pre-LN's and Peri-LN's by more than 0.3")
    d = np.abs(ds.fraction_ours - ds.fraction_sf)
    post = float(d.sel(rule="simuformer", placement_sf="post").max())
    out["matches_simuformer_post"] = claim(
        post < 1e-12, post,
        "identity: on the shared small case Post-LN's heat map equals the one simuformer's update draws (same "
        "block N(x + h A), same statistic and checkpoints): the authors' code and ours compute the same "
        "numbers, an implementation check", kind="identity")
    out["simuformer_differences"] = claim(
        None, {f"{rule}/{p}": round(float(d.sel(rule=rule, placement_sf=p).max()), 4)
               for rule in d.rule.values for p in d.placement_sf.values},
        "max |our fraction - simuformer's| per rule and placement: nGPT differs by its block (simuformer "
        "N(x + alpha h N(A)) is ours with alpha/(1 - alpha h)); Pre-/Peri-LN by simuformer's radius rule "
        "r' = r sum_k A_k, which with r' = <theta, A> ('model-radius') agrees up to the O(h) difference "
        "of two first-order blocks", kind="observation")
    return out


def swap_placements(ds, a="post", b="peri"):
    """``ds`` with the data of placements ``a`` and ``b`` exchanged (labels kept)."""
    names = list(ds.placement.values)
    perm = list(range(len(names)))
    i, j = names.index(a), names.index(b)
    perm[i], perm[j] = j, i
    return ds.isel(placement=perm).assign_coords(placement=names)


def _backwards(*names):
    def f(ds):
        for v in names:
            ds[v] = (ds[v].dims, ds[v].values[..., ::-1])
        return ds
    return f


def _small(alpha):
    """nGPT's alpha changed, on a configuration cut to what the early-time claim reads (t <= 1)."""
    def f(cfg):
        cfg = {**cfg, "alpha": alpha}
        cfg["eq"] = {**cfg["eq"], "t1": 1.0, "n_save": 5}
        cfg["heat"] = {**cfg["heat"], "n_beta": 2, "configurations": 1, "t1": 1.0}
        cfg["sf"] = {**cfg["sf"], "configurations": 1, "betas": [5.0], "t1": 1.0, "checkpoints": 3}
        return cfg
    return f


DEVIATIONS = (
    deviation("Post-LN and Peri-LN exchanged", ("peri_fastest_early", "post_ngpt_collapse_exponentially",
                                                "pre_peri_resist_collapse", "heatmap_post_collapses_pre_peri_resist"),
              "the runs of Post-LN and Peri-LN attributed to each other (equiangular runs and heat maps): the "
              "fastest early placement and the one that collapses would then be the other",
              data=swap_placements),
    deviation("equiangular runs read backwards", ("peri_fastest_early", "post_ngpt_collapse_exponentially",
                                                  "pre_peri_resist_collapse"),
              "the token simulation's rho and r read from t1 down to 0 (the ODE kept): the gaps grow",
              data=_backwards("rho_simulated", "r_simulated", "rho_spread", "r_spread")),
    deviation("heat maps read backwards", "heatmap_post_collapses_pre_peri_resist",
              "the clustered fractions read from the last time down to 0: nothing has clustered at the end",
              data=_backwards("fraction")),
    deviation("nGPT alpha = 5", "peri_fastest_early",
              "nGPT's factor alpha raised from 0.2 to 5: its speed alpha/|A| then exceeds Peri-LN's 1/(r |A|) "
              "(the configuration cut to t <= 1, what the early-time claim reads)",
              config=_small(5.0)),
)


@styled
def plot(ds: xr.Dataset):
    import matplotlib.pyplot as plt

    places = list(ds.placement.values)
    fig = plt.figure(figsize=(4.0 * len(places), 8.0), layout="constrained")
    top = fig.subfigures(2, 1, height_ratios=[1.0, 1.0])
    ax = top[0].subplots(1, 4)
    b = int(np.argmin(np.abs(ds.beta_eq.values - 1.0)))
    t = ds.time_eq.values
    for k, p in enumerate(places):
        gap = np.maximum(_gap(ds, p).isel(beta_eq=b).values, 1e-17)
        ax[0].loglog(t[1:], np.maximum(1.0 - ds.rho_ode.sel(placement=p).isel(beta_eq=b).values[1:], 1e-17),
                     color=f"C{k}", lw=1.2, label=p)
        ax[0].loglog(t[1::4], gap[1::4], "o", color=f"C{k}", ms=2.5)
        ax[1].plot(t, ds.r_ode.sel(placement=p).isel(beta_eq=b), color=f"C{k}", label=p)
    ax[0].set_ylim(1e-12, 2)
    ax[0].set(xlabel="t", ylabel="$1 - \\rho$", title=f"equiangular, $\\beta$ = {float(ds.beta_eq[b]):g}: ODE, tokens (dots)")
    ax[1].set(xlabel="t", ylabel="r", title="common radius r(t)")
    legend_below(ax[0], ncol=5)
    err = np.abs(ds.rho_simulated - ds.rho_ode).max("beta_eq")
    for k, p in enumerate(places):
        ax[2].semilogy(t, np.maximum(err.sel(placement=p), 1e-17), color=f"C{k}", label=p)
    ax[2].set(xlabel="t", title="max over $\\beta$ |$\\rho$ tokens - $\\rho$ ODE|")
    tc = ds.checkpoint.values
    for k, p in enumerate(ds.placement_sf.values):
        c = f"C{places.index(p)}"
        ax[3].plot(tc, ds.fraction_ours.sel(placement_sf=p).mean("beta_sf"), color=c, label=f"{p}: ours")
        ax[3].plot(tc, ds.fraction_sf.sel(placement_sf=p, rule="simuformer").mean("beta_sf"), "--", color=c,
                   label=f"{p}: simuformer")
        ax[3].plot(tc, ds.fraction_sf.sel(placement_sf=p, rule="model-radius").mean("beta_sf"), ":", color=c)
    ax[3].set(xlabel="t", ylabel="clustered fraction (mean over $\\beta$)",
              title="vs simuformer (dotted: its r' replaced by <$\\theta$, A>)")
    legend_below(ax[3], ncol=2, fontsize=7)
    hm = top[1].subplots(1, len(places), sharey=True)
    for a, p in zip(hm, places):
        mesh = a.pcolormesh(ds.time, ds.beta, ds.fraction.sel(placement=p), cmap="viridis", vmin=0, vmax=1,
                            shading="nearest", rasterized=True)
        a.set(xlabel="t", title=f"{p}: pairs with <$\\theta_i, \\theta_j$> > {ds.attrs['threshold']:g}")
    hm[0].set_ylabel("$\\beta$")
    top[1].colorbar(mesh, ax=list(hm), shrink=0.9, label="fraction of clustered pairs")
    fig.suptitle("Normalization as speed regulation (Karagodin, Ge, Polyanskiy, Rigollet)")
    return fig
