"""GLPR section 9.2: pure self-attention without normalization; rescaled tokens z = e^{-tV} x.

Dynamics in R^d (no sphere, no layer normalization), GLPR eq. (9.1) with Q = K = I:

    x_i' = sum_j softmax_j(<Q x_i, K x_j>) V x_j .

Most particles diverge like e^{t lambda_max(V)}; the rescaled particles z_i(t) = e^{-tV} x_i(t)
(eq. 9.2, a surrogate for layer normalization) solve eq. (9.3),
z_i' = sum_j P_ij(t) V (z_j - z_i) with P_ij = softmax_j(<Q e^{tV} z_i, K e^{tV} z_j>), and cluster
(GLPR Table 1, from Geshkovski-Letrouit-Polyanskiy-Rigollet 2023, "The emergence of clusters in
self-attention dynamics"):

* V = I: the z_i converge to the vertices of a convex polytope -- the limit points are finitely
  many and each is a vertex of their convex hull;
* V with a simple, positive top eigenvalue lambda_1: the z_i converge to a few parallel hyperplanes
  {z : l_1^T z = c}, l_1 the left eigenvector of lambda_1 (the hyperplanes are parallel to the sum
  of the other eigenspaces); within the hyperplanes the points stay spread out.

n = 20 particles in R^2, x(0) uniform in [-5, 5]^2 (the setting of the authors' public code),
V = I and a V with positive entries drawn uniformly in [0, 1] (Perron-Frobenius: simple positive
top eigenvalue). Both equations live in flat R^d (:class:`riemattn.Euclidean`) and are integrated by
:func:`riemattn.integrate` with classical RK4 (``"rk4"`` on flat space is the plain tableau):
eq. (9.1) for x, then z = e^{-tV} x (:func:`scipy.linalg.expm`), and eq. (9.3) for z directly;
the two must agree.

Claims checked. Paper claims (each fails under a deviation: ``DEVIATIONS``): the unrescaled
particles diverge; V = I: the z_i sit in at most n/2 clusters that have stopped moving, each a
vertex of the clusters' convex hull; V positive: l_1^T z takes at most 3 values while the points
stay more numerous (hyperplanes, not points). Deviations: the value's sign flipped (V -> -V: x
contracts, z = e^{tV} x repels, -V has a negative top eigenvalue) and the time axis reversed.

Identities (implementation checks, never counted): z from eq. (9.1) equals the solution of eq.
(9.3) (the change of variables z = e^{-tV} x, integrated twice); the positive V has a simple
positive top eigenvalue (Perron-Frobenius: the construction).

References
----------
Geshkovski, Letrouit, Polyanskiy, Rigollet, "A mathematical perspective on Transformers",
section 9.2, eqs. (9.1)-(9.3), Table 1; "The emergence of clusters in self-attention dynamics"
(NeurIPS 2023), Theorems 3.1 and 4.1.
"""

from __future__ import annotations

import numpy as np
import xarray as xr
from scipy.linalg import expm
from scipy.spatial import ConvexHull

from .._backend import convert, is_torch, namespace
from ..analysis.diagnostics import cluster_count
from ..dynamics.fields import VectorField
from ..solvers.core.integrate import integrate
from ..geometry.manifolds import Euclidean
from ..runs.plotting import legend_below, styled
from ._deviations import deviation
from ._verdict import claim

NAME = "glpr-pure-sa"
PAPER = "GLPR"
FIGURE = "Sec. 9.2, Table 1"
DESCRIPTION = (
    "pure SA in R^d: z = e^{-tV}x clusters at polytope vertices (V = I) / on parallel hyperplanes"
)
ORDER = 80

CASES = ("polytope", "hyperplanes")

#: long_name and units of data.nc's variables (see riemattn.runs._cf)
DATA_ATTRS = {
    "case": ("value matrix: polytope = identity, hyperplanes = positive entries", "1"),
    "z": ("rescaled particles z_i = e^{-tV} x_i, x_i from GLPR eq. (9.1)", "1"),
    "z_direct": ("rescaled particles z_i solving GLPR eq. (9.3) directly", "1"),
    "x_max_norm": ("largest norm of the unrescaled particles, max |x_i(t)|", "1"),
    "V": ("value matrix V", "1"),
}


def config(quick: bool = False, *, smoke: bool = False) -> dict:
    """Seeded configuration; ``quick``/``smoke`` take a coarser step (same sizes: the run is cheap)."""
    # value_sign: the paper's V (+1); -1 (a deviation) uses -V in both cases. hyperplanes_V: the
    # paper's "positive" V (simple positive top eigenvalue); "identity" (a deviation): V = I there
    base = {"seed": 10, "n": 20, "d": 2, "box": 5.0, "t1": 12.0, "n_save": 121, "configurations": 4,
            "value_sign": 1.0, "hyperplanes_V": "positive"}
    if smoke:
        return {**base, "configurations": 2, "dt": 0.01}
    if quick:
        return {**base, "dt": 0.005}
    return {**base, "configurations": 8, "dt": 0.0025}


def _softmax_rows(S):
    xp = namespace(S)  # NumPy or torch (the torch backend's reproduction), no NumPy ufunc on a tensor
    S = S - xp.max(S, axis=-1, keepdims=True)
    E = xp.exp(S)
    return E / xp.sum(E, axis=-1, keepdims=True)


def _like(x, *matrices):
    """The NumPy matrices as tensors when x is one (torch's products with a NumPy operand go through
    NumPy, which wraps the result back with a deprecated ``__array_wrap__``); else unchanged."""
    return tuple(convert(m, x) for m in matrices) if is_torch(x) else matrices


def pure_sa(x, V, QK):
    """GLPR eq. (9.1): x_i' = sum_j softmax_j(x_i^T QK x_j) V x_j; x shape (..., n, d)."""
    V, QK = _like(x, V, QK)
    A = _softmax_rows((x @ QK) @ namespace(x).matrix_transpose(x))
    return (A @ x) @ V.T


class MatrixExponential:
    """t -> e^{tV} for a diagonalizable V with real eigenvalues (eigendecomposition, checked once
    against :func:`scipy.linalg.expm`; scipy's expm per RK stage costs far more)."""

    def __init__(self, V, t_check: float = 1.0):
        lam, R = np.linalg.eig(V)
        if np.max(np.abs(lam.imag)) > 0 or np.linalg.cond(R) > 1e8:
            raise ValueError("V must be diagonalizable with real eigenvalues")
        self.lam, self.R, self.Rinv = lam.real, R.real, np.linalg.inv(R.real)
        ref = expm(t_check * V)
        err = np.max(np.abs(self(t_check) - ref)) / np.max(np.abs(ref))
        if err > 1e-10:
            raise ValueError(
                f"eigendecomposition exponential differs from scipy's expm by {err:.2e}"
            )

    def __call__(self, t):
        return (self.R * np.exp(t * self.lam)) @ self.Rinv


def rescaled_sa(t, z, V, QK, exp_tV=None):
    """GLPR eq. (9.3): z_i' = sum_j P_ij(t) V (z_j - z_i), P from the scores of x = e^{tV} z."""
    E, V, QK = _like(z, expm(t * V) if exp_tV is None else exp_tV(t), V, QK)
    x = z @ E.T
    A = _softmax_rows((x @ QK) @ namespace(x).matrix_transpose(x))
    return (A @ z - z) @ V.T


def _rk4(f, t_save, y0, dt):
    """RK4 in R^d with steps of at most dt landing on every saved time; returns (len(t_save), ...)."""
    field = VectorField(f, Euclidean(y0.shape[-1]))
    return integrate(field, y0, (t_save[0], t_save[-1]), stepper="rk4", dt=dt, saveat=t_save).y


def value_matrices(rng, d: int) -> dict:
    """V for each case: the identity, and a positive matrix (simple positive top eigenvalue)."""
    return {"polytope": np.eye(d), "hyperplanes": rng.uniform(0.0, 1.0, size=(d, d))}


def run(config: dict) -> xr.Dataset:
    rng = np.random.default_rng(config["seed"])
    n, d, m = config["n"], config["d"], config["configurations"]
    Vs = value_matrices(rng, d)
    if config.get("hyperplanes_V", "positive") == "identity":
        Vs["hyperplanes"] = np.eye(d)
    Vs = {k: float(config.get("value_sign", 1.0)) * V for k, V in Vs.items()}
    x0 = rng.uniform(-config["box"], config["box"], size=(m, n, d))
    t_save = np.linspace(0.0, config["t1"], config["n_save"])
    QK = np.eye(d)
    z_all, zdir_all, xnorm = [], [], []
    for case in CASES:
        V = Vs[case]
        exp_tV = MatrixExponential(V, config["t1"])
        x = _rk4(lambda t, y, V=V: pure_sa(y, V, QK), t_save, x0, config["dt"])
        z = np.einsum("tkd,t...d->t...k", np.stack([expm(-t * V) for t in t_save]), x)
        z_direct = _rk4(
            lambda t, y, V=V, e=exp_tV: rescaled_sa(t, y, V, QK, e), t_save, x0, config["dt"]
        )
        z_all.append(z)
        zdir_all.append(z_direct)
        xnorm.append(np.max(np.linalg.norm(x, axis=-1), axis=(-2, -1)))
    ds = xr.Dataset(
        {
            "z": (("case", "time", "configuration", "particle", "component"), np.stack(z_all)),
            "z_direct": (
                ("case", "time", "configuration", "particle", "component"),
                np.stack(zdir_all),
            ),
            "x_max_norm": (("case", "time"), np.stack(xnorm)),
            "V": (("case", "row", "component"), np.stack([Vs[c] for c in CASES])),
        },
        coords={"case": list(CASES), "time": t_save},
        attrs={"n": n, "d": d},
    )
    return ds


def _left_top_eigenvector(V):
    """l_1 with l_1^T V = lambda_1 l_1^T for the eigenvalue of largest real part; unit norm."""
    lam, L = np.linalg.eig(V.T)
    k = int(np.argmax(lam.real))
    v = np.real(L[:, k])
    return lam, v / np.linalg.norm(v)


def _clusters_1d(a, tol):
    """Number of groups of the sorted values a (gaps > tol separate groups)."""
    a = np.sort(a)
    return 1 + int(np.sum(np.diff(a) > tol))


def _centers(z, tol):
    """One representative per cluster of the points z (n, d) (greedy, distance <= tol)."""
    centers = []
    for p in z:
        if not any(np.linalg.norm(p - c) <= tol for c in centers):
            centers.append(p)
    return np.array(centers)


def _vertex_fraction(z, tol):
    """Fraction of the cluster centers of z (n, 2) that are vertices of their convex hull."""
    c = _centers(z, tol)
    if len(c) <= 2:
        return 1.0, len(c)
    hull = ConvexHull(c)
    return len(set(hull.vertices)) / len(c), len(c)


@styled
def plot(ds: xr.Dataset):
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 5))
    for ax, case in zip(axes, ds.case.values):
        z = ds.z.sel(case=case).isel(configuration=0).values  # (time, n, d)
        for i in range(z.shape[1]):
            ax.plot(z[:, i, 0], z[:, i, 1], color="C0", lw=0.6, ls="--")
        ax.scatter(
            z[0, :, 0],
            z[0, :, 1],
            s=25,
            facecolor="white",
            edgecolor="k",
            zorder=4,
            clip_on=False,
            label="z(0) = x(0)",
        )
        ax.scatter(
            z[-1, :, 0], z[-1, :, 1], s=35, color="C1", edgecolor="k", zorder=5, clip_on=False,
            label="z(t1)",
        )
        ax.margins(0.08)  # room for the markers at the extreme points
        V = ds.V.sel(case=case).values
        if case == "polytope":
            c = _centers(z[-1], 1e-2)
            if len(c) > 2:
                hull = ConvexHull(c)
                for simplex in hull.simplices:
                    ax.plot(c[simplex, 0], c[simplex, 1], color="0.5", lw=1)
            ax.set_title("V = I: vertices of a convex polytope")
        else:
            lam, l1 = _left_top_eigenvector(V)
            r = np.array([-l1[1], l1[0]])  # direction of the hyperplanes (lines) in R^2
            lim = np.abs(z).max() * 1.1
            for c in np.unique(np.round(z[-1] @ l1, 2)):
                p = c * l1
                ax.plot(*(p[:, None] + np.outer(r, [-lim, lim]).T.T), color="0.5", lw=0.8)
            ax.set_title(
                "V with eigenvalues ({:.2f}, {:.2f}): parallel hyperplanes".format(*np.sort(lam.real)[::-1])
            )
            ax.set_xlim(-lim, lim)
            ax.set_ylim(-lim, lim)
        ax.set_aspect("equal")
        ax.set_xlabel("$z^1$")
        ax.set_ylabel("$z^2$")
        legend_below(ax, ncol=2)
    fig.suptitle(
        f"GLPR section 9.2: pure self-attention, rescaled $z = e^{{-tV}} x$, n = {ds.attrs['n']}"
    )
    return fig


def claims(ds: xr.Dataset) -> dict:
    n = int(ds.attrs["n"])
    zP = ds.z.sel(case="polytope").values  # (time, configuration, n, d)
    zH = ds.z.sel(case="hyperplanes").values
    span = float(np.abs(ds.z.isel(time=0)).max())
    tol = 1e-3 * span
    scale = np.maximum(np.abs(ds.z).max(), 1.0)
    agree = float(np.abs(ds.z - ds.z_direct).max() / scale)
    # polytope case
    counts = cluster_count(zP[-1], tol)
    frac = [_vertex_fraction(zP[-1, k], tol)[0] for k in range(zP.shape[1])]
    # hyperplane case
    V = ds.V.sel(case="hyperplanes").values
    lam, l1 = _left_top_eigenvector(V)
    lam_sorted = np.sort(lam.real)[::-1]
    a = zH[-1] @ l1  # (configuration, n): coordinate normal to the hyperplanes
    planes = [_clusters_1d(a[k], tol) for k in range(a.shape[0])]
    points = cluster_count(zH[-1], tol)
    still = float(np.max(np.linalg.norm(zP[-1] - zP[-11], axis=-1)) / span)
    diverge = bool(ds.x_max_norm.isel(time=-1).min() > 100 * ds.x_max_norm.isel(time=0).max())
    return {
        "rescaling_consistent": claim(
            agree < 1e-6, agree,
            "identity: z = e^{-tV} x from eq. (9.1) equals the solution of eq. (9.3) (max relative difference "
            "< 1e-6) -- eq. (9.3) is eq. (9.1) after the change of variables, so this checks two integrations of "
            "one equation", kind="identity"),
        "particles_diverge_unrescaled": claim(
            diverge, ds.x_max_norm.isel(time=-1).values.tolist(),
            "without rescaling the particles diverge: max |x_i(t1)| > 100 max |x_i(0)|"),
        "polytope_clusters": claim(
            bool(np.all(counts <= n // 2) and still < 1e-3), {"clusters": counts.tolist(), "motion_last_10pct": still},
            f"V = I: the {n} rescaled particles sit in <= {n // 2} clusters at t1, which have stopped moving "
            "(displacement over the last 10% of time < 1e-3 of the initial box)"),
        "polytope_vertices": claim(
            bool(min(frac) == 1.0), frac,
            "V = I: every cluster is a vertex of the convex hull of the clusters (convex position)"),
        "hyperplanes_top_eigenvalue": claim(
            bool(lam_sorted[0] > 0 and lam_sorted[0] - lam_sorted[1] > 1e-6), lam_sorted.tolist(),
            "identity: the second V has a simple positive top eigenvalue (the theorem's assumption, made true by "
            "the construction: a matrix of positive entries, Perron-Frobenius)", kind="identity"),
        "hyperplanes_few": claim(
            bool(max(planes) <= 3 and np.all(points > np.array(planes))),
            {"hyperplanes": planes, "distinct_points": points.tolist()},
            "V with a simple positive top eigenvalue: the coordinate l_1^T z_i takes <= 3 values at t1 (<= 3 "
            "parallel hyperplanes) while the points themselves stay more numerous than the hyperplanes "
            "(clustering on hyperplanes, not to points)"),
    }


DEVIATIONS = (
    deviation("value sign flipped", ("particles_diverge_unrescaled", "polytope_clusters", "polytope_vertices"),
              "V -> -V in both cases (one configuration): x' = -(attention average) contracts instead of "
              "diverging, and for V = -I the rescaled z' = z - P z repels: no clusters, not in convex position",
              config=lambda cfg: {**cfg, "value_sign": -1.0, "configurations": 1, "dt": 0.02}),
    deviation("V = I in the hyperplane case", "hyperplanes_few",
              "the hyperplane case run with V = I (top eigenvalue not simple, one configuration): the points "
              "cluster to points, as many values of l_1^T z as points",
              config=lambda cfg: {**cfg, "hyperplanes_V": "identity", "configurations": 1, "dt": 0.02}),
    deviation("time axis reversed", ("particles_diverge_unrescaled", "polytope_clusters", "polytope_vertices",
                                     "hyperplanes_few"),
              "the saved times read backwards: the last time is the uniform start in [-5, 5]^2",
              data=lambda ds: ds.isel(time=slice(None, None, -1))),
)
