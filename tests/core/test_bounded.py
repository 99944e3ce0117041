"""G5: the state's size does not grow with the stream, also for degenerate streams.

Cost per step is shown by ``puredetok bench`` (not timed here); these tests show the state stays
the same size, which is what makes each step cost the same.
"""

from __future__ import annotations

import pickle
from typing import Any, cast

import pytest
import tokenizers
from tokenizers import Regex, decoders

import puredetok
from helpers import BYTE_LEVEL, SENTENCEPIECE, TOKENIZERS, byte_ids, codec, stream, tokenizer
from puredetok import feed, finish, start, step
from puredetok._build.window import ATTEMPT, LIMIT


def _size(state: puredetok.DecodeState) -> int:
    return len(pickle.dumps(state.hold))


def _max_size_along(state: puredetok.DecodeState, ids: list[int], every: int = 1) -> tuple[int, str]:
    biggest, emitted = 0, []
    for index, token_id in enumerate(ids):
        state, delta = step(state, token_id)
        emitted.append(delta)
        if index % every == 0:
            biggest = max(biggest, _size(state))
    return biggest, "".join(emitted) + finish(state)


def _degenerate_streams(name: str) -> dict[str, list[int]]:
    tok = tokenizer(name)
    backend = tok.backend_tokenizer
    vocab = backend.get_vocab(with_added_tokens=True)
    specials = [i for i, added in backend.get_added_tokens_decoder().items() if added.special]
    streams: dict[str, list[int]] = {"specials (decode to '' when skipped)": specials[:3] * 700}
    replacement = [i for i in list(tok.encode("\ufffd", add_special_tokens=False))]
    streams["literal U+FFFD"] = replacement * 700
    bytes_ = byte_ids(name)
    if 0x80 in bytes_:
        streams["lone continuation bytes"] = [bytes_[0x80]] * 2000
    if 0xE4 in bytes_ and 0xF0 in bytes_:
        streams["leads that never complete"] = [bytes_[0xE4], bytes_[0xF0]] * 1000
    text = "日本語のテキスト 🦩 한국어 " * 120
    streams["split characters"] = list(tok.encode(text, add_special_tokens=False))[:2000]
    if "\u2581" in vocab:
        streams["spaces only"] = [vocab["\u2581"]] * 2000
    return streams


@pytest.mark.parametrize("name", TOKENIZERS)
@pytest.mark.parametrize("skip", [False, True])
def test_state_size_is_constant_on_degenerate_streams(name: str, skip: bool) -> None:
    c = codec(name, skip)
    for label, ids in _degenerate_streams(name).items():
        short, _ = _max_size_along(start(c), ids[:200])
        long, text = _max_size_along(start(c), ids, every=7)
        assert long <= max(short, 64), (label, short, long)
        assert text == tokenizer(name).decode(ids, skip_special_tokens=skip), label


@pytest.mark.parametrize("name", BYTE_LEVEL)
def test_byte_level_holds_at_most_three_bytes(name: str) -> None:
    c = codec(name)
    bytes_ = byte_ids(name)
    state = start(c)
    for byte in (0xF0, 0x9F, 0xA6):
        state, delta = step(state, bytes_[byte])
        assert delta == "" and finish(state) == "\ufffd"
    state, delta = step(state, bytes_[0xA9])
    assert delta == "🦩" and finish(state) == ""


@pytest.mark.parametrize("name", SENTENCEPIECE)
def test_byte_fallback_run_is_the_documented_exception_and_the_cap_bounds_it(name: str) -> None:
    run = [byte_ids(name)[b] for b in "中".encode()] * 600
    exact = codec(name)
    state, text = feed(start(exact), run)
    assert text == ""  # a valid run is held until it ends (it may still be poisoned)...
    assert finish(state) == "中" * 600
    assert _size(state) > 1000  # ...so this hold grows: the one documented exception
    capped = puredetok.codec_for(tokenizer(name), max_byte_run=64)
    biggest, text = _max_size_along(start(capped), run)
    assert biggest < 1000
    assert text == "中" * 600
    # Poisoned after the cap: only the part after the last release becomes U+FFFD (documented).
    poisoned = run + [byte_ids(name)[0xE4], byte_ids(name)[0x41]]
    _, capped_text = _max_size_along(start(capped), poisoned)
    assert capped_text.startswith("中" * 570) and capped_text.endswith("\ufffd")
    assert tokenizer(name).decode(poisoned) == "\ufffd" * len(poisoned)


def _window_sizes(state: puredetok.DecodeState) -> tuple[int, int]:
    """Ids in the fallback's context, and pending (since the last decode included)."""
    hold, recorded = cast(tuple[Any, ...], state.hold), 0
    while len(hold) == 3:  # an id recorded since the last decode, on top of the hold before it
        hold, recorded = hold[2], recorded + 1
    _, context, _, pending, _ = hold
    return len(context), len(pending) + recorded


@pytest.mark.parametrize("name", ["qwen3", "gpt2", "llama2", "distilbert_base_uncased"])
def test_window_codec_stays_bounded(name: str) -> None:
    c = puredetok.codec_for(tokenizer(name), window=True)
    for label, ids in _degenerate_streams(name).items():
        state, emitted = start(c), ""
        for token_id in ids[:800]:
            state, delta = step(state, token_id)
            emitted += delta
            context, pending = _window_sizes(state)
            assert context + pending <= LIMIT + ATTEMPT, label
        assert emitted + finish(state) == tokenizer(name).decode(ids[:800]), label


def test_window_fallback_for_an_unmodelled_decoder_stays_bounded() -> None:
    # A decoder puredetok has no exact model of (Replace with a regex pattern) gets the window codec.
    raw = tokenizers.Tokenizer.from_str(tokenizer("gpt2").backend_tokenizer.to_str())
    raw.decoder = decoders.Sequence([decoders.ByteLevel(), decoders.Replace(Regex("never matches"), "x")])
    window = puredetok.codec_for(raw)
    assert not window.exact and "Replace with a Regex pattern" in window.reason
    for ids in ([94] * 2_000, [94, 95, 6552] * 700, list(raw.encode("推理 😀 ┌──┐ ok").ids) * 200):
        state, deltas = stream(start(window), ids)
        context, pending = _window_sizes(state)
        assert context + pending <= LIMIT + ATTEMPT
        assert "".join(deltas) + finish(state) == raw.decode(ids, skip_special_tokens=False)
