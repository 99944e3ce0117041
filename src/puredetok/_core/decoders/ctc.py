"""``CTC`` (speech models such as wav2vec2 through ``tokenizers``): consecutive equal tokens count
once; then each token loses every pad token in it and, with ``cleanup``, gets WordPiece's cleanup
and its word delimiter turned into a space. Empty results are dropped.

The only memory is the previous token (for the grouping); nothing is ever held back.
"""

from __future__ import annotations

from typing import Any

import attrs

from puredetok._core.decoders.base import OneAtATime, Piece, Stage, Unmodelled
from puredetok._core.decoders.cleanup import WORDPIECE_RULES, apply_rules

_NOTHING = ""


@attrs.frozen
class GroupStage(OneAtATime):
    """Drops a token equal to the one before it; the hold is the previous token (``None`` at the
    start). Values are ``(token, text)`` pairs, the text already mapped.
    """

    initial: None = None
    idle: None = None
    """Never reached after the first token: every step goes through the stage."""

    def push(self, hold: str | None, value: tuple[str, str], glued: bool) -> tuple[str | None, list[Piece]]:
        """Emit the token's text unless it repeats the previous token."""
        token, text = value
        if token == hold:
            return hold, []
        return token, ([(text, False)] if text else [])

    def flush(self, hold: str | None) -> list[Piece]:
        """Nothing is held."""
        return []

    def is_hold(self, hold: object) -> bool:
        """The previous token, or None."""
        return hold is None or type(hold) is str


@attrs.frozen
class CTC:
    """The CTC decoder."""

    pad_token: str
    word_delimiter_token: str
    cleanup: bool
    depends_on_first = False

    def map_token(self, token: Any, first: bool) -> tuple[str, str]:
        """The token (for the grouping) and its text."""
        raw = str(token)
        text = raw.replace(self.pad_token, _NOTHING)
        if self.cleanup:
            text = apply_rules(WORDPIECE_RULES, text).replace(self.word_delimiter_token, " ")
        return raw, text

    def stage(self) -> Stage:
        """The grouping."""
        return GroupStage()

    def fragment_stage(self) -> Stage:
        """Not modelled: the grouping compares whole tokens."""
        raise Unmodelled("CTC after a decoder with memory")
