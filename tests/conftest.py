"""Shared pytest configuration: Hypothesis profiles (chosen by ``HYPOTHESIS_PROFILE``).

``ci`` (the default, used by the README's test command): 200 examples per property,
**derandomized** -- every run on every machine draws the same examples (a seed derived from the
test's name), so a failure reproduces anywhere and a commit passes or fails CI by its code, not by
chance; no example database (nothing read from or written to ``.hypothesis/``); no deadline; the
reproduction blob of a failing example printed (``@reproduce_failure``).

``thorough``: random search for local runs before a release or after touching numerics: 1000
examples per property, a fresh random seed every run, failing examples saved to the local
database and replayed first next time. A failure it finds is reported with its blob: add it to the
test as an ``@example(...)`` so that the ``ci`` profile keeps it.

``dev``: quick local iteration, 20 random examples per property.

docs/contributing.md ("Running the tests") shows the commands.

Layout: one folder per room of the package (``tests/geometry/``, ``tests/dynamics/``,
``tests/solvers/``, ``tests/analysis/``, ``tests/runs/``, ``tests/llm/``, ``tests/experiments/``,
``tests/cli/``, ``tests/testing/``) and ``tests/suites/`` for the suites that cut across the rooms
(architecture, bad inputs, edges, docs, properties, module sizes, public paths, backends). The
helpers every folder shares stay here, in ``tests/`` (``problems.py``, ``_edges.py``,
``_edge_problems.py``, ``_tolerances.py``, ``_sweep_points.py``), imported by their bare names:
this directory is put on ``sys.path`` below. The folders are not packages (pytest's default
"prepend" import mode), so a test file's name must be unique across all of ``tests/``: pytest
stops the collection with "import file mismatch" when two share one.
"""

import os
import sys

import pytest
from hypothesis import HealthCheck, settings

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:  # the shared helpers, for test files in every room's folder
    sys.path.insert(0, _HERE)

# The suite runs as two xdist workers on two cores: one thread per worker. PyTorch's default of one
# OpenMP thread per core made a torch-using worker starve its neighbour (measured on this machine:
# a torch CPU run 30x slower while the other core was busy), and the Dask tests in the neighbour
# depend on timely signals and restarts.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# engine="auto" compiles the compiled engine in a background process on the first call that would
# use it (riemattn.solvers.compiled._warmup): not in the suite, so that its timings do not depend on it
os.environ.setdefault("RIEMATTN_BACKGROUND_COMPILE", "0")
try:
    import torch
except ImportError:  # the core install has no torch; its tests are skipped
    pass
else:
    torch.set_num_threads(1)

_SLOW_DRAWS = [HealthCheck.too_slow, HealthCheck.data_too_large]

settings.register_profile("ci", max_examples=200, derandomize=True, database=None, deadline=None,
                          suppress_health_check=_SLOW_DRAWS, print_blob=True)
settings.register_profile("thorough", max_examples=1000, derandomize=False, deadline=None,
                          suppress_health_check=_SLOW_DRAWS, print_blob=True)
settings.register_profile("dev", max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

#: The executions of ``integrate`` (issue 37). A test module runs on both with
#: ``pytestmark = pytest.mark.usefixtures("engine")``: ``engine`` makes ``integrate``'s default
#: ``engine="auto"`` prefer the named engine (RIEMATTN_ENGINE; calls the compiled engine cannot run
#: stay on NumPy). ``RIEMATTN_ENGINE=compiled pytest`` runs the whole suite that way.
ENGINES = ("numpy", "compiled")


@pytest.fixture(params=ENGINES)
def engine(request, monkeypatch):
    monkeypatch.setenv("RIEMATTN_ENGINE", request.param)
    return request.param
