"""The stop layer against the failures other engines shipped, the documented rules at their edges,
and bad input. Real tokenizers throughout (Qwen3 unless said otherwise)."""

from __future__ import annotations

import pickle
from typing import Any, cast

import numpy
import pytest

from helpers import byte_ids, codec, tokenizer
from puredetok import (
    FinishReason,
    InvalidTokenError,
    StopRules,
    Stream,
    StreamFinishedError,
    abort,
    advance,
    advance_many,
    close,
    open_stream,
)

IM_END, ENDOFTEXT = 151645, 151643


def ids_of(text: str, name: str = "qwen3") -> list[int]:
    return list(tokenizer(name).encode(text, add_special_tokens=False))


def token(piece: str) -> int:
    return int(tokenizer("qwen3").convert_tokens_to_ids(piece))


def deltas_of(
    rules: StopRules, ids: list[int], skip: bool = False, name: str = "qwen3"
) -> tuple[list[str], Stream]:
    """Stream token by token (stopping when the stream does), then close; the deltas and the end."""
    stream, deltas = open_stream(codec(name, skip), rules), []
    for token_id in ids:
        if stream.finished:
            break
        stream, delta = advance(stream, token_id)
        deltas.append(delta)
    stream, tail = close(stream)
    return [*deltas, tail], stream


def text_of(
    rules: StopRules, ids: list[int], skip: bool = False, name: str = "qwen3"
) -> tuple[str, FinishReason]:
    deltas, stream = deltas_of(rules, ids, skip, name)
    assert stream.finish_reason is not None
    return "".join(deltas), stream.finish_reason


# --- sglang 11446 / vllm 3574 / SwiftLM 126: a stop string arriving in pieces --------------------

DEF_G_HI_J = [token("ABC"), token("DEF"), token("G"), token("HI"), token("J"), token("KL")]


def test_stop_arriving_as_def_g_hi_j_streams_nothing_of_it() -> None:
    assert [tokenizer("qwen3").decode([i]) for i in DEF_G_HI_J] == ["ABC", "DEF", "G", "HI", "J", "KL"]
    deltas, stream = deltas_of(StopRules(stop=["DEFGHIJ"]), DEF_G_HI_J)
    assert deltas == ["ABC", "", "", "", "", ""]
    assert stream.finish_reason == FinishReason("stop", "DEFGHIJ")


def test_stop_arriving_in_pieces_is_included_whole_when_asked() -> None:
    rules = StopRules(stop=["DEFGHIJ"], include_stop_str_in_output=True)
    assert deltas_of(rules, DEF_G_HI_J)[0] == ["ABC", "", "", "", "DEFGHIJ", ""]


def test_a_held_prefix_is_released_as_soon_as_it_cannot_be_the_stop() -> None:
    ids = [token("ABC"), token("DEF"), token("G"), token("HI"), token("KL")]
    deltas, stream = deltas_of(StopRules(stop=["DEFGHIJ"]), ids)
    assert deltas == ["ABC", "", "", "", "DEFGHIKL", ""]
    assert stream.finish_reason == FinishReason("length")


def test_stop_split_across_chunks_of_a_multi_token_step() -> None:
    """SwiftLM 126: a stop split across two chunks leaked its first half."""
    rules = StopRules(stop=["DEFGHIJ"])
    stream = open_stream(codec("qwen3"), rules)
    stream, first = advance_many(stream, DEF_G_HI_J[:3])
    stream, second = advance_many(stream, DEF_G_HI_J[3:])
    assert (first, second) == ("ABC", "")
    assert stream.finish_reason == FinishReason("stop", "DEFGHIJ")


# --- FastChat 3791/3883/3891: a stop string that starts with "\n" ------------------------------


def test_stop_starting_with_newline_completes_on_a_special_token() -> None:
    ids = [token("Hello"), 198, ENDOFTEXT, token("World")]
    deltas, stream = deltas_of(StopRules(stop=["\n<|endoftext|>"]), ids)
    assert deltas == ["Hello", "", "", ""]
    assert stream.finish_reason == FinishReason("stop", "\n<|endoftext|>")


def test_newline_prefix_of_a_stop_is_never_dropped() -> None:
    rules = StopRules(stop=["\n<|endoftext|>"])
    assert deltas_of(rules, ids_of("Hello\nWorld"))[0] == ["Hello", "", "\nWorld", ""]
    # Ending on the held "\n": the flush releases it (FastChat's off-by-one dropped it).
    assert deltas_of(rules, ids_of("Hello\n"))[0] == ["Hello", "", "\n"]


# --- tgi 1039: a stop string that ends inside a token --------------------------------------------


@pytest.mark.parametrize("name", ["qwen3", "llama2"])
def test_stop_ending_inside_a_token(name: str) -> None:
    ids = ids_of("The capital is Paris.", name)
    assert text_of(StopRules(stop=["Pari"]), ids, name=name) == (
        "The capital is ",
        FinishReason("stop", "Pari"),
    )
    kept = StopRules(stop=["Pari"], include_stop_str_in_output=True)
    assert text_of(kept, ids, name=name) == ("The capital is Pari", FinishReason("stop", "Pari"))


def test_the_part_of_a_token_before_the_stop_is_emitted_with_that_token() -> None:
    deltas, _ = deltas_of(StopRules(stop=["ris."]), ids_of("The capital is Paris."))
    assert deltas == ["The", " capital", " is", " Pa", "", ""]


# --- vllm test_check_stop_strings: several stops completed by one multi-token step ---------------


@pytest.mark.parametrize("stops", [["a", "is"], ["is", "a"]])
def test_earliest_completing_stop_wins_in_a_multi_token_step(stops: list[str]) -> None:
    rules = StopRules(stop=stops)
    stream, text = advance_many(open_stream(codec("qwen3"), rules), ids_of(" The user is a"))
    assert (text, stream.finish_reason) == (" The user ", FinishReason("stop", "is"))
    assert len(text) == 10  # vLLM's ("is", 10)


def test_at_an_equal_end_the_stop_starting_earlier_wins() -> None:
    rules = StopRules(stop=["is", "user is"])
    stream, text = advance_many(open_stream(codec("qwen3"), rules), ids_of(" The user is a"))
    assert (text, stream.finish_reason) == (" The ", FinishReason("stop", "user is"))


def test_a_stop_completing_earlier_wins_over_a_longer_one_started_first() -> None:
    rules = StopRules(stop=["The user is a", "user"])
    assert text_of(rules, ids_of(" The user is a")) == (" The ", FinishReason("stop", "user"))


# --- stop strings inside a special token's text, skip_special_tokens on and off ------------------


def test_stop_string_inside_a_special_token() -> None:
    ids = [token("Hi"), IM_END, token("more")]
    for stop, before in (("<|im_end|>", "Hi"), ("im_end", "Hi<|"), ("|>more", "Hi<|im_end")):
        assert text_of(StopRules(stop=[stop]), ids) == (before, FinishReason("stop", stop))
        # Skipped, the special token has no text: nothing to match, and the text goes on.
        assert text_of(StopRules(stop=[stop]), ids, skip=True) == ("Himore", FinishReason("length"))


# --- sglang PR 35157: stream == non-stream with a stop straddling a forced-output boundary --------


@pytest.mark.parametrize("boundary", range(1, 5))
def test_stream_equals_non_stream_with_stop_straddling_a_chunk_boundary(boundary: int) -> None:
    ids = ids_of("alpha STOPWORD beta")
    rules = StopRules(stop=["STOPWORD"])
    streamed, streamed_end = deltas_of(rules, ids)
    stream = open_stream(codec("qwen3"), rules)
    stream, forced = advance_many(stream, ids[:boundary])
    assert "alpha ".startswith(forced)  # no prefix of the stop is let out early
    if not stream.finished:
        stream, rest = advance_many(stream, ids[boundary:])
        forced += rest
    stream, tail = close(stream)
    assert forced + tail == "".join(streamed) == "alpha "
    assert stream == streamed_end


# --- smg PR 2203: the flush path equals the normal path -------------------------------------------


def test_nothing_after_a_stop_leaks_through_the_flush() -> None:
    deltas, stream = deltas_of(StopRules(stop=["<|sep|>"]), ids_of("answer<|sep|>ep|> tail"))
    assert "".join(deltas) == "answer" and deltas[-1] == ""
    assert stream.finish_reason == FinishReason("stop", "<|sep|>")


def test_a_partial_stop_at_the_end_is_released_by_the_flush() -> None:
    deltas, stream = deltas_of(StopRules(stop=["<|sep|>"]), ids_of("answer<|se"))
    assert "".join(deltas) == "answer<|se" and deltas[-1] == "<|se"
    assert stream.finish_reason == FinishReason("length")


def test_a_stop_is_held_no_longer_than_needed() -> None:
    deltas, _ = deltas_of(StopRules(stop=["jail"]), ids_of("They jailed the jainist"))
    assert "".join(deltas) == "They "
    deltas, _ = deltas_of(StopRules(stop=["jail"]), ids_of("the jainist"))
    assert deltas == ["the", " ", "jain", "ist", ""]


def test_a_stop_completed_by_the_cores_final_flush_is_found_like_any_other() -> None:
    """The core holds a lone lead byte; closing turns it into U+FFFD, which completes the stop, as
    a following token would have."""
    lead = byte_ids("qwen3")[0xE4]
    rules = StopRules(stop=["x\ufffd"])
    assert text_of(rules, [token("a"), token("x"), lead]) == ("a", FinishReason("stop", "x\ufffd"))
    assert text_of(rules, [token("a"), token("x"), lead, token("x")]) == (
        "a",
        FinishReason("stop", "x\ufffd"),
    )
    # Ending at the token limit flushes the same way.
    limited = StopRules(stop=["x\ufffd"], max_new_tokens=3)
    assert text_of(limited, [token("a"), token("x"), lead, token("b")]) == (
        "a",
        FinishReason("stop", "x\ufffd"),
    )


def test_length_path_equals_close_path() -> None:
    ids = ids_of("推理 is rare 🦩") + [byte_ids("qwen3")[0xE4]]
    for stop in ("rare", "🦩", "\ufffd", "zzz"):
        closed = text_of(StopRules(stop=[stop]), ids)
        limited = text_of(StopRules(stop=[stop], max_new_tokens=len(ids)), ids + [token("x")])
        assert closed == limited


# --- SwiftLM / vmlx / mlx-knife: no text after the stop at the end-of-stream flush ----------------


def test_no_text_after_the_stop_at_end_of_stream() -> None:
    ids = [*ids_of("The capital is Paris"), byte_ids("qwen3")[0xE4]]  # the core still holds a byte
    stream = open_stream(codec("qwen3"), StopRules(stop=["Pa"]))
    stream, text = advance_many(stream, ids[:4])
    assert text == "The capital is " and stream.finished
    assert close(stream) == (stream, "")
    assert abort(stream) is stream and stream.finish_reason == FinishReason("stop", "Pa")
    with pytest.raises(StreamFinishedError, match="finished"):
        advance(stream, ids[4])
    with pytest.raises(StreamFinishedError):
        advance_many(stream, ids[4:])
    assert advance_many(stream, []) == (stream, "")


# --- vllm PR 22014: min_tokens --------------------------------------------------------------------


def test_stop_string_within_min_tokens_is_ignored() -> None:
    ids = ids_of("stop now stop")  # "stop", " now", " stop"
    assert text_of(StopRules(stop=["stop"]), ids) == ("", FinishReason("stop", "stop"))
    assert text_of(StopRules(stop=["stop"], min_tokens=1), ids) == ("stop now ", FinishReason("stop", "stop"))
    assert text_of(StopRules(stop=["stop"], min_tokens=3), ids) == ("stop now stop", FinishReason("length"))


def test_stop_string_straddling_the_min_tokens_threshold_counts() -> None:
    """It ends in text generated after the threshold (vLLM's rule): the part before the threshold
    was held back, as it could start the stop."""
    ids = ids_of("stop now stop")
    deltas, stream = deltas_of(StopRules(stop=["now st"], min_tokens=2), ids)
    assert deltas == ["stop", " ", "", ""]
    assert stream.finish_reason == FinishReason("stop", "now st")
    # Entirely within the first two tokens: not searched.
    assert text_of(StopRules(stop=["op no"], min_tokens=2), ids) == ("stop now stop", FinishReason("length"))


def test_eos_and_stop_tokens_within_min_tokens_are_ordinary_tokens() -> None:
    ids = [token("Hi"), IM_END, token("there"), IM_END, token("after")]
    rules = StopRules(eos_token_ids={IM_END}, min_tokens=2)
    assert text_of(rules, ids) == ("Hi<|im_end|>there", FinishReason("stop", IM_END))
    assert text_of(rules, ids, skip=True) == ("Hithere", FinishReason("stop", IM_END))
    as_stop = StopRules(stop_token_ids={IM_END}, min_tokens=1)
    assert text_of(as_stop, ids) == ("Hi", FinishReason("stop", IM_END))


# --- stop and EOS tokens, limits, abort -----------------------------------------------------------


def test_stop_and_eos_tokens_add_no_text_unless_included() -> None:
    ids = [token("Hi"), IM_END, token("after")]
    assert text_of(StopRules(eos_token_ids={IM_END}), ids) == ("Hi", FinishReason("stop", IM_END))
    assert text_of(StopRules(stop_token_ids={IM_END}), ids) == ("Hi", FinishReason("stop", IM_END))
    included = StopRules(stop_token_ids={IM_END}, include_stop_str_in_output=True)
    assert text_of(included, ids) == ("Hi<|im_end|>", FinishReason("stop", IM_END))
    assert text_of(included, ids, skip=True) == ("Hi", FinishReason("stop", IM_END))


def test_ignore_eos_decodes_eos_as_text() -> None:
    ids = [token("Hi"), IM_END, token("after")]
    ignored = StopRules(eos_token_ids={IM_END}, ignore_eos=True)
    assert text_of(ignored, ids) == ("Hi<|im_end|>after", FinishReason("length"))
    both = StopRules(eos_token_ids={IM_END}, stop_token_ids={IM_END}, ignore_eos=True)
    assert text_of(both, ids) == ("Hi", FinishReason("stop", IM_END))


def test_a_stop_or_eos_token_flushes_what_the_core_held() -> None:
    lead = byte_ids("qwen3")[0xE4]
    assert text_of(StopRules(eos_token_ids={IM_END}), [token("a"), lead, IM_END]) == (
        "a\ufffd",
        FinishReason("stop", IM_END),
    )


def test_max_new_tokens_ends_with_length() -> None:
    ids = ids_of("one two three four")
    deltas, stream = deltas_of(StopRules(max_new_tokens=2), ids)
    assert deltas == ["one", " two", ""] and stream.finish_reason == FinishReason("length")
    # A stop token at the last allowed position is a stop: the model did end there.
    assert text_of(StopRules(max_new_tokens=2, eos_token_ids={IM_END}), [token("a"), IM_END]) == (
        "a",
        FinishReason("stop", IM_END),
    )


def test_abort_emits_nothing_held() -> None:
    stream = open_stream(codec("qwen3"), StopRules(stop=["DEFGHIJ"]))
    stream, text = advance_many(stream, DEF_G_HI_J[:3])
    assert text == "ABC" and stream.held == "DEFG"
    aborted = abort(stream)
    assert aborted.finish_reason == FinishReason("abort") and aborted.held == ""
    assert close(aborted) == (aborted, "")
    with pytest.raises(StreamFinishedError, match="abort"):
        advance(aborted, 1)


def test_prompt_text_is_never_searched_nor_emitted() -> None:
    prompt = ids_of("Say DEFGHI")
    stream = open_stream(codec("qwen3"), StopRules(stop=["DEFGHIJ", "Say"]), prompt)
    stream, text = advance_many(stream, ids_of("J and more"))
    assert (text, stream.finish_reason) == ("J and more", None)


def test_streams_are_values() -> None:
    stream = open_stream(codec("qwen3"), StopRules(stop=["DEFGHIJ"], max_new_tokens=9))
    middle, _ = advance_many(stream, DEF_G_HI_J[:3])
    clone = pickle.loads(pickle.dumps(middle)).resume(codec("qwen3"))  # pickled without its codec
    assert clone == middle and hash(clone) == hash(middle)
    assert advance_many(clone, DEF_G_HI_J[3:]) == advance_many(middle, DEF_G_HI_J[3:])
    # Built directly, a stream takes its countdowns from its rules.
    assert Stream(stream.codec, stream.rules, stream.hold) == stream
    assert (stream.min_left, stream.max_left) == (0, 9)


def test_a_counting_record_is_the_record_the_constructor_builds() -> None:
    """The steady path builds records directly: each is the stream ``Stream(*fields)`` builds,
    with the same future."""
    rules = StopRules(stop=["held!"], eos_token_ids={151645}, max_new_tokens=9, min_tokens=2)
    stream = open_stream(codec("qwen3"), rules)
    for token_id in ids_of("Hello, world and more"):
        stream, _ = advance(stream, token_id)
        rebuilt = Stream(*stream.fields())
        assert rebuilt == stream and hash(rebuilt) == hash(stream) and repr(rebuilt) == repr(stream)
        assert (rebuilt.min_left, rebuilt.max_left) == (stream.min_left, stream.max_left)
        assert advance_many(rebuilt, ids_of("x held!")) == advance_many(stream, ids_of("x held!"))
    with pytest.raises(AttributeError):
        stream.held = "x"  # type: ignore[misc]  # read-only: the point of the test


def test_a_quiet_token_returns_a_steady_stream_as_it_is_or_changes_only_its_count() -> None:
    """The steady path (rule 3 of puredetok.stops._stream): a steady stream that counts nothing is
    returned as it is; one that counts gets a record whose count alone changed, still steady; the
    token reaching ``min_tokens``, when nothing counts after it, hands over, and from there the
    stream is returned as it is."""
    hello, world = ids_of("Hello world")  # quiet for these rules: neither holds a "U" nor ends
    plain = open_stream(codec("qwen3"), StopRules(stop=["User:"], eos_token_ids={IM_END}))
    assert plain._steady is not None
    same, text = advance(plain, hello)
    assert same is plain and text == "Hello"
    counted = open_stream(codec("qwen3"), StopRules(stop=["User:"], eos_token_ids={IM_END}, max_new_tokens=5))
    after, text = advance(counted, world)
    assert after is not counted and text == " world" and after._steady is counted._steady
    assert after.fields() == (*counted.fields()[:5], 4, None)  # max_left 5 -> 4, nothing else
    early = open_stream(codec("qwen3"), StopRules(stop=["User:"], eos_token_ids={IM_END}, min_tokens=2))
    one, _ = advance(early, hello)
    two, _ = advance(one, world)
    assert (one.min_left, two.min_left) == (1, 0) and one._steady is early._steady
    assert two._steady is not None and two._steady is not early._steady  # the tables after min_tokens
    assert advance(two, hello)[0] is two


SAVED_BEFORE = {
    # Streams saved by the stop layer of commit 889916d, whose tables were positional tuples:
    # (their rules' EOS id, the ids advanced, the bytes, the ids that continue them).
    "qwen3": (
        IM_END,
        [785, 4226, 374, 220, 19, 3918, 596],  # "The answer is 4.</ans": "</ans" held
        "02aaa721cc0ff5d5720606060201050004053c2f616e73406b000607060204093c2f616e737765723e04020a0a"
        "0600060103bac11201724201d9082cfc",
        [6566, 29, 2814],  # "wer> done": the stop string completes
    ),
    "llama2": (
        2,
        [673, 29901, 29871, 236, 180, 190, 231, 171],  # "Answer: " and a byte run held
        "023e32c23b3b60fc2f0606060401060407000403e9b1bb0502e4a8450006024004000400406a00060706020409"
        "3c2f616e737765723e04020a0a060006014201724201029f9085",
        [190, 29991, 2],  # the run's last byte (its two characters), "!", EOS
    ),
}


@pytest.mark.parametrize("name", sorted(SAVED_BEFORE))
def test_a_stream_saved_by_an_earlier_version_resumes_and_goes_on_alike(name: str) -> None:
    """A saved stream's bytes follow its fields, not its record's layout: bytes an earlier version
    saved resume equal to the stream advanced now, and continue alike."""
    eos, ids, data, more = SAVED_BEFORE[name]
    rules = StopRules(stop=["</answer>", "\n\n"], eos_token_ids={eos}, min_tokens=2, max_new_tokens=50)
    now, _ = advance_many(open_stream(codec(name), rules), ids)
    resumed = Stream.from_bytes(codec(name), bytes.fromhex(data))
    assert resumed == now and resumed.to_bytes().hex() == data
    ended, text = advance_many(resumed, more)
    assert (ended, text) == advance_many(now, more)
    assert (text, ended.finish_reason) == {
        "qwen3": ("", FinishReason("stop", "</answer>")),
        "llama2": ("鱻䨻!", FinishReason("stop", 2)),
    }[name]


def test_a_record_cannot_hold_text_that_starts_no_stop_string() -> None:
    c = codec("qwen3")
    with pytest.raises(ValueError, match="not a proper prefix"):
        Stream(c, StopRules(stop=["abc"]), c.decoding.idle, "zz")
    with pytest.raises(ValueError, match="not a proper prefix"):
        Stream(c, StopRules(stop=["abc"]), c.decoding.idle, "abc")
    assert Stream(c, StopRules(stop=["abc"]), c.decoding.idle, "ab").held == "ab"


# --- bad input ------------------------------------------------------------------------------------

BAD_RULES: list[dict[str, Any]] = [
    {"stop": [""]},
    {"stop": ""},
    {"stop": ["ok", 3]},
    {"stop": 5},
    {"stop": [b"bytes"]},
    {"stop_token_ids": [1.5]},
    {"stop_token_ids": ["7"]},
    {"stop_token_ids": [True]},
    {"stop_token_ids": [-1]},
    {"stop_token_ids": 7},
    {"stop_token_ids": "7"},
    {"eos_token_ids": [None]},
    {"max_new_tokens": 0},
    {"max_new_tokens": -5},
    {"max_new_tokens": 2.0},
    {"max_new_tokens": True},
    {"min_tokens": -1},
    {"min_tokens": "3"},
    {"min_tokens": 5, "max_new_tokens": 3},
    {"ignore_eos": "yes"},
    {"include_stop_str_in_output": 1},
]


@pytest.mark.parametrize("options", BAD_RULES, ids=repr)
def test_bad_rules_raise_a_clear_value_error(options: dict[str, Any]) -> None:
    with pytest.raises(ValueError) as raised:
        StopRules(**options)
    assert any(name in str(raised.value) for name in options) or "stop" in str(raised.value)


def test_rules_accept_what_engines_pass() -> None:
    rules = StopRules(
        stop="END",
        stop_token_ids=[cast(int, numpy.int64(7)), 7],
        eos_token_ids=range(2),
        max_new_tokens=cast(int, numpy.int32(3)),
    )
    assert rules.stop == ("END",) and rules.stop_token_ids == {7} and rules.eos_token_ids == {0, 1}
    assert rules.max_new_tokens == 3 and type(rules.max_new_tokens) is int
    assert StopRules(stop=["a", "b"]).stop == ("a", "b")
    assert hash(StopRules(stop=["a"])) == hash(StopRules(stop=("a",)))


def test_bad_finish_reason_and_bad_rules_object() -> None:
    with pytest.raises(ValueError):
        FinishReason(cast(Any, "done"))
    with pytest.raises(TypeError, match="StopRules"):
        open_stream(codec("qwen3"), cast(Any, {"stop": ["x"]}))


@pytest.mark.parametrize("bad", [-1, 2**40, 1.0, "1", None, True, [1]], ids=repr)
def test_invalid_token_ids_raise_and_lose_nothing(bad: object) -> None:
    rules = StopRules(stop=["DEFGHIJ"], eos_token_ids={IM_END}, max_new_tokens=20)
    stream, before = advance_many(open_stream(codec("qwen3"), rules), DEF_G_HI_J[:3])
    with pytest.raises(InvalidTokenError):
        advance(stream, cast(Any, bad))
    with pytest.raises(InvalidTokenError, match="position 2"):
        advance_many(stream, [DEF_G_HI_J[3], DEF_G_HI_J[5], cast(Any, bad), DEF_G_HI_J[4]])
    # The old stream is intact and goes on exactly as before.
    stream, after = advance_many(stream, DEF_G_HI_J[3:])
    assert (before + after, stream.finish_reason) == ("ABC", FinishReason("stop", "DEFGHIJ"))


def test_ids_after_the_stop_in_one_call_are_ignored_even_invalid_ones() -> None:
    rules = StopRules(stop=["DEFGHIJ"])
    stream, text = advance_many(open_stream(codec("qwen3"), rules), [*DEF_G_HI_J, -1, cast(Any, "x")])
    assert (text, stream.finish_reason) == ("ABC", FinishReason("stop", "DEFGHIJ"))
