"""Reproductions of the papers' figures: one module per figure.

May import: every room but :mod:`riemattn.cli` and :mod:`riemattn.testing`, and of the core rooms
(geometry, dynamics, solvers, analysis) only public modules.

Each module defines ``NAME`` (the CLI name), ``PAPER``, ``FIGURE``, ``DESCRIPTION`` and

- ``config(quick=False) -> dict``: a JSON-serializable configuration (with its ``seed``); it may also
  accept the keywords ``smoke`` (the test suite's size), ``full`` (the papers' size where the default
  is smaller, e.g. the looped GPT-2 XL) and ``device`` (where a torch model runs);
- ``run(config) -> xarray.Dataset``: the simulation, seeded, no global state;
- ``plot(ds) -> matplotlib.figure.Figure``;
- ``claims(ds) -> dict``: ``{name: claim}``, the paper's claims checked on the data, each with a
  status *reproduced* / *not reproduced* / *not checked at this size* and a kind *paper* /
  *stand-in* / *observation* (``riemattn.experiments._verdict.claim``; the older
  ``{"passed": bool | None, "value": ..., "description": str}`` is still understood). The runner
  derives the figure's verdict PASS / PARTIAL / FAIL from them (``riemattn.experiments._verdict``).

Optional: ``TIMINGS``, names of data variables that are wall-clock measurements, not results; the
runner moves them from ``data.nc`` (which stays byte-identical between runs) to ``summary.json``.

``DATA_ATTRS``: ``{name: (long_name, units)}`` of the module's data variables and coordinates
(CF; ``"1"`` for dimensionless). The runner writes them into ``data.nc`` with
:func:`riemattn.runs._cf.annotate`, which also records the package version and the command, and which
refuses a variable that neither this table nor ``riemattn.runs._cf.COMMON`` describes.

Modules are discovered automatically (every non-underscore module of this package with a ``NAME``).
:func:`riemattn.experiments.reproduce` runs them and writes PNG/PDF, NetCDF and ``summary.json``.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

from ..errors import InputTypeError, ValidationError

__all__ = ["available", "get", "reproduce"]

_REQUIRED = ("NAME", "PAPER", "FIGURE", "DESCRIPTION", "config", "run", "plot", "claims")


def available() -> dict[str, ModuleType]:
    """All reproduction modules, by CLI name, in a stable order (paper, then name)."""
    found = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        if all(hasattr(module, attr) for attr in _REQUIRED):
            found[module.NAME] = module
    return dict(sorted(found.items(), key=lambda kv: (getattr(kv[1], "ORDER", 100), kv[0])))


def get(name: str) -> ModuleType:
    """The reproduction module called ``name`` (see ``riemattn list``)."""
    modules = available()
    if not isinstance(name, str):
        raise InputTypeError(f"name must be a reproduction's name (a string), got {type(name).__name__} {name!r}.")
    if name not in modules:
        raise ValidationError(f"unknown reproduction {name!r}; choose one of {sorted(modules)}.")
    return modules[name]


def reproduce(*args, **kwargs):
    """Run reproductions and write their outputs; see :func:`riemattn.experiments._runner.reproduce`."""
    from ._runner import reproduce as _reproduce

    return _reproduce(*args, **kwargs)
