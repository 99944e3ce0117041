"""Comparing a streamed text with a reference text as both arrive, keeping only what is not yet
compared: memory bounded by how far one runs ahead of the other, not by their length.

:class:`Aligned` holds the engine's text and the reference's text not yet compared, the first
position where they differ, whether a U+FFFD the engine sent stands where the reference has
another character, and the last ``window`` characters of the reference compared (for a look back
at the end, such as whether a stop string ends there). :class:`StopFinder` finds where each stop
string first completes in a text streamed piece by piece, keeping a bounded carry.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import attrs

_FFFD = "\ufffd"


def common_prefix(a: str, b: str) -> int:
    """The length of the longest common prefix of ``a`` and ``b`` (C-level comparisons only)."""
    if b.startswith(a):
        return len(a)
    low, high = 0, min(len(a), len(b))  # a[:low] == b[:low]; they differ within a[:high + 1]
    while low < high:
        middle = (low + high + 1) // 2
        if a[low:middle] == b[low:middle]:
            low = middle
        else:
            high = middle - 1
    return low


class Pieces:
    """Text not yet compared, as the pieces it came in (taking from the front costs what it takes)."""

    def __init__(self) -> None:
        self.pieces: deque[str] = deque()
        self.offset = 0
        self.size = 0

    def push(self, text: str) -> None:
        """Add ``text`` at the end."""
        if text:
            self.pieces.append(text)
            self.size += len(text)

    def take(self, count: int) -> str:
        """Remove and return the first ``count`` characters (at most :attr:`size`)."""
        parts = []
        self.size -= count
        while count:
            piece = self.pieces[0]
            left = len(piece) - self.offset
            if left <= count:
                parts.append(piece[self.offset :] if self.offset else piece)
                self.pieces.popleft()
                self.offset = 0
                count -= left
            else:
                parts.append(piece[self.offset : self.offset + count])
                self.offset += count
                count = 0
        return "".join(parts)

    def text(self) -> str:
        """All the text held (joined once, and kept joined)."""
        if self.offset:
            self.pieces[0] = self.pieces[0][self.offset :]
            self.offset = 0
        if len(self.pieces) > 1:
            self.pieces = deque(["".join(self.pieces)])
        return self.pieces[0] if self.pieces else ""


@attrs.frozen
class Ending:
    """How the engine's whole text stands against one whole reference (see :meth:`Aligned.end`)."""

    differs: int | None
    """The first position where the engine's text is not the reference's (None: it is a prefix of
    it; its end, if it runs past the reference)."""
    engine_length: int
    reference_length: int
    fffd_elsewhere: bool
    """A U+FFFD was sent where the reference has another character, or none."""
    around: str
    """The reference from ``reference_length - len(around)`` to its end: at least the ``window``
    characters before the end of what both have (fewer only where the reference is shorter)."""


class Aligned:
    """The engine's text against a reference text, both fed piece by piece (see the module)."""

    def __init__(self, window: int = 0) -> None:
        self.window = window
        self.compared = 0
        """Characters compared (both texts had them)."""
        self.differs: int | None = None
        self.fffd_elsewhere = False
        self._kept: deque[str] = deque()  # the last pieces of the reference compared, ``window`` at least
        self._kept_size = 0
        self.work = 0
        """Characters compared so far."""
        self._engine = Pieces()
        self._reference = Pieces()

    def add(self, engine: str = "", reference: str = "") -> None:
        """More of either text."""
        self._engine.push(engine)
        self._reference.push(reference)
        count = min(self._engine.size, self._reference.size)
        if count:
            self._compare(self._engine.take(count), self._reference.take(count))

    def _compare(self, engine: str, reference: str) -> None:
        self.work += len(engine)
        if self.differs is None and engine != reference:
            self.differs = self.compared + common_prefix(engine, reference)
        if not self.fffd_elsewhere and self.differs is not None and _FFFD in engine:
            self.fffd_elsewhere = _fffd_elsewhere(engine, reference)
        if self.window:
            kept = self._kept
            kept.append(reference)
            self._kept_size += len(reference)
            while self._kept_size - len(kept[0]) >= self.window:
                self._kept_size -= len(kept.popleft())
        self.compared += len(engine)

    @property
    def kept(self) -> str:
        """The last ``window`` characters of the reference compared (all of it, if fewer)."""
        kept = "".join(self._kept)
        return kept[len(kept) - self.window :] if len(kept) > self.window else kept

    def engine_rest(self) -> str:
        """The engine's text not yet compared."""
        return self._engine.text()

    def agrees_so_far(self, tail: str) -> bool:
        """Whether the engine's text is a prefix of the reference so far followed by ``tail``."""
        if self.differs is not None:
            return False
        rest = self._engine.text()
        if not rest:
            return True
        self.work += len(rest)
        return (self._reference.text() + tail).startswith(rest)

    def end(self, tail: str) -> Ending:
        """The engine's text (as it stands) against the reference so far followed by ``tail``,
        without changing this comparison (so that it can end against several tails).
        """
        engine, reference = self._engine.text(), self._reference.text() + tail
        self.work += len(engine) + len(reference)
        size = min(len(engine), len(reference))
        differs = self.differs
        if differs is None:
            if engine[:size] != reference[:size]:
                differs = self.compared + common_prefix(engine[:size], reference[:size])
            elif len(engine) > len(reference):
                differs = self.compared + len(reference)
        fffd = self.fffd_elsewhere
        if not fffd and _FFFD in engine:
            fffd = _fffd_elsewhere(engine[:size], reference[:size]) or _FFFD in engine[size:]
        return Ending(
            differs,
            self.compared + len(engine),
            self.compared + len(reference),
            fffd,
            self.kept + reference,
        )


def _fffd_elsewhere(engine: str, reference: str) -> bool:
    """Some U+FFFD of ``engine`` stands where ``reference`` (as long) has another character."""
    at = engine.find(_FFFD)
    while at >= 0:
        if reference[at] != _FFFD:
            return True
        at = engine.find(_FFFD, at + 1)
    return False


class StopFinder:
    """Where each stop string first completes (the position just after it) in a text fed piece by
    piece; it keeps the last characters a match may start in, and searches in steps of at least
    ``step`` characters (each character is searched about twice per stop string). The text it
    gives back (:meth:`add`, :meth:`flush`) has been searched.
    """

    def __init__(self, stops: Sequence[str], step: int = 4096) -> None:
        self.stops = tuple(dict.fromkeys(stop for stop in stops if stop))
        self.longest = max(map(len, self.stops), default=0)
        self.step = max(step, self.longest)
        self.ends: dict[str, int] = {}
        """Where each stop string found so far first completes, in the order they were found."""
        self.work = 0
        self._carry = ""
        self._pending: list[str] = []
        self._size = 0
        self._seen = 0
        """Characters fed so far (the carry and the pending pieces end there)."""

    def add(self, text: str) -> str:
        """More of the text; the text searched now (all that is held, once it reaches ``step``)."""
        self._seen += len(text)
        if not text or len(self.ends) == len(self.stops):
            return text
        self._pending.append(text)
        self._size += len(text)
        return self.flush() if self._size >= self.step else ""

    def flush(self) -> str:
        """Search all the text held, and give it back."""
        held = "".join(self._pending)
        text = self._carry + held
        self._search(text, self._seen - len(text), self.ends)
        self._carry = text[-(self.longest - 1) :] if self.longest > 1 else ""  # all, if shorter
        self._pending, self._size = [], 0
        return held

    def _search(self, text: str, base: int, ends: dict[str, int]) -> None:
        for stop in self.stops:
            if stop not in ends:
                self.work += len(text)
                at = text.find(stop)
                if at >= 0:
                    ends[stop] = base + at + len(stop)

    def ends_with(self, tail: str) -> dict[str, int | None]:
        """Where each stop string first completes in the text so far followed by ``tail``
        (without changing this finder).
        """
        ends = dict(self.ends)
        text = self._carry + "".join(self._pending) + tail
        self._search(text, self._seen + len(tail) - len(text), ends)
        return {stop: ends.get(stop) for stop in self.stops}
