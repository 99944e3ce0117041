"""Stop strings in streamed text: the earliest-completing match, and what must still be held back.

Both questions are answered from a short window (the held text plus the new text), never by
rescanning the whole output: the held text is exactly the longest suffix of the output that could
still start a stop string, so no match can begin before it.
"""

from __future__ import annotations

__all__ = ["Matcher", "Match", "compile_stops", "find_stop", "held_from"]

import re
from collections.abc import Iterable

import attrs


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
    openers: frozenset[str]
    """The first characters of the stop strings (the per-token fast check: ``isdisjoint``)."""
    longest: int
    """The length of the longest stop string (0 when there is none)."""
    shortest: int
    """The length of the shortest stop string: shorter text cannot hold a match."""


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
    longest, shortest = (len(distinct[0]), len(distinct[-1])) if distinct else (0, 0)
    return Matcher(tuple(distinct), prefixes, opener, frozenset(first), longest, shortest)


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
