"""Causal attention on the circle: n = 200 tokens at beta = 64, clusters over time, consensus at x_1(0),
early clusters against Rényi centres.

Karagodin, Polyanskiy, Rigollet, "Clustering in causal attention masking" (NeurIPS 2024, arXiv
2411.04990), Figure 2: the causal self-attention system (CSA) with Q = K = V = I on S^1,

    dx_k/dt = P_{x_k}^perp ( (1/Z_k) sum_{j <= k} e^{beta <x_k, x_j>} x_j ),  Z_k = sum_{j <= k} e^{beta <x_k, x_j>},

i.e. SA normalisation (softmax over the visible tokens; ``riemattn.sa(beta, 2, mask="causal")``),
n = 200 i.i.d. uniform tokens, beta = 64, and Rényi centres with delta = 4 beta^{-1/2}
(definitions in ``riemattn.experiments._causal``). Solved in angles
(:class:`~riemattn.dynamics.circle.CircleField` with ``mask="causal"``, the same equations; one
configuration is also solved on the sphere with the attention field as a check). Checked:

1. **Token 1 does not move** (it attends only to itself; docs/theory, ICML Theorem 4.2): its angle
   never changes beyond the rounding of the dense output, in both forms.
2. **Consensus at x_1(0)** (their Theorem 4.1 for V = I): every token ends within 1e-8 of x_1(0).
   At beta = 64 this takes t ~ 1e40-1e60: the last cluster waits e^{beta (1 - cos phi)} for a gap
   phi ~ 2-3 rad. Reached with the stiff ``"rodas4p"`` (closed-form Jacobian) over t in [0, 1e80],
   restarted in local time where float64 time cannot resolve a merge (``_causal.solve_restarting``).
3. **The final merge time** equals that of the two-cluster leader ODE (``_causal.leader_merge_time``,
   a scalar quadrature) started at the merge to two clusters.
4. **Staircase**: from t_early on, the cluster count never increases and holds at least three levels
   each over a factor >= 10 in time, down to 1.
5. **Early clusters = Rényi centres**: at t_early (after the in-cluster collapse, rate ~1) the number
   of clusters C is within 1 of the number R of Rényi centres for at least 2/3 of the configurations,
   and |mean(C - R)| <= 1. The strong Rényi centres (fewer) are reported against later counts.

Clusters: single linkage at chord distance ``tol`` (``riemattn.diagnostics.cluster_count``).

Kinds: claim 1 is an identity (an implementation check, never counted for the verdict): token 1's
velocity is the projection of x_1 onto its own tangent space, exactly 0 for any beta and any
data. Claims 2-5 are paper claims; each fails under a deviation (``DEVIATIONS``): the saved states
read backwards in time (2, 4, 5: the last state is the uniform start, the counts grow, the clusters
at t_early are the initial scatter) and the leader ODE solved at beta / 2 (3: the merge time is
e^{beta (1 - cos phi)}-sensitive, so the prediction at another temperature misses it).
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from .._backend import use_device
from ..analysis.diagnostics import cluster_count
from ..dynamics.circle import CircleField, from_points, to_points, wrap
from ..dynamics.glpr import sa
from ..runs.plotting import legend_below, styled
from ..solvers.core.integrate import integrate
from ._causal import leader_merge_time, renyi_centres, solve_restarting
from ._deviations import deviation
from ._verdict import claim

NAME = "causal-clusters"
PAPER = "KPR"
FIGURE = "Fig. 2, Thm. 4.1"
DESCRIPTION = "causal attention on S^1 (n = 200, beta = 64): staircase of clusters, consensus at x_1(0), Rényi centres"
ORDER = 67

DATA_ATTRS = {
    "t_save": ("saved times of the long runs", "1"),
    "count_time": ("times at which the clusters of the Rényi configurations are counted", "1"),
    "count": ("number of clusters after a merge (events merge_to_<count>)", "1"),
    "theta": ("angle of each token (long runs, unwrapped)", "rad"),
    "clusters": ("number of clusters (single linkage at chord distance tol), long runs", "1"),
    "distance_to_x1": ("max_k |x_k(t) - x_1(0)| (long runs)", "1"),
    "merge_time": ("time at which the cluster count first drops to `count` (NaN: not by t1)", "1"),
    "leader_time": ("final merge time predicted by the two-cluster leader ODE (quadrature)", "1"),
    "theta_two": ("angles at the merge to two clusters, where the leader ODE starts (NaN: no such merge)", "rad"),
    "segments": ("integration segments (restarts in local time + 1)", "1"),
    "renyi": ("number of Rényi centres, delta = c beta^-1/2", "1"),
    "strong_renyi": ("number of strong Rényi centres", "1"),
    "clusters_at": ("number of clusters of the Rényi configurations at count_time", "1"),
}


def config(quick: bool = False, *, smoke: bool = False) -> dict:
    """Seeded configuration; ``quick``/``smoke``: fewer configurations."""
    base = {"seed": 2411, "n": 200, "beta": 64.0, "delta_factor": 4.0, "tol": 0.05, "t_early": 30.0,
            "count_times": [0.0, 1.0, 3.0, 10.0, 30.0, 100.0, 300.0, 1000.0], "renyi_configurations": 64,
            "long_configurations": 6, "t1": 1e80, "n_save": 161, "stepper": "rodas4p", "rtol": 1e-6,
            "atol": 1e-9, "counts": list(range(1, 13)), "sphere_check_t": 30.0}
    if smoke:  # the test suite's size: 64 tokens (5 s of CPU; 200 tokens took 124 s)
        return {**base, "n": 64, "renyi_configurations": 6, "long_configurations": 1,
                "count_times": [0.0, 10.0, 30.0], "n_save": 61}
    if quick:
        return {**base, "renyi_configurations": 12, "long_configurations": 1,
                "count_times": [0.0, 3.0, 10.0, 30.0, 100.0], "n_save": 81}
    return base


def _initial(cfg):
    rng = np.random.default_rng(cfg["seed"])
    m = max(cfg["renyi_configurations"], cfg["long_configurations"])
    return rng.uniform(-np.pi, np.pi, (m, cfg["n"]))


def _renyi_part(cfg, theta0):
    th = theta0[: cfg["renyi_configurations"]]
    delta = cfg["delta_factor"] / np.sqrt(cfg["beta"])
    R = np.array([len(renyi_centres(row, delta)) for row in th])
    SR = np.array([len(renyi_centres(row, delta, strong=True)) for row in th])
    times = np.asarray(cfg["count_times"], dtype=float)
    with use_device("cpu"):  # CircleField is NumPy code: on the host whatever `reproduce --device` says
        sol = integrate(CircleField(cfg["beta"], mask="causal"), th[..., None], (0.0, float(times[-1])), "auto",
                        rtol=cfg["rtol"], atol=cfg["atol"], saveat=times)
    C = cluster_count(to_points(sol.y[..., 0]), cfg["tol"])  # (count_time, configuration)
    return R, SR, C


def _long_part(cfg, theta0):
    m, n, beta = cfg["long_configurations"], cfg["n"], cfg["beta"]
    t_save = np.concatenate([[0.0], np.geomspace(1e-2, cfg["t1"], cfg["n_save"] - 1)])
    field = CircleField(beta, mask="causal")
    counts = list(cfg["counts"])
    theta = np.full((len(t_save), m, n), np.nan)
    merge_t = np.full((m, len(counts)), np.nan)
    leader = np.full(m, np.nan)
    two = np.full((m, n), np.nan)
    segments = np.zeros(m, dtype=int)
    for k in range(m):
        out, merges, stats = solve_restarting(field, theta0[k], t_save, stepper=cfg["stepper"], rtol=cfg["rtol"],
                                              atol=cfg["atol"], tol=cfg["tol"], counts=counts)
        theta[:, k], segments[k] = out, stats["segments"]
        for j, c in enumerate(counts):
            if c in merges:
                merge_t[k, j] = merges[c][0]
        if 2 in merges and 1 in merges and merges[1][0] > merges[2][0]:  # a two-cluster plateau
            T, _, _ = leader_merge_time(merges[2][1], beta, cfg["tol"])
            leader[k] = merges[2][0] + T
            two[k] = merges[2][1]
    return t_save, theta, merge_t, leader, segments, two


def _sphere_check(cfg, theta0):
    """Configuration 0 on the sphere with the attention field to ``sphere_check_t``: its token 1
    drift and its largest angle difference from the angle form (tight tolerances)."""
    t1 = float(cfg["sphere_check_t"])
    x0 = to_points(theta0[0])
    ys = integrate(sa(cfg["beta"], 2, mask="causal"), x0, (0.0, t1), "dopri5", rtol=1e-10, atol=1e-12, saveat=[0.0, t1])
    with use_device("cpu"):  # CircleField is NumPy code (the sphere run above may be on a device)
        ya = integrate(CircleField(cfg["beta"], mask="causal"), theta0[0][:, None], (0.0, t1), "dopri5",
                       rtol=1e-10, atol=1e-12, saveat=[0.0, t1])
    drift = float(np.max(np.abs(ys.y[:, 0] - x0[0])))
    diff = float(np.max(np.abs(wrap(from_points(ys.y[-1]) - ya.y[-1, :, 0]))))
    return drift, diff


def run(config: dict) -> xr.Dataset:
    theta0 = _initial(config)
    R, SR, C = _renyi_part(config, theta0)
    t_save, theta, merge_t, leader, segments, two = _long_part(config, theta0)
    ok = np.isfinite(theta).all(axis=-1)
    pts = to_points(np.where(np.isfinite(theta), theta, 0.0))
    # one saved time at a time: cluster_count builds an (l, l, 2) array per configuration
    clusters = np.where(ok, np.stack([cluster_count(p, config["tol"]) for p in pts]), -1)
    x1 = to_points(theta0[: config["long_configurations"], :1])  # (configuration, 1, 2)
    dist = np.where(ok, np.max(np.linalg.norm(pts - x1, axis=-1), axis=-1), np.nan)
    drift_sphere, sphere_vs_angles = _sphere_check(config, theta0)
    return xr.Dataset(
        {
            "theta": (("t_save", "configuration", "token"), theta),
            "clusters": (("t_save", "configuration"), clusters),
            "distance_to_x1": (("t_save", "configuration"), dist),
            "merge_time": (("configuration", "count"), merge_t),
            "leader_time": (("configuration",), leader),
            "theta_two": (("configuration", "token"), two),
            "segments": (("configuration",), segments),
            "renyi": (("renyi_configuration",), R),
            "strong_renyi": (("renyi_configuration",), SR),
            "clusters_at": (("count_time", "renyi_configuration"), C),
        },
        coords={"t_save": t_save, "count": list(config["counts"]), "count_time": list(config["count_times"])},
        attrs={"n": config["n"], "beta": config["beta"], "tol": config["tol"], "t1": config["t1"],
               "t_early": config["t_early"], "delta": config["delta_factor"] / np.sqrt(config["beta"]),
               "theta1_0": float(theta0[0, 0]), "sphere_token1_drift": drift_sphere,
               "sphere_vs_angles": sphere_vs_angles, "sphere_check_t": config["sphere_check_t"],
               "rtol": config["rtol"], "stepper": config["stepper"]},
    )


def _levels(t, c, t_early):
    """(level, first time, last time) of the runs of equal counts from t_early on."""
    keep = (t >= t_early) & (c > 0)
    t, c = t[keep], c[keep]
    out, start = [], 0
    for i in range(1, len(c) + 1):
        if i == len(c) or c[i] != c[start]:
            out.append((int(c[start]), float(t[start]), float(t[i - 1])))
            start = i
    return out


def claims(ds: xr.Dataset) -> dict:
    out = {}
    th = ds.theta.values
    eps = np.finfo(float).eps
    drift = float(np.nanmax(np.abs(th[:, :, 0] - th[0, :, 0])))
    sphere = float(ds.attrs["sphere_token1_drift"])
    # the field at token 1 is exactly 0 in angles; only the dense output's interpolation formula
    # (a few roundings of |theta| <= pi) and, on the sphere, the projection/retraction of each step
    # (rounding ~eps per step, a few hundred steps) can move it
    ok = drift <= 8 * eps * np.pi and sphere <= 1e-13
    out["first_token_fixed"] = claim(
        ok, {"angles_max_drift": drift, "sphere_max_drift": sphere},
        "identity: token 1 attends only to itself, so its velocity P_x1^perp(x_1) is exactly 0 (for any beta and "
        "data): its angle changes by <= 8 eps pi (dense-output rounding) over every long run, and on the sphere "
        f"(attention field, mask='causal', dopri5 to t = {ds.attrs['sphere_check_t']:g}) |x_1(t) - x_1(0)| <= 1e-13",
        kind="identity")
    final = ds.distance_to_x1.values[-1]
    t_one = ds.merge_time.sel(count=1).values
    out["consensus_at_first_token"] = claim(
        bool(np.all(final <= 1e-8)), {"final_distance": final.tolist(), "consensus_time": t_one.tolist(),
                                       "t1": float(ds.attrs["t1"])},
        "Theorem 4.1 (V = I): every token converges to x_1(0): max_k |x_k(t1) - x_1(0)| <= 1e-8 in every long "
        f"run (t1 = {ds.attrs['t1']:g}); consensus_time is the merge to one cluster")
    pred, sim = ds.leader_time.values, t_one
    have = np.isfinite(pred) & np.isfinite(sim)
    rel = np.abs(pred[have] / sim[have] - 1.0)
    # the merge time depends on the leader's angle phi like e^{beta (1 - cos phi)}: a relative error
    # of beta sin(phi) |d phi| ~ 64 x (solver error ~ rtol x steps) ~ 1e-5 at rtol 1e-6 (measured 7e-6)
    out["final_merge_matches_leader_ode"] = claim(
        bool(have.any() and np.all(rel <= 1e-4)), {"relative_error": rel.tolist(), "predicted": pred.tolist(),
                                                   "simulated": sim.tolist()},
        "derived: with two clusters left, the first token of the far cluster obeys a scalar ODE (only tokens "
        "of token 1's cluster precede it); its quadrature from the merge to two clusters predicts the final "
        "merge time of the 200-token solve to relative error <= 1e-4 in every long run with a two-cluster "
        "plateau", kind="paper" if have.any() else "observation")
    t = ds.t_save.values
    t_early = float(ds.attrs["t_early"])
    stair = []
    for k in range(th.shape[1]):
        c = ds.clusters.values[:, k]
        late = c[(t >= t_early) & (c > 0)]
        levels = _levels(t, c, t_early)
        long = [lv for lv, a, b in levels if b >= 10.0 * a and a > 0]
        stair.append({"non_increasing": bool(np.all(np.diff(late) <= 0)), "ends_at_one": bool(late[-1] == 1),
                      "levels_over_a_decade": long})
    out["staircase"] = claim(
        all(s["non_increasing"] and s["ends_at_one"] and len(s["levels_over_a_decade"]) >= 3 for s in stair), stair,
        f"from t_early = {t_early:g} the cluster count never increases on the saved grid, ends at 1, and holds at "
        "least three levels each over a factor >= 10 in time (metastable plateaus between merges)")
    R, SR = ds.renyi.values, ds.strong_renyi.values
    C = ds.clusters_at.sel(count_time=t_early).values
    d = C - R
    within = float(np.mean(np.abs(d) <= 1))
    out["early_clusters_match_renyi_centres"] = claim(
        within >= 2.0 / 3.0 and abs(float(np.mean(d))) <= 1.0,
        {"fraction_within_1": within, "mean_difference": float(np.mean(d)), "clusters": C.tolist(),
         "renyi": R.tolist()},
        f"at t_early = {t_early:g} the number of clusters is within 1 of the number of Rényi centres "
        f"(delta = 4 beta^-1/2 = {ds.attrs['delta']:.3g}) for >= 2/3 of the {len(R)} configurations, and the "
        "mean difference is within 1 (Fig. 2: Rényi centres capture the meta-stable clusters)")
    table = {f"{tc:g}": {"mean(C - R)": float(np.mean(ds.clusters_at.values[i] - R)),
                          "mean(C - strong R)": float(np.mean(ds.clusters_at.values[i] - SR))}
             for i, tc in enumerate(ds.count_time.values)}
    out["counts_vs_centres_over_time"] = claim(
        None, table, "mean cluster count minus the Rényi / strong Rényi counts at each count time",
        kind="observation", observed=f"mean R = {np.mean(R):.2f}, mean strong R = {np.mean(SR):.2f}")
    out["sphere_vs_angles"] = claim(
        None, float(ds.attrs["sphere_vs_angles"]),
        "largest angle difference between the sphere form (attention field) and the angle form, configuration "
        f"0 at t = {ds.attrs['sphere_check_t']:g} (both dopri5, rtol 1e-10)", kind="observation",
        observed=f"{ds.attrs['sphere_vs_angles']:.1e} rad")
    return out


def _backwards(ds):
    """The saved states read backwards against their times (coordinates kept)."""
    out = ds.copy()
    for var in ("theta", "clusters", "distance_to_x1"):
        out[var] = (ds[var].dims, ds[var].values[::-1].copy())
    out["clusters_at"] = (ds.clusters_at.dims, ds.clusters_at.values[::-1].copy())
    return out


def _leader_at_half_beta(ds):
    """The final merge predicted by the leader ODE solved at beta / 2 from the same two-cluster state."""
    t2 = ds.merge_time.sel(count=2).values
    pred = np.array([t + leader_merge_time(th, ds.attrs["beta"] / 2, ds.attrs["tol"])[0]
                     if np.all(np.isfinite(th)) and np.isfinite(t) else np.nan
                     for t, th in zip(t2, ds.theta_two.values)])
    return ds.assign(leader_time=(ds.leader_time.dims, pred))


DEVIATIONS = (
    deviation("time axis reversed", ("consensus_at_first_token", "staircase", "early_clusters_match_renyi_centres"),
              "the saved states (long runs and the Rényi configurations' counts) read backwards against their times: "
              "the last state is the uniform start, the count grows, the clusters at t_early are the initial scatter",
              data=_backwards),
    deviation("leader ODE at beta / 2", "final_merge_matches_leader_ode",
              "the final merge predicted by the leader's scalar ODE at half the simulation's beta, from the same "
              "two-cluster state", data=_leader_at_half_beta),
)


@styled
def plot(ds: xr.Dataset):
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.6))
    t = ds.t_save.values
    tt = np.where(t > 0, t, t[1] / 2)
    ax = axes[0]
    th = ds.theta.values[:, 0]
    th = th - th[:, :1]  # angles relative to token 1 (fixed)
    rel = np.unwrap(np.where(np.isfinite(th), th, np.nan), axis=0)
    ax.plot(tt, np.mod(rel + np.pi, 2 * np.pi) - np.pi, color="C0", lw=0.4, alpha=0.6)
    ax.plot(tt, np.zeros_like(tt), color="C3", lw=1.5, label="token 1")
    ax.set_xscale("log")
    ax.set_xlabel("t")
    ax.set_ylabel("$\\theta_k - \\theta_1$ (rad)")
    ax.set_title("configuration 0: angles relative to token 1")
    legend_below(ax, ncol=1)
    ax = axes[1]
    for k in range(ds.sizes["configuration"]):
        c = ds.clusters.values[:, k].astype(float)
        ax.step(tt, np.where(c > 0, c, np.nan), where="post", color=f"C{k % 10}", lw=1.2)
        mt = ds.merge_time.values[k]
        ax.plot(mt, ds["count"].values, "o", color=f"C{k % 10}", ms=3)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("t")
    ax.set_ylabel("clusters")
    ax.set_title("cluster count (lines), merge events (dots)")
    ax = axes[2]
    R, SR = ds.renyi.values, ds.strong_renyi.values
    te = float(ds.attrs["t_early"])
    late = ds.count_time.values[-1]
    jit = np.linspace(-0.15, 0.15, len(R))
    ax.plot(R + jit, ds.clusters_at.sel(count_time=te).values, "o", ms=4, label=f"Rényi centres vs clusters at t = {te:g}")
    ax.plot(SR + jit, ds.clusters_at.sel(count_time=late).values, "s", ms=4, mfc="none",
            label=f"strong Rényi centres vs clusters at t = {late:g}")
    lo, hi = 0, max(R.max(), SR.max()) + 2
    ax.plot([lo, hi], [lo, hi], color="0.5", lw=0.8)
    ax.set_xlabel("number of centres")
    ax.set_ylabel("number of clusters")
    ax.set_title(f"$\\delta = 4\\beta^{{-1/2}}$ = {ds.attrs['delta']:.2f}")
    legend_below(ax, ncol=1)
    fig.suptitle(f"Causal attention on $S^1$: n = {ds.attrs['n']}, $\\beta$ = {ds.attrs['beta']:g}, Q = K = V = I "
                 "(Karagodin, Polyanskiy, Rigollet 2024)")
    return fig
