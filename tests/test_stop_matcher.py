"""The stop layer's one matcher (:func:`~puredetok.stops.matcher.scan`, an Aho-Corasick automaton)
against the plain definitions kept as its oracle: :func:`find_stop` (the earliest-completing stop
string, the longest of those ending together) and :func:`held_from` (the longest suffix that is a
proper prefix of a stop string).
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from puredetok.stops.matcher import SKIP, Match, compile_stops, find_stop, held_from, scan

# A small alphabet, so that stop strings overlap, nest and repeat (the automaton's failure links).
ALPHABET = "ab\nc<|"
stop_sets = st.lists(st.text(ALPHABET, min_size=1, max_size=6), min_size=0, max_size=5)
texts = st.text(ALPHABET, max_size=3 * SKIP)  # long enough for the skip to the next first character


@given(stop_sets, texts, texts)
def test_scan_is_find_stop_and_held_from(stops: list[str], before: str, text: str) -> None:
    matcher = compile_stops(stops)
    # The state a stream reaches on ``before`` (no stop string in it): what it holds.
    cut = find_stop(matcher, before, 0)
    if cut is not None:
        before = before[: cut.end - 1]
    held = before[held_from(matcher, before) :]
    match, state = scan(matcher, held, text)
    whole = held + text
    expected = find_stop(matcher, whole, len(held))
    assert match == expected
    if expected is None:
        assert state == whole[held_from(matcher, whole) :]
    else:
        assert state == ""


@given(stop_sets, texts, texts)
def test_unsearched_text_only_moves_the_held_text(stops: list[str], held_text: str, text: str) -> None:
    """Within ``min_tokens`` text is not searched, but what may start a stop string is held."""
    matcher = compile_stops(stops)
    held = held_text[held_from(matcher, held_text) :]
    match, state = scan(matcher, held, text, search=False)
    whole = held + text
    assert match is None
    assert state == whole[held_from(matcher, whole) :]


def test_of_stop_strings_ending_together_the_longest_wins() -> None:
    matcher = compile_stops(["bc", "abc", "c"])
    assert scan(matcher, "", "xabcx") == (Match("abc", 1, 4), "")
    assert find_stop(matcher, "xabcx", 0) == Match("abc", 1, 4)


def test_no_stop_strings_hold_nothing() -> None:
    matcher = compile_stops([])
    assert scan(matcher, "", "anything at all, long enough to skip") == (None, "")
    assert scan(matcher, "", "ab", search=False) == (None, "")
