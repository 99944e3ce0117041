"""The typed clients against real ``puredetok serve`` processes: each side sync and asyncio, and the
failure model (error replies, unknown uids, timeouts, a restarted worker, a stopping worker's
hand-back)."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
import zmq
import zmq.asyncio

from helpers import tokenizer
from puredetok.client import (
    AsyncBackendClient,
    AsyncFrontendClient,
    BackendClient,
    FrontendClient,
    HandBack,
    RequestError,
    RequestHandedBack,
    RequestLost,
    RequestTimeout,
)
from puredetok.serving._messages import (
    PROTOCOL_VERSION,
    UNKNOWN_REQUEST,
    AbortBackendMsg,
    DetokenizeMsg,
    HealthReply,
    Opening,
    SamplingParams,
    UserMsg,
    UserReply,
)
from puredetok.worker._wire import encode_batch
from zmq_harness import stop_processes

QWEN_EOS = 151645


class Site:
    """Addresses in a private folder, and worker processes started on them."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.frontend = f"ipc://{folder}/frontend"
        self.backend = f"ipc://{folder}/backend"
        self.worker = f"ipc://{folder}/worker-0"
        self.processes: list[subprocess.Popen[bytes]] = []

    def start(self) -> subprocess.Popen[bytes]:
        command = [sys.executable, "-m", "puredetok.cli", "serve", "--quiet", "--listen", self.worker]
        command += ["--backend", self.backend, "--frontend", self.frontend]
        log = open(self.folder / f"serve-{len(self.processes)}.log", "wb")  # noqa: SIM115
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env={**os.environ})
        self.processes.append(process)
        return process

    def stop(self) -> None:
        stop_processes(self.processes)


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    place = Site(tmp_path)
    yield place
    place.stop()


def wait_up(client: FrontendClient, timeout: float = 120) -> None:
    """Until the worker answers a health probe (it is listening and its tokenizer is loaded)."""
    deadline = time.monotonic() + timeout
    while not client.health(timeout=1.0):
        assert time.monotonic() < deadline


def generate(backend: BackendClient, ids_for: dict[str, list[int]], *, eos: bool = True) -> None:
    """Play the scheduler: for each tokenized request, send its ids one message at a time (the
    first with its Opening, the last with the scheduler's finish reason)."""
    users: list[UserMsg] = []
    deadline = time.monotonic() + 60
    while len(users) < len(ids_for):
        assert time.monotonic() < deadline
        users += [m for m in backend.receive(1.0) if isinstance(m, UserMsg)]
    for user in users:
        ids = ids_for[str(user.uid)]
        opening = Opening(tuple(user.input_ids), user.params)
        for n, token in enumerate(ids):
            last = n == len(ids) - 1
            reason = ("stop", QWEN_EOS) if last and eos else (None, None)
            backend.send([DetokenizeMsg(user.uid, (token,), last, opening if n == 0 else None, *reason)])


def test_both_sides_stream_a_request_end_to_end(site: Site) -> None:
    qwen = tokenizer("qwen3")
    answer = list(qwen.encode("推理 naïve 🦩, 1+1=2.", add_special_tokens=False))
    with (
        FrontendClient([site.worker], site.frontend) as client,
        BackendClient([site.worker], site.backend) as backend,
    ):
        site.start()
        wait_up(client)
        chat = client.tokenize("c1", messages=[{"role": "user", "content": "Hi <|im_end|>"}])
        plain = client.tokenize("p1", "Hello", params=SamplingParams(stop=("🦩",)))
        generate(backend, {"c1": answer, "p1": answer})
        replies = list(chat)
        assert "".join(r.incremental_output for r in replies) == qwen.decode(answer, skip_special_tokens=True)
        assert chat.final is not None and (chat.final.finish_reason, chat.final.matched_stop) == (
            "stop",
            QWEN_EOS,
        )
        assert plain.text() == "推理 naïve "  # its own stop string, before the scheduler's EOS
        assert plain.final is not None and plain.final.matched_stop == "🦩"
        # The scheduler heard of the stop found by the worker.
        aborts = [m for m in backend.receive(2.0) if isinstance(m, AbortBackendMsg)]
        assert [m.uid for m in aborts] == ["p1"]


def test_error_replies_unknown_uids_and_timeouts_end_requests_never_hang(site: Site) -> None:
    with (
        FrontendClient([site.worker], site.frontend, timeout=60) as client,
        BackendClient([site.worker], site.backend) as backend,
    ):
        site.start()
        wait_up(client)
        bad = client.tokenize("bad", messages=[{"role": "user", "content": 42}])
        with pytest.raises(RequestError, match="content must be text") as caught:
            list(bad)
        assert caught.value.reply is not None and caught.value.reply.finished
        ghost = client.request("ghost")  # ids for a request nobody opened
        backend.send([DetokenizeMsg("ghost", (32, 33))])
        with pytest.raises(RequestError, match=UNKNOWN_REQUEST):
            list(ghost)
        # A client that hears nothing: a request whose ids nobody sends times out, and is aborted.
        with FrontendClient([site.worker], f"ipc://{site.folder}/deaf", timeout=1.0) as deaf:
            silent = deaf.request("silent")
            started = time.monotonic()
            with pytest.raises(RequestTimeout):
                list(silent)
            assert 0.9 < time.monotonic() - started < 30
        aborts = backend.receive(30.0)
        assert any(isinstance(m, AbortBackendMsg) and m.uid == "silent" for m in aborts)
        with pytest.raises(ValueError, match="timeout"):
            FrontendClient([site.worker], site.frontend + "-x", timeout=0)


def test_a_killed_worker_loses_its_requests_and_the_client_says_so_at_once(site: Site) -> None:
    with (
        FrontendClient([site.worker], site.frontend, timeout=60) as client,
        BackendClient([site.worker], site.backend) as backend,
    ):
        first = site.start()
        wait_up(client)
        request = client.tokenize("r", "Hello")
        [user] = [m for m in backend.receive(30.0) if isinstance(m, UserMsg)]
        backend.send([DetokenizeMsg("r", (32,), False, Opening(tuple(user.input_ids), user.params))])
        assert next(request).incremental_output == "A"
        first.kill()
        first.wait()
        site.start()
        started = time.monotonic()
        with pytest.raises(RequestLost, match="restarted"):
            next(request)
        assert time.monotonic() - started < 60  # as soon as the new worker announced itself


def test_a_stopping_workers_hand_back_continues_on_the_next_worker(site: Site) -> None:
    """With ``on_hand_back``: the request's iterator goes on through a restart, exactly; without,
    the request raises RequestHandedBack, which carries what re-opens it."""
    qwen = tokenizer("qwen3")
    output = list(qwen.encode("Streams 推理 🦩 through a restart, exactly.", add_special_tokens=False))
    handed: list[HandBack] = []
    with (
        FrontendClient([site.worker], site.frontend, on_hand_back=handed.append) as client,
        BackendClient([site.worker], site.backend) as backend,
    ):
        first = site.start()
        wait_up(client)
        params = SamplingParams(stop=("exactly",), include_stop_str_in_output=True)
        request = client.tokenize("moving", "Tell me", params=params)
        [user] = [m for m in backend.receive(30.0) if isinstance(m, UserMsg)]
        cut = 7
        opening = Opening(tuple(user.input_ids), user.params)
        backend.send([DetokenizeMsg("moving", tuple(output[:cut]), False, opening)])
        text = next(request).incremental_output
        first.send_signal(signal.SIGTERM)
        assert first.wait(60) == 0
        backend.send([DetokenizeMsg("moving", (output[cut],))])  # sent before the scheduler heard
        client.poll(2.0)
        [hand_back] = handed
        assert hand_back.uid == "moving" and hand_back.consumed == cut
        site.start()
        wait_up(client)
        backend.reopen(hand_back, output[: cut + 1], user.params)
        backend.send([DetokenizeMsg("moving", tuple(output[cut + 1 :]), True)])
        text += request.text()
        assert text == "Streams 推理 🦩 through a restart, exactly"
        assert request.final is not None and request.final.matched_stop == "exactly"

    handed.clear()
    with (
        FrontendClient([site.worker], site.frontend) as client,
        BackendClient([site.worker], site.backend) as backend,
    ):
        wait_up(client)
        request = client.request("second")
        backend.send([DetokenizeMsg("second", tuple(output[:3]), False, Opening())])
        next(request)
        site.processes[-1].send_signal(signal.SIGTERM)
        with pytest.raises(RequestHandedBack) as caught:
            list(request)
        assert caught.value.hand_back.consumed == 3 and caught.value.hand_back.state


def test_the_asyncio_clients_stream_and_fail_the_same_way(site: Site) -> None:
    qwen = tokenizer("qwen3")
    answer = list(qwen.encode("async 推理 🦩 naïve", add_special_tokens=False))

    async def main() -> None:
        context = zmq.asyncio.Context()
        async with (
            AsyncFrontendClient([site.worker], site.frontend, timeout=60, context=context) as client,
            AsyncBackendClient([site.worker], site.backend, context=context) as backend,
        ):
            site.start()
            deadline = time.monotonic() + 120
            while not await client.health(timeout=1.0):
                assert time.monotonic() < deadline
            requests = [client.tokenize(f"a{n}", f"Hello {n}") for n in range(20)]
            users: list[UserMsg] = []
            while len(users) < 20:
                users += [m for m in await backend.receive(120) if isinstance(m, UserMsg)]
            for user in users:
                opening = Opening(tuple(user.input_ids), user.params)
                backend.send([DetokenizeMsg(user.uid, tuple(answer), True, opening, "length")])
            texts = await asyncio.gather(*(request.text() for request in requests))
            assert texts == [qwen.decode(answer)] * 20
            ghost = client.request("ghost")
            backend.send([DetokenizeMsg("ghost", (5,))])
            with pytest.raises(RequestError, match=UNKNOWN_REQUEST):
                await ghost.text()
            deaf = AsyncFrontendClient(
                [site.worker], f"ipc://{site.folder}/deaf", timeout=0.5, context=context
            )
            silent = deaf.request("silent")
            with pytest.raises(RequestTimeout):
                async for _ in silent:
                    pass
            await deaf.close()
        context.term()

    asyncio.run(main())


def test_abort_takes_one_uid_and_refuses_anything_else(tmp_path: Path) -> None:
    """A client's abort takes one uid (an int or a str); a list, bytes or a float is a TypeError at
    the call, before anything is sent (mypy --strict refuses them too)."""

    async def refuse_async() -> None:
        async with AsyncFrontendClient([f"ipc://{tmp_path}/w"], f"ipc://{tmp_path}/af") as api:
            for bad in (["x"], b"x", 1.5, True):
                with pytest.raises(TypeError, match="a uid is an int or a str"):
                    api.abort(bad)  # type: ignore[arg-type]

    with FrontendClient([f"ipc://{tmp_path}/w"], f"ipc://{tmp_path}/f") as client:
        for bad in (["x"], b"x", 1.5, True):
            with pytest.raises(TypeError, match="a uid is an int or a str"):
                client.abort(bad)  # type: ignore[arg-type]
    asyncio.run(refuse_async())


def test_health_counts_one_answer_per_worker_to_this_probe(tmp_path: Path) -> None:
    """A late answer to an earlier probe, or a second answer from the same worker, is not an
    answer to this probe: ``health`` waited for two replies and took a stale one of worker-0 for
    worker-1's (tests/worker/test_supervision.py found it under load)."""
    workers = [f"ipc://{tmp_path}/w0", f"ipc://{tmp_path}/w1"]
    with FrontendClient(workers, f"ipc://{tmp_path}/f") as client:
        tracker = client._tracker
        client._probe(1.0)
        earlier = tracker.probe
        deadline = client._probe(60.0)
        assert tracker.probe > earlier
        tracker.message(HealthReply(earlier, "worker-0", 1, 0))  # late: the earlier probe's
        tracker.message(HealthReply(tracker.probe, "worker-0", 1, 0))
        tracker.message(HealthReply(tracker.probe, "worker-0", 1, 0))  # the same worker again
        assert [reply.worker for reply in tracker.health] == ["worker-0"]
        assert client._probing(deadline)  # worker-1 has not answered
        tracker.message(HealthReply(tracker.probe, "worker-1", 2, 0))
        assert [reply.worker for reply in tracker.health] == ["worker-0", "worker-1"]
        assert not client._probing(deadline)


def test_a_peer_of_another_protocol_version_is_refused_and_logged_never_misread(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Frames carry the protocol version: a client counts and logs a worker of another version
    (naming both versions) and reads nothing from it, and then reads this version's frames."""
    frontend, backend = f"ipc://{tmp_path}/frontend", f"ipc://{tmp_path}/backend"
    context = zmq.Context()
    peer_front, peer_back = context.socket(zmq.PUSH), context.socket(zmq.PUSH)
    try:
        with (
            caplog.at_level("WARNING", logger="puredetok.client"),
            FrontendClient([f"ipc://{tmp_path}/worker"], frontend, timeout=5) as client,
            BackendClient([f"ipc://{tmp_path}/worker"], backend) as scheduler,
        ):
            peer_front.connect(frontend)
            peer_back.connect(backend)
            request = client.request("r")
            columns = {"uids": ["r"], "outputs": ["misread"], "ended": [[0, "length", None]]}
            peer_front.send(msgspec.msgpack.encode(["reply", PROTOCOL_VERSION + 1, columns]))
            peer_front.send(msgspec.msgpack.encode(["reply", columns]))  # version 1: [kind, batch]
            peer_back.send(
                msgspec.msgpack.encode(["user", PROTOCOL_VERSION + 1, [{"uid": "r", "input_ids": []}]])
            )
            assert scheduler.receive(5.0) == [] and scheduler.drops.counts == {"version": 1}
            deadline = time.monotonic() + 5
            while client.drops.counts.get("version", 0) < 2 and time.monotonic() < deadline:
                client.poll(0.1)
            assert client.drops.counts == {"version": 2}
            peer_front.send(encode_batch([UserReply("r", "read", True, "length")]))
            # nothing of the other version was read as a reply (it would have ended the request)
            assert [reply.incremental_output for reply in request] == ["read"]
        logged = [record.getMessage() for record in caplog.records]
        assert any(
            f"protocol version {PROTOCOL_VERSION + 1}" in line
            and f"speaks version {PROTOCOL_VERSION}" in line
            for line in logged
        ), logged
    finally:
        peer_front.close(0)
        peer_back.close(0)
        context.term()


# -- close() is done when it returns -----------------------------------------------------------

CLIENTS = {
    "frontend": FrontendClient,
    "backend": BackendClient,
    "asyncio frontend": AsyncFrontendClient,
    "asyncio backend": AsyncBackendClient,
}


@pytest.mark.parametrize("kind", CLIENTS)
def test_a_closed_client_has_closed_its_connections_when_close_returns(kind: str, tmp_path: Path) -> None:
    """A worker's connection to a client is closed when ``close()`` returns, not later in libzmq's
    threads: a frame sent down it in between was lost, even to the next client to bind the address
    (a scheduler restarted; under load the matrix's sync-then-asyncio test lost both requests).
    """
    listen = tmp_path / "listen"
    peer = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # a worker's end of the connection
    peer.settimeout(30)

    async def run() -> None:
        client = CLIENTS[kind]([f"ipc://{tmp_path}/worker-0"], f"ipc://{listen}")
        peer.connect(str(listen))
        assert peer.recv(1) == b"\xff"  # the client took the connection: its greeting's first byte
        closed = client.close()
        if asyncio.iscoroutine(closed):
            await closed
        peer.setblocking(False)
        try:
            while peer.recv(4096):  # the rest of the greeting, then the end of the connection
                pass
        except BlockingIOError:
            pytest.fail("close() returned with the connection still open")

    asyncio.run(run())
    peer.close()
