"""Lost in the middle: causal attention with normalised ALiBi weights on the circle; the last token's
retrieval profile over the source positions is U-shaped, as the kinetic theory's closed form says.

Duerinckx, Geshkovski and Rossi (arXiv 2605.09213, 2026) study causal self-attention as a
non-exchangeable particle system on the circle: token j (angle theta_j, j = 0..N-1) moves by

    dtheta_j/dt = sum_{k < j} w_jk (-beta sin(theta_j - theta_k) e^{beta cos(theta_j - theta_k)}),
    w_jk = e^{-(lambda / N)(j - k)} / sum_{k' < j} e^{-(lambda / N)(j - k')},

(the first token does not move), the model of their particle experiment (public code:
borjanG/2026-lost-in-the-middle, ``generate_alibi_particle_circle_dynamics.py``). In riemattn's parts,
with x_j = (cos theta_j, sin theta_j) on S^1::

    AttentionField(I_2, U=beta N I_2, normalization="mean", beta=beta,
                   mask=masks.strict_causal(), bias=biases.alibi(lambda / N, per_row=True))

("mean": alpha_jk = e^{beta <x_j, x_k> + b_jk} / N with e^{b_jk} = w_jk; the tangent update
beta N sum_k alpha_jk (x_k - <x_j, x_k> x_j) is the force above in the angle).

For i.i.d. uniform initial angles the paper proves a mean-field limit and a next-order
characterisation of the correlations, solved in closed form: with s in (0, 1) the source position
k / N and the last token (position 1) as the query, the Fourier mode n of the correlation is, to
leading order in 1/N,

    N E[cos n(theta_last(t) - theta_k(0))] -> c_n(t, s) = lambda e^{lambda s} / (e^lambda - 1) psi_{a_n t}(Y(s)),
    a_n = n^2 I_n(beta),  Y(s) = log((e^lambda - 1) / (e^{lambda s} - 1)),
    psi_c(y) = sum_{k >= 0} c^{k+1} y^k / (k! (k+1)!) = sqrt(c / y) I_1(2 sqrt(c y))

(lambda = 0: the prefactor 1 and Y = log(1 / s)); the soft-accuracy profile of the paper weighs the
modes. In s the profile is U-shaped below a threshold time: primacy (psi grows as s -> 0, where Y
diverges: the chains of causal influence from the first tokens), recency (the ALiBi prefactor grows
with s) and a unique interior minimum: the "lost in the middle" effect.

Run, part 1 (the paper's particle figure): N = 64 tokens in four clusters (centres 0.1 pi .. 1.9 pi,
Gaussian spread 0.075), beta = 1, lambda = 1, to t = 10 with step 0.0025 (quick: 0.01) by ``"rkmk4"``, the
Runge-Kutta-Munthe-Kaas method on RK4's tableau, which on the circle (SO(2) is abelian) is the
classical RK4 in the angle: the authors' integrator. Part 2 (the profile): S samples of N i.i.d.
uniform angles, beta = lambda = 1, t = 1; mode n = 1 of the correlation at K source positions, each by
the antithetic coupling (the same sample with theta_k(0) shifted by pi: cos(theta' - theta_k) has mean
-c_1, so (cos(theta - theta_k) - cos(theta' - theta_k)) / 2 has mean c_1 and a variance O(1/N^2) instead
of O(1)); positions at the midpoints s = (k + 1/2) / N of their cells.

Claims checked. Paper claims (each has a deviation of the model or the data under which it fails):

1. the measured profile is U-shaped: its minimum is interior, and both the first and the last probed
   positions exceed it by more than 3 standard errors (primacy and recency). Fails without ALiBi
   (lambda = 0: no recency) and under full attention (no primacy);
2. the measured profile matches the closed form c_1(t, s): at every probed position the difference is
   at most 4 standard errors plus 3 / N of c_1 (the theory is the N -> infinity limit; its
   corrections are O(1/N): measured at N = 32, the largest deviation is 3 standard errors, 0.1 at the
   first position, where the cell midpoint approximates the divergent Y(s) worst). Fails under full
   attention, with repulsive interaction, and against the closed form of the model without ALiBi.

Identity (an implementation check): the first token never moves (the strict causal mask gives it no
key). Observation: the clusters of the particle run at t = 10 (single linkage at 0.05 rad).

Configuration keys for the deviations: ``mask`` ("strict_causal", the paper's; "full"), ``lam`` and
``sign`` (+1 attractive, the paper's; -1 repulsive).

References
----------
M. Duerinckx, B. Geshkovski, S. Rossi, "Kinetic theory for Transformers and the lost-in-the-middle
phenomenon", arXiv 2605.09213 (2026).
"""

from __future__ import annotations

import math

import numpy as np
import xarray as xr
from scipy.special import iv

from ..dynamics import biases, masks
from ..dynamics.attention import AttentionField
from ..runs.plotting import legend_below, styled
from ..solvers.core.integrate import integrate
from ._deviations import deviation
from ._verdict import claim

NAME = "lost-in-the-middle"
PAPER = "Duerinckx-Geshkovski-Rossi (2026)"
FIGURE = "ALiBi particles on the circle; U-shaped retrieval profile"
DESCRIPTION = "causal attention with row-normalised ALiBi: the last token's retrieval profile is U-shaped, as the kinetic theory's closed form"
ORDER = 98

DATA_ATTRS = {
    "time": ("time of the particle run", "1"),
    "token": ("token position j of the particle run (0 = first)", "1"),
    "theta": ("angle of token j at the saved time (particle run)", "rad"),
    "position": ("probed source position k (0 = first) of the profile", "1"),
    "s": ("cell midpoint (k + 1/2) / N of the probed position", "1"),
    "profile": ("N E[cos(theta_last(t) - theta_k(0))], measured (antithetic coupling, mean over samples)", "1"),
    "stderr": ("standard error of profile", "1"),
    "theory": ("closed form c_1(t, s) of the kinetic theory (mode 1)", "1"),
}

SPREAD = 0.075
#: trajectories per solve of the profile (4000 x 64 x 64 scores: 131 MB an array)
CHUNK = 4000


def config(quick: bool = False, *, smoke: bool = False) -> dict:
    base = {"seed": 17, "beta": 1.0, "lam": 1.0, "mask": "strict_causal", "sign": 1.0, "t_profile": 1.0,
            "dt_profile": 0.05, "particles": 64, "t_particles": 10.0, "dt_particles": 0.0025}
    if smoke or quick:  # the particle figure with 1000 (smoke: 200) steps instead of the authors' 4000 of 0.0025
        return {**base, "tokens": 32, "samples": 400, "probes": 9, "dt_particles": 0.05 if smoke else 0.01}
    return {**base, "tokens": 64, "samples": 2000, "probes": 13}


def field(n: int, beta: float, lam: float, mask: str = "strict_causal", sign: float = 1.0) -> AttentionField:
    """The paper's model for n tokens on S^1 from the parts (module docstring); ``sign`` -1: repulsive."""
    return AttentionField(np.eye(2), U=sign * beta * n * np.eye(2), normalization="mean", beta=beta,
                          mask=masks.strict_causal() if mask == "strict_causal" else mask,
                          bias=biases.alibi(lam / n, per_row=True))


def closed_form(s, t: float, beta: float, lam: float, n: int = 1) -> np.ndarray:
    """c_n(t, s) of the module docstring (psi through the Bessel function I_1), s in (0, 1)."""
    s = np.asarray(s, dtype=float)
    if lam == 0.0:
        pre, Y = np.ones_like(s), np.log(1.0 / s)
    else:
        pre = lam * np.exp(lam * s) / math.expm1(lam)
        Y = np.log(math.expm1(lam) / np.expm1(lam * s))
    c = n * n * iv(n, beta) * t
    return pre * np.sqrt(c / Y) * iv(1, 2.0 * np.sqrt(c * Y))


def _angles(y):
    return np.arctan2(y[..., 1], y[..., 0])


def _circle(theta):
    return np.stack([np.cos(theta), np.sin(theta)], axis=-1)


def _particles(cfg):
    rng = np.random.default_rng(cfg["seed"])
    n = cfg["particles"]
    labels = np.repeat(np.arange(4), math.ceil(n / 4))[:n]
    theta0 = np.linspace(0.1, 1.9, 4)[labels] * np.pi + rng.normal(0.0, SPREAD, size=n)
    times = np.linspace(0.0, cfg["t_particles"], 51)
    f = field(n, cfg["beta"], cfg["lam"], cfg["mask"], cfg["sign"])
    sol = integrate(f, _circle(theta0), (0.0, cfg["t_particles"]), "rkmk4", dt=cfg["dt_particles"], saveat=times,
                    engine="numpy")
    return times, _angles(sol.y)


def _profile(cfg):
    rng = np.random.default_rng(cfg["seed"] + 1)
    n, S = cfg["tokens"], cfg["samples"]
    ks = np.unique(np.linspace(0, n - 2, cfg["probes"]).astype(int))
    theta0 = rng.uniform(0.0, 2 * np.pi, size=(S, n))
    batch = np.repeat(theta0[:, None, :], 1 + len(ks), axis=1)  # the sample, and one copy per probe
    batch[:, np.arange(1, len(ks) + 1), ks] += np.pi  # with theta_k(0) shifted by pi
    f = field(n, cfg["beta"], cfg["lam"], cfg["mask"], cfg["sign"])
    chunk = max(1, CHUNK // (1 + len(ks)))  # samples per solve: bounded memory (scores (B, n, 1, n) per stage)
    y = np.concatenate([integrate(f, _circle(batch[i:i + chunk]), (0.0, cfg["t_profile"]), "rk4",
                                  dt=cfg["dt_profile"], engine="numpy").y[-1] for i in range(0, S, chunk)])
    last = _angles(y)[..., -1]  # (S, 1 + K)
    src = theta0[:, ks]
    est = 0.5 * n * (np.cos(last[:, :1] - src) - np.cos(last[:, 1:] - src))  # (S, K)
    return ks, est.mean(0), est.std(0, ddof=1) / math.sqrt(S), _wrapped(_angles(y)[..., 0] - batch[..., 0])


def _wrapped(a) -> float:
    """The largest |a| with each angle taken in (-pi, pi]."""
    return float(np.max(np.abs(np.angle(np.exp(1j * np.asarray(a))))))


def run(config: dict) -> xr.Dataset:
    times, theta = _particles(config)
    ks, prof, se, first_moved = _profile(config)
    n = config["tokens"]
    s = (ks + 0.5) / n
    return xr.Dataset(
        {"theta": (("time", "token"), theta),
         "s": ("position", s),
         "profile": ("position", prof),
         "stderr": ("position", se),
         "theory": ("position", closed_form(s, config["t_profile"], config["beta"], config["lam"]))},
        coords={"time": times, "token": np.arange(theta.shape[1]), "position": ks},
        attrs={"beta": config["beta"], "lam": config["lam"], "tokens": n, "samples": config["samples"],
               "t_profile": config["t_profile"], "mask": config["mask"], "sign": config["sign"],
               "steps": round(config["t_particles"] / config["dt_particles"]),
               "first_moved": max(first_moved, _wrapped(theta[:, 0] - theta[0, 0]))},
    )


@styled
def plot(ds: xr.Dataset):
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(14, 4.4))
    grid = fig.add_gridspec(1, 6, width_ratios=[1, 1, 1, 1, 0.45, 2.6])
    snaps = [0, len(ds.time) // 5, len(ds.time) // 2, len(ds.time) - 1]
    colors = plt.get_cmap("tab10")(np.repeat(np.arange(4), math.ceil(ds.sizes["token"] / 4))[: ds.sizes["token"]])
    for p, i in enumerate(snaps):
        ax = fig.add_subplot(grid[0, p])
        th = ds.theta.values[: i + 1]
        for j in range(th.shape[1]):
            ax.plot(np.cos(th[:, j]), np.sin(th[:, j]), color=colors[j], lw=0.6)
        ax.scatter(np.cos(th[-1]), np.sin(th[-1]), s=8, color=colors)
        ax.add_artist(plt.Circle((0, 0), 1.0, fill=False, color="0.7", lw=0.6))
        ax.set_aspect("equal")
        ax.set_xlim(-1.1, 1.1)
        ax.set_ylim(-1.1, 1.1)
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_title(f"t = {float(ds.time[i]):g}")
    ax = fig.add_subplot(grid[0, 5])
    ax.errorbar(ds.s, ds.profile, yerr=2 * ds.stderr, fmt="o", label="particles (N = %d), 2 s.e." % ds.attrs["tokens"])
    s = np.linspace(0.01, 0.99, 200)
    ax.plot(s, closed_form(s, ds.attrs["t_profile"], ds.attrs["beta"], ds.attrs["lam"]), label="closed form $c_1(t, s)$")
    ax.set_xlabel("source position s")
    ax.set_ylabel(r"$N\,E[\cos(\theta_N(t) - \theta_k(0))]$")
    ax.set_title(f"retrieval profile, t = {ds.attrs['t_profile']:g}")
    legend_below(ax, ncol=1)
    return fig


def claims(ds: xr.Dataset) -> dict:
    prof, se, th = ds.profile.values, ds.stderr.values, ds.theory.values
    n = ds.attrs["tokens"]
    low = int(np.argmin(prof))
    z_first = float((prof[0] - prof[low]) / math.hypot(se[0], se[low])) if low else 0.0
    z_last = float((prof[-1] - prof[low]) / math.hypot(se[-1], se[low])) if low < len(prof) - 1 else 0.0
    allowed = 4 * se + 3 * np.abs(th) / n
    excess = np.abs(prof - th) / allowed
    theta = ds.theta.values
    gaps = np.sort(np.mod(theta[-1], 2 * np.pi))
    gaps = np.diff(np.concatenate([gaps, gaps[:1] + 2 * np.pi]))
    floor = 4 * ds.attrs["steps"] * np.finfo(float).eps  # its update is 0; each step re-normalises: <= 2 eps a step
    return {
        "retrieval_u_shaped": claim(
            bool(0 < low < len(prof) - 1 and z_first > 3 and z_last > 3),
            {"argmin position": int(ds.position.values[low]), "z primacy": z_first, "z recency": z_last},
            "the last token's measured retrieval profile N E[cos(theta_last(t) - theta_k(0))] has an interior "
            "minimum, and the first and last probed positions exceed it by > 3 standard errors (primacy, recency)"),
        "matches_kinetic_theory": claim(
            bool(np.all(excess <= 1.0)),
            {"largest |measured - closed form| / allowed": float(excess.max()),
             "largest |measured - closed form|": float(np.abs(prof - th).max())},
            "at every probed position |measured - c_1(t, s)| <= 4 standard errors + 3 c_1 / N (the next order)"),
        "first_token_fixed": claim(
            bool(ds.attrs["first_moved"] <= floor), {"largest displacement of the first token": ds.attrs["first_moved"]},
            "identity: the first token never moves -- the strict causal mask leaves it no key", kind="identity"),
        "clusters_at_end": claim(
            None, {"clusters at 0.05 rad": int(np.sum(gaps > 0.05))},
            "particle run: the clusters at t = 10 (gaps > 0.05 rad between sorted angles)", kind="observation"),
    }


def _lambda_zero_theory(ds):
    return ds.assign(theory=("position", closed_form(ds.s.values, ds.attrs["t_profile"], ds.attrs["beta"], 0.0)))


DEVIATIONS = (
    deviation("no ALiBi (lambda = 0)", "retrieval_u_shaped",
              "the same samples without the positional decay: nothing favours the recent tokens, the profile "
              "decreases with the position (primacy only)", config=lambda c: {**c, "lam": 0.0}),
    deviation("full attention", ("retrieval_u_shaped", "matches_kinetic_theory"),
              "every token attends to every token (mask 'full'): no causal chains from the first tokens",
              config=lambda c: {**c, "mask": "full"}),
    deviation("repulsive interaction", "matches_kinetic_theory",
              "U = -beta N I: the tokens repel; the closed form is that of the attractive model",
              config=lambda c: {**c, "sign": -1.0}),
    deviation("closed form without ALiBi", "matches_kinetic_theory",
              "the measured profile against c_1 of the model with lambda = 0", data=_lambda_zero_theory),
)
