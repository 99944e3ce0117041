"""Hypothesis profiles: ``dev`` (quick, random, the default) and ``ci`` (thorough but bounded).

``ci`` is derandomized: main must pass ``.ci/run`` every time, so CI explores the same 200
examples per property on every run, while every ``dev`` run explores new ones.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "dev",
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "ci",
    max_examples=200,
    deadline=None,
    derandomize=True,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))
