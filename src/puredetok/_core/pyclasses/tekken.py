"""Tekken (mistral-common's ``Tekkenizer``) and ``tiktoken.Encoding``: byte-level BPE over ranks.

A ``tiktoken.Encoding`` decodes a list of ids by joining every id's bytes (special tokens are their
own bytes) and decoding the whole as UTF-8 with ``errors="replace"`` (one U+FFFD per maximal broken
sequence). Tekken puts its control tokens first (ids ``0 .. num_special_tokens - 1``, 1,000 of them,
most unused ``<SPECIAL_n>`` placeholders) and its tiktoken ranks after them. Its ``decode`` splits
the ids into runs of ordinary and of control ids: each ordinary run is decoded by tiktoken on its
own, and each control id is its ``token_str`` (``SpecialTokenPolicy.KEEP``) or nothing
(``IGNORE``). So a control id ends the run before it, even when it adds nothing: the incomplete
UTF-8 sequence held before it becomes U+FFFD at once.

Held back: an incomplete UTF-8 sequence (at most 3 bytes).
"""

from __future__ import annotations

from codecs import utf_8_decode
from collections.abc import Iterable
from typing import Any

import attrs

from puredetok._core.decoders.base import MISS, Group, Lanes, Piece
from puredetok._core.decoders.byte_level import Utf8Stage

_UTF8 = Utf8Stage()


@attrs.frozen
class TekkenStage:
    """UTF-8 assembly of ordinary ids' bytes (``bytes`` values), where a control id (a ``str``
    value, its text or ``""``) first ends the run: what was held is decoded as a whole.
    """

    initial: bytes = b""
    idle: bytes = b""

    def push(self, hold: bytes, value: bytes | str, glued: bool) -> tuple[bytes, list[Piece]]:
        """Bytes are assembled; a control id flushes the held bytes, then adds its text."""
        if type(value) is bytes:  # Utf8Stage.push, written out: this is a step's slow path
            data = hold + value if hold else value
            out, used = utf_8_decode(data, "replace", False)
            if len(data) - used >= 2 and data[used] == 0xED:
                return _UTF8.push(b"", data, glued)
            return data[used:], ([(out, True)] if out else [])
        text: str = hold.decode("utf-8", "replace") + str(value) if hold else str(value)
        return b"", ([(text, True)] if text else [])

    def push_run(self, hold: bytes, values: Iterable[bytes | str], glued: bool) -> tuple[bytes, list[Group]]:
        """Each run of ordinary ids' bytes decoded at once, split at control ids."""
        texts: list[str] = []
        run: list[bytes] = [hold] if hold else []
        for value in values:
            if type(value) is bytes:
                run.append(value)
                continue
            if run:
                texts.append(b"".join(run).decode("utf-8", "replace"))
                run = []
            texts.append(value)  # type: ignore[arg-type]
        rest = b""
        if run:
            rest, pieces = _UTF8.push(b"", b"".join(run), glued)
            texts.extend(text for text, _ in pieces)
        text = "".join(texts)
        return rest, ([([text], True)] if text else [])

    def push_lanes(self, hold: bytes, values: list[Any], glued: bool) -> Lanes | None:
        """With nothing held: each value's text where it is whole characters or a control id's
        non-empty text; every other value takes another path.
        """
        if hold:
            return None
        outs: list[Any] = []
        for value in values:
            if type(value) is bytes:
                text, used = utf_8_decode(value, "replace", False)
                outs.append(text if used == len(value) and text else MISS)
            else:
                outs.append(value if value else MISS)
        return outs, b"", True

    def settle(self, tail: Any, solid: bool) -> tuple[Any, bool] | None:
        """A control id ends whatever was held: nothing is held after it, and what is released
        ends with its text, glued. Bytes settle as :class:`Utf8Stage`'s do (the same assembly).
        """
        if type(tail) is str:
            return tail, True
        return _UTF8.settle(tail, solid)

    def flush(self, hold: bytes) -> list[Piece]:
        """An incomplete sequence at the very end becomes one U+FFFD."""
        return _UTF8.flush(hold)

    def is_hold(self, hold: object) -> bool:
        """Bytes that a later byte could still complete into a character (0 to 3 of them)."""
        return _UTF8.is_hold(hold)
