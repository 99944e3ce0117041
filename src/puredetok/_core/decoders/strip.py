"""``Strip``: removes up to ``start`` leading and ``stop`` trailing ``content`` characters of each
element. After ``Fuse`` there is one element, so Llama-2's ``Strip(" ", 1, 0)`` removes the one
space that starts the whole output.
"""

from __future__ import annotations

from itertools import repeat
from typing import Any

import attrs

from puredetok._core.decoders.base import MISS, Lanes, OneAtATime, Piece, Stage, Tokenwise


@attrs.frozen
class StripStage(OneAtATime):
    """Strip over glued fragments: the hold is (leading budget left, trailing run held back)."""

    content: str
    start: int
    stop: int

    @property
    def initial(self) -> tuple[int, str]:
        """At the start of the first element the whole leading budget is left."""
        return (self.start, "")

    @property
    def idle(self) -> tuple[int, str]:
        """Inside an element, past its start, nothing held."""
        return (0, "")

    def push(self, hold: tuple[int, str], value: str, glued: bool) -> tuple[tuple[int, str], list[Piece]]:
        """Strip what may be stripped; hold a trailing run that may be the element's end."""
        left, trail = hold
        if glued and not left and not trail and not self.stop:  # inside the element: it passes
            return hold, ([(value, True)] if value else [])
        if not glued:
            # A new element: the held trailing run was the old element's end, so it is stripped.
            left, trail = self.start, ""
        i = 0
        while left and i < len(value):
            if value[i] != self.content:
                left = 0
                break
            i += 1
            left -= 1
        text = trail + value[i:] if i else trail + value
        if self.stop:
            # Only content after the stripped start can be a trailing run (the crate's min()).
            k = 0
            while k < self.stop and k < len(text) and text[-1 - k] == self.content:
                k += 1
            text, trail = text[: len(text) - k], text[len(text) - k :]
        # A new element is one for the stages after, even with no text yet (its start ends theirs).
        return (left, trail), ([(text, glued)] if text or not glued else [])

    def push_lanes(self, hold: tuple[int, str], values: list[Any], glued: bool) -> Lanes | None:
        """Without a trailing strip or a held run: each value loses what is left of the leading
        budget; a value that is all stripped (or empty) takes another path.
        """
        left, trail = (self.start, "") if not glued else hold
        if self.stop or trail or len(self.content) != 1:
            return None
        if not left:
            return [value if value else MISS for value in values], (0, ""), glued
        content = self.content
        outs: list[Any]
        if left == 1:
            outs = list(map(str.removeprefix, values, repeat(content)))
            if "" in outs:
                outs = [out if out else MISS for out in outs]
            return outs, (0, ""), glued
        outs = []
        for value in values:
            leading = len(value) - len(value.lstrip(content))
            if leading >= left:
                out = value[left:]
            elif leading < len(value):
                out = value[leading:]
            else:
                out = ""
            outs.append(out if out else MISS)
        return outs, (0, ""), glued

    def settle(self, tail: Any, solid: bool) -> tuple[str, bool] | None:
        """Without a trailing strip, a piece with a character other than ``content`` uses up the
        leading budget (whatever was left of it, glued or not), and nothing is held after it; the
        characters after the tail's last ``content`` are never stripped. An empty unglued piece
        after it would start a new element (so ``solid`` is needed).
        """
        if not solid or self.stop or len(self.content) != 1 or type(tail) is not str:
            return None
        rest = tail[tail.rfind(self.content) + 1 :]
        return (rest, True) if rest else None

    def ahead(self, hold: tuple[int, str]) -> str:
        """The held trailing run: text after it releases it (or as much of it as a longer run
        pushes out), and if nothing follows it is stripped.
        """
        return hold[1]

    def flush(self, hold: tuple[int, str]) -> list[Piece]:
        """The element ends: its held trailing run is stripped."""
        return []

    def is_hold(self, hold: object) -> bool:
        """``(leading budget left, trailing run)``, within the strip's own bounds."""
        if type(hold) is not tuple or len(hold) != 2 or type(hold[0]) is not int or type(hold[1]) is not str:
            return False
        left, trail = hold
        return 0 <= left <= self.start and len(trail) <= self.stop and trail == self.content * len(trail)


@attrs.frozen
class Strip(Tokenwise):
    """The Strip decoder."""

    content: str
    start: int
    stop: int
    depends_on_first = False

    def map_token(self, token: Any, first: bool) -> str:
        """Strip one whole token."""
        chars = str(token)
        start_cut = 0
        for i in range(min(self.start, len(chars))):
            if chars[i] != self.content:
                break
            start_cut = i + 1
        stop_cut = len(chars)
        for i in range(min(self.stop, len(chars) - start_cut)):
            index = len(chars) - i - 1
            if chars[index] != self.content:
                break
            stop_cut = index
        return chars[start_cut:stop_cut]

    def fragment_stage(self) -> Stage:
        """After a join: strip the joined element as it streams."""
        return StripStage(self.content, self.start, self.stop)
