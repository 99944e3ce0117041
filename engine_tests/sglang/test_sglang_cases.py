"""SGLang's own detokenizer test cases, re-expressed against its real process with puredetok.

SGLang's unit tests (``test/srt/...``: decode-id compaction, stream offsets after U+FFFD recovery,
per-request isolation, stop-string trimming) drive ``_decode_batch_token_id_output`` with stub
tokenizers that decode ids as bytes. Here the same streams are real Qwen3 byte tokens (one token
per byte), sent as frames over the process's sockets; each case keeps the chunks SGLang's test
expects. What those tests also assert about SGLang's internal bookkeeping (``decode_ids``,
``surr_offset``, ``read_offset``, ``sent_offset`` of its ``DecodeStatus``) has no counterpart:
puredetok keeps no ids, only a small hold.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from puredetok._core import byte_alphabet
from sglang_helpers import detokenizer, fresh_rid, needs_plugin, tokenizer
from sglang_process import DetokenizerProcess, Row

pytestmark = needs_plugin

_ALPHABET = byte_alphabet()


def b(data: bytes) -> list[int]:
    """Qwen3's ids of single-byte tokens, one per byte."""
    ids: list[int] = tokenizer("qwen3").convert_tokens_to_ids([_ALPHABET[byte] for byte in data])
    return ids


def chunks(process: DetokenizerProcess, frames: Sequence[Row]) -> list[str]:
    """One output per frame (each frame its own batch)."""
    return [process.exchange([frame])[0] for frame in frames]


@pytest.fixture
def process() -> DetokenizerProcess:
    return detokenizer("qwen3")


def test_the_window_before_read_offset_is_context_only(process: DetokenizerProcess) -> None:
    rid = fresh_rid()
    assert chunks(process, [Row(rid, b(b"^A"), 1), Row(rid, b(b"B"), 1)]) == ["A", "B"]


def test_an_incomplete_character_is_held_until_it_completes(process: DetokenizerProcess) -> None:
    rid = fresh_rid()
    middle = "中".encode()
    frames = [Row(rid, b(b"^" + middle[:1]), 1), Row(rid, b(middle[1:2]), 1), Row(rid, b(middle[2:]), 1)]
    frames.append(Row(rid, b(b"Z"), 1))
    assert chunks(process, frames) == ["", "", "中", "Z"]


def test_a_forced_update_then_finish_sends_each_part_once_and_forgets(process: DetokenizerProcess) -> None:
    rid = fresh_rid()
    frames = [Row(rid, b(b"^A"), 1), Row(rid, b(b"B"), 1, {"type": "length"})]
    assert chunks(process, frames) == ["A", "B"]
    assert chunks(process, [Row(rid, b(b"^C"), 1, {"type": "length"})]) == ["C"]  # a new request


@pytest.mark.parametrize(("no_stop_trim", "last"), [(False, ""), (True, "STOP")])
def test_a_stop_string_is_trimmed_after_the_window(
    process: DetokenizerProcess, no_stop_trim: bool, last: str
) -> None:
    rid = fresh_rid()
    frames = [
        Row(rid, b(b"^A"), 1),
        Row(rid, b(b"STOP-trailing"), 1, {"type": "stop", "matched": "STOP"}, no_stop_trim=no_stop_trim),
    ]
    assert chunks(process, frames) == ["A", last]


def test_a_split_cjk_character_is_sent_once(process: DetokenizerProcess) -> None:
    rid = fresh_rid()
    world = "界".encode()
    frames = [
        Row(rid, b(b"A \xe4\xb8\x96" + world[:1]), 0),
        Row(rid, b(world[1:2]), 0),
        Row(rid, b(world[2:] + b"abcd"), 0),
    ]
    assert chunks(process, frames) == ["A 世", "", "界abcd"]


def test_a_held_character_in_one_request_does_not_touch_another(process: DetokenizerProcess) -> None:
    held, clean = fresh_rid("held"), fresh_rid("clean")
    world = "界".encode()
    batches = [
        [Row(held, b(b"A \xe4\xb8\x96" + world[:1]), 0), Row(clean, b(b"x"), 0)],
        [Row(held, b(world[1:2]), 0), Row(clean, b(b"y"), 0)],
        [Row(held, b(world[2:] + b"ab"), 0), Row(clean, b(b"z"), 0)],
    ]
    outputs = [process.exchange(batch) for batch in batches]
    assert [output[1] for output in outputs] == ["x", "y", "z"]
    assert "".join(output[0] for output in outputs) == "A 世界ab"


def test_a_finish_after_a_held_character_sends_only_the_rest(process: DetokenizerProcess) -> None:
    rid = fresh_rid()
    world = "界".encode()
    frames = [
        Row(rid, b(b"A \xe4\xb8\x96" + world[:1]), 0),
        Row(rid, b(world[1:2]), 0),
        Row(rid, b(world[2:] + b"ab"), 0, {"type": "length"}),
    ]
    assert chunks(process, frames) == ["A 世", "", "界ab"]


def test_a_request_that_finishes_in_its_first_message_gets_its_whole_text(
    process: DetokenizerProcess,
) -> None:
    rid = fresh_rid()
    assert chunks(process, [Row(rid, b("A 世ab".encode()), 0, {"type": "length"})]) == ["A 世ab"]


TAIL = b"Q: "
GENERATED = "你好，世".encode()


@pytest.mark.parametrize("pieces", [(5, 5, 2), (1,) * 12, (12,)])
def test_stream_offsets_never_resend_text(process: DetokenizerProcess, pieces: tuple[int, ...]) -> None:
    """The case of SGLang's stream-offset regression: a printable prefix that shrinks between two
    steps ("你�" then "你好，�") made it send text twice. The last message is empty and finished."""
    rid, frames, at = fresh_rid(), [], 0
    for size in pieces:
        piece = GENERATED[at : at + size]
        frames.append(Row(rid, b(TAIL + piece) if at == 0 else b(piece), len(TAIL)))
        at += size
    frames.append(Row(rid, [], len(TAIL), {}))
    sent = chunks(process, frames)
    assert "".join(sent) == GENERATED.decode()
    assert "\ufffd" not in "".join(sent)


def test_a_plain_ascii_stream_is_sent_as_it_comes(process: DetokenizerProcess) -> None:
    rid = fresh_rid()
    frames = [Row(rid, b(TAIL + b"hello "), len(TAIL)), Row(rid, b(b"world "), 0), Row(rid, b(b"bye"), 0, {})]
    assert chunks(process, frames) == ["hello ", "world ", "bye"]
