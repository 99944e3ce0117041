"""``puredetok._build.pyclasses.speech_ctc``: transformers' own Wav2Vec2CTCTokenizer test vectors (its
tests/models/wav2vec2/test_tokenization_wav2vec2.py, over the vocabulary that test writes) streamed
exactly, and the Stage contract of the lower-casing stage (the grouping stage's:
tests/core/test_decoder_ctc.py; the strip's: tests/core/test_decoder_whitespace.py)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import puredetok
from decoder_contract import check_idle, check_stage, pieces_of, text_of
from helpers import assert_streams_exactly
from puredetok import InvalidTokenError
from puredetok._core.pyclasses.speech_ctc import LowerStage

VOCAB = "<pad> <s> </s> <unk> | E T A O N I H S R D L U M W C F G Y P B V K ' X J Q Z".split(" ")
UNK = 3  # the test's ids 77 and 98 are past this vocabulary: decode reads them as <unk>


def speech_tokenizer(added: bool = False, lower: bool = False) -> Any:
    from transformers import Wav2Vec2CTCTokenizer

    folder = Path(tempfile.mkdtemp(prefix="puredetok-w2v-"))
    (folder / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(VOCAB)}), encoding="utf-8")
    tokenizer = Wav2Vec2CTCTokenizer(str(folder / "vocab.json"), do_lower_case=lower)
    if added:  # "test_tokenizer_decode_added_tokens"
        tokenizer.add_tokens(["!", "?"])
        tokenizer.add_special_tokens({"cls_token": "$$$"})
    return tokenizer


VECTORS: list[tuple[list[int], str, str]] = [
    # "test_tokenizer_decode" and "test_tokenizer_decode_special" (ids, decode, skipping specials)
    ([11, 5, 15, 0, 15, 8, UNK], "HELLO<unk>", "HELO"),
    ([24, 22, 5, 4, 24, 22, 5, UNK], "BYE BYE<unk>", "BYE BYE"),
    ([11, 5, 5, 5, 5, 5, 15, 15, 15, 0, 15, 8, UNK], "HELLO<unk>", "HELO"),
    ([24, 22, 5, 0, 0, 0, 4, 24, 22, 5, UNK, 4], "BYE BYE<unk>", "BYE BYE"),
    # "test_offsets": HEEEEE||LLL<pad>LO<unk>
    ([11, 5, 5, 5, 5, 5, 4, 4, 15, 15, 15, 0, 15, 8, UNK], "HE LLO<unk>", "HE LO"),
]
ADDED_VECTORS: list[tuple[list[int], str, str]] = [
    # "test_tokenizer_decode_added_tokens"; that test (written for transformers 4) expects
    # "HELLO<unk>!?!?$$$": transformers 5, the ground truth here, turns the delimiter between the
    # added tokens into a space as it does everywhere else.
    ([11, 5, 15, 0, 15, 8, UNK, 32, 32, 33, 4, 32, 32, 33, 34, 34], "HELLO<unk>!? !?$$$", "HELO!? !?"),
    ([24, 22, 5, 4, 24, 22, 5, UNK, 0, 34, 34], "BYE BYE<unk>$$$", "BYE BYE"),
]


@pytest.mark.parametrize(
    ("added", "ids", "kept", "skipped"), [(False, *v) for v in VECTORS] + [(True, *v) for v in ADDED_VECTORS]
)
def test_transformers_vectors(added: bool, ids: list[int], kept: str, skipped: str) -> None:
    tokenizer = speech_tokenizer(added)
    for skip, expected in ((False, kept), (True, skipped)):
        assert tokenizer.decode(ids, skip_special_tokens=skip) == expected
        c = puredetok.codec_for(tokenizer, skip_special_tokens=skip)
        assert c.exact and c.family == "ctc", c.reason
        assert_streams_exactly(c, ids, expected)


def test_ids_past_the_vocabulary_are_refused_not_guessed() -> None:
    """transformers reads them as <unk> where other tokenizers skip them: puredetok refuses them
    (G7), and refuses to build an ``out_of_vocab="ignore"`` codec for this class."""
    tokenizer = speech_tokenizer()
    assert tokenizer.decode([11, 98]) == "H<unk>"
    c = puredetok.codec_for(tokenizer)
    with pytest.raises(InvalidTokenError, match="98"):
        puredetok.feed(puredetok.start(c), [11, 98])
    with pytest.raises(ValueError, match="out_of_vocab"):
        puredetok.codec_for(tokenizer, out_of_vocab="ignore")


def test_lower_case_output() -> None:
    tokenizer = speech_tokenizer(lower=True)
    ids = [11, 5, 15, 0, 15, 8, 4, 4, 18]
    assert tokenizer.decode(ids) == "hello w"
    assert_streams_exactly(puredetok.codec_for(tokenizer), ids, "hello w")


@given(pieces=pieces_of(st.sampled_from(["A", "É", "ß", "İ", " ", "x", ""])), data=st.data())
def test_lower_stage_contract(pieces: list[tuple[str, bool]], data: st.DataObject) -> None:
    cuts = data.draw(st.lists(st.integers(0, len(pieces)), max_size=4))
    released = check_stage(LowerStage(), pieces, cuts)
    assert text_of(released) == text_of(pieces).lower()
    check_idle(LowerStage(), "a")
