"""``puredetok._core.decoders.whitespace``: Python's ``str.strip()`` over a stream (what CLIP, the CTC
speech tokenizers and Marian do to their whole text). Its vectors are ``str.strip`` itself; its
stage keeps the Stage contract and a constant-size hold on runs of one whitespace piece."""

from __future__ import annotations

import pickle

from hypothesis import given
from hypothesis import strategies as st

from decoder_contract import check_idle, check_stage, pieces_of, text_of
from puredetok._core.decoders.whitespace import EMPTY_SPACE, HeldSpace, StripStage

WHITESPACE = [" ", "\t", "\n", "\u3000", "\x85", "\u2028", "  ", " \n"]
PIECES = st.sampled_from([*WHITESPACE, "a", "b c", " d ", "", "\u200b"])  # U+200B is not whitespace


@given(pieces=pieces_of(PIECES, max_size=20), data=st.data())
def test_stage_contract(pieces: list[tuple[str, bool]], data: st.DataObject) -> None:
    cuts = data.draw(st.lists(st.integers(0, len(pieces)), max_size=4))
    stage = StripStage()
    released = check_stage(stage, pieces, cuts)
    assert text_of(released) == text_of(pieces).strip()
    check_idle(stage, "a")


@given(pieces=st.lists(PIECES, max_size=20))
def test_held_whitespace_is_what_was_pushed(pieces: list[str]) -> None:
    held = EMPTY_SPACE
    for piece in pieces:
        held = held.add(piece)
    assert str(held) == "".join(pieces) and len(held) == len("".join(pieces))
    assert pickle.loads(pickle.dumps(held)) == held and hash(held) == hash(
        HeldSpace(None, str(held), 1, len(held))
    )


def test_a_run_of_one_piece_keeps_a_constant_size() -> None:
    stage = StripStage()
    hold, _ = stage.push(stage.initial, "a", True)
    sizes = []
    for count in range(1, 2001):
        hold, out = stage.push(hold, " ", True)
        assert out == []
        if count in (10, 2000):
            sizes.append(len(pickle.dumps(hold)))
    assert sizes[1] <= sizes[0] + 8
    assert stage.push(hold, "b", True) == (stage.idle, [(" " * 2000 + "b", True)])
