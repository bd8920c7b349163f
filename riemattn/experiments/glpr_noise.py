"""GLPR Problem 7: noisy tokens on the circle, the mean-field limit and the critical noise sigma_c(beta).

n tokens on S^1 move by (SA) or (USA) plus independent Brownian motions of generator
``(sigma^2/2) d^2/dtheta^2`` (:func:`riemattn.solvers.sde.integrate_sde`, Strang splitting, whose
noise step is exact on the circle), from i.i.d. uniform angles. Linearising the continuity equation
about the uniform density gives ``sigma_c(beta)^2 = (I_0(beta) - I_2(beta)) / Z_0`` (``Z_0 = I_0(beta)``
for SA, 1 for USA; :func:`riemattn.analysis.theory.critical_noise`). Checked:

* the transition: below sigma_c the order parameter ``r = |mean_i e^{i theta_i}|`` is O(1) and
  matches the stationary density of the continuity equation (:class:`~riemattn.analysis.meanfield.CircleDensity`,
  solved directly); above sigma_c it is O(n^{-1/2}), and the linearised fluctuations give
  ``n E r^2 = sigma^2 / (sigma^2 - sigma_c^2)``, so ``sigma_c^2 = sigma^2 (1 - 1 / (n <r^2>))`` is
  *measured* from the particles at sigma = 1.25 and 1.5 sigma_c and compared with the prediction
  (within 10 %, SA and USA, three beta);
* the mean-field limit: the Fourier moments k = 1, 2 of n noisy particles from a smooth density at
  t = 2 against the spectral solution of the continuity equation, error ~ n^{-1/2}.

Paper claims and their deviations (``DEVIATIONS``): the measured sigma_c against the prediction
(fails against the prediction of the other generator convention, sigma^2 d^2/dtheta^2, whose
sigma_c is smaller by sqrt 2); r = O(1) below and O(n^{-1/2}) above (fails with the noise axis read
backwards); the ordered state against the stationary density (fails against the densities of the
other generator convention, the branch at sqrt 2 sigma); the n^{-1/2} rate (fails when the particles
are compared with the initial density instead of the solution at t_pde).

Noted (observation): USA's bifurcation turns subcritical near beta = 3 (a non-uniform stationary
state exists at sigma = sigma_c), so there the transition seen from a clustered start lies above
sigma_c; the sweep uses beta <= 2.

References
----------
Geshkovski, Letrouit, Polyanskiy, Rigollet, "A mathematical perspective on Transformers", section 3
(continuity equation), eq. (7.1), Problem 7.
"""

from __future__ import annotations

import math

import numpy as np
import xarray as xr

from ..analysis.meanfield import CircleDensity, critical_noise, fourier_moments, order_parameter, uniform_growth_rate
from ..dynamics.glpr import sa, usa
from ..dynamics.circle import from_points, to_points
from ..runs.plotting import styled
from ..solvers.stochastic.sde import integrate_sde
from ._deviations import deviation
from ._verdict import claim

NAME = "glpr-noise"
PAPER = "GLPR"
FIGURE = "Problem 7"
DESCRIPTION = "noisy tokens on the circle: order parameter vs sigma / sigma_c(beta), particles vs continuity equation"
ORDER = 77

MODELS = ("sa", "usa")

DATA_ATTRS = {
    "model": ("dynamics: sa = (SA), usa = (USA)", "1"),
    "beta": ("inverse temperature beta", "1"),
    "r_mean": ("stationary order parameter |mean_i e^{i theta_i}| of the particles (time and run average)", "1"),
    "nr2": ("n <r^2> of the particles (time and run average)", "1"),
    "r_meanfield": ("order parameter of the stationary density of the continuity equation", "1"),
    "r_meanfield_curve": ("order parameter of the stationary density on the branch from sigma = 0.5 sigma_c", "1"),
    "ratio": ("noise over its critical value, sigma / sigma_c(beta)", "1"),
    "ratio_curve": ("sigma / sigma_c(beta) of r_meanfield_curve", "1"),
    "n_particles": ("number of particles", "1"),
    "sigma_c": ("predicted critical noise sigma_c(beta) (linearised continuity equation)", "1"),
    "sigma_c_measured": ("sigma_c measured from the particles' fluctuations above sigma_c", "1"),
    "sigma_c_measured_se": ("standard error of sigma_c_measured from the scatter over runs", "1"),
    "r_time": ("order parameter of the particles over time, mean over runs", "1"),
    "moment_particles": ("Fourier moments k = 1, 2 of the noisy particles at t_pde (real, imaginary part), per run",
                         "1"),
    "moment_pde": ("Fourier moments k = 1, 2 of the continuity equation's solution at t_pde (real, imaginary)", "1"),
    "moment_initial": ("Fourier moments k = 1, 2 of the initial density (real, imaginary)", "1"),
}


def config(quick: bool = False, *, smoke: bool = False) -> dict:
    base = {"seed": 30, "betas": [0.5, 1.0, 2.0], "ratios": [0.5, 0.7, 0.85, 1.25, 1.5, 2.0], "above": [1.25, 1.5],
            "burn_in": 20.0, "N": 128, "pde_beta": 1.0, "pde_ratio": 0.7, "t_pde": 2.0}
    # n_pde up to 1024: over 16 ... 256 with 4 runs the fitted slope scatters by ~0.1 and a reference off by
    # 0.15 in both moments (the initial density's) still gave -0.26 / -0.36 (inside the window); with 1024
    # such a bias flattens it to ~-0.2 while the PDE itself gives -0.43 ... -0.61 (measured, 3 draws)
    if smoke:
        return {**base, "betas": [1.0], "ratios": [0.5, 0.85, 1.25, 1.5], "n": 64, "runs": 6, "t1": 45.0,
                "dt": 0.25, "n_pde": [16, 64, 256, 1024], "pde_runs": 4}
    if quick:
        return {**base, "ratios": [0.5, 0.7, 0.85, 1.25, 1.5], "n": 64, "runs": 6, "t1": 45.0, "dt": 0.25,
                "n_pde": [16, 64, 256, 1024], "pde_runs": 4}
    return {**base, "n": 128, "runs": 8, "t1": 100.0, "dt": 0.2, "n_pde": [32, 128, 512, 2048], "pde_runs": 8}


def _sweep(model, cfg, rng):
    betas, ratios = np.array(cfg["betas"]), np.array(cfg["ratios"])
    sc = critical_noise(betas, model)
    sigma = sc[:, None, None] * ratios[None, :, None] * np.ones(cfg["runs"])
    theta0 = rng.uniform(-math.pi, math.pi, sigma.shape + (cfg["n"],))
    field = (sa if model == "sa" else usa)(betas[:, None, None], 2)
    times = np.arange(0.0, cfg["t1"] + 1e-9, 1.0)
    sol = integrate_sde(field, to_points(theta0), (0.0, cfg["t1"]), sigma=sigma, dt=cfg["dt"], method="strang",
                        seed=int(rng.integers(2**31)), saveat=times,
                        save_fn=lambda t, y: np.linalg.norm(y.mean(axis=-2), axis=-1))
    return times, sol.observables["value"]  # (time, beta, ratio, run)


def _pde_rate(cfg, rng):
    """Moments k = 1, 2 of noisy SA particles from a smooth density vs the continuity equation."""
    beta = cfg["pde_beta"]
    sigma = cfg["pde_ratio"] * critical_noise(beta, "sa")
    cd = CircleDensity(beta, "sa", sigma=sigma, N=cfg["N"])
    fine = np.linspace(0.0, 2 * math.pi, 4097)
    dens = lambda th: np.exp(np.cos(th) + 0.5 * np.sin(2 * th))  # noqa: E731
    rho0 = dens(cd.theta) / (dens(cd.theta).mean() * 2 * math.pi)
    pde = fourier_moments(cd.solve(rho0, (0.0, cfg["t_pde"]), dt=0.01).rho[-1], 2)
    initial = fourier_moments(rho0, 2)
    cdf = np.concatenate([[0.0], np.cumsum(dens(fine[1:]) + dens(fine[:-1]))])
    parts = []
    for n in cfg["n_pde"]:
        theta0 = np.interp(rng.uniform(0, cdf[-1], (cfg["pde_runs"], n)), cdf, fine)
        sol = integrate_sde(sa(beta, 2), to_points(theta0), (0.0, cfg["t_pde"]), sigma=sigma, dt=0.1,
                            method="strang", seed=int(rng.integers(2**31)), saveat=[0.0, cfg["t_pde"]])
        th = from_points(sol.y[-1])
        part = np.stack([np.exp(1j * th).mean(-1), np.exp(2j * th).mean(-1)], axis=-1)
        parts.append(part)
    ri = lambda z: np.stack([np.real(z), np.imag(z)], axis=-1)  # noqa: E731
    return ri(np.stack(parts)), ri(np.asarray(pde)), ri(np.asarray(initial))


def _moment_error(ds):
    """Mean |Fourier moment k = 1, 2 of the particles - of the PDE| at t_pde, per n."""
    part = ds.moment_particles.values[..., 0] + 1j * ds.moment_particles.values[..., 1]
    pde = ds.moment_pde.values[..., 0] + 1j * ds.moment_pde.values[..., 1]
    return np.abs(part - pde).mean(axis=(1, 2))


def run(cfg: dict) -> xr.Dataset:
    rng = np.random.default_rng(cfg["seed"])
    betas, ratios = cfg["betas"], cfg["ratios"]
    shape = (len(MODELS), len(betas), len(ratios))
    r_mean, nr2, r_mf = np.empty(shape), np.empty(shape), np.zeros(shape)
    sc, sc_meas, sc_se = np.empty(shape[:2]), np.empty(shape[:2]), np.empty(shape[:2])
    r_time = None
    fine = np.concatenate([np.linspace(0.5, 0.95, 10), [0.975, 0.99, 1.0]])
    r_fine = np.zeros((len(MODELS), len(betas), len(fine)))
    above = [ratios.index(a) for a in cfg["above"]]
    for a, model in enumerate(MODELS):
        times, r = _sweep(model, cfg, rng)
        late = times >= cfg["burn_in"]
        r_mean[a] = r[late].mean(axis=(0, -1))
        nr2[a] = cfg["n"] * (r[late] ** 2).mean(axis=(0, -1))
        if r_time is None:
            r_time = np.empty((len(MODELS),) + r.shape[:-1])
        r_time[a] = r.mean(-1)
        sc[a] = critical_noise(np.array(betas), model)
        per_run = cfg["n"] * (r[late] ** 2).mean(axis=0)  # (beta, ratio, run)
        for b, beta in enumerate(betas):
            s2 = (np.array(cfg["above"]) * sc[a, b]) ** 2 * (1 - 1 / nr2[a, b, above])
            sc_meas[a, b] = math.sqrt(max(float(s2.mean()), 0.0))
            s2_run = ((np.array(cfg["above"]) * sc[a, b]) ** 2)[:, None] * (1 - 1 / per_run[b, above])
            sc_se[a, b] = float(np.sqrt(np.clip(s2_run.mean(0), 0, None)).std(ddof=1)) / math.sqrt(cfg["runs"])
            guess = None
            for c in np.argsort(ratios):
                if ratios[c] < 1:
                    st = CircleDensity(beta, model, sigma=ratios[c] * sc[a, b], N=cfg["N"]).stationary_state(guess)
                    r_mf[a, b, c], guess = order_parameter(st), st
            guess = None
            for c, f in enumerate(fine[:-1]):  # the stationary branch for the picture (continuation in sigma)
                st = CircleDensity(beta, model, sigma=f * sc[a, b], N=cfg["N"]).stationary_state(guess)
                r_fine[a, b, c], guess = order_parameter(st), st
    moments, pde, initial = _pde_rate(cfg, rng)
    usa3 = CircleDensity(3.0, "usa", sigma=critical_noise(3.0, "usa"), N=cfg["N"])
    r_usa3 = order_parameter(usa3.stationary_state(np.exp(4 * np.cos(usa3.theta))))
    return xr.Dataset(
        {
            "r_mean": (("model", "beta", "ratio"), r_mean),
            "nr2": (("model", "beta", "ratio"), nr2),
            "r_meanfield": (("model", "beta", "ratio"), r_mf),
            "r_meanfield_curve": (("model", "beta", "ratio_curve"), r_fine),
            "sigma_c": (("model", "beta"), sc),
            "sigma_c_measured": (("model", "beta"), sc_meas),
            "sigma_c_measured_se": (("model", "beta"), sc_se),
            "r_time": (("model", "time", "beta", "ratio"), r_time),
            "moment_particles": (("n_particles", "pde_run", "moment", "part"), moments),
            "moment_pde": (("moment", "part"), pde),
            "moment_initial": (("moment", "part"), initial),
        },
        coords={"model": list(MODELS), "beta": betas, "ratio": ratios, "time": times, "n_particles": cfg["n_pde"],
                "ratio_curve": fine},
        attrs={"n": cfg["n"], "runs": cfg["runs"], "t1": cfg["t1"], "burn_in": cfg["burn_in"],
               "above": list(cfg["above"]), "usa_beta3_r_at_sigma_c": r_usa3, "pde_beta": cfg["pde_beta"],
               "pde_ratio": cfg["pde_ratio"], "t_pde": cfg["t_pde"]},
    )


@styled
def plot(ds: xr.Dataset):
    import matplotlib.pyplot as plt

    n = ds.attrs["n"]
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.2))
    fine = np.linspace(1.02, float(ds.ratio.max()), 100)
    for ax, model in zip(axes[:2], ds.model.values):
        for k, beta in enumerate(ds.beta.values):
            sel = dict(model=model, beta=beta)
            ax.plot(ds.ratio, ds.r_mean.sel(**sel), "o", color=f"C{k}",
                    label=f"particles $\\beta$={beta:g}, $\\sigma_c$={float(ds.sigma_c.sel(**sel)):.3f}")
            ax.plot(ds.ratio_curve, ds.r_meanfield_curve.sel(**sel), "-", color=f"C{k}", lw=1)
        ax.plot(fine, np.sqrt(fine**2 / (n * (fine**2 - 1))) * math.sqrt(math.pi) / 2, "k:", lw=1,
                label="$\\sqrt{\\pi}/2\\,(n(1-\\sigma_c^2/\\sigma^2))^{-1/2}$")
        ax.axvline(1.0, color="0.5", lw=0.8)
        ax.set_xlabel("$\\sigma / \\sigma_c(\\beta)$")
        ax.set_ylabel("order parameter $r$")
        ax.set_title(f"({model.upper()}) n = {n}: lines = stationary PDE density")
        ax.legend(fontsize=7)
    ax = axes[2]
    ns = ds.n_particles.values
    err = _moment_error(ds)
    ax.loglog(ns, err, "o-", label="particles vs continuity equation")
    ax.loglog(ns, float(err[0]) * np.sqrt(ns[0] / ns), "k--", lw=1, label="$n^{-1/2}$")
    ax.set_xticks(ns, [str(v) for v in ns])
    ax.minorticks_off()
    ax.set_xlabel("n")
    ax.set_ylabel("mean |Fourier moment error|, k = 1, 2")
    ax.set_title(f"(SA) $\\beta$={ds.attrs['pde_beta']:g}, $\\sigma$={ds.attrs['pde_ratio']:g}$\\sigma_c$, "
                 f"t = {ds.attrs['t_pde']:g}")
    ax.legend(fontsize=7)
    fig.suptitle("GLPR Problem 7: noise on the circle, critical noise from the linearised continuity equation")
    return fig


def claims(ds: xr.Dataset) -> dict:
    rel = (ds.sigma_c_measured / ds.sigma_c - 1).values
    rel_se = (ds.sigma_c_measured_se / ds.sigma_c).values
    lo, hi = float(ds.ratio.min()), float(ds.ratio.max())
    r_lo = ds.r_mean.sel(ratio=lo).values
    amp = (ds.nr2.sel(ratio=hi) / (hi**2 / (hi**2 - 1))).values  # n <r^2> over its prediction
    # below sigma_c, where only the mode k = 1 grows (lambda_2 < 0): one cluster, no metastable multi-cluster states
    ratio = ds.ratio.values[None, None, :]
    lam2 = np.stack([uniform_growth_rate(2, ds.beta.values[:, None], ds.sigma_c.sel(model=m).values[:, None] * ratio[0], m)
                     for m in ds.model.values])
    single = (ratio < 1) & (lam2 < 0)
    dev_mf = float(np.abs(ds.r_mean - ds.r_meanfield).values[single].max()) if single.any() else float("nan")
    ns, err = ds.n_particles.values, _moment_error(ds)
    slope = float(np.polyfit(np.log(ns), np.log(err), 1)[0])
    return {
        "transition_at_sigma_c": claim(
            bool(np.all(np.abs(rel) <= 0.10)),
            {"relative_deviation": np.round(rel, 4).tolist(), "standard_error": np.round(rel_se, 4).tolist()},
            "sigma_c measured from the particles (n <r^2> = sigma^2 / (sigma^2 - sigma_c^2) at sigma = "
            f"{ds.attrs['above']} sigma_c) within 10 % of the linear-stability prediction, SA and USA, every beta "
            "(relative deviations and their standard errors over runs, model x beta)"),
        "order_parameter_drops": claim(
            bool(np.all(r_lo > 0.5) and np.all((amp > 0.5) & (amp < 2.0))),
            {"r_at_lowest_sigma": np.round(r_lo, 3).tolist(), "n_r2_over_prediction_at_highest": np.round(amp, 3).tolist()},
            f"r > 0.5 at sigma = {lo:g} sigma_c (O(1)) and n <r^2> within a factor 2 of sigma^2 / (sigma^2 - sigma_c^2) "
            f"at sigma = {hi:g} sigma_c (r = O(n^-1/2))"),
        "ordered_state_matches_pde": claim(
            dev_mf < 0.1 if single.any() else "not checked at this size", dev_mf,
            "below sigma_c, where only the mode k = 1 of the uniform density grows (lambda_2 < 0: one cluster), the "
            "particles' order parameter is within 0.1 of the stationary density of the continuity equation "
            f"(n = {ds.attrs['n']}; finite-n fluctuations). Lower noise grows several modes and the particles sit in "
            "metastable multi-cluster states for long times (GLPR section 7 / Figure 4)",
            reason=None if single.any() else "no sigma in the sweep with a single unstable mode"),
        "mean_field_rate": claim(
            -0.75 <= slope <= -0.25, slope,
            "noisy particles from a smooth density approach the continuity equation: the Fourier-moment error at "
            f"t = {ds.attrs['t_pde']:g} falls like n^p with p in [-0.75, -0.25] (theory: -1/2) over n = {ns.tolist()}"),
        "usa_subcritical_at_beta_3": claim(
            None, float(ds.attrs["usa_beta3_r_at_sigma_c"]),
            "USA at beta = 3: order parameter of a non-uniform stationary density at sigma = sigma_c (> 0: the "
            "bifurcation is subcritical there, a first-order transition)", kind="observation",
            observed="non-uniform state at sigma_c" if ds.attrs["usa_beta3_r_at_sigma_c"] > 0.1 else "none"),
    }


def _other_convention_sigma_c(ds):
    return ds.assign(sigma_c=ds.sigma_c / math.sqrt(2.0))


def _other_convention_density(ds):
    """r of the stationary density for the generator sigma^2 d^2/dtheta^2: the branch at sqrt 2 sigma
    (0 beyond sigma_c, where the uniform density is the stable one for beta <= 2)."""
    x = ds.ratio_curve.values
    r = np.zeros(ds.r_meanfield.shape)
    for a in range(r.shape[0]):
        for b in range(r.shape[1]):
            r[a, b] = np.interp(math.sqrt(2.0) * ds.ratio.values, x, ds.r_meanfield_curve.values[a, b], right=0.0)
    r[..., ds.ratio.values >= 1] = 0.0
    return ds.assign(r_meanfield=(ds.r_meanfield.dims, r))


def _noise_axis_reversed(ds):
    return ds.assign(r_mean=(ds.r_mean.dims, ds.r_mean.values[..., ::-1].copy()),
                     nr2=(ds.nr2.dims, ds.nr2.values[..., ::-1].copy()))


DEVIATIONS = (
    deviation("sigma_c of the other generator convention", "transition_at_sigma_c",
              "the prediction for the noise generator sigma^2 d^2/dtheta^2 instead of (sigma^2/2) d^2/dtheta^2: "
              "sigma_c smaller by sqrt 2", data=_other_convention_sigma_c),
    deviation("noise axis reversed", "order_parameter_drops",
              "the particles' order parameters assigned to the noise levels in reverse order",
              data=_noise_axis_reversed),
    deviation("stationary density of the other generator convention", "ordered_state_matches_pde",
              "the particles compared with the stationary density for the generator sigma^2 d^2/dtheta^2 (the "
              "branch at sqrt 2 sigma)", data=_other_convention_density),
    deviation("initial density as the reference", "mean_field_rate",
              "the particles at t_pde compared with the initial density's moments instead of the continuity "
              "equation's solution at t_pde: the error does not fall with n",
              data=lambda ds: ds.assign(moment_pde=ds.moment_initial.copy())),
)
