"""``ByteFallback`` (Llama-2, Mistral, Phi-3): tokens ``<0x00>``..``<0xFF>`` stand for bytes.

A run of consecutive byte tokens becomes text only as a whole: if the run is well-formed UTF-8 it
is decoded, otherwise *every* byte token of the run becomes one U+FFFD. So a run that is valid so
far may still be poisoned by its next byte, and it is held until it ends (the one hold-back that
grows with the input; see ``max_run``). A run that can no longer be valid is released at once.
"""

from __future__ import annotations

__all__ = ["ByteFallback", "ByteFallbackStage", "ValidRun", "INVALID_RUN", "byte_token_value"]

from typing import Any

import attrs

from puredetok.core.decoders.base import Group, Piece, Stage, Unmodelled, push_each
from puredetok.core.rope import EMPTY_ROPE, Rope
from puredetok.core.utf8 import incomplete_tail

_HEX = frozenset("0123456789abcdefABCDEF")
INVALID_RUN = "invalid-run"
"""The hold inside a run of byte tokens that can no longer be valid UTF-8."""


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


@attrs.frozen
class ValidRun:
    """A run of byte tokens that is still a prefix of well-formed UTF-8."""

    text: Rope
    """The characters completed so far (not yet released)."""
    tail: bytes
    """A trailing incomplete sequence (0 to 3 bytes)."""
    count: int
    """How many byte tokens the run holds (each becomes U+FFFD if the run turns out invalid)."""


_FRESH = ValidRun(EMPTY_ROPE, b"", 0)


def _release(run: Any) -> list[Piece]:
    """What a run turns into when it ends."""
    if not isinstance(run, ValidRun):
        return []
    if run.tail:
        return [("\ufffd", False)] * run.count
    text = str(run.text)
    return [(text, False)] if text else []


@attrs.frozen
class ByteFallbackStage:
    """Collects runs of byte tokens; other tokens pass through."""

    max_run: int | None = None
    """Release a valid run's complete characters once it holds this many byte tokens (None: never)."""
    initial: None = None
    idle: None = None

    def push(self, hold: Any, value: Any, glued: bool) -> tuple[Any, list[Piece]]:
        """Extend, poison, or end the current run."""
        byte = byte_token_value(value)
        if byte is None:
            out = _release(hold)
            out.append((value, False))
            return None, out
        if hold == INVALID_RUN:
            return INVALID_RUN, [("\ufffd", False)]
        run: ValidRun = hold if isinstance(hold, ValidRun) else _FRESH
        data = run.tail + bytes((byte,))
        keep = incomplete_tail(data)
        try:
            done = data[: len(data) - keep].decode("utf-8")
        except UnicodeDecodeError:
            return INVALID_RUN, [("\ufffd", False)] * (run.count + 1)
        run = ValidRun(run.text.append(done), data[len(data) - keep :], run.count + 1)
        if self.max_run is not None and run.count >= self.max_run:
            text = str(run.text)
            return ValidRun(EMPTY_ROPE, run.tail, len(run.tail)), ([(text, False)] if text else [])
        return run, []

    def push_run(self, hold: Any, values: list[Any], glued: bool) -> tuple[Any, list[Group]]:
        """Outside a run, a batch without byte tokens passes as it is."""
        if hold is None and all(type(v) is str for v in values) and "<0x" not in "".join(values):
            return None, [(values, False)]
        return push_each(self, hold, values, glued)

    def flush(self, hold: Any) -> list[Piece]:
        """The stream ended: the run ends too."""
        return _release(hold)


@attrs.frozen
class ByteFallback:
    """The ByteFallback decoder."""

    max_run: int | None = None
    depends_on_first = False

    def map_token(self, token: Any, first: bool) -> Any:
        """Tokens are not changed one by one; runs are the stage's work."""
        return token

    def stage(self) -> Stage:
        """The run collector."""
        return ByteFallbackStage(self.max_run)

    def fragment_stage(self) -> Stage:
        """Not modelled: byte tokens are only recognised whole."""
        raise Unmodelled("ByteFallback after a decoder that joins tokens")
