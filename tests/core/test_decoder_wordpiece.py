"""``puredetok._core.decoders.wordpiece``: the crate's vectors and its per-token map (WordPiece has
no stage: its cleanup works on each token alone)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tokenizers import decoders

from decoder_contract import check_stream_against_library, check_vector, decode_chain, models_of
from puredetok._core.decoders import Unmodelled
from puredetok._core.decoders.cleanup import WORDPIECE_RULES
from puredetok._core.decoders.wordpiece import WordPiece

VECTORS: list[tuple[tuple[str, bool], list[str], list[str] | str]] = [
    # tokenizers/src/decoders/wordpiece.rs, test "wordpiece_decoder"
    (("##", False), ["##uelo", "Ara", "##új", "##o", "No", "##guera"], "##uelo Araújo Noguera"),
    # bindings/python/tests/bindings/test_decoders.py, TestWordPiece
    (("##", True), ["My", "na", "##me", "is", "Jo", "##hn"], "My name is John"),
    (("##", True), ["I", "'m", "Jo", "##hn"], "I'm John"),
    (("__", False), ["My", "na", "__me", "is", "Jo", "__hn"], "My name is John"),
    (("__", False), ["I", "'m", "Jo", "__hn"], "I 'm John"),
]
CRATE_CLEANUP = [
    # tokenizers/src/decoders/wordpiece.rs, fn cleanup: its replacements, in order
    (" .", "."),
    (" ?", "?"),
    (" !", "!"),
    (" ,", ","),
    (" ' ", "'"),
    (" n't", "n't"),
    (" 'm", "'m"),
    (" do not", " don't"),
    (" 's", "'s"),
    (" 've", "'ve"),
    (" 're", "'re"),
]
POOL = [
    "it",
    "'",
    "s",
    "##s",
    "n",
    "##'t",
    "do",
    "not",
    ".",
    ",",
    "?",
    "!",
    "'m",
    "ve",
    "re",
    "a",
    "##b",
    "##",
]


@pytest.mark.parametrize(("options", "tokens", "expected"), VECTORS, ids=[f"vector{i}" for i in range(5)])
def test_crate_vectors(options: tuple[str, bool], tokens: list[str], expected: str) -> None:
    prefix, cleanup = options
    check_vector(decoders.WordPiece(prefix, cleanup), tokens, expected)


def test_the_cleanup_is_the_crates() -> None:
    assert list(WORDPIECE_RULES) == CRATE_CLEANUP


@pytest.mark.parametrize("options", [("##", True), ("##", False), ("@@", True)], ids=str)
@given(ids=st.lists(st.integers(0, len(POOL) - 1), max_size=16))
def test_streams_what_the_library_decodes(options: tuple[str, bool], ids: list[int]) -> None:
    pool = [token.replace("##", options[0]) for token in POOL]
    check_stream_against_library(decoders.WordPiece(*options), pool, ids)


def test_only_whole_tokens_are_modelled() -> None:
    [model] = models_of(decoders.WordPiece())
    assert model == WordPiece("##", True) and model.stage() is None and model.depends_on_first
    assert decode_chain(model, ["##a", "##b", "c"]) == ["##a", "b", " c"]
    with pytest.raises(Unmodelled):
        model.fragment_stage()
