"""The ``riemattn`` command line: parse, dispatch, nothing else.

The top room of the package: it may import every other room, and none imports it.

    riemattn list
    riemattn reproduce NAME [NAME ...] | --all  [--quick | --full] [--device DEV] [--out DIR] [--workers N] [--force] [--verbose]
    riemattn simulate CONFIG.toml [--out DIR]
    riemattn sweep CONFIG.toml --out STORE.zarr [--scheduler ADDRESS] [--workers N]
    riemattn sweep-plot STORE.zarr --var NAME --x DIM --y DIM [--sel DIM=VALUE ...] [--out FIG.png]
    riemattn loop --model gpt2 ...            (needs the ``llm`` extra)
    riemattn warmup [--no-progress] [--shape LxD]  (compile the compiled engine now; docs/performance.md)
    riemattn --version

A user mistake (a bad option, a bad configuration, an output path that cannot be written) is one
line ``riemattn: error: ...`` on stderr and exit status 2, found before any work starts; never a
traceback. ``reproduce`` prints one line per figure with its verdict (PASS: every paper claim
reproduced; PARTIAL: some not reproduced or not checked at this size, named on the line; FAIL: an
error, or no checked paper claim reproduced), a second line only for an error, and exits with 1 if
a figure FAILs, else 0; ``--verbose`` prints every claim too; no line is longer than 200
characters (the claims and numbers are in each figure's summary.json). An
interrupted ``reproduce`` (Ctrl-C, SIGTERM) prints one line saying what finished and
exits with 128 + the signal number (130, 143).
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import shlex
import sys

from .. import __version__
from ..runs._paths import check_output_dir
from ..errors import RiemattnError


class _Parser(argparse.ArgumentParser):
    """argparse with its errors as one line ``riemattn: error: ...`` (exit 2), like every other error."""

    def error(self, message):
        self.exit(2, f"riemattn: error: {message} (see `{self.prog} --help`)\n")


def _workers(text: str) -> int:
    """--workers: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}")
    return value


def _device(text: str) -> str:
    """--device: cpu, cuda, cuda:N or mps (whether it exists is checked when a figure runs on it)."""
    if not re.fullmatch(r"cpu|mps|cuda(:\d+)?", text):
        raise argparse.ArgumentTypeError(f"must be cpu, cuda, cuda:N or mps, got {text!r}")
    return text


def _progress(args):
    """The progress bar: off with --no-progress, else shown where stderr is a terminal (None: tqdm's auto)."""
    return False if args.no_progress else None


def _cmd_list(args) -> int:
    from ..experiments import available

    for name, module in available().items():
        print(f"{name:<16} {module.PAPER} {module.FIGURE}: {module.DESCRIPTION}")
    return 0


def _cmd_reproduce(args) -> int:
    from ..experiments import available, reproduce
    from ..experiments._runner import Interrupted, check_outputs

    modules = available()
    if args.all and args.names:
        raise RiemattnError(f"give reproduction NAMEs or --all, not both (got --all and {args.names}).")
    if args.all:
        names = list(modules)
    elif args.names:
        unknown = [n for n in args.names if n not in modules]
        if unknown:
            raise RiemattnError(f"unknown reproduction(s) {unknown}; `riemattn list` shows {sorted(modules)}.")
        names = list(dict.fromkeys(args.names))
    else:
        raise RiemattnError("give reproduction NAMEs or --all (see `riemattn list`).")
    if args.quick and args.full:
        raise RiemattnError("give --quick or --full, not both.")
    check_outputs(args.out, names, "--out")
    if args.device != "cpu":
        from ..experiments._runner import accepts_device

        numeric = [n for n in names if not accepts_device(modules[n])]
        if numeric:
            from .._backend import check_device

            check_device(args.device, "--device")  # the integrations: cpu or cuda[:N] (PyTorch)
            print(f"note: {numeric} integrate on {args.device} with PyTorch (riemattn.use_device); "
                  "their data.nc has the same layout as on the CPU", file=sys.stderr)
    try:
        summaries = reproduce(
            names, quick=args.quick, out=args.out, workers=args.workers, progress=_progress(args),
            force=args.force, full=args.full, device=args.device,
        )
    except Interrupted as exc:
        print(f"riemattn: {exc}", file=sys.stderr)
        return 128 + exc.signum
    return _report(summaries, args.out, verbose=args.verbose)


def _report(summaries, out, verbose=False) -> int:
    """Print at most two lines per figure (``--verbose``: and one per claim), none longer than 200
    characters; 1 if a figure FAILs, else 0 (see :mod:`riemattn.cli._console`)."""
    from ._console import report

    return report(summaries, out, verbose=verbose)


def _cmd_simulate(args) -> int:
    from ..runs.simulate import load_config, simulate_config

    cfg = load_config(args.config)
    check_output_dir(args.out, "--out")
    command = shlex.join(["riemattn", "simulate", str(args.config), "--out", str(args.out)]
                         + ([] if args.device == "cpu" else ["--device", args.device]))
    summary = simulate_config(cfg, out=args.out, progress=not args.no_progress, device=args.device,
                              command=command)
    print(f"wrote {args.out}: " + ", ".join(summary["files"]))
    return 0


def _cmd_sweep(args) -> int:
    from ..runs.sweep_config import run_sweep_file

    check_output_dir(args.out, "--out")
    result = run_sweep_file(args.config, args.out, scheduler=args.scheduler, workers=args.workers,
                            progress=not args.no_progress, overwrite=args.overwrite)
    print(result)
    return 0 if not result.failed else 1


def _cmd_sweep_plot(args) -> int:
    import matplotlib

    matplotlib.use("Agg")
    from ..runs.sweep_config import parse_sel, plot_slice

    check_output_dir(os.path.dirname(os.path.abspath(args.out)), "the directory of --out")
    fig = plot_slice(args.store, args.var, args.x, args.y, sel=parse_sel(args.sel))
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")
    return 0


def _token_shape(text: str):
    """``LxD`` (e.g. ``10x3``) -> (l, d) for ``warmup --shape``."""
    try:
        l, d = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected LxD (tokens x dimension, e.g. 10x3), got {text!r}") from None
    return l, d


def _cmd_warmup(args) -> int:
    from .. import warmup

    times = warmup(progress=_progress(args), shapes=args.shape)
    parts = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in times.items() if name not in ("total", "cached"))
    where = "cached for later processes" if times["cached"] else "not cached: no writable cache directory"
    print(f"riemattn: the compiled engine is ready in {times['total']:.1f} s ({parts}; {where})")
    return 0


def _cmd_loop(args) -> int:
    from ..llm import run_loop_command

    return run_loop_command(args)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="riemattn", description="The geometry of attention: simulate, reproduce the papers' figures."
    )
    parser.add_argument("--version", action="version", version=f"riemattn {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("list", help="list the reproducible figures")
    p.set_defaults(func=_cmd_list)

    p = sub.add_parser("reproduce", help="reproduce figures: PNG/PDF + NetCDF data + summary.json")
    p.add_argument("names", nargs="*", metavar="NAME", help="reproduction names (see `riemattn list`)")
    p.add_argument("--all", action="store_true", help="run every reproduction")
    p.add_argument("--quick", action="store_true", help="smaller sizes that keep each figure's meaning")
    p.add_argument("--full", action="store_true",
                   help="the papers' sizes for the looped-LLM figures too (GPT-2 XL / GPT-Neo 2.7B; needs a GPU: "
                   "--device cuda); the other figures' default is already the papers' size")
    p.add_argument("--device", type=_device, default="cpu",
                   help="cpu | cuda | cuda:N: where the looped-LLM figures run (default cpu); the simulations "
                   "always run on the CPU")
    p.add_argument("--out", default="results", help="output directory (default: results)")
    p.add_argument("--workers", type=_workers, default=1,
                   help="parallel processes, >= 1 (default 1); the results do not depend on it")
    p.add_argument("--force", action="store_true", help="recompute figures that are already finished")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (default: shown on a terminal)")
    p.add_argument("--verbose", action="store_true",
                   help="print every claim of every figure (default: its verdict line; the claims are in summary.json)")
    p.set_defaults(func=_cmd_reproduce)

    p = sub.add_parser("simulate", help="simulate any model described by a TOML file")
    p.add_argument("config", help="TOML configuration (see docs/simulate.md)")
    p.add_argument("--out", default="simulation", help="output directory (default: simulation)")
    p.add_argument("--device", default="cpu", metavar="cpu|cuda[:N]",
                   help="where to integrate: NumPy on the CPU (default) or PyTorch on a GPU; same outputs")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_simulate)

    p = sub.add_parser("sweep", help="a grid over simulate parameters on Dask, into a Zarr store")
    p.add_argument("config", help="TOML sweep configuration (see docs/sweeps.md)")
    p.add_argument("--out", required=True, help="the Zarr store (a directory); an existing one is resumed")
    p.add_argument("--scheduler", default=None, help="address of a running Dask scheduler (default: a local cluster)")
    p.add_argument("--workers", type=int, default=None, help="worker processes of the local cluster (default: one per core)")
    p.add_argument("--overwrite", action="store_true", help="replace a store that holds another sweep")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_sweep)

    p = sub.add_parser("sweep-plot", help="plot a 2-D slice of a sweep store (phase-diagram style)")
    p.add_argument("store", help="a Zarr store written by `riemattn sweep`")
    p.add_argument("--var", required=True, help="the observable to plot")
    p.add_argument("--x", default="time", help="dimension on the x axis (default: time)")
    p.add_argument("--y", default="beta", help="dimension on the y axis (default: beta)")
    p.add_argument("--sel", nargs="*", default=[], metavar="DIM=VALUE", help="fix other dimensions (the rest are averaged)")
    p.add_argument("--out", default="sweep.png", help="output image (default: sweep.png)")
    p.set_defaults(func=_cmd_sweep_plot)

    p = sub.add_parser("warmup", help="compile the compiled engine now (about a minute, once per install)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (default: shown on a terminal)")
    p.add_argument("--shape", action="append", default=[], type=_token_shape, metavar="LxD",
                   help="also compile the field kernel specialised to l tokens in R^d (repeatable; l d <= 64 is used)")
    p.set_defaults(func=_cmd_warmup)

    p = sub.add_parser("loop", help="loop a real transformer (GPT-2, GPT-Neo, MiniLM); needs riemattn[llm]")
    try:
        from ..llm import add_loop_arguments

        add_loop_arguments(p)
    except ImportError:  # the llm module is optional
        p.add_argument("rest", nargs=argparse.REMAINDER)
    p.set_defaults(func=_cmd_loop)
    return parser


def main(argv=None) -> int:
    # geomstats sets the root logger to INFO on import; keep matplotlib's font chatter out of the CLI
    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except RiemattnError as exc:
        print(f"riemattn: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("riemattn: interrupted", file=sys.stderr)
        return 130
    except OSError as exc:  # a file that could not be written or read after the checks (disk full, ...)
        where = f" ({exc.filename})" if getattr(exc, "filename", None) else ""
        print(f"riemattn: error: {exc.strerror or exc}{where}", file=sys.stderr)
        return 2
    except MemoryError:
        print("riemattn: error: out of memory; choose smaller sizes (tokens, trajectories, saves, d)", file=sys.stderr)
        return 2

