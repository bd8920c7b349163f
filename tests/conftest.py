"""Shared pytest configuration: Hypothesis profiles.

``ci`` (the default, used by the README's test command): at least 200 examples per property,
no deadline. ``dev``: a quick profile for local iteration (``HYPOTHESIS_PROFILE=dev pytest``).
"""

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
settings.register_profile("dev", max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
