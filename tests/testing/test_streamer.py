"""puredetok.streamer: drop-ins for transformers' TextStreamer and TextIteratorStreamer.

A fake generate loop calls put()/end() exactly as transformers 5 does (generation/utils.py): the
prompt ``input_ids`` of shape (1, prompt_length) first, then ``next_tokens`` of shape (1,) after
every step (or ``valid_tokens`` of shape (1, n) in assisted decoding), then end(). No model
weights, no torch: tensors are anything with ``.tolist()``.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable, Sequence
from typing import Any, cast

import numpy
import pytest
import transformers
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import codec, continuation, id_lists, reference, tokenizer
from puredetok import InvalidTokenError, codec_for, feed, start
from puredetok.streamer import AsyncTextIteratorStreamer, TextIteratorStreamer, TextStreamer, TokenBatch


class FakeTensor:
    """What generate() passes: a CPU tensor (here without torch), read through .tolist()."""

    def __init__(self, rows: Any) -> None:
        self.rows = rows
        self.shape = numpy.shape(rows)

    def tolist(self) -> Any:
        return self.rows


def generate(
    streamer: Any,
    prompt: Sequence[int],
    output: Sequence[int],
    per_step: int = 1,
    tensor: Callable[[Any], Any] = numpy.array,
) -> None:
    """The streamer calls of model.generate: put(prompt), put(new tokens) per step, end()."""
    streamer.put(tensor([list(prompt)]))  # input_ids.cpu(): shape (1, prompt_length)
    for start_at in range(0, len(output), per_step):
        chunk = list(output[start_at : start_at + per_step])
        if per_step == 1:
            streamer.put(tensor(chunk))  # next_tokens.cpu(): shape (batch,) = (1,)
        else:
            streamer.put(tensor([chunk]))  # valid_tokens.cpu() of assisted decoding: shape (1, n)
    streamer.end()


class Recording(TextStreamer):
    """Our streamer, recording each on_finalized_text call instead of printing."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[tuple[str, bool]] = []

    def on_finalized_text(self, text: str, stream_end: bool = False) -> None:
        self.calls.append((text, stream_end))

    def texts(self) -> list[str]:
        return [text for text, _ in self.calls]


def transformers_texts(name: str, prompt: Sequence[int], output: Sequence[int], **options: Any) -> list[str]:
    """What transformers' own TextStreamer sends for the same generate calls."""
    sent: list[str] = []
    theirs = transformers.TextStreamer(tokenizer(name), skip_prompt=True, **options)
    theirs.on_finalized_text = lambda text, stream_end=False: sent.append(text)
    generate(theirs, prompt, output)
    return sent


def ours_texts(name: str, prompt: Sequence[int], output: Sequence[int]) -> list[str]:
    ours = Recording(tokenizer(name), skip_prompt=True, codec=codec(name))
    generate(ours, prompt, output)
    return ours.texts()


def encode(name: str, text: str) -> list[int]:
    return list(tokenizer(name).encode(text, add_special_tokens=False))


STREAMER_CASES = [
    (name, skip)
    for name in ("qwen3", "llama2", "t5_small", "distilbert_base_uncased")
    for skip in (False, True)
]


@pytest.mark.parametrize(("name", "skip"), STREAMER_CASES)
@given(data=st.data())
@settings(max_examples=max(10, settings().max_examples // 5))
def test_the_text_adds_up_to_decode(name: str, skip: bool, data: st.DataObject) -> None:
    prompt = data.draw(id_lists(name, max_size=10))
    output = data.draw(id_lists(name))
    per_step = data.draw(st.sampled_from([1, 1, 3]))
    skip_prompt = data.draw(st.booleans())
    streamer = Recording(tokenizer(name), skip_prompt=skip_prompt, codec=codec(name, skip))
    generate(streamer, prompt, output, per_step)
    # With skip_prompt, the output continues the prompt (contract C); without, all of it is text.
    expected = (
        continuation(name, prompt, output, skip) if skip_prompt else reference(name, prompt + output, skip)
    )
    assert "".join(streamer.texts()) == expected
    # one call per put (the skipped prompt has none), then the end
    assert len(streamer.calls) == (0 if skip_prompt else 1) + -(-len(output) // per_step) + 1
    assert [end for _, end in streamer.calls] == [False] * (len(streamer.calls) - 1) + [True]
    # and each put sends exactly what the core makes certain
    state = start(codec(name, skip), prompt) if skip_prompt else feed(start(codec(name, skip)), prompt)[0]
    texts = streamer.texts()[(0 if skip_prompt else 1) :]
    for index in range(0, len(output), per_step):
        state, delta = feed(state, output[index : index + per_step])
        assert texts[index // per_step] == delta


def test_the_spec_vector_streams_character_by_character() -> None:
    ids = [100024, 119, 128237, 119, 123918, 102, 374, 8848, 11, 46602, 101, 21887, 94880, 586]
    streamer = Recording(tokenizer("qwen3"), skip_prompt=True)
    generate(streamer, [9707], ids)
    assert streamer.texts() == [
        "",
        "鱻",
        "",
        "䨻",
        "",
        "🦩",
        " is",
        " rare",
        ",",
        " ",
        "推",
        "理",
        " naï",
        "ve",
        "",
    ]


@pytest.mark.parametrize(
    "tensor",
    [numpy.array, lambda rows: FakeTensor(rows), lambda rows: rows, lambda rows: tuple(rows)],
    ids=["numpy", "tensor-like", "list", "tuple"],
)
def test_put_takes_tensors_arrays_and_lists(tensor: Callable[[Any], TokenBatch]) -> None:
    ids = encode("qwen3", "推理 😀 ok")
    streamer = Recording(tokenizer("qwen3"), skip_prompt=True, codec=codec("qwen3"))
    generate(streamer, [1, 2], ids, tensor=tensor)
    assert "".join(streamer.texts()) == "推理 😀 ok"


def test_a_zero_dimensional_array_is_one_id() -> None:
    streamer = Recording(tokenizer("qwen3"), codec=codec("qwen3"))
    streamer.put(numpy.array(100024))
    streamer.put(numpy.int64(119).reshape(()))
    streamer.end()
    assert streamer.texts() == ["", "鱻", ""]


def test_text_streamer_prints_like_transformers(capsys: pytest.CaptureFixture[str]) -> None:
    prompt, output = encode("qwen3", "Q: 1+1?"), encode("qwen3", " A: 2 😀")
    generate(TextStreamer(tokenizer("qwen3")), prompt, output)
    generate(TextStreamer(tokenizer("qwen3"), skip_prompt=True), prompt, output)
    assert capsys.readouterr().out == "Q: 1+1? A: 2 😀\n A: 2 😀\n"


def test_a_streamer_is_reused_for_the_next_generate() -> None:
    streamer = Recording(tokenizer("qwen3"), skip_prompt=True, codec=codec("qwen3"))
    generate(streamer, encode("qwen3", "first prompt"), encode("qwen3", "one 鱻"))
    generate(streamer, encode("qwen3", "second prompt"), encode("qwen3", "two"))
    assert "".join(streamer.texts()) == "one 鱻two"


def test_an_unfinished_character_is_flushed_at_the_end() -> None:
    streamer = Recording(tokenizer("qwen3"), skip_prompt=True, codec=codec("qwen3"))
    generate(streamer, [9707], [100024])  # the first half of "鱻"
    assert streamer.calls == [("", False), ("\ufffd", True)]


def test_special_tokens_and_cleanup_options() -> None:
    ids = encode("qwen3", "hi") + [151645]  # <|im_end|>
    kept, skipped = (
        Recording(tokenizer("qwen3"), True),
        Recording(tokenizer("qwen3"), True, skip_special_tokens=True),
    )
    generate(kept, [9707], ids)
    generate(skipped, [9707], ids)
    assert "".join(kept.texts()) == "hi<|im_end|>" and "".join(skipped.texts()) == "hi"
    assert skipped.decode_kwargs == {"skip_special_tokens": True}
    t5 = encode("t5_small", "Hello . It's .")
    for cleanup in (True, False):
        streamer = Recording(tokenizer("t5_small"), True, clean_up_tokenization_spaces=cleanup)
        generate(streamer, [], t5)  # an empty prompt: the output is all the text
        assert "".join(streamer.texts()) == tokenizer("t5_small").decode(
            t5, clean_up_tokenization_spaces=cleanup
        )


def test_bad_input_gets_a_clear_error() -> None:
    streamer = Recording(tokenizer("qwen3"), codec=codec("qwen3"))
    with pytest.raises(ValueError, match="only supports batch size 1"):
        streamer.put(numpy.array([[1, 2], [3, 4]]))
    with pytest.raises(TypeError, match="not str"):
        streamer.put(text_instead_of_ids())
    streamer.put(numpy.array([[100024]]))
    with pytest.raises(InvalidTokenError, match="outside the vocabulary"):
        streamer.put(numpy.array([codec("qwen3").vocab_size]))
    streamer.put(numpy.array([119]))  # the stream is intact
    assert streamer.texts() == ["", "鱻"]
    with pytest.raises(ValueError, match="not both"):
        TextStreamer(tokenizer("qwen3"), codec=codec("qwen3"), skip_special_tokens=True)
    unmodelled: dict[str, Any] = {"spaces_between_special_tokens": False}
    with pytest.raises(TypeError, match="spaces_between_special_tokens"):
        TextStreamer(tokenizer("qwen3"), **unmodelled)


def text_instead_of_ids() -> Any:
    return "1 2 3"


def test_the_iterator_streamer_feeds_another_thread() -> None:
    prompt, output = encode("qwen3", "Q:"), encode("qwen3", "推理 😀 streams")
    streamer = TextIteratorStreamer(tokenizer("qwen3"), skip_prompt=True, timeout=10, codec=codec("qwen3"))
    worker = threading.Thread(target=generate, args=(streamer, prompt, output))
    worker.start()
    received = list(streamer)
    worker.join()
    assert "".join(received) == "推理 😀 streams"
    assert received == [step_text for step_text in ours_texts("qwen3", prompt, output)]


def test_the_iterator_streamer_times_out() -> None:
    streamer = TextIteratorStreamer(tokenizer("qwen3"), timeout=0.01, codec=codec("qwen3"))
    with pytest.raises(queue.Empty):
        next(streamer)


# Where ours differs from transformers' TextStreamer, on field cases.


def test_symbols_and_emoji_stream_without_waiting_for_a_space() -> None:
    output = encode("qwen3", "😀 ok")
    assert ours_texts("qwen3", [9707], output) == ["😀", " ok", ""]
    assert transformers_texts("qwen3", [9707], output) == ["", "😀 ", "ok"]


def test_box_drawing_streams_per_character() -> None:
    output = encode("qwen3", "┌──┐\n│ok│")
    assert ours_texts("qwen3", [9707], output) == ["┌", "──", "┐", "\n", "│", "ok", "│", ""]
    assert transformers_texts("qwen3", [9707], output) == ["", "", "", "┌──┐\n", "", "", "", "│ok│"]


def test_cleanup_loses_text_in_transformers_but_not_here() -> None:
    # T5 decodes with clean_up_tokenization_spaces: " ." becomes "." once the "." arrives. (An
    # empty prompt: transformers' streamer decodes the output alone, and so do we then.)
    output = encode("t5_small", "Hello . It's .")
    full = tokenizer("t5_small").decode(output)
    assert full == "Hello. It's."
    assert "".join(ours_texts("t5_small", [], output)) == full
    assert "".join(transformers_texts("t5_small", [], output)) == "Hello  It's "


def test_a_byte_fallback_run_is_held_until_it_ends() -> None:
    # Llama-2 spells "🦩" with four <0xNN> tokens; a fifth byte token could still turn the whole
    # run into U+FFFD, so the run is held until a non-byte token ends it.
    output = encode("llama2", "🦩 x")
    assert ours_texts("llama2", [], output) == ["", "", "", "", "", "🦩 x", ""]
    assert transformers_texts("llama2", [], output) == ["", "", "", "", "", "🦩 ", "x"]
    n, c3 = 113, 198  # <0x6E> ("n"), <0xC3> (a lead byte with nothing after it)
    assert tokenizer("llama2").decode([n, c3]) == "\ufffd\ufffd"
    assert ours_texts("llama2", [], [n, c3]) == ["", "", "\ufffd\ufffd"]
    # transformers' own streamer sends "n" at once on the newest releases, which the next byte
    # spoils (its texts no longer add up to the decode); 5.0.0's held it as this one does
    assert transformers_texts("llama2", [], [n, c3]) in (["n", "", "\ufffd"], ["", "", "\ufffd\ufffd"])


# transformers' classes and options.


def test_the_streamers_are_transformers_base_streamers() -> None:
    from transformers.generation.streamers import BaseStreamer

    for cls in (TextStreamer, TextIteratorStreamer, AsyncTextIteratorStreamer):
        assert issubclass(cls, BaseStreamer)
    assert isinstance(Recording(tokenizer("qwen3"), codec=codec("qwen3")), BaseStreamer)


@pytest.mark.parametrize("name", ["llama2", "mistral_v03", "phi3_mini"])
def test_skip_prompt_continues_a_prompt_that_ends_in_a_newline(name: str) -> None:
    """Contract C through the streamer: Llama-2's "...:\n" ends in the byte token <0x0A>, which the
    output must not send again."""
    prompt = list(tokenizer(name).encode("A story about vLLM:\n"))
    output = encode(name, " VLLM is great.")
    expected = continuation(name, prompt, output)
    assert not expected.startswith("\n")
    assert "".join(ours_texts(name, prompt, output)) == expected


def test_the_decode_options_pass_through() -> None:
    llama = tokenizer("llama2")
    run = [243, 162, 169, 172] * 3  # three flamingos spelled with <0xNN> tokens
    capped = Recording(llama, True, max_byte_run=4)
    whole = Recording(llama, True)
    generate(capped, [1], run)
    generate(whole, [1], run)
    assert capped.texts()[:12] == ["", "", "", "🦩"] * 3  # each one sent when the cap is reached
    assert whole.texts()[:12] == [""] * 12 and whole.texts()[12] == "🦩🦩🦩"
    assert capped.decode_kwargs == {"max_byte_run": 4} and capped.codec == codec_for(llama, max_byte_run=4)
    size = codec("qwen3").vocab_size
    ignoring = Recording(tokenizer("qwen3"), True, out_of_vocab="ignore")
    generate(ignoring, [9707], [100024, size, size + 5, 119])
    assert "".join(ignoring.texts()) == tokenizer("qwen3").decode([100024, size, size + 5, 119]) == "鱻"
    with pytest.raises(InvalidTokenError):
        Recording(tokenizer("qwen3"), True, codec=codec("qwen3")).put(numpy.array([size]))


def test_an_unknown_decode_option_is_named() -> None:
    options: dict[str, Any] = {"spaces_between_special_tokens": False, "use_source_tokenizer": True}
    for cls in (TextStreamer, TextIteratorStreamer):
        with pytest.raises(TypeError, match="spaces_between_special_tokens, use_source_tokenizer"):
            cls(tokenizer("qwen3"), **options)
    with pytest.raises(ValueError, match="out_of_vocab"):
        TextStreamer(tokenizer("qwen3"), out_of_vocab=cast(Any, "skip"))
    with pytest.raises(ValueError, match="max_byte_run"):
        TextStreamer(tokenizer("qwen3"), max_byte_run=0)
    with pytest.raises(ValueError, match="not both"):
        TextStreamer(tokenizer("qwen3"), codec=codec("qwen3"), max_byte_run=8)


def test_the_async_iterator_streamer_feeds_a_coroutine() -> None:
    prompt, output = encode("qwen3", "Q:"), encode("qwen3", "推理 😀 streams")

    async def main() -> list[str]:
        streamer = AsyncTextIteratorStreamer(
            tokenizer("qwen3"), skip_prompt=True, timeout=10, codec=codec("qwen3")
        )
        worker = threading.Thread(target=generate, args=(streamer, prompt, output))
        worker.start()
        received = [text async for text in streamer]
        worker.join()
        return received

    received = asyncio.run(main())
    assert received == ours_texts("qwen3", prompt, output)
    assert "".join(received) == continuation("qwen3", prompt, output)


def test_the_async_iterator_streamer_times_out_and_needs_a_loop() -> None:
    async def main() -> None:
        streamer = AsyncTextIteratorStreamer(tokenizer("qwen3"), timeout=0.01, codec=codec("qwen3"))
        with pytest.raises(TimeoutError):
            await anext(streamer)
        streamer.put(numpy.array([[9707]]))  # from the loop's own thread too
        assert await anext(streamer) == "Hello"

    asyncio.run(main())
    with pytest.raises(RuntimeError):
        AsyncTextIteratorStreamer(tokenizer("qwen3"), codec=codec("qwen3"))  # no running loop


def test_put_takes_the_shapes_generate_passes() -> None:
    """input_ids (1, n) first, then next_tokens (1,) per step, or valid_tokens (1, n) in assisted
    decoding, all as tensors with .shape and .tolist()."""
    prompt, output = encode("qwen3", "Hi"), encode("qwen3", " 鱻 and 🦩")
    streamer = Recording(tokenizer("qwen3"), skip_prompt=True, codec=codec("qwen3"))
    streamer.put(FakeTensor([prompt]))
    assert FakeTensor([prompt]).shape == (1, len(prompt))
    streamer.put(FakeTensor(output[:1]))
    streamer.put(FakeTensor([output[1:3]]))
    for token_id in output[3:]:
        streamer.put(FakeTensor([token_id]))
    streamer.end()
    assert "".join(streamer.texts()) == continuation("qwen3", prompt, output)
    assert streamer.calls[-1][1] is True and len(streamer.calls) == 2 + len(output[3:]) + 1
