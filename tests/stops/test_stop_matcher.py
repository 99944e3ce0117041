"""The stop layer's one matcher (:func:`~puredetok.stops._matcher.scan`, an Aho-Corasick automaton)
against the plain definitions of tests/stop_reference.py as its oracle: :func:`find_stop` (the
earliest-completing stop string, the longest of those ending together) and :func:`held_from` (the
longest suffix that is a proper prefix of a stop string).
"""

from __future__ import annotations

import attrs
from hypothesis import given
from hypothesis import strategies as st

from puredetok.stops._matcher import SHALLOW, SKIP, Match, Matcher, compile_stops, scan
from stop_reference import earliest_stop, longest_hold


def find_stop(matcher: Matcher, text: str, after: int) -> Match | None:
    """The earliest-completing stop string in ``text`` that ends after position ``after``."""
    found = earliest_stop(text, matcher.stops, after)
    return None if found is None else Match(found[2], found[1], found[0])


def held_from(matcher: Matcher, text: str) -> int:
    """Where the longest suffix of ``text`` that is a proper prefix of a stop string begins."""
    return len(text) - len(longest_hold(text, matcher.stops))


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


# Stop strings longer than the prefixes kept by their text (SHALLOW): held text past it is found by
# its fingerprint; built from repeated pieces, so that long prefixes overlap and nest.
pieces = st.lists(st.sampled_from(["ab", "a", "b\n", "<|", "c" * (SHALLOW // 2)]), min_size=1, max_size=40)
long_stop_sets = st.lists(pieces.map("".join), min_size=1, max_size=3)


@given(long_stop_sets, pieces.map("".join), pieces.map("".join))
def test_long_stop_strings_scan_as_their_definitions(stops: list[str], before: str, text: str) -> None:
    matcher = compile_stops(stops)
    cut = find_stop(matcher, before, 0)
    if cut is not None:
        before = before[: cut.end - 1]
    held = before[held_from(matcher, before) :]
    assert held == "" or held in matcher.prefixes
    match, state = scan(matcher, held, text)
    whole = held + text
    expected = find_stop(matcher, whole, len(held))
    assert match == expected
    assert state == ("" if expected is not None else whole[held_from(matcher, whole) :])


@given(long_stop_sets, st.integers(0, 10_000))
def test_each_prefix_is_found_and_no_other_text(stops: list[str], cut: int) -> None:
    matcher = compile_stops(stops)
    stop = stops[cut % len(stops)]
    size = cut % len(stop)
    prefix = stop[:size]
    assert (prefix in matcher.prefixes) == (size > 0)
    if size:
        state = matcher.state_of(prefix)
        assert state is not None and matcher.text_of(state) == prefix
    assert matcher.state_of(stop + "\x00") is None
    assert (prefix + "\x00") not in matcher.prefixes


def test_a_fingerprint_that_collides_falls_back_to_the_trie() -> None:
    """A long held text whose fingerprint names another state is still found (by the walk)."""
    stop = "x" * (SHALLOW + 5) + "y"
    matcher = compile_stops([stop])
    held = stop[: SHALLOW + 3]
    wrong = attrs.evolve(matcher, deep={key: 1 for key in matcher.deep})  # every key names state 1
    assert wrong.state_of(held) == matcher.state_of(held)
    assert scan(wrong, held, "xxy") == (Match(stop, 0, len(stop)), "")


def test_building_a_long_stop_string_makes_no_table_of_its_prefixes() -> None:
    """The matcher of a 100,000-character stop string holds no text but the stop string and
    prefixes up to SHALLOW characters (a table of every prefix would hold 5e9 characters).
    """
    stop = "ab" * 50_000
    matcher = compile_stops([stop])
    assert sum(map(len, matcher.shallow)) <= SHALLOW * SHALLOW
    assert len(matcher.depth) == len(stop) + 1
    assert scan(matcher, stop[:-1], stop[-1]) == (Match(stop, 0, len(stop)), "")
