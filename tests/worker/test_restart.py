"""Drain and restart: a worker asked to stop hands every open request back, and a new worker
continues each exactly. Real ``puredetok serve`` processes over real ZeroMQ sockets; the test plays
the API server and the scheduler, and keeps sending while the worker restarts.
"""

from __future__ import annotations

import random
import signal
import time
from pathlib import Path
from typing import Any

from helpers import codec, tokenizer
from puredetok.serving._messages import (
    HANDED_BACK,
    UNKNOWN_REQUEST,
    DetokenizeMsg,
    Opening,
    ReadyMsg,
    SamplingParams,
    TokenizeMsg,
    UserMsg,
    UserReply,
)
from puredetok.stops import StopRules, advance_many, close, open_stream
from zmq_harness import Harness

EOS = 151645
ROUND = 0.02
"""Seconds between two decode steps of the scheduler the test plays."""


def expected(prompt: list[int], ids: list[int], params: SamplingParams) -> str:
    """What the request's text must be: the pure layers, all at once."""
    rules = StopRules(
        stop=params.stop,
        eos_token_ids=(EOS, 151643),
        ignore_eos=params.ignore_eos,
        max_new_tokens=params.max_new_tokens,
    )
    stream, text = advance_many(open_stream(codec("qwen3", True), rules, prompt), ids)
    return text + close(stream)[1]


class Request:
    """One request as the scheduler and the API server see it."""

    def __init__(self, uid: str, prompt: list[int], ids: list[int], params: SamplingParams) -> None:
        self.uid, self.prompt, self.ids, self.params = uid, prompt, ids, params
        self.sent = 0
        """Ids sent so far (the scheduler's output so far)."""
        self.text = ""
        self.moved: UserReply | None = None
        """The hand-back reply, until the request is re-opened."""
        self.ended: UserReply | None = None
        self.awaiting = False
        """Moved, and the re-opening not answered yet."""
        self.unknown_errors = 0

    def next_message(self, unaware: bool = False) -> DetokenizeMsg | None:
        """The next id, if any is due (``unaware``: as a scheduler that has not yet heard of the
        hand-back sends it)."""
        if self.ended is not None or (self.moved is not None and not unaware) or self.sent >= len(self.ids):
            return None
        first = self.sent == 0
        self.sent += 1
        opening = Opening(tuple(self.prompt), self.params) if first else None
        return DetokenizeMsg(self.uid, (self.ids[self.sent - 1],), self.sent == len(self.ids), opening)

    def reopening(self) -> DetokenizeMsg:
        moved = self.moved
        assert moved is not None and moved.state is not None and moved.consumed is not None
        self.moved = None
        opening = Opening((), self.params, moved.state, moved.consumed)
        rest = tuple(self.ids[moved.consumed : self.sent])
        return DetokenizeMsg(self.uid, rest, self.sent == len(self.ids), opening)

    def take(self, reply: UserReply) -> None:
        """One reply for this request. A moved request's messages that reach the new worker before
        its re-opening are refused as unknown (their ids come again in the re-opening); the new
        worker answers them first, in the order they came, and never answers an opening so."""
        if reply.state is not None:
            assert reply.error is not None and reply.error.startswith(HANDED_BACK)
            assert self.moved is None and self.ended is None
            self.moved, self.awaiting = reply, True
            return
        if self.awaiting and reply.error is not None and reply.error.startswith(UNKNOWN_REQUEST):
            self.unknown_errors += 1
            return
        self.awaiting = False
        if self.ended is not None:  # ids the scheduler sent before it heard that a stop rule ended it
            # (answered by the worker that ended it, or, queued while it stopped, by the new one,
            # which never held the request)
            assert reply.error is not None, (self.uid, reply)
            assert "already ended" in reply.error or reply.error.startswith(UNKNOWN_REQUEST), (
                self.uid,
                reply,
            )
            return
        self.text += reply.incremental_output
        if reply.finished:
            self.ended = reply


def restart_under_load(folder: Path, count: int = 1000, seed: int = 12) -> dict[str, float]:
    """``count`` requests mid-stream; SIGTERM; the scheduler keeps sending while the worker hands its
    requests back and exits and a new one starts on the same address; every request is re-opened
    with its state and the ids from its ``consumed`` count on. Checks every request's text and
    returns the figures (docs/benchmarks.md; ``tests/worker/bench_restart.py`` repeats it)."""
    rng = random.Random(seed)
    qwen = tokenizer("qwen3")
    lines = [
        "推理引擎 😀 streams text: naïve café, 1+1=2.\n第二行结束。",
        "A flamingo 🦩 stands on one leg; 한국어 텍스트도 </ans> and more.",
        "Stop strings may be cut </ans> across tokens, and so may 🏳️‍🌈 flags.",
    ]
    texts = [list(qwen.encode(line * 10, add_special_tokens=False)) for line in lines]
    requests: dict[str, Request] = {}
    for n in range(count):
        ids = texts[n % 3][: rng.randrange(120, len(texts[n % 3]) + 1)]
        if n % 7 == 0:
            ids = [*ids[:50], EOS, *ids[50:]]  # ends on EOS, before its last ids
        params = SamplingParams(
            stop=("</ans>",) if n % 4 == 1 else (), max_new_tokens=150 if n % 5 == 0 else None
        )
        prompt = texts[(n + 1) % 3][: n % 6]
        requests[f"r{n}"] = Request(f"r{n}", prompt, ids, params)

    h = Harness(folder)
    ready: list[ReadyMsg] = []
    try:
        first = h.start(1, "--quiet")
        h.wait_ready(1)
        pool = h.pool([0])

        def collect(timeout_ms: int = 0) -> None:
            while h.frontend.poll(timeout_ms):
                for message in h.from_frontend.decode(h.frontend.recv()).batch.items:
                    if isinstance(message, UserReply):
                        requests[str(message.uid)].take(message)
                    elif isinstance(message, ReadyMsg):
                        ready.append(message)
                timeout_ms = 0

        last_round = [0.0]

        def send_round(unaware: bool = False) -> int:
            """One id for every running request, at most one round per ROUND seconds (the pace of
            a scheduler's decode steps)."""
            time.sleep(max(0.0, last_round[0] + ROUND - time.monotonic()))
            last_round[0] = time.monotonic()
            batch = [m for m in (r.next_message(unaware) for r in requests.values()) if m is not None]
            if batch:
                pool.send(batch)
            return len(batch)

        for _ in range(12):
            send_round()
            collect(20)
        first.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        # The scheduler keeps sending while the worker drains, hands back and exits.
        while first.poll() is None:
            assert time.monotonic() < signalled + 60
            send_round()
            collect(20)
        exited = time.monotonic()
        assert first.returncode == 0
        collect(200)
        moved = [r for r in requests.values() if r.moved is not None]
        assert len(moved) > count // 2, len(moved)  # most requests were mid-stream
        assert all(r.ended is not None or r.moved is not None for r in requests.values() if r.sent)
        state_bytes = sum(len(r.moved.state or b"") for r in moved if r.moved is not None)

        for _ in range(3):  # sent while no worker listens, before the scheduler heard: they wait
            send_round(unaware=True)
        second = h.start(1, "--quiet")
        while not ready:
            collect(100)
        reopened = time.monotonic()
        pool.send([r.reopening() for r in moved])
        caught_up: float | None = None
        deadline = reopened + 120
        while any(r.ended is None for r in requests.values()):
            assert time.monotonic() < deadline, [r.uid for r in requests.values() if r.ended is None][:5]
            send_round()
            collect(20)
            if caught_up is None and not any(r.awaiting for r in moved):
                caught_up = time.monotonic()
        assert second.poll() is None
    finally:
        h.close()

    wrong = [r.uid for r in requests.values() if r.text != expected(r.prompt, r.ids, r.params)]
    assert wrong == []
    errors = [r.uid for r in requests.values() if r.ended is not None and r.ended.error is not None]
    assert errors == []
    return {
        "requests": count,
        "handed back": len(moved),
        "state bytes per request": state_bytes / len(moved),
        "SIGTERM to exit, s": exited - signalled,
        "re-opened, all answered, s": (caught_up or time.monotonic()) - reopened,
        "refused as unknown before the re-opening": sum(r.unknown_errors for r in requests.values()),
        "wrong texts": len(wrong),
        "errors": len(errors),
    }


def test_a_restart_under_load_loses_no_stream_and_sends_no_wrong_text(tmp_path: Path) -> None:
    """1,000 requests, restarted under load (see :func:`restart_under_load`): every request ends
    with its exact text, 0 wrong, 0 lost; messages sent before the re-openings were refused as
    unknown and came again in them."""
    figures = restart_under_load(tmp_path)
    assert figures["wrong texts"] == figures["errors"] == 0
    assert figures["refused as unknown before the re-opening"] > 0  # the race happened, harmlessly


def test_a_stopped_worker_hands_back_what_it_holds_and_only_that(tmp_path: Path) -> None:
    """SIGTERM with idle requests: one hand-back each, with the state and the ids consumed; the
    states resume in the core exactly; the process exits 0 with nothing left."""
    h = Harness(tmp_path)
    try:
        process = h.start(1, "--quiet")
        h.wait_ready(1)
        pool = h.pool([0])
        ids = list(tokenizer("qwen3").encode("held 🦩 text", add_special_tokens=False))
        params = SamplingParams(stop=("text!",))
        pool.send(
            [
                DetokenizeMsg(f"idle-{n}", tuple(ids[: n + 1]), False, Opening((), params))
                for n in range(len(ids))
            ]
        )
        pool.send([DetokenizeMsg("done", tuple(ids), True, Opening())])
        before = h.replies_until_finished({"done"})
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0
        got: list[Any] = []
        while h.frontend.poll(500):
            got.extend(h.from_frontend.decode(h.frontend.recv()).batch.items)
        handed = {m.uid: m for m in got if isinstance(m, UserReply) and m.state is not None}
        assert set(handed) == {f"idle-{n}" for n in range(len(ids))} and "done" in before
        from puredetok import Stream

        c = codec("qwen3", True)
        for n in range(len(ids)):
            reply = handed[f"idle-{n}"]
            assert reply.finished and reply.consumed == n + 1 and reply.finish_reason is None
            assert reply.state is not None and len(reply.state) < 100
            stream = Stream.from_bytes(c, reply.state)
            assert stream == advance_many(open_stream(c, stream.rules), ids[: n + 1])[0]
    finally:
        h.close()


def test_a_stopping_worker_tokenizes_what_it_was_given_and_the_next_worker_opens_it(tmp_path: Path) -> None:
    """SIGTERM with a long prompt given to the tokenizing thread: the worker finishes it, its ids
    reach the scheduler before the worker exits (0); never opened there, the request is not handed
    back; the next worker on the same address opens it with its prompt, and it streams exactly."""
    qwen = tokenizer("qwen3")
    text = "a long prompt, tokenized while the worker stops. " * 10_000
    h = Harness(tmp_path)
    try:
        first = h.start(1, "--quiet")
        h.wait_ready(1)
        pool = h.pool([0])
        pool.send([TokenizeMsg("long", text)])
        time.sleep(0.2)
        first.send_signal(signal.SIGTERM)
        assert first.wait(60) == 0
        [user] = h.receive(h.backend, lambda got: any(isinstance(m, UserMsg) for m in got))
        assert isinstance(user, UserMsg) and user.uid == "long"
        prompt = list(user.input_ids)
        assert prompt == qwen.encode(text)
        while h.frontend.poll(300):  # nothing was open: nothing handed back
            got = h.from_frontend.decode(h.frontend.recv()).batch.items
            assert not [m for m in got if isinstance(m, UserReply)], got
        h.start(1, "--quiet")
        h.wait_ready(1)
        answer = list(qwen.encode(" 推理 🦩 naïve, exactly.", add_special_tokens=False))
        pool.send([DetokenizeMsg("long", tuple(answer), True, Opening(tuple(prompt), user.params))])
        replies = h.replies_until_finished({"long"})
        assert "".join(r.incremental_output for r in replies["long"]) == expected(prompt, answer, user.params)
    finally:
        h.close()
