"""``Metaspace`` (T5 and other SentencePiece tokenizers): ``▁`` stands for a space, and in the
output's first token (unless the prepend scheme is ``never``) every ``▁`` is dropped instead.
"""

from __future__ import annotations

from typing import Any

import attrs

from puredetok._core.decoders.base import MISS, Lanes, OneAtATime, Piece, Stage, Tokenwise

_NOTHING_YET, _FIRST, _LATER = 0, 1, 2


@attrs.frozen
class MetaspaceStage(OneAtATime):
    """Metaspace over fragments; the hold says which element the fragments belong to."""

    replacement: str
    drops_in_first: bool
    initial: int = _NOTHING_YET
    idle: int = _LATER

    def push(self, hold: int, value: str, glued: bool) -> tuple[int, list[Piece]]:
        """Map the replacement character according to the element it is in."""
        if not self.drops_in_first:
            # Every element maps it alike: which one this is does not matter, so the hold is idle
            # at once, also after a decoder that joins tokens (where it would stay "first").
            text = value.replace(self.replacement, " ")
            return _LATER, ([(text, glued)] if text or not glued else [])
        where = _FIRST if hold == _NOTHING_YET else (hold if glued else _LATER)
        drop = where == _FIRST and self.drops_in_first
        text = value.replace(self.replacement, "" if drop else " ")
        return where, ([(text, glued)] if text or not glued else [])  # an empty element is one

    def push_lanes(self, hold: int, values: list[Any], glued: bool) -> Lanes:
        """Each value mapped as in the element it is in; one that gives no text takes another path."""
        if not self.drops_in_first:
            where, content = _LATER, " "
        else:
            where = _FIRST if hold == _NOTHING_YET else (hold if glued else _LATER)
            content = "" if where == _FIRST else " "
        replacement = self.replacement
        outs: list[Any] = []
        for value in values:
            text = value.replace(replacement, content)
            outs.append(text if text else MISS)
        return outs, where, glued

    def settle(self, tail: Any, solid: bool) -> tuple[str, bool] | None:
        """Where every element maps the replacement alike, the hold is idle after any piece (and
        a one-character replacement maps the tail character by character). Where the first
        element drops it, which element a glued piece belongs to is its history: None.
        """
        if self.drops_in_first or type(tail) is not str:
            return None
        if len(self.replacement) != 1:
            return "", True
        return tail.replace(self.replacement, " "), True

    def flush(self, hold: int) -> list[Piece]:
        """Nothing is held."""
        return []

    def is_hold(self, hold: object) -> bool:
        """Which element the fragments belong to."""
        return type(hold) is int and hold in (_NOTHING_YET, _FIRST, _LATER)


@attrs.frozen
class Metaspace(Tokenwise):
    """The Metaspace decoder."""

    replacement: str
    prepend_scheme: str

    @property
    def depends_on_first(self) -> bool:
        """With a prepend scheme, the first token loses its ``▁`` characters."""
        return self.prepend_scheme != "never"

    def map_token(self, token: Any, first: bool) -> str:
        """Map one whole token."""
        drop = first and self.depends_on_first
        return str(token).replace(self.replacement, "" if drop else " ")

    def map_tokens(self, tokens: list[Any], first: bool) -> list[Any]:
        """Every token mapped."""
        replacement = self.replacement
        content = "" if first and self.depends_on_first else " "
        return [
            token.replace(replacement, content)
            if type(token) is str
            else (None if token is None else str(token).replace(replacement, content))
            for token in tokens
        ]

    def fragment_stage(self) -> Stage:
        """After a join the output is one element: its fragments all belong to the first."""
        return MetaspaceStage(self.replacement, self.depends_on_first)
