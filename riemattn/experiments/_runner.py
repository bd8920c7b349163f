"""Run reproductions, write their outputs as they finish, and skip what is already done.

Outputs per figure, in ``OUT/NAME/``: ``figure.png``, ``figure.pdf``, ``data.nc`` (NetCDF) and
``summary.json`` (configuration, its hash, runtime, claims with pass/fail). ``summary.json`` is written
last and atomically: a figure whose summary exists with the same configuration hash is finished and
is not recomputed, so an interrupted ``--all`` run resumes where it stopped.

Sizes: full (the papers'), ``quick`` (``riemattn reproduce --quick``) and ``smoke`` (the test suite's:
``config(quick=True, smoke=True)`` for modules whose ``config`` accepts ``smoke``, else quick).
With ``workers > 1`` each worker process limits its BLAS/OpenMP threads to
``cpu_count // workers`` (threadpoolctl, when installed): otherwise every process starts one BLAS
thread per core and they oversubscribe the machine (measured: 5x slower field evaluations).
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import os
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import numpy as np

from .. import __version__
from . import get

__all__ = ["config_for", "config_hash", "reproduce", "run_one"]


def config_hash(name: str, config: dict) -> str:
    """Hash of a reproduction's name, configuration and the package version."""
    blob = json.dumps({"name": name, "config": config, "version": __version__}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def config_for(module, quick: bool = False, smoke: bool = False) -> dict:
    """A reproduction's configuration at the requested size (``smoke`` implies quick)."""
    if smoke:
        if "smoke" in inspect.signature(module.config).parameters:
            return module.config(quick=True, smoke=True)
        return module.config(quick=True)
    return module.config(quick=quick)


def _size(quick: bool, smoke: bool) -> str:
    return "smoke" if smoke else "quick" if quick else "full"


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


def _atomic_write(path: Path, write):
    tmp = path.with_name(path.name + ".part")
    write(tmp)
    os.replace(tmp, path)


def is_done(outdir: Path, digest: str) -> bool:
    summary = outdir / "summary.json"
    if not summary.exists():
        return False
    try:
        return json.loads(summary.read_text()).get("config_hash") == digest
    except (OSError, json.JSONDecodeError):
        return False


def run_one(
    name: str, quick: bool, out: str | os.PathLike, force: bool = False, smoke: bool = False
) -> dict:
    """Run one reproduction (unless already done) and write its outputs; return its summary."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    module = get(name)
    config = config_for(module, quick, smoke)
    digest = config_hash(name, config)
    outdir = Path(out) / name
    if not force and is_done(outdir, digest):
        summary = json.loads((outdir / "summary.json").read_text())
        summary["cached"] = True
        return summary
    outdir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    ds = module.run(config)
    runtime = time.perf_counter() - start
    ds.attrs["reproduction"] = name
    ds.attrs["config"] = json.dumps(config, sort_keys=True)
    _atomic_write(outdir / "data.nc", lambda p: ds.to_netcdf(p, engine="scipy"))
    fig = module.plot(ds)
    _atomic_write(outdir / "figure.png", lambda p: fig.savefig(p, dpi=120, format="png"))
    _atomic_write(
        outdir / "figure.pdf",
        lambda p: fig.savefig(p, format="pdf", metadata={"CreationDate": None, "ModDate": None}),
    )
    plt.close(fig)
    claims = _jsonable(module.claims(ds))
    summary = {
        "name": name,
        "paper": module.PAPER,
        "figure": module.FIGURE,
        "description": module.DESCRIPTION,
        "quick": bool(quick or smoke),
        "size": _size(quick, smoke),
        "config": config,
        "config_hash": digest,
        "runtime_s": round(runtime, 3),
        "claims": claims,
        # a claim with "passed": None is an observation: reported, not counted
        "passed": bool(all(c["passed"] for c in claims.values() if c["passed"] is not None)),
    }
    _atomic_write(
        outdir / "summary.json", lambda p: p.write_text(json.dumps(summary, indent=2) + "\n")
    )
    summary["cached"] = False
    return summary


def _safe_run_one(name, quick, out, force, smoke=False):
    """run_one, turning an exception into a failed summary so ``--all`` goes on with the others."""
    try:
        return run_one(name, quick, out, force, smoke)
    except Exception as exc:  # noqa: BLE001 - reported in the summary and by the CLI
        return {
            "name": name,
            "passed": False,
            "error": f"{type(exc).__name__}: {exc}",
            "claims": {},
            "cached": False,
        }


def _thread_limit(threads: int | None):
    """Context limiting BLAS/OpenMP threads (threadpoolctl), or a no-op when unavailable/None."""
    if threads is None:
        return contextlib.nullcontext()
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # optional
        return contextlib.nullcontext()
    return threadpool_limits(limits=threads)


def _worker_run_one(name, quick, out, force, smoke, threads):
    with _thread_limit(threads):
        return _safe_run_one(name, quick, out, force, smoke)


def reproduce(
    names, *, quick=False, out="results", workers=1, progress=True, force=False, smoke=False
):
    """Run the reproductions ``names`` (in parallel processes when ``workers > 1``).

    Results are written as each finishes; finished ones (same configuration hash) are skipped.
    Returns the list of summaries in the order of ``names``. ``smoke`` selects the test suite's
    sizes (see the module docstring).
    """
    from tqdm.auto import tqdm

    names = list(names)
    summaries: dict[str, dict] = {}
    bar = tqdm(total=len(names), desc="reproduce", unit="figure", disable=not progress)
    if workers <= 1 or len(names) <= 1:
        for name in names:
            bar.set_postfix_str(name)
            summaries[name] = _safe_run_one(name, quick, out, force, smoke)
            bar.update()
    else:
        threads = max(1, (os.cpu_count() or 1) // workers)
        with ProcessPoolExecutor(max_workers=workers) as pool:
            futures = {
                pool.submit(_worker_run_one, name, quick, out, force, smoke, threads): name
                for name in names
            }
            for future in as_completed(futures):
                summaries[futures[future]] = future.result()
                bar.set_postfix_str(futures[future])
                bar.update()
    bar.close()
    return [summaries[name] for name in names]
