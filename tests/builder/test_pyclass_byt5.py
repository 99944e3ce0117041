"""``puredetok._build.pyclasses.byt5``: transformers' own ByT5 test vectors (its
tests/models/byt5/test_tokenization_byt5.py), streamed exactly; the model is bytes through the
UTF-8 stage with invalid bytes dropped (that stage's contract: tests/core/test_decoder_byte_level.py)."""

from __future__ import annotations

import functools

import pytest

import families
import puredetok
from helpers import assert_streams_exactly
from puredetok._core.chain import Chain
from puredetok._core.decoders.byte_level import Utf8Stage

VECTORS: list[tuple[list[int], str]] = [
    # "test_multibytes_char"
    ([88, 113, 108, 102, 114, 103, 104, 35, 229, 133, 175, 49, 1], "Unicode €.</s>"),
    ([104, 35, 198, 171, 35, 198, 172, 35, 198, 173, 35, 198, 174, 1], "e è é ê ë</s>"),
    # "test_eos_in_input": the ids of "Summary of the text. </s>"
    (
        [
            86,
            120,
            112,
            112,
            100,
            117,
            124,
            35,
            114,
            105,
            35,
            119,
            107,
            104,
            35,
            119,
            104,
            123,
            119,
            49,
            35,
            1,
        ],
        "Summary of the text. </s>",
    ),
    # "test_decode_single_bytes": byte 252 alone is not UTF-8 and is dropped
    ([255], ""),
]


@functools.cache
def codec(skip: bool) -> puredetok.Codec:
    return puredetok.codec_for(families.family("byt5"), skip_special_tokens=skip)


@pytest.mark.parametrize(("ids", "expected"), VECTORS, ids=["unicode", "accents", "eos", "single-byte"])
def test_transformers_vectors(ids: list[int], expected: str) -> None:
    tokenizer = families.family("byt5")
    assert tokenizer.decode(ids) == expected
    c = codec(False)
    assert c.exact and c.family == "byt5", c.reason
    assert_streams_exactly(c, ids, expected)
    skipped = tokenizer.decode(ids, skip_special_tokens=True)
    assert skipped == expected.replace("</s>", "")
    assert_streams_exactly(codec(True), ids, skipped)


def test_the_model_drops_invalid_bytes() -> None:
    stages = _chain(codec(False)).stages
    assert stages == (Utf8Stage("ignore"),)
    # A character cut short is held (at most 3 bytes), then dropped at the end.
    state, text = puredetok.feed(puredetok.start(codec(False)), [229, 133])
    assert text == "" and puredetok.finish(state) == "" == families.family("byt5").decode([229, 133])
    state, text = puredetok.step(state, 175)
    assert text == "€"


def _chain(c: puredetok.Codec) -> Chain:
    assert isinstance(c.decoding, Chain)
    return c.decoding
