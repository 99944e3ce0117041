"""Exactness on synthetic tokenizers: every decoder module, in and after joining positions, with
holes in the vocabulary, specials, added tokens with spaces, literal U+FFFD, lone bytes."""

from __future__ import annotations

import functools
from typing import Any, cast

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from tokenizers import Tokenizer

import puredetok
import synthetic
from helpers import assert_streams_exactly
from puredetok import feed, finish, start, step


@functools.cache
def built(name: str) -> Tokenizer:
    return {**synthetic.EXACT, **synthetic.UNMODELLED}[name]()


@functools.cache
def codec(name: str, skip: bool, cleanup: bool | None = None, window: bool = False) -> puredetok.Codec:
    return puredetok.codec_for(
        built(name), skip_special_tokens=skip, clean_up_tokenization_spaces=cleanup, window=window
    )


def ids_for(name: str) -> st.SearchStrategy[list[int]]:
    size = max(built(name).get_vocab(with_added_tokens=True).values()) + 1
    return st.lists(st.integers(0, size - 1), max_size=30)


def reference(name: str, ids: list[int], skip: bool) -> str:
    """The tokenizer's own decode; inputs on which the crate itself panics are not compared."""
    try:
        return str(built(name).decode(ids, skip_special_tokens=skip))
    except BaseException as error:
        # tokenizers 0.23's Strip(stop>0) panics when stripping both ends would overlap.
        if type(error).__name__ != "PanicException":
            raise
        assume(False)
        raise


def check_stream(name: str, c: puredetok.Codec, ids: list[int], expected: str) -> None:
    assert_streams_exactly(c, ids, expected)


@pytest.mark.parametrize("name", sorted(synthetic.EXACT))
@pytest.mark.parametrize("skip", [False, True])
@given(data=st.data())
def test_exact_on_synthetic_tokenizers(name: str, skip: bool, data: st.DataObject) -> None:
    c = codec(name, skip)
    assert c.exact, c.reason
    ids = data.draw(ids_for(name))
    check_stream(name, c, ids, reference(name, ids, skip))


@pytest.mark.parametrize("name", sorted(synthetic.EXACT))
@given(data=st.data())
def test_exact_with_transformers_cleanup_on_a_raw_tokenizer(name: str, data: st.DataObject) -> None:
    from puredetok._core.decoders.cleanup import TRANSFORMERS_RULES, apply_rules

    c = codec(name, False, cleanup=True)
    assert c.exact and c.clean_up_tokenization_spaces
    ids = data.draw(ids_for(name))
    check_stream(name, c, ids, apply_rules(TRANSFORMERS_RULES, reference(name, ids, False)))


@pytest.mark.parametrize("name", sorted(synthetic.UNMODELLED))
def test_unmodelled_decoders_get_the_window_codec_and_say_why(name: str) -> None:
    c = codec(name, False)
    assert not c.exact and c.family == "window"
    assert c.reason.startswith("not modelled exactly: ")


@pytest.mark.parametrize("name", sorted(synthetic.UNMODELLED))
@given(data=st.data())
def test_window_codec_never_raises_and_flushes_everything(name: str, data: st.DataObject) -> None:
    c = codec(name, False)
    ids = data.draw(ids_for(name))
    state, emitted = start(c), ""
    for token_id in ids:
        state, delta = step(state, token_id)
        emitted += delta
    expected = reference(name, ids, False)
    # G1 is only claimed where the decode only grows along this sequence (modulo held U+FFFD).
    grows = all(
        expected.startswith(reference(name, ids[:i], False).rstrip("\ufffd")) for i in range(len(ids))
    )
    if grows:
        assert emitted + finish(state) == expected, ids


@pytest.mark.parametrize("name", ["byte_level", "wordpiece", "wordpiece_raw"])
@pytest.mark.parametrize("skip", [False, True])
@given(data=st.data())
def test_window_codec_is_exact_where_output_only_grows(name: str, skip: bool, data: st.DataObject) -> None:
    c = codec(name, skip, window=True)
    assert not c.exact
    ids = data.draw(ids_for(name))
    check_stream(name, c, ids, reference(name, ids, skip))


def test_byte_level_edge_tokens() -> None:
    tok = built("byte_level")
    vocab = tok.get_vocab(with_added_tokens=True)
    c = codec("byte_level", False)
    # 🦩 split over two tokens: nothing, then the whole character.
    state, first = step(start(c), vocab["ĠðŁ"])
    assert first == " " and finish(state) == "\ufffd"
    state, second = step(state, vocab["¦©"])
    assert second == "🦩"
    # A literal U+FFFD is final at once; a surrogate lead is invalid at once; a hole decodes to nothing.
    assert step(start(c), vocab["ï¿½"])[1] == "\ufffd"
    assert step(start(c), vocab["íł"])[1] == "\ufffd\ufffd"
    assert step(start(c), 260)[1] == "" and tok.decode([260]) == ""
    # Added tokens: a space in the content means raw bytes; only alphabet characters are mapped.
    assert step(start(c), vocab["  two "])[1] == "  two "
    assert step(start(c), vocab["Ġadded"])[1] == tok.decode([vocab["Ġadded"]]) == " added"


def test_byte_fallback_runs() -> None:
    tok = built("sentencepiece")
    vocab = tok.get_vocab(with_added_tokens=True)
    c = codec("sentencepiece", False)
    e4, b8, ad, a = (vocab[f"<0x{b:02X}>"] for b in (0xE4, 0xB8, 0xAD, 0x41))
    # A valid run is held until it ends, then becomes text.
    state, text = feed(start(c), [vocab[f"{SYNTH_SP}a"], e4, b8, ad])
    assert text == "a" and finish(state) == "中"
    # A run that can no longer be valid is released at once: one U+FFFD per byte token.
    state, text = feed(start(c), [vocab[f"{SYNTH_SP}a"], e4, a])
    assert text == "a\ufffd\ufffd"
    # Specials skipped in the middle of a run do not end it.
    skipping = codec("sentencepiece", True)
    assert feed(start(skipping), [e4, vocab["<|end|>"], b8, ad])[1] + "" == ""
    assert finish(feed(start(skipping), [e4, vocab["<|end|>"], b8, ad])[0]) == "中"


SYNTH_SP = synthetic.SP


@pytest.mark.parametrize("cap", [1, 2, 3, 7])
def test_max_byte_run_bounds_the_hold(cap: int) -> None:
    tok = built("sentencepiece")
    vocab = tok.get_vocab(with_added_tokens=True)
    codec_capped = puredetok.codec_for(tok, max_byte_run=cap)
    run = [vocab[f"<0x{b:02X}>"] for b in "中文字".encode()] * 20
    state, emitted = start(codec_capped), ""
    for token_id in run:
        state, delta = step(state, token_id)
        emitted += delta
        assert len(finish(state)) <= max(cap, 3)  # at most the cap (or one incomplete character)
    assert emitted + finish(state) == tok.decode(run)  # a valid run: exact despite the cap


def test_bad_max_byte_run() -> None:
    for bad in (0, -1, 1.5, "3", True):
        with pytest.raises(ValueError, match="max_byte_run"):
            puredetok.codec_for(built("sentencepiece"), max_byte_run=cast(Any, bad))
