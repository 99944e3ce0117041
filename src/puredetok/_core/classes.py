"""Character classes: a small summary of the kinds of characters in each token's fast text.

A layer above the core that looks for particular characters in the text (the stop layer looks
for the first characters of stop strings) can skip every token whose summary shares no bit with
the classes of those characters, without reading its text. The classes are coarse on purpose:
a shared bit only means "look at the text".
"""

from __future__ import annotations

import string
from collections.abc import Collection, Sequence

NEWLINE = 1
"""``\\n`` and ``\\r``."""
SPACE = 2
"""Space and tab."""
ANGLE = 4
"""``<`` and ``>`` (chat markers such as ``<|im_end|>``)."""
MARKUP = 8
"""Brackets, ``#``, ``|``, backtick and ``*`` (Markdown and template markers)."""
PUNCTUATION = 16
"""Every other ASCII character that is not a letter or digit (control characters included)."""
UPPER = 32
"""ASCII capital letters."""
LOWER = 64
"""ASCII small letters and digits."""
OTHER = 128
"""Any character outside ASCII."""
ADDED = 256
"""Not a character class: the id is an added token (special tokens such as EOS are)."""
ALL_CLASSES = 512
"""Every summary is below this number."""

_ASCII: dict[str, int] = {chr(code): PUNCTUATION for code in range(128)}
_ASCII.update(dict.fromkeys("\n\r", NEWLINE))
_ASCII.update(dict.fromkeys(" \t", SPACE))
_ASCII.update(dict.fromkeys("<>", ANGLE))
_ASCII.update(dict.fromkeys("()[]{}#|`*", MARKUP))
_ASCII.update(dict.fromkeys(string.ascii_uppercase, UPPER))
_ASCII.update(dict.fromkeys(string.ascii_lowercase + string.digits, LOWER))


# Per UTF-8 byte, its class bit: every byte of a character outside ASCII is OTHER.
_BYTE_CLASS = bytes(_ASCII[chr(code)] for code in range(128)) + bytes([OTHER]) * 128


def class_of(text: str) -> int:
    """The union of the classes of the characters of ``text`` (0 for the empty text)."""
    return sum(set(text.encode("utf-8", "surrogatepass").translate(_BYTE_CLASS)))


def classes_of(texts: Sequence[str | None], added: Collection[int] = ()) -> tuple[int, ...]:
    """Per text, :func:`class_of` it (0 for None), with :data:`ADDED` for the ids in ``added``.

    A tuple, so that indexing it is one of the interpreter's fastest operations.
    """
    summary = [class_of(text) if text else 0 for text in texts]
    for token_id in added:
        if 0 <= token_id < len(summary):
            summary[token_id] |= ADDED
    shared = {bits: bits for bits in range(ALL_CLASSES)}  # one int object per value
    return tuple(map(shared.__getitem__, summary))
