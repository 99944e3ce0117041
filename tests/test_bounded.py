"""G5 bounded: the state does not grow with the stream, also on degenerate streams (ids that
decode to nothing, literal U+FFFD ids, byte runs that are already invalid); the one documented
exception, a still-valid byte-fallback run, is bounded by ``max_byte_run``.

A step's work depends only on the state and the id, so a state of constant size is also a step
of constant cost; the timing itself is shown by ``puredetok bench`` (no timed tests).
"""

from __future__ import annotations

import pickle

import pytest
import tokenizers
from tokenizers import Regex, decoders

from helpers import byte_ids, codec, reference, stream, tokenizer
from puredetok import codec_for, feed, finish, start, step

LONG = 6_000


def held_bytes(hold: object) -> int:
    return len(pickle.dumps(hold))


def degenerate_streams(name: str) -> dict[str, list[int]]:
    """Long streams of one kind of troublesome id each, where the vocabulary has them."""
    size = codec(name).vocab_size
    alone = tokenizer(name).backend_tokenizer.decode_batch(
        [[i] for i in range(size)], skip_special_tokens=False
    )
    streams = {}
    empty = [i for i, text in enumerate(alone) if text == ""]
    if empty:
        streams["decode to nothing"] = (empty * LONG)[:LONG]
    replacement = [i for i, text in enumerate(alone) if text == "\ufffd"]
    if replacement:
        streams["literal U+FFFD"] = [replacement[0]] * LONG
    bytes_ = byte_ids(name)
    if 0x80 in bytes_:
        streams["lone continuation bytes"] = [bytes_[0x80]] * LONG
    if 0xE4 in bytes_:
        streams["lead bytes that never complete"] = [bytes_[0xE4], bytes_[0x41]] * (LONG // 2)
    text = tokenizer(name).encode("推理引擎 😀 streams, naïve café. ", add_special_tokens=False)
    streams["ordinary text"] = (list(text) * LONG)[:LONG]
    return streams


def sizes(name: str, ids: list[int], max_byte_run: int | None = None) -> tuple[list[int], list[int], str]:
    """Per step: the pickled size of the hold and the length of the held text; and the whole text."""
    state = start(codec_for(tokenizer(name), max_byte_run=max_byte_run) if max_byte_run else codec(name))
    held, pending, text = [], [], []
    for token_id in ids:
        state, delta = step(state, token_id)
        text.append(delta)
        held.append(held_bytes(state.hold))
        pending.append(len(finish(state)))
    return held, pending, "".join(text) + finish(state)


@pytest.mark.parametrize("name", ["gpt2", "qwen3", "llama2", "t5_small", "distilbert_base_uncased"])
def test_g5_the_state_does_not_grow_on_long_degenerate_streams(name: str) -> None:
    for kind, ids in degenerate_streams(name).items():
        held, pending, text = sizes(name, ids)
        # the last thousand steps hold no more than the first thousand did
        assert max(held[-1000:]) <= max(held[:1000]), (name, kind)
        assert max(pending[-1000:]) <= max(pending[:1000]) <= 10, (name, kind)
        assert text == reference(name, ids), (name, kind)


def test_g5_a_valid_byte_fallback_run_is_held_until_it_ends_or_the_cap() -> None:
    bytes_ = byte_ids("llama2")
    run = [bytes_[b] for b in "中".encode()] * 1_000  # valid UTF-8 so far: a later byte could spoil it
    state, text = feed(start(codec("llama2")), run)
    assert text == "" and finish(state) == "中" * 1_000  # the documented exception: the run is held
    held, pending, text = sizes("llama2", run, max_byte_run=64)
    assert max(held[-1000:]) <= max(held[:1000]) and max(pending) < 100  # the cap bounds it
    assert text == reference("llama2", run)  # and it stays exact: the run never turns invalid


def test_g5_the_window_fallback_stays_bounded() -> None:
    # A decoder puredetok has no exact model of (Replace with a regex pattern) gets the window codec.
    raw = tokenizers.Tokenizer.from_str(tokenizer("gpt2").backend_tokenizer.to_str())
    raw.decoder = decoders.Sequence([decoders.ByteLevel(), decoders.Replace(Regex("never matches"), "x")])
    window = codec_for(raw)
    assert not window.exact and "Replace with a Regex pattern" in window.reason
    for ids in ([94] * 2_000, [94, 95, 6552] * 700, list(raw.encode("推理 😀 ┌──┐ ok").ids) * 200):
        state, deltas = stream(start(window), ids)
        hold = state.hold
        assert isinstance(hold, tuple)
        context, pending = hold[0], hold[1]  # the window's ids: they never pile up
        assert len(context) <= 4 and len(pending) <= 16
        assert "".join(deltas) + finish(state) == raw.decode(ids, skip_special_tokens=False)
