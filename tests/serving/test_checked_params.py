"""Checked where given: a request's parameters, and every record that carries them, refuse an
invalid value when they are made, naming the field; what is made is accepted by an opening."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import shared_codecs, tokenizer
from puredetok.serving._detokenize_manager import DetokenizeManager
from puredetok.serving._messages import (
    DetokenizeMsg,
    Opening,
    SamplingParams,
    TokenizeMsg,
    UserMsg,
)
from puredetok.worker._wire import FrameDecoder, encode_batch
from sources import vocabulary_of

REFUSED: list[tuple[dict[str, Any], str]] = [
    ({"max_tokens": -1}, "max_tokens"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"max_new_tokens": 0}, "max_new_tokens"),
    ({"max_new_tokens": -7}, "max_new_tokens"),
    ({"stop": ("",)}, "stop"),
    ({"stop": ["a", ""]}, "stop"),
    ({"stop": [5]}, "stop"),
    ({"stop_token_ids": (-1,)}, "stop_token_ids"),
    ({"stop_token_ids": [True]}, "stop_token_ids"),
    ({"min_tokens": -1}, "min_tokens"),
    ({"min_tokens": 5, "max_tokens": 2}, "min_tokens"),
    ({"max_byte_run": -1}, "max_byte_run"),
    ({"out_of_vocab": "drop"}, "out_of_vocab"),
    ({"skip_special_tokens": "no"}, "skip_special_tokens"),
    ({"ignore_eos": 1}, "ignore_eos"),
    ({"clean_up_tokenization_spaces": 0}, "clean_up_tokenization_spaces"),
    ({"extra": {1: "x"}}, "extra"),
    ({"extra": {"x": 1, 2: "y"}}, "extra"),
    ({"extra": ["x"]}, "extra"),
    ({"max_tokens": 3, "max_new_tokens": 4}, "max_tokens or max_new_tokens"),
]


@pytest.mark.parametrize(("fields", "named"), REFUSED)
def test_invalid_parameters_are_refused_where_they_are_given(fields: dict[str, Any], named: str) -> None:
    with pytest.raises(ValueError, match=named):
        SamplingParams(**fields)
    # the same values from the wire: refused by the decoder, naming the field too
    with pytest.raises(msgspec.ValidationError, match=named.split()[0]):
        msgspec.msgpack.decode(msgspec.msgpack.encode(fields), type=SamplingParams)


def test_records_that_carry_parameters_refuse_invalid_values_too() -> None:
    with pytest.raises(ValueError, match="prompt_ids"):
        Opening([5, -5])
    with pytest.raises(ValueError, match="consumed"):
        Opening(consumed=-1)
    with pytest.raises(ValueError, match="params"):
        Opening(params=msgspec.structs.asdict(SamplingParams()))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="params"):
        TokenizeMsg(1, "hi", params={"max_tokens": -3})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="input_ids"):
        UserMsg(1, ["x"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="uid"):
        DetokenizeMsg(True, [5])
    with pytest.raises(ValueError, match="token_ids"):
        DetokenizeMsg(1, ["5"], True)  # type: ignore[list-item]


def test_sequences_are_taken_as_lists_and_stored_as_tuples() -> None:
    params = SamplingParams(stop=["a", "b"], stop_token_ids=[7])
    assert params.stop == ("a", "b") and params.stop_token_ids == (7,)
    assert params == SamplingParams(stop=("a", "b"), stop_token_ids=(7,))
    message = DetokenizeMsg("u", [5, 6], open=Opening([1, 2], params))
    assert message.token_ids == (5, 6) and message.open is not None and message.open.prompt_ids == (1, 2)
    assert hash(DetokenizeMsg("u", [5, 6])) == hash(DetokenizeMsg("u", (5, 6)))
    extras = SamplingParams(stop=["a"], extra={"logit_bias": {"5": 1.0}, "seed": [1]})
    assert hash(extras) == hash(SamplingParams(stop=("a",), extra={"seed": [1], "logit_bias": {"5": 1}}))
    assert hash(Opening([1], extras)) == hash(Opening((1,), extras))
    chat = TokenizeMsg(1, messages=[{"role": "user", "content": "x"}], template_options={"a": [1]})
    assert hash(chat) == hash(
        TokenizeMsg(1, messages=({"content": "x", "role": "user"},), template_options={"a": [1]})
    )
    assert len({extras, SamplingParams(stop=("a",), extra={"seed": [1], "logit_bias": {"5": 1}}), chat}) == 2
    assert UserMsg(1, [3, 4]).input_ids == (3, 4)
    assert TokenizeMsg(1, messages=[{"role": "user", "content": "x"}]).messages == (
        {"role": "user", "content": "x"},
    )


def test_a_decoded_record_is_checked_and_stores_tuples() -> None:
    """A frame decoder's records are checked as those made in Python are (msgspec runs their
    ``__post_init__`` after decoding): what it reads equals what is made in Python, sequences as
    tuples, and a bad value is refused, naming the field."""
    params = SamplingParams(stop=["a", "b"], stop_token_ids=[7], max_tokens=9, min_tokens=2)
    message = DetokenizeMsg("u", [5], open=Opening([1, 2], params))
    frame = encode_batch([message])
    decoded = FrameDecoder().decode(frame).batch.items[0]
    assert decoded == message
    assert isinstance(decoded, DetokenizeMsg) and decoded.open is not None
    assert type(decoded.open.prompt_ids) is tuple and type(decoded.open.params.stop) is tuple
    assert decoded.open.params.max_new_tokens == 9
    bad = frame.replace(
        msgspec.msgpack.encode("stop_token_ids") + b"\x91\x07",
        msgspec.msgpack.encode("stop_token_ids") + b"\x91\xff",
    )
    assert bad != frame
    refused = FrameDecoder().decode(bad)
    assert not len(refused.batch) and "stop_token_ids" in refused.rejected[0].reason
    with pytest.raises(ValueError, match="stop_token_ids"):
        SamplingParams(stop_token_ids=[-1])
    with pytest.raises(ValueError, match="stop"):
        SamplingParams(stop=[""])


def test_max_completion_tokens_is_the_chat_apis_name_for_the_limit() -> None:
    assert SamplingParams.from_openai({"max_completion_tokens": 5}) == SamplingParams(max_tokens=5)
    assert SamplingParams.from_openai({"max_completion_tokens": 5, "max_tokens": 5}).max_tokens == 5
    assert SamplingParams.from_openai({"max_completion_tokens": None, "max_tokens": 4}).max_tokens == 4
    assert "max_completion_tokens" not in SamplingParams.from_openai({"max_completion_tokens": 5}).extra
    bodies: list[tuple[dict[str, Any], str]] = [
        ({"max_completion_tokens": 5, "max_tokens": 6}, "max_completion_tokens: 5 but max_tokens 6"),
        ({"max_completion_tokens": -7}, "max_completion_tokens: must be >= 1"),
        ({"max_completion_tokens": 0}, "max_completion_tokens: must be >= 1"),
        ({"max_completion_tokens": "5"}, "max_completion_tokens: must be an integer"),
        ({"max_completion_tokens": 2, "min_tokens": 3}, "min_tokens: must not exceed"),
    ]
    for body, named in bodies:
        with pytest.raises(ValueError, match=named):
            SamplingParams.from_openai(body)


ANY_INT = st.none() | st.integers(-3, 40)
ANY_FLAG = st.none() | st.booleans() | st.sampled_from([0, 1, "yes"])


@settings(max_examples=150, deadline=None)
@given(
    fields=st.fixed_dictionaries(
        {},
        optional={
            "max_new_tokens": ANY_INT,
            "max_tokens": ANY_INT,
            "min_tokens": st.integers(-2, 40),
            "stop": st.lists(st.sampled_from(["", "a", "\n\n", "好", "x" * 40]), max_size=4),
            "stop_token_ids": st.lists(st.integers(-2, 60_000), max_size=4),
            "ignore_eos": ANY_FLAG,
            "include_stop_str_in_output": ANY_FLAG,
            "skip_special_tokens": st.booleans() | st.just("no"),
            "clean_up_tokenization_spaces": ANY_FLAG,
            "max_byte_run": st.sampled_from([None, 0, 2, -1]),
            "out_of_vocab": st.sampled_from([None, "ignore", "raise", "drop"]),
            "spaces_between_special_tokens": ANY_FLAG,
            "extra": st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
        },
    ),
    prompt=st.lists(st.integers(0, 50_000), max_size=6),
)
def test_any_parameters_that_construct_are_accepted_by_an_opening(
    fields: dict[str, Any], prompt: list[int]
) -> None:
    """Whatever an opening refuses is refused where the parameters are made: what constructs opens
    (a prompt's ids are checked against the tokenizer's vocabulary, which parameters cannot know)."""
    try:
        params = SamplingParams(**fields)
    except ValueError as error:
        assert any(name in str(error) for name in fields), (fields, error)
        return
    manager = DetokenizeManager(tokenizer("gpt2"), codecs=shared_codecs(), vocabulary=vocabulary_of("gpt2"))
    manager.open("r", Opening(prompt, params))
    [reply] = manager.handle([DetokenizeMsg("r", [15496], True)])
    assert reply.error is None and reply.finished
