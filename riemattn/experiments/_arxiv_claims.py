"""The claims of :mod:`riemattn.experiments.arxiv_gpt` (ARXIV Section 7.5) checked on its data.

Private: :mod:`~riemattn.experiments.arxiv_gpt` re-exports every name here (``claims``,
``per_pass``, ``distinct_fraction`` and the thresholds), which is where the runner finds them.
"""

from __future__ import annotations

import json

import numpy as np
import xarray as xr

from ._verdict import NOT_CHECKED, claim

#: passes after which Table 3 decodes the greedy output
TABLE3_PASSES = (1, 5, 10, 100, 1000)
#: the paper's depth, from which its claims are checked (on GPT-2 XL)
PAPER_PASSES = 2000
#: the paper's model, (blocks, width) of GPT-2 XL: with PAPER_PASSES, the size gate of the claims
PAPER_SHAPE = (48, 1600)
#: "toward consensus": E after the last pass below this fraction of E after pass 1
TOWARD_0 = 0.1
#: "decreases with each pass": no rise between consecutive passes above this fraction of E(pass 1).
#: E is computed in float64 from float32 hidden states: their rounding (eps 6e-8, a few per block)
#: moves E = 1 - mean cos by at most ~2 x 48 blocks x 2 eps = 1.2e-5 per pass of GPT-2 XL; 1e-4 is 8x
#: that. (It was 1e-3, larger than the signal: the test-size model's passes lower E by 7.5e-4 of
#: E(pass 1) each, so its passes in reverse order still counted as "decreasing each pass"; they now
#: rise by 7x the tolerance.)
RISE_TOL = 1e-4


def per_pass(ds: xr.Dataset, var: str) -> np.ndarray:
    """E at the end of each pass (index 0: embedding output, p: after pass p); shape (..., passes + 1)."""
    L = int(ds.attrs["n_layer"])
    return ds[var].values[..., ::L]


def distinct_fraction(ids) -> float:
    """Distinct token ids / tokens of a greedy output (lower: more repetitive)."""
    ids = np.asarray(ids)
    return float(len(np.unique(ids)) / max(ids.size, 1))


def claims(ds: xr.Dataset, *, paper_shape=PAPER_SHAPE, paper_passes: int = PAPER_PASSES,
           table3_passes=TABLE3_PASSES, trained_from: str | None = None) -> dict:
    """The paper's claims on Figures 6-8 and Table 3, with stand-ins on smaller runs.

    Paper claims (checked only on GPT-2 XL looped >= 2000 passes; else *not checked at this size*):

    - ``fig6/{trained,random}/decreases-each-pass``: E after pass p+1 <= E after pass p (up to
      ``RISE_TOL`` E(pass 1)) for every p;
    - ``fig6/{trained,random}/toward-consensus``, ``fig7/{redrawn,redrawn-noff}/toward-consensus``,
      ``fig8/prompt-k/toward-consensus``: E after the last pass < 0.1 E after pass 1;
    - ``table3/more-repetitive``: with trained weights, the distinct-token fraction of the greedy
      output does not grow over passes 1, 5, 10, 100, 1000 and is lower at 1000 than at 1.

    Claims on trained weights are not checked when none were found. Stand-ins (any size): for each
    toward-consensus claim, ``.../decreases`` (E after the last pass < E after pass 1) on the run's
    own model; ``random-noff`` is an observation (no paper claim).

    The gates (the falsification suite's deviations open them to decide the claims on a small run):
    ``paper_shape`` (blocks, width) of the paper's model, None for any; ``paper_passes`` and
    ``table3_passes`` the depths; ``trained_from="random"`` decides the trained-weight claims on the
    random fixed-weight run when no trained weights were found (Table 3 is then computed with them).
    """
    shape = (int(ds.attrs["n_layer"]), int(ds.attrs["d_model"]))
    paper_size = (paper_shape is None or shape == tuple(paper_shape)) and int(ds.attrs["passes"]) >= paper_passes
    size_reason = (f"needs GPT-2 XL looped {paper_passes} passes (riemattn reproduce arxiv-gpt --full --device cuda); "
                   f"this run: {ds.attrs['model']}, {ds.attrs['passes']} passes")
    trained = bool(int(ds.attrs["trained_found"]))
    out = {}
    city = per_pass(ds, "E_city")
    names = list(map(str, ds["variant"].values))
    series = {f"fig6/{v}" if v in ("trained", "random") else f"fig7/{v}": city[j]
              for j, v in enumerate(names) if v != "random-noff"}
    if not trained and trained_from in names:  # the trained-weight claims decided on another run (a gate opened)
        series = {"fig6/trained": city[names.index(trained_from)], **series}
        trained = True
    series.update({f"fig8/prompt-{k + 1}": e for k, e in enumerate(per_pass(ds, "E_table2"))})

    def status(ok, key):
        if not paper_size:
            return NOT_CHECKED, size_reason
        return bool(ok), None

    if not trained:  # the paper's trained-weight claims exist whether or not the weights do
        for what in ("decreases-each-pass", "toward-consensus"):
            out[f"fig6/trained/{what}"] = claim(NOT_CHECKED, None, f"Fig. 6, trained weights: {what}",
                                                reason=str(ds.attrs["trained_missing"]))
    for key, e in series.items():
        e1, last = float(e[1]), float(e[-1])
        value = {"E_pass_1": e1, "E_last": last, "ratio": last / e1, "passes": int(e.size - 1)}
        if key.startswith("fig6/"):
            rises = np.diff(e[1:])
            worst = float(rises.max()) if rises.size else 0.0
            st, why = status(worst <= RISE_TOL * e1, key)
            out[f"{key}/decreases-each-pass"] = claim(
                st, {**value, "largest_rise": worst},
                f"{key}: E after each pass <= E after the pass before (rises <= {RISE_TOL:g} E(pass 1))",
                reason=why)
        st, why = status(last < TOWARD_0 * e1, key)
        out[f"{key}/toward-consensus"] = claim(
            st, value, f"{key}: E tends to consensus, checked as E after the last pass < {TOWARD_0:g} E(pass 1)",
            reason=why)
        out[f"{key}/decreases"] = claim(
            bool(last < e1), value, f"{key} on {ds.attrs['model']}: E after the last pass < E after pass 1",
            kind="stand-in", stands_in_for=f"{key}/toward-consensus")
    if "random-noff" in ds["variant"].values:
        e = city[list(ds["variant"].values).index("random-noff")]
        out["fig6/random-noff/ratio"] = claim(None, {"E_pass_1": float(e[1]), "E_last": float(e[-1])},
                                              "random fixed weights without FF (not in the paper)",
                                              kind="observation", observed=bool(e[-1] < e[1]))
    frac = [distinct_fraction(r) for r in ds["greedy_ids"].values]
    value = {"passes": ds["decode_pass"].values.tolist(), "distinct_fraction": frac}
    ok = bool(np.all(np.diff(frac) <= 0) and frac[-1] < frac[0])
    full = paper_size and int(ds["decode_pass"].values.max()) >= max(table3_passes)
    if trained and full:
        st, why = ok, None
    else:
        st, why = NOT_CHECKED, (size_reason if trained else str(ds.attrs["trained_missing"]))
    out["table3/more-repetitive"] = claim(
        st, value, "Table 3: the greedy output becomes more repetitive with the passes (distinct-token "
        "fraction non-increasing over the decoded passes, lower at the last than at pass 1)", reason=why)
    value = {**value, "decoded": json.loads(ds.attrs["table3_decoded"])}
    out["table3/greedy-output"] = claim(None, value, f"Table 3's decoded outputs ({ds.attrs['table3_weights']} "
                                        "weights)", kind="observation", observed=ok)
    return out


def passes_reversed(ds: xr.Dataset) -> xr.Dataset:
    """E with the passes in reverse order, each pass's blocks in their order (layer 0 kept): a deviation."""
    from .icml_gpt import passes_reversed_index

    k = passes_reversed_index(int(ds.attrs["n_layer"]), ds.sizes["layer"])
    for var in ("E_city", "E_table2"):
        ds[var] = (ds[var].dims, ds[var].values[..., k])
    return ds


def first_pass_repeated(ds: xr.Dataset) -> xr.Dataset:
    """E after every later pass, and the greedy output decoded after it, set to pass 1's."""
    L = int(ds.attrs["n_layer"])
    for var in ("E_city", "E_table2"):
        a = ds[var].values
        k = np.arange(L + 1, a.shape[-1])
        a[..., k] = a[..., (k - 1) % L + 1]
        ds[var] = (ds[var].dims, a)
    g = ds["greedy_ids"].values
    ds["greedy_ids"] = (ds["greedy_ids"].dims, np.broadcast_to(g[:1], g.shape).copy())
    return ds
