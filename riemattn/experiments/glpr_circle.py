"""GLPR section 7: the circle d = 2 -- angle dynamics (eq. 7.1), Kuramoto at beta = 0, energy E_beta.

n = 32 particles on S^1 from i.i.d. uniform angles, (SA) and (USA) at beta in {0, 1, 4}
(beta = 0 is the Kuramoto model with identical frequencies). The particles are integrated as points
of the sphere S^1 by :func:`riemattn.integrate` (adaptive projected Dormand-Prince on the tangent field of
:func:`riemattn.sa` / :func:`riemattn.usa`), and independently as angles by GLPR's eq. (7.1),
:class:`riemattn.dynamics.circle.CircleField` solved by SciPy (DOP853, rtol 1e-12; quick 1e-10). Checked:

* (identity: an implementation check, never counted for the verdict) the two agree to 1e-5 rad:
  the angular equation is the circle case of (SA)/(USA), written in another coordinate, so this
  compares two forms of one equation. Both are solved at rtol <= 1e-9, and the deviation, ~1e-9
  most of the time, peaks at ~1e-6 during the fast merges of two clusters (a small time shift of a
  fast transition);
* (paper claim) the interaction energy E_beta = 1/(2 beta n^2) sum_{i,j} e^{beta cos(theta_i - theta_j)}
  (:func:`riemattn.analysis.gradient_flow.energy`; its beta -> 0 limit |mean x|^2 / 2 at beta = 0) never
  decreases: both dynamics are gradient ascents of E_beta (GLPR section 7.2, Remark 3.8);
* (paper claim) for beta <= 1 the particles synchronize (one cluster; Kuramoto order parameter |mean x| -> 1);
  at beta = 4 several clusters remain at t = 40 (the metastability of GLPR Figure 4, see glpr-fig4).

The paper claims fail under the deviations ``DEVIATIONS``: the value's sign flipped (V = -I, a
repulsive interaction: E_beta decreases, the particles spread) and the time axis read backwards.

References
----------
Geshkovski, Letrouit, Polyanskiy, Rigollet, "A mathematical perspective on Transformers",
section 7.1 (eq. 7.1), section 7.2 (eqs. 7.2-7.4), section 3.4.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from ..solvers.core.integrate import integrate
from ..dynamics.glpr import sa, usa
from ..dynamics.circle import CircleField, from_points, to_points
from ..analysis.gradient_flow import energy
from ..runs.plotting import plot_circle_angles, styled
from ._deviations import deviation
from ._verdict import claim

NAME = "glpr-circle"
PAPER = "GLPR"
FIGURE = "Sec. 7"
DESCRIPTION = "circle d = 2: angle equation (7.1) vs sphere simulation, E_beta non-decreasing, synchronization"
ORDER = 75

MODELS = ("sa", "usa")

#: long_name and units of data.nc's variables (see riemattn.runs._cf)
DATA_ATTRS = {
    "model": ("dynamics: sa = (SA), usa = (USA)", "1"),
    "beta": ("inverse temperature beta", "1"),
    "energy": ("interaction energy E_beta (GLPR section 7.2)", "1"),
    "order_parameter": ("Kuramoto order parameter |mean_i x_i|", "1"),
    "angle_deviation": ("largest |angle on S^1 - angle from GLPR eq. (7.1)| over particles", "rad"),
    "angle": ("particle angle theta_i(t) in (-pi, pi], configuration 0", "rad"),
}


def config(quick: bool = False, *, smoke: bool = False) -> dict:
    """Seeded configuration; ``quick``/``smoke``: coarser step, fewer configurations."""
    base = {
        "seed": 9,
        "n": 32,
        "betas": [0.0, 1.0, 4.0],
        "t1": 40.0,
        "n_save": 201,
        "stepper": "dopri5",
        "value_sign": 1.0,  # the paper's V = I; -1 (a deviation): V = -I on the sphere run, a repulsive interaction
    }
    if smoke:
        return {
            **base,
            "betas": [0.0, 4.0],
            "configurations": 2,
            "rtol": 1e-9,
            "atol": 1e-11,
            "n_save": 81,
            "reference_rtol": 1e-10,
        }
    if quick:
        return {**base, "configurations": 3, "rtol": 1e-9, "atol": 1e-11, "reference_rtol": 1e-10}
    return {**base, "configurations": 16, "rtol": 1e-11, "atol": 1e-13, "reference_rtol": 1e-12}


def run(config: dict) -> xr.Dataset:
    rng = np.random.default_rng(config["seed"])
    n, m, betas = config["n"], config["configurations"], config["betas"]
    theta0 = rng.uniform(-np.pi, np.pi, size=(m, n))
    x0 = to_points(theta0)
    t_save = np.linspace(0.0, config["t1"], config["n_save"])
    shape = (len(MODELS), len(betas), len(t_save), m)
    E, order, dev = np.empty(shape), np.empty(shape), np.empty(shape)
    angles = np.empty((len(MODELS), len(betas), len(t_save), n))  # configuration 0, for the picture
    sign = float(config.get("value_sign", 1.0))
    value = {} if sign == 1.0 else {"U": sign * np.eye(2)}
    for a, model in enumerate(MODELS):
        make = sa if model == "sa" else usa
        for b, beta in enumerate(betas):
            field = make(beta, 2, **value)
            sol = integrate(field, x0, (0.0, float(t_save[-1])), stepper=config["stepper"],
                            rtol=config["rtol"], atol=config["atol"], saveat=t_save)
            _, theta = CircleField(beta, model).solve(
                theta0, (0.0, config["t1"]), t_save, rtol=config["reference_rtol"], atol=1e-12
            )
            # angle difference, wrapped: the sphere simulation vs GLPR eq. (7.1)
            diff = np.angle(np.exp(1j * (from_points(sol.y) - theta)))
            dev[a, b] = np.max(np.abs(diff), axis=-1)
            E[a, b] = energy(sol.y, beta)
            order[a, b] = np.linalg.norm(sol.y.mean(axis=-2), axis=-1)
            angles[a, b] = from_points(sol.y[:, 0])
    return xr.Dataset(
        {
            "energy": (("model", "beta", "time", "configuration"), E),
            "order_parameter": (("model", "beta", "time", "configuration"), order),
            "angle_deviation": (("model", "beta", "time", "configuration"), dev),
            "angle": (("model", "beta", "time", "particle"), angles),
        },
        coords={"model": list(MODELS), "beta": betas, "time": t_save},
        attrs={"n": n},
    )


@styled
def plot(ds: xr.Dataset):
    import matplotlib.pyplot as plt

    betas = ds.beta.values
    fig, axes = plt.subplots(1, len(betas) + 1, figsize=(4 * (len(betas) + 1), 3.8))
    for ax, beta in zip(axes, betas):
        ang = ds.angle.sel(model="sa", beta=beta).values
        plot_circle_angles(ax, ds.time.values, ang)
        ax.set_xlabel("t")
        name = "Kuramoto" if beta == 0 else f"$\\beta$ = {beta:g}"
        ax.set_title(f"(SA) on $S^1$, {name}: angles")
    axes[0].set_ylabel("angle $\\theta_i(t)$ (unwrapped)")
    ax = axes[-1]
    for k, beta in enumerate(betas):
        for model, ls in zip(ds.model.values, ("-", "--")):
            e = ds.energy.sel(model=model, beta=beta).isel(configuration=0)
            ax.plot(
                ds.time,
                (e - e[0]) / (e[-1] - e[0]),
                ls,
                color=f"C{k}",
                label=f"{model.upper()} $\\beta$={beta:g}",
            )
    ax.set_xlabel("t")
    ax.set_ylabel("normalized energy")
    ax.set_title("$(E_\\beta(t) - E_\\beta(0)) / (E_\\beta(t_1) - E_\\beta(0))$")
    ax.legend(fontsize=7, loc="lower right", ncol=2)
    fig.suptitle(f"GLPR section 7: n = {ds.attrs['n']} particles on the circle")
    return fig


def claims(ds: xr.Dataset) -> dict:
    E = ds.energy.values  # (model, beta, time, configuration)
    drop = np.diff(E, axis=2) / np.abs(E[:, :, :-1])
    worst_drop = float(-np.min(drop))
    dev = float(ds.angle_deviation.max())
    r_end = float(ds.order_parameter.isel(time=-1).sel(beta=ds.beta[ds.beta <= 1]).min())
    return {
        "energy_non_decreasing": claim(
            worst_drop <= 1e-12, worst_drop,
            "largest relative decrease of E_beta between saved times <= 1e-12 (rounding), SA and USA, every beta "
            "and configuration: both are gradient ascents of E_beta (GLPR section 7.2)"),
        "matches_angle_equation": claim(
            dev < 1e-5, dev,
            "identity: max |angle from the S^1 simulation - angle from GLPR eq. (7.1)| < 1e-5 rad -- eq. (7.1) is "
            "(SA)/(USA) on S^1 written in the angle, so this compares two solvers of one equation (both at rtol "
            "<= 1e-9; the largest deviations occur during cluster merges)", kind="identity"),
        "synchronization": claim(
            r_end > 1 - 1e-6, r_end,
            "for beta <= 1 (Kuramoto and beta = 1) the order parameter |mean x_i(t1)| > 1 - 1e-6 for every run "
            "(one cluster), from i.i.d. uniform angles"),
    }


def _repulsive(cfg):
    # one configuration, fewer saved times: the deviation needs only the sphere run's energy and order
    return {**cfg, "value_sign": -1.0, "configurations": 1, "n_save": 41}


DEVIATIONS = (
    deviation("value sign flipped (repulsive)", ("energy_non_decreasing", "synchronization"),
              "V = -I on the sphere run: the particles repel, E_beta decreases (a gradient descent) and they spread "
              "instead of synchronizing", config=_repulsive),
    deviation("time axis reversed", ("energy_non_decreasing", "synchronization"),
              "the saved times read backwards: the energy falls, and the last time is the uniform start",
              data=lambda ds: ds.isel(time=slice(None, None, -1))),
)
