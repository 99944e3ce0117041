"""``ByteFallback`` (Llama-2, Mistral, Phi-3): tokens ``<0x00>``..``<0xFF>`` stand for bytes.

A run of consecutive byte tokens becomes text only as a whole: if the run is well-formed UTF-8 it
is decoded, otherwise *every* byte token of the run becomes one U+FFFD. So a run that is valid so
far may still be poisoned by its next byte, and it is held until it ends (the one hold-back that
grows with the input; see ``max_run``). A run that can no longer be valid is released at once.
"""

from __future__ import annotations

from codecs import utf_8_decode
from collections.abc import Iterable
from itertools import groupby
from typing import Any

import attrs

from puredetok._core.decoders.base import MISS, Group, Lanes, Piece, Stage, Unmodelled, push_each
from puredetok._core.rope import EMPTY_ROPE, Rope
from puredetok._core.utf8 import incomplete_tail, second_byte_range, sequence_length

_HEX = frozenset("0123456789abcdefABCDEF")
_BYTES = tuple(bytes((b,)) for b in range(256))
_LEAF = 256

# A run's next byte is judged by the UTF-8 automaton, not by decoding: per byte value, the length
# of the sequence it starts (1 for ASCII, 0 for a byte that starts none), and per lead byte, which
# byte values may come second (a few leads restrict byte two). A character is decoded only once
# its last byte came.
_ASCII = tuple(map(chr, range(0x80)))
_LENGTH = bytes(1 if b < 0x80 else sequence_length(b) for b in range(256))
_SECOND = tuple(
    bytes(low) + b"\x01" * (high - low + 1) + bytes(255 - high)
    for low, high in map(second_byte_range, range(256))
)

INVALID_RUN = "invalid-run"
"""The hold inside a run of byte tokens that can no longer be valid UTF-8."""

Run = tuple[Rope, str, bytes, int]
"""A run that is still a prefix of well-formed UTF-8: (older text, newest text (< 256 characters),
trailing incomplete sequence (0-3 bytes), number of byte tokens in the run). Its text is released
only when the run ends; each byte token becomes U+FFFD instead if it turns out invalid."""

_FRESH: Run = (EMPTY_ROPE, "", b"", 0)


def byte_token_value(token: object) -> int | None:
    """The byte a ``<0xNN>`` token stands for, or None (the crate's exact test: 6 bytes, hex digits)."""
    if type(token) is not str or len(token) != 6 or not token.startswith("<0x") or token[5] != ">":
        return None
    digits = token[3:5]
    # Rust's u8::from_str_radix accepts one leading "+", nothing else but hex digits.
    body = digits[1:] if digits[0] == "+" else digits
    if not body or not all(c in _HEX for c in body):
        return None
    return int(body, 16)


def _release(hold: Any) -> list[Piece]:
    """What a run turns into when it ends."""
    if hold is None or hold == INVALID_RUN:
        return []
    older, newest, tail, count = hold
    if tail:
        return [("\ufffd", False)] * count
    text = str(older) + newest if older.size else newest
    return [(text, False)] if text else []


def _push_uncapped(hold: Any, batch: list[Any]) -> tuple[Any, list[Any]]:
    """:meth:`ByteFallbackStage.push_run` with no cap: each run of byte values in the batch is
    decoded at once, with the same hold and output as pushing the values one by one.

    It does what :meth:`ByteFallbackStage.push` and :func:`_release` do, a run at a time instead
    of a byte at a time (a call per run would cost more than the run's own work here); the Stage
    contract property (tests/core/test_decoder_byte_fallback.py) holds the three to one answer.
    """
    out: list[Any] = []
    for kind, group in groupby(batch, type):
        if kind is not int:
            if hold is not None:  # the run ends
                if type(hold) is tuple:
                    older, newest, tail, count = hold
                    if tail:
                        out += ["\ufffd"] * count
                    elif older.size or newest:
                        out.append(str(older) + newest if older.size else newest)
                hold = None
            out += group
            continue
        values = list(group)
        if type(hold) is str:  # INVALID_RUN: each byte is a U+FFFD at once
            out += ["\ufffd"] * len(values)
            continue
        older, newest, tail, count = _FRESH if hold is None else hold
        data = tail + bytes(values)
        count += len(values)
        try:
            text, used = utf_8_decode(data, "strict", False)
        except UnicodeDecodeError:
            text, used = "", -1
        if used < 0 or (used < len(data) - 1 and data[used] == 0xED and data[used + 1] >= 0xA0):
            out += ["\ufffd"] * count  # invalid, or a surrogate's start (see ByteFallbackStage.push)
            hold = INVALID_RUN
            continue
        if text:
            newest += text
            if len(newest) >= _LEAF:
                full = len(newest) - len(newest) % _LEAF
                for start in range(0, full, _LEAF):
                    older = older.append(newest[start : start + _LEAF])
                newest = newest[full:]
        hold = (older, newest, data[used:], count)
    return hold, out


@attrs.frozen
class ByteFallbackStage:
    """Collects runs of byte tokens (ints, see :meth:`ByteFallback.map_token`); text passes."""

    max_run: int | None = None
    """Release a valid run's complete characters once it holds this many byte tokens (None: never)."""
    initial: None = None
    idle: None = None

    def push(self, hold: Any, value: Any, glued: bool) -> tuple[Any, list[Piece]]:
        """Extend, poison, or end the current run."""
        if type(value) is not int:
            if hold is None:
                return None, [(value, False)]
            out = _release(hold)
            out.append((value, False))
            return None, out
        if type(hold) is str:  # INVALID_RUN, the only hold that is a string
            return INVALID_RUN, [("\ufffd", False)]
        older, newest, tail, count = _FRESH if hold is None else hold
        if not tail:
            length = _LENGTH[value]
            if length == 1:
                text, data = _ASCII[value], b""
            elif length:
                text, data = "", _BYTES[value]
            else:
                return INVALID_RUN, [("\ufffd", False)] * (count + 1)
        elif _SECOND[tail[0]][value] if len(tail) == 1 else 0x80 <= value <= 0xBF:
            data = tail + _BYTES[value]
            if len(data) == _LENGTH[data[0]]:
                text, data = data.decode(), b""
            else:
                text = ""
        else:
            return INVALID_RUN, [("\ufffd", False)] * (count + 1)
        if text:
            newest += text
            if len(newest) >= _LEAF:
                older, newest = older.append(newest), ""
        count += 1
        if self.max_run is not None and count >= self.max_run:
            done = str(older) + newest
            return (EMPTY_ROPE, "", data, len(data)), ([(done, False)] if done else [])
        return (older, newest, data, count), []

    def push_run(self, hold: Any, values: Iterable[Any], glued: bool) -> tuple[Any, list[Group]]:
        """Outside a run, a batch without byte tokens passes as it is; each run of byte tokens in
        the batch is decoded at once.
        """
        batch = values if type(values) is list else list(values)
        if self.max_run is not None:  # where a capped run releases depends on each byte's count
            if hold is None and int not in set(map(type, batch)):
                return None, [(batch, False)]
            return push_each(self, hold, batch, glued)
        hold, out = _push_uncapped(hold, batch)
        return hold, [(out, False)] if out else []

    def push_lanes(self, hold: Any, values: list[Any], glued: bool) -> Lanes | None:
        """Outside a run, text passes as it is (not glued); a byte token starts a run."""
        if hold is not None:
            return None
        return [MISS if type(value) is int else value for value in values], None, False

    def settle(self, tail: Any, solid: bool) -> tuple[Any, bool] | None:
        """A token that is not a byte ends whatever run there was: nothing is held after it, and
        what is released ends with its text, unglued. A byte token leaves a run (None).
        """
        if type(tail) is not str:
            return None
        return tail, bool(tail)

    def flush(self, hold: Any) -> list[Piece]:
        """The stream ended: the run ends too."""
        return _release(hold)

    def is_hold(self, hold: object) -> bool:
        """No run, a run that can no longer be valid, or a :data:`Run` whose count is the number of
        bytes it stands for (its text's UTF-8 bytes and its incomplete tail).
        """
        if hold is None or (type(hold) is str and hold == INVALID_RUN):
            return True
        if type(hold) is not tuple or len(hold) != 4:
            return False
        older, newest, tail, count = hold
        if (
            type(older) is not Rope
            or type(newest) is not str
            or type(tail) is not bytes
            or type(count) is not int
        ):
            return False
        if len(newest) >= _LEAF or len(tail) > 3 or incomplete_tail(tail) != len(tail):
            return False
        try:
            size = len(str(older).encode("utf-8")) + len(newest.encode("utf-8"))
        except UnicodeEncodeError:  # a lone surrogate: never the text of a byte run
            return False
        return count == size + len(tail)


@attrs.frozen
class ByteFallback:
    """The ByteFallback decoder."""

    max_run: int | None = None
    depends_on_first = False

    def map_token(self, token: Any, first: bool) -> Any:
        """A byte token becomes its byte value (an int), read once when the codec is built."""
        value = byte_token_value(token)
        return token if value is None else value

    def map_tokens(self, tokens: list[Any], first: bool) -> list[Any]:
        """Every byte token read; only a token that starts like one is looked at closely."""
        return [
            self.map_token(token, first) if type(token) is str and token[:3] == "<0x" else token
            for token in tokens
        ]

    def stage(self) -> Stage:
        """The run collector."""
        return ByteFallbackStage(self.max_run)

    def fragment_stage(self) -> Stage:
        """Not modelled: byte tokens are only recognised whole."""
        raise Unmodelled("ByteFallback after a decoder that joins tokens")
