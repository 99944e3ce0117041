"""Stop strings in streamed text: the earliest-completing match, and what must still be held back.

One matcher answers both questions: :func:`scan` runs an Aho-Corasick automaton whose state is the
held text (the longest suffix of the output that could still start a stop string) over the new
text only, never rescanning the output: no match can begin before the held text.

:func:`find_stop` and :func:`held_from` give the same answers by their plain definitions (a search
for each stop string, a look at each suffix). Nothing in the stop layer uses them: they are the
oracle the tests check the automaton against (tests/test_stop_matcher.py).
"""

from __future__ import annotations

__all__ = ["Matcher", "Match", "Goto", "compile_stops", "scan", "find_stop", "held_from"]

import re
from collections import deque
from collections.abc import Iterable, Mapping
from typing import TypeAlias

import attrs

Goto: TypeAlias = Mapping[str, Mapping[str, str]]
"""The trie of the stop strings: per prefix (``""`` included), the prefixes one character longer."""


@attrs.frozen
class Matcher:
    """A set of stop strings, prepared for matching (built once per :class:`StopRules`)."""

    stops: tuple[str, ...]
    """The distinct stop strings, longest first."""
    prefixes: frozenset[str]
    """Every non-empty proper prefix of a stop string: the text worth holding back."""
    opener: re.Pattern[str]
    """Finds the first character of any stop string: while nothing is held, :func:`scan` skips to
    it (it never matches when there are no stop strings)."""
    openers: frozenset[str]
    """The first characters of the stop strings (the per-token fast check: ``isdisjoint``)."""
    longest: int
    """The length of the longest stop string (0 when there is none)."""
    shortest: int
    """The length of the shortest stop string: shorter text cannot hold a match."""
    goto: Goto
    """The Aho-Corasick automaton's trie: its states are the prefixes of the stop strings (``""``
    included), and a stream's held text is its state, so a token's text is matched in one pass."""
    fail: Mapping[str, str]
    """Per non-empty state, the longest proper suffix of it that is a state."""
    output: Mapping[str, str]
    """Per state that ends with a stop string, the longest such stop string."""


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
    goto, fail, output = _automaton(distinct)
    return Matcher(tuple(distinct), prefixes, opener, frozenset(first), longest, shortest, goto, fail, output)


def _automaton(stops: list[str]) -> tuple[dict[str, dict[str, str]], dict[str, str], dict[str, str]]:
    """The Aho-Corasick automaton of ``stops``: the trie, the failure links (built breadth first)
    and the outputs, in time and size linear in the stop strings' total length.
    """
    goto: dict[str, dict[str, str]] = {"": {}}
    for stop in stops:
        for size in range(len(stop)):
            goto.setdefault(stop[: size + 1], {})
            goto[stop[:size]][stop[size]] = stop[: size + 1]
    fail: dict[str, str] = {}
    output: dict[str, str] = {}
    stop_set = frozenset(stops)
    order = deque([""])
    while order:
        state = order.popleft()
        for char, child in goto[state].items():
            order.append(child)
            link = fail.get(state, "")
            while state and char not in goto[link] and link:
                link = fail[link]
            target = goto[link].get(char, "") if state else ""
            fail[child] = target if target != child else ""
            if child in stop_set:
                output[child] = child  # itself: the longest stop string it ends with
            elif fail[child] in output:
                output[child] = output[fail[child]]
    return goto, fail, output


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


SKIP = 8
"""While its state is ``""``, :func:`scan` skips to the next character that starts a stop string
with one regular-expression search when more than this many characters are left: a search costs
about as much as this many steps of the automaton (see docs/benchmarks.md)."""


def scan(matcher: Matcher, held: str, text: str, search: bool = True) -> tuple[Match | None, str]:
    """Run ``text`` through the automaton from the state ``held`` (``""`` or a proper prefix of a
    stop string: what the stream holds).

    Returns the earliest-completing match in ``held + text`` (positions in that string; it ends
    inside ``text``) and ``""``, or no match and the new state: the longest suffix of
    ``held + text`` that is a proper prefix of a stop string, which is what must be held back.
    With ``search=False`` (text that must not be searched: within ``min_tokens``) no match is
    reported, only the new state. The same answers as :func:`find_stop` and :func:`held_from`, in
    one pass over ``text`` alone.
    """
    goto, fail, output = matcher.goto, matcher.fail, matcher.output
    state, index, size = held, 0, len(text)
    while index < size:
        if not state and size - index > SKIP:
            found = matcher.opener.search(text, index)
            if found is None:
                return None, ""
            index = found.start()
        char = text[index]
        index += 1
        while True:
            child = goto[state].get(char)
            if child is not None:
                state = child
                break
            if not state:
                break
            state = fail[state]
        if search:
            stop = output.get(state)
            if stop is not None:
                end = len(held) + index
                return Match(stop, end - len(stop), end), ""
    while state and not goto[state]:  # a whole stop string, not searched: its longest proper part
        state = fail[state]
    return None, state
