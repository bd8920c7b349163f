"""The generic clouds of the hardmax-leaders reproduction: drawing, running and measuring them.

Private to :mod:`riemattn.experiments.hardmax_leaders`.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from ..analysis.diagnostics import leaders
from ..dynamics.attention import AttentionField
from ..solvers.core.integrate import integrate

#: the generic clouds' P: "I" and a random symmetric positive definite matrix (the papers' P > 0);
#: "nsd" (negative definite, the papers' contracting case) is a deviation
P_KINDS = ("I", "spd")


def _cloud_P(kind: str, d: int, rng) -> np.ndarray:
    if kind == "I":
        return np.eye(d)
    A = rng.standard_normal((d, d))
    if kind == "spd":
        return A @ A.T + 0.1 * np.eye(d)
    if kind == "nsd":  # negative definite: Frank-Wolfe's contracting case (a deviation)
        return -(A @ A.T + 0.1 * np.eye(d))
    raise ValueError(f"unknown P kind {kind!r}; expected one of {P_KINDS + ('nsd',)}.")


def generic_clouds(seed: int, tokens: int, seeds: int, P_kinds) -> list:
    """The generic clouds: ``[(dist, d, P kind, y0 (tokens, d), P (d, d)), ...]``, for dist in
    (Gaussian, uniform in the unit ball), d in (2, 3), each P kind and ``seeds`` seeds each."""
    rng = np.random.default_rng([seed, 1])
    out = []
    for dist in (0, 1):
        for d in (2, 3):
            for kind in P_kinds:
                for _ in range(seeds):
                    y = rng.standard_normal((tokens, d))
                    if dist == 1:  # uniform in the unit ball: a direction and a radius U^(1/d)
                        y /= np.linalg.norm(y, axis=1, keepdims=True)
                        y *= rng.uniform(size=(tokens, 1)) ** (1.0 / d)
                    out.append((dist, d, kind, y, _cloud_P(kind, d, rng)))
    return out


def run_clouds(cfg: dict, tau: float) -> dict:
    """Every generic cloud under hardmax (or the configured normalization), one batch per d."""
    from scipy.spatial import ConvexHull

    clouds = generic_clouds(cfg["seed"], cfg["tokens"], cfg["seeds"], cfg["P"])
    n, L = cfg["tokens"], cfg["layers"]
    y = np.zeros((len(clouds), L + 1, n, 3))
    P = np.zeros((len(clouds), 3, 3))
    hull = np.zeros((len(clouds), n), dtype=np.int8)
    layers = np.arange(L + 1, dtype=float) * tau
    for d in (2, 3):
        idx = [k for k, c in enumerate(clouds) if c[1] == d]
        y0 = np.stack([clouds[k][3] for k in idx])
        Pd = np.stack([clouds[k][4] for k in idx])
        field = AttentionField(Pd[:, None], W="flat", normalization=cfg["normalization"])
        sol = integrate(field, y0, (0.0, L * tau), "layer", dt=tau, saveat=layers, engine="numpy").y
        y[idx, :, :, :d] = np.moveaxis(sol, 0, 1)
        P[np.ix_(idx, range(d), range(d))] = Pd
        for k in idx:
            hull[k, ConvexHull(clouds[k][3]).vertices] = 1
    return {"y_cloud": (("cloud", "cloud_layer", "token_c", "coord_c"), y),
            "P_cloud": (("cloud", "coord_c", "coord_c2"), P),
            "cloud_dim": ("cloud", np.array([c[1] for c in clouds])),
            "cloud_dist": ("cloud", np.array([c[0] for c in clouds])),
            "cloud_spd": ("cloud", np.array([c[2] != "I" for c in clouds], dtype=np.int8)),
            "cloud_hull": (("cloud", "token_c"), hull)}


#: generic clouds: a leader moves, and a follower stalls short of its leader, only through a tie
#: within hardmax's rtol = 2^-40 ~ 9e-13 of a row's largest score, i.e. once a follower is within
#: about rtol |y| |P| / |P y_i| of its leader (measured on 120 Gaussian and uniform clouds, d = 2, 3,
#: P = I and SPD: at most 2e-11 of the cloud's diameter after 150 layers). 1e-9 of the diameter
#: leaves a factor 50; a leader that really moves (softmax at beta = 1: >= 1e-2) is far above.
CLOUD_RTOL = 1e-9


def _points(y: np.ndarray, tol: float) -> np.ndarray:
    """The distinct positions of the tokens ``y`` (l, d): single-linkage groups at distance ``tol``,
    one mean per group."""
    from scipy.sparse.csgraph import connected_components

    near = np.linalg.norm(y[:, None] - y[None], axis=-1) <= tol
    n, labels = connected_components(near, directed=False)
    return np.stack([y[labels == c].mean(axis=0) for c in range(n)])


def cloud_leaders(ds: xr.Dataset):
    """Per generic cloud, a dict: ``leaders`` (bool (l,), at layer 0), ``moved`` (largest displacement
    of a leader over the layers), ``last_step`` (largest displacement of a token in the last layer),
    ``lost`` (largest distance of a leader of layer 0 from the final positions), ``follower`` (1 where
    a final position is not its own unique maximiser among the final positions), ``points`` (number of
    final positions), ``new`` (final positions that were no leader at layer 0) and ``diameter``;
    distances relative to the diameter of the cloud at layer 0."""
    out = []
    for k in range(ds.sizes["cloud"]):
        d = int(ds.cloud_dim.values[k])
        y = ds.y_cloud.values[k, :, :, :d]
        P = ds.P_cloud.values[k, :d, :d]
        lead = leaders(y[0], P)
        diam = float(np.linalg.norm(y[0][:, None] - y[0][None], axis=-1).max())
        tol = CLOUD_RTOL * diam
        moved = float(np.linalg.norm(y[:, lead] - y[0, lead], axis=-1).max()) if lead.any() else 0.0
        points = _points(y[-1], tol)
        lost = (float(np.linalg.norm(y[0][lead][:, None] - points[None], axis=-1).min(axis=1).max())
                if lead.any() else 0.0)
        new = int(len(points) - lead.sum()) if lost <= tol else len(points)
        out.append({"leaders": lead, "moved": moved / diam, "diameter": diam,
                    "last_step": float(np.linalg.norm(y[-1] - y[-2], axis=-1).max()) / diam,
                    "lost": lost / diam, "follower": int((~leaders(points, P)).sum()),
                    "points": len(points), "new": new})
    return out
