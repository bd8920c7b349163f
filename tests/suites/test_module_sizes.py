"""Modules stay readable: none over 400 lines, except tables of coefficients (docs/architecture.md)."""

from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "riemattn"
LIMIT = 400
#: coefficient tables (Butcher tableaux and their dense-output rows): long by nature, not by logic
TABLES = {"solvers/explicit/tableaux.py"}


def test_no_module_over_400_lines_except_coefficient_tables():
    sizes = {str(p.relative_to(PACKAGE)): len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")}
    over = {name: n for name, n in sizes.items() if n > LIMIT and name not in TABLES}
    assert not over, f"split these modules by concept (limit {LIMIT} lines): {over}"
