"""``puredetok._core.decoders.ctc``: the crate's vectors (its Rust tests' handmade and LibriSpeech
samples, its Python bindings' tests) and the Stage contract of its grouping stage."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tokenizers import decoders

from decoder_contract import (
    check_stage,
    check_stream_against_library,
    check_vector,
    library_decode,
    pieces_of,
    text_of,
)
from puredetok._core.decoders import Unmodelled
from puredetok._core.decoders.ctc import CTC, GroupStage

P = "<pad>"
# The crate's two LibriSpeech samples, "_" standing for "<pad>" (ctc.rs, "librispeech_sample" and
# "another_librispeech_sample").
LIBRISPEECH_1 = (
    "_ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ A | | _ M _ _ _ _ A _ _ N _ _ _ | | "
    "| _ _ _ _ S _ _ _ A I _ D D | | T T _ O _ | | T H E E | | | _ U U _ N N _ I _ _ V _ _ _ E R R _ "
    "_ _ S E E | | _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ S S _ "
    "_ _ _ I _ R R _ _ | | | _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ I _ _ _ | _ _ _ E X _ _ _ _ _ _ _ "
    "_ _ _ I _ S _ _ T _ _ | | _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _"
)
LIBRISPEECH_2 = (
    "_ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ H _ I _ S S | | _ _ _ I N _ _ S _ T T _ _ A N C C T _ | "
    "| | | | _ _ _ _ P _ _ _ _ A _ _ N N N _ _ I _ C _ _ | | _ W _ _ A S _ | | _ _ _ F _ _ O L _ _ L "
    "L O O W E E D | | _ B _ _ _ Y _ | | | A | | _ S S S _ M M _ _ _ A L L _ _ _ _ L _ | | | _ _ _ _ "
    "S H H _ _ _ _ A R R _ _ P _ _ | _ _ _ _ _ _ _ _ _ B _ _ L L _ _ _ _ _ O W W _ _ | | | _ _ _ _ _ "
    "_ _ H _ _ _ _ _ _ _ I G H H | | _ _ O N _ | | H _ I S S | | _ _ C H H _ _ _ E _ S S _ T T _ _ | "
    "| | _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _"
)
VECTORS: list[tuple[str, list[str], list[str] | str]] = [
    # tokenizers/src/decoders/ctc.rs, tests "handmade_sample", "handmade_with_delimiter_sample" and
    # the two LibriSpeech samples
    (P, f"{P} {P} h e e l l {P} l o o o {P}".split(" "), ["h", "e", "l", "l", "o"]),
    (
        P,
        f"{P} {P} h e e l l {P} l o o o {P} {P} | {P} w o o o r {P} {P} l l d {P} {P} {P} {P}".split(" "),
        ["h", "e", "l", "l", "o", " ", "w", "o", "r", "l", "d"],
    ),
    (P, LIBRISPEECH_1.replace("_", P).split(" "), list("A MAN SAID TO THE UNIVERSE SIR I EXIST ")),
    (
        P,
        LIBRISPEECH_2.replace("_", P).split(" "),
        list("HIS INSTANCT PANIC WAS FOLLOWED BY A SMALL SHARP BLOW HIGH ON HIS CHEST "),
    ),
    # bindings/python/tests/bindings/test_decoders.py, TestCTCDecoder
    ("[PAD]", "[PAD] [PAD] h e e l l [PAD] l o o o [PAD]".split(" "), "hello"),
]
POOL = [P, "|", "a", "b", "ab", ".", " .", "a<pad>b", "|x|", "do", " not", "n't", " 's", "<pad><pad>"]


@pytest.mark.parametrize(
    ("pad", "tokens", "expected"), VECTORS, ids=["hello", "hello-world", "libri1", "libri2", "PAD"]
)
def test_crate_vectors(pad: str, tokens: list[str], expected: list[str] | str) -> None:
    check_vector(decoders.CTC(pad_token=pad), tokens, expected)


@pytest.mark.parametrize("cleanup", [True, False])
@given(ids=st.lists(st.integers(0, len(POOL) - 1), max_size=20))
def test_streams_what_the_library_decodes(cleanup: bool, ids: list[int]) -> None:
    check_stream_against_library(decoders.CTC(P, "|", cleanup), POOL, ids)
    then_metaspace = decoders.Sequence([decoders.CTC(P, "|", cleanup), decoders.Metaspace()])
    check_stream_against_library(then_metaspace, [*POOL, "▁", "▁a"], ids)


@pytest.mark.parametrize("cleanup", [True, False])
@given(tokens=st.lists(st.sampled_from(POOL), max_size=20), glued=st.booleans(), data=st.data())
def test_stage_contract(cleanup: bool, tokens: list[str], glued: bool, data: st.DataObject) -> None:
    model = CTC(P, "|", cleanup)
    pieces = [(model.map_token(token, False), glued) for token in tokens]
    cuts = data.draw(st.lists(st.integers(0, len(pieces)), max_size=4))
    stage = model.stage()
    assert stage == GroupStage()
    released = check_stage(stage, pieces, cuts)
    assert text_of(released) == library_decode(decoders.CTC(P, "|", cleanup), tokens)
    assert all(not piece_glued for _, piece_glued in released)  # one element per kept token


@given(tokens=pieces_of(st.sampled_from(POOL), max_size=8))
def test_the_grouping_never_idles_after_the_first_token(tokens: list[tuple[str, bool]]) -> None:
    """As documented: the hold is the previous token, so every step goes through the stage."""
    stage = GroupStage()
    assert stage.initial == stage.idle is None
    hold = stage.initial
    for token, glued in tokens:
        hold, _ = stage.push(hold, CTC(P, "|", True).map_token(token, False), glued)
        assert hold == token != stage.idle


def test_the_grouping_compares_whole_tokens_only() -> None:
    with pytest.raises(Unmodelled):
        CTC(P, "|", True).fragment_stage()
