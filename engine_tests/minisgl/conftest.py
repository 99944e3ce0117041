"""mini-sglang's own code with puredetok's tokenizer process in it (``python3 tasks.py test-engines
minisgl``: mini-sglang installed from its source beside the clone, see tasks.py's
``LOCAL_ENGINES``): hypothesis profiles, and both tokenizer processes per tokenizer, started once
per session (``minisgl_helpers.Worker``; requests get fresh uids, so tests share them).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import pytest
from hypothesis import HealthCheck, settings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

from minisgl_helpers import COMPARED, WORKERS, Worker  # noqa: E402

settings.register_profile(
    "dev",
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "ci",
    max_examples=40,
    deadline=None,
    derandomize=True,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))

_WORKERS: dict[tuple[str, str], Worker] = {}


def shared_worker(kind: str, name: str) -> Worker:
    """The session's tokenizer process of ``kind`` over tokenizer ``name`` (started on first use);
    a test that stops one gets a new one next time.
    """
    worker = _WORKERS.get((kind, name))
    if worker is None or not worker.alive():
        if worker is not None:
            worker.close()
        worker = _WORKERS[(kind, name)] = Worker(kind, name)
    worker.ready()
    return worker


@pytest.fixture(scope="session")
def workers() -> Iterator[Callable[[str, str], Worker]]:
    """``workers(kind, name)``: the session's process (see :func:`shared_worker`); the compared
    tokenizers' are started together first, so that their imports overlap.
    """
    for name in COMPARED[:2]:
        for kind in WORKERS:
            _WORKERS.setdefault((kind, name), Worker(kind, name))
    yield shared_worker
    for worker in _WORKERS.values():
        worker.close()
