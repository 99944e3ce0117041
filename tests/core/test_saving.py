"""The state as a value (docs/guarantees.md): a state or stream saved as a few dozen bytes without its
codec, resumed only with a codec of the same fingerprint; bad bytes of any kind are a clear error.

G6 itself (a saved state resumes identically) is checked where each guarantee is: on every real
tokenizer (tests/core/test_guarantees.py, every state of every stream), after prompts
(tests/core/test_continuation.py), on every decoder family and the fallback (tests/core/test_families.py),
and for stop-layer streams (tests/stops/test_stops.py). Here: what goes wrong.
"""

from __future__ import annotations

import functools
import pickle
import pickletools
import random
import zlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import puredetok
from helpers import SENTENCEPIECE, TOKENIZERS, byte_ids, codec, id_lists, prompt_lists, tokenizer
from puredetok import (
    CodecMismatchError,
    DecodeState,
    InvalidStateError,
    InvalidTokenError,
    SavedState,
    StopRules,
    Stream,
    feed,
    finish,
    open_stream,
    start,
    step,
)
from puredetok._core.rope import Rope
from puredetok._core.saving import MAX_DEPTH, MAX_HELD_SPACE, STATE_FORMAT, pack
from puredetok.errors import StateTypeError
from puredetok.stops._saving import STREAM_FORMAT
from test_release_differences import installed_release_skips_bpe_cleanup

CASES = [(name, skip) for name in TOKENIZERS for skip in (False, True)]
IDS = [f"{name}-{'skip' if skip else 'keep'}" for name, skip in CASES]


@functools.cache
def window(name: str) -> puredetok.Codec:
    return puredetok.codec_for(tokenizer(name), window=True)


def saved_states(name: str, skip: bool) -> st.SearchStrategy[DecodeState]:
    """States after prompts as engines send them and random ids over the whole vocabulary."""
    c = codec(name, skip)
    return st.tuples(prompt_lists(name), id_lists(name, max_size=20)).map(
        lambda p: feed(start(c, p[0]), p[1])[0]
    )


@pytest.mark.parametrize(("name", "skip"), CASES, ids=IDS)
def test_a_state_is_a_few_dozen_bytes_and_pickles_without_its_codec(name: str, skip: bool) -> None:
    c = codec(name, skip)
    text_ids = list(tokenizer(name).encode("Streaming text, 推理 and 🦩.", add_special_tokens=False))
    for cut in range(len(text_ids) + 1):
        state, _ = feed(start(c), text_ids[:cut])
        data = state.to_bytes()
        # 39 - 43 where transformers 5.0 - 5.6 clean Llama-3's and Phi-2's text up (the cleanup's
        # stage is held, as T5's: 37 - 38); 16 - 35 elsewhere and on later releases
        assert len(data) <= 44, (cut, data)
        assert len(pickle.dumps(state)) <= 120
        assert DecodeState.from_bytes(c, data) == state
    rules = StopRules(stop=["</answer>", "\n\n"], eos_token_ids=[1, 2], max_new_tokens=4096, min_tokens=3)
    stream = open_stream(c, rules, text_ids)
    assert len(stream.to_bytes()) <= 80
    assert len(pickle.dumps(stream)) <= 160


OLD_PICKLE = bytes.fromhex(
    "80049542000000000000008c14707572656465746f6b2e636f72652e636f646563948c0a53617665645374617465949394"
    "431401aaa721cc0ff5d5720602010502e4a8e347f68394859452942e"
)
"""``pickle.dumps`` of a Qwen3 state after ``[100024, 119, 128237]`` ("鱻" sent, the first two bytes
of "䨻" held), made before the core moved to ``puredetok._core``: it names
``puredetok.core.codec.SavedState``."""


def test_a_state_pickled_before_the_core_moved_still_resumes() -> None:
    c = codec("qwen3")
    state, text = feed(start(c), [100024, 119, 128237])
    assert text == "鱻"
    assert pickle.loads(OLD_PICKLE).resume(c) == state
    assert pickle.loads(OLD_PICKLE) == pickle.loads(pickle.dumps(state))


def classes_named(data: bytes) -> set[str]:
    """The ``module.name`` of every class a pickle names (``GLOBAL``, or ``STACK_GLOBAL`` after the
    two strings it takes)."""
    named: set[str] = set()
    strings: list[str] = []
    for opcode, argument, _ in pickletools.genops(data):
        if opcode.name == "GLOBAL":
            named.add(str(argument).replace(" ", "."))
        elif opcode.name == "STACK_GLOBAL":
            named.add(".".join(strings[-2:]))
        elif isinstance(argument, str):
            strings.append(argument)
    return named


def test_a_pickled_state_names_the_public_module() -> None:
    """So that the pickles saved now outlive the private layout: ``puredetok.SavedState``."""
    state = feed(start(codec("qwen3")), [100024, 119, 128237])[0]
    assert classes_named(OLD_PICKLE) == {"puredetok.core.codec.SavedState"}
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        assert classes_named(pickle.dumps(state, protocol=protocol)) <= {
            "puredetok.SavedState",
            "_codecs.encode",
        }
        assert "puredetok.SavedState" in classes_named(pickle.dumps(state, protocol=protocol))


@pytest.mark.parametrize(("name", "skip"), CASES, ids=IDS)
@settings(max_examples=max(10, settings().max_examples // 3))
@given(data=st.data())
def test_corrupt_or_truncated_bytes_are_a_clear_error(name: str, skip: bool, data: st.DataObject) -> None:
    """Any byte changed, any bytes cut off or added: InvalidStateError, nothing else (the checksum
    catches what the structure does not)."""
    c = codec(name, skip)
    state = data.draw(saved_states(name, skip))
    good = state.to_bytes()
    position = data.draw(st.integers(0, len(good) - 1))
    flipped = bytearray(good)
    flipped[position] ^= data.draw(st.integers(1, 255))
    cut = data.draw(st.integers(0, len(good) - 1))
    extra = data.draw(st.binary(min_size=1, max_size=8))
    for bad in (bytes(flipped), good[:cut], good + extra, extra + good, data.draw(st.binary(max_size=64))):
        with pytest.raises(InvalidStateError):
            DecodeState.from_bytes(c, bad)
    assert DecodeState.from_bytes(c, good) == state  # and the good bytes still resume


def test_a_state_is_resumed_only_by_its_own_codec() -> None:
    state, _ = feed(start(codec("qwen3")), [100024, 119, 128237])
    data = state.to_bytes()
    for other in (
        codec("qwen3", True),
        codec("qwen2_5"),
        codec("llama3"),
        codec("llama2", False, True),
        window("qwen3"),
    ):
        with pytest.raises(CodecMismatchError, match="saved for another codec"):
            DecodeState.from_bytes(other, data)
        with pytest.raises(CodecMismatchError):
            pickle.loads(pickle.dumps(state)).resume(other)
    stream = open_stream(codec("qwen3"), StopRules(stop=["x"]))
    with pytest.raises(CodecMismatchError):
        Stream.from_bytes(codec("qwen3", True), stream.to_bytes())
    # A state is not a stream, and neither is anything else.
    with pytest.raises(InvalidStateError, match="starts with byte"):
        Stream.from_bytes(codec("qwen3"), data)
    with pytest.raises(InvalidStateError, match="starts with byte"):
        DecodeState.from_bytes(codec("qwen3"), stream.to_bytes())
    for nothing in (None, "text", 12, [1, 2]):
        with pytest.raises(InvalidStateError, match="is bytes"):
            DecodeState.from_bytes(codec("qwen3"), nothing)  # type: ignore[arg-type]
    assert DecodeState.from_bytes(codec("qwen3"), bytearray(data)) == state
    with pytest.raises(TypeError):
        SavedState("not bytes")  # type: ignore[arg-type]


def _values(leaves: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.recursive(leaves, lambda inner: st.lists(inner, max_size=7).map(tuple), max_leaves=24)


LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 300),
    st.integers(),
    st.text(max_size=6),
    st.sampled_from(["", " ", "  ", "\u2581", "invalid-run", "<", "<|", " n", "\ufffd"]),
    st.binary(max_size=5),
    st.sampled_from([b"", b"\xe6", b"\xe6\x8e", b"\xf0\x9f\xa6", b"\xff", b"\xed\xa0", b"\xc3\xa9"]),
    st.text(max_size=4).map(Rope.of),
)


def mutated(value: Any, data: st.DataObject) -> Any:
    """``value`` with one leaf (or subtree) replaced by something else."""
    if type(value) is tuple and value and data.draw(st.booleans()):
        index = data.draw(st.integers(0, len(value) - 1))
        return (*value[:index], mutated(value[index], data), *value[index + 1 :])
    return data.draw(_values(LEAVES))


@pytest.mark.parametrize(("name", "skip"), CASES, ids=IDS)
@settings(max_examples=max(10, settings().max_examples // 3))
@given(data=st.data())
def test_hostile_bytes_never_crash_nor_restore_a_state_the_decoder_cannot_take(
    name: str, skip: bool, data: st.DataObject
) -> None:
    """Well-formed bytes (right codec key, right checksum) around any value, random or a real hold
    with one part replaced: either InvalidStateError, or a state the decoder takes, which then
    streams and finishes without any error but InvalidTokenError."""
    c = data.draw(st.sampled_from([codec(name, skip), window(name)]))
    real = feed(start(c), data.draw(id_lists(name, max_size=8)))[0].hold
    value = data.draw(st.one_of(_values(LEAVES), st.builds(lambda: mutated(real, data))))
    try:
        bad = pack(STATE_FORMAT, c, value)
    except (TypeError, ValueError):  # a value no state holds cannot even be written
        return
    try:
        state = DecodeState.from_bytes(c, bad)
    except InvalidStateError:
        return
    assert c.decoding.is_hold(
        state.hold.hold if type(state.hold) is puredetok._core.echo.Echo else state.hold
    )
    for token_id in data.draw(id_lists(name, max_size=6)):
        try:
            state, _ = step(state, token_id)
        except InvalidTokenError:
            pass
    assert isinstance(finish(state), str)


def _craft(kind: int, c: puredetok.Codec, body: bytes) -> bytes:
    from puredetok._core.saving import codec_key

    framed = bytes((kind,)) + codec_key(c) + body
    return framed + zlib.crc32(framed).to_bytes(4, "big")


def test_bombs_in_well_formed_bytes_are_refused_without_allocating() -> None:
    """Lengths that claim more than the bytes hold, numbers past 64 bits, nesting past the limit,
    held whitespace that would expand to gigabytes: all InvalidStateError, at once."""
    c = codec("qwen3")
    tuple_tag, bytes_tag, int_tag, space_tag, str_tag = 6, 5, 3, 8, 4
    huge = b"\xff\xff\xff\xff\xff\xff\xff\xff\x7f"  # a varint of 2**63 - 1
    bombs = {
        "tuple length": bytes((tuple_tag,)) + huge,
        "bytes length": bytes((bytes_tag,)) + huge,
        "long number": bytes((int_tag,)) + b"\xff" * 11 + b"\x01",
        "nesting": bytes((tuple_tag, 1)) * (MAX_DEPTH + 2) + bytes((0,)),
        "held whitespace": bytes((space_tag, 1, str_tag, 1)) + b" " + b"\xff\xff\xff\xff\x0f",
        "unknown tag": bytes((0x3F,)),
        "trailing bytes": bytes((0, 0)),
        "bad text": bytes((str_tag, 2)) + b"\xff\xfe",
    }
    for what, body in bombs.items():
        with pytest.raises(InvalidStateError, match="not a saved"):
            DecodeState.from_bytes(c, _craft(STATE_FORMAT, c, body))
        with pytest.raises(InvalidStateError, match="not a saved"):
            Stream.from_bytes(c, _craft(STREAM_FORMAT, c, body))
        assert what
    assert MAX_HELD_SPACE < 2**31


def test_a_byte_fallback_run_saves_what_it_holds() -> None:
    """Llama-2's held byte run (the one hold that grows, G5) is saved exactly, long or poisoned."""
    c = codec("llama2")
    bytes_ = byte_ids("llama2")
    flamingo = [bytes_[b] for b in "🦩".encode()] * 300  # a valid run of 1,200 byte tokens
    for ids in (flamingo[:3], flamingo, [*flamingo, bytes_[0xFF]], [bytes_[0xC3]]):
        state, _ = feed(start(c), ids)
        resumed = DecodeState.from_bytes(c, state.to_bytes())
        assert resumed == state
        assert feed(resumed, [bytes_[0xA9], 13]) == feed(state, [bytes_[0xA9], 13])
    long_state, _ = feed(start(c), flamingo)
    assert len(long_state.to_bytes()) < 1_300  # the 300 flamingos it holds, as UTF-8


@pytest.mark.parametrize("name", [*SENTENCEPIECE, "qwen3", "gpt2"])
def test_fallback_codec_states_resume(name: str) -> None:
    c = window(name)
    rng = random.Random(7)
    ids = [rng.randrange(c.vocab_size) for _ in range(300)]
    state, text = start(c), ""
    for index, token_id in enumerate(ids):
        state, delta = step(state, token_id)
        text += delta
        if index % 37 == 0:
            resumed = pickle.loads(pickle.dumps(state)).resume(c)
            assert resumed == state
            assert feed(resumed, ids[index + 1 :]) == feed(state, ids[index + 1 :])
            assert len(state.to_bytes()) < 800  # at most a window of ids


def test_saved_streams_refuse_inconsistent_counters_and_rules() -> None:
    c = codec("qwen3")
    rules = StopRules(stop=["abc"], max_new_tokens=5, min_tokens=2)
    stream = open_stream(c, rules)
    good: tuple[Any, ...] = (stream.hold, "", 2, 5, None, ("abc",), (), (), False, 5, 2, False)
    body = (good[0], good[1], good[2], good[3], good[4], good[5:])
    assert Stream.from_bytes(c, pack(STREAM_FORMAT, c, body)) == stream
    bad_bodies: list[tuple[Any, ...]] = [
        (good[0], "x", 2, 5, None, good[5:]),  # held text that starts no stop string
        (good[0], "", 3, 5, None, good[5:]),  # more min_tokens left than the rules have
        (good[0], "", 2, 6, None, good[5:]),  # more tokens left than the limit
        (good[0], "", 2, 0, None, good[5:]),  # a running stream with no token left
        (good[0], "", 2, None, None, good[5:]),  # a limit with no count
        (good[0], "ab", 2, 5, ("length", None), good[5:]),  # a finished stream holding text
        (good[0], "", 2, 5, ("stop", None), good[5:]),  # a stop without what matched
        (good[0], "", 2, 5, ("done", None), good[5:]),  # no such finish reason
        (good[0], "", 2, 5, None, (("",), (), (), False, 5, 2, False)),  # an empty stop string
        (good[0], "", 2, 5, None, (("abc",), (-1,), (), False, 5, 2, False)),  # a negative id
        (good[0], "", 2, 5, None, (("abc",), (), (), 1, 5, 2, False)),  # a flag that is not a bool
        (good[0], "", 2, 5, None, (("abc",), (), (), False, 5, 9, False)),  # min_tokens > max
        (b"\xff", "", 2, 5, None, good[5:]),  # a hold the decoder cannot take
        (good[0], "", 2, 5, None, good[5:7]),  # rules cut short
        good,  # fields not grouped as a stream's
    ]
    for body in bad_bodies:
        with pytest.raises(InvalidStateError):
            Stream.from_bytes(c, pack(STREAM_FORMAT, c, body))


TAKING_A_STATE: dict[str, Any] = {
    "step": lambda value: puredetok.step(value, 9707),
    "feed": lambda value: puredetok.feed(value, [9707, 11]),
    "finish": puredetok.finish,
}
TAKING_A_STREAM: dict[str, Any] = {
    "advance": lambda value: puredetok.advance(value, 9707),
    "advance_many": lambda value: puredetok.advance_many(value, [9707, 11]),
    "close": puredetok.close,
    "abort": puredetok.abort,
    "open_like": lambda value: puredetok.stops.open_like(value, [9707]),
}


def _wrong_values() -> dict[str, Any]:
    """What is handed where a state or a stream is expected, by mistake."""
    c = codec("qwen3")
    stream = open_stream(c, StopRules(stop=["</a>"]), [9707])
    return {
        "SavedState": pickle.loads(pickle.dumps(start(c, [9707]))),
        "SavedStream": pickle.loads(pickle.dumps(stream)),
        "DecodeState": start(c, [9707]),
        "Stream": stream,
        "Codec": c,
        "None": None,
        "int": 5,
        "bytes": start(c).to_bytes(),
        "list": [start(c)],
    }


WRONG = [
    (function, wrong)
    for function in [*TAKING_A_STATE, *TAKING_A_STREAM]
    for wrong in _wrong_values()
    if wrong != ("DecodeState" if function in TAKING_A_STATE else "Stream")
    # a Stream has a codec and a core hold, which step and feed read (a check of the type would
    # cost their per-token path): finish refuses it
    and not (wrong == "Stream" and function in ("step", "feed"))
]


@pytest.mark.parametrize(("function", "wrong"), WRONG)
def test_a_pickled_state_or_stream_used_as_one_says_to_resume_it(function: str, wrong: str) -> None:
    """A pickled state unpickles as a SavedState (its codec stays behind), and handing it to
    ``step`` used to raise ``AttributeError: 'SavedState' object has no attribute 'codec'``. Each
    function that takes a state or a stream raises a StateTypeError (a TypeError) naming what it
    takes and what it got; for a saved record, how to resume it. The value handed is unchanged."""
    right = "DecodeState" if function in TAKING_A_STATE else "Stream"
    value = _wrong_values()[wrong]
    call = {**TAKING_A_STATE, **TAKING_A_STREAM}[function]
    before = pickle.dumps(value)
    with pytest.raises(StateTypeError) as raised:
        call(value)
    message = str(raised.value)
    assert isinstance(raised.value, TypeError) and message.startswith(f"{function}() takes a {right}")
    assert type(value).__name__ in message, message
    if wrong.startswith("Saved"):
        assert "saved.resume(codec)" in message, message
    assert pickle.dumps(value) == before


def test_advance_each_names_the_stream_that_is_not_one() -> None:
    c = codec("qwen3")
    stream = open_stream(c)
    saved = pickle.loads(pickle.dumps(stream))
    with pytest.raises(
        StateTypeError,
        match=r"advance_each\(\) takes a Stream, got SavedStream at position 1: .*saved\.resume\(codec\)",
    ):
        puredetok.stops.advance_each([stream, saved], [9707, 11])
    assert puredetok.stops.advance_each([stream, saved.resume(c)], [9707, 11])[1] == ["Hello", ","]


def test_the_size_table_in_the_docs_is_what_the_script_measures() -> None:
    """docs/benchmarks.md's state sizes (python -m benchmarks.states) are counts of bytes."""
    from pathlib import Path

    from benchmarks.states import size_table

    labels = {
        "qwen3": "Qwen3",
        "qwen2_5": "Qwen2.5",
        "llama3": "Llama-3",
        "gpt2": "GPT-2",
        "phi2": "Phi-2",
        "llama2": "Llama-2",
        "mistral_v03": "Mistral v0.3",
        "phi3_mini": "Phi-3",
        "t5_small": "T5",
        "distilbert_base_uncased": "DistilBERT",
    }
    page = (Path(__file__).parents[2] / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    documented = page.split("<!-- sizes-table -->\n", 1)[1].split("\n<!-- /sizes-table -->", 1)[0]
    if not installed_release_skips_bpe_cleanup():  # the rows the docs give for the oldest releases
        oldest = page.split("<!-- sizes-oldest -->\n", 1)[1].split("\n<!-- /sizes-oldest -->", 1)[0]
        rows = {row.split(" | ")[0]: row for row in oldest.splitlines()[2:]}
        documented = "\n".join(rows.get(row.split(" | ")[0], row) for row in documented.splitlines())
    assert size_table({label: tokenizer(name) for name, label in labels.items()}) == documented


def test_the_script_prints_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks.states import main

    assert main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Bytes;") and "| Qwen3 | 3.19 MB | 18 / 21 |" in out
