"""GLPR Figure 4: metastability in low dimension -- a few clusters form fast, then merge very slowly.

(SA) with n = 32 particles on the circle S^1 (d = 2) at beta = 5, a point of the intermediate band
of the d = 2 phase diagram (GLPR Figure 3), from i.i.d. uniform initial points, over a long horizon
t in [0, 10^4] (log-spaced saving). Clusters: connected components of the graph linking particles
with <x_i, x_j> >= 1 - eps, eps = 1e-3 (the phase diagram's threshold; distance <= sqrt(2 eps)),
:func:`riemattn.analysis.diagnostics.cluster_count`. GLPR: "points are grouped in a finite number of
clusters ... a long-time metastable state where points are clustered into several groups but
eventually relax to a single cluster in long-time" (two time scales).

The ensemble (configurations, 32, 2) is one call of :func:`riemattn.integrate` (adaptive projected
Dormand-Prince on the tangent field; the long quasi-static plateaus are where adaptivity pays).

Claims checked, all paper claims (each fails under a deviation, ``DEVIATIONS``): a few (<= 4) clusters
form fast (median time <= 20); two time scales (median ratio time-to-one-cluster / time-to-a-few >=
100); after forming, clusters only merge (the count never rises); at least a quarter of the
configurations reach one cluster by t = 10^4. Deviations, of beta (the picture is that of the
intermediate band of the d = 2 phase diagram): beta = 1, below the band (the particles go straight to
one cluster: ratio ~ 1; run to t = 10^3); beta = 40, far above it (5 to 8 clusters persist: not a few), run to t =
10^3 only (the claim is about t <= 20); beta = 20 (the merging time grows exponentially with beta: no
configuration reaches one cluster by 10^4); and the counts read backwards in time (clusters split).

References
----------
Geshkovski, Letrouit, Polyanskiy, Rigollet, "A mathematical perspective on Transformers",
section 6.3, Figure 4, Problem 1.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from ..solvers.core.integrate import integrate
from ..dynamics.glpr import sa
from ..analysis.diagnostics import cluster_count
from ..runs.plotting import legend_below, plot_circle_angles, styled
from ._deviations import deviation
from ._verdict import claim

NAME = "glpr-fig4"
PAPER = "GLPR"
FIGURE = "Fig. 4"
DESCRIPTION = "metastability on S^1: 32 particles form a few clusters by t ~ 10, which merge only over t ~ 10^3-10^4"
ORDER = 65

FEW = 4  # "a few clusters"

#: long_name and units of data.nc's variables (see riemattn.runs._cf)
DATA_ATTRS = {
    "clusters": ("number of clusters (components of <x_i, x_j> >= 1 - eps)", "1"),
    "angle": ("particle angle theta_i(t) in (-pi, pi]", "rad"),
}


def config(quick: bool = False, *, smoke: bool = False) -> dict:
    """Seeded configuration; ``quick``/``smoke`` take fewer initial configurations."""
    base = {
        "seed": 7,
        "n": 32,
        "d": 2,
        "beta": 5.0,
        "eps": 1e-3,
        "t1": 1e4,
        "n_save": 121,
        "stepper": "dopri5",
        "rtol": 1e-7,
        "atol": 1e-9,
    }
    if smoke:
        return {**base, "configurations": 4}
    if quick:
        return {**base, "configurations": 8}
    return {**base, "configurations": 32}


def run(config: dict) -> xr.Dataset:
    rng = np.random.default_rng(config["seed"])
    n, d, m = config["n"], config["d"], config["configurations"]
    x0 = rng.standard_normal((m, n, d))
    x0 /= np.linalg.norm(x0, axis=-1, keepdims=True)
    t_save = np.concatenate([[0.0], np.geomspace(0.1, config["t1"], config["n_save"] - 1)])
    field = sa(config["beta"], d)
    sol = integrate(field, x0, (0.0, float(t_save[-1])), stepper=config["stepper"],
                    rtol=config["rtol"], atol=config["atol"], saveat=t_save)
    counts = cluster_count(sol.y, np.sqrt(2.0 * config["eps"]))  # (time, configuration)
    ds = xr.Dataset(
        {"clusters": (("time", "configuration"), counts)},
        coords={"time": sol.t},
        attrs={
            "n": n,
            "d": d,
            "beta": config["beta"],
            "eps": config["eps"],
            "nfev": int(sol.nfev),
            "success": int(sol.success),
        },
    )
    if d == 2:  # angles of every configuration, for the picture
        ds["angle"] = (
            ("time", "configuration", "particle"),
            np.arctan2(sol.y[..., 1], sol.y[..., 0]),
        )
    return ds


def _first_time(mask, t):
    """First t where mask (time, configuration) holds, per configuration; inf if never."""
    hit = mask.any(axis=0)
    return np.where(hit, t[np.argmax(mask, axis=0)], np.inf)


@styled
def plot(ds: xr.Dataset):
    import matplotlib.pyplot as plt

    t = ds.time.values
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    if "angle" in ds:
        ax = axes[0]
        ang = ds.angle.isel(configuration=0).values
        plot_circle_angles(ax, t[1:], ang[1:], logx=True)
        ax.set_xlabel("t")
        ax.set_ylabel("angle $\\theta_i(t)$ (unwrapped)")
        ax.set_title(f"one configuration: the {ang.shape[1]} angles")
    ax = axes[1]
    C = ds.clusters.values
    for k in range(C.shape[1]):
        ax.step(
            t[1:],
            C[1:, k] + 0.06 * (k - C.shape[1] / 2) / C.shape[1],
            where="post",
            color="0.6",
            lw=0.6,
        )
    # integer-valued statistics (a count some configuration has: no "1.5 clusters")
    lo, med, hi = np.quantile(C[1:], [0.1, 0.5, 0.9], axis=1, method="inverted_cdf")
    ax.fill_between(t[1:], lo, hi, step="post", color="C3", alpha=0.15, lw=0,
                    label="10%-90% of configurations")
    ax.step(t[1:], med, where="post", color="C3", lw=2, label="median (lower, a count)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_yticks([1, 2, 3, 4, 8, 16, 32])
    ax.set_yticklabels(["1", "2", "3", "4", "8", "16", "32"])
    ax.set_xlabel("t")
    ax.set_ylabel("number of clusters")
    ax.set_title(f"number of clusters ({C.shape[1]} configurations, gray: each)")
    legend_below(ax, ncol=2)
    fig.suptitle(
        f"GLPR Fig. 4: metastability, (SA) on $S^1$, n = {ds.attrs['n']}, $\\beta$ = {ds.attrs['beta']:g}"
    )
    return fig


def claims(ds: xr.Dataset) -> dict:
    t = ds.time.values
    C = ds.clusters.values
    t_few = _first_time(C <= FEW, t)
    t_one = _first_time(C <= 1, t)
    with np.errstate(divide="ignore", invalid="ignore"):  # t_few = 0: counts already few at t = 0
        ratio = np.minimum(t_one, t[-1]) / t_few  # never reaching one cluster counts as t1 (a lower bound)
    # after the few clusters have formed, clusters only merge: the count never increases
    after = t[:, None] >= t_few[None, :]
    rises = np.diff(C, axis=0) > 0
    rises_after = int(np.sum(rises & after[1:] & after[:-1]))
    return {
        "few_clusters_fast": claim(
            bool(np.median(t_few) <= 20.0), float(np.median(t_few)),
            f"median time at which the 32 particles sit in <= {FEW} clusters is <= 20"),
        "two_time_scales": claim(
            bool(np.median(ratio) >= 100.0), float(np.median(ratio)),
            "median over configurations of (time to one cluster) / (time to a few clusters) >= 100 (a metastable "
            "multi-cluster state lasting two decades or more; a configuration still split at t1 counts as reaching "
            "one cluster at t1, so the value is a lower bound)"),
        "only_merges_after_formation": claim(
            rises_after == 0, rises_after,
            "after reaching a few clusters the count never increases (clusters only merge)"),
        "eventually_one_cluster": claim(
            bool(np.mean(np.isfinite(t_one)) >= 0.25), float(np.mean(np.isfinite(t_one))),
            "at least a quarter of the configurations relax to a single cluster by t1 = 10^4"),
    }


def _beta(beta, t1=None):
    def change(cfg):
        cfg = {**cfg, "beta": beta}
        if t1 is not None:  # the same log spacing of the saved times, to an earlier end
            frac = np.log(t1 / 0.1) / np.log(cfg["t1"] / 0.1)
            cfg.update(t1=t1, n_save=1 + int(round((cfg["n_save"] - 1) * frac)))
        return cfg
    return change


def _counts_backwards(ds):
    """The cluster counts read backwards on the same time grid (merges become splits)."""
    return ds.assign(clusters=(ds.clusters.dims, ds.clusters.values[::-1]))


DEVIATIONS = (
    deviation("beta = 1", "two_time_scales",
              "below the intermediate band: the particles gather into one cluster directly (by t ~ 10), no "
              "metastable state (run to t = 10^3: that horizon still allows a ratio of 10^3 / t_few ~ 150, above the "
              "claim's 100)",
              config=_beta(1.0, 1e3)),
    deviation("beta = 40", "few_clusters_fast",
              "far above the band: 5 to 8 clusters form and persist, not a few (run to t = 10^3; the claim is about "
              "t <= 20)", config=_beta(40.0, 1e3)),
    deviation("beta = 20", "eventually_one_cluster",
              "the merging time grows exponentially with beta: no configuration reaches one cluster by t = 10^4",
              config=_beta(20.0)),
    deviation("counts read backwards in time", "only_merges_after_formation",
              "the counts reversed on the same time grid: clusters split instead of merging", data=_counts_backwards),
)
