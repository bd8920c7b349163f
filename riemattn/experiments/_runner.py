"""Run reproductions, write their outputs as they finish, and skip what is already done.

Outputs per figure, in ``OUT/NAME/``: ``figure.png``, ``figure.pdf``, ``data.nc`` (NetCDF) and
``summary.json`` (configuration, its hash, the package version, runtime, every claim with its status
-- reproduced, not reproduced, not checked at this size -- and the figure's verdict PASS, PARTIAL or
FAIL, see :mod:`._verdict`,
the size and SHA-256 of each of the three other files, and the module's ``TIMINGS``: wall-clock
measurements such as icml-gpt's ``pass_seconds``, kept out of ``data.nc``).

Cache validity comes from the files themselves. A figure is finished (and not recomputed) when its
``summary.json`` has the same configuration hash (name, configuration, package version) and every
output it lists exists with the recorded size and SHA-256. The order of writing makes this safe
against a kill at any moment: everything is computed first (run, plot, claims), then the old
``summary.json`` is removed, then each output is written to ``FILE.part`` and renamed over
``FILE``, and ``summary.json`` comes last, atomically. A deleted, truncated or replaced ``data.nc``
or a missing figure is therefore recomputed, and a ``--quick`` run killed after replacing
``data.nc`` cannot leave a full-size summary behind. A figure that fails leaves no directory
it created.

Sizes: full (the default: the papers' for the simulations), ``quick`` (``riemattn reproduce
--quick``), ``smoke`` (the test suite's: ``config(quick=True, smoke=True)`` for modules whose
``config`` accepts ``smoke``, else quick) and ``paper`` (``riemattn reproduce --full``:
``config(full=True)`` for modules whose default is smaller than the paper's, the looped GPT-2 XL /
GPT-Neo 2.7B reproductions, which need a GPU; ``--device`` says where they run).

Threads and determinism: every figure runs with BLAS/OpenMP limited to one thread
(:data:`BLAS_THREADS`, threadpoolctl), in the calling process (one worker) and in each worker
process alike, so ``data.nc`` is byte-identical whatever ``workers`` is (measured on
``--all --quick``: all ten). (More BLAS threads change
the summation order of some products, hence the last bit; and N processes each with one thread per
core oversubscribe the machine, measured 5x slower field evaluations.)

Workers (``workers > 1``, :mod:`._workers`) are fresh processes (``spawn``), one figure at a time.
They ignore SIGINT (the parent decides) and die with their parent: on Linux the kernel sends them
SIGKILL when the parent dies (``prctl(PR_SET_PDEATHSIG)``), and on every system a thread in each
worker exits it within half a second of its parent's death (the parent pid changes).
Ctrl-C (SIGINT) or SIGTERM of the parent kills the workers at once, removes their partial files
and raises :class:`Interrupted`, which says what finished; the CLI prints it as one line and
exits with 128 + the signal number. Running the same command again resumes.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import os
import signal
import time
from functools import partial
from pathlib import Path

import numpy as np

from .. import __version__
from .._backend import use_device
from ..runs._cf import annotate
from ..errors import InputTypeError, ValidationError
from . import available, get
from ._verdict import normalize, verdict
from ._workers import run_parallel, signals_raise, thread_limit

__all__ = [
    "BLAS_THREADS", "Interrupted", "check_outputs", "config_for", "config_hash", "is_done", "reproduce",
    "run_one",
]

#: BLAS/OpenMP threads of every figure's process, whatever the number of workers
BLAS_THREADS = 1

from ._outputs import OUTPUTS, _atomic_write, _file_record, check_outputs, is_done  # noqa: E402,F401


class Interrupted(KeyboardInterrupt):
    """``reproduce`` stopped by SIGINT or SIGTERM: its workers are stopped, ``finished`` are done.

    Attributes: ``signum`` (the signal), ``finished`` (summaries of the figures that finished, in
    the order of the names), ``unfinished`` (names not finished). ``str()`` is the one-line report.
    """

    def __init__(self, signum: int, finished: list, unfinished: list):
        self.signum, self.finished, self.unfinished = signum, finished, unfinished
        done = ", ".join(
            f"{s['name']} ({s.get('verdict') or ('PASS' if s.get('passed') else 'FAIL')}"
            f"{', cached' if s.get('cached') else ''})"
            for s in finished
        ) or "none"
        super().__init__(
            f"interrupted by {signal.Signals(signum).name}: finished {len(finished)} of "
            f"{len(finished) + len(unfinished)}: {done}; not finished: {', '.join(unfinished) or 'none'}; "
            "run the same command again to resume."
        )


def config_hash(name: str, config: dict) -> str:
    """Hash of a reproduction's name, configuration and the package version."""
    blob = json.dumps({"name": name, "config": config, "version": __version__}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def config_for(module, quick: bool = False, smoke: bool = False, full: bool = False, device: str = "cpu") -> dict:
    """A reproduction's configuration at the requested size (``smoke`` implies quick).

    ``full``: the papers' sizes where a module has a larger one than its default (the looped-LLM
    reproductions: GPT-2 XL / GPT-Neo 2.7B, for a GPU); other modules' default is already the
    papers' size. ``device`` is passed to modules whose ``config`` accepts it (the LLM ones; it
    becomes part of the configuration and its hash); the others run on the CPU.
    """
    params = inspect.signature(module.config).parameters
    kw = {}
    if smoke and "smoke" in params:
        kw["smoke"] = True
    if full and not (quick or smoke) and "full" in params:
        kw["full"] = True
    if "device" in params:
        kw["device"] = device
    return module.config(quick=bool(quick or smoke), **kw)


def accepts_device(module) -> bool:
    """Whether a reproduction runs where ``--device`` says (its ``config`` takes ``device``)."""
    return "device" in inspect.signature(module.config).parameters


def _size(quick: bool, smoke: bool, full: bool = False, module=None) -> str:
    if smoke:
        return "smoke"
    if quick:
        return "quick"
    if full and module is not None and "full" in inspect.signature(module.config).parameters:
        return "paper"
    return "full"


def _jsonable(value):
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (np.bool_, bool)):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, (np.floating, float)):
        return float(value)
    if isinstance(value, np.ndarray):
        return _jsonable(value.tolist())
    return value


def _command(name: str, quick: bool, smoke: bool, full: bool = False, device: str = "cpu") -> str:
    """The command that makes a figure's data.nc (whatever the workers and the output directory)."""
    if smoke:
        return f"riemattn.experiments.reproduce([{name!r}], smoke=True)"
    return (f"riemattn reproduce {name}" + (" --quick" if quick else "") + (" --full" if full else "")
            + ("" if device == "cpu" else f" --device {device}"))


def _configured(module, name, quick, smoke, full, device):
    """(configuration, its hash, the device of a numerical reproduction or None) of a run."""
    config = config_for(module, quick, smoke, full, device)
    # the other reproductions integrate on the device through riemattn.use_device (NumPy in and
    # out, the same data.nc layout); their config records a device other than the CPU
    numeric_device = None if accepts_device(module) or device == "cpu" else device
    if numeric_device is not None:
        config = {**config, "device": numeric_device}
    return config, config_hash(name, config), numeric_device


def finished_since(name, out, since: float, quick=False, smoke=False, full=False, device="cpu"):
    """The summary of ``name`` if its outputs under ``out`` are finished (:func:`is_done`) for this
    configuration and its ``summary.json`` was written at or after ``since`` (a ``time.time()``),
    else None.

    For the report of an interrupted :func:`reproduce`: a worker writes its outputs before the
    parent receives its result, so a figure can be finished on disk while the parent has not
    heard of it yet; it is reported as finished (the next run will find it done).
    """
    outdir = Path(out) / name
    try:
        if (outdir / "summary.json").stat().st_mtime < since:
            return None
    except OSError:
        return None
    _, digest, _ = _configured(get(name), name, quick, smoke, full, device)
    if not is_done(outdir, digest):
        return None
    return _with_verdict(json.loads((outdir / "summary.json").read_text()))


def run_one(
    name: str, quick: bool, out: str | os.PathLike, force: bool = False, smoke: bool = False,
    full: bool = False, device: str = "cpu",
) -> dict:
    """Run one reproduction (unless already done) and write its outputs; return its summary.

    ``full`` and ``device``: see :func:`config_for`.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    module = get(name)
    config, digest, numeric_device = _configured(module, name, quick, smoke, full, device)
    outdir = Path(out) / name
    if not force and is_done(outdir, digest):
        summary = _with_verdict(json.loads((outdir / "summary.json").read_text()))
        summary["cached"] = True
        return summary
    # compute everything before touching the directory
    start = time.perf_counter()
    with use_device(numeric_device):
        ds = module.run(config)
    runtime = time.perf_counter() - start
    ds.attrs["reproduction"] = name
    ds.attrs["config"] = json.dumps(config, sort_keys=True)
    fig = module.plot(ds)
    try:
        claims = _jsonable(normalize(module.claims(ds)))
        verdict_, detail = verdict(claims)
        timings = {
            v: {"dims": list(ds[v].dims), "values": _jsonable(ds[v].values)}
            for v in getattr(module, "TIMINGS", ()) if v in ds
        }
        ds = ds.drop_vars(list(timings))  # data.nc holds results only: the same bytes every run
        # long_name/units of every variable (the module's DATA_ATTRS), version and command
        ds = annotate(ds, getattr(module, "DATA_ATTRS", {}), command=_command(name, quick, smoke, full, device))
        created = [d for d in (outdir, *outdir.parents) if not d.exists()]  # innermost first
        try:
            outdir.mkdir(parents=True, exist_ok=True)
            # from here until summary.json is written, the directory is not a finished figure
            with contextlib.suppress(FileNotFoundError):
                (outdir / "summary.json").unlink()
            _atomic_write(outdir / "data.nc", lambda p: ds.to_netcdf(p, engine="scipy"))
            _atomic_write(outdir / "figure.png", lambda p: fig.savefig(p, dpi=120, format="png"))
            _atomic_write(
                outdir / "figure.pdf",
                lambda p: fig.savefig(p, format="pdf", metadata={"CreationDate": None, "ModDate": None}),
            )
            summary = {
                "name": name,
                "paper": module.PAPER,
                "figure": module.FIGURE,
                "description": module.DESCRIPTION,
                "quick": bool(quick or smoke),
                "size": _size(quick, smoke, full, module),
                "device": str(config.get("device", "cpu")),
                "config": config,
                "config_hash": digest,
                "version": __version__,
                "runtime_s": round(runtime, 3),
                "timings": timings,
                "claims": claims,
                # PASS / PARTIAL / FAIL from the paper claims' statuses (stand-ins and observations
                # are reported, not counted); "passed" (verdict == PASS) is kept for old readers
                "verdict": verdict_,
                "claims_by_status": detail,
                "passed": verdict_ == "PASS",
                "files": {f: _file_record(outdir / f) for f in OUTPUTS},
            }
            _atomic_write(
                outdir / "summary.json", lambda p: p.write_text(json.dumps(summary, indent=2) + "\n")
            )
        except BaseException:
            if created:  # leave no directory behind that this call created (OUT too)
                for f in OUTPUTS:
                    with contextlib.suppress(OSError):
                        (outdir / f).unlink()
                for d in created:
                    with contextlib.suppress(OSError):
                        d.rmdir()  # only if empty
            raise
    finally:
        plt.close(fig)
    summary["cached"] = False
    return summary


def _safe_run_one(name, quick, out, force, smoke=False, full=False, device="cpu"):
    """run_one, turning an exception into a failed summary so ``--all`` goes on with the others."""
    try:
        return run_one(name, quick, out, force, smoke, full, device)
    except Exception as exc:  # noqa: BLE001 - reported in the summary and by the CLI
        return _failed(name, f"{type(exc).__name__}: {exc}")


def _failed(name, error):
    return {"name": name, "verdict": "FAIL", "passed": False, "error": error, "claims": {}, "cached": False}


def _with_verdict(summary: dict) -> dict:
    """A summary written before verdicts existed gets its claims' statuses and verdict (in memory)."""
    if "verdict" not in summary and isinstance(summary.get("claims"), dict):
        summary["claims"] = normalize(summary["claims"])
        summary["verdict"], summary["claims_by_status"] = verdict(summary["claims"], summary.get("error"))
        summary["passed"] = summary["verdict"] == "PASS"
    return summary


def _partial_files(out, name):
    return [Path(out) / name / f"{f}.part" for f in (*OUTPUTS, "summary.json")]


def reproduce(
    names, *, quick=False, out="results", workers=1, progress=True, force=False, smoke=False, full=False,
    device="cpu",
):
    """Run the reproductions ``names`` (in parallel processes when ``workers > 1``).

    Results are written as each finishes; finished ones (see :func:`is_done`) are skipped.
    Returns the list of summaries in the order of ``names`` (a name given twice runs once).
    ``progress``: a progress bar (True), none (False), or one only where stderr is a terminal
    (None). ``smoke`` selects the test suite's sizes (see the module docstring); ``full`` the papers' sizes of
    the looped-LLM reproductions and ``device`` where they run (see :func:`config_for`; the other
    reproductions run on the CPU whatever ``device`` says). The outputs do not depend
    on ``workers``. SIGINT or SIGTERM (in the main thread) stops every worker and raises
    :class:`Interrupted` (a ``KeyboardInterrupt``) saying what finished.
    """
    from tqdm.auto import tqdm

    if isinstance(names, str):
        names = [names]
    names = list(dict.fromkeys(names))
    known = available()
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValidationError(f"names: unknown reproduction(s) {unknown}; choose from {sorted(known)}.")
    if isinstance(workers, bool) or not isinstance(workers, (int, np.integer)):
        raise InputTypeError(f"workers must be an integer >= 1, got {workers!r} ({type(workers).__name__}).")
    if workers < 1:
        raise ValidationError(f"workers must be an integer >= 1, got {workers}.")
    if not isinstance(device, str) or not device:
        raise InputTypeError(f"device must be a string such as 'cpu' or 'cuda', got {device!r}.")
    if quick and full:
        raise ValidationError("quick and full cannot both be set (choose one size).")
    check_outputs(out, names, "out")
    started = time.time()
    summaries: dict[str, dict] = {}
    bar = tqdm(total=len(names), desc="reproduce", unit="figure", disable=None if progress is None else not progress)

    def done(summary):
        summaries[summary["name"]] = summary
        bar.set_postfix_str(summary["name"])
        bar.update()

    try:
        with signals_raise():
            if workers == 1 or len(names) <= 1:
                with thread_limit(BLAS_THREADS):
                    for name in names:
                        bar.set_postfix_str(name)
                        done(_safe_run_one(name, quick, out, force, smoke, full, device))
            else:
                run_parallel(
                    names, int(workers), _safe_run_one, (quick, out, force, smoke, full, device), done,
                    on_died=lambda name, code: _failed(name, f"worker process died (exit code {code})"),
                    partial_files=partial(_partial_files, out), threads=BLAS_THREADS,
                )
    except KeyboardInterrupt as exc:
        bar.close()
        signum = getattr(exc, "signum", signal.SIGINT)
        for n in names:  # finished by a worker whose result had not reached us yet
            if n not in summaries:
                on_disk = finished_since(n, out, started, quick, smoke, full, device)
                if on_disk is not None:
                    summaries[n] = on_disk
        finished = [summaries[n] for n in names if n in summaries]
        raise Interrupted(signum, finished, [n for n in names if n not in summaries]) from None
    bar.close()
    return [summaries[name] for name in names]
