"""``puredetok._core.decoders.replace``: the crate's vectors, its per-token map, and the Stage
contract of its stage over a joined stream (literal patterns; a regex pattern is not modelled)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tokenizers import Regex, decoders

from decoder_contract import (
    check_idle,
    check_release,
    check_stage,
    check_stream_against_library,
    check_vector,
    codec_with,
    elements,
    library_decode,
    models_of,
    pieces_of,
    text_of,
)
from helpers import assert_streams_exactly
from puredetok import feed, finish, start
from puredetok._core.decoders import Unmodelled
from puredetok._core.decoders.replace import Replace, ReplaceStage

VECTORS: list[tuple[tuple[str, str], list[str], list[str] | str]] = [
    # tokenizers/src/normalizers/replace.rs, test "test_replace_decode"
    (("_", " "), ["hello", "_hello"], ["hello", " hello"]),
    # the same file, "pipeline_decode_token_matches_decode_chain" (its literal cases)
    (("▁", " "), ["▁Hey", "▁▁friend", "no_meta", "▁"], [" Hey", "  friend", "no_meta", " "]),
    (("ab", "X"), ["aabb", "abab", "b"], ["aXb", "XX", "b"]),
    # bindings/python/tests/bindings/test_decoders.py, TestReplace
    (("_", " "), ["My", "_name", "_is", "_John"], "My name is John"),
]
# replace.rs, "literal_replacement_matches_escaped_regex_for_unicode_empty_and_overlapping_patterns":
# every pattern, input and content of that test, each input as one token.
PATTERNS = ["a", "aa", "▁", "é", ".*[]", "\n", "🙂"]
INPUTS = ["aaaa", "é▁a🙂▁é", "x.*[]y\n", "a\0é"]
CONTENTS = ["", " ", "🙂x"]
POOL = ["ab", "a", "b", "aab", "▁", "▁▁", "x", ""]


@pytest.mark.parametrize(("rule", "tokens", "expected"), VECTORS, ids=[f"vector{i}" for i in range(4)])
def test_crate_vectors(rule: tuple[str, str], tokens: list[str], expected: list[str] | str) -> None:
    check_vector(decoders.Replace(*rule), tokens, expected)


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("content", CONTENTS)
def test_literal_patterns_of_the_crate(pattern: str, content: str) -> None:
    for text in INPUTS:
        check_vector(decoders.Replace(pattern, content), [text], [text.replace(pattern, content)])


def test_an_empty_or_regex_pattern_is_not_modelled_after_a_join() -> None:
    with pytest.raises(Unmodelled, match="Regex"):
        models_of(decoders.Replace(Regex("a+"), "b"))
    with pytest.raises(Unmodelled, match="empty pattern"):
        Replace("", "x").fragment_stage()
    with pytest.raises(ValueError, match="non-empty"):
        ReplaceStage((("", "x"),))


@pytest.mark.parametrize("rule", [("ab", "X"), ("▁", " "), ("aa", "a"), ("a", "")], ids=str)
@given(ids=st.lists(st.integers(0, len(POOL) - 1), max_size=16))
def test_streams_what_the_library_decodes(rule: tuple[str, str], ids: list[int]) -> None:
    check_stream_against_library(decoders.Replace(*rule), POOL, ids)
    check_stream_against_library(decoders.Sequence([decoders.Fuse(), decoders.Replace(*rule)]), POOL, ids)


@pytest.mark.parametrize("rule", [("ab", "X"), ("▁", " "), ("aa", "a"), ("aba", "-"), ("a", "")], ids=str)
@given(pieces=pieces_of(st.sampled_from(["a", "b", "ab", "ba", "▁", "x", ""])), data=st.data())
def test_stage_contract(rule: tuple[str, str], pieces: list[tuple[str, bool]], data: st.DataObject) -> None:
    cuts = data.draw(st.lists(st.integers(0, len(pieces)), max_size=4))
    stage = Replace(*rule).fragment_stage()
    released = check_stage(stage, pieces, cuts)
    replaced = [element.replace(*rule) for element in elements(pieces)]
    assert text_of(released) == library_decode(decoders.Replace(*rule), elements(pieces)) == "".join(replaced)
    # the same elements, less those that became empty
    assert [e for e in elements(released) if e] == [e for e in replaced if e]
    check_idle(stage, "x")


def test_release_gives_up_what_the_text_to_come_rules_out() -> None:
    stage = ReplaceStage((("ab", "X"),))
    assert stage.release(("a", False), "▁") == (("", False), [("a", True)])
    assert stage.release(("a", True), "▁") == (("", False), [("a", False)])  # it starts an element
    assert stage.release(("a", False), "b") == (("a", False), [])  # "ab" may still come
    assert stage.release(("a", False), "") == (("a", False), [])  # nothing known
    longer = ReplaceStage((("aba", "-"),))
    assert longer.release(("ab", False), "a") == (("ab", False), [])
    assert longer.release(("ab", False), "ba") == (("", False), [("ab", True)])
    # "ab" + "a..." cannot start at "a", but "b" + "a" cannot start "aba" either: all of it goes
    assert longer.release(("ab", False), "x") == (("", False), [("ab", True)])
    tail = ReplaceStage((("aab", "-"),))
    assert tail.release(("aa", False), "ab") == (("a", False), [("a", True)])
    check_release(tail, [("aa", False), ("a", True)], ["ab", "b", "x"])


def test_a_match_that_a_held_strip_rules_out_is_not_held() -> None:
    """After a Strip that holds the last "▁" (the end of the output is stripped), the "a" before it
    cannot become part of "ab": it is sent at once (G3)."""
    chain = decoders.Sequence([decoders.Fuse(), decoders.Strip("▁", 2, 1), decoders.Replace("ab", "X")])
    pool = ["▁a", "▁", "b", "ab", "x"]
    c = codec_with(chain, pool)
    assert c.exact, c.reason
    state, emitted = feed(start(c), [0, 1])
    assert (emitted, finish(state)) == ("a", "")
    for more in ([], [2], [1, 2], [3], [1], [4, 0]):
        ids = [0, 1, *more]
        assert_streams_exactly(c, ids, library_decode(chain, [pool[i] for i in ids]))
