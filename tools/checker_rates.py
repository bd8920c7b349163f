"""Count the false failures and false passes of riemattn.testing's checkers over many random draws.

The cases are the self-test's (tests/testing/test_testing_selftest.py: correct inputs over token
magnitudes 1e-8 .. 1e8 and token counts 1 .. 200, and the planted bugs); the suite runs each a few
times, derandomized; this runs each ``--draws`` times from a random seed and, instead of stopping at
the first failure, counts:

* a correct case: ``fail`` (the checker raised on correct code: a false failure) or ``pass``;
* a planted bug: ``pass`` (the checker let the bug through: a false pass) or ``caught``;
* ``assumed away``: draws the case rejects (no bug to see there, or tokens that do not move).

Usage (from the repository root; a few minutes of one core at the defaults)::

    python tools/checker_rates.py --draws 3000 --order-draws 300 --seed 1

prints one line per case and the failing draws' messages, and exits 1 if any false failure or
false pass was seen.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "tests"), os.path.join(HERE, "..", "tests", "testing"), os.path.join(HERE, "..")]
os.environ.setdefault("RIEMATTN_BACKGROUND_COMPILE", "0")

from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.errors import UnsatisfiedAssumption  # noqa: E402

import test_testing_selftest as selftest  # noqa: E402

#: the slow cases (each draw integrates, and solves a tight reference): fewer draws
SLOW = {"check_order", "assert_forward_invariant"}


class Wrong(Exception):
    """A false pass or false failure, raised with ``--explain`` so Hypothesis prints the draws."""


def count(case, draws, planted, rng_seed, messages, explain=False):
    tally = Counter()

    @seed(rng_seed)
    @settings(max_examples=draws, database=None, deadline=None, derandomize=False, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(data=st.data())
    def run(data):
        try:
            case(data)
        except UnsatisfiedAssumption:
            tally["assumed away"] += 1
            raise
        except AssertionError as error:
            tally["caught" if planted else "fail"] += 1
            if explain and not planted:
                raise Wrong(str(error)) from None
            if not planted and len(messages) < 10:
                messages.append(f"{case.__name__}: {str(error)[:400]}")
        except Exception as error:  # noqa: BLE001 - an error of another kind is a failure of either sort
            tally["error"] += 1
            if explain:
                raise Wrong(f"{type(error).__name__}: {error}") from None
            if len(messages) < 10:
                messages.append(f"{case.__name__}: {type(error).__name__}: {str(error)[:400]}")
        else:
            tally["pass"] += 1
            if explain and planted:
                raise Wrong("the planted bug passed")
            if planted and len(messages) < 10:
                messages.append(f"{case.__name__}: the planted bug passed")

    run()
    return tally


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=3000, help="draws per case (default 3000)")
    parser.add_argument("--order-draws", type=int, default=300, help="draws per check_order / forward-invariance case")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--only", default=None, help="only the checkers whose name contains this")
    parser.add_argument("--explain", action="store_true",
                        help="stop at the first false pass or failure and print its draws (Hypothesis's report)")
    args = parser.parse_args(argv)
    bad, messages = 0, []
    for name, (correct, bugs) in sorted(selftest.TABLE.items()):
        if args.only and args.only not in name:
            continue
        n = args.order_draws if name in SLOW else args.draws
        for label, case, planted in [("correct inputs", correct, False)] + [(b, f, True) for b, f in sorted(bugs.items())]:
            t0 = time.time()
            tally = count(case, n, planted, args.seed, messages, args.explain)
            wrong = tally["pass"] if planted else tally["fail"]
            wrong += tally["error"]
            bad += wrong
            kept = tally["pass"] + tally["fail"] + tally["caught"] + tally["error"]
            what = "false passes" if planted else "false failures"
            print(f"{name:27s} {label:38s} {what}: {wrong} of {kept} (assumed away {tally['assumed away']}, "
                  f"other errors {tally['error']}; {time.time() - t0:.0f} s)", flush=True)
    for m in messages:
        print("  " + m)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
