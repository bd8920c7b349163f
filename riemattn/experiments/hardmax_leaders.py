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

Run: P = I on R^2, six vertex tokens on the unit circle (a regular hexagon) and n tokens uniform
in its inscribed disk (radius 0.9 cos(pi/6)). For unit-norm vertices the cell {x : <x, v> > <x, w>}
of the hardmax rule is the Euclidean Voronoi cell of v (|x - v|^2 = |x|^2 - 2 <x, v> + 1).

- hardmax, ``AttentionField(I, W="flat", normalization="hardmax")``, stepper ``"layer"`` with
  tau = 0.2;
- softmax at beta in a grid, same tokens and field otherwise, dopri5 (rtol 1e-6) to t1. The
  hardmax limit's configuration is K clusters; at finite beta a cluster sits at the attention-
  weighted mean of its cell rather than exactly at the vertex, so the metastable state is measured
  as "exactly K single-linkage clusters at distance delta = 0.05" (entry: first saved time with K
  clusters; exit: the first after it with another count; T = exit - entry).

Claims checked (papers):

1. leaders = vertices: the tokens that are their own unique maximiser at layer 0 are exactly the
   vertices of the convex hull (scipy.spatial.ConvexHull, independent of the field), and they do
   not move over the run;
2. straight lines: every interior token stays on the segment from its start to the vertex of its
   Voronoi cell (nearest vertex, computed independently), to rounding;
3. exponential convergence: |x_k - v| = (1 - tau)^k |x_0 - v| for every interior token, and at the
   last layer the tokens form as many clusters as there are leaders;
4. finite beta, entry: the time to reach the K-cluster state does not grow with beta (largest over
   smallest entry time <= 2 across the grid, while T grows by more than twice that);
5. finite beta, metastability: the time T spent in the K-cluster state grows like exp(c beta):
   log T is affine in beta (least-squares R^2 >= 0.98) with c > 0.

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
from ._verdict import claim

NAME = "hardmax-leaders"
PAPER = "Alcalde-Fantuzzi-Zuazua 2025; Alcalde-Geshkovski-Ruiz-Balet 2025"
FIGURE = "hardmax leaders and Frank-Wolfe lines; finite-beta metastability"
DESCRIPTION = "hardmax on R^2: leaders = hull vertices, straight lines to the Voronoi vertex, exp(c beta) metastability"
ORDER = 96

DATA_ATTRS = {
    "layer": ("hardmax layer k (time k tau)", "1"),
    "beta": ("inverse temperature of the softmax runs", "1"),
    "y_hardmax": ("tokens under hardmax attention, one 'layer' step per entry", "1"),
    "vertex": ("the Voronoi vertex (nearest initial vertex) of each token", "1"),
    "is_leader": ("1 where the token is its own unique maximiser at layer 0", "1"),
    "is_hull_vertex": ("1 where the token is a vertex of the convex hull (scipy)", "1"),
    "clusters": ("single-linkage clusters (distance delta) of the softmax run", "1"),
    "t_enter": ("first saved time with exactly K clusters (softmax run)", "1"),
    "t_exit": ("first saved time after t_enter with another number of clusters", "1"),
}

K = 6  # hexagon
DELTA = 0.05


def config(quick: bool = False, *, smoke: bool = False) -> dict:
    if smoke:
        return {"seed": 96, "interior": 10, "tau": 0.2, "layers": 40, "betas": [12.0, 15.0, 18.0], "t1": 3e3}
    if quick:
        return {"seed": 96, "interior": 10, "tau": 0.2, "layers": 60, "betas": [12.0, 14.0, 16.0, 18.0, 20.0],
                "t1": 3e3}
    return {"seed": 96, "interior": 10, "tau": 0.2, "layers": 80,
            "betas": [12.0, 13.0, 14.0, 15.0, 16.0, 17.0, 18.0, 19.0, 20.0, 21.0, 22.0], "t1": 2e4}


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
    from scipy.spatial import ConvexHull

    y0 = initial_tokens(config["seed"], config["interior"])
    ell = len(y0)
    tau, n = config["tau"], config["layers"]
    hard = AttentionField(np.eye(2), W="flat", normalization="hardmax")
    layers = np.arange(n + 1, dtype=float) * tau
    y = integrate(hard, y0, (0.0, n * tau), "layer", dt=tau, saveat=layers, engine="numpy").y
    S = y0 @ y0.T
    others = np.where(np.eye(ell, dtype=bool), -np.inf, S)
    leader = np.diag(S) > others.max(axis=1)
    hull = np.zeros(ell, dtype=bool)
    hull[ConvexHull(y0).vertices] = True
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
            "is_leader": ("token", leader.astype(np.int8)),
            "is_hull_vertex": ("token", hull.astype(np.int8)),
            "clusters": (("beta", "time"), np.array(counts)),
            "t_enter": ("beta", np.array(enter)),
            "t_exit": ("beta", np.array(leave)),
        },
        coords={"layer": np.arange(n + 1), "beta": betas, "time": ts},
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

    fig, ax = plt.subplots(1, 3, figsize=(14, 4.4))
    y, v = ds.y_hardmax.values, ds.vertex.values
    hexagon = np.concatenate([y[0, :K], y[0, :1]])
    ax[0].plot(hexagon[:, 0], hexagon[:, 1], color="0.6", lw=0.8)
    for i in range(y.shape[1]):
        ax[0].plot(y[:, i, 0], y[:, i, 1], lw=0.8, color="C0")
    ax[0].scatter(y[0, K:, 0], y[0, K:, 1], s=8, color="C0", label="interior tokens (start)")
    ax[0].scatter(y[0, :K, 0], y[0, :K, 1], s=40, marker="*", color="C3", label="leaders = hull vertices")
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
    return fig


def claims(ds: xr.Dataset) -> dict:
    y = ds.y_hardmax.values
    leader, hull = ds.is_leader.values.astype(bool), ds.is_hull_vertex.values.astype(bool)
    # the update of a leader is tau (x_i - x_i) = 0 exactly; allow one rounding per layer of |x| <= 1
    moved = float(np.abs(y[:, leader] - y[0, leader]).max())
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
    return {
        "leaders_are_vertices": claim(bool((leader == hull).all()) and moved <= tol,
                                      {"leaders": int(leader.sum()), "hull_vertices": int(hull.sum()), "moved": moved},
                                      "self-maximising tokens == convex hull vertices (scipy), and they never move"),
        "straight_lines": claim(off_line <= tol and inside, off_line,
                                "interior tokens stay on the segment from the start to their Voronoi vertex "
                                f"(max distance from the line <= {tol:.1e}, 8 roundings per layer)"),
        "exponential_to_vertex": claim(rate_err <= tol and clusters == int(hull.sum()),
                                       {"max |dist - (1-tau)^k dist0|": rate_err, "clusters": clusters},
                                       "|x_k - v| == (1 - tau)^k |x_0 - v| to rounding; final clusters (1e-3) == leaders"),
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
