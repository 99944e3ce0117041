"""Support for G3 (nothing certain is held) as a property that asserts in most examples.

Random ids rarely leave anything held (a stream of random tokens mostly ends on a whole character),
so a G3 property over them returns early in most examples. Here the ids end with a *holding tail*:
a continuation that, after plain text, leaves text held that ``finish`` would show (a split UTF-8
character, a byte-fallback run, the start of a cleanup pattern, of a timestamp, of an end-of-word
suffix...), found once per codec among candidates. :class:`Tally` counts how many examples still
hold nothing, so that a test can assert that rate is low.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import attrs
from hypothesis import event
from hypothesis import strategies as st

from puredetok import Codec, feed, finish, start

MAX_EARLY_RETURNS = 0.2
"""The share of examples a G3 property may spend on streams that hold nothing."""

SPLIT_CHARACTERS = ("é", "€", "推", "鱻", "🦩", "ก", "한")
"""Characters of two, three and four UTF-8 bytes whose beginnings are held."""

CLEANUP_TEXTS = ("a ", "a '", "a n", "x .", "do n", "I '", "a  ", " ", "\n ")
"""Texts that end where a space cleanup (or a strip) may still change them."""


def held_after(c: Codec, ids: Sequence[int]) -> str:
    """What a fresh stream holds after ``ids``."""
    state, _ = feed(start(c), ids)
    return finish(state)


def holding_tails(
    c: Codec, candidates: Iterable[Sequence[int]], separator: Sequence[int] = ()
) -> tuple[tuple[int, ...], ...]:
    """The candidates after which a stream of ``c`` holds something, after ``separator`` (in order,
    no repeats)."""
    tails = dict.fromkeys(tuple(candidate) for candidate in candidates if candidate)
    return tuple(tail for tail in tails if held_after(c, [*separator, *tail]))


def ending_with(
    c: Codec,
    prefixes: st.SearchStrategy[list[int]],
    separator: Sequence[int],
    tails: Sequence[tuple[int, ...]],
    tries: int = 8,
) -> st.SearchStrategy[list[int]]:
    """Ids drawn from ``prefixes``, then ``separator`` (plain text that ends most of what a prefix
    leaves open: a byte run, a character), then one of ``tails``: the first of up to ``tries``
    drawn after which ``c`` holds something there (the prefix may still change what a tail does).
    Just the prefixes if there are no tails."""
    if not tails:
        return prefixes

    @st.composite
    def ending(draw: st.DrawFn) -> list[int]:
        ids = [*draw(prefixes), *separator]
        for _ in range(tries):
            tail = draw(st.sampled_from(tails))
            if held_after(c, [*ids, *tail]):
                break
        return [*ids, *tail]

    return ending()


def can_change(c: Codec, ids: Sequence[int], witnesses: Iterable[Sequence[int]]) -> tuple[str, bool]:
    """What the stream of ``ids`` holds, and whether some witness continuation changes it (the
    text emitted plus what the continuation emits and holds no longer starts with the held text)."""
    state, emitted = feed(start(c), ids)
    held = finish(state)
    if not held:
        return held, True
    for witness in witnesses:
        after, delta = feed(state, witness)
        if not (emitted + delta + finish(after)).startswith(emitted + held):
            return held, True
    return held, False


@attrs.define
class Tally:
    """How many examples of a property held something, and how many returned early."""

    held: int = 0
    empty: int = 0

    def count(self, held: str) -> None:
        """Count one example by what its stream held."""
        event("held something" if held else "held nothing")
        if held:
            self.held += 1
        else:
            self.empty += 1

    def assert_mostly_held(self, label: str) -> None:
        """Most examples held something (the property asserted in them)."""
        total = self.held + self.empty
        assert total and self.empty <= MAX_EARLY_RETURNS * total, (label, self)
