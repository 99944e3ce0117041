"""``ByteLevel`` (GPT-2, Qwen, Llama-3, Phi-2): tokens are spelled in a 256-character alphabet
that stands for bytes; the decoder maps every token back to its bytes and decodes all of them as
one UTF-8 string, lossily (each broken sequence becomes one U+FFFD).

A token containing a character outside that alphabet (an added token such as a run of spaces) is
taken as its own UTF-8 bytes, as the ``tokenizers`` crate does.
"""

from __future__ import annotations

from codecs import charmap_build, charmap_encode, utf_8_decode
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

import attrs

from puredetok._core.decoders.base import MISS, Group, Lanes, Piece, Stage, Unmodelled
from puredetok._core.utf8 import incomplete_tail


def byte_alphabet() -> dict[int, str]:
    """GPT-2's byte-to-character table: printable bytes stand for themselves, the rest are shifted."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    table = {b: chr(b) for b in printable}
    shifted = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + shifted)
            shifted += 1
    return table


_ALPHABET = frozenset(byte_alphabet().values())
# The alphabet as a charmap codec: encoding a token of alphabet characters gives its bytes.
_ENCODING_MAP = charmap_build("".join(byte_alphabet()[b] for b in range(256)))
_RUN = 4096
"""Tokens mapped at once by :meth:`ByteLevel.map_tokens` (a run with a non-alphabet token is redone)."""
# Each alphabet character translated to the character with its byte's code, then Latin-1 encoded.
_TO_LATIN1: Mapping[int, int] = MappingProxyType({ord(c): b for b, c in byte_alphabet().items()})


def _release_surrogates(data: bytes, errors: str) -> tuple[int, str]:
    """CPython's incremental decoder also waits on ED A0..ED BF (surrogates), which the Unicode
    rules (and the tokenizers crate) already treat as invalid; decode those at once.
    """
    used = len(data) - incomplete_tail(data)
    return used, data[:used].decode("utf-8", errors)


@attrs.frozen
class Utf8Stage:
    """Assembles bytes into text, holding only an incomplete UTF-8 sequence (at most 3 bytes).

    ``errors`` is what becomes of bytes that are not UTF-8: ``"replace"`` (one U+FFFD per maximal
    broken sequence, as the ``tokenizers`` crate does) or ``"ignore"`` (dropped, as ByT5 does).
    """

    errors: str = "replace"
    initial: bytes = b""
    idle: bytes = b""

    def push(self, hold: bytes, value: bytes, glued: bool) -> tuple[bytes, list[Piece]]:
        """Decode everything but a trailing sequence that a later byte could still complete."""
        data = hold + value if hold else value
        text, used = utf_8_decode(data, self.errors, False)
        if len(data) - used >= 2 and data[used] == 0xED:
            used, text = _release_surrogates(data, self.errors)
        return data[used:], ([(text, True)] if text else [])

    def push_run(self, hold: bytes, values: Iterable[bytes], glued: bool) -> tuple[bytes, list[Group]]:
        """All the bytes at once."""
        data = hold + b"".join(values)
        text, used = utf_8_decode(data, self.errors, False)
        if len(data) - used >= 2 and data[used] == 0xED:
            used, text = _release_surrogates(data, self.errors)
        return data[used:], ([([text], True)] if text else [])

    def push_lanes(self, hold: bytes, values: list[Any], glued: bool) -> Lanes | None:
        """With nothing held: each value's text where its bytes are whole characters; a value that
        leaves bytes held (or gives no text) takes another path.
        """
        if hold:
            return None
        errors = self.errors
        outs: list[Any] = []
        for value in values:
            text, used = utf_8_decode(value, errors, False)
            outs.append(text if used == len(value) and text else MISS)
        return outs, b"", True

    def settle(self, tail: Any, solid: bool) -> tuple[str, bool] | None:
        """Nothing is held after bytes that end with a whole character beginning at one of their
        own bytes that is not a continuation byte: whatever came before it ends there (a lead or
        ASCII byte never continues a sequence). What is released then ends with the longest such
        run of whole characters.
        """
        if type(tail) is not bytes or not tail:
            return None
        if not 0x80 <= tail[0] < 0xC0:  # most tokens: whole characters from their first byte
            try:
                text, used = utf_8_decode(tail, "strict", True)
            except UnicodeDecodeError:
                text, used = "", 0
            if text and used == len(tail):
                return text, True
        for at in range(len(tail) - 1, max(-1, len(tail) - 5), -1):
            if not 0x80 <= tail[at] < 0xC0:
                try:
                    text, used = utf_8_decode(tail[at:], "strict", True)
                except UnicodeDecodeError:
                    return None
                return (text, True) if text and used == len(tail) - at else None
        return None

    def flush(self, hold: bytes) -> list[Piece]:
        """An incomplete sequence at the very end becomes one U+FFFD (or nothing, with ``"ignore"``)."""
        text = hold.decode("utf-8", self.errors) if hold else ""
        return [(text, True)] if text else []

    def is_hold(self, hold: object) -> bool:
        """Bytes that a later byte could still complete into a character (0 to 3 of them)."""
        return type(hold) is bytes and len(hold) <= 3 and incomplete_tail(hold) == len(hold)


@attrs.frozen
class ByteLevel:
    """The ByteLevel decoder: per-token map to bytes, then a UTF-8 stage."""

    depends_on_first = False

    def map_token(self, token: Any, first: bool) -> bytes:
        """The bytes a token stands for."""
        text = str(token)
        if _ALPHABET.issuperset(text):
            return text.translate(_TO_LATIN1).encode("latin-1")
        return text.encode("utf-8")

    def map_tokens(self, tokens: list[Any], first: bool) -> list[Any]:
        """The bytes of every token through a charmap codec of the alphabet (C), a few thousand
        tokens at a time; in a run with a token that is not all alphabet characters (an added token
        with a space), that one as :meth:`map_token` maps it.
        """
        encode, alphabet, whole = charmap_encode, _ENCODING_MAP, _ALPHABET.issuperset
        mapped: list[Any] = []
        for begin in range(0, len(tokens), _RUN):
            run = tokens[begin : begin + _RUN]
            try:
                mapped += [None if text is None else encode(text, "strict", alphabet)[0] for text in run]
            except (UnicodeEncodeError, TypeError):
                mapped += [
                    encode(token, "strict", alphabet)[0]
                    if type(token) is str and whole(token)
                    else (None if token is None else self.map_token(token, first))
                    for token in run
                ]
        return mapped

    def stage(self) -> Stage:
        """Bytes of consecutive tokens are decoded together."""
        return Utf8Stage()

    def fragment_stage(self) -> Stage:
        """Not modelled: ByteLevel after a joining decoder."""
        raise Unmodelled("ByteLevel after a decoder that joins tokens")
