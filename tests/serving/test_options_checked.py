"""Every option and every record is checked alike where it is given. None means "none" where vLLM
and OpenAI-style requests send null for it; a value of the wrong type is an ``OptionTypeError``
naming the option (a TypeError, and a ValueError as such values raised before), never taken for its
truth value; every record refuses a bad value when it is made."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

from helpers import codec, tokenizer
from puredetok import Stream, codec_for
from puredetok.errors import OptionTypeError
from puredetok.serving._detokenize_manager import DetokenizeManager
from puredetok.serving._messages import (
    AbortMsg,
    DetokenizeBatch,
    DetokenizeMsg,
    HealthCheckMsg,
    Opening,
    SamplingParams,
    UserMsg,
)
from puredetok.stops import StopRules, advance_many, open_stream
from puredetok.worker._wire import FrameDecoder, encode_batch


def given(option: str, value: object) -> dict[str, Any]:
    """The keyword arguments that give ``option`` as ``value`` (of any type: that is the test)."""
    return {option: value}


def test_none_is_no_stop_strings_nor_ids_as_vllm_and_openai_send_it() -> None:
    params = SamplingParams(stop=None, stop_token_ids=None)  # type: ignore[arg-type]
    assert params == SamplingParams() and params.stop == () and params.stop_token_ids == ()
    rules = StopRules(stop=None, stop_token_ids=None, eos_token_ids=None)
    assert rules == StopRules()
    assert SamplingParams.from_openai({"stop": None, "stop_token_ids": None}) == SamplingParams()
    # what a manager opens with them streams as with no stop at all
    manager = DetokenizeManager(tokenizer("gpt2"))
    manager.open("r", Opening((), params))
    [reply] = manager.handle([DetokenizeMsg("r", (15496, 11), True)])
    assert reply.error is None and reply.incremental_output == "Hello,"


CODEC_OPTIONS: list[tuple[str, object]] = [
    ("skip_special_tokens", "false"),
    ("skip_special_tokens", 0),
    ("skip_special_tokens", None),
    ("clean_up_tokenization_spaces", "no"),
    ("clean_up_tokenization_spaces", 1),
    ("spaces_between_special_tokens", "true"),
    ("window", "yes"),
    ("max_byte_run", "4"),
    ("max_byte_run", 4.0),
    ("max_byte_run", True),
    ("out_of_vocab", 1),
]


@pytest.mark.parametrize(("option", "value"), CODEC_OPTIONS)
def test_codec_for_refuses_an_option_of_the_wrong_type_naming_it(option: str, value: object) -> None:
    with pytest.raises(OptionTypeError, match=option) as raised:
        codec_for(tokenizer("gpt2"), **given(option, value))
    assert isinstance(raised.value, TypeError) and isinstance(raised.value, ValueError)


def test_skip_special_tokens_false_as_a_string_was_taken_as_true_and_is_refused() -> None:
    """The field case: ``"false"`` is truthy; the codec it built skipped special tokens."""
    with pytest.raises(TypeError, match="skip_special_tokens must be True or False, not str 'false'"):
        codec_for(tokenizer("gpt2"), skip_special_tokens="false")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_byte_run must be a positive int, not 0"):
        codec_for(tokenizer("gpt2"), max_byte_run=0)
    with pytest.raises(ValueError, match="out_of_vocab must be 'raise' or 'ignore', not 'drop'"):
        codec_for(tokenizer("gpt2"), out_of_vocab="drop")  # type: ignore[arg-type]


MANAGER_OPTIONS: list[tuple[str, object]] = [
    ("remember_ended", "5"),
    ("remember_ended", True),
    ("max_live", 2.0),
    ("max_stops", None),
    ("max_stop_chars", "9"),
    ("max_codecs", False),
    ("max_byte_run", "1"),
    ("out_of_vocab", 0),
]


@pytest.mark.parametrize(("option", "value"), MANAGER_OPTIONS)
def test_the_manager_refuses_an_option_of_the_wrong_type_naming_it(option: str, value: object) -> None:
    with pytest.raises(OptionTypeError, match=option):
        DetokenizeManager(tokenizer("gpt2"), **given(option, value))


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("skip_special_tokens", "false"),
        ("clean_up_tokenization_spaces", 0),
        ("spaces_between_special_tokens", "no"),
        ("max_byte_run", "2"),
        ("out_of_vocab", 3),
    ],
)
def test_the_managers_codec_refuses_an_option_of_the_wrong_type(option: str, value: object) -> None:
    manager = DetokenizeManager(tokenizer("gpt2"))
    with pytest.raises(OptionTypeError, match=option):
        manager.codec(**given(option, value))


RULE_OPTIONS: list[tuple[str, object]] = [
    ("ignore_eos", "false"),
    ("include_stop_str_in_output", 1),
    ("max_new_tokens", "5"),
    ("min_tokens", 1.0),
    ("stop", 5),
    ("stop", ["a", 5]),
    ("stop_token_ids", "12"),
    ("stop_token_ids", [True]),
    ("eos_token_ids", [1.5]),
]


@pytest.mark.parametrize(("option", "value"), RULE_OPTIONS)
def test_stop_rules_refuse_an_option_of_the_wrong_type_naming_it(option: str, value: object) -> None:
    with pytest.raises(OptionTypeError, match=option.removesuffix("s") if option == "stop" else option):
        StopRules(**given(option, value))


PARAMS: list[tuple[str, object]] = [
    ("skip_special_tokens", "false"),
    ("ignore_eos", 0),
    ("include_stop_str_in_output", "yes"),
    ("clean_up_tokenization_spaces", 1),
    ("spaces_between_special_tokens", "no"),
    ("max_tokens", "5"),
    ("max_new_tokens", 5.0),
    ("min_tokens", True),
    ("max_byte_run", "3"),
    ("out_of_vocab", 1),
    ("stop", [5]),
    ("stop_token_ids", ["7"]),
    ("extra", {1: "x"}),
]


@pytest.mark.parametrize(("option", "value"), PARAMS)
def test_sampling_params_refuse_an_option_of_the_wrong_type_naming_it(option: str, value: object) -> None:
    with pytest.raises(OptionTypeError, match=option):
        SamplingParams(**given(option, value))


RECORDS: list[tuple[Callable[[], object], str]] = [
    (lambda: DetokenizeMsg("r", ("5",)), "token_ids"),  # type: ignore[arg-type]
    (lambda: DetokenizeMsg("r", (-1,)), "token_ids"),
    (lambda: DetokenizeMsg("r", (2**70,)), "token_ids"),
    (lambda: DetokenizeMsg("r", (2**63,)), "token_ids"),
    (lambda: DetokenizeMsg("r", (5, -1)), "token_ids"),
    (lambda: DetokenizeMsg("r", [5, 2**64]), "token_ids"),
    (lambda: DetokenizeMsg("r", (5,), finished=1), "finished"),  # type: ignore[arg-type]
    (lambda: DetokenizeMsg(None, (5,)), "uid"),  # type: ignore[arg-type]
    (lambda: DetokenizeMsg(1.5, (5,)), "uid"),  # type: ignore[arg-type]
    (lambda: DetokenizeMsg("r", (5,), True, None, "done"), "finish_reason"),  # type: ignore[arg-type]
    (lambda: Opening((2**63,)), "prompt_ids"),
    (lambda: Opening((), SamplingParams(), b"x", 2**63), "consumed"),
    (lambda: UserMsg(1, (-3,)), "input_ids"),
    (lambda: UserMsg(1, (2**63,)), "input_ids"),
    (lambda: AbortMsg(True), "uid"),
    (lambda: AbortMsg(b"x"), "uid"),  # type: ignore[arg-type]
    (lambda: HealthCheckMsg("1"), "probe"),  # type: ignore[arg-type]
    (lambda: SamplingParams(max_tokens=2**63), "max_tokens"),
    (lambda: SamplingParams(min_tokens=2**63), "min_tokens"),
    (lambda: SamplingParams(stop_token_ids=(2**63,)), "stop_token_ids"),
    (lambda: SamplingParams(max_byte_run=2**63), "max_byte_run"),
]


@pytest.mark.parametrize(("make", "field"), RECORDS)
def test_every_record_checks_its_values_when_made(make: Callable[[], object], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        make()


def test_the_usual_message_is_made_as_before() -> None:
    """The message of a step (one id, nothing else) takes the fast check: the same values pass."""
    assert DetokenizeMsg("r", (0,)).token_ids == (0,)
    assert DetokenizeMsg(7, (2**63 - 1,)).token_ids == (2**63 - 1,)
    assert DetokenizeMsg("r", [5]).token_ids == (5,)
    assert DetokenizeMsg("r", ()).token_ids == ()


def test_a_bad_id_on_the_wire_is_refused_as_at_construction_and_costs_only_its_message() -> None:
    """The same bound as a record's, where a scheduler in any language sends it: the message with
    the bad id is rejected with its uid (its request gets the error); the others are read."""
    good = encode_batch([DetokenizeMsg("a", (5,)), DetokenizeMsg("b", (6,)), DetokenizeMsg("c", (7,))])
    for bad in (-1, 2**63, 2**64 - 1):
        kind, version, columns = msgspec.msgpack.decode(good)
        columns["token_ids"][1] = bad
        decoded = FrameDecoder().decode(msgspec.msgpack.encode([kind, version, columns]))
        assert isinstance(decoded.batch, DetokenizeBatch) and decoded.batch.uids == ("a", "c")
        [rejected] = decoded.rejected
        assert rejected.uid == "b" and "token_ids" in rejected.reason


def test_what_constructs_opens_and_saves() -> None:
    """The largest values every bound lets through are held by a saved stream, exactly."""
    c = codec("gpt2")
    big = 2**63 - 1
    for rules in (
        StopRules(max_new_tokens=big),
        StopRules(min_tokens=big),
        StopRules(stop_token_ids=(big,), eos_token_ids=(big - 1,)),
    ):
        stream, _ = advance_many(open_stream(c, rules), [15496, 11])
        assert Stream.from_bytes(c, stream.to_bytes()) == stream
    params: Any = SamplingParams(max_tokens=big, stop_token_ids=(big,))
    manager = DetokenizeManager(tokenizer("gpt2"))
    manager.open("r", Opening((), params))
    manager.handle([DetokenizeMsg("r", (15496,))])
    [(uid, state, consumed)] = manager.drain()
    assert uid == "r" and consumed == 1
    assert Stream.from_bytes(codec("gpt2", True), state).rules.max_new_tokens == big


def test_a_recorded_id_a_message_refuses_is_still_a_requests_invalid_id_in_replay(tmp_path: Path) -> None:
    """A trace is a recording: an id below 0 or past 2**63 - 1 in it is the request's invalid id,
    named in its report, as before messages refused such ids; the replay goes on."""
    trace = tmp_path / "trace.jsonl"
    trace.write_text(
        '{"uid": 1, "prompt": [9707], "tokens": [100024, -1, 119]}\n'
        '{"uid": 2, "tokens": [374, 9223372036854775808]}\n'
        '{"uid": 1, "tokens": [586], "finished": true}\n'
    )
    done = subprocess.run(
        [sys.executable, "-m", "puredetok.cli", "replay", str(trace)], capture_output=True, text=True
    )
    assert done.returncode == 2, done.stderr  # input errors, every request replayed
    assert "invalid token id(s) -1 at position 1" in done.stdout
    assert "invalid token id(s) 9223372036854775808 at position 1" in done.stdout
    assert "2 requests" in done.stdout and "2 with input errors" in done.stdout
