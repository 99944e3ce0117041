"""One request never costs the others their hand-back. Token ids, limits and counts are bounded
where they are given by what a saved state holds (2**63 - 1): a request past it is refused at its
opening, alone; and a request whose state cannot be saved all the same ends alone, with an error
reply, while every other open request is handed back. Real ``puredetok serve`` processes and
SIGTERM, as tests/worker/test_restart.py drives them."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest
import zmq

from helpers import codec, tokenizer
from puredetok import Stream
from puredetok.serving._detokenize_manager import DetokenizeManager
from puredetok.serving._messages import (
    HANDED_BACK,
    AbortBackendMsg,
    DetokenizeMsg,
    Opening,
    SamplingParams,
    UserReply,
)
from puredetok.stops import advance_many, open_stream
from puredetok.worker._wire import FrameDecoder, encode_batch
from puredetok.worker._worker import Worker
from zmq_harness import Harness, raw_detokenize_frame

BAD_LIMIT = 777
"""The ``max_new_tokens`` that marks the request whose state cannot be saved (simulated)."""


@pytest.fixture
def one_state_unsavable(monkeypatch: pytest.MonkeyPatch) -> None:
    """``Stream.to_bytes`` fails for streams whose limit is :data:`BAD_LIMIT`, as the saver did
    for an int past 64 bits (what any other failure to save would do the same)."""
    saved = Stream.to_bytes

    def to_bytes(stream: Stream) -> bytes:
        if stream.rules.max_new_tokens == BAD_LIMIT:
            raise ValueError(f"an int beyond 64 bits cannot be saved: {2**63}")
        return saved(stream)

    monkeypatch.setattr(Stream, "to_bytes", to_bytes)


def opened(manager: DetokenizeManager, ids: list[int]) -> None:
    for n in range(4):
        manager.open(f"good-{n}", Opening((), SamplingParams(stop=("zz",))))
    manager.open("bad", Opening((), SamplingParams(max_tokens=BAD_LIMIT)))
    replies = manager.handle(
        [DetokenizeMsg(uid, tuple(ids)) for uid in ("good-0", "bad", "good-1", "good-2")]
    )
    assert all(reply.error is None for reply in replies)


@pytest.mark.usefixtures("one_state_unsavable")
def test_a_state_that_cannot_be_saved_costs_only_its_own_request() -> None:
    manager = DetokenizeManager(tokenizer("qwen3"))
    ids = list(tokenizer("qwen3").encode("held 🦩 text", add_special_tokens=False))
    opened(manager, ids)
    handed, failed = manager.hand_back()
    assert [uid for uid, _, _ in handed] == ["good-0", "good-1", "good-2", "good-3"]
    [(uid, error)] = failed
    assert uid == "bad" and "'bad' could not be handed back" in error and "64 bits" in error
    assert not len(manager)
    c = codec("qwen3", True)
    for uid, state, consumed in handed:
        assert consumed == (0 if uid == "good-3" else len(ids))
        stream = Stream.from_bytes(c, state)
        assert stream == advance_many(open_stream(c, stream.rules), ids[:consumed])[0]
    [late] = manager.handle([DetokenizeMsg("bad", (5,))])
    assert late.error is not None and "not handed back" in late.error  # remembered, as ended


@pytest.mark.usefixtures("one_state_unsavable")
def test_drain_is_all_or_nothing_and_names_the_request() -> None:
    manager = DetokenizeManager(tokenizer("qwen3"))
    opened(manager, [32])
    with pytest.raises(ValueError, match="request 'bad' cannot be handed back"):
        manager.drain()
    assert len(manager) == 5  # nothing was handed back, nothing lost


@pytest.mark.usefixtures("one_state_unsavable")
def test_a_stopping_worker_hands_back_every_request_but_the_one_it_cannot_save(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    h = Harness(tmp_path)
    worker = Worker(
        tokenizer("qwen3"),
        listen=h.worker_address(0),
        backend=h.backend_address,
        frontend=h.frontend_address,
        context=h.context,
    )
    try:
        opened(worker.detokenize_manager, [32, 33])
        worker._hand_back()
        worker._send_waiting(5)
        replies = [m for m in h.receive(h.frontend, lambda got: len(got) >= 5) if isinstance(m, UserReply)]
        handed = {r.uid for r in replies if r.state is not None}
        assert handed == {"good-0", "good-1", "good-2", "good-3"}
        [bad] = [r for r in replies if r.uid == "bad"]
        assert bad.finished and bad.state is None and bad.error is not None
        assert "could not be handed back" in bad.error and not bad.error.startswith(HANDED_BACK)
        [abort] = h.receive(h.backend, lambda got: len(got) >= 1)
        assert abort == AbortBackendMsg("bad")  # the scheduler drops it
        assert "'bad' could not be handed back" in caplog.text
    finally:
        worker.close()
        h.close()


def test_a_limit_past_what_a_state_holds_is_refused_at_the_opening_and_serve_hands_back_the_rest(
    tmp_path: Path,
) -> None:
    """The field case: a scheduler's request with ``max_tokens`` 2**63 (the wire took up to
    2**64 - 1) made SIGTERM's hand-back fail for the whole worker (exit 2, 0 of 4 handed back).
    Now each such request is refused at its opening, naming the field, and the others are handed
    back, exit 0. Sent as raw frames, as a scheduler in any language sends them."""
    h = Harness(tmp_path)
    try:
        process = h.start(1, "--quiet")
        h.wait_ready(1)
        pool = h.pool([0])
        ids = list(tokenizer("qwen3").encode("held 🦩 text", add_special_tokens=False))
        pool.send([DetokenizeMsg(f"good-{n}", tuple(ids[: n + 1]), False, Opening()) for n in range(4)])
        bad: dict[str, dict[str, Any]] = {
            "max": {"max_new_tokens": 2**63},
            "max-vllm": {"max_tokens": 2**64 - 1},
            "min": {"min_tokens": 2**63},
            "stop-id": {"stop_token_ids": [5, 2**63]},
        }
        frame = raw_detokenize_frame(
            [(uid, [32], False, {"params": fields}, None) for uid, fields in bad.items()]
        )
        raw = h.context.socket(zmq.PUSH)
        raw.connect(h.worker_address(0))
        raw.send(frame)
        refused = h.replies_until_finished(set(bad))
        for uid, fields in bad.items():
            [reply] = refused[uid]
            assert reply.error is not None and next(iter(fields)) in reply.error, reply
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0
        got: list[Any] = []
        while h.frontend.poll(500):
            got.extend(h.from_frontend.decode(h.frontend.recv()).batch.items)
        handed = {m.uid: m for m in got if isinstance(m, UserReply) and m.state is not None}
        assert set(handed) == {f"good-{n}" for n in range(4)}
        c = codec("qwen3", True)
        for n in range(4):
            stream = Stream.from_bytes(c, handed[f"good-{n}"].state or b"")
            assert stream == advance_many(open_stream(c, stream.rules), ids[: n + 1])[0]
        raw.close(linger=0)
    finally:
        h.close()


def test_the_bound_is_one_everywhere() -> None:
    """Construction, ``from_openai`` and the wire refuse the same values and take the same ones."""
    decoder = FrameDecoder()
    for name in ("max_tokens", "min_tokens", "stop_token_ids"):
        for value, taken in ((2**63 - 1, True), (2**63, False), (2**64 - 1, False)):
            given: Any = [value] if name == "stop_token_ids" else value
            try:
                SamplingParams(**{name: given})
                made = True
            except ValueError as error:
                made = False
                assert name in str(error)
            try:
                SamplingParams.from_openai({name: given})
                read = True
            except ValueError as error:
                read = False
                assert name in str(error)
            frame = raw_detokenize_frame([("r", [5], False, {"params": {name: given}}, None)])
            decoded = decoder.decode(frame)
            assert made == read == (not decoded.rejected) == taken, (name, value)
    assert len(decoder.decode(encode_batch([DetokenizeMsg("r", (5,))])).batch) == 1
