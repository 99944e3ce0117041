"""Stop strings in streamed text: the earliest-completing match, and what must still be held back.

One matcher answers both questions: :func:`scan` runs an Aho-Corasick automaton whose state is the
held text (the longest suffix of the output that could still start a stop string) over the new
text only, never rescanning the output: no match can begin before the held text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import TypeAlias

import attrs

Goto: TypeAlias = Mapping[int, int]
"""The trie of the stop strings: the child of state ``s`` (``0`` is ``""``) by character ``c`` is
``goto[s << 21 | ord(c)]`` (one flat table: a few dozen bytes per state)."""

_SHIFT = 21
"""Bits of a character in a :data:`Goto` key (code points are below ``1 << 21``)."""

SHALLOW = 32
"""Held text up to this long is found by a dict of the prefixes this long or shorter (built in time
linear in the number of stop strings); longer held text by its fingerprint (see :func:`_fingerprint`).
No table holds every prefix of a long stop string: that would cost the square of its length."""

_PRIME = (1 << 61) - 1
_BASE = (1 << 32) % _PRIME


def _fingerprint(text: str) -> int:
    """``sum(ord(c) * 2**(32 * k))`` over the characters of ``text``, modulo a prime: computed at C
    speed, and for each prefix of a stop string in one step from the one before it.
    """
    return int.from_bytes(text.encode("utf-32-le", "surrogatepass"), "little") % _PRIME


@attrs.frozen
class Matcher:
    """A set of stop strings, prepared for matching (built once per :class:`StopRules`), in time
    and size linear in their total length.
    """

    stops: tuple[str, ...]
    """The distinct stop strings, longest first."""
    opener: re.Pattern[str]
    """Finds the first character of any stop string: while nothing is held, :func:`scan` skips to
    it (it never matches when there are no stop strings)."""
    openers: frozenset[str]
    """The first characters of the stop strings (the steady path's check: ``isdisjoint``)."""
    longest: int
    """The length of the longest stop string (0 when there is none)."""
    shortest: int
    """The length of the shortest stop string: shorter text cannot hold a match."""
    goto: Goto
    """The Aho-Corasick automaton's trie: its states are the prefixes of the stop strings (state
    ``0`` is ``""``), and a stream's held text names its state, so a token's text is matched in
    one pass."""
    fail: Sequence[int]
    """Per state, the state of its longest proper suffix that is a state (``0`` for ``0``)."""
    inner: bytes
    """Per state, 1 if it has a child (its prefix is a proper prefix of a stop string), else 0."""
    output: Sequence[int]
    """Per state, the index in :attr:`stops` of the longest stop string it ends with (-1: none)."""
    depth: Sequence[int]
    """Per state, the length of its prefix."""
    origin: Sequence[int]
    """Per state, the index in :attr:`stops` of a stop string it is a prefix of."""
    shallow: Mapping[str, int]
    """The states of the prefixes of at most :data:`SHALLOW` characters, by their text."""
    deep: Mapping[tuple[int, int], int]
    """The states of the longer prefixes, by their length and :func:`_fingerprint`."""

    @property
    def prefixes(self) -> Prefixes:
        """Every non-empty proper prefix of a stop string: the text worth holding back (``in``)."""
        return Prefixes(self)

    def state_of(self, text: str) -> int | None:
        """The state whose prefix is ``text``, or None if ``text`` is not a prefix of a stop string.

        Costs a dict lookup for short text; for longer text, about two passes over it at C speed.
        """
        if len(text) <= SHALLOW:
            return self.shallow.get(text)
        state = self.deep.get((len(text), _fingerprint(text)))
        if (
            state is not None
            and self.depth[state] == len(text)
            and self.stops[self.origin[state]].startswith(text)
        ):
            return state
        # A fingerprint collision (or no such prefix): walk the trie.
        goto, state = self.goto, 0
        for char in text:
            child = goto.get(state << _SHIFT | ord(char))
            if child is None:
                return None
            state = child
        return state

    def text_of(self, state: int) -> str:
        """The prefix of ``state``."""
        return self.stops[self.origin[state]][: self.depth[state]]


@attrs.frozen
class Prefixes:
    """The non-empty proper prefixes of a matcher's stop strings, as a set one can ask ``in``."""

    matcher: Matcher

    def __contains__(self, text: object) -> bool:
        if type(text) is not str or not text:
            return False
        state = self.matcher.state_of(text)
        return state is not None and bool(self.matcher.inner[state])


@attrs.frozen
class Match:
    """An occurrence of a stop string: ``text[start:end] == stop``."""

    stop: str
    start: int
    end: int


def compile_stops(stops: Iterable[str]) -> Matcher:
    """Prepare stop strings (already validated as non-empty strings) for matching, in time and
    size linear in their total length.
    """
    distinct = sorted(set(stops), key=lambda stop: (-len(stop), stop))
    first = sorted({stop[0] for stop in distinct})
    opener = re.compile("[" + "".join(map(re.escape, first)) + "]" if first else "(?!)")
    longest, shortest = (len(distinct[0]), len(distinct[-1])) if distinct else (0, 0)
    goto: dict[int, int] = {}
    depth, origin, output, parent, codes = [0], [0], [-1], [0], [0]
    shallow: dict[str, int] = {"": 0}
    deep: dict[tuple[int, int], int] = {}
    for index, stop in enumerate(distinct):
        state, print_, power = 0, 0, 1
        for size, char in enumerate(stop, 1):
            code = ord(char)
            print_ = (print_ + code * power) % _PRIME
            power = power * _BASE % _PRIME
            key = state << _SHIFT | code
            child = goto.get(key)
            if child is None:
                child = goto[key] = len(depth)
                depth.append(size)
                origin.append(index)
                output.append(-1)
                parent.append(state)
                codes.append(code)
                if size <= SHALLOW:
                    shallow[stop[:size]] = child
                else:
                    deep.setdefault((size, print_), child)
            state = child
        output[state] = index  # the whole stop string (longest first: a duplicate cannot occur)
    fail = _failure_links(goto, depth, parent, codes, output)
    inner = bytearray(len(depth))
    for state in parent[1:]:
        inner[state] = 1
    return Matcher(
        tuple(distinct),
        opener,
        frozenset(first),
        longest,
        shortest,
        goto,
        tuple(fail),
        bytes(inner),
        tuple(output),
        tuple(depth),
        tuple(origin),
        shallow,
        deep,
    )


def _failure_links(
    goto: dict[int, int], depth: list[int], parent: list[int], codes: list[int], output: list[int]
) -> list[int]:
    """The Aho-Corasick failure links, state by state in order of depth (breadth first), and the
    outputs completed along them (a state ending with a stop string that is not itself one gets
    the longest such stop string): time linear in the number of states.
    """
    levels: list[list[int]] = [[] for _ in range(max(depth) + 1)]
    for state in range(1, len(depth)):
        levels[depth[state]].append(state)
    fail = [0] * len(depth)
    for level in levels[2:]:  # depth 1 fails to the root
        for child in level:
            code, link = codes[child], fail[parent[child]]
            while link and (link << _SHIFT | code) not in goto:
                link = fail[link]
            fail[child] = target = goto.get(link << _SHIFT | code, 0)
            if output[child] < 0:
                output[child] = output[target]
    return fail


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
    reported, only the new state. One pass over ``text`` alone (and, for held text longer than
    :data:`SHALLOW`, one over it).
    """
    goto, fail, output = matcher.goto, matcher.fail, matcher.output
    if held:
        found_state = matcher.state_of(held)
        if found_state is None:
            raise ValueError(f"held text {held!r} is not a prefix of a stop string")
        state = found_state
    else:
        state = 0
    start, index, size = state, 0, len(text)
    while index < size:
        if not state and size - index > SKIP:
            found = matcher.opener.search(text, index)
            if found is None:
                return None, ""
            index = found.start()
        char = text[index]
        index += 1
        code = ord(char)
        while True:
            child = goto.get(state << _SHIFT | code)
            if child is not None:
                state = child
                break
            if not state:
                break
            state = fail[state]
        if search:
            stop = output[state]
            if stop >= 0:
                end = len(held) + index
                word = matcher.stops[stop]
                return Match(word, end - len(word), end), ""
    inner = matcher.inner
    while state and not inner[state]:  # a whole stop string, not searched: its longest proper part
        state = fail[state]
    if state == start:
        return None, held
    return None, matcher.text_of(state) if state else ""
