"""Stop strings in streamed text: the earliest-completing match, and what must still be held back.

Both questions are answered from a short window (the held text plus the new text), never by
rescanning the whole output: the held text is exactly the longest suffix of the output that could
still start a stop string, so no match can begin before it.
"""

from __future__ import annotations

__all__ = ["Matcher", "Match", "Transition", "compile_stops", "find_stop", "held_from", "scan"]

import re
from collections.abc import Iterable, Mapping
from typing import TypeAlias

import attrs

Transition: TypeAlias = "tuple[str, str | None, Mapping[str, Transition]]"
"""One step of the matching automaton on a character: the new state (the longest suffix of the
text that is a prefix of a stop string), the longest stop string completed there (or None), and
the new state's own transitions."""


@attrs.frozen
class Matcher:
    """A set of stop strings, prepared for matching (built once per :class:`StopRules`)."""

    stops: tuple[str, ...]
    """The distinct stop strings, longest first."""
    prefixes: frozenset[str]
    """Every non-empty proper prefix of a stop string: the text worth holding back."""
    opener: re.Pattern[str]
    """Finds the first character of any stop string: text without one cannot start a match (it
    never matches when there are no stop strings)."""
    any_stop: re.Pattern[str]
    """Finds any stop string (it never matches when there are none)."""
    openers: frozenset[str]
    """The first characters of the stop strings (the per-token fast check: ``isdisjoint``)."""
    longest: int
    """The length of the longest stop string (0 when there is none)."""
    shortest: int
    """The length of the shortest stop string: shorter text cannot hold a match."""
    automaton: Mapping[str, Mapping[str, Transition]]
    """Per state (a prefix of a stop string, ``""`` included), its transitions on the characters
    that lead to a non-empty state or complete a stop string; any other character leads to
    ``""``. A stream's held text is its state, so a token's text is matched in one pass."""


@attrs.frozen
class Match:
    """An occurrence of a stop string: ``text[start:end] == stop``."""

    stop: str
    start: int
    end: int


def compile_stops(stops: Iterable[str]) -> Matcher:
    """Prepare stop strings (already validated as non-empty strings) for matching."""
    distinct = sorted(set(stops), key=lambda stop: (-len(stop), stop))
    prefixes = frozenset(stop[:size] for stop in distinct for size in range(1, len(stop)))
    first = sorted({stop[0] for stop in distinct})
    opener = re.compile("[" + "".join(map(re.escape, first)) + "]" if first else "(?!)")
    any_stop = re.compile("|".join(map(re.escape, distinct)) if distinct else "(?!)")
    longest, shortest = (len(distinct[0]), len(distinct[-1])) if distinct else (0, 0)
    automaton = _automaton(distinct)
    return Matcher(
        tuple(distinct), prefixes, opener, any_stop, frozenset(first), longest, shortest, automaton
    )


def _automaton(stops: list[str]) -> dict[str, dict[str, Transition]]:
    """The Aho-Corasick automaton of ``stops`` (longest first), built directly from its definition:
    a few dozen states over the stop strings' own characters.
    """
    states = sorted({stop[:size] for stop in stops for size in range(len(stop) + 1)}, key=len)
    alphabet = sorted({char for stop in stops for char in stop})
    tables: dict[str, dict[str, Transition]] = {state: {} for state in states}
    for state in states:
        for char in alphabet:
            text = state + char
            target = next(text[cut:] for cut in range(len(text) + 1) if text[cut:] in tables)
            stop = next((stop for stop in stops if text.endswith(stop)), None)
            if target or stop is not None:
                tables[state][char] = (target, stop, tables[target])
    return tables


def find_stop(matcher: Matcher, text: str, after: int) -> Match | None:
    """The earliest-completing stop string in ``text`` that ends after position ``after``.

    "Earliest completing" is the smallest end position; of several stop strings ending at the same
    position, the longest (the one that starts earliest) wins. Text up to ``after`` has been
    searched already (or must not be searched), but a match may start inside it.
    """
    best: Match | None = None
    if len(text) < matcher.shortest:
        return best
    for stop in matcher.stops:
        start = text.find(stop, max(0, after - len(stop) + 1))
        if start < 0:
            continue
        end = start + len(stop)
        # Longest first, so at an equal end the earlier-starting match is already kept.
        if best is None or end < best.end:
            best = Match(stop, start, end)
    return best


def held_from(matcher: Matcher, text: str) -> int:
    """Where the longest suffix of ``text`` that is a proper prefix of a stop string begins.

    That suffix could still grow into a stop string, so it is held back. No match that ends later
    can start before it: from such a start, the rest of ``text`` is not a proper prefix of any stop
    string.
    Returns ``len(text)`` when nothing needs holding. Cost: at most ``longest - 1`` lookups, one per
    first character of a stop string among the last ``longest - 1`` characters.
    """
    prefixes, search = matcher.prefixes, matcher.opener.search
    found = search(text, max(0, len(text) - matcher.longest + 1))
    while found is not None:
        position = found.start()
        if text[position:] in prefixes:
            return position
        found = search(text, position + 1)
    return len(text)


def scan(matcher: Matcher, held: str, text: str) -> tuple[Match | None, str]:
    """Run ``text`` through the automaton from the state ``held``.

    Returns the earliest-completing match in ``held + text`` (positions in that string; it ends
    inside ``text``) and None for the state, or no match and the new state: the longest suffix of
    ``held + text`` that is a prefix of a stop string, which is what must be held back. The same
    answers as :func:`find_stop` and :func:`held_from`, in one pass over ``text`` alone.
    """
    root = matcher.automaton[""]
    state, table = held, matcher.automaton[held]
    end = len(held)
    for char in text:
        end += 1
        step = table.get(char)
        if step is None:
            state, table = "", root
            continue
        state, stop, table = step
        if stop is not None:
            return Match(stop, end - len(stop), end), ""
    return None, state
