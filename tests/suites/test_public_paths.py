"""No public import path changes: every name of every ``__all__`` imports from its public path.

A *public path* is a module of :mod:`riemattn` whose dotted name has no part starting with ``_``
(found by walking the package, as docs/_ext/riemattn_api.py does), plus the module paths of the
flat layout before 0.2 that ``riemattn.MOVED_MODULES`` keeps alive. Two checks:

- ``tests/data/public_paths.json`` is a snapshot of every public path and its ``__all__``, taken
  from the tree *before* the rooms were cut by family (issue 45) with ``public_paths()`` below.
  Every path in it must still import and still export (in ``__all__``, reachable by
  ``getattr``) every name it exported then. Moving a module therefore needs an alias at its old
  path; the snapshot is never regenerated to make a move pass.
- Every public module of the tree as it is now exports only names it has: each name of each
  ``__all__`` is an attribute of its module (a name added tomorrow is checked the day it lands).
"""

from __future__ import annotations

import importlib
import json
import pkgutil
from pathlib import Path

import pytest

import riemattn

SNAPSHOT = Path(__file__).resolve().parent / "data" / "public_paths.json"


def _public(name: str) -> bool:
    return not any(part.startswith("_") for part in name.split("."))


def _import(name: str):
    """The module *name*; the test is skipped if an optional extra it needs is not installed."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and not exc.name.startswith("riemattn"):
            pytest.skip(f"{name} needs {exc.name} (an optional extra)")
        raise


def public_paths() -> dict[str, list[str] | None]:
    """Every public module path of riemattn -> its ``__all__`` (None where it has none)."""
    names = ["riemattn"] + [info.name for info in pkgutil.walk_packages(riemattn.__path__, "riemattn.")
                            if _public(info.name)]
    names += [f"riemattn.{old}" for old in getattr(riemattn, "MOVED_MODULES", {})]
    out = {}
    for name in sorted(set(names)):
        exported = getattr(importlib.import_module(name), "__all__", None)
        out[name] = None if exported is None else sorted(exported)
    return out


def _snapshot() -> dict[str, list[str] | None]:
    return json.loads(SNAPSHOT.read_text())


def test_every_public_path_of_the_snapshot_still_imports_its_names():
    snapshot = _snapshot()
    assert len(snapshot) > 50 and sum(len(v or ()) for v in snapshot.values()) > 300  # not emptied
    problems = []
    for path, before in sorted(snapshot.items()):
        try:
            module = _import(path)
        except ImportError as exc:
            problems.append(f"import {path} fails: {exc}")
            continue
        if before is None:
            continue  # a module with no __all__ (a command-line entry point, a reproduction): it imports
        now = getattr(module, "__all__", None)
        if now is None:
            problems.append(f"{path} lost its __all__")
            continue
        lost = sorted(set(before) - set(now))
        if lost:
            problems.append(f"{path}.__all__ lost {lost}")
        for name in before:
            # the statement users write, through the import system (an alias must resolve too)
            namespace: dict = {}
            try:
                exec(f"from {path} import {name}", namespace)  # noqa: S102
            except ImportError as exc:
                problems.append(f"from {path} import {name} fails: {exc}")
    assert not problems, "\n".join(problems)


def test_every_name_of_every_public_all_is_an_attribute_of_its_module():
    for path in public_paths():
        module = importlib.import_module(path)
        for name in getattr(module, "__all__", ()):
            assert hasattr(module, name), f"{path}.__all__ names {name!r}, which it does not have"
