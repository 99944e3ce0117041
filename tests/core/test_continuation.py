"""Contract C (docs/guarantees.md): after a prompt ``p``, the output ``s`` streams
``decode(p + s)[len(L):]``, ``L`` the longest common prefix of ``decode(p)`` and ``decode(p + s)``.

The oracle here is the tokenizer's own decode and a plain common-prefix loop, nothing of puredetok.
Prompts are drawn as engines send them (text ending in "\\n", ":\\n" or " ", with the tokenizer's
own BOS or not; a byte run or an incomplete character at the end; a special token; a chat
template's prompt where the tokenizer has one) and as random ids, on every real tokenizer with
``skip_special_tokens`` both ways.
"""

from __future__ import annotations

import copy
import functools
import os
import pickle
from collections.abc import Sequence
from typing import Any, cast

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import puredetok
from helpers import (
    TOKENIZERS,
    codec,
    continuation,
    id_lists,
    output_lists,
    prompt_lists,
    reference,
    tokenizer,
)
from puredetok import DecodeState, StopRules, advance, close, feed, finish, open_stream, start, step
from puredetok._core.echo import Echo

CASES = [(name, skip) for name in TOKENIZERS for skip in (False, True)]
IDS = [f"{name}-{'skip' if skip else 'keep'}" for name, skip in CASES]
R = "\ufffd"


def streamed(c: puredetok.Codec, prompt: Sequence[int], output: Sequence[int]) -> str:
    state, text = start(c, prompt), ""
    for token_id in output:
        state, delta = step(state, token_id)
        text += delta
    return text + finish(state)


def encode(name: str, text: str, specials: bool = False) -> list[int]:
    return list(tokenizer(name).encode(text, add_special_tokens=specials))


@functools.cache
def restored(name: str, skip: bool) -> puredetok.Codec:
    return cast(puredetok.Codec, pickle.loads(pickle.dumps(codec(name, skip))))


@pytest.mark.parametrize(("name", "skip"), CASES, ids=IDS)
@given(data=st.data())
def test_c_g2_g4_after_prompts_as_engines_send_them(name: str, skip: bool, data: st.DataObject) -> None:
    prompt = data.draw(prompt_lists(name), label="prompt")
    output = data.draw(output_lists(name), label="output")
    more = data.draw(id_lists(name, max_size=4), label="more")
    c = codec(name, skip)
    primed = start(c, prompt)
    final = continuation(name, prompt, output, skip)
    later = continuation(name, prompt, [*output, *more], skip)
    state, emitted = primed, ""
    assert finish(primed) == ""  # C with no output: nothing
    for count, token_id in enumerate(output, 1):
        state, delta = step(state, token_id)
        before, emitted = len(emitted), emitted + delta
        # C after every prefix of the output; G2: nothing sent that a later id changes.
        assert emitted + finish(state) == continuation(name, prompt, output[:count], skip)
        assert final.startswith(emitted) and later.startswith(emitted), (prompt, output[:count])
        # G4: a U+FFFD is sent only where the final text has one.
        assert all(final[at] == R for at in range(before, len(emitted)) if emitted[at] == R)
    assert emitted + finish(state) == final
    # The primed state is a value: feed in chunks equals stepping, copies and pickles resume alike.
    cut = data.draw(st.integers(0, len(output)), label="cut")
    fed, first = feed(primed, output[:cut])
    fed, rest = feed(fed, output[cut:])
    assert fed == state and first + rest == emitted
    moved = DecodeState.from_bytes(restored(name, skip), primed.to_bytes())
    unpickled = pickle.loads(pickle.dumps(primed)).resume(restored(name, skip))
    for clone in (moved, unpickled, copy.copy(primed), copy.deepcopy(primed)):
        assert clone == primed and hash(clone) == hash(primed)
        assert feed(clone, output) == (state, emitted)


@pytest.mark.parametrize(("name", "skip"), CASES, ids=IDS)
@given(data=st.data())
def test_what_the_prompt_holds_is_bounded_by_its_held_text(
    name: str, skip: bool, data: st.DataObject
) -> None:
    """G5: the echo is at most the text the prompt's state held; without any, no echo at all (and
    the per-token fast path is untouched)."""
    prompt = data.draw(prompt_lists(name), label="prompt")
    c = codec(name, skip)
    plain, _ = feed(start(c), prompt)
    primed = start(c, prompt)
    held = finish(plain)
    if held:
        assert primed.hold == Echo(plain.hold, held)
    else:
        assert primed == plain and type(primed.hold) is not Echo


# Prompts that end inside a character or a held run: each expected text is computed from the
# tokenizer's decode.


@pytest.mark.parametrize("name", ["llama2", "mistral_v03", "phi3_mini"])
def test_a_prompt_ending_in_a_newline_byte_token(name: str) -> None:
    prompt, output = encode(name, "A story about vLLM:\n", True), encode(name, " VLLM is great.")
    assert tokenizer(name).convert_ids_to_tokens(prompt[-1]) == "<0x0A>"  # the held byte run
    expected = continuation(name, prompt, output)
    shown = reference(name, prompt)
    assert shown.endswith("\n") and reference(name, prompt + output).startswith(shown)
    assert expected == reference(name, prompt + output)[len(shown) :]
    assert streamed(codec(name), prompt, output) == expected
    assert not expected.startswith("\n")


def test_a_prompt_ending_in_an_emoji_spelled_with_byte_tokens() -> None:
    prompt, output = encode("llama2", "The answer is 42 👍", True), encode("llama2", " Great")
    expected = continuation("llama2", prompt, output)
    assert not expected.startswith("👍")
    assert streamed(codec("llama2"), prompt, output) == expected


def test_korean_split_between_prompt_and_output() -> None:
    prompt, output = encode("llama2", "반갑습", True), encode("llama2", "니다")
    expected = continuation("llama2", prompt, output)
    assert "반갑습" not in expected
    assert streamed(codec("llama2"), prompt, output) == expected


@pytest.mark.parametrize("name", ["qwen3", "gpt2", "llama3"])
def test_a_byte_level_prompt_ending_inside_a_character(name: str) -> None:
    from helpers import byte_ids

    b = byte_ids(name)
    head = [b[x] for x in "鱻".encode()]
    prompt = encode(name, "x") + head[:1]
    assert reference(name, prompt).endswith(R)
    for output in (encode(name, " ok"), head[1:] + encode(name, " ok"), head[1:2]):
        expected = continuation(name, prompt, output)
        assert streamed(codec(name), prompt, output) == expected
    # The output that does not complete the character does not start with the U+FFFD shown.
    assert not streamed(codec(name), prompt, encode(name, " ok")).startswith(R)
    assert streamed(codec(name), prompt, head[1:]) == continuation(name, prompt, head[1:])


def test_a_t5_prompt_ending_in_a_space() -> None:
    t5 = tokenizer("t5_small")
    space, piece = t5.convert_tokens_to_ids("\u2581"), t5.convert_tokens_to_ids("s")
    prompt = encode("t5_small", "Hello") + [space]
    shown = reference("t5_small", prompt)
    assert shown.endswith(" ")  # held: cleanup may still remove it
    for output in ([piece], encode("t5_small", "world"), encode("t5_small", "."), [space, piece]):
        expected = continuation("t5_small", prompt, output)
        assert streamed(codec("t5_small"), prompt, output) == expected
    # A piece without a space of its own continues the prompt's space: it is not sent again.
    assert (
        streamed(codec("t5_small"), prompt, [piece]) == reference("t5_small", [*prompt, piece])[len(shown) :]
    )
    old, _ = feed(start(codec("t5_small")), prompt)  # the old priming: feed and discard
    assert feed(old, [piece])[1] + finish(feed(old, [piece])[0]) != continuation("t5_small", prompt, [piece])


@pytest.mark.parametrize("name", ["llama2", "mistral_v03", "phi3_mini", "qwen3", "llama3"])
def test_stop_at_a_newline_after_a_newline_prompt_ends_at_the_next_newline(name: str) -> None:
    prompt = encode(name, "A story about vLLM:\n", True)
    output = encode(name, " VLLM is great.\nIt streams.\nThe end.")
    expected = continuation(name, prompt, output)
    first_line = expected[: expected.index("\n")]
    assert first_line  # the output's first line, not the prompt's newline
    stream, text = open_stream(codec(name), StopRules(stop=["\n"]), prompt), ""
    for token_id in output:
        stream, delta = advance(stream, token_id)
        text += delta
        if stream.finished:
            break
    assert text == first_line
    assert stream.finish_reason == puredetok.FinishReason("stop", "\n")
    assert close(stream) == (stream, "")


# The synthetic tokenizers (every decoder module, holes, specials, lone bytes), and the generic
# window codec where the decode only grows.


@functools.cache
def synthetic_tokenizer(name: str) -> Any:
    import synthetic

    return {**synthetic.EXACT, **synthetic.UNMODELLED}[name]()


@functools.cache
def synthetic_codec(name: str, skip: bool) -> puredetok.Codec:
    return puredetok.codec_for(synthetic_tokenizer(name), skip_special_tokens=skip)


def synthetic_names() -> list[str]:
    import synthetic

    return sorted({**synthetic.EXACT, **synthetic.UNMODELLED})


@pytest.mark.parametrize("name", synthetic_names())
@pytest.mark.parametrize("skip", [False, True])
@given(data=st.data())
def test_c_on_synthetic_tokenizers(name: str, skip: bool, data: st.DataObject) -> None:
    built = synthetic_tokenizer(name)
    size = max(built.get_vocab(with_added_tokens=True).values()) + 1
    ids = st.lists(st.integers(0, size - 1), max_size=20)
    prompt, output = data.draw(ids, label="prompt"), data.draw(ids, label="output")

    def decode(sequence: list[int]) -> str:
        try:
            return str(built.decode(sequence, skip_special_tokens=skip))
        except BaseException as error:  # tokenizers 0.23's Strip(stop>0) panics on some inputs
            if type(error).__name__ != "PanicException":
                raise
            assume(False)
            raise

    shown, full = decode(prompt), decode([*prompt, *output])
    expected = full[len(os.path.commonprefix([shown, full])) :]
    c = synthetic_codec(name, skip)
    state, emitted = start(c, prompt), ""
    for count, token_id in enumerate(output, 1):
        state, delta = step(state, token_id)
        emitted += delta
        assert expected.startswith(emitted), (prompt, output[:count])
    assert emitted + finish(state) == expected


@pytest.mark.parametrize("name", ["qwen3", "distilbert_base_uncased"])
@given(data=st.data())
def test_c_with_the_window_codec(name: str, data: st.DataObject) -> None:
    prompt = data.draw(prompt_lists(name), label="prompt")
    output = data.draw(output_lists(name), label="output")
    c = window_codec(name)
    assert not c.exact
    assert streamed(c, prompt, output) == continuation(name, prompt, output)


@functools.cache
def window_codec(name: str) -> puredetok.Codec:
    return puredetok.codec_for(tokenizer(name), window=True)
