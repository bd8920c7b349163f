"""The docs' machinery: the API reference lists every public name (docs/_ext/riemattn_api.py)."""

import importlib
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "_ext"))
api = pytest.importorskip("riemattn_api")  # plain Python: needs no Sphinx


def test_every_public_module_has_a_page_listing_every_name_in_its_all():
    modules = api.public_modules()
    assert {"riemattn", "riemattn.dynamics.attention", "riemattn.runs.sweep", "riemattn.llm.loop"} <= set(modules)
    assert not [m for m in modules if any(p.startswith("_") for p in m.split("."))]
    listing = {m: api.exported(m) for m in modules}
    for mod_name in modules:
        text = api.page_text(mod_name, listing)
        assert f".. automodule:: {mod_name}\n" in text
        entries = re.findall(r"^   ~?([\w.]+)$", text, flags=re.MULTILINE)
        shown = {e.rsplit(".", 1)[-1] for e in entries}
        missing = [n for n in listing[mod_name] if n not in shown]
        assert not missing, f"{mod_name}: {missing} not in its API page"


def test_each_name_is_documented_once_at_its_home():
    modules = api.public_modules()
    listing = {m: api.exported(m) for m in modules}
    homes = {}
    for mod_name in modules:
        mod = importlib.import_module(mod_name)
        for name in listing[mod_name]:
            obj = getattr(mod, name)
            home = api.home_of(obj, name, listing)
            assert getattr(importlib.import_module(home), name, obj) is obj or home == obj.__name__
            homes.setdefault(id(obj), set()).add(home)
    assert all(len(h) == 1 for h in homes.values())
    # re-exports go to the defining module, not to the package's short name
    assert api.home_of(importlib.import_module("riemattn").AttentionField, "AttentionField",
                       listing) == "riemattn.dynamics.attention"


def test_reference_to_a_reexport_resolves_to_its_home():
    assert api.documented_name("riemattn.sa", prefer_attribute=True) == "riemattn.dynamics.glpr.sa"
    assert api.documented_name("riemattn.sweep", prefer_attribute=True) == "riemattn.runs.sweep.sweep"
    assert api.documented_name("riemattn.sweep") == "riemattn.runs.sweep"  # the old module path
    assert api.documented_name("riemattn.analysis.gradient_flow.energy") == "riemattn.analysis.gradients.energy"
    assert api.documented_name("riemattn.no_such_name") is None
