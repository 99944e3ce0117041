"""``puredetok._core.decoders.bpe``: the crate's vectors and the Stage contract of its suffix stage
(over whole tokens, and over fragments after a decoder with memory)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tokenizers import decoders

from decoder_contract import (
    check_idle,
    check_stage,
    check_stream_against_library,
    check_vector,
    elements,
    library_decode,
    pieces_of,
    text_of,
)
from puredetok._core.decoders import Unmodelled
from puredetok._core.decoders.bpe import BPEDecoder, SuffixStage

# The crate's bpe.rs has no test module; these are its Python bindings' (TestBPEDecoder).
VECTORS: list[tuple[str, list[str], str]] = [
    ("</w>", ["My</w>", "na", "me</w>", "is</w>", "Jo", "hn</w>"], "My name is John"),
    ("_", ["My_", "na", "me_", "is_", "Jo", "hn_"], "My name is John"),
]
POOL = ["a", "b", "ab", "a</w>", "b</w>", "</w>", "</", "w>", "</w", ">", "x</w>y", " ", "<"]


@pytest.mark.parametrize(("suffix", "tokens", "expected"), VECTORS, ids=["w", "underscore"])
def test_crate_vectors(suffix: str, tokens: list[str], expected: str) -> None:
    check_vector(decoders.BPEDecoder(suffix), tokens, expected)


@pytest.mark.parametrize("suffix", ["</w>", "_", "ab"])
@given(ids=st.lists(st.integers(0, len(POOL) - 1), max_size=16))
def test_streams_what_the_library_decodes(suffix: str, ids: list[int]) -> None:
    check_stream_against_library(decoders.BPEDecoder(suffix), POOL, ids)
    after_bytes = decoders.Sequence([decoders.ByteFallback(), decoders.BPEDecoder(suffix)])
    check_stream_against_library(after_bytes, [*POOL, "<0xE5>", "<0x8f>", "<0xab>"], ids)


@pytest.mark.parametrize("fragments", [False, True])
@pytest.mark.parametrize("suffix", ["</w>", "_"])
@given(data=st.data())
def test_stage_contract(fragments: bool, suffix: str, data: st.DataObject) -> None:
    values = st.sampled_from(["a", suffix, f"a{suffix}", f"{suffix}b", suffix[:1], suffix[1:], " ", ""])
    pieces = data.draw(pieces_of(values))
    if not fragments:  # over whole tokens every piece is its own element
        pieces = [(value, False) for value, _ in pieces]
    cuts = data.draw(st.lists(st.integers(0, len(pieces)), max_size=4))
    stage = SuffixStage(suffix, fragments)
    released = check_stage(stage, pieces, cuts)
    # Per element: the suffix is a space, except in the last element, where it is removed.
    assert text_of(released) == library_decode(decoders.BPEDecoder(suffix), elements(pieces))
    check_idle(stage, "a")


def test_an_empty_suffix_is_not_modelled() -> None:
    with pytest.raises(Unmodelled):
        BPEDecoder("").stage()
    with pytest.raises(Unmodelled):
        BPEDecoder("").fragment_stage()
