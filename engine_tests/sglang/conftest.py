"""SGLang with puredetok plugged in (0.5.23, the pinned version; another with ``python3 tasks.py
test-engines sglang==VERSION``): fixtures shared by the tests of this folder.

Every detokenizer here (``sglang_helpers``) is SGLang's own ``run_detokenizer_process`` in a
process of its own, fed over its ZeroMQ sockets (``sglang_process.py`` beside this file); processes
are started once per session and per (tokenizer, environment), and requests get fresh ids, so
tests share them.

Hypothesis profiles: ``dev`` (quick, random, the default) and ``ci`` (derandomized, bounded:
each example streams a batch of requests through a real process).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

from sglang_helpers import ALLOW_OTHERS, OFF, close_all, detokenizer

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

settings.register_profile(
    "dev",
    max_examples=8,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)
settings.register_profile(
    "ci",
    max_examples=25,
    deadline=None,
    derandomize=True,
    print_blob=True,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))

_QUITS: list[int] = []


def _record_quit(signum: int, frame: object) -> None:
    # SGLang's detokenizer process sends SIGQUIT to its parent when it fails: fail the test,
    # not the whole session.
    _QUITS.append(signum)


signal.signal(signal.SIGQUIT, _record_quit)


@pytest.fixture(autouse=True)
def _no_process_failed() -> Iterator[None]:
    before = len(_QUITS)
    yield
    assert len(_QUITS) == before, "a detokenizer process failed (it sent SIGQUIT to its parent)"


@pytest.fixture(scope="session", autouse=True)
def _processes() -> Iterator[None]:
    # Started together, so that their imports of SGLang (the slow part) overlap.
    for name, environment in (
        ("qwen3", {}),
        ("llama2", {}),
        ("mistral_v03", {}),
        ("t5_small", {}),
        ("llama2", OFF),
        ("llama2", ALLOW_OTHERS),
    ):
        detokenizer(name, environment)
    yield
    close_all()
