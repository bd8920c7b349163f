"""GLPR Figure 5: phase diagrams of (SA) with random Gaussian Q, K, V instead of identities.

Like GLPR Figure 3 (see :mod:`riemattn.experiments.glpr_fig3`), the probability that two particles
are clustered, P(<x_i(t), x_j(t)> >= 1 - eps), eps = 1e-3, over (beta, t), n = 32 particles on
S^{d-1}, but for the dynamics with general parameter matrices (GLPR eq. 2.7, one head)

    dx_i/dt = P_{x_i}^perp( sum_j softmax_j(beta <Q x_i, K x_j>) V x_j ),

with random Q, K, V. GLPR (section 6.3, Problem 2, and section 9) show that clustering and the
phase-diagram picture persist. The caption's exact matrix law is not in the text we have; we follow
the authors' public simulation code for the bilinear form (Q, K with i.i.d. N(0, 1) entries,
Q^T K / sqrt(d)) and run two ensembles of V (the store dimension ``V``):

- ``"identity"``: V = I (random bilinear form only);
- ``"wishart"``: V = G G^T / d with G i.i.d. N(0, 1) (symmetric, positive semi-definite, mean
  eigenvalue 1, the identity's scale; the authors' code scales G G^T by 1/sqrt(d)).

Every replicate draws its own Q, K (, G) and m initial configurations, shared by all beta; the
probability averages over replicates, hence over draws.

With a random positive semi-definite V the tokens of a configuration end near +-v (v the top
eigenvector of V), i.e. in at most two antipodal clusters, so the fraction of clustered pairs
tends to p^2 + (1 - p)^2 >= 1/2 at every beta and no 1/2-contour exists at late times: for
``V = "wishart"`` the contour is reported as an observation, not checked.

Method: the same sweep as glpr-fig3 (``riemattn/experiments/_phase.py``): stepper ``"layer"`` with
step 0.1 (x <- normalize(x + 0.1 sum_j softmax_j(beta <Q x_i, K x_j>) V x_j)). One sweep task per
(V, d) integrates every beta and every replicate in one call: the replicates' matrices are
per-trajectory weights (P of shape (replicates, 1, 1, d, d) against tokens of batch shape (beta,
replicate, configuration)); a replicate's random stream derives from (V, d, replicate) and the
seed only, as when each replicate was a task of its own (same data).

Checked on the run (nothing hard-coded):

- for every ensemble, d and beta, the clustering probability does not decrease between the check
  times t1/3, 2 t1/3 and t1, and at t1 it is above its value at t = 0;
- for V = I (random Q, K) and every d, the 1/2-contour (the largest beta where P crosses 1/2)
  moves to larger beta as t grows: beta_1/2(t1/3) < beta_1/2(2 t1/3) < beta_1/2(t1).

Both are paper claims; each fails under a deviation of the data (``DEVIATIONS``; the sweep is not
rerun): the time axis reversed (the probability falls with t, the contour moves to smaller beta) and
the beta axis reversed (P increases with beta: the 1/2-contour is no longer finite). The V = G G^T / d
contour is an observation.

Data layout (data.nc): ``probability`` and ``probability_first_pair`` (V, d, beta, time),
``probability_per_replicate`` (V, d, beta, replicate, time).

References
----------
Geshkovski, Letrouit, Polyanskiy, Rigollet, "A mathematical perspective on Transformers",
section 6.3 (Problem 2), section 9, Figure 5.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from ..runs.plotting import styled
from ._deviations import deviation, read_backwards
from ._verdict import claim
from .glpr_fig3 import empirical_boundary

NAME = "glpr-fig5"
PAPER = "GLPR"
FIGURE = "Fig. 5"
DESCRIPTION = "phase diagrams with random Gaussian Q, K, V: P(particles clustered) over (beta, t), n = 32"
ORDER = 62

#: long_name and units of data.nc's variables (see riemattn.runs._cf)
DATA_ATTRS = {
    "V": ("ensemble of the value matrix V", "1"),
    "d": ("dimension d of the space R^d (particles on S^{d-1})", "1"),
    "beta": ("inverse temperature beta", "1"),
    "replicate": ("replicate index (one draw of Q, K, V and a batch of configurations)", "1"),
    "probability": ("probability that two particles are clustered (<x_i, x_j> >= 1 - eps)", "1"),
    "probability_first_pair": ("fraction of configurations whose particles 1 and 2 are clustered", "1"),
    "probability_per_replicate": ("fraction of clustered pairs, per replicate", "1"),
}


def config(quick: bool = False, *, smoke: bool = False) -> dict:
    """Seeded configuration, both V ensembles. Full: d = 2, 8, 32, 128, 37 betas x 64
    configurations (8 draws of Q, K, V x 8); quick: d = 32, 128, 19 betas x 24 (4 draws x 6);
    smoke: d = 32, 10 betas x 16 (4 draws x 4)."""
    base = {
        "seed": 5,
        "n": 32,
        "eps": 1e-3,
        "dims": [2, 8, 32, 128],
        "beta_max": 9.0,
        "t1": 30.0,
        "dt": 0.1,
        "stepper": "layer",
        "save_every": 0.5,
        "V": ["identity", "wishart"],
    }
    if smoke:
        return {**base, "dims": [32], "n_beta": 10, "configurations": 4, "replicates": 4}
    if quick:
        return {**base, "dims": [32, 128], "n_beta": 19, "configurations": 6, "replicates": 4}
    return {**base, "n_beta": 37, "configurations": 8, "replicates": 8}


def run(config: dict) -> xr.Dataset:
    from ._phase import run_phase_sweep

    sw = run_phase_sweep(config, list(config["V"]))
    return xr.Dataset(
        {
            "probability": sw.pairs.mean("replicate").transpose("V", "d", "beta", "time"),
            "probability_first_pair": sw.first.mean("replicate").transpose("V", "d", "beta", "time"),
            "probability_per_replicate": sw.pairs.transpose("V", "d", "beta", "replicate", "time"),
        },
        attrs={"n": config["n"], "eps": config["eps"],
               "matrices": "Q, K i.i.d. N(0, 1), Q^T K / sqrt(d); V = I or G G^T / d",
               "configurations": config["configurations"] * config["replicates"],
               "draws_of_QKV_per_d": config["replicates"]},
    )


def check_times(ds) -> list[int]:
    """Indices of the check times t1/3, 2 t1/3, t1 on the saved time grid."""
    t = ds.time.values
    return [int(np.argmin(np.abs(t - f * t[-1]))) for f in (1 / 3, 2 / 3, 1.0)]


@styled
def plot(ds: xr.Dataset):
    import matplotlib.pyplot as plt

    dims, laws = ds.d.values, ds.V.values
    fig, axes = plt.subplots(len(laws), len(dims), figsize=(4.2 * len(dims), 3.4 * len(laws)),
                             sharey=True, squeeze=False, layout="constrained")
    for row, law in zip(axes, laws):
        for ax, d in zip(row, dims):
            p = ds.probability.sel(V=law, d=d)
            mesh = ax.pcolormesh(ds.time, ds.beta, p, cmap="RdBu_r", vmin=0, vmax=1,
                                 shading="nearest", rasterized=True)
            b = empirical_boundary(p.values, ds.beta.values)
            ax.plot(ds.time, np.where(np.isfinite(b), b, np.nan), color="yellow", lw=1.0,
                    label="P = 1/2")
            ax.set_ylim(ds.beta[0], ds.beta[-1])
            ax.set_xlim(ds.time[0], ds.time[-1])
            ax.set_xlabel("t")
            ax.set_title(f"V = {'I' if law == 'identity' else 'G G^T / d'}, d = {d}", fontsize=9)
        row[0].set_ylabel("$\\beta$")
    axes[0, -1].legend(loc="lower right", fontsize=8)
    fig.colorbar(mesh, ax=axes, shrink=0.9,
                 label="P($\\langle x_i, x_j\\rangle \\geq 1 - \\varepsilon$)")
    fig.suptitle(f"GLPR Fig. 5: random Q, K, V, n = {ds.attrs['n']}, "
                 f"$\\varepsilon$ = {ds.attrs['eps']}, {ds.attrs['draws_of_QKV_per_d']} draws per d")
    return fig


def claims(ds: xr.Dataset) -> dict:
    idx = check_times(ds)
    times = [float(ds.time.values[i]) for i in idx]
    mono, contour, observed = {}, {}, {}
    mono_ok, contour_ok = True, True
    for law in ds.V.values:
        for d in ds.d.values:
            p = ds.probability.sel(V=law, d=d).values  # (beta, time)
            at = p[:, idx]  # (beta, 3)
            good = np.all(np.diff(at, axis=1) >= 0, axis=1) & (at[:, -1] > p[:, 0])
            mono_ok &= bool(np.all(good))
            mono[f"V={law}, d={int(d)}"] = {
                "betas_violating": ds.beta.values[~good].tolist(),
                "P(t=0) max": float(p[:, 0].max()),
                "min over beta of P(t1)": float(at[:, -1].min()),
            }
            b = empirical_boundary(p, ds.beta.values)[idx]
            if law == "identity":
                contour[f"d={int(d)}"] = b.tolist()
                contour_ok &= bool(np.all(np.isfinite(b)) and np.all(np.diff(b) > 0))
            else:
                observed[f"V={law}, d={int(d)}"] = {"beta_1/2": b.tolist(),
                                                     "min over beta of P(t1)": float(at[:, -1].min())}
    out = {
        "probability_increases_with_t_for_every_beta": claim(
            bool(mono_ok), {"check_times": times, **mono},
            "for every V ensemble, d and beta, P(clustered) does not decrease over t = t1/3, 2t1/3, t1 and at t1 "
            "exceeds its t = 0 value"),
        "half_contour_moves_to_larger_beta": claim(
            bool(contour_ok), {"check_times": times, **{f"beta_1/2, {k}": v for k, v in contour.items()}},
            "with random Q, K (V = I), for every d the beta where P = 1/2 is finite and strictly increases over "
            "t = t1/3, 2t1/3, t1"),
    }
    if observed:
        out["half_contour_with_random_psd_V"] = claim(
            None, {"check_times": times, **observed},
            "with V = G G^T / d, the beta where P = 1/2 (inf: P >= 1/2 at every beta)", kind="observation",
            observed=("P(t1) >= 1/2 at every beta and d: no contour at t1" if all(
                v["min over beta of P(t1)"] >= 0.5 for v in observed.values())
                else "P(t1) < 1/2 somewhere: a contour exists for some d"))
    return out



DEVIATIONS = (
    deviation("time axis reversed", ("probability_increases_with_t_for_every_beta",
                                     "half_contour_moves_to_larger_beta"),
              "the diagrams read backwards in time: clustered pairs separate, the 1/2-contour moves to smaller beta",
              data=read_backwards("time")),
    deviation("beta axis reversed", "half_contour_moves_to_larger_beta",
              "the probabilities assigned to the betas in reverse order: clustering at large beta, not at small, "
              "so P >= 1/2 at beta_max and no finite contour", data=read_backwards("beta")),
)
