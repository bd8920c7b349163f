"""Looped transformers: feed a model's output back as its input and watch the tokens' misalignment.

ICML Section 5.2 (ARXIV Section 7.5) loops GPT-2 XL and GPT-Neo 2.7B: the tokens after the final
normalization are fed back as the input of the first block, pass after pass, so that a model of
``L`` blocks becomes a model of ``passes * L`` blocks with periodic (or, when redrawn, aperiodic)
weights. The misalignment E (ICML eq. 9, :func:`riemattn.analysis.diagnostics.misalignment`) is measured
after every block.

Where E is measured
-------------------
On the tokens the next block receives:

- global layer 0: the embedding output (token + position embeddings; for BERT after its embedding
  LayerNorm), i.e. the input of the first block of pass 1;
- a block that is not the last of its pass: the block's output, the residual stream entering the
  next block (GPT: before that block's ``ln_1``);
- the last block of a pass: GPT-2 / GPT-Neo: the output of the final LayerNorm ``ln_f``, the looped
  tokens that enter the next pass; BERT (post-LN, no final norm): the block output.

The next pass receives the looped tokens as ``inputs_embeds`` with the position embedding switched off
(GPT) or directly as the encoder input (BERT), so positions are added once, in pass 1, as in the
authors' code. ``E_residual`` holds E of the raw block outputs, which differs from ``E`` only at
the end of each pass of GPT models (before vs after ``ln_f``); the authors' code measured that one.

Masks: the models' own attention code and mask construction run unchanged, so GPT-2 and GPT-Neo
stay causal (GPT-Neo's local layers keep their sliding window) and BERT attends to all tokens.

References
----------
Rodriguez Abella, Silvestre, Tabuada, "Consensus is all you get", ICML 2025, Section 5.2, eq. (9),
Figures 7-10.
"""

from __future__ import annotations

import contextlib
import time

import numpy as np
import torch
import xarray as xr

from .._backend import to_numpy  # the one way observations leave the device (tests count it)
from ..errors import InputTypeError, ValidationError
from .configs import FAMILIES, VARIANTS, parse_variant, resolve_size  # noqa: F401 - VARIANTS public here
from .models import (
    LoopModel,
    build_model,
    clone_architecture,
    feed_forward_removed,
    load_from_cache,
    load_model,
    positions_removed,
    randomize_weights,
    seed_for,
    weights_checksum,
)

__all__ = ["VARIANTS", "random_prompts", "loop_model", "run_loop", "summarize", "misalignment_on_device",
           "DeviceObserver"]


def random_prompts(n_prompts: int, n_tokens: int, vocab_size: int, seed: int) -> np.ndarray:
    """Prompts of token ids drawn independently and uniformly from ``range(vocab_size)``.

    Returns
    -------
    ids : ndarray of int64, shape (n_prompts, n_tokens)
    """
    rng = np.random.default_rng(seed_for(seed, 0))
    return rng.integers(0, vocab_size, size=(n_prompts, n_tokens), dtype=np.int64)


def misalignment_on_device(x: torch.Tensor) -> torch.Tensor:
    """E (ICML eq. 9) of tokens ``x`` of shape (..., l, d), on ``x``'s device, in float64: shape (...).

    The formula of :func:`riemattn.analysis.diagnostics.misalignment`,
    E = 1 - (1/l) sum_i y_1^T y_i / (|y_1| |y_i|), computed by torch without leaving the device
    (the tokens are converted to float64 first, so a float32 model's E carries no float32 rounding
    beyond that of its hidden states).
    """
    u = x.detach().to(torch.float64)
    u = u / torch.linalg.vector_norm(u, dim=-1, keepdim=True)
    return 1.0 - torch.matmul(u, u[..., 0, :, None])[..., 0].mean(dim=-1)


class DeviceObserver:
    """An ``observe`` callback for :func:`loop_model` keeping E on the model's device.

    ``E[prompt, layer]`` (of the tokens the next block receives) and ``E_residual`` (of the raw
    block output) are float64 tensors on ``device``, filled without any host synchronisation;
    :meth:`host` copies both to NumPy once.
    """

    def __init__(self, n_prompts: int, n_layers: int, device):
        self.E = torch.full((n_prompts, n_layers), float("nan"), dtype=torch.float64, device=device)
        self.E_residual = torch.full_like(self.E, float("nan"))

    def __call__(self, layer, rows, received, residual):
        e = misalignment_on_device(received)
        self.E[rows, layer] = e
        self.E_residual[rows, layer] = e if residual is received else misalignment_on_device(residual)

    def host(self) -> tuple[np.ndarray, np.ndarray]:
        """(E, E_residual) as NumPy arrays (n_prompts, n_layers)."""
        return to_numpy(self.E), to_numpy(self.E_residual)


def _synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (so a pass's wall time is its own); no data moves."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _first_input(lm: LoopModel, ids: torch.Tensor) -> torch.Tensor:
    """The input of the first block for token ids (what the model's own forward computes)."""
    if lm.family == "minilm":
        return lm.model.embeddings(input_ids=ids)
    pos = torch.arange(ids.shape[-1], device=ids.device)[None]
    return lm.model.drop(lm.model.wte(ids) + lm.model.wpe(pos))


def _pass(lm: LoopModel, x: torch.Tensor, first: bool, on_block) -> torch.Tensor:
    """One pass through all blocks; ``on_block(k, block_output)`` after block k (0-based).

    ``x`` are token ids in pass 1 and the looped tokens (batch, l, d) afterwards. Returns the looped
    tokens: the final LayerNorm's output (GPT) or the last block's output (BERT).
    """

    def hook(k):
        def fn(module, args, out):
            on_block(k, out[0] if isinstance(out, (tuple, list)) else out)

        return fn

    handles = [blk.register_forward_hook(hook(k)) for k, blk in enumerate(lm.blocks)]
    try:
        if lm.family == "minilm":
            h = lm.model.embeddings(input_ids=x) if first else x
            return lm.model.encoder(h).last_hidden_state
        if first:
            return lm.model(input_ids=x, use_cache=False).last_hidden_state
        with positions_removed(lm):
            return lm.model(inputs_embeds=x, use_cache=False).last_hidden_state
    finally:
        for handle in handles:
            handle.remove()


@torch.inference_mode()
def loop_model(lm: LoopModel, input_ids, passes: int, *, remove_ff: bool = False, redraw: bool = False,
               seed: int = 0, batch_size: int | None = None, observe=None, progress=None) -> dict:
    """Loop ``lm`` ``passes`` times over ``input_ids`` and observe the tokens after every block.

    Parameters
    ----------
    lm : LoopModel
    input_ids : array_like of int, shape (n, l)
    passes : int
        Number of passes through all ``L`` blocks.
    remove_ff : bool
        Remove the feed-forward sub-blocks (:func:`~riemattn.llm.models.feed_forward_removed`).
    redraw : bool
        Before every pass p >= 2 redraw all weights from the stream ``seed_for(seed, 1, p)``
        (pass 1 uses the weights ``lm`` has). The model's weights are left as drawn last.
    batch_size : int, optional
        Prompts per forward call (default: all).
    observe : callable, optional
        ``observe(layer, rows, received, residual)`` with the global layer index
        (0 = embedding output, ``(p - 1) * L + k`` after block k of pass p), the prompt slice,
        the tokens the next block receives and the raw block output, both tensors (b, l, d).
    progress : tqdm-like, optional
        Updated once per (pass, batch).

    Returns
    -------
    dict
        ``"looped"``: the final looped tokens (n, l, d); ``"seconds"``: wall time of each pass
        (forward + observation, without redrawing; the device is synchronised at the end of each
        pass), ``"checksum"``: :func:`weights_checksum` of the weights used in each pass (moved to
        the host once, at the end).
    """
    device = next(lm.model.parameters()).device
    ids = torch.as_tensor(np.asarray(input_ids), dtype=torch.long, device=device)
    n, L = ids.shape[0], lm.n_layer
    batch_size = n if batch_size is None else int(batch_size)
    observe = observe or (lambda *a: None)
    looped, seconds, checksums = None, [], []
    ctx = feed_forward_removed(lm) if remove_ff else contextlib.nullcontext()
    with ctx:
        for p in range(1, passes + 1):
            if redraw and p > 1:
                randomize_weights(lm.model, seed_for(seed, 1, p))
            checksums.append(weights_checksum(lm.model))
            start = time.perf_counter()
            outs = []
            for b0 in range(0, n, batch_size):
                rows = slice(b0, min(n, b0 + batch_size))
                x = ids[rows] if p == 1 else looped[rows]
                if p == 1:
                    emb = _first_input(lm, x)
                    observe(0, rows, emb, emb)
                last = {}

                def on_block(k, out, rows=rows, p=p, last=last):
                    if k == L - 1:
                        last["out"] = out
                    else:
                        observe((p - 1) * L + k + 1, rows, out, out)

                y = _pass(lm, x, p == 1, on_block)
                observe(p * L, rows, y, last["out"])
                outs.append(y)
                if progress is not None:
                    progress.update()
            looped = torch.cat(outs)
            _synchronize(device)
            seconds.append(time.perf_counter() - start)
    return {"looped": looped, "seconds": np.array(seconds), "checksum": to_numpy(torch.stack(checksums))}


def _get_model(model, size, weights, *, seed, dtype, device, cache) -> LoopModel:
    """The LoopModel a variant with ``weights`` runs on (random ones reset to the seed's draw)."""
    if weights == "trained":
        if "trained" not in cache:
            if isinstance(model, LoopModel):
                if not model.trained:
                    raise ValidationError(
                        "variant 'trained' needs trained weights; the model given has random weights."
                    )
                cache["trained"] = model
            elif model == "minilm":
                cache["trained"] = load_model("minilm", dtype=dtype, device=device)
            elif model in FAMILIES:
                cache["trained"] = load_from_cache(model, size, dtype=dtype, device=device)
            else:
                cache["trained"] = load_model(model, dtype=dtype, device=device)
        return cache["trained"]
    if "random" not in cache:
        if isinstance(model, LoopModel):
            cache["random"] = clone_architecture(model, seed)
        elif model in FAMILIES:
            cache["random"] = build_model(model, size, seed=seed, dtype=dtype, device=device)
        else:
            cache["random"] = clone_architecture(load_model(model, dtype=dtype, device=device), seed)
    else:
        randomize_weights(cache["random"].model, seed_for(seed, 1, 1))
    return cache["random"]


def run_loop(model="gpt2", size: str | None = None, *, variants=("random", "random-noff"), passes: int = 10,
             prompts: int = 10, tokens: int = 200, seed: int = 0, device: str = "cpu", dtype="float32",
             batch_size: int | None = None, threads: int | None = None, progress: bool = False,
             input_ids=None) -> xr.Dataset:
    """The ICML Section 5.2 loop experiment: E after every layer, per variant and prompt.

    Parameters
    ----------
    model : {"gpt2", "gpt-neo", "minilm"}, str or LoopModel
        A family (built from its published configuration), a directory saved with
        ``save_pretrained`` / a hub name in the local cache, or a :class:`LoopModel`.
    size : str, optional
        Size of a family (see :func:`~riemattn.llm.models.build_model`).
    variants : sequence of str
        From :data:`VARIANTS`.
    passes, prompts, tokens : int
        Passes through the model; random prompts of ``tokens`` uniform token ids.
    seed : int
        Seeds the prompts (stream 0) and the random weights (stream 1, one draw per pass).
    device, dtype : str
        Where and in which precision the model runs (E is always computed in float64).
    batch_size : int, optional
        Prompts per forward call (default: all at once).
    threads : int, optional
        torch CPU threads during the run (restored afterwards); default: torch's setting.
    progress : bool
        Show a tqdm progress bar per variant.
    input_ids : array_like of int, shape (n, l), optional
        Given prompts (e.g. tokenized text, ARXIV Section 7.5) instead of ``prompts`` x ``tokens``
        uniform random ids; ``prompts`` and ``tokens`` are then taken from its shape.

    Returns
    -------
    xarray.Dataset
        ``E`` and ``E_residual`` with dims (variant, prompt, layer), ``layer`` = 0 .. passes * L the
        global layer index (0: embedding output) with coordinates ``layer_pass`` and ``layer_block``;
        ``pass_seconds`` and ``weights_checksum`` with dims (variant, pass); ``prompt_ids`` (prompt, token).

    References
    ----------
    Rodriguez Abella, Silvestre, Tabuada, "Consensus is all you get", ICML 2025, Section 5.2, eq. (9).
    """
    if input_ids is not None:
        input_ids = np.asarray(input_ids)
        if input_ids.ndim != 2 or input_ids.size == 0 or not np.issubdtype(input_ids.dtype, np.integer):
            raise ValidationError(f"input_ids must be a non-empty 2-D array of token ids (prompts, tokens), got "
                                  f"shape {input_ids.shape} and dtype {input_ids.dtype}.")
        prompts, tokens = map(int, input_ids.shape)
    variants = [variants] if isinstance(variants, str) else list(variants)
    if not variants:
        raise ValidationError("variants must name at least one of " f"{VARIANTS}, got an empty list.")
    parsed = [parse_variant(v) for v in variants]
    for name, value in (("passes", passes), ("prompts", prompts), ("tokens", tokens)):
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
            raise ValidationError(f"{name} must be a positive integer, got {value!r}.")
    if not isinstance(model, (str, LoopModel)):
        raise InputTypeError(f"model must be a family name, a path or a LoopModel, got {type(model).__name__}.")
    if isinstance(model, str) and model in FAMILIES:
        size = resolve_size(model, size)
    old_threads = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(int(threads))
    try:
        return _run_loop(model, size, variants, parsed, passes, prompts, tokens, seed, device, dtype, batch_size,
                         progress, input_ids)
    finally:
        torch.set_num_threads(old_threads)


def _run_loop(model, size, variants, parsed, passes, prompts, tokens, seed, device, dtype, batch_size, progress,
              input_ids=None):
    from tqdm.auto import tqdm

    cache: dict = {}
    E = E_res = ids = None
    seconds, checks, meta = [], [], None
    for i, (variant, (weights, remove_ff)) in enumerate(zip(variants, parsed)):
        lm = _get_model(model, size, weights, seed=seed, dtype=dtype, device=device, cache=cache)
        if meta is None:
            if tokens > lm.max_tokens:
                raise ValidationError(f"tokens must be at most {lm.max_tokens} for {lm.name}, got {tokens}.")
            if input_ids is None:
                ids = random_prompts(prompts, tokens, lm.vocab_size, seed)
            elif input_ids.min() < 0 or input_ids.max() >= lm.vocab_size:
                raise ValidationError(f"input_ids must lie in [0, {lm.vocab_size}) for {lm.name}, got "
                                      f"[{input_ids.min()}, {input_ids.max()}].")
            else:
                ids = input_ids.astype(np.int64)
            n_layers = passes * lm.n_layer + 1
            E = np.full((len(variants), prompts, n_layers), np.nan)
            E_res = np.full_like(E, np.nan)
            meta = lm
        elif (lm.n_layer, lm.d_model, lm.vocab_size) != (meta.n_layer, meta.d_model, meta.vocab_size):
            raise ValidationError("all variants must run on the same architecture.")

        # E of every layer stays on the model's device until the variant's run ends (one copy)
        observe = DeviceObserver(prompts, n_layers, next(lm.model.parameters()).device)

        n_batches = -(-prompts // (batch_size or prompts))
        bar = tqdm(total=passes * n_batches, desc=f"{lm.name} {variant}", unit="pass", disable=not progress,
                   leave=False)
        out = loop_model(lm, ids, passes, remove_ff=remove_ff, redraw=weights == "redrawn", seed=seed,
                         batch_size=batch_size, observe=observe, progress=bar)
        bar.close()
        E[i], E_res[i] = observe.host()
        seconds.append(out["seconds"])
        checks.append(out["checksum"])
    L = meta.n_layer
    layer = np.arange(passes * L + 1, dtype=np.int32)
    ds = xr.Dataset(
        {
            "E": (("variant", "prompt", "layer"), E),
            "E_residual": (("variant", "prompt", "layer"), E_res),
            "pass_seconds": (("variant", "pass"), np.array(seconds, dtype=np.float64)),
            "weights_checksum": (("variant", "pass"), np.array(checks, dtype=np.float64)),
            "prompt_ids": (("prompt", "token"), ids.astype(np.int32)),
        },
        coords={
            "variant": np.array(variants, dtype=str),
            "prompt": np.arange(prompts, dtype=np.int32),
            "layer": layer,
            "layer_pass": ("layer", ((layer + L - 1) // L).astype(np.int32)),
            "layer_block": ("layer", np.where(layer == 0, 0, (layer - 1) % L + 1).astype(np.int32)),
            "pass": np.arange(1, passes + 1, dtype=np.int32),
            "token": np.arange(tokens, dtype=np.int32),
        },
    )
    ds["E"].attrs["description"] = "misalignment (ICML eq. 9) of the tokens the next block receives"
    ds["E_residual"].attrs["description"] = "misalignment of the raw block output (before ln_f at pass ends)"
    ds["pass_seconds"].attrs["units"] = "s"
    import transformers

    ds.attrs.update(
        model=meta.name, family=meta.family, size=str(size or ""), n_layer=int(L), d_model=int(meta.d_model),
        n_head=int(meta.config.num_attention_heads), vocab_size=int(meta.vocab_size), passes=int(passes),
        prompts=int(prompts), tokens=int(tokens), seed=int(seed), device=str(device), dtype=str(dtype),
        causal=int(meta.causal), torch_version=torch.__version__, transformers_version=transformers.__version__,
        torch_threads=int(torch.get_num_threads()),
        measured_at="layer 0: embedding output; after each block: the tokens the next block receives "
        "(block output; at the end of a pass the final-norm output that is looped)",
    )
    return ds


from .plot import summarize  # noqa: E402,F401 - public here since 0.1; lives beside plot_loop
