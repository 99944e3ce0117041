"""``BPEDecoder`` (the original BPE of GPT and XLM, and ``end_of_word_suffix`` vocabularies such as
CLIP's): each element's end-of-word suffix becomes a space, except in the last element of the
output, where it is removed.

So a token's text is final up to its first suffix; from there it is held until the next element
shows that it was not the last (at most one token's text is held; after a decoder that joins every
token into one element, that element is the last, and the hold lasts until the stream ends).
"""

from __future__ import annotations

from typing import Any

import attrs

from puredetok._core.decoders.base import OneAtATime, Piece, Stage, Unmodelled


def _safe_end(text: str, suffix: str, fragments: bool) -> int:
    """Where the part of ``text`` that no suffix can touch ends: before its first suffix, or (when
    the element may continue in a later fragment) before a trailing proper prefix of the suffix.
    """
    found = text.find(suffix)
    if found >= 0:
        return found
    if not fragments:
        return len(text)
    for keep in range(min(len(suffix) - 1, len(text)), 0, -1):
        if suffix.startswith(text[-keep:]):
            return len(text) - keep
    return len(text)


@attrs.frozen
class SuffixStage(OneAtATime):
    """Holds the current element from its first (possible) suffix on: ``(held text, started)``,
    where ``started`` says the element has already released some text.
    """

    suffix: str
    fragments: bool = False
    """Whether an element may arrive in glued fragments (after a decoder that joins tokens)."""
    initial: tuple[str, bool] = ("", True)
    idle: tuple[str, bool] = ("", True)

    def push(self, hold: tuple[str, bool], value: str, glued: bool) -> tuple[tuple[str, bool], list[Piece]]:
        """A new element releases the held one as not the last; then release what no suffix can touch."""
        held, started = hold
        out: list[Piece] = []
        if not glued:
            if held or not started:  # an element that is empty is still one for the stages after
                out.append((held.replace(self.suffix, " "), started))
            held, started = "", False
        text = held + value if held else value
        cut = _safe_end(text, self.suffix, self.fragments)
        if cut:
            out.append((text[:cut], started))
            started = True
        return (text[cut:], started), out

    def flush(self, hold: tuple[str, bool]) -> list[Piece]:
        """The held element was the last: its suffixes go (an empty one still reaches later stages)."""
        held, started = hold
        text = held.replace(self.suffix, "")
        return [(text, started)] if text or not started else []

    def is_hold(self, hold: object) -> bool:
        """``(held text, started)``."""
        return type(hold) is tuple and len(hold) == 2 and type(hold[0]) is str and type(hold[1]) is bool


@attrs.frozen
class BPEDecoder:
    """The BPEDecoder: the suffix rule needs to know which element is the last, so it is a stage."""

    suffix: str
    depends_on_first = False

    def map_token(self, token: Any, first: bool) -> str:
        """Tokens pass unchanged to the stage."""
        return str(token)

    def stage(self) -> Stage:
        """The suffix stage over whole tokens."""
        if not self.suffix:
            raise Unmodelled("BPEDecoder with an empty suffix")
        return SuffixStage(self.suffix)

    def fragment_stage(self) -> Stage:
        """After another decoder with memory: the same stage over its elements, which may arrive in
        fragments.
        """
        if not self.suffix:
            raise Unmodelled("BPEDecoder with an empty suffix")
        return SuffixStage(self.suffix, fragments=True)
