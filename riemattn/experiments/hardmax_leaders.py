"""Hardmax attention: leaders are the convex hull's vertices, tokens move straight to them; at finite beta
the vertex configuration is metastable for times exponential in beta.

Alcalde, Fantuzzi and Zuazua (arXiv 2407.01602) study the pure-attention hardmax transformer on R^d,

    x_i <- x_i + tau (mean_{j in M_i} x_j - x_i),   M_i = argmax_j <P x_i, x_j>,   P positive definite,

and show that the tokens converge to a clustered equilibrium organised by *leaders*, the tokens that
attain their own maximum (<P x_i, x_i> > <P x_i, x_j>, j != i): leaders never move and they are the
vertices of the limiting convex polytope. Alcalde, Geshkovski and Ruiz-Balet (arXiv 2508.09628)
read the same update as a Frank-Wolfe step for the quadratic (1/2) x^T P x over the convex hull of
the tokens: for P positive semidefinite the hull's vertices are stationary, an interior token stays
in the Voronoi cell of its vertex and moves on the straight line to it, converging exponentially
(by the factor 1 - tau per layer here); at finite beta (softmax) the tokens reach a near-vertex
configuration in a time that does not grow with beta and stay there for a time exponential in beta
before collapsing.

Run, part 1 (the leaders, on generic clouds): clouds of n tokens drawn Gaussian and uniform in the
unit ball, in d = 2 and 3, with P = I and a random symmetric positive definite P (A A^T + 0.1 I, A
Gaussian), several seeds each; ``AttentionField(P, W="flat", normalization="hardmax")`` (per-cloud P),
stepper ``"layer"`` with tau = 0.2, 150 layers. Leaders are computed from the data by
:func:`riemattn.diagnostics.leaders` (hardmax's own scores and tie rule); the convex hull's vertices
by scipy.spatial.ConvexHull, independently of the field.

Run, part 2 (the Frank-Wolfe picture and finite beta): P = I on R^2, six vertex tokens on the unit
circle (a regular hexagon) and n tokens uniform in its inscribed disk (radius 0.9 cos(pi/6)). For
unit-norm vertices the cell {x : <x, v> > <x, w>} of the hardmax rule is the Euclidean Voronoi cell
of v (|x - v|^2 = |x|^2 - 2 <x, v> + 1).

- hardmax as above on the hexagon;
- softmax at beta in a grid, same tokens and field otherwise, dopri5 (rtol 1e-6) to t1. The
  hardmax limit's configuration is K clusters; at finite beta a cluster sits at the attention-
  weighted mean of its cell rather than exactly at the vertex, so the metastable state is measured
  as "exactly K single-linkage clusters at distance delta = 0.05" (entry: first saved time with K
  clusters; exit: the first after it with another count; T = exit - entry).

Claims checked. Paper claims (each has a deviation of the model or the data under which it fails:
``DEVIATIONS``):

1. leaders never move: over every generic cloud, the leaders of layer 0 stay where they are;
2. the tokens converge to a clustered equilibrium at the leaders: at the last layer no token
   moves, every cloud has at least two clusters (for P negative semidefinite hardmax contracts to
   one), every final position is its own unique maximiser among the final positions (a vertex of
   the limiting polytope), and the leaders of layer 0 are among them (a token that is no leader at
   layer 0 may become one: new leaders are counted);
3. finite beta, entry: the time to reach the K-cluster state does not grow with beta (largest over
   smallest entry time <= 2 across the grid, while T grows by more than twice that);
4. finite beta, metastability: the time T spent in the K-cluster state grows like exp(c beta):
   log T is affine in beta (least-squares R^2 >= 0.98) with c > 0.

Identities (implementation checks, never counted for the verdict):

- leaders are hull vertices (a unique maximiser of the linear functional <P^T y_i, .> over the
  tokens is an exposed point of their hull, for any P; reported with the counts of hull vertices
  that are not leaders, which the papers' "vertices of the limiting polytope" leaves open);
- straight lines and the rate (1 - tau)^k on the hexagon: in that configuration every interior
  token's maximiser is its Voronoi vertex, so the update is x <- x + tau (v - x) by construction.

Observation: the fitted c beside 1 - cos(pi/3) = 0.5, the rate exp(-beta (1 - cos theta)) at which a
cluster at a unit vertex is pulled by its neighbour at angle theta.

References
----------
A. Alcalde, G. Fantuzzi, E. Zuazua, "Clustering in pure-attention hardmax transformers and its role
in sentiment analysis", SIAM J. Math. Data Sci. 7(3), 2025 (arXiv 2407.01602).
A. Alcalde, B. Geshkovski, D. Ruiz-Balet, "Attention's forward pass and Frank-Wolfe", arXiv 2508.09628.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from ..analysis.diagnostics import cluster_count
from ..dynamics.attention import AttentionField
from ..runs.plotting import legend_below, styled
from ..solvers.core.integrate import integrate
from ._deviations import deviation
from ._hardmax_clouds import CLOUD_RTOL, P_KINDS, cloud_leaders, run_clouds
from ._verdict import claim

NAME = "hardmax-leaders"
PAPER = "Alcalde-Fantuzzi-Zuazua 2025; Alcalde-Geshkovski-Ruiz-Balet 2025"
FIGURE = "hardmax leaders and Frank-Wolfe lines; finite-beta metastability"
DESCRIPTION = "hardmax: leaders never move and attract every token (generic clouds); exp(c beta) metastability"
ORDER = 96

DATA_ATTRS = {
    "layer": ("hardmax layer k (time k tau)", "1"),
    "beta": ("inverse temperature of the softmax runs", "1"),
    "y_hardmax": ("tokens under hardmax attention, one 'layer' step per entry", "1"),
    "vertex": ("the Voronoi vertex (nearest initial vertex) of each token", "1"),
    "cloud": ("generic cloud (distribution, dimension, P, seed)", "1"),
    "cloud_layer": ("hardmax layer k of the generic clouds (time k tau)", "1"),
    "y_cloud": ("tokens of the generic clouds under hardmax (coordinates beyond cloud_dim are 0)", "1"),
    "P_cloud": ("query-key product P of each generic cloud (padded with zeros beyond cloud_dim)", "1"),
    "cloud_dim": ("dimension d of each generic cloud", "1"),
    "cloud_dist": ("distribution of each generic cloud: 0 Gaussian, 1 uniform in the unit ball", "1"),
    "cloud_spd": ("1 where the cloud's P is a random SPD matrix, 0 where P = I", "1"),
    "cloud_hull": ("1 where the token is a vertex of its cloud's convex hull at layer 0 (scipy)", "1"),
    "clusters": ("single-linkage clusters (distance delta) of the softmax run", "1"),
    "t_enter": ("first saved time with exactly K clusters (softmax run)", "1"),
    "t_exit": ("first saved time after t_enter with another number of clusters", "1"),
}

K = 6  # hexagon
DELTA = 0.05


def config(quick: bool = False, *, smoke: bool = False) -> dict:
    # generic clouds: tokens, seeds per (distribution, d, P) and layers; 150 layers bring
    # (1 - tau)^k below 1e-14 with room for tokens that change maximiser on the way
    if smoke:
        return {"seed": 96, "interior": 10, "tau": 0.2, "layers": 40, "betas": [12.0, 15.0, 18.0], "t1": 3e3,
                "clouds": {"tokens": 16, "seeds": 2, "layers": 150, "P": list(P_KINDS),
                           "normalization": "hardmax"}}
    if quick:
        return {"seed": 96, "interior": 10, "tau": 0.2, "layers": 60, "betas": [12.0, 14.0, 16.0, 18.0, 20.0],
                "t1": 3e3, "clouds": {"tokens": 24, "seeds": 4, "layers": 150, "P": list(P_KINDS),
                                      "normalization": "hardmax"}}
    return {"seed": 96, "interior": 10, "tau": 0.2, "layers": 80,
            "betas": [12.0, 13.0, 14.0, 15.0, 16.0, 17.0, 18.0, 19.0, 20.0, 21.0, 22.0], "t1": 2e4,
            "clouds": {"tokens": 32, "seeds": 10, "layers": 150, "P": list(P_KINDS), "normalization": "hardmax"}}


def initial_tokens(seed: int, interior: int) -> np.ndarray:
    """K unit vertices (regular hexagon, rotated by 0.1) then ``interior`` points uniform in the disk
    of radius 0.9 cos(pi / K) (strictly inside the hexagon), shape (K + interior, 2)."""
    rng = np.random.default_rng(seed)
    a = 0.1 + 2 * np.pi * np.arange(K) / K
    r = 0.9 * np.cos(np.pi / K) * np.sqrt(rng.uniform(size=interior))
    b = rng.uniform(0, 2 * np.pi, size=interior)
    return np.concatenate([np.stack([np.cos(a), np.sin(a)], -1), np.stack([r * np.cos(b), r * np.sin(b)], -1)])


def _exit_times(ts, near):
    """First saved time in ``near`` and the first saved time after it outside (nan: none)."""
    inside = np.flatnonzero(near)
    if inside.size == 0:
        return np.nan, np.nan
    i0 = inside[0]
    out = np.flatnonzero(~near[i0:])
    return ts[i0], (ts[i0 + out[0]] if out.size else np.nan)


def run(config: dict) -> xr.Dataset:
    y0 = initial_tokens(config["seed"], config["interior"])
    tau, n = config["tau"], config["layers"]
    hard = AttentionField(np.eye(2), W="flat", normalization="hardmax")
    layers = np.arange(n + 1, dtype=float) * tau
    y = integrate(hard, y0, (0.0, n * tau), "layer", dt=tau, saveat=layers, engine="numpy").y
    vertex = y0[:K][np.argmin(np.linalg.norm(y0[:, None] - y0[None, :K], axis=-1), axis=1)]

    ts = np.concatenate([[0.0], np.geomspace(1e-2, config["t1"], 40 * int(np.log10(config["t1"]) + 2))])
    betas = np.asarray(config["betas"], dtype=float)
    counts, enter, leave = [], [], []
    for beta in betas:
        soft = AttentionField(np.eye(2), W="flat", beta=beta)
        ys = integrate(soft, y0, (0.0, config["t1"]), "dopri5", rtol=1e-6, atol=1e-9, saveat=ts,
                       engine="numpy").y
        counts.append(cluster_count(ys, DELTA))
        a, b = _exit_times(ts, counts[-1] == K)
        enter.append(a)
        leave.append(b)
    return xr.Dataset(
        {
            "y_hardmax": (("layer", "token", "coord"), y),
            "vertex": (("token", "coord"), vertex),
            **run_clouds({"seed": config["seed"], **config["clouds"]}, tau),
            "clusters": (("beta", "time"), np.array(counts)),
            "t_enter": ("beta", np.array(enter)),
            "t_exit": ("beta", np.array(leave)),
        },
        coords={"layer": np.arange(n + 1), "beta": betas, "time": ts,
                "cloud_layer": np.arange(config["clouds"]["layers"] + 1)},
        attrs={"tau": tau, "delta": DELTA, "vertices": K},
    )


def _fit(ds):
    T = (ds.t_exit - ds.t_enter).values
    ok = np.isfinite(T) & (T > 0)
    if ok.sum() < 3:
        return T, np.nan, np.nan
    b, logT = ds.beta.values[ok], np.log(T[ok])
    c, c0 = np.polyfit(b, logT, 1)
    spread = np.sum((logT - logT.mean()) ** 2)
    r2 = 1 - np.sum((logT - (c * b + c0)) ** 2) / spread if spread > 0 else np.nan  # nan: T flat in beta
    return T, float(c), float(r2)


@styled
def plot(ds: xr.Dataset):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 4, figsize=(18.5, 4.4))
    y, v = ds.y_hardmax.values, ds.vertex.values
    hexagon = np.concatenate([y[0, :K], y[0, :1]])
    ax[0].plot(hexagon[:, 0], hexagon[:, 1], color="0.6", lw=0.8)
    for i in range(y.shape[1]):
        ax[0].plot(y[:, i, 0], y[:, i, 1], lw=0.8, color="C0")
    ax[0].scatter(y[0, K:, 0], y[0, K:, 1], s=8, color="C0", label="interior tokens (start)")
    ax[0].scatter(y[0, :K, 0], y[0, :K, 1], s=40, marker="*", color="C3", label="leaders (hull vertices)")
    ax[0].set_aspect("equal")
    ax[0].set_title("hardmax: straight lines to the Voronoi vertex")
    legend_below(ax[0], ncol=2)
    dist = np.linalg.norm(y[:, K:] - v[None, K:], axis=-1)
    k = ds.layer.values
    ax[1].semilogy(k, np.maximum(dist, 1e-17), color="C0", lw=0.6, alpha=0.6)
    ax[1].semilogy(k, dist[0].max() * (1 - ds.attrs["tau"]) ** k, "k--", label="$(1-\\tau)^k$ max $|x_0 - v|$")
    ax[1].set_xlabel("layer k")
    ax[1].set_ylabel("$|x_k - v|$")
    ax[1].set_title("exponential convergence (Frank-Wolfe step $\\tau$)")
    legend_below(ax[1], ncol=1)
    T, c, r2 = _fit(ds)
    ax[2].semilogy(ds.beta, T, "o", label="time T with K clusters")
    if np.isfinite(c):
        ok = np.isfinite(T)
        c0 = np.mean(np.log(T[ok]) - c * ds.beta.values[ok])
        ax[2].semilogy(ds.beta, np.exp(c * ds.beta + c0), "k--", label=f"exp({c:.2f} beta), $R^2$ = {r2:.3f}")
    ax[2].semilogy(ds.beta, ds.t_enter, "s", label="entry time")
    ax[2].set_xlabel("beta")
    ax[2].set_title(f"softmax: K clusters metastable (delta = {ds.attrs['delta']})")
    legend_below(ax[2], ncol=1)
    k = int(np.flatnonzero(ds.cloud_dim.values == 2)[-1])  # a generic planar cloud (SPD P where drawn)
    yc = ds.y_cloud.values[k, :, :, :2]
    lead, hull = cloud_leaders(ds.isel(cloud=[k]))[0]["leaders"], ds.cloud_hull.values[k].astype(bool)
    for i in range(yc.shape[1]):
        ax[3].plot(yc[:, i, 0], yc[:, i, 1], lw=0.7, color="C0")
    ax[3].scatter(yc[0, hull, 0], yc[0, hull, 1], s=60, facecolors="none", edgecolors="0.4", label="hull vertices")
    ax[3].scatter(yc[0, ~lead, 0], yc[0, ~lead, 1], s=8, color="C0", label="tokens (start)")
    ax[3].scatter(yc[0, lead, 0], yc[0, lead, 1], s=40, marker="*", color="C3", label="leaders (never move)")
    ax[3].set_aspect("equal")
    ax[3].set_title("a generic cloud: tokens go to the leaders")
    legend_below(ax[3], ncol=2)
    return fig


def claims(ds: xr.Dataset) -> dict:
    y = ds.y_hardmax.values
    eps = np.finfo(float).eps
    n = y.shape[0] - 1
    v = ds.vertex.values[K:]
    x0, xs = y[0, K:], y[:, K:]
    u = (v - x0) / np.linalg.norm(v - x0, axis=-1, keepdims=True)
    rel = xs - x0
    off_line = float(np.abs(rel[..., 0] * u[:, 1] - rel[..., 1] * u[:, 0]).max())
    along = np.einsum("kid,id->ki", rel, u)
    inside = bool((along >= -4 * eps).all() and (along <= np.linalg.norm(v - x0, axis=-1) + 4 * eps).all())
    tau = ds.attrs["tau"]
    dist = np.linalg.norm(xs - v, axis=-1)
    pred = (1 - tau) ** np.arange(n + 1)[:, None] * dist[0]
    rate_err = float(np.abs(dist - pred).max())
    clusters = int(cluster_count(y[-1:], 1e-3)[0])
    T, c, r2 = _fit(ds)
    enter = ds.t_enter.values
    spread = float(np.nanmax(enter) / np.nanmin(enter)) if np.isfinite(enter).all() else np.inf
    growth = float(np.nanmax(T) / np.nanmin(T)) if np.isfinite(T).any() else np.nan
    # each layer adds at most a few roundings of numbers of size <= 2 to the position (|x|, |v| <= 1)
    tol = 8 * (n + 1) * eps

    per = cloud_leaders(ds)
    hull = ds.cloud_hull.values.astype(bool)
    moved = max(c["moved"] for c in per)
    n_lead = [int(c["leaders"].sum()) for c in per]
    in_hull = all(bool((~c["leaders"] | h).all()) for c, h in zip(per, hull))
    not_leading = int(sum(int((h & ~c["leaders"]).sum()) for c, h in zip(per, hull)))
    limit = {"largest last-layer step / diameter": max(c["last_step"] for c in per),
             "largest distance of a layer-0 leader from the final points / diameter": max(c["lost"] for c in per),
             "final points that are not their own unique maximiser": sum(c["follower"] for c in per),
             "final points": sum(c["points"] for c in per), "of them new leaders": sum(c["new"] for c in per)}
    limit["fewest clusters of a cloud"] = min(c["points"] for c in per)
    at_leaders = bool(limit["fewest clusters of a cloud"] >= 2
                      and limit["largest last-layer step / diameter"] <= CLOUD_RTOL
                      and limit["largest distance of a layer-0 leader from the final points / diameter"] <= CLOUD_RTOL
                      and limit["final points that are not their own unique maximiser"] == 0)
    clouds = f"{len(per)} generic clouds (Gaussian and uniform-ball, d = 2 and 3, P = I and SPD)"
    return {
        "leaders_never_move": claim(
            bool(moved <= CLOUD_RTOL), {"largest displacement / diameter": moved, "leaders per cloud": n_lead},
            f"{clouds}: the leaders of layer 0 never move (displacement <= {CLOUD_RTOL:g} of the diameter)"),
        "tokens_converge_to_leaders": claim(
            at_leaders, limit,
            f"{clouds}: the tokens converge to a clustered equilibrium at the leaders: at the last layer no token "
            f"moves (<= {CLOUD_RTOL:g} of the diameter), every cloud has >= 2 clusters, every final position is its "
            "own unique maximiser among them (a vertex of the limiting polytope) and the leaders of layer 0 are "
            "among them (new leaders may emerge; counted)"),
        "leaders_are_hull_vertices": claim(
            in_hull, {"leaders": int(sum(n_lead)), "hull vertices": int(hull.sum()),
                      "hull vertices that are not leaders": not_leading},
            "identity: every leader is a vertex of its cloud's convex hull (scipy) -- a unique maximiser of the "
            "linear functional <P^T y_i, .> over the tokens is an exposed point, for any P", kind="identity"),
        "straight_lines": claim(
            off_line <= tol and inside, off_line,
            "identity (hexagon): interior tokens stay on the segment from the start to their Voronoi vertex "
            f"(max distance from the line <= {tol:.1e}, 8 roundings per layer); by construction each interior "
            "token's maximiser is its vertex, so the update is x + tau (v - x)", kind="identity"),
        "exponential_to_vertex": claim(
            rate_err <= tol and clusters == K, {"max |dist - (1-tau)^k dist0|": rate_err, "clusters": clusters},
            "identity (hexagon): |x_k - v| == (1 - tau)^k |x_0 - v| to rounding and K clusters at the end "
            "(1e-3), the update x + tau (v - x) iterated", kind="identity"),
        "entry_time_bounded": claim(bool(spread <= 2.0 and growth > 2 * spread),
                                    {"t_enter": [float(t) for t in enter], "max/min": spread, "T max/min": growth},
                                    "finite beta: time to reach K clusters does not grow with beta (max/min <= 2, "
                                    "while the time spent there grows by more than twice that)"),
        "metastable_exp_beta": claim(bool(np.isfinite(c) and c > 0 and r2 >= 0.98 and np.isfinite(T).all()),
                                     {"c": c, "R2": r2, "T": [float(t) for t in T]},
                                     "time in the K-cluster state T(beta) ~ exp(c beta): log T affine in beta (R^2 >= 0.98), "
                                     "c > 0, every run left the set before t1"),
        "rate_vs_two_cluster": claim(None, {"c": c, "1 - cos(pi/3)": 0.5},
                                     "fitted c beside the two-cluster pull rate 1 - cos(pi/3)", kind="observation"),
    }


def _clouds(**change):
    def f(cfg):
        cfg["clouds"] = {**cfg["clouds"], **change}
        return cfg
    return f


def _noise_after_layer0(ds):
    rng = np.random.default_rng(0)
    y = ds.y_cloud.values
    y[:, 1:] += 1e-6 * rng.standard_normal(y[:, 1:].shape) * (ds.cloud_dim.values[:, None, None, None] > np.arange(3))
    ds["y_cloud"] = (ds.y_cloud.dims, y)
    return ds


def _entry_grows(ds):
    ds["t_enter"] = ds.t_enter * np.exp(ds.beta - ds.beta.min())
    return ds


DEVIATIONS = (
    deviation("softmax instead of hardmax", ("leaders_never_move", "tokens_converge_to_leaders"),
              "the generic clouds under softmax (beta = 1): every token, leaders included, feels all the others",
              config=_clouds(normalization="softmax")),
    deviation("P negative definite", "tokens_converge_to_leaders",
              "P = -(A A^T + 0.1 I): the papers' negative semidefinite case, where hardmax contracts every cloud "
              "to a single cluster and no token of layer 0 leads", config=_clouds(P=["nsd"])),
    deviation("time axis reversed", "tokens_converge_to_leaders",
              "the clouds' layers read backwards: the last layer is the initial cloud",
              data=lambda ds: ds.isel(cloud_layer=slice(None, None, -1))),
    deviation("noise on the trajectories", "leaders_never_move",
              "1e-6 Gaussian noise added to every token after layer 0", data=_noise_after_layer0),
    deviation("beta axis reversed", "metastable_exp_beta",
              "the times spent in the K-cluster state assigned to the betas in reverse order (T decreasing)",
              data=lambda ds: ds.assign(t_exit=("beta", ds.t_exit.values[::-1] - ds.t_enter.values[::-1]
                                                + ds.t_enter.values))),
    deviation("entry time growing like exp(beta)", "entry_time_bounded",
              "the entry times multiplied by exp(beta - beta_min), as a time that grows with beta would",
              data=_entry_grows),
)
