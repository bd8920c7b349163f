"""Phase diagrams of (SA) as sweeps: shared by glpr-fig3 (Q = K = V = I) and glpr-fig5 (random).

A replicate is ``m`` i.i.d. uniform initial configurations of n particles on S^{d-1} (and, for
random matrices, one draw of Q, K, V), integrated for every beta of the grid at once (an array beta
over the leading batch axis), with GLPR's scheme x <- normalize(x + dt * sum_j softmax_j(beta <Q
x_i, K x_j>) V x_j) (the stepper ``"layer"``); it returns, at every saved time, the fraction of
clustered pairs (<x_i, x_j> >= 1 - eps) averaged over its configurations, per beta. With Q = K = V =
I a sweep task is one (d, replicate) (``batch_dims=("beta",)``); with random matrices one task
integrates every replicate of a d in one call (``batch_dims=("beta", "replicate")``, one (Q^T K, V)
per replicate: per-trajectory weights of batch shape (replicates, 1) against the tokens' batch
(beta, replicate, configuration)). The random stream of a replicate derives from (d, replicate)
(and the ensemble V) and the sweep seed only (:func:`riemattn.runs.sweep.point_seed`, the stream the
replicate had as a task of its own), so the figure is the same whatever the number of workers.

References
----------
Geshkovski, Letrouit, Polyanskiy, Rigollet, "A mathematical perspective on Transformers",
section 6.3, Figures 3 and 5.
"""

from __future__ import annotations

import functools
import os
import tempfile

import numpy as np
import xarray as xr

from ..dynamics.attention import AttentionField
from ..dynamics.glpr import sa
from ..solvers.core.integrate import integrate
from ..runs.sweep import point_rng, sweep


def pair_fraction(x, eps):
    """Fraction of pairs i < j with <x_i, x_j> >= 1 - eps, per configuration: shape x.shape[:-2]."""
    n = x.shape[-2]
    G = x @ np.swapaxes(x, -1, -2)
    iu = np.triu_indices(n, k=1)
    return np.mean(G[..., iu[0], iu[1]] >= 1.0 - eps, axis=-1)


def random_qkv(d, rng, v_law="wishart"):
    """GLPR Fig. 5's random matrices: (Q^T K, V), both (d, d).

    Q, K with i.i.d. N(0, 1) entries, the bilinear form Q^T K / sqrt(d) (entries of variance 1, so
    scores <Q x, K y> of unit vectors are O(1) as with Q = K = I). ``v_law``: "wishart":
    V = G G^T / d with G i.i.d. N(0, 1) (symmetric positive semi-definite, mean eigenvalue 1);
    "gaussian": V = G / sqrt(d); "identity": V = I.
    """
    Q = rng.standard_normal((d, d))
    K = rng.standard_normal((d, d))
    G = rng.standard_normal((d, d))
    if v_law == "gaussian":
        return Q.T @ K / np.sqrt(d), G / np.sqrt(d)
    if v_law == "identity":
        return Q.T @ K / np.sqrt(d), np.eye(d)
    return Q.T @ K / np.sqrt(d), G @ G.T / d


def phase_point(params, rng, *, n, m, eps, t1, dt, save_every, matrices, stepper="layer", seed=None):
    """One sweep task: params {"d": int, "replicate": int or (R,) array, "beta": (n_beta,) array}.

    Returns a Dataset with ``pairs`` (beta, [replicate,] time): the fraction of clustered pairs
    averaged over the m configurations, and ``first``: the fraction of configurations whose first
    two particles are clustered. With an array of replicates, replicate r draws its
    configurations and matrices from ``point_rng({"d", "replicate": r[, "V"]}, seed)`` (``rng`` is
    not used), all of them integrated in one call.
    """
    d = int(params["d"])
    matrices = params.get("V", matrices)  # a grid dimension "V" picks the ensemble per task
    betas = np.asarray(params["beta"], dtype=float)
    t_save = np.arange(0.0, t1 + 1e-9, save_every)
    batched = np.ndim(params.get("replicate")) > 0
    if batched:  # each replicate's stream, as when it was a task of its own
        own = {k: v for k, v in params.items() if k not in ("beta", "replicate")}
        rngs = [point_rng({**own, "replicate": int(r)}, seed) for r in params["replicate"]]
    else:
        rngs = [rng]
    x0, draws = [], []
    for g in rngs:
        x = g.standard_normal((m, n, d))
        x0.append(x / np.linalg.norm(x, axis=-1, keepdims=True))  # i.i.d. uniform on S^{d-1}
        if matrices != "sa":
            draws.append(random_qkv(d, g, matrices))
    x0 = np.stack(x0) if batched else x0[0]  # ([R,] m, n, d)
    x = np.broadcast_to(x0, (len(betas),) + x0.shape)
    beta = betas.reshape((-1,) + (1,) * (x0.ndim - 2))
    if matrices == "sa":
        field = sa(beta, d)
    elif batched:  # one (P, V) per replicate: batch shape (R, 1) against (beta, R, m)
        P, V = (np.stack([dr[k] for dr in draws])[:, None, None] for k in (0, 1))
        field = AttentionField(P, V, normalization="softmax", beta=beta)
    else:
        P, V = draws[0]
        field = AttentionField(P, V, normalization="softmax", beta=beta)

    def observe(t, y):
        return {"pairs": pair_fraction(y, eps),
                "first": np.sum(y[..., 0, :] * y[..., 1, :], axis=-1) >= 1.0 - eps}

    sol = integrate(field, x, (0.0, t_save[-1]), stepper=stepper, dt=dt, saveat=t_save,
                    save_fn=observe)
    dims = ("time", "beta", "replicate") if batched else ("time", "beta")
    return xr.Dataset(
        {"pairs": (dims, sol.observables["pairs"].mean(axis=-1)),
         "first": (dims, sol.observables["first"].mean(axis=-1))},
        coords={"time": t_save},
    )


def run_phase_sweep(config, matrices, store=None) -> xr.Dataset:
    """Run the phase-diagram sweep of ``config``; return (d, beta, replicate, time) arrays, loaded.

    ``config``: seed, n, eps, dims, beta_max, n_beta, configurations (m per replicate),
    replicates, t1, dt, save_every, optional workers (default: one per core, at most the tasks).
    The store is a temporary directory unless ``store`` is given.
    """
    betas = np.linspace(0.0, config["beta_max"], config["n_beta"])
    grid = {"d": list(config["dims"]), "beta": betas.tolist(),
            "replicate": list(range(config["replicates"]))}
    if not isinstance(matrices, str):  # several ensembles: a grid dimension "V"
        grid = {"V": list(matrices), **grid}
    fn = functools.partial(phase_point, n=config["n"], m=config["configurations"],
                           eps=config["eps"], t1=config["t1"], dt=config["dt"],
                           save_every=config["save_every"], matrices=matrices,
                           stepper=config.get("stepper", "layer"), seed=config["seed"])
    # random matrices: every replicate of a (V, d) in one call (one weight matrix per replicate)
    batch_dims = ("beta",) if matrices == "sa" else ("beta", "replicate")
    tasks = len(config["dims"]) * (1 if isinstance(matrices, str) else len(matrices))
    tasks *= config["replicates"] if matrices == "sa" else 1
    workers = config.get("workers") or max(1, min(os.cpu_count() or 1, tasks))
    with tempfile.TemporaryDirectory(prefix="riemattn-phase-") as tmp:
        path = store or os.path.join(tmp, "phase.zarr")
        result = sweep(fn, grid, path, seed=config["seed"], batch_dims=batch_dims, workers=workers)
        if result.failed:
            raise RuntimeError(f"phase-diagram sweep failed at {result.failed}")
        ds = xr.open_zarr(path).load()
        ds.close()
    return ds
