"""Run reproductions, write their outputs as they finish, and skip what is already done.

Outputs per figure, in ``OUT/NAME/``: ``figure.png``, ``figure.pdf``, ``data.nc`` (NetCDF) and
``summary.json`` (configuration, its hash, runtime, claims with pass/fail). ``summary.json`` is written
last and atomically: a figure whose summary exists with the same configuration hash is finished and
is not recomputed, so an interrupted ``--all`` run resumes where it stopped.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import numpy as np

from .. import __version__
from . import get

__all__ = ["reproduce", "run_one", "config_hash"]


def config_hash(name: str, config: dict) -> str:
    """Hash of a reproduction's name, configuration and the package version."""
    blob = json.dumps({"name": name, "config": config, "version": __version__}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


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


def run_one(name: str, quick: bool, out: str | os.PathLike, force: bool = False) -> dict:
    """Run one reproduction (unless already done) and write its outputs; return its summary."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    module = get(name)
    config = module.config(quick=quick)
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
        "quick": bool(quick),
        "config": config,
        "config_hash": digest,
        "runtime_s": round(runtime, 3),
        "claims": claims,
        "passed": bool(all(c["passed"] for c in claims.values())),
    }
    _atomic_write(outdir / "summary.json", lambda p: p.write_text(json.dumps(summary, indent=2) + "\n"))
    summary["cached"] = False
    return summary


def _safe_run_one(name, quick, out, force):
    """run_one, turning an exception into a failed summary so ``--all`` goes on with the others."""
    try:
        return run_one(name, quick, out, force)
    except Exception as exc:  # noqa: BLE001 - reported in the summary and by the CLI
        return {"name": name, "passed": False, "error": f"{type(exc).__name__}: {exc}", "claims": {}, "cached": False}


def reproduce(names, *, quick=False, out="results", workers=1, progress=True, force=False):
    """Run the reproductions ``names`` (in parallel processes when ``workers > 1``).

    Results are written as each finishes; finished ones (same configuration hash) are skipped.
    Returns the list of summaries in the order of ``names``.
    """
    from tqdm.auto import tqdm

    names = list(names)
    summaries: dict[str, dict] = {}
    bar = tqdm(total=len(names), desc="reproduce", unit="figure", disable=not progress)
    if workers <= 1 or len(names) <= 1:
        for name in names:
            bar.set_postfix_str(name)
            summaries[name] = _safe_run_one(name, quick, out, force)
            bar.update()
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            futures = {pool.submit(_safe_run_one, name, quick, out, force): name for name in names}
            for future in as_completed(futures):
                summaries[futures[future]] = future.result()
                bar.set_postfix_str(futures[future])
                bar.update()
    bar.close()
    return [summaries[name] for name in names]
