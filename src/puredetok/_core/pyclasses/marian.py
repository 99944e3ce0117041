"""``MarianTokenizer``: SentencePiece without a ``tokenizers`` backend. Its ``decode`` sends each run
of pieces between special tokens through the ``sentencepiece`` library's own decoder (see
:mod:`puredetok._build.pyclasses.spm`), writes each special token followed by a space, turns every
remaining ``▁`` into a space, and strips whitespace at both ends of the whole text.

Held back: an incomplete UTF-8 sequence of byte pieces (at most 3 bytes) and trailing whitespace
(until text follows it).
"""

from __future__ import annotations

from typing import Any

import attrs

from puredetok._core.decoders.base import OneAtATime, Piece
from puredetok._core.utf8 import first_character, incomplete_tail

SPECIAL, CONTROL, BYTE, TEXT = "special", "control", "byte", "text"
"""The kinds of value :class:`MarianStage` takes, its first element: ``(SPECIAL, text)``,
``(CONTROL,)``, ``(BYTE, byte)`` and ``(TEXT, text, text as the output's first piece, whether that
piece lost a "▁")``."""

Hold = tuple[bool, bool, bool, bytes]
"""``(first pieces may still lose their "▁", the last piece did lose one, the run of pieces since
the last special token has text, an incomplete character of byte pieces)``."""

_FRESH: Hold = (True, False, False, b"")
_TEXT_SEEN: Hold = (False, False, True, b"")


def _bytes_text(data: bytes) -> tuple[str, bytes]:
    """SentencePiece's decoding of byte pieces: each well-formed character, or one U+FFFD per byte
    that starts none; an incomplete character at the end is returned to be held.
    """
    out = []
    while data:
        length, complete = first_character(data)
        if complete:
            out.append(data[:length].decode("utf-8"))
            data = data[length:]
        elif length:
            break
        else:
            out.append("\ufffd")
            data = data[1:]
    return "".join(out), data


@attrs.frozen
class MarianStage(OneAtATime):
    """Marian's ``convert_tokens_to_string`` up to its final strip, over per-piece values."""

    initial: Hold = _FRESH
    idle: Hold = _TEXT_SEEN

    def push(self, hold: Hold, value: tuple[Any, ...], glued: bool) -> tuple[Hold, list[Piece]]:
        """One piece."""
        first, consumed, has_text, pending = hold
        kind = value[0]
        if kind == BYTE:
            text, pending = _bytes_text(pending + bytes((value[1],)))
            return (first, consumed, True, pending), ([(text, True)] if text else [])
        out = "\ufffd" * len(pending)  # an incomplete character ends with its run
        if kind == SPECIAL:
            text = out + value[1]
            return _FRESH, [(text, True)]
        if consumed or has_text:
            first = False
        if kind == CONTROL:
            consumed, text = False, ""
        elif first:
            _, _, text, consumed = value
        else:
            _, text, _, _ = value
            consumed = False
        text = out + text
        new = (first, consumed, has_text or bool(text), b"")
        return (_TEXT_SEEN if new == _TEXT_SEEN else new), ([(text, True)] if text else [])

    def flush(self, hold: Hold) -> list[Piece]:
        """An incomplete character at the end: one U+FFFD per byte."""
        pending = hold[3]
        return [("\ufffd" * len(pending), True)] if pending else []

    def is_hold(self, hold: object) -> bool:
        """Three flags and an incomplete character of byte pieces (0 to 3 bytes)."""
        if type(hold) is not tuple or len(hold) != 4 or type(hold[3]) is not bytes:
            return False
        pending: bytes = hold[3]
        return (
            all(type(flag) is bool for flag in hold[:3])
            and len(pending) <= 3
            and incomplete_tail(pending) == len(pending)
        )
