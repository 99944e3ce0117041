"""serving/_background.py: jobs run beside the loop, in order; an error is its own job's result."""

from __future__ import annotations

import os
import select
import threading

import pytest

from puredetok.serving._background import Background


def collect_all(background: Background[int, int], jobs: int) -> list[tuple[int, int | Exception]]:
    """Every result of ``jobs`` jobs, waiting on the wake-up fd as the worker's loop does."""
    got: list[tuple[int, int | Exception]] = []
    while len(got) < jobs:
        readable, _, _ = select.select([background.fd], [], [], 30)
        assert readable, "the thread never woke the loop"
        got.extend(background.collect())
    return got


def square(job: int) -> int:
    if job % 3 == 0:
        raise ValueError(f"job {job} refused")
    return job * job


def test_results_come_in_the_order_given_and_an_error_is_its_own_jobs_result() -> None:
    background: Background[int, int] = Background(square, "test-background")
    try:
        for job in range(1, 21):
            background.submit(job)
        got = collect_all(background, 20)
    finally:
        background.close()
    assert [job for job, _ in got] == list(range(1, 21))
    for job, result in got:
        if job % 3 == 0:
            assert isinstance(result, ValueError)
            assert str(result) == f"job {job} refused"
        else:
            assert result == job * job


def test_pending_counts_what_is_not_collected_and_the_fd_is_quiet_after_collect() -> None:
    release = threading.Event()

    def held(job: int) -> int:
        release.wait(30)
        return job

    background: Background[int, int] = Background(held, "test-background")
    try:
        background.submit(1)
        background.submit(2)
        assert background.pending == 2
        assert select.select([background.fd], [], [], 0.05)[0] == []  # nothing done yet
        release.set()
        got = collect_all(background, 2)
        assert got == [(1, 1), (2, 2)]
        assert background.pending == 0
        assert select.select([background.fd], [], [], 0)[0] == []
        assert background.collect() == []
    finally:
        background.close()


def test_close_finishes_the_jobs_given_and_joins_the_thread() -> None:
    done: list[int] = []

    def slow(job: int) -> int:
        threading.Event().wait(0.01)
        done.append(job)
        return job

    background: Background[int, int] = Background(slow, "test-background-close")
    for job in range(5):
        background.submit(job)
    background.close()
    assert done == [0, 1, 2, 3, 4]
    assert not any(thread.name == "test-background-close" for thread in threading.enumerate())
    with pytest.raises(OSError):
        os.fstat(background.fd)  # the pipe is closed with it


def test_after_runs_once_the_result_is_out() -> None:
    """``after`` never holds a result up: the loop collects it while ``after`` still runs."""
    collected = threading.Event()
    seen: list[tuple[int, bool]] = []

    def after(job: int) -> None:
        seen.append((job, collected.wait(30)))

    background: Background[int, int] = Background(lambda job: job + 1, "test-background", after=after)
    try:
        background.submit(7)
        assert collect_all(background, 1) == [(7, 8)]
        collected.set()
    finally:
        background.close()
    assert seen == [(7, True)]


def test_a_job_may_be_none() -> None:
    background: Background[None, str] = Background(lambda job: repr(job), "test-background")
    try:
        background.submit(None)
        readable, _, _ = select.select([background.fd], [], [], 30)
        assert readable
        assert background.collect() == [(None, "None")]
    finally:
        background.close()
