"""Runnable documentation: every code example of the docs and docstrings is a test.

Collected by the README's test command (``python -m pytest -n 2``; ``testpaths`` in
pyproject.toml includes ``docs`` and ``riemattn``) with sybil:

- ``docs/**/*.md``: every ```` ```python ```` block runs, in order, in one namespace per page (a
  block may use the names an earlier block of the same page defined); ```` ```toml ```` blocks
  must be valid ``riemattn simulate`` configurations. Shell (```` ```bash ````), YAML and
  unlabelled blocks are not run. ``% skip: next "reason"`` skips the next block (only where
  it needs something a test cannot have, such as a Dask cluster), ``% invisible-code-block:
  python`` adds checks that are run but not shown.
- ``riemattn/**/*.py``: every ``>>>`` example in a docstring (numpydoc ``Examples`` sections)
  runs as a doctest in its module's namespace.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import tomllib

import matplotlib

matplotlib.use("Agg")  # snippets that draw must not need a display

from sybil import Sybil  # noqa: E402
from sybil.parsers.myst import CodeBlockParser, PythonCodeBlockParser, SkipParser  # noqa: E402
from sybil.parsers.rest import DocTestParser  # noqa: E402


def _check_toml(example):
    from riemattn.simulate import validate_config

    validate_config(tomllib.loads(example.parsed))


def _setup(namespace):
    """Each page runs in a fresh temporary directory: snippets that write files leave none behind."""
    namespace["_docs_cwd"] = os.getcwd()
    namespace["_docs_tmp"] = tempfile.mkdtemp(prefix="riemattn-docs-")
    os.chdir(namespace["_docs_tmp"])


def _teardown(namespace):
    os.chdir(namespace["_docs_cwd"])
    shutil.rmtree(namespace["_docs_tmp"], ignore_errors=True)


pytest_collect_file = (
    Sybil(
        parsers=[PythonCodeBlockParser(), CodeBlockParser("toml", _check_toml), SkipParser()],
        patterns=["docs/*.md", "docs/**/*.md"],
        excludes=["docs/_build/**", "docs/auto_examples/**"],
        setup=_setup,
        teardown=_teardown,
        name="docs",
    )
    + Sybil(
        parsers=[DocTestParser()],
        patterns=["riemattn/*.py", "riemattn/**/*.py"],
        name="docstrings",
    )
).pytest()
