"""Hypothesis profiles: ``dev`` (quick, random, the default), ``ci`` (thorough but bounded),
``ci-oldest`` (CI's run on the oldest allowed dependencies, ``python3 tasks.py test-oldest``) and
``sweep`` (five times ``ci``'s examples, random).

``ci`` and ``ci-oldest`` are derandomized: main must pass ``.ci/run`` every time, so CI explores the
same 200 examples per property on every run (30 on the oldest releases, where the run proves the
dependencies' behaviour rather than the properties' depth), while every ``dev`` run explores new ones.
A property that a new seed can break is a bug all the same: ``sweep`` looks for such seeds, one
module at a time, ``pytest --hypothesis-profile=sweep --hypothesis-seed=N tests/ROOM/test_x.py`` for
several ``N`` (``HYPOTHESIS_SWEEP_EXAMPLES`` sets its budget), without the example database, so
that every seed starts afresh. What it finds is fixed and pinned as an ``@example``.
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
settings.register_profile(
    "sweep",
    max_examples=int(os.environ.get("HYPOTHESIS_SWEEP_EXAMPLES", "1000")),
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))
