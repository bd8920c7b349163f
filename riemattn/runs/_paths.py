"""Checks of the paths the command line reads and writes, done before any work starts.

Each raises a :mod:`riemattn.errors` type naming the argument as the caller wrote it (``--out`` on
the command line, ``out`` in Python).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from ..errors import InputTypeError, ValidationError

__all__ = ["check_input_file", "check_output_dir"]


def _as_path(value, name: str) -> Path:
    if not isinstance(value, (str, os.PathLike)):
        raise InputTypeError(f"{name} must be a path (str or os.PathLike), got {type(value).__name__} {value!r}.")
    if str(value) == "":
        raise ValidationError(f"{name} must be a path, got an empty string.")
    return Path(value)


def check_output_dir(value, name: str = "out") -> Path:
    """``value`` as a directory that exists or can be created, and is writable; nothing is left behind.

    Fails at once (instead of after a whole run) when ``value`` is an existing file, when one of its
    parents is a file, or when the directory that would hold it is not writable. Permissions do not
    tell everything (root may "write" to /proc, where no file can be made): the directory is then
    created and a file made and removed in it, and what this made is removed again.
    """
    path = _as_path(value, name)
    if path.is_symlink() and not path.exists():
        raise ValidationError(f"{name} {str(value)!r} is a broken symbolic link; expected a directory.")
    if path.exists():
        if not path.is_dir():
            raise ValidationError(
                f"{name} {str(value)!r} is a file; expected a directory (existing, or one to create)."
            )
        if not os.access(path, os.W_OK | os.X_OK):
            raise ValidationError(f"{name} {str(value)!r} is a directory that is not writable.")
        return _probe(path, value, name)
    parent = path.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise ValidationError(
            f"{name} {str(value)!r} cannot be created: {str(parent)!r} is a file, not a directory."
        )
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ValidationError(f"{name} {str(value)!r} cannot be created: {str(parent)!r} is not writable.")
    return _probe(path, value, name)


def _probe(path: Path, value, name: str) -> Path:
    """Create ``path`` (and missing parents) and a file in it, then remove all that this made."""
    missing = [d for d in (path, *path.parents) if not d.exists()]  # innermost first
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".riemattn-probe-", dir=path)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename else ""
        raise ValidationError(f"{name} {str(value)!r} cannot be written: {exc.strerror or exc}{where}.") from None
    finally:
        for d in missing:
            try:
                d.rmdir()
            except OSError:
                break
    return path


def check_input_file(value, name: str) -> str:
    """The text of the UTF-8 file ``value``, or an error saying what is wrong with the path."""
    path = _as_path(value, name)
    if path.is_dir():
        raise ValidationError(f"{name} {str(value)!r} is a directory; expected a TOML file.")
    if not path.exists():
        raise ValidationError(f"{name} {str(value)!r} does not exist.")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ValidationError(f"{name} {str(value)!r} is not UTF-8 text: {exc.reason} at byte {exc.start}.") from None
    except OSError as exc:
        raise ValidationError(f"{name} {str(value)!r} cannot be read: {exc.strerror or exc}.") from None
