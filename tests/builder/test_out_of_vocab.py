"""G7 with ``codec_for(..., out_of_vocab="ignore")``: ids past the vocabulary decode exactly as
``tokenizer.decode`` decodes them, which skips them as if they were absent (checked here on every
real tokenizer, inside byte runs and split characters too); negative, ``bool`` and non-integer ids
always raise; the stop layer, the managers and the streamers take the option.
"""

from __future__ import annotations

import functools
import pickle
from array import array
from typing import Any, cast

import numpy
import pytest
import tokenizers
from hypothesis import given
from hypothesis import strategies as st
from tokenizers.models import WordLevel

import puredetok
from helpers import TOKENIZERS, byte_ids, codec, forged, id_lists, reference, tokenizer
from puredetok import (
    InvalidTokenError,
    StopRules,
    advance,
    advance_many,
    close,
    feed,
    finish,
    open_stream,
    start,
    step,
)
from puredetok._build.out_of_vocab import ignoring_out_of_vocab
from puredetok._core.codec import ID_LIMIT
from puredetok.serving._detokenize_manager import DetokenizeManager
from puredetok.serving._messages import DetokenizeMsg, Opening, SamplingParams

CASES = [(name, skip) for name in TOKENIZERS for skip in (False, True)]
IDS = [f"{name}-{'skip' if skip else 'keep'}" for name, skip in CASES]


@functools.cache
def ignoring(name: str, skip: bool = False) -> puredetok.Codec:
    """The codec ignoring ids past the vocabulary (what codec_for builds, from the cached codec)."""
    decode = functools.partial(tokenizer(name).decode, skip_special_tokens=skip)
    return ignoring_out_of_vocab(codec(name, skip), decode, name)


def outside(size: int) -> st.SearchStrategy[int]:
    return st.one_of(st.integers(size, size + 300), st.integers(size, ID_LIMIT - 1), st.just(ID_LIMIT - 1))


@st.composite
def with_outside_ids(draw: st.DrawFn, name: str) -> tuple[list[int], list[int]]:
    """Ids, and the same ids with ids past the vocabulary put anywhere among them."""
    ids = draw(id_lists(name))
    mixed = list(ids)
    size = codec(name).vocab_size
    for _ in range(draw(st.integers(1, 5))):
        mixed.insert(draw(st.integers(0, len(mixed))), draw(outside(size)))
    return ids, mixed


@pytest.mark.parametrize(("name", "skip"), CASES, ids=IDS)
@given(data=st.data())
def test_ignored_ids_decode_as_the_tokenizer_decodes_them(name: str, skip: bool, data: st.DataObject) -> None:
    ids, mixed = data.draw(with_outside_ids(name))
    c = ignoring(name, skip)
    full = reference(name, mixed, skip)
    assert full == reference(name, ids, skip)  # the tokenizer skips them as if they were absent
    state, emitted = start(c), ""
    for count, token_id in enumerate(mixed, 1):
        state, delta = step(state, token_id)
        emitted += delta
        assert emitted + finish(state) == reference(name, mixed[:count], skip)
        assert full.startswith(emitted)
    # An ignored id changes nothing: the same state as without it; feed equals stepping.
    assert state == feed(start(c), ids)[0]
    cut = data.draw(st.integers(0, len(mixed)))
    fed, first = feed(start(c), mixed[:cut])
    fed, rest = feed(fed, mixed[cut:])
    assert fed == state and first + rest == emitted
    for typed in (array("q", mixed), numpy.array(mixed, dtype=numpy.int64)):
        assert feed(start(c), cast(Any, typed)) == (state, emitted)
    # After a prompt too (contract C), and raising where the codec does not ignore them.
    prompt = data.draw(id_lists(name, max_size=8))
    assert feed(start(c, prompt), mixed) == feed(start(c, prompt), ids)
    if len(mixed) > len(ids):
        with pytest.raises(InvalidTokenError, match="outside the vocabulary"):
            feed(start(codec(name, skip)), mixed)


@pytest.mark.parametrize("name", ["llama2", "mistral_v03", "phi3_mini", "qwen3", "gpt2"])
def test_inside_a_byte_run_a_split_character_and_as_the_first_token(name: str) -> None:
    b, size = byte_ids(name), codec(name).vocab_size
    spelled = [b[x] for x in "🦩鱻".encode()]
    word = list(tokenizer(name).encode(" ok", add_special_tokens=False))
    for ids in (spelled, word + spelled, spelled[:3], word):
        for at in range(len(ids) + 1):
            mixed = ids[:at] + [size, ID_LIMIT - 1] + ids[at:]
            assert reference(name, mixed) == reference(name, ids)  # decode: as if absent
            state, text = feed(start(ignoring(name)), mixed)
            assert text + finish(state) == reference(name, mixed)
            assert feed(start(ignoring(name)), mixed) == feed(start(ignoring(name)), ids)


BAD = [
    -1,
    -(2**40),
    ID_LIMIT,
    2**40,
    True,
    False,
    1.0,
    "7",
    None,
    b"\x01",
    numpy.int64(-3),
    numpy.uint64(2**40),
]


@pytest.mark.parametrize("bad", BAD, ids=repr)
def test_bad_ids_always_raise_and_lose_nothing(bad: object) -> None:
    c = ignoring("qwen3")
    state, before = feed(start(c), [100024])
    with pytest.raises(InvalidTokenError) as raised:
        step(state, cast(Any, bad))
    message = str(raised.value)
    assert isinstance(raised.value, ValueError) and repr(bad) in message and str(c.vocab_size) in message
    with pytest.raises(InvalidTokenError, match="position 2"):
        feed(state, [119, c.vocab_size, cast(Any, bad), 119])
    state, after = step(state, 119)  # the old state goes on
    assert before + after + finish(state) == "鱻"
    if isinstance(bad, int) and not isinstance(bad, bool) and bad >= ID_LIMIT:
        assert "2**32" in message


def test_the_option_is_part_of_the_codec() -> None:
    qwen = tokenizer("qwen3")
    built = puredetok.codec_for(qwen, out_of_vocab="ignore")
    assert built == ignoring("qwen3") and built.out_of_vocab == "ignore"
    assert built != codec("qwen3") and built.fingerprint != codec("qwen3").fingerprint
    assert codec("qwen3").out_of_vocab == "raise"  # the default
    assert pickle.loads(pickle.dumps(built)) == built
    raw = puredetok.codec_for(qwen.backend_tokenizer, out_of_vocab="ignore", skip_special_tokens=True)
    assert raw.out_of_vocab == "ignore" and feed(start(raw), [151645, raw.vocab_size, 9707])[1] == "Hello"
    for bad in ("skip", None, True, ["ignore"]):
        with pytest.raises(ValueError, match="out_of_vocab must be 'raise' or 'ignore'"):
            puredetok.codec_for(qwen, out_of_vocab=cast(Any, bad))


def test_a_tokenizer_whose_decode_does_not_ignore_them_is_refused() -> None:
    """ByT5 decodes in Python and raises on an id past its vocabulary: "ignore" would differ from
    its decode, so codec_for refuses the option (and builds the default codec as before)."""
    from transformers import ByT5Tokenizer

    byt5 = ByT5Tokenizer()
    with pytest.raises(ValueError) as raised:
        byt5.decode([len(byt5)])
    with pytest.raises(
        ValueError, match=r"out_of_vocab='ignore' needs .*ByT5Tokenizer\.decode\(\[384\]\) raised"
    ):
        puredetok.codec_for(byt5, out_of_vocab="ignore")
    assert puredetok.codec_for(byt5).out_of_vocab == "raise"
    assert "bytes must be in range" in str(raised.value)


def test_a_python_decode_that_ignores_them_is_accepted() -> None:
    words = tokenizers.Tokenizer(WordLevel({"hello": 0, "world": 1, "[UNK]": 2}, unk_token="[UNK]"))

    class NoBackend:
        def decode(
            self,
            ids: list[int],
            /,
            *,
            skip_special_tokens: bool = False,
            clean_up_tokenization_spaces: bool | None = None,
        ) -> str:
            return words.decode(ids, skip_special_tokens=skip_special_tokens)

        def get_vocab(self) -> dict[str, int]:
            return words.get_vocab()

        def __len__(self) -> int:
            return words.get_vocab_size()

    c = puredetok.codec_for(NoBackend(), out_of_vocab="ignore")
    assert not c.exact and c.out_of_vocab == "ignore"
    state, text = feed(start(c), [0, 3, 1, 99, 0])
    assert text + finish(state) == words.decode([0, 1, 0])


# Through the stop layer, the manager and the streamers.


def test_an_ignored_id_counts_as_a_generated_token() -> None:
    c, size = ignoring("qwen3"), codec("qwen3").vocab_size
    hello = [9707, 11, 1879]  # "Hello, world"
    rules = StopRules(max_new_tokens=3)
    stream, text = advance_many(open_stream(c, rules), [9707, size, 11, 1879])
    assert text == "Hello," and stream.finish_reason == puredetok.FinishReason("length")
    # An id past the vocabulary can be a stop token; min_tokens counts ignored ids too.
    rules = StopRules(stop_token_ids=[size + 1], min_tokens=2)
    one_by_one, texts = open_stream(c, rules), []
    for token_id in [size + 1, *hello[:1], size + 1, *hello[1:]]:
        if one_by_one.finished:
            break
        one_by_one, delta = advance(one_by_one, token_id)
        texts.append(delta)
    assert "".join(texts) == "Hello" and one_by_one.finish_reason == puredetok.FinishReason("stop", size + 1)
    at_once, text = advance_many(open_stream(c, rules), [size + 1, *hello[:1], size + 1, *hello[1:]])
    assert at_once == one_by_one and text == "Hello"
    with pytest.raises(InvalidTokenError):
        advance(open_stream(codec("qwen3"), rules), size + 1)
    assert close(advance(open_stream(c), size)[0])[1] == ""


def test_the_manager_takes_the_option_per_request_and_as_its_setting() -> None:
    qwen, size = tokenizer("qwen3"), codec("qwen3").vocab_size
    ids = (100024, size, 119, size + 9)
    plain = DetokenizeManager(qwen)
    [refused, ignored] = plain.handle(
        [
            DetokenizeMsg(1, ids, True, Opening((), SamplingParams())),
            DetokenizeMsg(2, ids, True, Opening((), SamplingParams(out_of_vocab="ignore"))),
        ]
    )
    assert refused.error is not None and f"{size} at position 1" in refused.error
    assert ignored.error is None and ignored.incremental_output == qwen.decode(list(ids)) == "鱻"
    lenient = DetokenizeManager(qwen, out_of_vocab="ignore", codecs=plain.codecs)
    [by_setting, strict] = lenient.handle(
        [
            DetokenizeMsg(3, ids, True, Opening()),
            DetokenizeMsg(4, ids, True, Opening((), SamplingParams(out_of_vocab="raise"))),
        ]
    )
    assert by_setting.error is None and by_setting.incremental_output == "鱻"
    assert strict.error is not None
    assert lenient.codec() is plain.codec_of(SamplingParams(out_of_vocab="ignore"))  # one shared codec
    with pytest.raises(ValueError, match="out_of_vocab"):
        DetokenizeManager(qwen, out_of_vocab=cast(Any, "skip"))
    with pytest.raises(ValueError, match="out_of_vocab"):  # refused where it is given
        SamplingParams(out_of_vocab=cast(Any, "x"))
    forged_params = forged(SamplingParams(), out_of_vocab="x")  # the manager's own check still holds
    [bad] = plain.handle([DetokenizeMsg(5, ids, True, Opening((), forged_params))])
    assert bad.error is not None and "out_of_vocab" in bad.error


def test_trace_options_and_wire_params_carry_the_codec_options() -> None:
    from puredetok.worker._wire import FrameDecoder, encode_batch
    from puredetok_audit.replay._trace import TraceError, TraceHeader, read_trace

    header = '{"tokenizer": "qwen3", "options": {"out_of_vocab": "ignore", "max_byte_run": 8}}'
    [read] = list(read_trace([header]))
    assert isinstance(read, TraceHeader) and read.options == SamplingParams(
        max_byte_run=8, out_of_vocab="ignore"
    )
    for bad in ('{"out_of_vocab": "skip"}', '{"max_byte_run": "eight"}'):
        with pytest.raises(TraceError, match="line 1"):
            list(read_trace([f'{{"uid": 1, "tokens": [], "options": {bad}}}']))
    message = DetokenizeMsg(
        7, (1,), False, Opening((), SamplingParams(out_of_vocab="ignore", max_byte_run=0))
    )
    decoded = FrameDecoder().decode(encode_batch([message]))
    assert decoded.batch.items == (message,) and not decoded.rejected
