"""UTF-8 facts shared by the byte-assembling decoders (ByteLevel, ByteFallback).

Python's ``bytes.decode("utf-8", "replace")`` and Rust's ``String::from_utf8_lossy`` both follow
the Unicode "maximal subpart" practice: each maximal prefix of a well-formed sequence that cannot be
completed becomes one U+FFFD. So a byte string can be decoded piecewise, exactly, as long as no piece
ends inside a sequence that could still be completed; :func:`incomplete_tail` finds that part.
"""

from __future__ import annotations

from enum import Enum


def sequence_length(lead: int) -> int:
    """Length of the sequence a lead byte starts (0 if it cannot start a multi-byte sequence)."""
    if 0xC2 <= lead <= 0xDF:
        return 2
    if 0xE0 <= lead <= 0xEF:
        return 3
    if 0xF0 <= lead <= 0xF4:
        return 4
    return 0


def second_byte_range(lead: int) -> tuple[int, int]:
    """The bytes that may follow ``lead`` (the Unicode standard's Table 3-7 restricts a few)."""
    if lead == 0xE0:
        return 0xA0, 0xBF
    if lead == 0xED:
        return 0x80, 0x9F
    if lead == 0xF0:
        return 0x90, 0xBF
    if lead == 0xF4:
        return 0x80, 0x8F
    return 0x80, 0xBF


def incomplete_tail(data: bytes) -> int:
    """How many trailing bytes of ``data`` are a proper prefix of a well-formed UTF-8 sequence.

    Those bytes (0 to 3 of them) are the only ones whose meaning a later byte can still change.
    """
    n = len(data)
    if not n or data[-1] < 0x80:
        return 0
    for back in range(1, min(3, n) + 1):
        byte = data[n - back]
        if 0x80 <= byte <= 0xBF:
            continue
        need = sequence_length(byte)
        if need <= back:
            return 0
        if back >= 2:
            low, high = second_byte_range(byte)
            if not low <= data[n - back + 1] <= high:
                return 0
        return back
    return 0


class Status(Enum):
    """Whether a byte string is UTF-8 as it stands, could still become UTF-8, or never can."""

    COMPLETE = "complete"
    INCOMPLETE = "incomplete"
    INVALID = "invalid"


def status(data: bytes) -> Status:
    """Classify ``data``: well-formed, a prefix of something well-formed, or neither."""
    tail = incomplete_tail(data)
    try:
        data[: len(data) - tail].decode("utf-8")
    except UnicodeDecodeError:
        return Status.INVALID
    return Status.INCOMPLETE if tail else Status.COMPLETE


def first_character(data: bytes) -> tuple[int, bool]:
    """How ``data`` starts: ``(n, True)`` if with a well-formed character of ``n`` bytes,
    ``(len(data), False)`` if all of it is a proper prefix of one, ``(0, False)`` if its first byte
    starts no well-formed character that these bytes allow.
    """
    lead = data[0]
    if lead < 0x80:
        return 1, True
    need = sequence_length(lead)
    if not need:
        return 0, False
    low, high = second_byte_range(lead)
    for index in range(1, need):
        if index >= len(data):
            return len(data), False
        byte = data[index]
        if not (low <= byte <= high if index == 1 else 0x80 <= byte <= 0xBF):
            return 0, False
    return need, True
