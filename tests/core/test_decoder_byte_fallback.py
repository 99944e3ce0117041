"""``puredetok._core.decoders.byte_fallback``: the crate's vectors and the Stage contract."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tokenizers import decoders

from decoder_contract import (
    Vector,
    check_idle,
    check_stage,
    check_stream_against_library,
    check_vector,
    library_decode,
    pieces_of,
    text_of,
)
from puredetok._core.decoders.byte_fallback import ByteFallbackStage, byte_token_value

R = "\ufffd"
VECTORS: list[Vector] = [
    # tokenizers/src/decoders/byte_fallback.rs, test "decode"
    (["Hey", "friend!"], ["Hey", "friend!"]),
    (["<0x61>"], ["a"]),
    (["<0xE5>"], [R]),
    (["<0xE5>", "<0x8f>"], [R, R]),
    (["<0xE5>", "<0x8f>", "<0xab>"], ["叫"]),
    (["<0xE5>", "<0x8f>", "<0xab>", "a"], ["叫", "a"]),
    (["<0xE5>", "<0x8f>", "a"], [R, R, "a"]),
    # bindings/python/tests/bindings/test_decoders.py, TestByteFallback
    (["My", " na", "me"], ["My", " na", "me"]),
]

POOL = [
    "Hey",
    " friend!",
    "a",
    "<0xE5>",
    "<0x8f>",
    "<0xab>",
    "<0x61>",
    "<0xC3>",
    "<0xA9>",
    "<0xF0>",
    "<0x9F>",
    "<0xA6>",
    "<0x80>",
    "<0xFF>",
    "<0xED>",
    "<0xA0>",
    "<0x0a>",  # lower-case hex is a byte too
    "<0xZZ>",  # not hex: an ordinary token
    "<0x+A>",  # Rust's from_str_radix takes one leading "+"
    "<0x4>",  # five characters: an ordinary token
]


@pytest.mark.parametrize(("tokens", "expected"), VECTORS, ids=[" ".join(t) for t, _ in VECTORS])
def test_crate_vectors(tokens: list[str], expected: list[str]) -> None:
    check_vector(decoders.ByteFallback(), tokens, expected)


def test_byte_tokens_are_read_as_the_crate_reads_them() -> None:
    assert [byte_token_value(t) for t in ("<0x61>", "<0x0a>", "<0x+A>", "<0xZZ>", "<0x4>", "<0x610>")] == [
        0x61,
        0x0A,
        0x0A,
        None,
        None,
        None,
    ]
    assert library_decode(decoders.ByteFallback(), ["<0x+A>", "<0xZZ>"]) == "\n<0xZZ>"


@given(ids=st.lists(st.integers(0, len(POOL) - 1), max_size=24))
def test_streams_what_the_library_decodes(ids: list[int]) -> None:
    check_stream_against_library(decoders.ByteFallback(), POOL, ids)
    check_stream_against_library(decoders.Sequence([decoders.ByteFallback(), decoders.Fuse()]), POOL, ids)


def _fragments() -> st.SearchStrategy[list[int]]:
    """Bytes of UTF-8 characters, whole or cut short, and any single byte."""
    char = st.characters(min_codepoint=0x80).map(lambda c: list(c.encode()))
    return st.one_of(char, char.map(lambda b: b[:-1]), st.integers(0, 255).map(lambda b: [b]))


VALUES = st.one_of(_fragments(), st.sampled_from(["a", " b", ""]).map(lambda text: [text]))
"""Lists of stage values: runs of byte values (ints) and text."""


def _token(value: Any) -> str:
    return f"<0x{value:02X}>" if type(value) is int else str(value)


@pytest.mark.parametrize("max_run", [None, 1, 2, 3, 7])
@given(parts=st.lists(VALUES, max_size=10), glued=st.lists(st.booleans(), max_size=40), data=st.data())
def test_stage_contract(
    max_run: int | None, parts: list[list[Any]], glued: list[bool], data: st.DataObject
) -> None:
    values = [value for part in parts for value in part]
    pieces = [(value, glued[i] if i < len(glued) else False) for i, value in enumerate(values)]
    cuts = data.draw(st.lists(st.integers(0, len(pieces)), max_size=4))
    stage = ByteFallbackStage(max_run)
    released = check_stage(stage, pieces, cuts)
    assert all(not piece_glued for _, piece_glued in released)  # each run and token: its own element
    tokens = [_token(value) for value in values]
    if max_run is None or _every_run_valid(values):
        assert text_of(released) == library_decode(decoders.ByteFallback(), tokens)
    check_idle(stage, "a")


def _every_run_valid(values: list[Any]) -> bool:
    runs: list[bytes] = [b""]
    for value in values:
        if type(value) is int:
            runs[-1] += bytes([value])
        else:
            runs.append(b"")
    try:
        for run in runs:
            run.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


@pytest.mark.parametrize("cap", [1, 2, 4])
@given(pieces=pieces_of(st.integers(0, 255), max_size=40))
def test_a_capped_run_holds_fewer_byte_tokens_than_the_cap(cap: int, pieces: list[tuple[Any, bool]]) -> None:
    """With a cap, a held run has fewer byte tokens than the cap, or is one incomplete character."""
    stage = ByteFallbackStage(cap)
    hold: Any = stage.initial
    for value, glued in pieces:
        hold, _ = stage.push(hold, value, glued)
        if isinstance(hold, tuple):
            assert hold[3] < max(cap, 4), hold


@pytest.mark.parametrize("cuts", [(), (1, 333, 600), (257, 513, 1200)])
def test_long_runs_pushed_at_once(cuts: tuple[int, ...]) -> None:
    """Runs of more characters than a held leaf (256), valid, ended by text, poisoned, and still open
    at the end, pushed at once (also cut mid-run) hold and release what byte by byte does.
    """
    values: list[Any] = [*"é".encode() * 300, "x", *"字".encode() * 100, 0xFF, *b"ab" * 5]
    values += ["", *"😀".encode() * 70, *b"\xed\xa0", "y", *"é".encode() * 200, 0xC3]
    released = check_stage(ByteFallbackStage(), [(value, False) for value in values], cuts)
    tokens = [_token(value) for value in values]
    assert text_of(released) == library_decode(decoders.ByteFallback(), tokens)


def test_every_start_of_a_character_is_pushed_as_utf8_reads_it() -> None:
    """Each byte pushed one by one leaves the hold, and releases the text, that the run so far
    decoded at once does (two ways of reading UTF-8: byte by byte, and a run at a time), for
    every lead byte, every second byte and the edges of the third and fourth (overlong forms,
    surrogates, past U+10FFFF among them): an invalid byte is released at once, never held.
    """
    stage = ByteFallbackStage()
    edges = (0x00, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC1, 0xFF)
    for lead in range(256):
        for second in range(256):
            runs = [[lead, second]]
            if lead >= 0xE0:
                runs += [[lead, second, third] for third in edges]
                runs += [[lead, second, 0x80, fourth] for fourth in edges] if lead >= 0xF0 else []
            for run in runs:
                hold: Any = stage.initial
                released: list[Any] = []
                for end, value in enumerate(run, 1):
                    hold, produced = stage.push(hold, value, False)
                    released += produced
                    at_once, groups = stage.push_run(stage.initial, run[:end], False)
                    text = "".join(piece for group, _ in groups for piece in group)
                    assert (hold, text_of(released)) == (at_once, text), run
