"""Character classes (``puredetok._core.classes``) and the stop layer's steady path built on them.

The steady path of ``advance`` returns a token's text without looking at it when its summary shares
no class with a stop string's first character. That is only sound if a summary never misses a
character the text holds, which is what these properties check; the stop layer's own properties
(tests/stops/test_stops.py) then show the streamed text is unchanged.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from helpers import TOKENIZERS, codec
from puredetok import StopRules, advance, advance_many, close, open_stream
from puredetok._core.classes import ADDED, ALL_CLASSES, class_of, classes_of

TEXTS = st.text(st.characters(exclude_categories=["Cs"]), max_size=12)


@given(TEXTS)
def test_a_summary_is_the_union_of_its_characters_classes(text: str) -> None:
    bits = 0
    for char in text:
        assert class_of(char) and class_of(char) & class_of(text) == class_of(char)
        bits |= class_of(char)
    assert class_of(text) == bits < ADDED


@given(st.lists(st.text(min_size=1, max_size=4), max_size=4), TEXTS)
def test_a_text_of_a_quiet_summary_holds_no_first_character_of_a_stop_string(
    stops: list[str], text: str
) -> None:
    rules = StopRules(stop=stops)
    if not rules.loud[class_of(text)]:
        assert not {stop[0] for stop in stops} & set(text)
    assert len(rules.loud) == ALL_CLASSES


def test_added_tokens_are_loud_only_while_there_are_ending_ids() -> None:
    assert StopRules(eos_token_ids={7}).loud[ADDED]
    assert not StopRules().loud[ADDED]
    assert not StopRules(stop=["\n"]).loud[ADDED]


def test_summaries_of_none_and_added_ids() -> None:
    summary = classes_of([None, "", "a", "é"], added={0, 2, 99})
    assert summary == (ADDED, 0, class_of("a") | ADDED, class_of("é"))


@pytest.mark.parametrize("name", TOKENIZERS)
def test_every_codec_summarises_its_fast_texts(name: str) -> None:
    c = codec(name)
    fast = c.decoding.fast
    assert len(c.classes) == len(fast)
    for token_id in range(0, len(fast), max(1, len(fast) // 2000)):
        text = fast[token_id]
        want = (class_of(text) if text else 0) | (ADDED if token_id in c.added_ids else 0)
        assert c.classes[token_id] == want


def test_the_steady_path_is_taken_and_turned_off_by_an_ending_id_that_is_not_an_added_token() -> None:
    c = codec("qwen3")
    newline = 198  # "\n": an ordinary token
    assert newline not in c.added_ids and 151645 in c.added_ids
    ids = [9707, 11, 1879, 0, newline, 40, 1079]  # "Hello, world!\nI am"
    usual = StopRules(stop=["User:"], eos_token_ids={151645})
    odd = StopRules(stop=["User:"], eos_token_ids={151645}, stop_token_ids={newline})
    stream = open_stream(c, usual)
    stream, _ = advance(stream, ids[0])
    assert stream._steady is not None  # the steady path is on
    odd_stream = open_stream(c, odd)
    assert odd_stream._steady is None
    # The general path gives what the steady one would: the text up to the stop token.
    for rules in (usual, odd):
        stepped, texts = open_stream(c, rules), []
        for token_id in ids:
            if stepped.finished:
                break
            stepped, text = advance(stepped, token_id)
            texts.append(text)
        stepped, tail = close(stepped)
        batched, text = advance_many(open_stream(c, rules), ids)
        batched, batched_tail = close(batched)
        assert "".join(texts) + tail == text + batched_tail
        assert stepped.finish_reason == batched.finish_reason
    assert "".join(texts) == "Hello, world!"
