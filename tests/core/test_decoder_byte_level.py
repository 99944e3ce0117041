"""``puredetok._core.decoders.byte_level``: the crate's vectors and the Stage contract of its UTF-8
stage (both ``errors`` modes)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tokenizers import decoders

from decoder_contract import (
    Vector,
    check_idle,
    check_lanes,
    check_map_tokens,
    check_stage,
    check_stream_against_library,
    check_vector,
    library_decode,
    pieces_of,
    text_of,
)
from puredetok._core.decoders.byte_level import ByteLevel, Utf8Stage, byte_alphabet

ALPHABET = byte_alphabet()
SAMPLES = (
    'A Nuskhuri abbreviation of იესუ ქრისტე ( iesu kriste ) " Jesus Christ "',
    "An equal number have descenders , like p or q in English "
    ": გ , დ , ე , ვ , კ , ლ , ჟ , ტ , უ , ფ , ღ , ყ , ც",
)
VECTORS: list[Vector] = [
    # tokenizers/src/pre_tokenizers/byte_level.rs, test "decoding"
    (
        ["Hello", "Ġmy", "Ġfriend", ",", "Ġhow", "Ġis", "Ġyour", "Ġday", "Ġgoing", "?"],
        ["Hello my friend, how is your day going?"],
    ),
    # the same file, "decode_works_on_separated_tokens": every byte its own token
    *(([ALPHABET[b] for b in sample.encode()], [sample]) for sample in SAMPLES),
    # the same file, "decode_unknown_characters": characters outside the alphabet are their UTF-8
    (["Hello", "Ġthere", "Ġdear", "Ġfriend!", "Ġ", "[PA D]"], ["Hello there dear friend! [PA D]"]),
    # bindings/python/tests/bindings/test_decoders.py, TestByteLevel
    (["My", "Ġname", "Ġis", "ĠJohn"], ["My name is John"]),
]

POOL = [
    *(ALPHABET[b] for b in (0xE5, 0x8F, 0xAB, 0xF0, 0x9F, 0xA6, 0xA9, 0x80, 0xED, 0xA0, 0xC3, 0xFF)),
    "a",
    "Ġ",
    "Ġhello",
    "ĠðŁ",  # " " and the first two bytes of an emoji
    "ï¿½",  # a literal U+FFFD
    "[PA D]",  # outside the alphabet
    "ĠĠ",
    "Ċ",
]


@pytest.mark.parametrize(("tokens", "expected"), VECTORS, ids=[f"vector{i}" for i in range(len(VECTORS))])
def test_crate_vectors(tokens: list[str], expected: list[str]) -> None:
    check_vector(decoders.ByteLevel(), tokens, expected)


@given(ids=st.lists(st.integers(0, len(POOL) - 1), max_size=24))
def test_streams_what_the_library_decodes(ids: list[int]) -> None:
    check_stream_against_library(decoders.ByteLevel(), POOL, ids)


FRAGMENTS = st.one_of(
    st.characters(min_codepoint=0x80).map(lambda c: c.encode()),
    st.characters(min_codepoint=0x80).map(lambda c: c.encode()[:-1]),
    st.binary(max_size=3),
    st.sampled_from([b"a", b" ", b"\xed\xa0", b"\xef\xbf\xbd", b""]),
)


@pytest.mark.parametrize("errors", ["replace", "ignore"])
@given(pieces=pieces_of(FRAGMENTS, max_size=20), data=st.data())
def test_stage_contract(errors: str, pieces: list[tuple[bytes, bool]], data: st.DataObject) -> None:
    stage = Utf8Stage(errors)
    cuts = data.draw(st.lists(st.integers(0, len(pieces)), max_size=4))
    released = check_stage(stage, pieces, cuts)
    data_bytes = b"".join(value for value, _ in pieces)
    if errors == "replace":  # the crate's lossy UTF-8 decode of the token bytes
        tokens = ["".join(ALPHABET[b] for b in value) for value, _ in pieces if value]
        assert text_of(released) == library_decode(decoders.ByteLevel(), tokens)
    else:  # ByT5: invalid bytes dropped, as Python's "ignore" does
        assert text_of(released) == data_bytes.decode("utf-8", "ignore")
    assert all(glued for _, glued in released)  # one element: the whole output
    check_idle(stage, b"a")


@pytest.mark.parametrize("errors", ["replace", "ignore"])
@given(values=st.lists(FRAGMENTS, max_size=20))
def test_lanes_pass_what_a_push_from_idle_leaves_idle(errors: str, values: list[bytes]) -> None:
    """From the idle hold, every value that a push leaves idle and that gives text passes in its
    lane, as ``push`` gives it (check_lanes; one with a surrogate's ED A0 may take the other path);
    from a held tail, none do."""
    stage = Utf8Stage(errors)
    passing = 0
    for value in values:
        hold, out = stage.push(stage.idle, value, False)
        passing += hold == stage.idle and bool(out) and b"\xed" not in value
    assert check_lanes(stage, [stage.idle], [v for v in values if b"\xed" not in v]) == 2 * passing
    assert stage.push_lanes(b"\xe4", values, True) is None


def test_the_per_token_map_reads_the_alphabet_or_utf8() -> None:
    model = ByteLevel()
    assert model.map_token("Ġhello", False) == b" hello"
    assert model.map_token("ĠðŁ", True) == b" \xf0\x9f"
    assert model.map_token("[PA D]", False) == b"[PA D]"  # a space is not in the alphabet
    assert model.map_token("é", False) == b"\xe9"  # é is the byte E9 in the alphabet


def test_the_bulk_map_is_the_per_token_map() -> None:
    """All alphabet tokens go through the charmap codec at once; one token that is not (a space,
    a character outside the alphabet) sends every token through the per-token map."""
    model = ByteLevel()
    alphabet_only = ["Ġhello", "ĠðŁ", "é", "", "Ċ"]
    check_map_tokens(model, alphabet_only)
    check_map_tokens(model, [*alphabet_only, "[PA D]", "日本"])
    assert model.map_tokens(["Ġa", None], False) == [b" a", None]
