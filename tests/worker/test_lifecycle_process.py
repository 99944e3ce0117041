"""The request lifecycle against a real ``puredetok serve`` process, through the documented clients
(sync and asyncio): an opening the worker refuses (``max_new_tokens=0``, a prompt id of -5) or sends
with ``finished=True`` ends the client's request at once with :class:`RequestError` (well under its
timeout), and the scheduler is told to drop the request (``AbortBackendMsg``). The openings are
msgpack frames built by hand, as a scheduler in any language sends them: the message classes may
refuse to build such values at all.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from collections import Counter
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
from puredetok.serving._messages import (
    AbortBackendMsg,
    AbortMsg,
    DetokenizeMsg,
    Message,
    Opening,
    TokenizeMsg,
    UserMsg,
    UserReply,
)
from test_client import Site, wait_up
from zmq_harness import Harness, raw_detokenize_frame, stop_processes

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
    """Clients that close (their sockets' connections to the worker end) made the worker log a
    WARNING about frames over 64 MiB. ZeroMQ reports a peer that went away and a frame refused over
    the size limit alike (a closed connection): the worker counts it (``connection_closed``) and
    logs it at DEBUG; its log at INFO holds no warning, no error."""
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


EARLY: dict[str, tuple[Any, ...] | None] = {
    "ids": ([32], False, None),
    "a refused opening": ([32], False, {"params": {"max_new_tokens": 0}}),
    "a refused opening that ends": ([32], True, {"prompt_ids": [-5]}),
    "an opening": ([32], False, {}),
    "an abort": None,
}
"""How a uid is named before its tokenize: a detokenize message's (ids, finished, opening), or the
frontend's abort (None)."""


def test_a_uid_named_before_its_tokenize_gets_one_finished_reply(tmp_path: Path) -> None:
    """Against a real ``puredetok serve``: a uid named by a stray detokenize, a refused opening, an
    opening or an abort before the frontend's tokenize of it comes gets exactly one finished reply,
    whatever follows; its tokenize is answered with an error that does not finish, and its prompt
    never reaches the scheduler (a control request's does)."""
    h = Harness(tmp_path)
    raw = h.context.socket(zmq.PUSH)  # the scheduler's frames built by hand
    try:
        h.start(1, "--quiet")
        h.wait_ready(1)
        pool = h.pool([0])
        raw.connect(h.worker_address(0))
        got: list[Message] = []
        for kind, early in EARLY.items():
            if early is None:
                pool.send([AbortMsg(kind)])
            else:
                ids, finished, fields = early
                raw.send(
                    raw_detokenize_frame(
                        [(kind, ids, finished, None if fields is None else opening(fields, ()), None)]
                    )
                )
            got += h.receive(h.frontend, lambda seen: any(isinstance(m, UserReply) for m in seen))
        pool.send([TokenizeMsg(kind, "Hello") for kind in [*EARLY, "control"]])
        users = h.receive(h.backend, lambda seen: any(isinstance(m, UserMsg) for m in seen))
        got += h.receive(h.frontend, lambda seen: sum(isinstance(m, UserReply) for m in seen) >= len(EARLY))
        raw.send(raw_detokenize_frame([(kind, [33], True, None, "length") for kind in EARLY]))
        pool.send([AbortMsg(kind) for kind in EARLY])
        got += h.receive(
            h.frontend, lambda seen: sum(isinstance(m, UserReply) for m in seen) >= 2 * len(EARLY)
        )
        time.sleep(0.5)
        while h.frontend.poll(200):
            got.extend(h.from_frontend.decode(h.frontend.recv()).batch.items)
        while h.backend.poll(200):
            users.extend(h.from_backend.decode(h.backend.recv()).batch.items)
        replies = [m for m in got if isinstance(m, UserReply)]
        finished = Counter(reply.uid for reply in replies if reply.finished)
        assert finished == Counter(dict.fromkeys(EARLY, 1)), replies
        ignored = {r.uid for r in replies if not r.finished and "tokenize ignored" in (r.error or "")}
        assert ignored == set(EARLY)
        assert [m.uid for m in users if isinstance(m, UserMsg)] == ["control"]
    finally:
        raw.close(linger=0)
        h.close()


def test_a_pool_answers_a_request_aborted_at_once_with_one_finished_reply(tmp_path: Path) -> None:
    """Across a pool (``serve --workers 2``): the frontend sends a tokenize and at once its abort.
    Both reach the request's owner (the tokenize is routed by uid too, when the same workers
    tokenize), in the order sent, so each request gets one finished reply: the tokenize's refusal (a
    text over ``--max-text-chars``) or the abort. When tokenize messages were spread, the abort
    reached the owner first for about half of them, and both workers finished the request."""
    h = Harness(tmp_path)
    try:
        h.start(2, "--quiet", "--max-text-chars", "16")
        h.wait_ready(2)
        pool = h.pool([0, 1])
        uids = [f"{kind}-{n}" for kind in ("refused", "aborted") for n in range(20)]
        for uid in uids:
            text = "far too long for the limit" if uid.startswith("refused") else "short"
            pool.send([TokenizeMsg(uid, text)])
            pool.send([AbortMsg(uid)])
        got = h.receive(
            h.frontend, lambda seen: {m.uid for m in seen if isinstance(m, UserReply)} >= set(uids)
        )
        time.sleep(1.0)  # any second finished reply would come by now
        while h.frontend.poll(200):
            got.extend(h.from_frontend.decode(h.frontend.recv()).batch.items)
        finished = Counter(m.uid for m in got if isinstance(m, UserReply) and m.finished)
        assert finished == Counter(dict.fromkeys(uids, 1)), finished
        assert {pool.owner(uid) for uid in uids} == set(pool.detokenize_addresses)  # both workers served
    finally:
        h.close()
