"""What SentencePiece's own ``decode_pieces`` does, read from a model's serialized proto and its
piece table, for the classes that decode through the ``sentencepiece`` library (Marian).

SentencePiece decodes a list of pieces as follows. A control piece (``<s>``, ``</s>``) is nothing;
an unknown piece is the unknown surface (`` ⁇ ``) if it is the ``<unk>`` piece itself, else its own
spelling; a byte piece ``<0xNN>`` is a byte, and each run of byte pieces is decoded character by
character (a byte that does not start a well-formed character is one U+FFFD on its own); any other
piece is its text with ``▁`` as a space. While nothing has been output yet, a piece loses one
leading ``▁`` (if the model adds a dummy prefix or removes extra whitespace; with the latter, every
such piece does, otherwise only the first that has one).
"""

from __future__ import annotations

import attrs

from puredetok._core.decoders.base import Unmodelled

_DEFAULT_UNKNOWN = " \u2047 "


@attrs.frozen
class SpmSettings:
    """The normalizer settings and surfaces that decoding depends on."""

    strips_first_space: bool
    """A leading ``▁`` of the output's first pieces is dropped (add_dummy_prefix or
    remove_extra_whitespaces)."""
    strips_every_first_space: bool
    """Every piece before any text loses its leading ``▁`` (remove_extra_whitespaces)."""
    unknown_surface: str


def _varint(data: bytes, position: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if position >= len(data):
            raise Unmodelled("a SentencePiece model proto that does not parse")
        byte = data[position]
        value |= (byte & 0x7F) << shift
        position += 1
        if byte < 0x80:
            return value, position
        shift += 7


def _fields(data: bytes) -> dict[int, list[int | bytes]]:
    """The fields of one protobuf message (varints and length-delimited values only)."""
    fields: dict[int, list[int | bytes]] = {}
    position = 0
    while position < len(data):
        key, position = _varint(data, position)
        number, wire = key >> 3, key & 7
        value: int | bytes
        if wire == 0:
            value, position = _varint(data, position)
        elif wire == 2:
            length, position = _varint(data, position)
            value, position = data[position : position + length], position + length
        elif wire == 5:
            value, position = int.from_bytes(data[position : position + 4], "little"), position + 4
        elif wire == 1:
            value, position = int.from_bytes(data[position : position + 8], "little"), position + 8
        else:
            raise Unmodelled(f"a SentencePiece model proto with wire type {wire}")
        fields.setdefault(number, []).append(value)
    return fields


def _message(fields: dict[int, list[int | bytes]], number: int) -> dict[int, list[int | bytes]]:
    values = fields.get(number)
    if not values:
        return {}
    last = values[-1]
    return _fields(last) if isinstance(last, bytes) else {}


def _flag(fields: dict[int, list[int | bytes]], number: int, default: bool) -> bool:
    values = fields.get(number)
    return bool(values[-1]) if values else default


def read_settings(serialized: bytes) -> SpmSettings:
    """The decoding settings of a serialized ``ModelProto``; Unmodelled for a model whose decoding
    also depends on what is not modelled (a denormalizer, whitespace as a suffix).
    """
    model = _fields(serialized)
    trainer = _message(model, 2)
    normalizer = _message(model, 3)
    denormalizer = _message(model, 5)
    if any(value for number in (2, 6) for value in denormalizer.get(number, [])):
        raise Unmodelled("a SentencePiece model with a denormalizer")
    if _flag(trainer, 24, False):
        raise Unmodelled("a SentencePiece model that treats whitespace as a suffix")
    surfaces = trainer.get(44)
    surface = surfaces[-1] if surfaces else None
    unknown = surface.decode("utf-8") if isinstance(surface, bytes) else _DEFAULT_UNKNOWN
    add_dummy_prefix = _flag(normalizer, 3, True)
    remove_extra_whitespaces = _flag(normalizer, 4, True)
    return SpmSettings(
        strips_first_space=add_dummy_prefix or remove_extra_whitespaces,
        strips_every_first_space=remove_extra_whitespaces,
        unknown_surface=unknown,
    )
