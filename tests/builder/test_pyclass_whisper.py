"""``puredetok._build.pyclasses.whisper``: transformers' own Whisper vector (its
tests/models/whisper/test_tokenization_whisper.py, "test_skip_special_tokens_skips_prompt_ids",
spelled with the Whisper tokenizer the tests build), timestamps removed as ``decode`` does, the
Stage contract of the timestamp stage, and the prompt rule's ``feed`` equal to its ``step``."""

from __future__ import annotations

import functools
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

import families
import puredetok
from decoder_contract import check_idle, check_stage, pieces_of, text_of
from helpers import assert_streams_exactly
from puredetok._core.pyclasses.whisper import TimestampStage, WhisperPrompt

TIMESTAMP = re.compile(r"<\|(\d+\.\d+)\|>")  # WhisperTokenizer.timestamp_pat
PIECES = [
    "<|startofprev|>",
    " Mr. Quilter",
    "<|startoftranscript|>",
    "<|en|>",
    "<|transcribe|>",
    "<|notimestamps|>",
    " On the general principles of art, Mr. Quilter writes with equal lucidity.",
    "<|endoftext|>",
]
WITH_SPECIALS = (
    "<|startofprev|> Mr. Quilter<|startoftranscript|><|en|><|transcribe|><|notimestamps|> On the general"
    " principles of art, Mr. Quilter writes with equal lucidity.<|endoftext|>"
)
WITHOUT_SPECIALS = " On the general principles of art, Mr. Quilter writes with equal lucidity."


@functools.cache
def codec(skip: bool) -> puredetok.Codec:
    return puredetok.codec_for(families.family("whisper"), skip_special_tokens=skip)


def encode(*pieces: str) -> list[int]:
    tokenizer = families.family("whisper")
    return [i for piece in pieces for i in tokenizer.encode(piece, add_special_tokens=False)]


def test_the_prompt_before_the_transcript_is_skipped() -> None:
    ids = encode(*PIECES)
    tokenizer = families.family("whisper")
    assert tokenizer.decode(ids, skip_special_tokens=False) == WITH_SPECIALS
    assert tokenizer.decode(ids, skip_special_tokens=True) == WITHOUT_SPECIALS
    assert_streams_exactly(codec(False), ids, WITH_SPECIALS)
    assert_streams_exactly(codec(True), ids, WITHOUT_SPECIALS)
    assert isinstance(codec(True).decoding, WhisperPrompt) and codec(True).exact


@pytest.mark.parametrize(
    ("pieces", "expected"),
    [
        (["<|0.00|>", " Hello", "<|1.00|>"], " Hello"),
        (["<|", "0", ".", "5", "0", "|>", " spelled"], " spelled"),  # ordinary tokens spelling one
        (["<|0.5|", " not one"], "<|0.5| not one"),
        (["<|12|>", " no dot"], "<|12|> no dot"),
    ],
)
def test_timestamps_are_removed_as_decode_removes_them(pieces: list[str], expected: str) -> None:
    ids = encode(*pieces)
    assert families.family("whisper").decode(ids) == expected
    for skip in (False, True):
        assert_streams_exactly(codec(skip), ids, expected)


@given(
    pieces=pieces_of(st.sampled_from(["<", "|", "<|", "0", "12", ".", "5", "|>", ">", "a", "٣", ""])),
    data=st.data(),
)
def test_timestamp_stage_contract(pieces: list[tuple[str, bool]], data: st.DataObject) -> None:
    cuts = data.draw(st.lists(st.integers(0, len(pieces)), max_size=4))
    released = check_stage(TimestampStage(), pieces, cuts)
    assert text_of(released) == TIMESTAMP.sub("", text_of(pieces))
    check_idle(TimestampStage(), "a")


@given(ids=st.lists(st.sampled_from(encode(*PIECES, "<|0.00|>", "<|", "0")), max_size=30), data=st.data())
def test_the_prompt_rule_feeds_as_it_steps(ids: list[int], data: st.DataObject) -> None:
    prompt = codec(True).decoding
    assert isinstance(prompt, WhisperPrompt)
    hold, texts = prompt.initial, []
    for token_id in ids:
        hold, text = prompt.step(hold, token_id)
        texts.append(text)
        hash(hold)
    cut = data.draw(st.integers(0, len(ids)))
    fed, first = prompt.feed(prompt.initial, ids[:cut])
    fed, second = prompt.feed(fed, ids[cut:])
    assert fed == hold and first + second == "".join(texts)
    assert "".join(texts) + prompt.finish(hold) == families.family("whisper").decode(
        ids, skip_special_tokens=True
    )
