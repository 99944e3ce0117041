"""Python's ``str.strip()`` over a stream: what ``transformers`` classes do to their whole decoded
text (CLIP, the CTC speech tokenizers, Marian).

Leading whitespace is dropped as it arrives. Trailing whitespace cannot be sent until something
that is not whitespace follows it (then it was inside the text) or the stream ends (then it is
stripped), so a run of whitespace is held: this hold is as long as the run, which only text made
of nothing but whitespace makes long. It is kept as runs of repeated pieces, so a stream repeating
one whitespace token keeps a state of constant size and each step costs O(1).
"""

from __future__ import annotations

from typing import Any

import attrs

from puredetok._core.decoders.base import MISS, Lanes, OneAtATime, Piece


@attrs.frozen(eq=False, repr=False)
class HeldSpace:
    """Held whitespace as linked runs, newest first: ``count`` copies of ``piece`` after ``older``."""

    older: HeldSpace | None
    piece: str
    count: int
    size: int

    def add(self, text: str) -> HeldSpace:
        """This text followed by ``text``."""
        if text == self.piece:
            return HeldSpace(self.older, self.piece, self.count + 1, self.size + len(text))
        return HeldSpace(self if self.count else self.older, text, 1, self.size + len(text))

    def runs(self) -> list[tuple[str, int]]:
        """The runs, oldest first."""
        runs = []
        node: HeldSpace | None = self
        while node is not None:
            if node.count:
                runs.append((node.piece, node.count))
            node = node.older
        return runs[::-1]

    def __str__(self) -> str:
        return "".join(piece * count for piece, count in self.runs())

    def __len__(self) -> int:
        return self.size

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, HeldSpace):
            return NotImplemented
        return self.size == other.size and str(self) == str(other)

    def __hash__(self) -> int:
        return hash(str(self))

    def __repr__(self) -> str:
        return f"HeldSpace({str(self)!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_from_runs, (self.runs(),))


EMPTY_SPACE = HeldSpace(None, "", 0, 0)
"""No whitespace held."""


def _from_runs(runs: list[tuple[str, int]]) -> HeldSpace:
    held = EMPTY_SPACE
    for piece, count in runs:
        held = HeldSpace(held if held.count else None, piece, count, held.size + len(piece) * count)
    return held


@attrs.frozen
class StripStage(OneAtATime):
    """``str.strip()`` of the whole output: the hold is ``(started, held whitespace)``."""

    initial: tuple[bool, HeldSpace] = (False, EMPTY_SPACE)
    idle: tuple[bool, HeldSpace] = (True, EMPTY_SPACE)

    def push(self, hold: tuple[bool, HeldSpace], value: str, glued: bool) -> tuple[Any, list[Piece]]:
        """Drop leading whitespace, hold trailing whitespace, release it when text follows."""
        started, held = hold
        if not started:
            value = value.lstrip()
            if not value:
                return hold, []
            started = True
        core = value.rstrip()
        if not core:
            return (started, held.add(value)), []
        text = str(held) + core if held.size else core
        tail = value[len(core) :]
        return (True, EMPTY_SPACE.add(tail) if tail else EMPTY_SPACE), [(text, True)]

    def push_lanes(self, hold: tuple[bool, HeldSpace], values: list[Any], glued: bool) -> Lanes | None:
        """With no whitespace held: each value (without leading whitespace at the start) that does
        not end in whitespace passes; any other takes another path.
        """
        started, held = hold
        if held.size:
            return None
        outs: list[Any] = []
        for value in values:
            text = value if started else value.lstrip()
            outs.append(text if text and not text[-1].isspace() else MISS)
        return outs, (True, EMPTY_SPACE), True

    def flush(self, hold: tuple[bool, HeldSpace]) -> list[Piece]:
        """Trailing whitespace is stripped."""
        return []

    def is_hold(self, hold: object) -> bool:
        """``(started, held whitespace)``: runs of whitespace only."""
        if type(hold) is not tuple or len(hold) != 2 or type(hold[0]) is not bool:
            return False
        held = hold[1]
        return type(held) is HeldSpace and all(not piece.strip() for piece, _ in held.runs())
