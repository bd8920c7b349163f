"""Rewrite docs/figures.md's tables of claims, kinds and deviations from the reproductions' code.

    python tools/claims_table.py            # every reproduction
    python tools/claims_table.py NAME ...   # some

Each table is decided on the test suite's size (``config(quick=True, smoke=True)``), as the
falsification suite (tests/suites/test_falsification.py) decides it when it compares the page with
the code. A reproduction without a table gets one at the end of the page.
"""

from __future__ import annotations

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs" / "figures.md"


def main(argv):
    from riemattn.experiments import available
    from riemattn.experiments._deviations import claims_table, table_in
    from riemattn.experiments._runner import config_for
    from riemattn.experiments._verdict import normalize

    names = argv or list(available())
    text = DOCS.read_text()
    for name in names:
        module = available()[name]
        ds = module.run(config_for(module, quick=True, smoke=True))
        table = claims_table(name, normalize(module.claims(ds)), getattr(module, "DEVIATIONS", ()))
        old = table_in(text, name)
        if old is None:
            text = text.rstrip("\n") + f"\n\n### {name}\n\n{table}\n"
        else:
            text = text.replace(old, table)
        print(f"{name}: {len(table.splitlines()) - 6} claims")
    DOCS.write_text(text)


if __name__ == "__main__":
    main(sys.argv[1:])
