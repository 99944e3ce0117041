"""``Replace``: replaces a literal string in each element (Llama-2's ``"▁" -> " "``).

As a stage over a joined stream it is exact for any chunking: matches are found left to right
without overlap, like ``str.replace``, and only a trailing proper prefix of the pattern is held.
``transformers``' cleanup is a cascade of these (:mod:`.cleanup`).
"""

from __future__ import annotations

__all__ = ["Replace", "ReplaceStage"]

from typing import Any

import attrs

from puredetok.core.decoders.base import Group, Piece, Stage, Unmodelled, push_each


@attrs.frozen
class ReplaceStage:
    """Streaming ``str.replace``; the hold is (held text, whether it starts a new element)."""

    pattern: str
    content: str

    @property
    def initial(self) -> tuple[str, bool]:
        """Nothing held; the next text starts the first element."""
        return ("", True)

    @property
    def idle(self) -> tuple[str, bool]:
        """Nothing held, inside an element."""
        return ("", False)

    def push(self, hold: tuple[str, bool], value: str, glued: bool) -> tuple[tuple[str, bool], list[Piece]]:
        """Replace every match that is complete; hold a tail that could still become one."""
        buf, fresh = hold
        out: list[Piece] = []
        if not glued:
            if buf:
                out.append((buf, not fresh))
            buf, fresh = "", True
        text = buf + value if buf else value
        pattern = self.pattern
        if pattern in text:
            parts = text.split(pattern)
            text = self.content.join(parts[:-1]) + self.content
            rest = parts[-1]
        else:
            text, rest = "", text
        keep = 0
        for k in range(min(len(pattern) - 1, len(rest)), 0, -1):
            if rest.endswith(pattern[:k]):
                keep = k
                break
        text += rest[: len(rest) - keep]
        if text:
            out.append((text, not fresh))
            fresh = False
        return (rest[len(rest) - keep :], fresh), out

    def push_run(self, hold: Any, values: list[Any], glued: bool) -> tuple[Any, list[Group]]:
        """One at a time."""
        return push_each(self, hold, values, glued)

    def flush(self, hold: tuple[str, bool]) -> list[Piece]:
        """A held tail that never completed the pattern is text."""
        buf, fresh = hold
        return [(buf, not fresh)] if buf else []


@attrs.frozen
class Replace:
    """The Replace decoder with a literal pattern."""

    pattern: str
    content: str
    depends_on_first = False

    def map_token(self, token: Any, first: bool) -> str:
        """Replace in one whole token."""
        return str(token).replace(self.pattern, self.content)

    def stage(self) -> Stage | None:
        """Whole tokens need no memory."""
        return None

    def fragment_stage(self) -> Stage:
        """After a join: replace across fragments."""
        if not self.pattern:
            raise Unmodelled("Replace with an empty pattern after a decoder that joins tokens")
        return ReplaceStage(self.pattern, self.content)
