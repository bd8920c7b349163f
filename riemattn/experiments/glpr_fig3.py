"""GLPR Figure 3: phase diagrams of clustering for (SA), n = 32 particles, d in {2, 8, 32, 128}.

For each dimension d, inverse temperature beta and time t: the probability, over i.i.d. uniform
initial points on S^{d-1}, that two particles are clustered, P(<x_1(t), x_2(t)> >= 1 - eps) with
eps = 1e-3 (GLPR section 6.3). Overlaid: the equiangular phase-transition curve of GLPR eq. (6.12),
beta*(t) = the largest beta with rho(t) >= 1 - eps for the equiangular solution (Theorem 6.8),
:func:`riemattn.analysis.theory.phase_boundary`. GLPR observe that the boundary of the clustered region
follows this curve, the better the larger d, and that for small d a band of intermediate
probabilities (a metastable state, see GLPR Figure 4) appears.

Method. A sweep (:func:`riemattn.sweep`, on a local Dask cluster) over d x replicate, each task
integrating its m = configurations / replicates initial configurations for every beta at once: a
batch of shape (n_beta, m, n, d) with the stepper ``"layer"`` and step 0.1, exactly GLPR's scheme
x <- normalize(x + 0.1 * sum_j softmax_j(beta <x_i, x_j>) x_j), on ``riemattn.sa(betas[:, None], d)``
(an array beta: one inverse temperature per row of the batch). The same configurations are used for
every beta (common random numbers: the estimated probability is then a smoother function of beta).
A task's random stream derives from (d, replicate) and the seed only, so the figure does not depend
on the number of workers (see ``riemattn/experiments/_phase.py``).

Data layout (data.nc): ``probability`` and ``probability_first_pair`` (d, beta, time), the means over
replicates of ``probability_per_replicate`` (d, beta, replicate, time) (each replicate averages its
m configurations), and ``equiangular_clustering_time`` (beta_curve).
By exchangeability of the particles P(<x_1, x_2> >= 1 - eps) = P(<x_i, x_j> >= 1 - eps) for any
i != j, so the estimator averages the indicator over all n (n - 1)/2 pairs of each configuration
(as GLPR's own code does), which has a smaller variance than the first pair alone.

The clustering boundary at time t is the beta where the estimated probability crosses 1/2 (linear
interpolation on the beta grid; the largest such beta).

Claims checked, all paper claims (each fails under a deviation of the data, ``DEVIATIONS``; the sweep
is not rerun): at the largest d the 1/2-boundary is within 0.5 of the equiangular curve at t = 10,
20, 30 (the curve read from the data, ``equiangular_clustering_time``, inverted by interpolation;
within 2e-3 of :func:`~riemattn.analysis.theory.phase_boundary`); at t1 every d clusters at beta = 0
and the largest d does not at beta_max; the band 0.1 < P < 0.9 at t1 is wider at the smallest d than
at the largest. Deviations: the beta axis reversed (the boundary and the small/large-beta contrast
move), the reference curve of a dynamics twice as fast (its clustering times halved: at t = 10 it
sits at beta ~ 6.3 instead of 5.1), the d axis reversed (the diagrams' dimension labels swapped).

References
----------
Geshkovski, Letrouit, Polyanskiy, Rigollet, "A mathematical perspective on Transformers",
section 6.3, eq. (6.12), Theorem 6.8, Figure 3.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from ..analysis.theory import clustering_time
from ..runs.plotting import styled
from ._deviations import deviation, read_backwards
from ._verdict import claim

NAME = "glpr-fig3"
PAPER = "GLPR"
FIGURE = "Fig. 3"
DESCRIPTION = "phase diagrams: P(particles 1, 2 clustered) over (beta, t), n = 32, d = 2, 8, 32, 128, equiangular curve"
ORDER = 60

#: long_name and units of data.nc's variables (see riemattn.runs._cf)
DATA_ATTRS = {
    "d": ("dimension d of the space R^d (particles on S^{d-1})", "1"),
    "beta": ("inverse temperature beta", "1"),
    "replicate": ("replicate index (a batch of initial configurations)", "1"),
    "beta_curve": ("beta of the equiangular curve", "1"),
    "probability": ("probability that two particles are clustered (<x_i, x_j> >= 1 - eps)", "1"),
    "probability_first_pair": ("fraction of configurations whose particles 1 and 2 are clustered", "1"),
    "probability_per_replicate": ("fraction of clustered pairs, per replicate", "1"),
    "equiangular_clustering_time": ("clustering time of the equiangular solution, GLPR eq. (6.12)", "1"),
}

CHECK_TIMES = (10.0, 20.0, 30.0)


def config(quick: bool = False, *, smoke: bool = False) -> dict:
    """Seeded configuration. Full: 37 betas (step 0.25) x 64 configurations (4 replicates of 16);
    quick: 19 x 12 (2 replicates of 6)."""
    base = {
        "seed": 6,
        "n": 32,
        "eps": 1e-3,
        "dims": [2, 8, 32, 128],
        "beta_max": 9.0,
        "t1": 30.0,
        "dt": 0.1,
        "stepper": "layer",
        "save_every": 0.5,
    }
    if smoke:
        return {**base, "dims": [2, 128], "n_beta": 10, "configurations": 3, "replicates": 2}
    if quick:
        return {**base, "n_beta": 19, "configurations": 6, "replicates": 2}
    return {**base, "n_beta": 37, "configurations": 16, "replicates": 4}


def run(config: dict) -> xr.Dataset:
    from ._phase import run_phase_sweep

    n, eps = config["n"], config["eps"]
    sw = run_phase_sweep(config, "sa")
    # The equiangular curve beta*(t) of eq. (6.12) is the level set T(beta) = t of the clustering time
    # of the equiangular solution: tabulate T on a fine beta grid (one quadrature each).
    beta_curve = np.linspace(0.0, config["beta_max"], 73)
    T_curve = np.array([clustering_time(b, n, eps, "sa") for b in beta_curve])
    return xr.Dataset(
        {
            "probability": sw.pairs.mean("replicate").transpose("d", "beta", "time"),
            "probability_first_pair": sw.first.mean("replicate").transpose("d", "beta", "time"),
            "probability_per_replicate": sw.pairs.transpose("d", "beta", "replicate", "time"),
            "equiangular_clustering_time": ("beta_curve", T_curve),
        },
        coords={"beta_curve": beta_curve},
        attrs={"n": n, "eps": eps, "configurations": config["configurations"] * config["replicates"]},
    )


def empirical_boundary(prob, betas) -> np.ndarray:
    """Largest beta where prob(beta) crosses 1/2, per time; prob shape (beta, time) -> (time,).

    Linear interpolation between the last grid beta with prob >= 1/2 and the next one; NaN where
    prob < 1/2 at every beta, +inf where prob >= 1/2 at every beta.
    """
    prob = np.asarray(prob)
    out = np.full(prob.shape[1], np.nan)
    for s in range(prob.shape[1]):
        above = np.nonzero(prob[:, s] >= 0.5)[0]
        if above.size == 0:
            continue
        i = above[-1]
        if i == len(betas) - 1:
            out[s] = np.inf
            continue
        p0, p1 = prob[i, s], prob[i + 1, s]
        out[s] = betas[i] + (p0 - 0.5) / (p0 - p1) * (betas[i + 1] - betas[i])
    return out


@styled
def plot(ds: xr.Dataset):
    import matplotlib.pyplot as plt

    dims = ds.d.values
    fig, axes = plt.subplots(
        1, len(dims), figsize=(4.2 * len(dims), 3.8), sharey=True, layout="constrained"
    )
    axes = np.atleast_1d(axes)
    for ax, d in zip(axes, dims):
        p = ds.probability.sel(d=d)
        mesh = ax.pcolormesh(
            ds.time, ds.beta, p, cmap="RdBu_r", vmin=0, vmax=1, shading="nearest", rasterized=True
        )
        ax.plot(
            ds.equiangular_clustering_time, ds.beta_curve, "k--", lw=1.2, label="equiangular (6.12)"
        )
        b = empirical_boundary(p.values, ds.beta.values)
        ax.plot(
            ds.time, np.where(np.isfinite(b), b, np.nan), color="yellow", lw=1.0, label="P = 1/2"
        )
        ax.set_ylim(ds.beta[0], ds.beta[-1])
        ax.set_xlim(ds.time[0], ds.time[-1])
        ax.set_xlabel("t")
        ax.set_title(f"d = {d}")
    axes[0].set_ylabel("$\\beta$")
    # below the panels: inside one, the legend would cover the boundary near t = 30
    handles, labels = axes[-1].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=2, fontsize=8, frameon=False)
    fig.colorbar(
        mesh, ax=axes, shrink=0.9, label="P($\\langle x_1, x_2\\rangle \\geq 1 - \\varepsilon$)"
    )
    fig.suptitle(f"GLPR Fig. 3: n = {ds.attrs['n']}, $\\varepsilon$ = {ds.attrs['eps']}")
    return fig


def equiangular_boundary(ds, t) -> float:
    """beta*(t) of the equiangular curve stored in ``ds`` (T(beta) inverted by linear interpolation; T
    increases with beta); NaN outside the tabulated times."""
    T, b = ds.equiangular_clustering_time.values, ds.beta_curve.values
    return float(np.interp(t, T, b, left=np.nan, right=np.nan))


def claims(ds: xr.Dataset) -> dict:
    d_max = int(ds.d.values.max())
    p = ds.probability.sel(d=d_max)
    emp = empirical_boundary(p.values, ds.beta.values)
    values, gaps = [], []
    for tc in CHECK_TIMES:
        s = int(np.argmin(np.abs(ds.time.values - tc)))
        theory = equiangular_boundary(ds, float(ds.time.values[s]))
        gap = abs(float(emp[s]) - theory)
        gaps.append(gap if np.isfinite(gap) else np.inf)
        values.append({"t": float(ds.time.values[s]), "empirical": float(emp[s]), "equiangular": theory})
    out = {
        f"boundary_matches_equiangular_d{d_max}": claim(
            bool(max(gaps) <= 0.5), values,
            f"at d = {d_max} the beta where P(clustered) = 1/2 is within 0.5 of the equiangular curve (GLPR eq. "
            "6.12, as stored in the data) at t = 10, 20, 30"),
    }
    # clustering is more likely at smaller beta: at the final time P(beta = 0) = 1 and P(beta_max) < 1/2
    p_end = ds.probability.isel(time=-1)
    out["clustered_at_small_beta_not_at_large"] = claim(
        bool(np.all(p_end.isel(beta=0) > 0.99) and float(p.isel(time=-1, beta=-1)) < 0.5),
        {"P(beta=0, t1) per d": p_end.isel(beta=0).values.tolist(),
         f"P(beta_max, t1), d={d_max}": float(p.isel(time=-1, beta=-1))},
        "at t1 every d has P = 1 at beta = 0, and at d = max P < 1/2 at beta = beta_max")
    # GLPR: the transition sharpens as d grows (a wide band of intermediate probabilities at small d)
    width = {}
    for d in ds.d.values:
        q = ds.probability.sel(d=d).isel(time=-1).values
        width[int(d)] = float(np.sum((q > 0.1) & (q < 0.9)) * float(ds.beta[1] - ds.beta[0]))
    d_min = int(ds.d.values.min())
    out["transition_sharper_in_high_dimension"] = claim(
        bool(width[d_min] > width[d_max]), width,
        f"at t1 the beta-width of the band 0.1 < P < 0.9 is larger at d = {d_min} than at d = {d_max}")
    return out



def _faster_reference(ds):
    """The equiangular curve of a dynamics twice as fast: its clustering times halved."""
    return ds.assign(equiangular_clustering_time=ds.equiangular_clustering_time / 2)


DEVIATIONS = (
    deviation("beta axis reversed", ("boundary_matches_equiangular_d*", "clustered_at_small_beta_not_at_large"),
              "the probabilities assigned to the betas in reverse order: clustering at large beta, not at small",
              data=read_backwards("beta")),
    deviation("reference twice as fast", "boundary_matches_equiangular_d*",
              "the equiangular curve with its clustering times halved (a time scale off by 2): beta*(t) becomes "
              "beta*(2t), 1.2 higher at t = 10", data=_faster_reference),
    deviation("d axis reversed", "transition_sharper_in_high_dimension",
              "the diagrams' dimension labels swapped: the largest d's sharp transition read as the smallest d's",
              data=read_backwards("d")),
)
