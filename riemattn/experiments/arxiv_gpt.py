"""ARXIV Section 7.5 (Figures 6-8, Table 3): GPT-2 XL looped 2000 times on the papers' own prompts.

The long version of the paper loops GPT-2 XL (48 blocks, d = 1600) on written prompts rather than
random token ids:

- Figure 6: the "futuristic city" prompt, trained weights and random weights fixed over the passes;
  "E decreases with each pass" (2000 passes);
- Figure 7: the same prompt, random weights redrawn before every pass, with and without the
  feed-forward sub-blocks (with their normalization and skip connection); "convergence towards
  consensus still occurs";
- Figure 8: the five prompts of Table 2, random weights N(0, 0.02^2) fixed, each prompt padded with
  zeros (token id 0, on the right) to the longest; "all tokens tend to converge to a consensus";
- Table 3: trained weights, the "meaning of life" prompt, the greedy output of the classifier
  (GPT-2's LM head, tied to the token embedding) decoded after 1, 5, 10, 100 and 1000 passes;
  "the generated words become increasingly repetitive".

The loop, E (ICML eq. 9, after the final LayerNorm at the end of each pass) and the random weights
are those of :mod:`riemattn.llm.loop` (Hugging Face initialisation: weights N(0, 0.02^2), GPT-2's
residual projections N(0, (0.02 / sqrt(2 L))^2), biases 0, LayerNorm (1, 0), drawn on the device).

Sizes. ``--full`` (the paper's): GPT-2 XL, 2000 passes, Table 3 up to 1000 passes; it needs a GPU
(``riemattn reproduce arxiv-gpt --full --device cuda``; GPU run time not measured). Default: GPT-2
small, 20 passes, on CPU in minutes. Trained weights
are used only when found locally, nothing is downloaded: the directory named by the environment
variable ``RIEMATTN_ARXIV_GPT_TRAINED`` (written by ``save_pretrained``) or else
``openai-community/gpt2-xl`` in the local Hugging Face cache. Without them the trained-weight
claims are *not checked* and Table 3 is computed with the fixed random weights (its claim not
checked). ``--quick``: a two-block GPT-2 of width 32 (GPT-2's vocabulary and 1024 positions), random
weights, 10 passes, on CPU in seconds; every paper claim is then *not checked at this size* and
stand-ins on the small model are reported.

Tokens. With trained weights found, their tokenizer (saved beside them) encodes the prompts.
Otherwise a stand-in: the prompt's UTF-8 bytes as GPT-2's 256 byte tokens (ids 0-255 in GPT-2's
``bytes_to_unicode`` order), valid GPT-2 ids that decode to the same text, but without the BPE
merges (one token per byte, so longer than GPT-2's tokenization); ids above 255 decode as ``[id]``.

Claims (``riemattn.experiments._arxiv_claims``): checked only on GPT-2 XL at the paper's depth, gated
by ``PAPER_SHAPE``, ``PAPER_PASSES``, ``TABLE3_PASSES``, ``TRAINED_FROM``; the deviations (data only)
open the gate (any model, one pass, trained-weight claims on the random fixed-weight run) and fail
them: the passes in reverse order, the first pass repeated (E and greedy output).

References
----------
Rodriguez Abella, Silvestre, Tabuada, "Asymptotic behavior of continuous-time attention" (arXiv
long version of "Consensus is all you get", ICML 2025), Section 7.5, Figures 6-8, Tables 2-3.
"""

from __future__ import annotations

import json
import os

import numpy as np
import xarray as xr

from . import _arxiv_claims
from ._arxiv_claims import (  # noqa: F401  (thresholds and helpers: public names of this module)
    PAPER_PASSES, PAPER_SHAPE, RISE_TOL, TABLE3_PASSES, TOWARD_0, distinct_fraction, first_pass_repeated,
    passes_reversed, per_pass,
)
from ._deviations import deviation
from ..runs.plotting import styled
from .icml_gpt import DATA_ATTRS as _ICML_ATTRS

NAME = "arxiv-gpt"
PAPER = "ARXIV"
FIGURE = "Figs. 6-8, Table 3"
DESCRIPTION = "GPT-2 XL looped 2000 passes on the paper's prompts (trained / random fixed / redrawn, +-FF)"
ORDER = 91
TIMINGS = ("pass_seconds",)

#: long_name and units of every variable and coordinate of data.nc (CF conventions; see riemattn.runs._cf)
DATA_ATTRS = {
    **{k: _ICML_ATTRS[k] for k in ("variant", "layer", "pass", "pass_seconds")},  # as in icml-gpt
    "E_city": ("misalignment E (ICML eq. 9) of the futuristic-city prompt's tokens", "1"),
    "E_table2": ("misalignment E (ICML eq. 9) of each Table 2 prompt, random fixed weights", "1"),
    "E_table3": ("misalignment E (ICML eq. 9) of the Table 3 prompt, trained weights", "1"),
    "greedy_ids": ("greedy next-token ids decoded after the given number of passes (Table 3)", "1"),
    "city_ids": ("token ids of the futuristic-city prompt", "1"),
    "table2_ids": ("token ids of the Table 2 prompts (zero-padded on the right)", "1"),
    "table3_ids": ("token ids of the Table 3 prompt", "1"),
    "prompt": ("Table 2 prompt number", "1"),
    "layer_t3": ("global layer index of the Table 3 run", "1"),
    "decode_pass": ("passes after which the greedy output is decoded", "1"),
}

#: ARXIV Section 7.5, the prompt of Figures 6-7 (two lines of the paper joined by a space)
CITY_PROMPT = ("Describe a futuristic city where humans and robots live together. "
               "Talk about what the city looks like and what daily life is like there.")

#: ARXIV Table 2, the five prompts of Figure 8, copied from the paper's text (line breaks joined by
#: spaces; quotation marks as they appear in our copy of the text)
TABLE2_PROMPTS = (
    "A few colleagues and I amused ourselves at a previous IEEE conference on Decision and Control (CDC) "
    "with having ChatGPT try to handle all sorts of things, including a failed attempt at having it find "
    "Lyapunov function.",
    "The instructions that we gave to ChatGPT were, \u2019\u2019Write a presidential column for the Control "
    "Systems Magazine on the future of control,\u2019\u201d and the resulting column is given verbatim here:",
    "Spearheaded by (CSS) Vice-President for Conference Activities Carolyn Beck and Prof. Philip E. Par\u00e9, "
    "we arrived at a temporary policy, for now, large-scale language models are not allowed as coauthors.",
    "Imagine the absurdity of having to agree that \u2018\u2018By uploading this manuscript, I certify that the "
    "computations in this submission are made by hand and no calculator was used to perform any of the "
    "computations.\u201d",
    "I have no doubt that our warning message will seem as quaint and obsolete as this statement about "
    "calculators within a few years.",
)

#: ARXIV Section 7.5, the prompt of Table 3
TABLE3_PROMPT = (
    "After endless years lost in the shadows of Shakespeare\u2019s sonnets and the melancholic musings of "
    "Pessoa, I have glimpsed enlightenment\u2019s elusive light. Now, on the precipice of my final hour, as "
    "the weight of mortality presses upon me, I must reveal to you the one truth that transcends all "
    "others-the meaning of life is..."
)

#: the quick size's model: GPT-2 "tiny" (2 blocks, width 32) with GPT-2's vocabulary and positions
QUICK_OVERRIDES = {"vocab_size": 50257, "n_positions": 1024, "bos_token_id": 50256, "eos_token_id": 50256}

_CITY_VARIANTS = ["random", "random-noff", "redrawn", "redrawn-noff"]

TRAINED_FROM = None  #: without trained weights, decide their claims on this variant's run (None: not checked)


def claims(ds: xr.Dataset) -> dict:
    """:func:`riemattn.experiments._arxiv_claims.claims` gated by this module's constants (read now)."""
    return _arxiv_claims.claims(ds, paper_shape=PAPER_SHAPE, paper_passes=PAPER_PASSES,
                                table3_passes=TABLE3_PASSES, trained_from=TRAINED_FROM)


#: the size gate opened for the deviations: any model, one pass, trained-weight claims on the random run
_GATE_OPEN = {"PAPER_SHAPE": None, "PAPER_PASSES": 1, "TABLE3_PASSES": (1,), "TRAINED_FROM": "random"}

DEVIATIONS = (
    deviation("passes in reverse order", ("fig6/*/decreases-each-pass", "*/toward-consensus"),
              "E (city and Table 2 prompts) with the passes in reverse order: E grows pass after pass",
              data=passes_reversed, unlock=_GATE_OPEN),
    deviation("first pass repeated", ("*/toward-consensus", "table3/more-repetitive"),
              "E after every later pass, and the greedy output decoded after it, set to pass 1's: looping "
              "further changes nothing", data=first_pass_repeated, unlock=_GATE_OPEN),
)


def config(quick: bool = False, *, smoke: bool = False, full: bool = False, device: str = "cpu") -> dict:
    """Seeded configuration.

    ``full`` (``riemattn reproduce arxiv-gpt --full``): the paper's GPT-2 XL, 2000 passes, Table 3
    up to 1000 passes (needs a GPU: ``--device cuda``). Default: GPT-2 small, 20 passes (CPU,
    minutes). ``quick`` / ``smoke``: a two-block GPT-2 of width 32, 10 / 5 passes (CPU, seconds).
    ``device`` is where the model runs (``"cpu"``, ``"cuda"``, ``"cuda:1"``).
    """
    base = {"seed": 0, "device": str(device), "dtype": "float32", "threads": 1}
    env = os.environ.get("RIEMATTN_ARXIV_GPT_TRAINED")
    if quick or smoke:
        passes = 5 if smoke else 10
        return {**base, "size": "tiny", "config_overrides": QUICK_OVERRIDES, "passes": passes,
                "table3_passes": [p for p in TABLE3_PASSES if p <= passes], "trained": None}
    if full:
        return {**base, "size": "xl", "config_overrides": None, "passes": PAPER_PASSES,
                "table3_passes": list(TABLE3_PASSES), "trained": env or "openai-community/gpt2-xl"}
    return {**base, "size": "small", "config_overrides": None, "passes": 20,
            "table3_passes": [p for p in TABLE3_PASSES if p <= 20], "trained": env or "openai-community/gpt2"}


# ------------------------------------------------------------------------------------------ tokens

def _byte_order() -> list[int]:
    """GPT-2's ``bytes_to_unicode`` order: byte value of the byte tokens with ids 0..255."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    return bs + [b for b in range(256) if b not in bs]


_BYTE_ID = {b: i for i, b in enumerate(_byte_order())}
_ID_BYTE = dict(enumerate(_byte_order()))


class ByteTokens:
    """Stand-in GPT-2 tokenizer without merges: UTF-8 bytes -> GPT-2 byte-token ids 0..255."""

    name = "GPT-2 byte tokens without BPE merges (stand-in: no tokenizer found)"

    def encode(self, text: str) -> list[int]:
        return [_BYTE_ID[b] for b in text.encode("utf-8")]

    def decode(self, ids) -> str:
        out, buf = [], bytearray()
        for i in map(int, ids):
            if i in _ID_BYTE:
                buf.append(_ID_BYTE[i])
                continue
            out.append(buf.decode("utf-8", errors="replace"))
            buf = bytearray()
            out.append(f"[{i}]")
        out.append(buf.decode("utf-8", errors="replace"))
        return "".join(out)


class _HFTokens:
    def __init__(self, tok, source):
        self.tok, self.name = tok, f"the tokenizer saved with {source}"

    def encode(self, text):
        return list(self.tok.encode(text))

    def decode(self, ids):
        return self.tok.decode([int(i) for i in ids])


def _tokenizer(source):
    """The tokenizer saved with the trained weights (offline), else :class:`ByteTokens`."""
    if source:
        try:
            from transformers import AutoTokenizer

            return _HFTokens(AutoTokenizer.from_pretrained(source, local_files_only=True), source)
        except (OSError, ValueError, TypeError):
            pass
    return ByteTokens()


def _padded(rows: list[list[int]]) -> np.ndarray:
    """Right-pad with token id 0 ("padded with zeros", ARXIV Section 7.5); shape (n, max length)."""
    out = np.zeros((len(rows), max(map(len, rows))), dtype=np.int64)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


# ------------------------------------------------------------------------------------------- run

def _models(config):
    """(trained LoopModel, None, None) when found, else (None, why not, random LoopModel of the size)."""
    from ..errors import ValidationError
    from ..llm.models import build_model, load_model

    trained, why = None, "no trained weights at this size (tiny random model)"
    if config.get("trained"):
        try:
            trained = load_model(config["trained"], dtype=config["dtype"], device=config["device"])
            if trained.family != "gpt2":
                raise ValidationError(f"trained model {config['trained']!r} is a {trained.family}, not a GPT-2.")
        except ValidationError as exc:
            trained, why = None, f"trained weights not found locally ({exc})"
    if trained is not None:  # the random variants are drawn on its architecture by run_loop
        return trained, None, None
    rand = build_model("gpt2", config["size"], seed=config["seed"], dtype=config["dtype"], device=config["device"],
                       config_overrides=config.get("config_overrides"))
    return None, why, rand


class GreedyDecoder:
    """``observe`` callback: E like :class:`~riemattn.llm.loop.DeviceObserver`, plus the greedy
    next-token ids of the looped tokens after the passes ``at`` (logits = h W_te^T, GPT-2's tied LM
    head), kept on the device; :meth:`host` copies them once. ``ids``: shape (len(at), n, l)."""

    def __init__(self, lm, n_prompts, n_tokens, passes, at):
        import torch

        from ..llm.loop import DeviceObserver

        self.L, self.at = lm.n_layer, list(at)
        if not getattr(lm.config, "tie_word_embeddings", True):
            from ..errors import ValidationError

            raise ValidationError(f"model {lm.name}: Table 3 decodes with the LM head tied to the token "
                                  "embedding (GPT-2); this checkpoint does not tie them.")
        self.W = lm.model.wte.weight
        device = self.W.device
        self.E = DeviceObserver(n_prompts, passes * self.L + 1, device)
        self.ids = torch.full((len(self.at), n_prompts, n_tokens), -1, dtype=torch.long, device=device)

    def __call__(self, layer, rows, received, residual):
        self.E(layer, rows, received, residual)
        p, rest = divmod(layer, self.L)
        if rest == 0 and p in self.at:
            self.ids[self.at.index(p), rows] = (received @ self.W.T).argmax(dim=-1)

    def host(self):
        from .._backend import to_numpy

        return self.E.host()[0], to_numpy(self.ids)  # int64 (torch.long), no float64 detour


def run(config: dict) -> xr.Dataset:
    """Figures 6-8 and Table 3 at the configured size -> Dataset (see :func:`_dataset` for the variables)."""
    from ..llm import require_torch

    require_torch()
    import torch

    from ..llm.loop import loop_model, run_loop
    from ..llm.models import check_device

    check_device(config["device"])
    old = torch.get_num_threads()
    if config.get("threads"):
        torch.set_num_threads(int(config["threads"]))
    try:
        trained, why, rand = _models(config)
        tok = _tokenizer(config["trained"] if trained is not None else None)
        P = int(config["passes"])
        kw = dict(passes=P, seed=config["seed"], device=config["device"], dtype=config["dtype"])
        city_ids = _padded([tok.encode(CITY_PROMPT)])
        t2_ids = _padded([tok.encode(p) for p in TABLE2_PROMPTS])
        t3_ids = _padded([tok.encode(TABLE3_PROMPT)])
        base = trained if trained is not None else rand
        variants = (["trained"] if trained is not None else []) + _CITY_VARIANTS
        city = run_loop(base, variants=variants, input_ids=city_ids, **kw)
        t2 = run_loop(base, variants=["random"], input_ids=t2_ids, **kw)
        # Table 3: trained weights when found, else the fixed random draw (= variant "random")
        lm3 = trained if trained is not None else rand
        at = list(config["table3_passes"])
        dec = GreedyDecoder(lm3, 1, t3_ids.shape[1], max(at), at)
        loop_model(lm3, t3_ids, max(at), seed=config["seed"], observe=dec)
        E3, ids3 = dec.host()
    finally:
        torch.set_num_threads(old)
    texts = [tok.decode(ids3[k, 0]) for k in range(len(at))]
    return _dataset(config, city, t2, E3, ids3[:, 0], t3_ids[0], texts, tok.name, trained is not None, why)


def _dataset(config, city, t2, E3, ids3, prompt3, texts, tokenizer, has_trained, why) -> xr.Dataset:
    """Variables: ``E_city`` (variant, layer), ``E_table2`` (prompt, layer), ``E_table3`` (layer_t3,),
    ``greedy_ids`` (decode_pass, token_t3); prompt ids; ``pass_seconds`` (variant, pass) (timing)."""
    L = int(city.attrs["n_layer"])
    ds = xr.Dataset(
        {
            "E_city": (("variant", "layer"), city["E"].values[:, 0, :]),
            "E_table2": (("prompt", "layer"), t2["E"].values[0]),
            "E_table3": (("layer_t3",), E3[0]),
            "greedy_ids": (("decode_pass", "token_t3"), ids3.astype(np.int32)),
            "city_ids": (("token_city",), city["prompt_ids"].values[0]),
            "table2_ids": (("prompt", "token_t2"), t2["prompt_ids"].values),
            "table3_ids": (("token_t3",), prompt3.astype(np.int32)),
            "pass_seconds": (("variant", "pass"), city["pass_seconds"].values),
        },
        coords={
            "variant": city["variant"].values,
            "prompt": np.arange(1, len(TABLE2_PROMPTS) + 1, dtype=np.int32),
            "layer": city["layer"].values,
            "pass": city["pass"].values,
            "layer_t3": np.arange(E3.shape[1], dtype=np.int32),
            "decode_pass": np.array(config["table3_passes"], dtype=np.int32),
        },
    )
    ds["E_city"].attrs["description"] = "misalignment (ICML eq. 9) of the futuristic-city prompt's tokens"
    ds["E_table2"].attrs["description"] = "misalignment of each Table 2 prompt (random fixed weights)"
    ds.attrs.update(
        model=str(city.attrs["model"]), size=str(config["size"]), n_layer=L, d_model=int(city.attrs["d_model"]),
        passes=int(config["passes"]), seed=int(config["seed"]), device=str(config["device"]),
        trained_found=int(has_trained), trained_missing=str(why or ""), tokenizer=tokenizer,
        table3_weights="trained" if has_trained else "random (fixed)",
        # JSON with ASCII escapes: NetCDF3 attributes hold ASCII only
        table3_decoded=json.dumps(texts), torch_version=city.attrs["torch_version"],
        transformers_version=city.attrs["transformers_version"],
        measured_at="E after the final LayerNorm at the end of each pass (the looped tokens); "
        "layer 0: embedding output",
    )
    return ds


# ------------------------------------------------------------------------------------------ plot

@styled
def plot(ds: xr.Dataset):
    """Figure 6 (trained / random fixed), 7 (redrawn +-FF), 8 (Table 2 prompts) and Table 3's text."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11.0, 8.0))
    city = per_pass(ds, "E_city")
    passes = np.arange(city.shape[-1])
    variants = [str(v) for v in ds["variant"].values]
    for ax, keep, title in (
        (axes[0, 0], ("trained", "random", "random-noff"), "Fig. 6: trained and random fixed weights"),
        (axes[0, 1], ("redrawn", "redrawn-noff"), "Fig. 7: random weights redrawn every pass"),
    ):
        for j, v in enumerate(variants):
            if v in keep:
                ax.plot(passes[1:], city[j, 1:], "--" if v.endswith("-noff") else "-", label=v)
        ax.set_title(title, fontsize=10)
    t2 = per_pass(ds, "E_table2")
    for k in range(t2.shape[0]):
        axes[1, 0].plot(passes[1:], t2[k, 1:], label=f"prompt {k + 1}")
    axes[1, 0].set_title("Fig. 8: the five Table 2 prompts, random fixed weights", fontsize=10)
    for ax in (axes[0, 0], axes[0, 1], axes[1, 0]):
        ax.set_xlabel("model passes")
        ax.set_ylabel("E after the pass")
        ax.set_xscale("log")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    ax = axes[1, 1]
    ax.axis("off")
    texts = json.loads(ds.attrs["table3_decoded"])
    lines = [f"Table 3 ({ds.attrs['table3_weights']} weights): greedy output after"]
    for p, t in zip(ds["decode_pass"].values, texts):
        t = " ".join(t.split())
        lines.append(f"{int(p):>5} passes: {t[:60]}{'...' if len(t) > 60 else ''}")
    ax.text(0.0, 1.0, "\n".join(lines), va="top", ha="left", fontsize=7, family="monospace", wrap=True)
    fig.suptitle(f"{ds.attrs['model']} looped {ds.attrs['passes']} passes (ARXIV Sec. 7.5); "
                 f"tokens: {ds.attrs['tokenizer']}", fontsize=9)
    return fig
