"""``puredetok._core.decoders.spaces``: no decoder at all. The ``tokenizers`` crate then joins the
tokens with single spaces (``TokenizerImpl::decode``: ``tokens.join(" ")`` when there is no
decoder); as a per-token map that is a space before every token but the first, with no stage."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from decoder_contract import check_stream_against_library, codec_with, tokenizer_with
from helpers import assert_streams_exactly
from puredetok._core.decoders import Unmodelled
from puredetok._core.decoders.spaces import JoinWithSpaces

POOL = ["Hey", "friend!", " ", "", "▁a", "a b", "<0x41>"]


def test_tokens_are_joined_with_single_spaces() -> None:
    tokenizer, vocab = tokenizer_with(None, POOL)
    ids = [vocab[token] for token in ("Hey", "friend!", "", " ", "<0x41>")]
    assert tokenizer.decode(ids) == "Hey friend!    <0x41>"
    c = codec_with(None, POOL)
    assert c.exact and c.family == "spaces"
    assert_streams_exactly(c, ids, "Hey friend!    <0x41>")


@given(ids=st.lists(st.integers(0, len(POOL) - 1), max_size=20))
def test_streams_what_the_library_decodes(ids: list[int]) -> None:
    check_stream_against_library(None, POOL, ids)


def test_a_per_token_map_without_a_stage() -> None:
    model = JoinWithSpaces()
    assert model.depends_on_first and model.stage() is None
    assert [model.map_token(t, first) for t, first in (("a", True), ("a", False), ("", False))] == [
        "a",
        " a",
        " ",
    ]
    with pytest.raises(Unmodelled):
        model.fragment_stage()
