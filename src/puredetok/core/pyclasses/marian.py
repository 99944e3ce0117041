"""``MarianTokenizer``: SentencePiece without a ``tokenizers`` backend. Its ``decode`` sends each run
of pieces between special tokens through the ``sentencepiece`` library's own decoder (see
:mod:`puredetok.core.pyclasses.spm`), writes each special token followed by a space, turns every
remaining ``▁`` into a space, and strips whitespace at both ends of the whole text.

Held back: an incomplete UTF-8 sequence of byte pieces (at most 3 bytes) and trailing whitespace
(until text follows it).
"""

from __future__ import annotations

__all__ = ["MarianStage", "marian_model", "piece_value"]

from collections.abc import Iterable
from typing import Any

import attrs

from puredetok.core.chain import compile_chain
from puredetok.core.decoders.base import Group, Piece, Stage, Unmodelled, push_each
from puredetok.core.decoders.cleanup import cleanup_stages
from puredetok.core.decoders.whitespace import StripStage
from puredetok.core.pyclasses.base import ClassModel, Given, special_ids
from puredetok.core.pyclasses.spm import read_settings
from puredetok.core.utf8 import first_character, incomplete_tail

_SPACE = "\u2581"
_SPECIAL, _CONTROL, _BYTE, _TEXT = "special", "control", "byte", "text"

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
class MarianStage:
    """Marian's ``convert_tokens_to_string`` up to its final strip, over per-piece values."""

    initial: Hold = _FRESH
    idle: Hold = _TEXT_SEEN

    def push(self, hold: Hold, value: tuple[Any, ...], glued: bool) -> tuple[Hold, list[Piece]]:
        """One piece."""
        first, consumed, has_text, pending = hold
        kind = value[0]
        if kind == _BYTE:
            text, pending = _bytes_text(pending + bytes((value[1],)))
            return (first, consumed, True, pending), ([(text, True)] if text else [])
        out = "\ufffd" * len(pending)  # an incomplete character ends with its run
        if kind == _SPECIAL:
            text = out + value[1]
            return _FRESH, [(text, True)]
        if consumed or has_text:
            first = False
        if kind == _CONTROL:
            consumed, text = False, ""
        elif first:
            _, _, text, consumed = value
        else:
            _, text, _, _ = value
            consumed = False
        text = out + text
        new = (first, consumed, has_text or bool(text), b"")
        return (_TEXT_SEEN if new == _TEXT_SEEN else new), ([(text, True)] if text else [])

    def push_run(self, hold: Any, values: Iterable[Any], glued: bool) -> tuple[Any, list[Group]]:
        """One at a time."""
        return push_each(self, hold, values, glued)

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


def piece_value(sp: Any, token: str, settings: Any) -> tuple[Any, ...]:
    """What :class:`MarianStage` takes for one piece of the ``SentencePieceProcessor`` ``sp``."""
    piece_id = sp.piece_to_id(token)
    if sp.is_control(piece_id):
        return (_CONTROL,)
    if sp.is_unknown(piece_id):
        surface = settings.unknown_surface if sp.id_to_piece(piece_id) == token else token
        surface = surface.replace(_SPACE, " ")
        return (_TEXT, surface, surface, False)
    if sp.is_byte(piece_id):
        if len(token) != 6 or not token.startswith("<0x") or not token.endswith(">"):
            raise Unmodelled(f"the SentencePiece byte piece {token!r}")
        return (_BYTE, int(token[3:5], 16))
    later = token.replace(_SPACE, " ")
    if settings.strips_first_space and token.startswith(_SPACE):
        return (_TEXT, later, token[1:].replace(_SPACE, " "), not settings.strips_every_first_space)
    return (_TEXT, later, later, False)


def _token(tokenizer: Any, sp: Any, token_id: int) -> str:
    """``MarianTokenizer.convert_ids_to_tokens`` for one id, as ``decode`` sees it (an id outside
    the vocabulary file is looked up in the SentencePiece model ``decode`` uses).
    """
    added = tokenizer.added_tokens_decoder
    if token_id in added:
        return str(added[token_id].content)
    if token_id in tokenizer.decoder:
        return str(tokenizer.decoder[token_id])
    if not 0 <= token_id < sp.get_piece_size():
        raise Unmodelled(f"Marian id {token_id} is neither in its vocabulary nor in its SentencePiece model")
    return str(sp.id_to_piece(token_id) or tokenizer.unk_token)


def marian_model(tokenizer: Any, *, size: int, skip: bool, cleanup: bool) -> ClassModel:
    """The model of a ``MarianTokenizer``."""
    sp = tokenizer.spm_target if tokenizer.separate_vocabs else tokenizer.spm_source
    settings = read_settings(sp.serialized_model_proto())
    special = set(tokenizer.all_special_tokens)
    dropped = special_ids(tokenizer) if skip else frozenset()
    values: list[tuple[Any, ...] | None] = []
    for token_id in range(size):
        if token_id in dropped:
            values.append(None)
            continue
        token = _token(tokenizer, sp, token_id)
        if token in special:
            values.append((_SPECIAL, (token + " ").replace(_SPACE, " ")))
        else:
            values.append(piece_value(sp, token, settings))
    tail: list[Stage] = [StripStage()]
    if cleanup:
        tail.extend(cleanup_stages())
    chain = compile_chain([Given(MarianStage())], values, tail)
    description = "Marian: SentencePiece pieces between special tokens, strip" + (
        " + cleanup" if cleanup else ""
    )
    return ClassModel("marian", description, chain, values, fast_oracle=False)
