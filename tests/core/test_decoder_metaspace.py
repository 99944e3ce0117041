"""``puredetok._core.decoders.metaspace``: the crate's vectors, its per-token map for each prepend
scheme, and the Stage contract of its stage over a joined stream."""

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
from puredetok._core.decoders.metaspace import Metaspace

SP = "\u2581"
VECTORS: list[tuple[tuple[str, str], list[str], list[str] | str]] = [
    # tokenizers/src/pre_tokenizers/metaspace.rs, test "decode"
    ((SP, "always"), [f"{SP}Hey", f"{SP}friend!"], ["Hey", " friend!"]),
    ((SP, "never"), [f"{SP}Hey", f"{SP}friend!"], [" Hey", " friend!"]),
    # bindings/python/tests/bindings/test_decoders.py, TestMetaspace
    ((SP, "always"), [f"{SP}My", f"{SP}name", f"{SP}is", f"{SP}John"], "My name is John"),
    (("-", "never"), ["-My", "-name", "-is", "-John"], " My name is John"),
]
SCHEMES = ["always", "first", "never"]
POOL = [SP, f"{SP}{SP}", f"{SP}a", "a", f"b{SP}", "", "-", "-x"]


@pytest.mark.parametrize(("options", "tokens", "expected"), VECTORS, ids=[f"vector{i}" for i in range(4)])
def test_crate_vectors(options: tuple[str, str], tokens: list[str], expected: list[str] | str) -> None:
    replacement, scheme = options
    check_vector(decoders.Metaspace(replacement, scheme), tokens, expected)


@pytest.mark.parametrize("scheme", SCHEMES)
@given(ids=st.lists(st.integers(0, len(POOL) - 1), max_size=16))
def test_streams_what_the_library_decodes(scheme: str, ids: list[int]) -> None:
    check_stream_against_library(decoders.Metaspace(SP, scheme), POOL, ids)
    check_stream_against_library(
        decoders.Sequence([decoders.Fuse(), decoders.Metaspace(SP, scheme)]), POOL, ids
    )
    check_stream_against_library(decoders.Metaspace("-", scheme, split=False), POOL, ids)


@pytest.mark.parametrize("scheme", SCHEMES)
@given(pieces=pieces_of(st.sampled_from([SP, f"a{SP}", f"{SP}{SP}b", "c", ""])), data=st.data())
def test_stage_contract(scheme: str, pieces: list[tuple[str, bool]], data: st.DataObject) -> None:
    cuts = data.draw(st.lists(st.integers(0, len(pieces)), max_size=4))
    stage = Metaspace(SP, scheme).fragment_stage()
    released = check_stage(stage, pieces, cuts)
    # Per element (pieces joined by glue): the first drops its "▁" (unless "never"), others space.
    assert text_of(released) == library_decode(decoders.Metaspace(SP, scheme), elements(pieces))
    check_idle(stage, "c", reaches_idle=scheme == "never")
    # idle is where a second element leaves the stage (after ByteFallback or CTC, which emit one
    # element per token); after a join (Fuse) every piece belongs to the first element, and with
    # a scheme that drops "▁" there that is the steady state: such a chain never reaches idle
    # (docs/architecture.md). With "never" every element is alike, and the stage idles at once.
    second, _ = stage.push(stage.push(stage.initial, "c", False)[0], "c", False)
    assert second == stage.idle
    first, _ = stage.push(stage.initial, "c", True)
    if scheme == "never":
        assert first == stage.idle
    else:
        assert stage.push(first, "c", True)[0] == first != stage.idle


def test_the_per_token_map_depends_on_the_first_token_unless_never() -> None:
    for scheme in SCHEMES:
        model = Metaspace(SP, scheme)
        assert model.depends_on_first is (scheme != "never")
        assert model.map_token(f"{SP}a{SP}", False) == " a "
        assert model.map_token(f"{SP}a{SP}", True) == (" a " if scheme == "never" else "a")
        assert model.stage() is None
