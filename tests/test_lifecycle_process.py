"""Issue 27's cases against a real ``puredetok serve`` process, through the documented clients
(sync and asyncio): an opening the worker refuses (``max_new_tokens=0``, a prompt id of -5) or
sends with ``finished=True`` ends the client's request at once with :class:`RequestError` (well
under its timeout), and the scheduler is told to drop the request (``AbortBackendMsg``). The
openings are msgpack frames built by hand, as a scheduler in any language sends them: the message
classes may refuse to build such values at all.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq
import zmq.asyncio

from puredetok.client import (
    AsyncBackendClient,
    AsyncFrontendClient,
    BackendClient,
    FrontendClient,
    RequestError,
)
from puredetok.serving.messages import AbortBackendMsg, DetokenizeMsg, Opening, UserMsg
from test_client import Site, wait_up
from zmq_harness import raw_detokenize_frame, stop_processes

TIMEOUT = 30.0
"""The clients' timeout: a refused request must end long before it."""
AT_ONCE = 5.0
"""Seconds within which a refused request ends (a reply's round trip; the worker is idle)."""

CASES: dict[str, tuple[dict[str, Any], bool, str]] = {
    "max_tokens=0": ({"params": {"max_new_tokens": 0}}, False, "max_new_tokens"),
    "prompt id -5": ({"prompt_ids": [-5]}, False, "-5"),
    "finished, max_tokens=0": ({"params": {"max_new_tokens": 0}}, True, "max_new_tokens"),
    "finished, prompt id -5": ({"prompt_ids": [-5]}, True, "-5"),
}
"""Openings the worker refuses: the opening's fields, ``finished``, and what the error names."""


def opening(fields: dict[str, Any], prompt: tuple[int, ...]) -> dict[str, Any]:
    return {"prompt_ids": list(prompt), "params": {}, "state": None, "consumed": 0, **fields}


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    place = Site(tmp_path)
    yield place
    place.stop()


def test_a_refused_opening_ends_the_request_at_once_sync(site: Site) -> None:
    context = zmq.Context()
    raw = context.socket(zmq.PUSH)  # the scheduler's frames built by hand
    raw.connect(site.worker)
    with (
        FrontendClient([site.worker], site.frontend, timeout=TIMEOUT, context=context) as client,
        BackendClient([site.worker], site.backend, context=context) as backend,
    ):
        site.start()
        wait_up(client)
        requests = {name: client.tokenize(name, "Hello") for name in CASES}
        users: list[UserMsg] = []
        while len(users) < len(CASES):
            users += [m for m in backend.receive(TIMEOUT) if isinstance(m, UserMsg)]
        prompts = {user.uid: tuple(user.input_ids) for user in users}
        for name, (fields, finished, named) in CASES.items():
            raw.send(raw_detokenize_frame([(name, [32], finished, opening(fields, prompts[name]), None)]))
            started = time.monotonic()
            with pytest.raises(RequestError, match=named) as caught:
                list(requests[name])
            assert time.monotonic() - started < AT_ONCE, name
            assert caught.value.reply is not None and caught.value.reply.finished
        # The scheduler was told to drop each, and nothing else came back.
        aborts: set[object] = set()
        deadline = time.monotonic() + AT_ONCE
        while len(aborts) < len(CASES) and time.monotonic() < deadline:
            aborts |= {m.uid for m in backend.receive(1.0) if isinstance(m, AbortBackendMsg)}
        assert aborts == set(CASES)
        # A good opening with finished=True ends at once too, with its text.
        done = client.tokenize("done", "Hello")
        [user] = [m for m in backend.receive(TIMEOUT) if isinstance(m, UserMsg)]
        raw.send(
            raw_detokenize_frame([("done", [32, 33], True, opening({}, tuple(user.input_ids)), "length")])
        )
        started = time.monotonic()
        assert done.text() == "AB" and done.final is not None and done.final.finish_reason == "length"
        assert time.monotonic() - started < AT_ONCE
        # Late messages for ended requests get no second finished reply (and tell the client nothing).
        raw.send(raw_detokenize_frame([(name, [32], True, None, None) for name in [*CASES, "done"]]))
        client.poll(1.0)
        assert client.unclaimed == len(CASES) + 1  # replies with an error, for requests no longer open
    raw.close(linger=0)
    context.term()


def test_a_refused_opening_ends_the_request_at_once_asyncio(site: Site) -> None:
    async def main() -> None:
        context = zmq.asyncio.Context()
        raw = context.socket(zmq.PUSH)
        raw.connect(site.worker)
        async with (
            AsyncFrontendClient([site.worker], site.frontend, timeout=TIMEOUT, context=context) as client,
            AsyncBackendClient([site.worker], site.backend, context=context) as backend,
        ):
            site.start()
            deadline = time.monotonic() + 120
            while not await client.health(timeout=1.0):
                assert time.monotonic() < deadline
            requests = {name: client.tokenize(name, "Hello") for name in CASES}
            users: list[UserMsg] = []
            while len(users) < len(CASES):
                users += [m for m in await backend.receive(TIMEOUT) if isinstance(m, UserMsg)]
            prompts = {user.uid: tuple(user.input_ids) for user in users}
            for name, (fields, finished, named) in CASES.items():
                frame = raw_detokenize_frame([(name, [32], finished, opening(fields, prompts[name]), None)])
                await raw.send(frame)
                started = time.monotonic()
                with pytest.raises(RequestError, match=named) as caught:
                    await requests[name].text()
                assert time.monotonic() - started < AT_ONCE, name
                assert caught.value.reply is not None and caught.value.reply.finished
            aborts: set[object] = set()
            deadline = time.monotonic() + AT_ONCE
            while len(aborts) < len(CASES) and time.monotonic() < deadline:
                aborts |= {m.uid for m in await backend.receive(1.0) if isinstance(m, AbortBackendMsg)}
            assert aborts == set(CASES)
        raw.close(linger=0)
        context.term()

    asyncio.run(main())


def test_a_normal_client_disconnect_logs_nothing_above_debug(tmp_path: Path) -> None:
    """Issue 35, case 10: clients that close (their sockets' connections to the worker end) made
    the worker log a WARNING about frames over 64 MiB. ZeroMQ reports a peer that went away and a
    frame refused over the size limit alike (a closed connection): the worker counts it
    (``connection_closed``) and logs it at DEBUG; its log at INFO holds no warning, no error."""
    site = Site(tmp_path)
    command = [sys.executable, "-m", "puredetok.cli", "serve", "--listen", site.worker]
    command += ["--backend", site.backend, "--frontend", site.frontend]
    log = tmp_path / "serve.log"
    with open(log, "wb") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)
    try:
        for round_ in range(2):  # clients come and go
            with (
                FrontendClient([site.worker], site.frontend, timeout=TIMEOUT) as client,
                BackendClient([site.worker], site.backend) as backend,
            ):
                wait_up(client)
                request = client.tokenize(f"r{round_}", "Hello")
                [user] = [m for m in backend.receive(TIMEOUT) if isinstance(m, UserMsg)]
                backend.send([DetokenizeMsg(user.uid, (32, 33), True, Opening(tuple(user.input_ids)))])
                assert request.text() == "AB"
        with FrontendClient([site.worker], site.frontend, timeout=TIMEOUT) as client:
            deadline = time.monotonic() + AT_ONCE
            while (closed := client.health()[0].frames_dropped.get("connection_closed", 0)) < 4:
                assert time.monotonic() < deadline, closed  # two clients' pools, twice
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0
    finally:
        stop_processes([process])
    lines = log.read_text().splitlines()
    assert any(" INFO " in line and "ready on" in line for line in lines), lines  # INFO is logged
    assert not [line for line in lines if " WARNING " in line or " ERROR " in line]
