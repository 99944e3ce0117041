"""``MiniSglTokenizer`` in this process, on mini-sglang's own message records: any order and
batching of many requests' messages, aborts among them; the room it keeps; a tokenizer puredetok
has no exact model of.
"""

from __future__ import annotations

import logging

import pytest
from hypothesis import given
from hypothesis import strategies as st
from minisgl.message import AbortBackendMsg, AbortMsg, DetokenizeMsg, UserReply
from minisgl_helpers import new_uid, offline_text, tokenizer, vocabulary

from puredetok.engines.minisgl import PARAMS, MiniSglTokenizer
from puredetok.testing.strategies import token_ids

_ADAPTERS: dict[str, MiniSglTokenizer] = {}


def adapter(name: str) -> MiniSglTokenizer:
    if name not in _ADAPTERS:
        _ADAPTERS[name] = MiniSglTokenizer(tokenizer(name))
    return _ADAPTERS[name]


@st.composite
def schedules(draw: st.DrawFn, name: str) -> tuple[dict[int, list[int]], dict[int, int], list[list[object]]]:
    """Requests (uid -> ids, some ending on EOS), where some are aborted (uid -> after how many
    messages), and the frames of their messages: each request's in order, interleaved, several of
    one request in a frame at times, the abort where it falls.
    """
    v = vocabulary(name)
    eos = tokenizer(name).eos_token_id
    requests: dict[int, list[int]] = {}
    for uid in [
        new_uid() for _ in range(draw(st.integers(1, 4)))
    ]:  # never seen: a test's examples share a worker
        ids = draw(token_ids(v, max_size=15).filter(bool))
        requests[uid] = [*ids, eos] if draw(st.booleans()) else ids
    aborted = {
        uid: draw(st.integers(0, len(ids) - 1))
        for uid, ids in requests.items()
        if draw(st.integers(0, 3)) == 0
    }
    queues: dict[int, list[object]] = {}
    for uid, ids in requests.items():
        last = aborted.get(uid, len(ids))
        queue: list[object] = [
            DetokenizeMsg(uid=uid, next_token=i, finished=n == len(ids) - 1) for n, i in enumerate(ids[:last])
        ]
        if uid in aborted:
            queue.append(AbortMsg(uid=uid))
            queue += [
                DetokenizeMsg(uid=uid, next_token=i, finished=False) for i in ids[last : last + 2]
            ]  # late
        queues[uid] = queue
    # each request's events in order, the requests interleaved as drawn
    turns = draw(st.permutations([uid for uid, queue in queues.items() for _ in queue]))
    placed = [queues[uid].pop(0) for uid in turns]
    events = placed
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(events) - 1)), max_size=len(events))))
    frames = [placed[a:b] for a, b in zip([0, *cuts], [*cuts, len(events)]) if placed[a:b]]
    return requests, aborted, frames


@pytest.mark.parametrize("name", ["qwen3", "llama2", "t5_small"])
@given(data=st.data())
def test_any_batching_gives_decodes_text_and_holds_nothing_after(name: str, data: st.DataObject) -> None:
    requests, aborted, frames = data.draw(schedules(name))
    worker = adapter(name)
    texts: dict[int, str] = {}
    finished: set[int] = set()
    backend: list[object] = []
    for frame in frames:
        to_frontend, to_backend = worker.handle(frame)
        backend += to_backend
        for reply in to_frontend:
            assert isinstance(reply, UserReply) and reply.uid not in finished
            texts[reply.uid] = texts.get(reply.uid, "") + reply.incremental_output
            if reply.finished:
                finished.add(reply.uid)
    for uid, ids in requests.items():
        if uid in aborted:
            assert uid not in finished
            assert tokenizer(name).decode(ids[: aborted[uid]]).startswith(texts.get(uid, ""))
        else:
            assert uid in finished and texts[uid] == offline_text(name, ids), ids
    assert backend == [
        AbortBackendMsg(uid=uid) for uid in sorted(aborted, key=lambda u: _abort_position(frames, u))
    ]
    assert len(worker.detokenize_manager) == 0 and not worker._last


def _abort_position(frames: list[list[object]], uid: int) -> int:
    flat = [event for frame in frames for event in frame]
    return next(n for n, event in enumerate(flat) if isinstance(event, AbortMsg) and event.uid == uid)


def test_past_max_live_the_request_quiet_longest_makes_room() -> None:
    worker = MiniSglTokenizer(tokenizer("llama2"), max_live=2)
    hello, world = vocabulary("llama2").encode("Hello world")

    def handle(*messages: object) -> tuple[list[object], list[object]]:
        return worker.handle(list(messages))

    handle(
        DetokenizeMsg(uid=1, next_token=hello, finished=False),
        DetokenizeMsg(uid=2, next_token=hello, finished=False),
    )
    handle(DetokenizeMsg(uid=1, next_token=world, finished=False))
    frontend, backend = handle(DetokenizeMsg(uid=3, next_token=hello, finished=False))
    assert frontend == [
        UserReply(uid=2, incremental_output="", finished=True),
        UserReply(uid=3, incremental_output="Hello", finished=False),
    ]
    assert backend == [AbortBackendMsg(uid=2)]
    assert handle(DetokenizeMsg(uid=2, next_token=world, finished=True)) == ([], [])  # ended
    frontend, _ = handle(
        DetokenizeMsg(uid=1, next_token=world, finished=True),
        DetokenizeMsg(uid=3, next_token=world, finished=True),
    )
    assert frontend == [
        UserReply(uid=1, incremental_output=" world", finished=True),
        UserReply(uid=3, incremental_output=" world", finished=True),
    ]
    assert len(worker.detokenize_manager) == 0


def test_a_tokenizer_without_an_exact_model_keeps_decodes_text(caplog: pytest.LogCaptureFixture) -> None:
    from tokenizers import Regex, Tokenizer, decoders
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer.from_str(tokenizer("qwen3").backend_tokenizer.to_str())
    backend.decoder = decoders.Sequence([decoders.ByteLevel(), decoders.Replace(Regex("x+"), "x")])
    odd = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|im_end|>")
    with caplog.at_level(logging.WARNING, logger="puredetok.engines.minisgl"):
        worker = MiniSglTokenizer(odd)
    assert not worker.detokenize_manager.codec_of(PARAMS).exact
    assert "no exact model of this tokenizer" in caplog.text
    ids = odd.encode("axxb xx x🦩xxx", add_special_tokens=False)
    frontend, _ = worker.handle(
        [DetokenizeMsg(uid=1, next_token=i, finished=n == len(ids) - 1) for n, i in enumerate(ids)]
    )
    assert "".join(reply.incremental_output for reply in frontend) == odd.decode(ids) == "axb x x🦩x"


def test_room_is_made_a_sixteenth_at_a_time() -> None:
    worker = MiniSglTokenizer(tokenizer("llama2"), max_live=32)
    hello = vocabulary("llama2").encode("Hello")[0]
    for uid in range(1, 33):  # 32 requests, uid 1 quiet longest
        worker.handle([DetokenizeMsg(uid=uid, next_token=hello, finished=False)])
    frontend, backend = worker.handle([DetokenizeMsg(uid=33, next_token=hello, finished=False)])
    assert backend == [AbortBackendMsg(uid=uid) for uid in (1, 2, 3)]  # one needed, and 32 // 16
    assert [reply.uid for reply in frontend] == [1, 2, 3, 33] and len(worker.detokenize_manager) == 30
