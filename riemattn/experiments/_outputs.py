"""The files of a reproduced figure: atomic writes, their size and SHA-256, "is this figure done?".

Private to :mod:`riemattn.experiments`; :mod:`riemattn.experiments._runner` re-exports the names.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path

from ..errors import ValidationError
from ..runs._paths import check_output_dir

#: the outputs of a figure besides summary.json, in the order they are written
OUTPUTS = ("data.nc", "figure.png", "figure.pdf")


def _atomic_write(path: Path, write):
    """``write(tmp)`` then rename ``tmp`` over ``path``; the partial ``tmp`` is removed on any failure."""
    tmp = path.with_name(path.name + ".part")
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def _file_record(path: Path) -> dict:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return {"bytes": path.stat().st_size, "sha256": digest.hexdigest()}


def is_done(outdir: Path, digest: str) -> bool:
    """Whether ``outdir`` holds a finished figure of configuration hash ``digest``.

    True when ``summary.json`` has that hash and every output it lists (:data:`OUTPUTS`) exists with
    the recorded size and SHA-256.
    """
    outdir = Path(outdir)
    try:
        summary = json.loads((outdir / "summary.json").read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(summary, dict) or summary.get("config_hash") != digest:
        return False
    files = summary.get("files")
    if not isinstance(files, dict) or set(files) != set(OUTPUTS):
        return False
    for fname, record in files.items():
        path = outdir / fname
        try:
            if not isinstance(record, dict) or path.stat().st_size != record.get("bytes"):
                return False
            if _file_record(path) != record:
                return False
        except OSError:
            return False
    return True


def check_outputs(out, names, name: str = "out") -> Path:
    """``out`` writable (see :func:`riemattn.runs._paths.check_output_dir`) and no ``out/NAME`` a file."""
    out = check_output_dir(out, name)
    for n in names:
        sub = out / n
        if sub.exists() and not sub.is_dir():
            raise ValidationError(f"{name} {str(out)!r} holds a file {n!r} where the directory of {n} goes.")
    return out
