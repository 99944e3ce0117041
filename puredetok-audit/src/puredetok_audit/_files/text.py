"""Telling text from binary data by its first bytes."""

from __future__ import annotations

_SAMPLE = 1 << 12


def binary(head: bytes) -> bool:
    """Whether data that begins with ``head`` is binary rather than text: a NUL byte, or bytes
    that are not UTF-8, in its first 4 KiB (a character the sample cuts in two is not counted).
    """
    sample = head[:_SAMPLE]
    if b"\x00" in sample:
        return True
    try:
        sample.decode("utf-8")
    except UnicodeDecodeError as error:
        return not (error.reason == "unexpected end of data" and error.start >= len(sample) - 3)
    return False
