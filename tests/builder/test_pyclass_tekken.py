"""Tekken (mistral-common's ``Tekkenizer``) and ``tiktoken.Encoding``: the stage's contract and the
cases that set Tekken's decode apart from a plain byte-level one (control ids end a run of bytes;
the unused reserved ids). G1-G7 and contract C over the whole vocabularies are in
tests/builder/test_pyclass_mistral.py."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

import mistral_objects as mo
from decoder_contract import check_stage, text_of
from mistral_objects import codec, ids_of
from puredetok import feed, finish, start
from puredetok._build.pyclasses.tekken import tekken_model
from puredetok._core.pyclasses.tekken import TekkenStage


def test_tekken_control_ids_end_a_run_of_bytes_even_when_ignored() -> None:
    """The first two bytes of "€", a control id, the last byte: IGNORE drops the control id but its
    run still ends there, so each side is decoded alone (U+FFFD twice); KEEP adds its spelling."""
    tok = mo.inner("tekken_240911")
    ids = [1000 + 0xE2, 1000 + 0x82, 5, 1000 + 0xAC]
    for skip in (False, True):
        c, decode = codec("inner", "tekken_240911", skip), mo.decoder("inner", "tekken_240911", skip)
        state, text = feed(start(c), ids)
        assert text + finish(state) == decode(ids)
        assert "€" not in decode(ids) and decode(ids).count("\ufffd") == 2
        assert (tok.id_to_piece(5) in decode(ids)) is (not skip)


def test_unused_reserved_ids_keep_their_placeholder() -> None:
    """Tekken's unused control ids (``<SPECIAL_n>``): KEEP spells them, IGNORE drops them."""
    reserved = [40, 500, 999]
    for skip in (False, True):
        c, decode = codec("backend", "tekken_240718", skip), mo.decoder("backend", "tekken_240718", skip)
        state, text = feed(start(c), reserved)
        assert (
            text + finish(state)
            == decode(reserved)
            == ("" if skip else "<SPECIAL_40><SPECIAL_500><SPECIAL_999>")
        )


@settings(max_examples=max(10, settings().max_examples // 2))
@given(data=st.data())
def test_tekken_stage_contract(data: st.DataObject) -> None:
    table = tekken_model(mo.inner("tekken_240911"), skip=False).vocabulary
    ids = data.draw(ids_of("inner", "tekken_240911", max_size=20))
    cuts = data.draw(st.lists(st.integers(0, len(ids)), max_size=4))
    released = check_stage(TekkenStage(), [(table[i], True) for i in ids], cuts)
    assert text_of(released) == mo.decoder("inner", "tekken_240911", False)(ids)
