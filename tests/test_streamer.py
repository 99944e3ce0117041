"""puredetok.streamer: drop-ins for transformers' TextStreamer and TextIteratorStreamer.

A fake generate loop calls put()/end() exactly as transformers 5 does (generation/utils.py): the
prompt ``input_ids`` of shape (1, prompt_length) first, then ``next_tokens`` of shape (1,) after
every step (or ``valid_tokens`` of shape (1, n) in assisted decoding), then end(). No model
weights, no torch: tensors are anything with ``.tolist()``.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy
import pytest
import transformers
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import codec, id_lists, reference, tokenizer
from puredetok import InvalidTokenError, feed, start
from puredetok.streamer import TextIteratorStreamer, TextStreamer, TokenBatch


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
    expected = reference(name, output if skip_prompt else prompt + output, skip)
    assert "".join(streamer.texts()) == expected
    # one call per put (the skipped prompt has none), then the end
    assert len(streamer.calls) == (0 if skip_prompt else 1) + -(-len(output) // per_step) + 1
    assert [end for _, end in streamer.calls] == [False] * (len(streamer.calls) - 1) + [True]
    # and each put sends exactly what the core makes certain
    state = start(codec(name, skip))
    if not skip_prompt:
        state, _ = feed(state, prompt)
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
        generate(streamer, [0], t5)
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
    # T5 decodes with clean_up_tokenization_spaces: " ." becomes "." once the "." arrives.
    output = encode("t5_small", "Hello . It's .")
    full = tokenizer("t5_small").decode(output)
    assert full == "Hello. It's."
    assert "".join(ours_texts("t5_small", [0], output)) == full
    assert "".join(transformers_texts("t5_small", [0], output)) == "Hello  It's "


def test_a_byte_fallback_run_is_held_until_it_ends() -> None:
    # Llama-2 spells "🦩" with four <0xNN> tokens; a fifth byte token could still turn the whole
    # run into U+FFFD, so the run is held until a non-byte token ends it.
    output = encode("llama2", "🦩 x")
    assert ours_texts("llama2", [1], output) == ["", "", "", "", "", "🦩 x", ""]
    assert transformers_texts("llama2", [1], output) == ["", "", "", "", "", "🦩 ", "x"]
    n, c3 = 113, 198  # <0x6E> ("n"), <0xC3> (a lead byte with nothing after it)
    assert tokenizer("llama2").decode([n, c3]) == "\ufffd\ufffd"
    assert transformers_texts("llama2", [1], [n, c3])[0] == "n"  # sent, then spoiled
    assert ours_texts("llama2", [1], [n, c3]) == ["", "", "\ufffd\ufffd"]
