"""Hypothesis profiles: ``dev`` (quick, random, the default), ``ci`` (thorough but bounded) and
``ci-oldest`` (CI's run on the oldest allowed dependencies, ``python3 tasks.py test-oldest``).

``ci`` and ``ci-oldest`` are derandomized: main must pass ``.ci/run`` every time, so CI explores the
same 200 examples per property on every run (30 on the oldest releases, where the run proves the
dependencies' behaviour rather than the properties' depth), while every ``dev`` run explores new ones.
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
settings.register_profile(
    "ci-oldest",
    max_examples=30,
    deadline=None,
    derandomize=True,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))
