"""The ``riemattn loop`` subcommand (argument parsing and output only; torch is imported on use)."""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
from pathlib import Path

from ..runs._cf import annotate
from ..runs._paths import check_output_dir
from ..errors import RiemattnError

__all__ = ["LOOP_DATA_ATTRS", "add_loop_arguments", "run_loop_command"]

#: long_name and units of the variables of :func:`riemattn.llm.run_loop`'s dataset (what
#: ``riemattn loop`` writes to ``loop_NAME.nc``; see :func:`riemattn.runs._cf.annotate`)
LOOP_DATA_ATTRS = {
    "variant": ("weights (trained, random, redrawn); -noff: feed-forward removed", "1"),
    "prompt": ("prompt index", "1"),
    "layer": ("global layer index (0: embedding output; pass * blocks + block)", "1"),
    "pass": ("pass through the stack of blocks", "1"),
    "token": ("token position in the prompt", "1"),
    "E": ("misalignment E (ICML eq. 9) of the tokens the next block receives", "1"),
    "E_residual": ("misalignment E (ICML eq. 9) of the raw block outputs", "1"),
    "layer_pass": ("pass of the layer", "1"),
    "layer_block": ("block of the layer within its pass", "1"),
    "pass_seconds": ("wall-clock time of the pass", "s"),
    "weights_checksum": ("sum of squares of all parameters during the pass (float64)", "1"),
    "prompt_ids": ("token ids of the prompts", "1"),
}

_ALL_VARIANTS = ("trained", "trained-noff", "random", "random-noff", "redrawn", "redrawn-noff")
_RANDOM_VARIANTS = ("random", "random-noff", "redrawn", "redrawn-noff")


def add_loop_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``riemattn loop`` to ``parser``."""
    parser.add_argument("--model", default="gpt2",
                        help="gpt2 | gpt-neo | minilm | PATH (a directory saved with save_pretrained, or a hub "
                        "name already in the local Hugging Face cache) (default: gpt2)")
    parser.add_argument("--size", default=None,
                        help="gpt2: small|medium|large|xl; gpt-neo: 125M|1.3B|2.7B; minilm: L6; tiny (tests) "
                        "(default: the smallest)")
    parser.add_argument("--variant", action="append", default=None, metavar="VARIANT",
                        help="one of " + ", ".join(_ALL_VARIANTS) + ", or 'all'; repeat or separate by "
                        "commas (default: the four random ones for gpt2/gpt-neo, trained and trained-noff "
                        "for minilm or PATH)")
    parser.add_argument("--passes", type=int, default=10, help="passes through the whole model (default 10)")
    parser.add_argument("--prompts", type=int, default=10, help="random prompts (default 10; paper: 100)")
    parser.add_argument("--tokens", type=int, default=200, help="token ids per prompt (default 200, as the paper)")
    parser.add_argument("--batch-size", type=int, default=None, help="prompts per forward call (default: all)")
    parser.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N (default cpu)")
    parser.add_argument("--dtype", default="float32", choices=("float32", "float64", "bfloat16", "float16"))
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--seed", type=int, default=0, help="seeds prompts and random weights (default 0)")
    parser.add_argument("--out", default="results/loop", help="output directory (default results/loop)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def _variants(arg, model) -> list[str]:
    if not arg:
        return list(_RANDOM_VARIANTS if model in ("gpt2", "gpt-neo") else ("trained", "trained-noff"))
    out = []
    for item in arg:
        for v in filter(None, (s.strip() for s in item.split(","))):
            out.extend(_ALL_VARIANTS if v == "all" else [v])
    return list(dict.fromkeys(out))


def _command(args: argparse.Namespace, variants: list[str]) -> str:
    """The ``riemattn loop`` command line that makes this dataset (options spelled out)."""
    parts = ["riemattn", "loop", "--model", str(args.model)]
    for opt in ("size", "passes", "prompts", "tokens", "batch_size", "device", "dtype", "threads", "seed"):
        value = getattr(args, opt)
        if value is not None:
            parts += ["--" + opt.replace("_", "-"), str(value)]
    parts += ["--variant", ",".join(variants)]
    return shlex.join(parts)


def run_loop_command(args: argparse.Namespace) -> int:
    """Run ``riemattn loop``: write ``OUT/loop_NAME.nc``, ``.png`` and ``.json``; print a summary."""
    try:
        check_output_dir(args.out, "--out")  # before the model runs
        from . import require_torch

        require_torch()
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        from .loop import run_loop, summarize
        from .plot import plot_loop

        variants = _variants(args.variant, args.model)
        ds = run_loop(args.model, args.size, variants=variants, passes=args.passes, prompts=args.prompts,
                      tokens=args.tokens, seed=args.seed, device=args.device, dtype=args.dtype,
                      batch_size=args.batch_size, threads=args.threads,
                      progress=not args.no_progress)
    except RiemattnError as exc:
        print(f"riemattn loop: error: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = "loop_" + re.sub(r"[^A-Za-z0-9.]+", "-", ds.attrs["model"]).strip("-")
    annotate(ds, LOOP_DATA_ATTRS, command=_command(args, variants)).to_netcdf(out / f"{stem}.nc", engine="scipy")
    fig = plot_loop(ds)
    fig.savefig(out / f"{stem}.png", dpi=120)
    plt.close(fig)
    summary = {"model": ds.attrs["model"], "n_layer": ds.attrs["n_layer"], "passes": args.passes,
               "prompts": args.prompts, "tokens": args.tokens, "seed": args.seed, "variants": summarize(ds)}
    (out / f"{stem}.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"{ds.attrs['model']}: {ds.attrs['n_layer']} blocks x {args.passes} passes, {args.prompts} prompts x "
          f"{args.tokens} tokens; E = prompt mean of ICML eq. 9")
    print(f"{'variant':<14}{'E input':>10}{'E layer 1':>11}{'E last':>11}{'E min':>11}{'s/pass':>9}")
    for v, s in summary["variants"].items():
        print(f"{v:<14}{s['E_input']:>10.3g}{s['E_first_layer']:>11.3g}{s['E_last']:>11.3g}{s['E_min']:>11.3g}"
              f"{s['seconds_per_pass']:>9.2f}")
    print(f"wrote {out / stem}.nc, .png, .json")
    return 0
