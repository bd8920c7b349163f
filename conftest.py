"""Runnable documentation: every code example of the docs and docstrings is a test.

Collected by the README's test command (``python -m pytest -n 2``; ``testpaths`` in
pyproject.toml includes ``docs`` and ``riemattn``), parsed by sybil:

- ``docs/**/*.md``: every ```` ```python ```` block runs, in order, in one namespace per page (a
  block may use the names an earlier block of the same page defined), in a temporary working
  directory; ```` ```toml ```` blocks must be valid ``riemattn simulate`` configurations. Shell
  (```` ```bash ````), YAML and unlabelled blocks are not run. ``% skip: next "reason"`` skips
  the next block (only where it needs something a test cannot have, such as a Dask cluster);
  ``% invisible-code-block: python`` adds checks that run but are not shown.
- ``riemattn/**/*.py``: every ``>>>`` example in a docstring (numpydoc ``Examples`` sections)
  runs as a doctest in its module's namespace.

One test per file (``<file>::examples``): a page's blocks share a namespace, so they must run in
one process and in order, which per-block items spread over xdist workers would not do. A
failure names the block's line; skipped blocks are listed in the test's report sections.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import tomllib
import unittest

import matplotlib

matplotlib.use("Agg")  # snippets that draw must not need a display

# integrate(engine="auto") runs the compiled engine where its loop is already compiled (in this
# process or numba's cache): within one xdist worker, whether an earlier test compiled it would
# decide which engine a later test gets. The suite pins "auto" to NumPy unless told otherwise;
# tests of both engines use tests/conftest.py's ``engine`` fixture, and
# ``RIEMATTN_ENGINE=compiled python -m pytest`` runs every test on the compiled engine wherever it
# supports the call.
os.environ.setdefault("RIEMATTN_ENGINE", "numpy")

import pytest  # noqa: E402
from sybil import Sybil  # noqa: E402
from sybil.parsers.myst import CodeBlockParser, PythonCodeBlockParser, SkipParser  # noqa: E402
from sybil.parsers.rest import DocTestParser  # noqa: E402


def _check_toml(example):
    from riemattn.runs.simulate import validate_config

    validate_config(tomllib.loads(example.parsed))


PAGES = Sybil(
    parsers=[PythonCodeBlockParser(), CodeBlockParser("toml", _check_toml), SkipParser()],
    patterns=["docs/*.md", "docs/**/*.md"],
    excludes=["docs/_build/**", "docs/auto_examples/**"],
    name="docs",
)
DOCSTRINGS = Sybil(parsers=[DocTestParser()], patterns=["riemattn/*.py", "riemattn/**/*.py"],
                   name="docstrings")


class ExamplesFile(pytest.File):
    def collect(self):
        yield ExamplesItem.from_parent(self, name="examples")


class ExamplesItem(pytest.Item):
    def runtest(self):
        document = self.parent.sybil.parse(self.path)
        cwd, tmp = os.getcwd(), tempfile.mkdtemp(prefix="riemattn-docs-")
        os.chdir(tmp)  # snippets that write files leave none behind
        skipped = []
        try:
            for example in document.examples():
                try:
                    example.evaluate()
                except unittest.SkipTest as exc:
                    skipped.append(f"line {example.line}: {exc}")
                except Exception as exc:
                    raise AssertionError(f"{self.path.name}, the example at line {example.line} "
                                         f"failed: {type(exc).__name__}: {exc}") from exc
        finally:
            os.chdir(cwd)
            shutil.rmtree(tmp, ignore_errors=True)
        if skipped:
            self.add_report_section("call", "skipped blocks", "\n".join(skipped))

    def reportinfo(self):
        return self.path, 0, f"examples of {self.path.name}"


def pytest_collect_file(file_path, parent):
    for sybil in (PAGES, DOCSTRINGS):
        if sybil.should_parse(file_path) and next(iter(sybil.parse(file_path)), None) is not None:
            collector = ExamplesFile.from_parent(parent, path=file_path)
            collector.sybil = sybil
            return collector
    return None  # not a docs page or module, or one without examples
