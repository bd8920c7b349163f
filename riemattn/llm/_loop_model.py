"""The loaded transformer the loop experiment runs on (needs torch): :class:`LoopModel`.

Re-exported by :mod:`riemattn.llm.models`, where it is documented; it lives here, below both
:mod:`riemattn.llm.models` (which builds and loads it) and :mod:`riemattn.llm.surgery` (which
modifies it), so that neither imports the other for it.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

__all__ = ["LoopModel"]


@dataclass
class LoopModel:
    """A base transformer (no LM head) with what the loop needs to know about it.

    Attributes
    ----------
    model : torch.nn.Module
        ``GPT2Model``, ``GPTNeoModel`` or ``BertModel``, in eval mode.
    family : str
        ``"gpt2"``, ``"gpt-neo"`` or ``"minilm"``.
    name : str
        Human-readable name (``"gpt2-small"``, a path, ...).
    trained : bool
        Whether the weights were loaded from a checkpoint (``False`` for random initialisation).
    """

    model: nn.Module
    family: str
    name: str
    trained: bool

    @property
    def config(self):
        return self.model.config

    @property
    def causal(self) -> bool:
        return self.family in ("gpt2", "gpt-neo")

    @property
    def blocks(self) -> nn.ModuleList:
        return self.model.encoder.layer if self.family == "minilm" else self.model.h

    @property
    def n_layer(self) -> int:
        return len(self.blocks)

    @property
    def d_model(self) -> int:
        return int(self.config.hidden_size)

    @property
    def vocab_size(self) -> int:
        return int(self.config.vocab_size)

    @property
    def max_tokens(self) -> int:
        return int(self.config.max_position_embeddings)
