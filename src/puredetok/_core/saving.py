"""A state as a value: a :class:`~puredetok._core.codec.DecodeState` as a few dozen bytes, without
its codec, and back given a codec with the same fingerprint.

The codec is what is large (its per-id tables) and what every request of a tokenizer shares; a
state is the little it holds back. So a state travels alone, and is resumed where its codec
already is: ``DecodeState.from_bytes(codec, state.to_bytes())`` continues exactly as the state
would have. Pickling does the same (a state never drags its codec's tables into a pickle): a
pickled state unpickles as a :class:`~puredetok._core.codec.SavedState`, which ``resume`` turns back into
a state given the codec. The core keeps no registry of codecs, so nothing finds one by itself:
whoever resumes says which codec (and its fingerprint is checked).

The bytes (format 1)::

    1 byte    what follows: 0x01 a core state (0x02: a stop-layer stream, see puredetok.stops._saving)
    8 bytes   the codec's key: the first 8 bytes of BLAKE2b(codec.fingerprint)
    ...       the body: tagged values (None, bools, ints, strings, bytes, tuples, and the core's
              own immutable records: a rope of text, held whitespace, a prompt's echo)
    4 bytes   CRC-32 of everything before it (big-endian)

Reading checks all of it and never trusts a length: a wrong codec raises
:class:`~puredetok.errors.CodecMismatchError`; truncated, corrupt or hostile bytes raise
:class:`~puredetok.errors.InvalidStateError` (a ``ValueError``), including a hold the codec's
decoder could not take (each decoder says which holds it takes: ``is_hold``). A restored state is
equal to the saved one.
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Hashable
from typing import Any, Protocol

from puredetok._core.decoders.whitespace import EMPTY_SPACE, HeldSpace
from puredetok._core.decoding import Decoding
from puredetok._core.echo import Echo
from puredetok._core.rope import Rope
from puredetok.errors import CodecMismatchError, InvalidStateError


class Codec(Protocol):
    """What saving reads of a codec (:class:`puredetok._core.codec.Codec` is one): its family and
    name (for messages), its fingerprint (what saved bytes are keyed by) and its decoding (whose
    ``is_hold``, ``initial`` and ``idle`` say which holds it takes).
    """

    @property
    def family(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def fingerprint(self) -> str: ...

    @property
    def decoding(self) -> Decoding: ...


STATE_FORMAT = 0x01
"""The first byte of a saved core state."""

MAX_DEPTH = 64
"""The deepest nesting of values a body may have (a hold is a few levels deep; the fallback's
list of recent ids is the deepest, at most 32)."""

MAX_HELD_SPACE = 2**26
"""The most characters of held whitespace a restored state may stand for (held whitespace is
stored as runs, so a few bytes could otherwise claim gigabytes)."""

_KEY = 8
_CHECK = 4
_VARINT = 10  # bytes: enough for 64 bits

_NONE, _FALSE, _TRUE, _INT, _STR, _BYTES, _TUPLE, _ROPE, _SPACE, _ECHO = range(10)
_SMALL = 0x40
"""Tags from here on are the ints ``tag - 0x40`` (0 to 191) in one byte."""


def codec_key(codec: Codec) -> bytes:
    """The 8 bytes that name ``codec`` in a saved state: a digest of its fingerprint."""
    return hashlib.blake2b(codec.fingerprint.encode("utf-8", "surrogatepass"), digest_size=_KEY).digest()


def _varint(number: int, out: bytearray) -> None:
    while number >= 0x80:
        out.append(number & 0x7F | 0x80)
        number >>= 7
    out.append(number)


def _write(value: object, out: bytearray, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise ValueError(f"a value nested deeper than {MAX_DEPTH} levels cannot be saved")
    if value is None:
        out.append(_NONE)
    elif type(value) is bool:
        out.append(_TRUE if value else _FALSE)
    elif type(value) is int:
        if 0 <= value < 0x100 - _SMALL:
            out.append(_SMALL + value)
        elif -(2**63) <= value < 2**63:
            out.append(_INT)
            _varint(value * 2 if value >= 0 else -value * 2 - 1, out)
        else:
            raise ValueError(f"an int beyond 64 bits cannot be saved: {value}")
    elif type(value) is str:
        _text(_STR, value, out)
    elif type(value) is bytes:
        out.append(_BYTES)
        _varint(len(value), out)
        out += value
    elif type(value) is tuple:
        out.append(_TUPLE)
        _varint(len(value), out)
        for item in value:
            _write(item, out, depth + 1)
    elif type(value) is Rope:
        _text(_ROPE, str(value), out)
    elif type(value) is HeldSpace:
        runs = value.runs()
        out.append(_SPACE)
        _varint(len(runs), out)
        for piece, count in runs:
            _text(_STR, piece, out)
            _varint(count, out)
    elif type(value) is Echo:
        out.append(_ECHO)
        _write(value.hold, out, depth + 1)
        _text(_STR, value.text, out)
    else:
        raise TypeError(f"a {type(value).__name__} is not a value a state holds: it cannot be saved")


def _text(tag: int, text: str, out: bytearray) -> None:
    data = text.encode("utf-8", "surrogatepass")
    out.append(tag)
    _varint(len(data), out)
    out += data


class _Reader:
    """Reads tagged values from ``data[start:end]``; every failure is :class:`InvalidStateError`."""

    def __init__(self, data: bytes, start: int, end: int) -> None:
        self.data = data
        self.position = start
        self.end = end

    def fail(self, why: str) -> InvalidStateError:
        return InvalidStateError(f"not a saved state: {why} (at byte {self.position})")

    def byte(self) -> int:
        if self.position >= self.end:
            raise self.fail("it ends too early")
        value = self.data[self.position]
        self.position += 1
        return value

    def varint(self) -> int:
        number = shift = 0
        for _ in range(_VARINT):
            byte = self.byte()
            number |= (byte & 0x7F) << shift
            if byte < 0x80:
                return number
            shift += 7
        raise self.fail("a number longer than 64 bits")

    def chunk(self) -> bytes:
        size = self.varint()
        if size > self.end - self.position:
            raise self.fail(f"a length of {size} bytes where {self.end - self.position} are left")
        start = self.position
        self.position += size
        return self.data[start : self.position]

    def text(self) -> str:
        data = self.chunk()
        try:
            return data.decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:
            raise self.fail("text that is not UTF-8") from None

    def string(self) -> str:
        if self.byte() != _STR:
            raise self.fail("text expected")
        return self.text()

    def value(self, depth: int = 0) -> Any:
        if depth > MAX_DEPTH:
            raise self.fail(f"values nested deeper than {MAX_DEPTH} levels")
        tag = self.byte()
        if tag >= _SMALL:
            return tag - _SMALL
        if tag == _NONE:
            return None
        if tag in (_FALSE, _TRUE):
            return tag == _TRUE
        if tag == _INT:
            zigzag = self.varint()
            return zigzag >> 1 if not zigzag & 1 else -((zigzag + 1) >> 1)
        if tag == _STR:
            return self.text()
        if tag == _BYTES:
            return self.chunk()
        if tag == _TUPLE:
            count = self.varint()
            if count > self.end - self.position:  # every item takes a byte at least
                raise self.fail(f"a tuple of {count} items where {self.end - self.position} bytes are left")
            return tuple(self.value(depth + 1) for _ in range(count))
        if tag == _ROPE:
            return Rope.of(self.text())
        if tag == _SPACE:
            return self.held_space()
        if tag == _ECHO:
            hold = self.value(depth + 1)
            return Echo(hold, self.string())
        raise self.fail(f"unknown tag {tag}")

    def held_space(self) -> HeldSpace:
        count = self.varint()
        if count > self.end - self.position:
            raise self.fail(f"{count} runs where {self.end - self.position} bytes are left")
        held, size = EMPTY_SPACE, 0
        for _ in range(count):
            piece, times = self.string(), self.varint()
            size += len(piece) * times
            if not times or size > MAX_HELD_SPACE:
                raise self.fail(f"held whitespace of {size:,} characters (at most {MAX_HELD_SPACE:,})")
            held = HeldSpace(held if held.count else None, piece, times, size)
        return held


def pack(kind: int, codec: Codec, body: object) -> bytes:
    """``body`` saved for ``codec``: the format byte, the codec's key, the body, the checksum."""
    out = bytearray((kind,))
    out += codec_key(codec)
    _write(body, out, 0)
    out += zlib.crc32(out).to_bytes(_CHECK, "big")
    return bytes(out)


def unpack(kind: int, codec: Codec, data: object, what: str) -> Any:
    """The body of bytes saved by :func:`pack` for ``codec``; raises :class:`InvalidStateError`
    (:class:`CodecMismatchError` when they were saved for another codec). ``what`` names the kind
    of value in messages.
    """
    if isinstance(data, bytearray | memoryview):
        data = bytes(data)
    if type(data) is not bytes:
        raise InvalidStateError(f"a saved {what} is bytes, not {type(data).__name__}")
    if len(data) < 1 + _KEY + 1 + _CHECK:
        raise InvalidStateError(f"not a saved {what}: {len(data)} bytes is too short")
    if data[0] != kind:
        raise InvalidStateError(f"not a saved {what}: it starts with byte {data[0]:#04x}, not {kind:#04x}")
    end = len(data) - _CHECK
    if zlib.crc32(data[:end]) != int.from_bytes(data[end:], "big"):
        raise InvalidStateError(f"not a saved {what}: its checksum does not match (corrupt or truncated)")
    if data[1 : 1 + _KEY] != codec_key(codec):
        raise CodecMismatchError(
            f"this {what} was saved for another codec, not {codec.name!r} with its options "
            f"(fingerprint {codec.fingerprint}): resume it with the codec it was saved with"
        )
    reader = _Reader(data, 1 + _KEY, end)
    body = reader.value()
    if reader.position != end:
        raise reader.fail(f"{end - reader.position} bytes after the end")
    return body


def check_hold(codec: Codec, hold: Hashable) -> Hashable:
    """``hold`` as a hold of ``codec`` (its decoder's own ``initial`` or ``idle`` object when equal
    to it, as the fast path expects), or :class:`InvalidStateError` when the decoder cannot take it.
    """
    decoding = codec.decoding
    inner = hold.hold if type(hold) is Echo else hold
    valid = decoding.is_hold(inner)
    if type(hold) is Echo:
        valid = valid and type(hold.text) is str and bool(hold.text) and type(inner) is not Echo
    if not valid:
        shown = repr(hold)
        shown = shown if len(shown) <= 80 else shown[:77] + "..."
        raise InvalidStateError(f"the saved hold {shown} is not one a {codec.family} codec takes")
    if hold == decoding.idle:
        return decoding.idle
    if hold == decoding.initial:
        return decoding.initial
    return hold
