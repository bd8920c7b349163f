"""Model surgery for the loop experiment: feed-forward sub-blocks and position embeddings removed.

Context managers that swap modules of a loaded :class:`~riemattn.llm.models.LoopModel` and restore
them on exit (needs torch and transformers).

References
----------
Rodriguez Abella, Silvestre, Tabuada, "Consensus is all you get", ICML 2025, Section 5.2 (the
transformer without feed-forward layers is the model of the theory).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:  # pragma: no cover
    from ._loop_model import LoopModel

__all__ = ["feed_forward_removed", "positions_removed"]


class _ZeroBranch(nn.Module):
    """Feed-forward branch returning zeros (GPT blocks add it to the residual stream)."""

    def forward(self, hidden_states, *args, **kwargs):
        return torch.zeros_like(hidden_states)


class _SkipBertOutput(nn.Module):
    """BERT's FF output sub-block ``LayerNorm(dense(h) + x)`` replaced by ``x`` (no FF, norm or skip)."""

    def forward(self, hidden_states, input_tensor):
        return input_tensor


class _ZeroPositions(nn.Module):
    """Position embedding returning zeros: the looped tokens enter the next pass unchanged."""

    def __init__(self, like: nn.Embedding):
        super().__init__()
        self.dim = like.embedding_dim
        self.dtype = like.weight.dtype

    def forward(self, position_ids):
        return torch.zeros((*position_ids.shape, self.dim), dtype=self.dtype, device=position_ids.device)


@contextlib.contextmanager
def _swapped(pairs):
    """Temporarily set ``setattr(owner, name, new)`` for each (owner, name, new); restore on exit."""
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in pairs]
    try:
        for owner, name, new in pairs:
            setattr(owner, name, new)
        yield
    finally:
        for owner, name, old in saved:
            setattr(owner, name, old)


def feed_forward_removed(lm: LoopModel):
    """Context manager removing every feed-forward sub-block with its normalization and skip connection.

    GPT-2 / GPT-Neo (pre-LN): ``h + mlp(ln_2(h))`` becomes ``h`` (``ln_2`` -> identity, ``mlp`` -> 0),
    so a block is ``h + attn(ln_1(h))``. BERT (post-LN): ``LayerNorm(h + dense(act(dense(h))))``
    becomes ``h``, so a layer is its attention sub-block ``LayerNorm(x + attn(x))``. The modules are
    restored on exit.
    """
    pairs = []
    for block in lm.blocks:
        if lm.family == "minilm":
            pairs += [(block, "intermediate", nn.Identity()), (block, "output", _SkipBertOutput())]
        else:
            pairs += [(block, "ln_2", nn.Identity()), (block, "mlp", _ZeroBranch())]
    return _swapped(pairs)


def positions_removed(lm: LoopModel):
    """Context manager making GPT's position embedding zero (used for passes after the first)."""
    if lm.family == "minilm":
        return contextlib.nullcontext()
    return _swapped([(lm.model, "wpe", _ZeroPositions(lm.model.wpe))])
