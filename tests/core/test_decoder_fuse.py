"""``puredetok._core.decoders.fuse``: the crate's vectors and the Stage contract."""

from __future__ import annotations

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
    elements,
    pieces_of,
)
from puredetok._core.decoders.fuse import Fuse, GlueStage

VECTORS: list[Vector] = [
    # tokenizers/src/decoders/fuse.rs, test "decode"
    (["Hey", " friend!"], ["Hey friend!"]),
    # bindings/python/tests/bindings/test_decoders.py, TestFuse
    (["My", " na", "me"], "My name"),
]
POOL = ["Hey", " friend!", "", " ", "a", "▁b"]


@pytest.mark.parametrize(("tokens", "expected"), VECTORS, ids=[" ".join(t) for t, _ in VECTORS])
def test_crate_vectors(tokens: list[str], expected: list[str] | str) -> None:
    check_vector(decoders.Fuse(), tokens, expected)


@given(ids=st.lists(st.integers(0, len(POOL) - 1), max_size=20))
def test_streams_what_the_library_decodes(ids: list[int]) -> None:
    check_stream_against_library(decoders.Fuse(), POOL, ids)
    # after Fuse every later decoder sees one element
    check_stream_against_library(decoders.Sequence([decoders.Fuse(), decoders.Metaspace()]), POOL, ids)


@given(pieces=pieces_of(st.sampled_from(["a", "", " b", "▁"])), data=st.data())
def test_stage_contract(pieces: list[tuple[str, bool]], data: st.DataObject) -> None:
    cuts = data.draw(st.lists(st.integers(0, len(pieces)), max_size=4))
    for stage in (GlueStage(), Fuse().stage(), Fuse().fragment_stage()):
        released = check_stage(stage, pieces, cuts)
        assert elements(released) == (["".join(value for value, _ in pieces)] if pieces else [])
        check_idle(stage, "a")


def test_fuse_maps_nothing() -> None:
    assert Fuse().map_token("▁a", True) == "▁a" and not Fuse().depends_on_first
