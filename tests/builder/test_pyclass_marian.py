"""``puredetok._build.pyclasses.marian``: Marian (SentencePiece without a ``tokenizers`` backend). The
``sentencepiece`` library's own decode is the oracle of each run of pieces between special tokens;
special tokens are followed by a space; the Stage contract of Marian's stage (its settings:
tests/builder/test_pyclass_spm.py)."""

from __future__ import annotations

import functools
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import families
import puredetok
from decoder_contract import check_stage, text_of
from helpers import assert_streams_exactly
from puredetok._build.pyclasses.marian import marian_model
from puredetok._core.pyclasses.marian import MarianStage

NAMES = ["marian", "marian_keep_spaces"]


def processor(name: str) -> Any:
    tokenizer = families.family(name)
    return tokenizer.spm_target if tokenizer.separate_vocabs else tokenizer.spm_source


@functools.cache
def values(name: str) -> tuple[Any, ...]:
    tokenizer = families.family(name)
    return tuple(marian_model(tokenizer, size=len(tokenizer), skip=False, cleanup=False).vocabulary)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(
    "text", ["Hello world. 推理 🦩", "  two  spaces ", "a\u2047b", "<sep> x", "ẞ ⁂ 𝔘"], ids=range(5)
)
def test_runs_of_pieces_decode_as_sentencepiece_decodes_them(name: str, text: str) -> None:
    tokenizer, sp = families.family(name), processor(name)
    ids = tokenizer.encode(text, add_special_tokens=False)
    pieces = tokenizer.convert_ids_to_tokens(ids)
    expected = str(sp.decode_pieces(pieces)).strip()
    assert tokenizer.decode(ids) == expected
    for skip in (False, True):
        assert_streams_exactly(puredetok.codec_for(tokenizer, skip_special_tokens=skip), ids, expected)


@pytest.mark.parametrize("name", NAMES)
def test_special_tokens_are_followed_by_a_space(name: str) -> None:
    tokenizer = families.family(name)
    ids = [*tokenizer.encode("ab", add_special_tokens=False), tokenizer.eos_token_id, tokenizer.unk_token_id]
    ids += tokenizer.encode(" cd", add_special_tokens=False)
    expected = tokenizer.decode(ids)
    assert expected.startswith("ab</s> <unk> ")
    assert_streams_exactly(puredetok.codec_for(tokenizer), ids, expected)


@pytest.mark.parametrize("name", NAMES)
@given(data=st.data())
def test_stage_contract(name: str, data: st.DataObject) -> None:
    """Marian's stage over its per-id values: the contract, and its text stripped is ``decode``."""
    table = values(name)
    ids = data.draw(st.lists(st.integers(0, len(table) - 1), max_size=20))
    ids = [i for i in ids if table[i] is not None]
    cuts = data.draw(st.lists(st.integers(0, len(ids)), max_size=4))
    released = check_stage(MarianStage(), [(table[i], True) for i in ids], cuts)
    assert text_of(released).strip() == families.family(name).decode(ids)
