"""Engine names and defaults: request parameters as vLLM, SGLang and OpenAI-style servers name them,
and ``spaces_between_special_tokens`` exactly as transformers' ``decode`` treats it."""

from __future__ import annotations

import functools
import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import puredetok
from helpers import TOKENIZERS, codec, id_lists, shared_codecs, tokenizer
from puredetok import codec_for, finish, start, step
from puredetok.serving._codec_cache import CodecCache
from puredetok.serving._detokenize_manager import DetokenizeManager
from puredetok.serving._messages import DetokenizeMsg, Opening, SamplingParams
from puredetok_audit.replay._replay import Replayer
from puredetok_audit.replay._trace import TraceHeader, read_trace
from sources import vocabulary_of

OPENAI_KEYS = (
    "max_tokens",
    "stop",
    "stop_token_ids",
    "min_tokens",
    "include_stop_str_in_output",
    "skip_special_tokens",
    "spaces_between_special_tokens",
    "ignore_eos",
)

# --- names -----------------------------------------------------------------------------------


def test_max_tokens_is_vllms_name_for_max_new_tokens() -> None:
    params = SamplingParams(max_tokens=5)
    assert params == SamplingParams(max_new_tokens=5) == SamplingParams(5)
    assert params.max_tokens == params.max_new_tokens == 5
    assert SamplingParams(max_tokens=None).max_new_tokens is None
    assert msgspec.structs.replace(params, stop=("x",)).max_tokens == 5
    wire = msgspec.msgpack.encode(params)
    assert msgspec.msgpack.decode(wire, type=SamplingParams) == params
    # A peer that sends one name (vLLM's or SGLang's) gives the same parameters.
    for name in ("max_tokens", "max_new_tokens"):
        assert msgspec.msgpack.decode(msgspec.msgpack.encode({name: 5}), type=SamplingParams) == params


def test_giving_both_names_of_the_limit_with_two_values_is_an_error() -> None:
    assert SamplingParams(max_new_tokens=5, max_tokens=5) == SamplingParams(max_tokens=5)
    with pytest.raises(ValueError, match="max_tokens or max_new_tokens"):
        SamplingParams(max_new_tokens=5, max_tokens=6)
    with pytest.raises(msgspec.ValidationError, match="max_tokens or max_new_tokens"):
        msgspec.msgpack.decode(
            msgspec.msgpack.encode({"max_tokens": 5, "max_new_tokens": 6}), type=SamplingParams
        )


# --- defaults --------------------------------------------------------------------------------


def test_skip_special_tokens_defaults_to_true_where_engines_default_it() -> None:
    qwen = tokenizer("qwen3")
    ids = qwen.encode("<|im_start|>user\nHi<|im_end|>", add_special_tokens=False)
    assert SamplingParams().skip_special_tokens is True
    manager = DetokenizeManager(qwen)
    assert manager.codec().skip_special_tokens is True
    # A request that opens with default parameters drops the special tokens.
    [opened] = manager.detokenize([DetokenizeMsg(2, tuple(ids), True, Opening())])
    assert opened == "user\nHi" == qwen.decode(ids, skip_special_tokens=True)
    header = next(read_trace(['{"tokenizer": "qwen3"}']))
    assert isinstance(header, TraceHeader) and header.options.skip_special_tokens is True
    assert Replayer(qwen).defaults.skip_special_tokens is True
    # The core keeps transformers' own default (docs/guarantees.md, G1).
    assert codec_for(qwen).skip_special_tokens is False


# --- from_openai -----------------------------------------------------------------------------


def test_from_openai_reads_an_openai_request_body() -> None:
    body = {
        "model": "qwen3",
        "messages": [{"role": "user", "content": "Hi"}],
        "max_tokens": 64,
        "stop": ["\n\n", "User:"],
        "stop_token_ids": [151643],
        "min_tokens": 2,
        "include_stop_str_in_output": True,
        "skip_special_tokens": False,
        "spaces_between_special_tokens": False,
        "ignore_eos": True,
        "temperature": 0.7,
        "top_p": 0.9,
        "seed": 7,
    }
    params = SamplingParams.from_openai(body)
    assert params == SamplingParams(
        max_tokens=64,
        stop=("\n\n", "User:"),
        stop_token_ids=(151643,),
        min_tokens=2,
        include_stop_str_in_output=True,
        skip_special_tokens=False,
        spaces_between_special_tokens=False,
        ignore_eos=True,
        extra={
            "model": "qwen3",
            "messages": [{"role": "user", "content": "Hi"}],
            "temperature": 0.7,
            "top_p": 0.9,
            "seed": 7,
        },
    )


def test_from_openai_takes_a_lone_stop_string_and_null_as_the_default() -> None:
    assert SamplingParams.from_openai({"stop": "\n"}).stop == ("\n",)
    nulls = SamplingParams.from_openai(dict.fromkeys(OPENAI_KEYS))
    assert nulls == SamplingParams()
    assert SamplingParams.from_openai({}) == SamplingParams()


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"max_tokens": 0}, ["max_tokens: must be >= 1"]),
        ({"max_tokens": "5"}, ["max_tokens: must be an integer, got str"]),
        ({"max_tokens": 5.0}, ["max_tokens: must be an integer, got float"]),
        ({"max_tokens": True}, ["max_tokens: must be an integer, got bool"]),
        ({"stop": 3}, ["stop: must be a string or a list of strings"]),
        ({"stop": ["ok", ""]}, ["stop: must hold non-empty strings"]),
        ({"stop": ["ok", None]}, ["stop: must hold non-empty strings"]),
        ({"stop_token_ids": [1, -2]}, ["stop_token_ids: must hold token ids"]),
        ({"stop_token_ids": "12"}, ["stop_token_ids: must be a list of token ids"]),
        ({"min_tokens": -1}, ["min_tokens: must be >= 0"]),
        ({"min_tokens": 9, "max_tokens": 3}, ["min_tokens: must not exceed max_tokens (9 > 3)"]),
        ({"skip_special_tokens": "yes"}, ["skip_special_tokens: must be true or false"]),
        ({"ignore_eos": 1}, ["ignore_eos: must be true or false, got int 1"]),
        ({"include_stop_str_in_output": []}, ["include_stop_str_in_output: must be true or false"]),
        ({"spaces_between_special_tokens": 0}, ["spaces_between_special_tokens: must be true or false"]),
        ({"max_tokens": -1, "stop": [7], "ignore_eos": "no"}, ["max_tokens", "stop", "ignore_eos"]),
        ({1: "x"}, ["key 1: keys must be strings"]),
    ],
)
def test_from_openai_names_each_bad_key(body: dict[Any, Any], named: list[str]) -> None:
    with pytest.raises(ValueError, match="invalid request parameters") as raised:
        SamplingParams.from_openai(body)
    for part in named:
        assert part in str(raised.value)


@pytest.mark.parametrize("body", [None, [("max_tokens", 5)], "max_tokens=5", 5])
def test_from_openai_refuses_what_is_not_an_object(body: Any) -> None:
    with pytest.raises(ValueError, match="an OpenAI request body is a JSON object"):
        SamplingParams.from_openai(body)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 2**40) | st.floats(allow_nan=False) | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=2),
    max_leaves=5,
)
bodies = st.dictionaries(st.sampled_from(OPENAI_KEYS) | st.text(max_size=6), json_values, max_size=6)


@given(bodies)
def test_from_openai_never_lets_a_bad_value_through(body: dict[str, Any]) -> None:
    """Whatever JSON object comes in: either a ValueError naming bad keys, or parameters that
    open a request (the manager's own checks accept them), with every other key in ``extra``."""
    try:
        params = SamplingParams.from_openai(body)
    except ValueError as error:
        message = str(error)
        assert message.startswith("invalid request parameters: ")
        assert any(f"{key}: " in message for key in OPENAI_KEYS if key in body)
        return
    assert params.extra == {key: value for key, value in body.items() if key not in OPENAI_KEYS}
    manager = DetokenizeManager(tokenizer("qwen3"), codecs=shared_codecs(), vocabulary=vocabulary_of("qwen3"))
    manager.rules(params)  # raises ValueError on anything a request may not have
    for key in OPENAI_KEYS:
        if body.get(key) is not None and key != "stop":
            mine = params.max_new_tokens if key == "max_tokens" else getattr(params, key)
            assert mine == (tuple(body[key]) if isinstance(body[key], list) else body[key])


# --- spaces_between_special_tokens -----------------------------------------------------------


def streamed(c: puredetok.Codec, ids: Sequence[int], expected: str) -> None:
    """G1 and G2: every emitted prefix is a prefix of ``expected``, and the stream equals it."""
    state, emitted = start(c), ""
    for token_id in ids:
        state, delta = step(state, token_id)
        emitted += delta
        assert expected.startswith(emitted), (list(ids), emitted, expected)
    assert emitted + finish(state) == expected, list(ids)


@functools.cache
def spaced_codec(name: str, skip: bool, spaces: bool) -> puredetok.Codec:
    return codec_for(tokenizer(name), skip_special_tokens=skip, spaces_between_special_tokens=spaces)


@pytest.mark.parametrize("name", TOKENIZERS)
@settings(max_examples=max(5, settings().max_examples // 3))
@given(data=st.data())
def test_every_real_tokenizer_decodes_alike_with_spaces_between_special_tokens(
    name: str, data: st.DataObject
) -> None:
    """TokenizersBackend's decode drops the option: the codec built with it is the same model,
    and the stream equals ``decode`` with it either way."""
    ids = data.draw(id_lists(name))
    skip, spaces = data.draw(st.booleans()), data.draw(st.booleans())
    tok = tokenizer(name)
    expected = tok.decode(ids, skip_special_tokens=skip, spaces_between_special_tokens=spaces)
    assert expected == tok.decode(ids, skip_special_tokens=skip)
    c = spaced_codec(name, skip, spaces)
    assert c == codec(name, skip) and c.exact
    streamed(c, ids, expected)


def test_the_manager_shares_one_codec_across_the_option_where_decode_ignores_it() -> None:
    manager = DetokenizeManager(tokenizer("qwen3"), codecs=CodecCache())
    assert manager.codec(True, None, True) is manager.codec(True, None, False) is manager.codec(True)


# Python tokenizer classes (no tokenizers backend): built here, offline.


@functools.cache
def ctc_tokenizer() -> Any:
    """A Wav2Vec2 CTC tokenizer over a small character vocabulary (it acts on the option)."""
    from transformers import Wav2Vec2CTCTokenizer

    folder = Path(_scratch()) / "ctc"
    folder.mkdir(exist_ok=True)
    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3, "|": 4}
    for char in "abcdehlo'é":
        vocab[char] = len(vocab)
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    return Wav2Vec2CTCTokenizer(str(folder / "vocab.json"))


@functools.cache
def byt5_tokenizer() -> Any:
    """ByT5: a plain Python class (PythonBackend), which ignores the option."""
    from transformers import ByT5Tokenizer

    return ByT5Tokenizer()


@functools.cache
def sentencepiece_tokenizer() -> Any:
    """A SentencePieceBackend class over a model trained here, which ignores the option."""
    import sentencepiece
    from transformers import BertGenerationTokenizer

    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(["hello world, naïve café", "the quick brown fox 🦩 jumps"] * 50),
        model_writer=model,
        vocab_size=300,
        byte_fallback=True,
        character_coverage=1.0,
        hard_vocab_limit=False,
        minloglevel=2,
    )
    path = Path(_scratch()) / "spm.model"
    path.write_bytes(model.getvalue())
    return BertGenerationTokenizer(str(path))


@functools.cache
def _scratch() -> str:
    import tempfile

    return tempfile.mkdtemp(prefix="puredetok-spaces-")


PYTHON_CLASSES = {"ctc": ctc_tokenizer, "byt5": byt5_tokenizer, "sentencepiece": sentencepiece_tokenizer}


@functools.cache
def python_codec(kind: str, skip: bool, spaces: bool | None) -> puredetok.Codec:
    return codec_for(PYTHON_CLASSES[kind](), skip_special_tokens=skip, spaces_between_special_tokens=spaces)


def test_a_ctc_tokenizer_acts_on_the_option() -> None:
    ctc = ctc_tokenizer()
    ids = ctc("hello ab").input_ids
    assert ctc.decode(ids) == "helo ab"  # CTC merges repeats
    assert ctc.decode(ids, spaces_between_special_tokens=True) == "h e l o   a b"


@pytest.mark.parametrize("kind", ["byt5", "sentencepiece"])
@given(data=st.data())
def test_python_and_sentencepiece_classes_ignore_the_option(kind: str, data: st.DataObject) -> None:
    tok = PYTHON_CLASSES[kind]()
    ids = data.draw(st.lists(st.integers(0, len(tok) - 1), max_size=12))
    skip = data.draw(st.booleans())
    plain = tok.decode(ids, skip_special_tokens=skip)
    for spaces in (True, False):
        assert tok.decode(ids, skip_special_tokens=skip, spaces_between_special_tokens=spaces) == plain


@pytest.mark.parametrize("kind", ["ctc", "sentencepiece", "byt5"])
@settings(max_examples=max(5, settings().max_examples // 3))
@given(data=st.data())
def test_python_tokenizer_classes_stream_as_decode_with_the_option(kind: str, data: st.DataObject) -> None:
    """These classes decode in Python: the codec (an exact model checked against their decode with
    the option, or the generic codec, which passes the option to their decode) streams what
    ``decode(ids, spaces_between_special_tokens=...)`` gives for each value."""
    tok = PYTHON_CLASSES[kind]()
    size = len(tok)
    ids = data.draw(st.lists(st.integers(0, size - 1), max_size=12))
    skip = data.draw(st.booleans())
    spaces = data.draw(st.sampled_from([None, True, False]))
    c = python_codec(kind, skip, spaces)
    options: dict[str, Any] = {"skip_special_tokens": skip}
    if spaces is not None:
        options["spaces_between_special_tokens"] = spaces
    streamed(c, ids, tok.decode(ids, **options))


def test_a_request_with_the_option_streams_what_decode_gives_through_the_manager() -> None:
    ctc = ctc_tokenizer()
    ids = tuple(ctc("hello ab").input_ids)
    manager = DetokenizeManager(ctc, codecs=CodecCache())
    params = SamplingParams(spaces_between_special_tokens=True, skip_special_tokens=False)
    [text] = manager.detokenize([DetokenizeMsg("r", ids, True, Opening((), params))])
    assert text == ctc.decode(list(ids), spaces_between_special_tokens=True) == "h e l o   a b"
    [plain] = manager.detokenize([DetokenizeMsg("s", ids, True, Opening((), SamplingParams()))])
    assert plain == "helo ab"
