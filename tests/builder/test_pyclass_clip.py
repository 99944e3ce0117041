"""``puredetok._build.pyclasses.clip``: transformers' own CLIP test tokenizer (its
tests/models/clip/test_tokenization_clip.py: vocabulary, merges, "lower newer"), streamed exactly;
the model is the backend's byte-level chain, then ``</w>`` to a space and ``str.strip`` (those
stages' contracts: tests/core/test_decoder_replace.py, tests/core/test_decoder_whitespace.py)."""

from __future__ import annotations

import functools
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import puredetok
from helpers import assert_streams_exactly
from puredetok._core.chain import Chain
from puredetok._core.decoders.fuse import GlueStage
from puredetok._core.decoders.replace import ReplaceStage
from puredetok._core.decoders.whitespace import StripStage

VOCAB = [
    "l",
    "o",
    "w",
    "e",
    "r",
    "s",
    "t",
    "i",
    "d",
    "n",
    "lo",
    "l</w>",
    "w</w>",
    "r</w>",
    "t</w>",
    "low</w>",
]
VOCAB += ["er</w>", "lowest</w>", "newer</w>", "wider", "<unk>", "<|startoftext|>", "<|endoftext|>"]
MERGES = [("l", "o"), ("lo", "w</w>"), ("e", "r</w>")]


@functools.cache
def clip() -> Any:
    from transformers import CLIPTokenizer

    return CLIPTokenizer(vocab={t: i for i, t in enumerate(VOCAB)}, merges=MERGES, unk_token="<unk>")


def test_the_test_tokenizers_own_vector() -> None:
    """ "test_full_tokenizer": "lower newer" is these ids, and decodes back to itself."""
    tokenizer = clip()
    ids = [10, 2, 16, 9, 3, 2, 16]
    assert tokenizer.convert_tokens_to_ids(tokenizer.tokenize("lower newer")) == ids
    assert tokenizer.decode(ids) == "lower newer"
    for skip in (False, True):
        c = puredetok.codec_for(tokenizer, skip_special_tokens=skip)
        assert c.exact and c.family == "clip", c.reason
        assert_streams_exactly(c, ids, "lower newer")
        assert_streams_exactly(
            c, [21, *ids, 20, 22], tokenizer.decode([21, *ids, 20, 22], skip_special_tokens=skip)
        )


@pytest.mark.parametrize("skip", [False, True])
@given(ids=st.lists(st.integers(0, len(VOCAB) - 1), max_size=20))
def test_streams_what_decode_gives(skip: bool, ids: list[int]) -> None:
    c = puredetok.codec_for(clip(), skip_special_tokens=skip)
    assert_streams_exactly(c, ids, clip().decode(ids, skip_special_tokens=skip))


def test_the_model_is_the_backend_then_suffix_then_strip() -> None:
    stages = _chain(puredetok.codec_for(clip())).stages
    assert stages[-3:] == (GlueStage(), ReplaceStage((("</w>", " "),)), StripStage())


def test_a_replaced_wrapper_is_not_a_known_one() -> None:
    from transformers import CLIPTokenizer

    tokenizer = CLIPTokenizer(vocab={t: i for i, t in enumerate(VOCAB)}, merges=MERGES, unk_token="<unk>")
    tokenizer.backend_tokenizer.decode = lambda *args, **kwargs: "x"
    c = puredetok.codec_for(tokenizer)
    assert not c.exact and "wrapper" in c.reason


def _chain(c: puredetok.Codec) -> Chain:
    assert isinstance(c.decoding, Chain)
    return c.decoding
