"""Dynamic metastability: the energy staircase of 5 particles on S^1 at beta = 1000-4000.

Geshkovski, Koubbi, Polyanskiy, Rigollet (arXiv 2410.06833) close their paper with a staircase:
rescaled USA on the circle, n = 5 particles at the published initial angles
theta0 = (1/2) (0, 0.5, 2, 4, 7) log(2000) / sqrt(2000), the normalised energy
(1/n^2) sum_ij e^{beta (cos(theta_i - theta_j) - 1)} = 2 beta e^{-beta} E_beta plotted against a
rescaled time for several beta: plateaus at sum_c w_c^2 / n^2 (clusters of w_c particles) and
jumps at merges. Here:

1. **The staircase in the rescaled time s = e^beta t** for each beta, to the last merge
   (s ~ 1e132 at beta = 4000), with :func:`riemattn.integrate` and events: clusters are weighted
   particles and the clock follows them (``riemattn.experiments._staircase_model``); a merge event (single-linkage
   merge height down to ``tol``) gives each merge time.
2. **Claims derived and checked.** A merge of clusters of w_a and w_b particles raises the
   normalised energy by 2 w_a w_b / n^2 (the cross term goes from ~0 to 1). Two point clusters
   at gap delta close as d delta/ds = -((w_a + w_b)/n) e^{beta (cos delta - 1)} sin delta, so the
   merge time is s = (n/W) int_tol^delta e^{beta (1 - cos u)} / sin u du
   = e^{beta (1 - cos delta)} / (beta sin^2 delta) (n/W) (1 + o(1)): log s is linear in beta with
   slope 1 - cos delta (~ delta^2/2), delta the gap between the clusters' centroids at the start
   of the plateau (predicted from theta0 alone: closest pair first, merged at its centroid,
   which the flow conserves).
3. **The published curve.** The published code's final loop is a normalised-gradient Euler
   step of length lr log(beta) (lr = 1e-5) with an ad-hoc snap (pairs within 1e-3 set equal when
   the gradient norm is below 1e-5), plotted against lr x iteration: arclength / log(beta) of the
   path. riemattn's flow, reparametrised by its arclength tau (a row of the clock), gives the
   same curve; without the snap the published iteration stalls on the first plateau.
4. A check of the reduction: the plain 5-particle ``CircleField(1000, "usa", rescaled=True)``
   run in s (rodas4p) to s = 1e13 has the same energy at the plateau midpoints.

Paper claims (each fails under a deviation, ``DEVIATIONS``): the merge order predicted from theta0
(closest centroids first) -- a low-temperature statement: at beta = 100 and 200 the heavier cluster
swallows the particles one by one, (1,1), (2,1), (3,1), (4,1), instead; each plateau merge time
follows the two-cluster law, and log s + log beta is linear in beta with slope 1 - cos(gap) (both
fail with the beta axis read backwards); the published curve is the arclength flow (fails without
the published snap). Identities (implementation checks, never counted): the plateau levels sum
w_c^2 / n^2 (the reduction holds each cluster as one weighted point, so the level is that sum plus
cross terms e^{-beta (1 - cos gap)} < e^{-10}), and the reduction against the plain 5-particle run
(two solvers of one equation).

References
----------
B. Geshkovski, H. Koubbi, Y. Polyanskiy, P. Rigollet, "Dynamic metastability in the self-attention
model", arXiv 2410.06833 (2024), the staircase figure and its code (github
HugoKoubbi/2024-transformers-dotm, staircase.py). Geshkovski, Letrouit, Polyanskiy, Rigollet,
"A mathematical perspective on Transformers", eq. (7.1), (7.4).
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from .._backend import use_device
from ..dynamics.circle import CircleField
from ..runs.plotting import legend_below, styled
from ..solvers.core.integrate import integrate
from ._staircase_model import (greedy_merges, published_iteration, staircase,
                               two_cluster_log_time)
from ._deviations import deviation
from ._verdict import NOT_CHECKED, claim

NAME = "meta-staircase"
PAPER = "GKPR metastability"
FIGURE = "staircase"
DESCRIPTION = "energy staircase of 5 particles on S^1 at beta = 1000-4000: merges, plateau lengths, the published curve"
ORDER = 67

#: the published initial angles: 0.5 (0, 0.5, 2, 4, 7) log(2000) / sqrt(2000) (staircase.py)
THETA0 = (0.5 * np.array([0.0, 0.5, 2.0, 4.0, 7.0]) * np.log(2000.0) / np.sqrt(2000.0)).tolist()

DATA_ATTRS = {
    "beta": ("inverse temperature beta", "1"),
    "merge": ("merge index (1 = first)", "1"),
    "step": ("accepted step of the cluster-clock solve", "1"),
    "iteration": ("iteration of the published normalised-gradient loop", "1"),
    "merge_log_s": ("log of the rescaled time s = e^beta t of the merge", "1"),
    "merge_log_s_law": ("log of the two-cluster merge time (n/W) int_tol^gap e^{beta(1-cos u)}/sin u du", "1"),
    "merge_x": ("arclength / log(beta) of the path at the merge (the published x axis)", "1"),
    "w_a": ("particles in the first merging cluster", "1"),
    "w_b": ("particles in the second merging cluster", "1"),
    "gap_greedy": ("centroid gap of the merging clusters predicted from theta0 (closest pair first)", "1"),
    "log_s": ("log of the rescaled time at each accepted step (NaN: padding)", "1"),
    "x": ("arclength / log(beta) at each accepted step (NaN: padding)", "1"),
    "energy": ("normalised energy 2 beta e^{-beta} E_beta at each accepted step (NaN: padding)", "1"),
    "energy_published": ("normalised energy of the published iteration with its snap (NaN after full collapse)", "1"),
    "energy_published_nosnap": ("the same iteration without the snap", "1"),
    "plateau_energy": ("normalised energy at the geometric mean of consecutive merge times", "1"),
    "check_log_s": ("log s of the plateau midpoints of the full 5-particle check run", "1"),
    "check_energy_full": ("normalised energy of the plain 5-particle CircleField run there", "1"),
    "check_energy_clusters": ("normalised energy of the cluster-clock run there", "1"),
}


def config(quick: bool = False, *, smoke: bool = False) -> dict:
    """Seeded configuration (deterministic: the published initial angles); quick/smoke: fewer beta."""
    base = {"seed": 0, "theta0": THETA0, "betas": [1000.0, 1500.0, 2000.0, 3000.0, 4000.0], "tol": 1e-6,
            "stepper": "dopri5", "rtol": 1e-10, "atol": 1e-12, "lr": 1e-5, "iterations": 12000,
            "check_beta": 1000.0, "check_t1": 1e13}
    if smoke:
        return {**base, "betas": [1000.0, 4000.0]}
    if quick:
        return {**base, "betas": [1000.0, 2000.0, 4000.0]}
    return base


def _pad(arrays, fill=np.nan):
    m = max(len(a) for a in arrays)
    return np.stack([np.concatenate([a, np.full(m - len(a), fill)]) for a in arrays])


def _check_run(cfg, merges):
    """Plain 5-particle CircleField in s (rodas4p), energy at the plateau midpoints before t1."""
    beta = cfg["check_beta"]
    s = np.array([m["s"] for m in merges])
    mids = np.sqrt(s[:-1] * s[1:])
    mids = mids[mids < cfg["check_t1"]]
    field = CircleField(beta, "usa", rescaled=True)
    with use_device("cpu"):  # CircleField is NumPy code: on the host whatever `reproduce --device` says
        sol = integrate(field, np.asarray(cfg["theta0"])[:, None], (0.0, float(mids[-1])), "rodas4p",
                        rtol=1e-8, atol=1e-10, saveat=np.concatenate([[0.0], mids]), raise_on_failure=True)
    return mids, 2.0 * beta * field.energy(sol.y[1:, :, 0], rescaled=True)


def run(config: dict) -> xr.Dataset:
    th0, n, tol = np.asarray(config["theta0"]), len(config["theta0"]), config["tol"]
    betas = np.asarray(config["betas"], dtype=float)
    greedy = greedy_merges(th0)
    M = len(greedy)
    out = {k: np.full((len(betas), M), np.nan) for k in
           ("merge_log_s", "merge_log_s_law", "merge_x", "w_a", "w_b", "plateau_energy")}
    paths, pub, nosnap, check = [], [], [], None
    for i, beta in enumerate(betas):
        merges, path = staircase(th0, beta, tol=tol, stepper=config["stepper"], rtol=config["rtol"],
                                 atol=config["atol"])
        if len(merges) != M:
            raise RuntimeError(f"{len(merges)} merges at beta = {beta}, expected {M}")
        logs = np.log(np.maximum(path["s"], np.finfo(float).tiny))
        for k, (m, (_, _, gap)) in enumerate(zip(merges, greedy)):
            out["merge_log_s"][i, k] = np.log(m["s"])
            out["merge_x"][i, k] = m["tau"] / np.log(beta)
            out["w_a"][i, k], out["w_b"][i, k] = m["w_a"], m["w_b"]
            W = greedy[k][0] + greedy[k][1]
            out["merge_log_s_law"][i, k] = two_cluster_log_time(beta, gap, W, n, tol)
        ms = out["merge_log_s"][i]
        for k in range(M - 1):  # the energy on each plateau, at the geometric mean of its ends
            out["plateau_energy"][i, k] = np.interp(0.5 * (ms[k] + ms[k + 1]), logs, path["energy"])
        out["plateau_energy"][i, M - 1] = path["energy"][-1]
        paths.append((logs, path["tau"] / np.log(beta), path["energy"]))
        pub.append(published_iteration(th0, beta, config["lr"], config["iterations"]))
        nosnap.append(published_iteration(th0, beta, config["lr"], config["iterations"], snap=False))
        if beta == config["check_beta"]:
            mids, e_full = _check_run(config, merges)
            check = (np.log(mids), e_full, np.interp(np.log(mids), logs, path["energy"]))
    if check is None:
        check = (np.array([np.nan]),) * 3
    return xr.Dataset(
        {
            **{k: (("beta", "merge"), v) for k, v in out.items()},
            "gap_greedy": (("merge",), np.array([g for _, _, g in greedy])),
            "log_s": (("beta", "step"), _pad([p[0] for p in paths])),
            "x": (("beta", "step"), _pad([p[1] for p in paths])),
            "energy": (("beta", "step"), _pad([p[2] for p in paths])),
            "energy_published": (("beta", "iteration"), np.stack(pub)),
            "energy_published_nosnap": (("beta", "iteration"), np.stack(nosnap)),
            "check_log_s": (("check",), check[0]),
            "check_energy_full": (("check",), check[1]),
            "check_energy_clusters": (("check",), check[2]),
        },
        coords={"beta": betas, "merge": np.arange(1, M + 1)},
        attrs={"n": n, "tol": tol, "lr": config["lr"], "theta0": th0, "check_beta": config["check_beta"]},
    )


def _crossing(x, e, level):
    """First x where the energy e reaches ``level`` (NaN if never)."""
    hit = np.nonzero(e >= level)[0]
    return float(x[hit[0]]) if len(hit) else float("nan")


def _levels(ds):
    """Midpoints between consecutive plateau levels sum w^2 / n^2 (from the greedy merge weights)."""
    n = ds.attrs["n"]
    wa, wb = ds.w_a.values[0], ds.w_b.values[0]
    jumps = 2.0 * wa * wb / n**2
    before = 1.0 / n + np.concatenate([[0.0], np.cumsum(jumps)[:-1]])
    return before + 0.5 * jumps


@styled
def plot(ds: xr.Dataset):
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.6))
    betas = ds.beta.values
    lr = ds.attrs["lr"]
    for i, beta in enumerate(betas):
        c = f"C{i % 10}"
        ok = np.isfinite(ds.log_s.values[i])
        axes[0].plot(ds.log_s.values[i][ok] / np.log(10), ds.energy.values[i][ok], color=c, lw=1.3,
                     label=f"$\\beta$ = {beta:g}")
        axes[1].plot(ds.x.values[i][ok], ds.energy.values[i][ok], color=c, lw=2.2, alpha=0.5,
                     label=f"riemattn, $\\beta$ = {beta:g}")
        it = np.arange(1, ds.sizes["iteration"] + 1) * lr
        axes[1].plot(it, ds.energy_published.values[i], color=c, lw=0.9, ls="--")
        axes[1].plot(it, ds.energy_published_nosnap.values[i], color=c, lw=0.9, ls=":")
    axes[0].set_xlabel("$\\log_{10} s$  (rescaled time $s = e^{\\beta} t$)")
    axes[0].set_ylabel("$2\\beta e^{-\\beta} E_\\beta = \\frac{1}{n^2}\\sum_{ij} e^{\\beta(\\cos-1)}$")
    axes[0].set_title("staircase in log rescaled time")
    axes[0].set_xlim(-1, None)
    legend_below(axes[0], ncol=3)
    axes[1].set_xlabel("arclength / $\\log\\beta$  (the published x axis, lr $\\times$ iteration)")
    axes[1].set_title("riemattn (thick) vs published iteration (dashed; dotted: without its snap)")
    axes[1].set_xlim(0, np.nanmax(ds.x.values) * 1.1)
    ax = axes[2]
    for k in ds["merge"].values[1:]:
        c = f"C{k}"
        ax.plot(betas, ds.merge_log_s.sel(merge=k), "o", color=c, label=f"merge {k} (simulation)")
        ax.plot(betas, ds.merge_log_s_law.sel(merge=k), "-", color=c, lw=1,
                label=f"two-cluster law, gap {float(ds.gap_greedy.sel(merge=k)):.3f}")
    ax.set_xlabel("$\\beta$")
    ax.set_ylabel("$\\log s$ at the merge")
    ax.set_title("plateau lengths: log s linear in $\\beta$, slope $1 - \\cos\\delta$")
    legend_below(ax, ncol=2)
    fig.suptitle(f"Dynamic metastability (GKPR 2024): n = {ds.attrs['n']} particles on $S^1$, published "
                 "initial angles, rescaled USA")
    return fig


def claims(ds: xr.Dataset) -> dict:
    out = {}
    n = ds.attrs["n"]
    wa, wb = ds.w_a.values, ds.w_b.values
    pred = np.array([[a, b] for a, b, _ in greedy_merges(ds.attrs["theta0"])])
    same = bool(np.all(wa == pred[:, 0]) and np.all(wb == pred[:, 1]))
    out["merge_order_closest_pair_first"] = claim(
        same, {"w_a": wa.tolist(), "w_b": wb.tolist(), "predicted": pred.tolist()},
        "at every beta the clusters merge in the order predicted from theta0 alone (closest centroids first, merged "
        "at their weighted centroid, which the flow conserves): (w_a, w_b) of each merge equal the prediction")
    # plateau levels sum w^2 / n^2, so that each merge raises the energy by 2 w_a w_b / n^2
    levels = 1.0 / n + np.cumsum(2.0 * wa * wb / n**2, axis=1)
    dev = float(np.nanmax(np.abs(ds.plateau_energy.values[:, 1:] - levels[:, 1:])))
    # from the second plateau on: the cross terms left there are e^{-beta (1 - cos gap)} <= e^{-10} at beta >= 1000
    out["energy_jump_2_wa_wb_over_n2"] = claim(
        dev < 1e-4, dev,
        "identity: the normalised energy 2 beta e^{-beta} E_beta on each plateau (from the second on; the last: at "
        "the end) equals sum_c w_c^2 / n^2, so each merge of w_a and w_b particles raises it by 2 w_a w_b / n^2 (to "
        "1e-4) -- the reduction holds each cluster as one weighted point, so the level is that sum plus cross terms "
        "e^{-beta (1 - cos gap)} < e^{-10}", kind="identity")
    # merge times against the two-cluster law (plateau merges k >= 2)
    sim, law = ds.merge_log_s.values[:, 1:], ds.merge_log_s_law.values[:, 1:]
    rel = float(np.max(np.abs(sim - law) / law))
    out["merge_time_two_cluster_law"] = claim(
        rel < 5e-3, {"max_relative_error_log_s": rel, "log_s": sim.tolist(), "law": law.tolist()},
        "log of each plateau merge time equals the two-cluster law log((n/W) int_tol^gap e^{beta(1-cos u)}/sin u du), "
        "gap predicted from theta0, to 0.5% (the law neglects the other clusters' pull, relative "
        "e^{-beta (cos gap - cos gap')}: 1e-3 at beta = 1000, shrinking with beta)")
    betas = ds.beta.values
    if len(betas) < 2:
        out["log_plateau_linear_in_beta"] = claim(NOT_CHECKED, None, "slope of log s vs beta",
                                                  reason="one beta: no slope")
    else:
        slopes = np.polyfit(betas, (sim + np.log(betas)[:, None]), 1)[0]
        theory = 1.0 - np.cos(ds.gap_greedy.values[1:])
        rel_slope = float(np.max(np.abs(slopes / theory - 1.0)))
        out["log_plateau_linear_in_beta"] = claim(
            rel_slope < 0.02, {"slopes": slopes.tolist(), "1 - cos gap": theory.tolist(), "max_relative": rel_slope},
            "log s_merge + log beta is linear in beta with slope 1 - cos(gap) (~ gap^2 / 2) for each plateau merge, "
            "fitted over the betas, to 2% (the next term, log(n / (W sin^2 gap)), does not depend on beta)")
    # the published curve: x of each merge (energy crossing the midpoint between plateau levels)
    lr, levels_mid = ds.attrs["lr"], _levels(ds)
    it = np.arange(1, ds.sizes["iteration"] + 1) * lr
    diffs, stalls = [], []
    for i, beta in enumerate(betas):
        x_r, e_r = ds.x.values[i], ds.energy.values[i]
        ok = np.isfinite(x_r)
        for lev in levels_mid:
            diffs.append(_crossing(it, ds.energy_published.values[i], lev) - _crossing(x_r[ok], e_r[ok], lev))
        stalls.append(float(np.nanmax(ds.energy_published_nosnap.values[i])))
    diffs = np.array(diffs)
    worst = float(np.max(np.abs(diffs))) if np.all(np.isfinite(diffs)) else float("inf")
    # Euler steps of length lr log beta (O(lr) in x per merge) plus the snaps' jumps (< 1e-3 / log beta each)
    out["published_curve_is_arclength_flow"] = claim(
        worst < 5e-4, {"max_abs_dx": worst, "dx": diffs.tolist()},
        "the published iteration's x (= lr x iteration) at each merge (energy crossing the midpoint between plateau "
        "levels) equals riemattn's arclength / log(beta) of the rescaled flow there, to 5e-4 (50 iterations; plateaus "
        "are >= 0.015 long): the published 'rescaled time' is the arclength of the gradient path over log(beta)")
    out["published_snap_needed"] = claim(
        None, stalls,
        "highest normalised energy reached by the published iteration without its snap, per beta (the full run "
        "reaches 1)", kind="observation",
        observed="without the snap the fixed-length normalised steps chatter inside the first collapsed cluster: "
                 "the curve stops at the first or second plateau")
    e_full, e_cl = ds.check_energy_full.values, ds.check_energy_clusters.values
    gap = float(np.max(np.abs(e_full - e_cl))) if np.all(np.isfinite(e_full)) else float("nan")
    if np.isfinite(gap):
        out["clusters_match_full_circle_run"] = claim(
            gap < 1e-6, {"max_abs": gap, "log_s": ds.check_log_s.values.tolist()},
            f"identity (two solvers of one equation): the plain 5-particle CircleField({ds.attrs['check_beta']:g}, "
            "'usa', rescaled=True) run in s (rodas4p, rtol 1e-8) has the cluster-clock run's energy at every plateau "
            "midpoint before s = 1e13, to 1e-6", kind="identity")
    return out


def _beta_reversed(ds):
    return ds.assign(merge_log_s=(ds.merge_log_s.dims, ds.merge_log_s.values[::-1].copy()))


DEVIATIONS = (
    deviation("beta = 100, 200 (above the low temperature)", "merge_order_closest_pair_first",
              "the staircase at beta = 100 and 200 (200 published iterations, no check run): the cluster weights "
              "outweigh the gaps and the heavier cluster swallows the particles one by one",
              config=lambda cfg: {**cfg, "betas": [100.0, 200.0], "iterations": 200}),
    deviation("beta axis reversed", ("merge_time_two_cluster_law", "log_plateau_linear_in_beta"),
              "the simulated merge times assigned to the betas in reverse order", data=_beta_reversed),
    deviation("published iteration without its snap", "published_curve_is_arclength_flow",
              "the published curve replaced by the same iteration without its snap (pairs within 1e-3 set equal): "
              "it chatters inside the first collapsed cluster and never reaches the later merges",
              data=lambda ds: ds.assign(energy_published=ds.energy_published_nosnap.copy())),
)
