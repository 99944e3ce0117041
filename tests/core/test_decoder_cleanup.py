"""``puredetok._core.decoders.cleanup``: transformers' space cleanup as a streaming transform, exact
against transformers in every mode it has; its rules are transformers' own and the crate's
WordPiece cleanup (tests/core/test_decoder_wordpiece.py); each of its stages keeps the Stage contract."""

from __future__ import annotations

import functools
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tokenizers import Tokenizer, decoders, models
from transformers import AutoTokenizer, PreTrainedTokenizerFast

import puredetok
from decoder_contract import check_idle, check_stage, elements, pieces_of, text_of
from helpers import assert_streams_exactly, codec, id_lists, reference, tokenizer
from puredetok._core.decoders.cleanup import TRANSFORMERS_RULES, WORDPIECE_RULES, apply_rules, cleanup_stages
from puredetok._core.decoders.replace import ReplaceStage

MODES = [
    ("t5_small", False),
    ("t5_small", True),
    ("distilbert_base_uncased", True),
    ("gpt2", True),  # ignored by transformers 5 for BPE: the codec must ignore it too
    ("mistral_v03", True),
]


@pytest.mark.parametrize(("name", "cleanup"), MODES)
@given(data=st.data())
def test_stream_equals_decode_with_cleanup_option(name: str, cleanup: bool, data: st.DataObject) -> None:
    ids = data.draw(id_lists(name))
    skip = data.draw(st.booleans())
    assert_streams_exactly(codec(name, skip, cleanup), ids, reference(name, ids, skip, cleanup))


@functools.cache
def forced(name: str) -> Any:
    return AutoTokenizer.from_pretrained(
        tokenizer(name).name_or_path,
        clean_up_tokenization_spaces=True,
        clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output=True,
    )


@functools.cache
def forced_codec(name: str) -> puredetok.Codec:
    return puredetok.codec_for(forced(name))


@pytest.mark.parametrize("name", ["llama3", "phi2"])
@given(data=st.data())
def test_forced_cleanup_on_bpe(name: str, data: st.DataObject) -> None:
    """When a user forces cleanup on a BPE tokenizer, the codec follows (transformers 32575)."""
    ids = data.draw(id_lists(name))
    c = forced_codec(name)
    assert c.clean_up_tokenization_spaces
    assert_streams_exactly(c, ids, forced(name).decode(ids))


@given(
    st.lists(
        st.sampled_from([" ", ".", "'", "n", "t", "s", "m", "v", "e", "r", "a", " '", "?", "!", ","]),
        max_size=40,
    )
)
def test_cleanup_cascade_stream_equals_whole_string(pieces: list[str]) -> None:
    """The stage cascade is exact for every chunking of its input."""
    stages = cleanup_stages()
    holds = [stage.initial for stage in stages]
    out: list[str] = []
    for piece in pieces:
        values: list[tuple[Any, bool]] = [(piece, True)]
        for i, stage in enumerate(stages):
            produced: list[tuple[Any, bool]] = []
            for value, glued in values:
                holds[i], more = stage.push(holds[i], value, glued)
                produced.extend(more)
            values = produced
        out.extend(value for value, _ in values)
    tail: list[tuple[Any, bool]] = []
    for i, stage in enumerate(stages):
        produced = []
        for value, glued in tail:
            holds[i], more = stage.push(holds[i], value, glued)
            produced.extend(more)
        tail = produced + stage.flush(holds[i])
    assert "".join(out) + "".join(v for v, _ in tail) == apply_rules(TRANSFORMERS_RULES, "".join(pieces))


PIECE_TEXTS = (" ", ".", "'", "n", "t", "s", "m", "v", "e", "r", "a", " '", "?", "!", ",", "'t", " do")
PIECES = st.sampled_from(PIECE_TEXTS)


@functools.cache
def verbatim() -> PreTrainedTokenizerFast:
    """A tokenizer whose ids decode to their pieces as they are, joined, so that its ``decode`` with
    ``clean_up_tokenization_spaces`` is transformers' cleanup and nothing else, on every release
    (5.0 has the cleanup inline in ``decode``, later releases a ``clean_up_tokenization`` method)."""
    vocab = {piece: i for i, piece in enumerate(PIECE_TEXTS)}
    backend = Tokenizer(models.WordLevel({**vocab, "[UNK]": len(vocab)}, unk_token="[UNK]"))
    backend.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=backend, clean_up_tokenization_spaces=True)


@given(pieces=st.lists(PIECES, max_size=40))
def test_the_rules_are_transformers_own(pieces: list[str]) -> None:
    """The rules give what the installed transformers' ``decode`` gives with its cleanup."""
    ids = [PIECE_TEXTS.index(piece) for piece in pieces]
    assert verbatim().decode(ids, clean_up_tokenization_spaces=False) == "".join(pieces)
    assert apply_rules(TRANSFORMERS_RULES, "".join(pieces)) == verbatim().decode(ids)


@given(pieces=st.lists(PIECES, max_size=40))
def test_the_wordpiece_rules_are_their_cascade(pieces: list[str]) -> None:
    """Text without a space is returned at once (every pattern has one): the same as the cascade."""
    text = "".join(pieces)
    expected = text
    for pattern, content in WORDPIECE_RULES:
        expected = expected.replace(pattern, content)
    assert apply_rules(WORDPIECE_RULES, text) == expected


@given(pieces=pieces_of(PIECES, max_size=24), data=st.data())
def test_stage_contract(pieces: list[tuple[str, bool]], data: st.DataObject) -> None:
    """Each stage of the cascade keeps the Stage contract; the first joins, and each later pass
    is its rules' ``str.replace`` over the joined text."""
    cuts = data.draw(st.lists(st.integers(0, len(pieces)), max_size=4))
    glue, *passes = cleanup_stages()
    joined = check_stage(glue, pieces, cuts)
    assert elements(joined) == ([text_of(pieces)] if pieces else [])
    text = text_of(pieces)
    for stage in passes:
        assert isinstance(stage, ReplaceStage)
        released = check_stage(stage, joined, cuts)
        for pattern, content in stage.rules:
            text = text.replace(pattern, content)
        assert text_of(released) == text
        check_idle(stage, "a")
        joined = released
    assert text == apply_rules(TRANSFORMERS_RULES, text_of(pieces))
