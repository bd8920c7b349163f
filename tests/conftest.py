"""Shared pytest configuration: Hypothesis profiles.

``ci`` (the default, used by the README's test command): at least 200 examples per property,
no deadline. ``dev``: a quick profile for local iteration (``HYPOTHESIS_PROFILE=dev pytest``).
"""

import os

import pytest
from hypothesis import HealthCheck, settings

# The suite runs as two xdist workers on two cores: one thread per worker. PyTorch's default of one
# OpenMP thread per core made a torch-using worker starve its neighbour (measured on this machine:
# a torch CPU run 30x slower while the other core was busy), and the Dask tests in the neighbour
# depend on timely signals and restarts.
os.environ.setdefault("OMP_NUM_THREADS", "1")
try:
    import torch
except ImportError:  # the core install has no torch; its tests are skipped
    pass
else:
    torch.set_num_threads(1)

settings.register_profile(
    "ci",
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
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
