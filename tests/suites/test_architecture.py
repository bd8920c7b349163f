"""The package layout as a contract: rooms, the direction of imports, and the old module paths.

docs/architecture.md draws the rooms; ``[tool.importlinter]`` in pyproject.toml states the
direction of imports; these tests run that linter (and show that it fails on a planted forbidden
import), and check that every public name and every module path of the earlier layouts (the
flat one before 0.2, solvers/ before its cut by family) still imports and means the same object.
"""

from __future__ import annotations

import importlib
import pkgutil
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import riemattn

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "riemattn"
ROOMS = {"geometry", "dynamics", "solvers", "analysis", "runs", "experiments", "llm", "cli", "testing"}
INFRASTRUCTURE = {"__init__.py", "errors.py", "_backend.py", "_validation.py", "_precision.py", "_compat.py"}
CORE = ("geometry", "dynamics", "solvers", "analysis")

pytest.importorskip("importlinter", reason="the architecture contract needs import-linter (extra 'test')")


def _lint(cwd: Path) -> subprocess.CompletedProcess:
    code = "import sys; from importlinter.cli import lint_imports; sys.exit(lint_imports())"
    env = {"PYTHONPATH": str(cwd), "PATH": "", "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def _copy_tree(tmp_path: Path) -> Path:
    dest = tmp_path / "checkout"
    shutil.copytree(PACKAGE, dest / "riemattn", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", dest / "pyproject.toml")
    return dest


def _contract() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]


def test_import_contract_is_kept():
    result = _lint(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize("module, planted, contract", [
    ("geometry/manifolds.py", "from ..analysis import diagnostics as _planted", "Rooms import downwards"),
    ("_validation.py", "from .geometry import manifolds as _planted", "infrastructure imports no room"),
    ("experiments/glpr_fig4.py", "from ..solvers.core import _loops as _planted", "no private module"),
    # the circles of issue 45, each planted again
    ("solvers/compiled/_engine.py", "from ..core import integrate as _planted", "No circle through the front door"),
    ("dynamics/attention.py", "from . import glpr as _planted", "No circle in dynamics"),
    ("llm/surgery.py", "from . import models as _planted", "No circle in llm"),
    ("testing/_attention.py", "from . import strategies as _planted", "No circle in testing"),
    # any other circle between siblings (steppers imports the tableaux)
    ("solvers/explicit/tableaux.py", "from . import steppers as _planted", "No circles: sibling modules"),
])
def test_import_contract_fails_on_a_planted_forbidden_import(tmp_path, module, planted, contract):
    checkout = _copy_tree(tmp_path)
    path = checkout / "riemattn" / module
    path.write_text(path.read_text() + f"\n{planted}\n")
    result = _lint(checkout)
    assert result.returncode != 0, result.stdout
    broken = [line for line in result.stdout.splitlines() if "BROKEN" in line or contract in line]
    assert any(contract in line for line in broken), result.stdout


def test_private_core_modules_are_all_forbidden_to_the_outer_rooms():
    contracts = _contract()["contracts"]
    listed = next(c for c in contracts if "private module" in c["name"])["forbidden_modules"]
    private = sorted("riemattn." + ".".join(p.relative_to(PACKAGE).with_suffix("").parts) for room in CORE
                     for p in (PACKAGE / room).rglob("_*.py") if p.name != "__init__.py")
    assert sorted(listed) == private


def test_top_level_holds_only_rooms_and_infrastructure():
    entries = {p.name for p in PACKAGE.iterdir() if p.name != "__pycache__"}
    modules = {e for e in entries if e.endswith(".py")}
    packages = {e for e in entries if (PACKAGE / e).is_dir()}
    assert modules == INFRASTRUCTURE
    assert packages == ROOMS


def test_every_room_says_what_it_holds_and_may_import():
    for room in ROOMS:
        doc = importlib.import_module(f"riemattn.{room}").__doc__ if room != "testing" else \
            (PACKAGE / "testing" / "__init__.py").read_text()
        assert doc and len(doc.strip()) > 40, room
        if room not in {"cli", "testing"}:
            assert "May import" in doc, room


def test_every_public_name_imports():
    for name in riemattn.__all__:
        assert getattr(riemattn, name) is not None, name


@pytest.mark.parametrize("old, new", sorted(riemattn.MOVED_MODULES.items()))
def test_flat_module_paths_still_import_as_the_same_module(old, new):
    # a fresh interpreter: the alias must work on first import, not only once the room is loaded
    code = (f"import importlib, riemattn; a = importlib.import_module('riemattn.{old}'); "
            f"b = importlib.import_module('riemattn.{new}'); assert a is b, (a, b); "
            f"assert a.__spec__.name == 'riemattn.{new}'; "
            f"assert callable(riemattn.integrate) and callable(riemattn.sweep)")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_documented_module_paths_and_their_names():
    import riemattn.circle
    import riemattn.diagnostics
    import riemattn.dormand_prince
    import riemattn.gradient_flow
    import riemattn.lie
    import riemattn.tableaux
    import riemattn.theory
    from riemattn.diagnostics import misalignment
    from riemattn.gradient_flow import energy
    from riemattn.manifolds import Ellipsoid
    from riemattn.simulate import validate_config
    from riemattn.steppers import STEPPERS
    from riemattn.sweep import point_seed
    from riemattn.theory import equiangular_rho

    assert riemattn.diagnostics.misalignment is misalignment is riemattn.analysis.diagnostics.misalignment
    assert Ellipsoid is riemattn.Ellipsoid and STEPPERS is riemattn.STEPPERS
    assert energy.__module__.startswith("riemattn.analysis.")
    assert callable(validate_config) and callable(point_seed) and callable(equiangular_rho)
    for mod in (riemattn.circle, riemattn.lie, riemattn.tableaux, riemattn.dormand_prince):
        assert mod.__name__.startswith("riemattn.")
    # names that moved between modules stay importable from their old module (riemattn._compat)
    from riemattn.attention import usa
    from riemattn.dynamics.attention import sa

    assert sa is riemattn.sa and usa is riemattn.usa


def test_old_pickles_load():
    import pickle

    # a Sphere pickled by the flat layout names its class by the old module path
    old = pickle.dumps(riemattn.Sphere(2), protocol=0).replace(b"riemattn.geometry.manifolds", b"riemattn.manifolds")
    assert b"riemattn.manifolds" in old
    assert repr(pickle.loads(old)) == "Sphere(2)"


def test_every_public_module_imports():
    for info in pkgutil.walk_packages(riemattn.__path__, "riemattn."):
        if any(part.startswith("_") for part in info.name.split(".")) or info.name.startswith("riemattn.testing"):
            continue
        importlib.import_module(info.name)
