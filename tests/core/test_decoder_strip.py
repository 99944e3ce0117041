"""``puredetok._core.decoders.strip``: the crate's vectors, its per-token map, and the Stage
contract of its stage over a joined stream."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tokenizers import decoders

from decoder_contract import (
    check_ahead,
    check_idle,
    check_stage,
    check_stream_against_library,
    check_vector,
    elements,
    library_decode,
    pieces_of,
    text_of,
)
from puredetok._core.decoders.strip import Strip, StripStage

VECTORS: list[tuple[tuple[str, int, int], list[str], list[str] | str]] = [
    # tokenizers/src/decoders/strip.rs, test "decode"
    (("H", 1, 0), ["Hey", " friend!", "HHH"], ["ey", " friend!", "HH"]),
    (("y", 0, 1), ["Hey", " friend!"], ["He", " friend!"]),
    # bindings/python/tests/bindings/test_decoders.py, TestStrip
    (("_", 1, 0), ["_My", " na", "me", " _-", "__-"], "My name _-_-"),
]
OPTIONS = [(" ", 1, 0), ("H", 1, 0), ("y", 0, 1), ("_", 2, 2), (" ", 0, 3)]
POOL = ["Hey", " friend!", "HHH", "H", "y", "yy", " ", "  ", "_", "__-", "a", ""]


@pytest.mark.parametrize(("options", "tokens", "expected"), VECTORS, ids=["H10", "y01", "_10"])
def test_crate_vectors(options: tuple[str, int, int], tokens: list[str], expected: list[str] | str) -> None:
    check_vector(decoders.Strip(*options), tokens, expected)


@pytest.mark.parametrize("options", OPTIONS, ids=str)
@given(ids=st.lists(st.integers(0, len(POOL) - 1), max_size=16))
def test_streams_what_the_library_decodes(options: tuple[str, int, int], ids: list[int]) -> None:
    check_stream_against_library(decoders.Strip(*options), POOL, ids)
    check_stream_against_library(decoders.Sequence([decoders.Fuse(), decoders.Strip(*options)]), POOL, ids)


@pytest.mark.parametrize("options", OPTIONS, ids=str)
@given(data=st.data())
def test_stage_contract(options: tuple[str, int, int], data: st.DataObject) -> None:
    content, start, stop = options
    values = st.sampled_from([content, content * 2, "a", f"a{content}", f"{content}b", ""])
    pieces = data.draw(pieces_of(values))
    cuts = data.draw(st.lists(st.integers(0, len(pieces)), max_size=4))
    stage = Strip(*options).fragment_stage()
    assert stage == StripStage(content, start, stop)
    released = check_stage(stage, pieces, cuts)
    # Per element (pieces joined by glue), exactly the crate's Strip.
    assert text_of(released) == library_decode(decoders.Strip(*options), elements(pieces))
    check_idle(stage, "a")


def test_the_per_token_map_is_the_crates_strip() -> None:
    model = Strip(" ", 2, 1)
    assert [model.map_token(t, False) for t in ("   a  ", " ", "", "a ")] == [" a ", "", "", "a"]
    assert Strip(" ", 1, 0).stage() is None


def test_a_new_element_is_one_for_the_stages_after_even_when_all_stripped() -> None:
    """An unglued piece that strips to nothing still starts an element: the held run of the one
    before is dropped, and a stage after it must not take what follows as that element's text."""
    stage = StripStage("y", 0, 1)
    hold, out = stage.push(stage.initial, "y", False)
    assert (hold, out) == ((0, "y"), [("", False)])
    assert stage.ahead(hold) == "y"
    assert stage.push(hold, "", False) == ((0, ""), [("", False)])
    check_ahead(stage, [("y", False), ("", False), ("a", True)])
