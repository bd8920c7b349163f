"""Sphinx configuration of the riemattn site.

Build (from the repository root, with the ``docs`` and ``llm`` extras installed)::

    .venv/bin/python -m sphinx -W -n --keep-going -b html docs docs/_build/html

``-W`` turns every warning into an error and ``-n`` (nitpicky) warns about every cross-reference
that does not resolve, so a successful build has zero warnings.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(DOCS / "_ext"))
sys.path.insert(0, str(ROOT))  # the checkout's riemattn, also when it is not installed editable

import riemattn  # noqa: E402

project = "riemattn"
author = "the riemattn developers"
copyright = "2026, the riemattn developers"
release = riemattn.__version__
version = release

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.intersphinx",
    "sphinx.ext.mathjax",
    "numpydoc",
    "myst_parser",
    "sphinx_gallery.gen_gallery",
    "riemattn_api",  # docs/_ext/riemattn_api.py: the API pages, written from __all__ at each build
]

root_doc = "index"
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
templates_path = ["_templates"]
exclude_patterns = [
    "_build",
    "auto_examples/*.ipynb",
    "auto_examples/*.py",
    "auto_examples/*.zip",
    "auto_examples/*.md5",
    "auto_examples/*.codeobj.json",
    "sg_execution_times.rst",
]
nitpicky = True
# Private base classes (riemattn.geometry.manifolds._FastMixin, riemattn.geometry.groups._Frame, ...) appear in
# "Bases:" lines but are deliberately not documented: their public subclasses are.
nitpick_ignore_regex = [("py:class", r"riemattn(\.\w+)*\._\w+")]
# a base class of riemattn.geometry.metrics.SphereMetric that geomstats' inventory does not list
nitpick_ignore = [("py:class", "geomstats.geometry.hypersphere.HypersphereMetric")]

# -- MyST (the Markdown pages) -----------------------------------------------------------------
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist"]
myst_heading_anchors = 3
# links such as [steppers.md](steppers.md) between the pages resolve as documents; links to files
# of the repository outside docs/ (examples/, benchmarks/, tests/) go to the file on disk
myst_url_schemes = ["http", "https", "mailto"]

# -- autodoc / autosummary / numpydoc -------------------------------------------------------------
autosummary_generate = True
autosummary_imported_members = False
autodoc_typehints = "none"  # the numpydoc sections carry the types; annotations would duplicate them
autodoc_default_options = {"member-order": "bysource"}
# methods inherited from geomstats keep geomstats' own docs (linked through the base classes);
# their docstrings are not numpydoc and would not pass the nitpicky build
autodoc_inherit_docstrings = False
numpydoc_show_class_members = False  # members come from the autosummary class template
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False
numpydoc_validation_checks: set[str] = set()

# -- intersphinx ---------------------------------------------------------------------------------
# The build must work offline (the reference machines reach only package registries) and with
# -W, so the inventories are NOT fetched: each project's entry points at a small inventory shipped
# in docs/_inventories/ (written by docs/_inventories/make_inventories.py: the external objects
# these docs refer to, with the real URLs of their pages). Links then go to the projects' real
# pages and a reference to an object not in the small inventory fails the nitpicky build, which
# is the signal to add it there. RIEMATTN_DOCS_ONLINE=1 fetches the projects' full inventories
# instead (falling back to the shipped ones).
_INV = DOCS / "_inventories"
_SITES = {
    "python": "https://docs.python.org/3/",
    "numpy": "https://numpy.org/doc/stable/",
    "scipy": "https://docs.scipy.org/doc/scipy/",
    "geomstats": "https://geomstats.github.io/",
    "xarray": "https://docs.xarray.dev/en/stable/",
    "torch": "https://docs.pytorch.org/docs/stable/",
    "matplotlib": "https://matplotlib.org/stable/",
    "dask": "https://distributed.dask.org/en/stable/",
    "transformers": "https://huggingface.co/docs/transformers/main/en/",
}
_online = os.environ.get("RIEMATTN_DOCS_ONLINE") == "1"
intersphinx_mapping = {
    key: (url, (None, str(_INV / f"{key}.inv")) if _online else str(_INV / f"{key}.inv"))
    for key, url in _SITES.items()
}

# -- sphinx-gallery --------------------------------------------------------------------------------
sphinx_gallery_conf = {
    "examples_dirs": str(ROOT / "examples"),
    "gallery_dirs": str(DOCS / "auto_examples"),
    "filename_pattern": r"/plot_",  # run every plot_*.py; the other scripts are shown, not run
    "ignore_pattern": r"(metastability_sweep|loop_gpt2)\.py$",
    "download_all_examples": False,
    "remove_config_comments": True,
    "matplotlib_animations": False,
    "within_subsection_order": "FileNameSortKey",
    "reference_url": {"riemattn": None},
    "plot_gallery": "True",
}

# -- HTML ---------------------------------------------------------------------------------------------
html_theme = "pydata_sphinx_theme"
html_title = f"riemattn {release}"
html_static_path: list[str] = []
html_theme_options = {
    "navbar_align": "left",
    "show_toc_level": 2,
    "navigation_with_keys": False,
    "footer_start": ["copyright"],
    "footer_end": ["sphinx-version", "theme-version"],
}
html_sidebars = {"index": []}
