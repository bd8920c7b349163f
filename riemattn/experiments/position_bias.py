"""Position bias of multi-layer causal attention: the cumulative influence concentrates on the first
positions as depth grows; a decay mask (ALiBi) or RoPE makes each layer local and delays it.

Wu, Wang, Jegelka and Jadbabaie (ICML 2025, arXiv 2502.01951) model attention masks as directed
graphs and follow the cumulative attention of t layers, the product of the layers' row-stochastic
attention matrices

    P^(t) = A^(t) A^(t-1) ... A^(1),   [P^(t)]_ij = influence of position j on token i after t layers,

and find: (i) under a causal mask the cumulative influence is biased towards the early positions,
increasingly with depth (the first token attends only to itself, so the products converge to
1 e_1^T); (ii) a decay mask (score bias -m |i - j|) and RoPE each make a single attention map decay
with distance, and across layers this competes with the causal mask's pull towards the first
positions: a trade-off between the within-layer decay and the cumulative importance of the start.

Run (riemattn's dynamics gives the layers' attention maps): l tokens uniform on S^{d-1} (d = 8),
``AttentionField(I, mask="causal", normalization="softmax", beta=1)``, stepper ``"layer"`` (tau =
0.25), depth T; variants: no positional encoding, ALiBi slopes m (``alibi=m``) and RoPE
(``rope=theta``, theta_k = 10^(-8k/d), k < d/2), all from the same initial tokens. A^(t) is the
attention of the tokens entering layer t; P^(t) is accumulated in NumPy as the attention-only
product (the residual of the layer step enters only through the tokens).

Claims checked (the paper's findings, derived from its abstract and the mathematics of P^(t); the
paper's trained-model experiments are not reproduced). Paper claims (each with a deviation under
which it fails: ``DEVIATIONS``):

1. causal bias grows with depth: without positions the first position's share [P^(t)]_{l1} of the
   last token's cumulative influence is larger at depth T than after one layer, and more than half
   at T. It fails with the causal mask removed (the first token is then no different from the
   others) and on the layers read backwards;
2. trade-off across depth: the depth at which the first position's share of the last token's
   influence first exceeds 1/2 grows with the ALiBi slope (non-decreasing, larger at the largest
   slope than at m = 0), and is reached within T for every slope (the causal bias still wins). It
   fails with the causal mask removed (never reached) and with the depths assigned to the slopes in
   reverse order;
3. RoPE keeps the causal bias: with RoPE the first position also reaches more than half of the last
   token's cumulative influence within T. It fails with the causal mask removed.

Identities (implementation checks, never counted for the verdict):

- min_i [P^(t)]_i1 never decreases, every variant (to rounding): each row of P^(t+1) = A^(t+1) P^(t)
  is a convex combination of rows of P^(t) -- true of any product of row-stochastic matrices;
- decay within a layer: the last token's mean attention distance sum_j A^(1)_lj (l - j) strictly
  decreases as the ALiBi slope grows (m = 0 included) -- the bias -m (l - j) tilts the softmax
  exponentially in the distance, and the mean of the distance under an exponential tilt has
  derivative -variance < 0 in m.

Configuration key for the deviations: ``mask`` ("causal", the paper's model; "full": no mask).

Observation: the mean attention distance of the first layer with RoPE beside the one without.

References
----------
X. Wu, Y. Wang, S. Jegelka, A. Jadbabaie, "On the emergence of position bias in transformers",
ICML 2025 (arXiv 2502.01951).
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from ..dynamics.attention import AttentionField
from ..runs.plotting import legend_below, styled
from ..solvers.core.integrate import integrate
from ._deviations import deviation
from ._verdict import claim

NAME = "position-bias"
PAPER = "Wu-Wang-Jegelka-Jadbabaie (ICML 2025)"
FIGURE = "position bias of causal attention"
DESCRIPTION = "causal attention: cumulative influence moves to the first positions with depth; ALiBi/RoPE trade-off"
ORDER = 97

DATA_ATTRS = {
    "variant": ("positional encoding of the run (none, ALiBi slope m, RoPE)", "1"),
    "layer": ("depth t (number of attention layers)", "1"),
    "position": ("token position j (0 = first)", "1"),
    "slope": ("ALiBi slope m of the variant (0 for none and RoPE)", "1"),
    "first_share": ("[P^(t)]_{l,1}: the first position's share of the last token's cumulative influence", "1"),
    "min_first": ("min_i [P^(t)]_{i,1} over the tokens", "1"),
    "profile": ("[P^(t)]_{l,j} at the probe depth t: the last token's cumulative influence", "1"),
    "layer1": ("[A^(1)]_{l,j}: the last token's attention in the first layer", "1"),
    "mean_distance": ("sum_j A^(1)_{l,j} (l - j): the last token's mean attention distance, layer 1", "1"),
    "t_half": ("first depth at which first_share > 1/2 (nan: not within T)", "1"),
}

D = 8
TAU = 0.25


def config(quick: bool = False, *, smoke: bool = False) -> dict:
    if smoke:
        return {"seed": 97, "tokens": 12, "depth": 80, "probe": 10, "slopes": [0.5, 1.0], "mask": "causal"}
    if quick:
        return {"seed": 97, "tokens": 24, "depth": 150, "probe": 10, "slopes": [0.25, 0.5, 1.0], "mask": "causal"}
    return {"seed": 97, "tokens": 32, "depth": 400, "probe": 10, "slopes": [0.125, 0.25, 0.5, 1.0, 2.0], "mask": "causal"}


def _variants(slopes):
    theta = 10.0 ** (-8.0 * np.arange(D // 2) / D)
    out = [("none", 0.0, {})]
    out += [(f"alibi m={m:g}", float(m), {"alibi": float(m)}) for m in slopes]
    out.append(("rope", 0.0, {"rope": theta}))
    return out


def cumulative(A: np.ndarray) -> np.ndarray:
    """P^(t) = A^(t) ... A^(1) for t = 1..T from A of shape (T, l, l); shape (T, l, l)."""
    P = np.empty_like(A)
    P[0] = A[0]
    for t in range(1, len(A)):
        P[t] = A[t] @ P[t - 1]
    return P


def run(config: dict) -> xr.Dataset:
    rng = np.random.default_rng(config["seed"])
    ell, T = config["tokens"], config["depth"]
    y0 = rng.normal(size=(ell, D))
    y0 /= np.linalg.norm(y0, axis=1, keepdims=True)
    layers = np.arange(T + 1) * TAU
    names, slopes, first, minfirst, profile, layer1, dist, thalf = [], [], [], [], [], [], [], []
    for name, m, kw in _variants(config["slopes"]):
        field = AttentionField(np.eye(D), mask=config.get("mask", "causal"), normalization="softmax", **kw)
        y = integrate(field, y0, (0.0, T * TAU), "layer", dt=TAU, saveat=layers, engine="numpy").y
        A = np.stack([field.attention(0.0, yt)[0] for yt in y[:-1]])  # A^(t) from the tokens entering t
        P = cumulative(A)
        names.append(name)
        slopes.append(m)
        first.append(P[:, -1, 0])
        minfirst.append(P[:, :, 0].min(-1))
        profile.append(P[config["probe"] - 1, -1])
        layer1.append(A[0, -1])
        dist.append(float(A[0, -1] @ (ell - 1 - np.arange(ell))))
        above = np.flatnonzero(P[:, -1, 0] > 0.5)
        thalf.append(float(above[0] + 1) if above.size else np.nan)
    return xr.Dataset(
        {
            "slope": ("variant", np.array(slopes)),
            "first_share": (("variant", "layer"), np.array(first)),
            "min_first": (("variant", "layer"), np.array(minfirst)),
            "profile": (("variant", "position"), np.array(profile)),
            "layer1": (("variant", "position"), np.array(layer1)),
            "mean_distance": ("variant", np.array(dist)),
            "t_half": ("variant", np.array(thalf)),
        },
        coords={"variant": names, "layer": np.arange(1, T + 1), "position": np.arange(ell)},
        attrs={"tau": TAU, "beta": 1.0, "d": D, "probe_depth": config["probe"], "mask": config.get("mask", "causal")},
    )


@styled
def plot(ds: xr.Dataset):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 3, figsize=(14, 4.4))
    for k, v in enumerate(ds.variant.values):
        ax[0].plot(ds.position, ds.layer1[k], marker=".", label=str(v))
        ax[1].semilogx(ds.layer, ds.first_share[k], label=str(v))
        ax[2].plot(ds.position, ds.profile[k], marker=".", label=str(v))
    ax[0].set_xlabel("position j")
    ax[0].set_ylabel("$A^{(1)}_{l,j}$")
    ax[0].set_title("one layer: attention of the last token")
    ax[1].axhline(0.5, color="0.6", lw=0.8)
    ax[1].set_xlabel("depth t")
    ax[1].set_ylabel("$[P^{(t)}]_{l,1}$")
    ax[1].set_title("first position's share of the cumulative influence")
    ax[2].set_xlabel("position j")
    ax[2].set_ylabel("$[P^{(t)}]_{l,j}$")
    ax[2].set_title(f"cumulative influence at depth t = {ds.attrs['probe_depth']}")
    for a in ax:
        legend_below(a, ncol=3)
    return fig


def claims(ds: xr.Dataset) -> dict:
    ell, T = ds.sizes["position"], ds.sizes["layer"]
    names = list(ds.variant.values)
    # min_i P_i1 is a minimum of convex combinations of the previous minimum's row set: it can drop only
    # by rounding, about l eps per product, accumulated over T layers
    floor = 4 * ell * T * np.finfo(float).eps
    drop = float(np.max(-np.diff(ds.min_first.values, axis=1)))
    none = names.index("none")
    share = float(ds.first_share.values[none, -1])
    decay = [none] + [i for i, n in enumerate(names) if n.startswith("alibi")]
    m = ds.slope.values[decay]
    order = np.argsort(m, kind="stable")
    dist = ds.mean_distance.values[decay][order]
    th = ds.t_half.values[decay][order]
    rope = names.index("rope")
    grown = float(ds.first_share.values[none, 0])
    return {
        "causal_bias_grows": claim(bool(share > 0.5 and share > grown),
                                   {"first share after 1 layer (none)": grown, "first share at T (none)": share},
                                   "causal mask, no positions: the first position's share of the last token's "
                                   "cumulative influence is larger at T than after one layer, and more than half"),
        "tradeoff_with_depth": claim(bool(np.isfinite(th).all() and np.all(np.diff(th) >= 0) and th[-1] > th[0]),
                                     {"slopes": m[order].tolist(), "t_half": th.tolist()},
                                     "depth at which the first position passes 1/2 of the last token's influence grows "
                                     "with m (non-decreasing, larger at the largest m than at m = 0), reached within T"),
        "rope_keeps_causal_bias": claim(bool(np.isfinite(ds.t_half.values[rope])), float(ds.t_half.values[rope]),
                                        "with RoPE the first position passes 1/2 of the last token's influence within T"),
        "min_first_never_decreases": claim(
            bool(drop <= floor), {"largest drop of min_i P_i1": drop},
            "identity: min_i [P^(t)]_i1 never decreases (every variant, to rounding) -- each row of A^(t+1) P^(t) "
            "is a convex combination of rows of P^(t), for any row-stochastic A", kind="identity"),
        "decay_within_layer": claim(
            bool(np.all(np.diff(dist) < 0)), {"slopes": m[order].tolist(), "mean distance": dist.tolist()},
            "identity: layer 1, the last token's mean attention distance strictly decreases as m grows -- the "
            "ALiBi bias tilts the softmax exponentially in the distance (derivative -variance)", kind="identity"),
        "rope_within_layer": claim(None, {"rope": float(ds.mean_distance.values[rope]),
                                          "none": float(ds.mean_distance.values[none])},
                                   "layer-1 mean attention distance of the last token, RoPE vs none", kind="observation"),
    }


def _alibi_reversed(ds):
    t = ds.t_half.values.copy()
    alibi = [i for i, n in enumerate(ds.variant.values) if str(n).startswith("alibi") or str(n) == "none"]
    t[alibi] = t[alibi][::-1]
    return t


DEVIATIONS = (
    deviation("causal mask removed", ("causal_bias_grows", "tradeoff_with_depth", "rope_keeps_causal_bias"),
              "the same tokens and variants with full attention: the first position is no longer the only one "
              "every token sees, so nothing pulls the cumulative influence onto it",
              config=lambda c: {**c, "mask": "full"}),
    deviation("layers read backwards", "causal_bias_grows",
              "the first position's share read from depth T down to depth 1",
              data=lambda ds: ds.assign(first_share=(ds.first_share.dims, ds.first_share.values[:, ::-1]))),
    deviation("slopes permuted", "tradeoff_with_depth",
              "the depths t_half of the ALiBi variants assigned to the slopes in reverse order",
              data=lambda ds: ds.assign(t_half=("variant", _alibi_reversed(ds)))),
)
