"""Limits with documented defaults and clear errors, each checked before the work it bounds, against
a real ``puredetok serve`` process (memory read from /proc).

Texts over ``max_text_chars`` are refused before they are tokenized; a maximal allowed text
tokenizes beside the loop (health probes and streams go on meanwhile); frames over the size limit
are refused by ZeroMQ before they are read (two 1 GiB frames leave the worker's memory flat);
``max_ids`` and ``max_live`` refuse a request with an error that names the limit, and tell the
scheduler to stop it.
"""

from __future__ import annotations

import mmap
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq

from helpers import tokenizer
from puredetok.serving._detokenize_manager import DetokenizeManager
from puredetok.serving._messages import (
    AbortBackendMsg,
    AbortMsg,
    DetokenizeMsg,
    HealthCheckMsg,
    HealthReply,
    Message,
    Opening,
    TokenizeMsg,
    UserMsg,
    UserReply,
)
from puredetok.worker._routing import WorkerPool
from puredetok.worker._worker import DEFAULT_MAX_TEXT_CHARS, Limits
from test_worker import NO_EOS, core_text, encode, texts
from zmq_harness import Harness

GIB = 1 << 30


def memory(pid: int) -> dict[str, int]:
    """The process's resident memory now (``VmRSS``) and at its peak (``VmHWM``), in bytes."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0]) * 1024
    return fields


def probe(h: Harness, pool: Any, number: int, inbox: list[Message]) -> float:
    """Seconds until a health probe is answered (other messages meanwhile go to ``inbox``)."""
    began = time.perf_counter()
    pool.send([HealthCheckMsg(number)])
    got = h.receive(
        h.frontend, lambda got: any(isinstance(m, HealthReply) and m.probe == number for m in got)
    )
    inbox.extend(m for m in got if not isinstance(m, HealthReply))
    return time.perf_counter() - began


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Harness, int]]:
    """A worker with the default limits, and its pid."""
    h = Harness(tmp_path_factory.mktemp("limits"))
    h.start(1, "--quiet")
    [ready] = h.wait_ready(1)
    yield h, ready.pid
    h.close()


def test_frames_over_the_size_limit_are_refused_before_they_are_read(served: tuple[Harness, int]) -> None:
    """Two 1 GiB frames used to reach 1.21 GB of RSS before they were dropped. ZeroMQ's MAXMSGSIZE
    refuses them on their header: the worker's memory stays flat (its peak too: this test runs first
    on its worker)."""
    h, pid = served
    pool = h.pool([0])
    inbox: list[Message] = []
    probe(h, pool, 100, inbox)
    before = memory(pid)
    huge = mmap.mmap(-1, GIB)  # zero pages, never touched: no memory here either
    sender: zmq.Socket[bytes] = h.context.socket(zmq.PUSH)
    sender.setsockopt(zmq.LINGER, 0)
    try:
        sender.connect(h.worker_address(0))
        for _ in range(2):
            sender.send(memoryview(huge), copy=False)
        deadline = time.monotonic() + 60
        dropped = 0
        while time.monotonic() < deadline and dropped < 1:
            pool.send([HealthCheckMsg(101)])
            got = h.receive(h.frontend, lambda got: any(isinstance(m, HealthReply) for m in got))
            [health] = [m for m in got if isinstance(m, HealthReply)]
            dropped = health.frames_dropped.get("connection_closed", 0)
            time.sleep(0.2)
    finally:
        sender.close(linger=0)
        huge.close()
    after = memory(pid)
    print(
        f"\ntwo 1 GiB frames: refused unread; RSS {before['VmRSS'] >> 20} -> {after['VmRSS'] >> 20} MB, "
        f"peak {before['VmHWM'] >> 20} -> {after['VmHWM'] >> 20} MB"
    )
    assert dropped >= 1
    assert after["VmHWM"] - before["VmHWM"] < 64 << 20 and after["VmRSS"] - before["VmRSS"] < 64 << 20


def test_a_text_over_the_limit_is_refused_before_it_is_tokenized(served: tuple[Harness, int]) -> None:
    """A 50 MB text used to tokenize for 105 s while a probe waited, and leave 4.5 GB resident."""
    h, pid = served
    pool = h.pool([0])
    inbox: list[Message] = []
    probe(h, pool, 1, inbox)
    before = memory(pid)
    began = time.perf_counter()
    pool.send([TokenizeMsg("huge", "x" * 50_000_000)])
    waited = probe(h, pool, 2, inbox)
    while not any(isinstance(m, UserReply) and m.uid == "huge" for m in inbox):
        inbox.extend(h.receive(h.frontend, lambda got: len(got) >= 1))
    refused = time.perf_counter() - began
    [reply] = [m for m in inbox if isinstance(m, UserReply) and m.uid == "huge"]
    assert reply.finished and reply.error is not None
    assert "50,000,000 characters" in reply.error and "max_text_chars" in reply.error
    after = memory(pid)
    print(
        f"\n50 MB text: refused in {refused:.2f} s, probe behind it {waited * 1000:.0f} ms; RSS "
        f"{before['VmRSS'] >> 20} -> {after['VmRSS'] >> 20} MB, peak {after['VmHWM'] >> 20} MB"
    )
    assert refused < 20 and waited < 20
    assert after["VmRSS"] - before["VmRSS"] < 150 << 20


def test_a_maximal_text_tokenizes_beside_the_loop(served: tuple[Harness, int]) -> None:
    """The longest text allowed takes a second or more to tokenize: meanwhile the worker answers
    probes and streams text, and what it tokenized leaves no memory behind."""
    h, pid = served
    pool = h.pool([0])
    inbox: list[Message] = []
    probe(h, pool, 10, inbox)
    text = ("推理引擎 streams 1+1=2 naïve café 🦩\n" * 40_000)[:DEFAULT_MAX_TEXT_CHARS]
    line = encode("streaming meanwhile 推理")  # (loads the tokenizer here first)
    before = memory(pid)
    began = time.perf_counter()
    pool.send([TokenizeMsg("maximal", text)])
    latencies: list[float] = []
    stream = 0
    while not h.backend.poll(0):
        latencies.append(probe(h, pool, 11 + len(latencies), inbox))
        stream += 1
        pool.send([DetokenizeMsg(f"meanwhile-{stream}", tuple(line), True, Opening((), NO_EOS))])
        time.sleep(0.02)
    [user] = h.receive(h.backend, lambda got: len(got) >= 1, 120)
    tokenized = time.perf_counter() - began
    assert isinstance(user, UserMsg) and user.uid == "maximal", user
    assert list(user.input_ids) == tokenizer("qwen3").encode(text)
    replies = h.replies_until_finished({f"meanwhile-{n}" for n in range(1, stream + 1)} - _finished(inbox))
    replies.update({m.uid: [m] for m in inbox if isinstance(m, UserReply) and m.uid not in replies})
    assert all(text == core_text(line) for text in texts(replies).values())
    after = memory(pid)
    print(
        f"\nmaximal text ({len(text):,} characters, {len(user.input_ids):,} ids): tokenized in "
        f"{tokenized:.2f} s; {len(latencies)} probes meanwhile, {min(latencies) * 1000:.0f} - "
        f"{max(latencies) * 1000:.0f} ms; RSS {before['VmRSS'] >> 20} -> {after['VmRSS'] >> 20} MB, "
        f"peak {after['VmHWM'] >> 20} MB"
    )
    assert len(latencies) >= 3 and max(latencies) < tokenized / 2
    assert after["VmRSS"] - before["VmRSS"] < 200 << 20


def _finished(inbox: list[Message]) -> set[object]:
    return {m.uid for m in inbox if isinstance(m, UserReply) and m.finished}


def test_an_abort_while_tokenizing_sends_no_ids(served: tuple[Harness, int]) -> None:
    """Tokenizing runs beside the loop: an abort that comes meanwhile ends the request cleanly, and
    its ids never reach the scheduler."""
    h, _ = served
    pool = h.pool([0])
    h.drain()
    pool.send([TokenizeMsg("slow", "1" * DEFAULT_MAX_TEXT_CHARS)])
    pool.send([AbortMsg("slow")])  # (one send would put the abort's frame first)
    pool.send([TokenizeMsg("after", "quick")])
    backend = h.receive(
        h.backend, lambda got: any(isinstance(m, UserMsg) and m.uid == "after" for m in got), 120
    )
    assert not any(isinstance(m, UserMsg) and m.uid == "slow" for m in backend)
    assert any(isinstance(m, AbortBackendMsg) and m.uid == "slow" for m in backend)
    replies = h.replies_until_finished({"slow"})
    assert [(r.finish_reason, r.error) for r in replies["slow"]] == [("abort", None)]


def test_ids_text_and_live_requests_over_their_limits_are_refused_with_clear_errors(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    try:
        h.start(
            1,
            "--quiet",
            "--max-ids",
            "10",
            "--max-live",
            "3",
            "--max-text-chars",
            "30",
            "--max-chat-messages",
            "1",
        )
        h.wait_ready(1)
        pool = h.pool([0])
        line = encode("a b c d e f g h i j k l")
        assert len(line) >= 11
        pool.send(
            [
                DetokenizeMsg(
                    "ok", tuple(line[:5]), True, Opening(tuple(line[:5]), NO_EOS)
                ),  # 10 ids: at the limit
                DetokenizeMsg("long", tuple(line[:5]), False, Opening(tuple(line[:6]), NO_EOS)),  # 11
                DetokenizeMsg("later", tuple(line[:2]), False, Opening((), NO_EOS)),
            ]
        )
        pool.send([DetokenizeMsg("later", tuple(line[:11]))])  # a live request's message over the limit
        replies = h.replies_until_finished({"ok", "long", "later"})
        assert replies["ok"][-1].error is None and replies["ok"][-1].finished
        for uid, size in (("long", 11), ("later", 11)):
            error = replies[uid][-1].error
            assert error is not None and f"{size:,} ids" in error and "max_ids" in error, error
        aborted = h.receive(h.backend, lambda got: len(got) >= 2)
        assert {m.uid for m in aborted if isinstance(m, AbortBackendMsg)} == {"long", "later"}

        pool.send([DetokenizeMsg(f"live-{n}", (line[0],), False, Opening((), NO_EOS)) for n in range(4)])
        replies = h.replies_until_finished({"live-3"})
        error = replies["live-3"][-1].error
        assert error is not None and "3 requests are live" in error and "max_live" in error
        assert [getattr(m, "uid", None) for m in h.receive(h.backend, lambda got: len(got) >= 1)] == [
            "live-3"
        ]
        pool.send(
            [
                DetokenizeMsg("live-0", (line[1],), True),
                DetokenizeMsg("live-4", (line[0],), True, Opening((), NO_EOS)),
            ]
        )
        replies = h.replies_until_finished({"live-0", "live-4"})
        assert replies["live-4"][-1].error is None  # room again once one ended

        chat = ({"role": "user", "content": "x" * 20},)  # 35 characters, its keys counted
        pool.send(
            [
                TokenizeMsg("text", "z" * 31),
                TokenizeMsg("chat", None, chat),
                TokenizeMsg("short", " hello" * 5),
            ]
        )
        replies = h.replies_until_finished({"text", "chat"})
        for uid in ("text", "chat"):
            error = replies[uid][-1].error
            assert error is not None and "max_text_chars" in error and "characters" in error
        [user] = h.receive(h.backend, lambda got: len(got) >= 1)
        assert isinstance(user, UserMsg) and user.uid == "short" and len(user.input_ids) <= 10

        two = ({"role": "user", "content": "a"}, {"role": "user", "content": "b"})
        pool.send([TokenizeMsg("two", None, two), TokenizeMsg("one", None, two[:1])])  # 16 characters each
        [refused] = h.replies_until_finished({"two"})["two"]
        assert (
            refused.error is not None
            and "2 chat messages > the limit of 1 (max_chat_messages)" in refused.error
        )
        [user] = h.receive(h.backend, lambda got: len(got) >= 1)
        assert isinstance(user, UserMsg) and user.uid == "one"

        pool.send([TokenizeMsg("many ids", "1 2 3 4 5 6 7 8 9 10 11")])
        [refused] = h.replies_until_finished({"many ids"})["many ids"]
        assert refused.error is not None and "ids > the limit of 10 (max_ids)" in refused.error
    finally:
        h.close()


def test_the_pool_splits_a_batch_into_frames_under_the_limit(tmp_path: Path) -> None:
    """A worker refuses a frame over its limit unread (and closes the connection it came on): the
    sender never sends one. A batch that would be one is split; one message over it is refused
    before anything is sent."""
    h = Harness(tmp_path)
    try:
        h.start(1, "--quiet", "--max-frame-bytes", "20000")
        h.wait_ready(1)
        pool = WorkerPool([h.worker_address(0)], context=h.context, max_frame_bytes=20000)
        h.pools.append(pool)
        line = encode("split into frames 推理")
        uids = [f"split-{n}" for n in range(400)]
        pool.send([DetokenizeMsg(uid, tuple(line), True, Opening((), NO_EOS)) for uid in uids])
        replies = h.replies_until_finished(set(uids))
        assert all(text == core_text(line) for text in texts(replies).values())
        with pytest.raises(ValueError, match="over the workers' frame limit of 20,000"):
            pool.send([TokenizeMsg("too big", "x" * 30000)])
    finally:
        h.close()


def test_the_manager_refuses_a_request_past_max_live() -> None:
    manager = DetokenizeManager(tokenizer("qwen3"), max_live=2)
    manager.open("a")
    detached = manager.open("b")
    with pytest.raises(ValueError, match="2 requests are live"):
        manager.open("c")
    [reply] = manager.handle([DetokenizeMsg("c", (32,), False, Opening())])
    assert reply.finished and reply.error is not None and "max_live" in reply.error
    [late] = manager.handle([DetokenizeMsg("c", (32,))])  # refused: it has had its finished reply
    assert not late.finished and late.error is not None and "already ended" in late.error
    manager.detach("b")
    manager.open("d")
    with pytest.raises(ValueError, match="max_live"):
        manager.attach("b", detached)
    with pytest.raises(ValueError, match="max_live"):
        DetokenizeManager(tokenizer("qwen3"), max_live=0)


@pytest.mark.parametrize("option", ["--max-ids", "--max-live", "--max-text-chars", "--max-frame-bytes"])
def test_serve_refuses_a_limit_below_one(option: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "puredetok.cli", "serve", option, "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "must be >= 1" in done.stderr and "Traceback" not in done.stderr
    with pytest.raises(ValueError, match=option.removeprefix("--").replace("-", "_")):
        Limits(**{option.removeprefix("--").replace("-", "_"): 0})
