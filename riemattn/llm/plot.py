"""Plots of looped-transformer runs like ICML Figures 7-10 (matplotlib only, no torch needed)."""

from __future__ import annotations

import numpy as np
import xarray as xr

from ..runs.plotting import styled

__all__ = ["plot_loop", "plot_variants_on", "summarize"]

_WEIGHTS = ("trained", "random", "redrawn")
_TITLES = {
    "trained": "trained weights (Figs. 7-8)",
    "random": "random weights, fixed (Fig. 9)",
    "redrawn": "random weights, redrawn every pass (Fig. 10)",
}


def plot_variants_on(ax, E, variants, layer, label_prefix="", logy=True, colors=None, ylabel=True):
    """Draw the prompt mean of ``E`` (variant, prompt, layer) with a 10-90 % band per variant.

    Layers are integers: the x axis gets integer ticks only. ``ylabel=False`` leaves the y label to
    a neighbouring panel (panels sharing y).

    Parameters
    ----------
    ax : matplotlib Axes
    E : ndarray, shape (variant, prompt, layer)
    variants : sequence of str
    layer : ndarray, shape (layer,)
    """
    for j, v in enumerate(variants):
        e = np.asarray(E[j], dtype=float)
        ok = ~np.all(np.isnan(e), axis=0)
        if not ok.any():
            continue
        mean = np.nanmean(e[:, ok], axis=0)
        lo, hi = np.nanpercentile(e[:, ok], [10, 90], axis=0)
        style = "--" if v.endswith("-noff") else "-"
        kw = {"color": colors[j]} if colors is not None else {}
        (line,) = ax.plot(layer[ok], mean, style, lw=1.4, label=f"{label_prefix}{v}", **kw)
        ax.fill_between(layer[ok], lo, hi, color=line.get_color(), alpha=0.15, lw=0)
    import matplotlib.ticker as mticker

    if logy:
        ax.set_yscale("log")
    ax.xaxis.set_major_locator(mticker.MaxNLocator(integer=True))
    ax.set_xlabel("layer (passes x blocks)")
    if ylabel:
        ax.set_ylabel("E (ICML eq. 9), mean over prompts")


@styled
def plot_loop(ds):
    """One panel per weight kind present (trained / random / redrawn), with and without FF.

    Parameters
    ----------
    ds : xarray.Dataset
        From :func:`riemattn.llm.run_loop` (dims variant, prompt, layer).

    Returns
    -------
    matplotlib.figure.Figure
    """
    import matplotlib.pyplot as plt

    variants = [str(v) for v in ds["variant"].values]
    kinds = [k for k in _WEIGHTS if any(v.split("-")[0] == k for v in variants)]
    fig, axes = plt.subplots(1, len(kinds), figsize=(5.2 * len(kinds), 4.0), squeeze=False, sharey=True)
    layer = ds["layer"].values
    L = int(ds.attrs.get("n_layer", 0)) or None
    for k, (ax, kind) in enumerate(zip(axes[0], kinds)):
        idx = [i for i, v in enumerate(variants) if v.split("-")[0] == kind]
        plot_variants_on(ax, ds["E"].values[idx], [variants[i] for i in idx], layer, ylabel=k == 0)
        if L and len(layer) <= 40 * L:
            for b in range(L, layer[-1] + 1, L):
                ax.axvline(b, color="0.85", lw=0.6, zorder=0)
        ax.set_title(_TITLES[kind], fontsize=10)
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3, which="both")
    name = ds.attrs.get("model", "")
    fig.suptitle(
        f"looped {name}: {ds.attrs.get('prompts', '?')} prompts x {ds.attrs.get('tokens', '?')} uniform token ids, "
        f"{ds.attrs.get('passes', '?')} passes (band: 10-90 % of prompts)",
        fontsize=10,
    )
    return fig


def summarize(ds: xr.Dataset) -> dict:
    """Per variant: prompt-averaged E after the first block, after the last layer, its minimum and
    the mean time per pass."""
    mean = ds["E"].mean("prompt")
    out = {}
    for v in ds["variant"].values:
        m = mean.sel(variant=v)
        out[str(v)] = {
            "E_input": float(m.isel(layer=0)),
            "E_first_layer": float(m.isel(layer=1)),
            "E_last": float(m.isel(layer=-1)),
            "E_min": float(m.min()),
            "E_last_std": float(ds["E"].sel(variant=v).isel(layer=-1).std()),
            "seconds_per_pass": float(ds["pass_seconds"].sel(variant=v).mean()),
        }
    return out
