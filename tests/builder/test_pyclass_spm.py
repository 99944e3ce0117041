"""``puredetok._build.pyclasses.spm``: the settings SentencePiece's decoding depends on, read from a
serialized model proto as SentencePiece reads them: those of models trained here (Marian's,
tests/families.py), hand-built protos, and what is not modelled (a denormalizer, whitespace as a
suffix, a proto that does not parse)."""

from __future__ import annotations

import pytest

from puredetok._build.pyclasses.spm import SpmSettings, read_settings
from puredetok._core.decoders import Unmodelled
from test_pyclass_marian import processor


def _field(number: int, payload: int | bytes) -> bytes:
    def varint(value: int) -> bytes:
        out = b""
        while value >= 0x80:
            out += bytes([value & 0x7F | 0x80])
            value >>= 7
        return out + bytes([value])

    if isinstance(payload, int):
        return varint(number << 3) + varint(payload)
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def test_settings_are_read_from_the_proto() -> None:
    trained = read_settings(processor("marian").serialized_model_proto())
    assert trained == SpmSettings(True, True, " \u2047 ")
    assert read_settings(processor("marian_keep_spaces").serialized_model_proto()) == SpmSettings(
        True, False, " \u2047 "
    )
    # normalizer_spec (3): add_dummy_prefix (3) and remove_extra_whitespaces (4) off
    assert read_settings(_field(3, _field(3, 0) + _field(4, 0))) == SpmSettings(False, False, " \u2047 ")
    # trainer_spec (2): unk_surface (44)
    assert read_settings(_field(2, _field(44, b"<?>"))).unknown_surface == "<?>"


@pytest.mark.parametrize(
    ("proto", "why"),
    [
        (_field(5, _field(2, b"\x0a\x00")), "denormalizer"),  # denormalizer_spec with rules
        (_field(2, _field(24, 1)), "whitespace as a suffix"),  # treat_whitespace_as_suffix
        (b"\x1a\xff", "does not parse"),  # a length past the end
        (b"\x0b", "wire type 3"),  # a group: not a proto SentencePiece writes
    ],
)
def test_what_is_not_modelled(proto: bytes, why: str) -> None:
    with pytest.raises(Unmodelled, match=why):
        read_settings(proto)
