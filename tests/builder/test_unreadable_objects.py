"""Any object ``codec_for`` cannot read gets ``UnsupportedTokenizerError`` naming its type and what
was missing, never a bare ``TypeError`` or ``AttributeError``: arbitrary objects, objects with some of
the attributes ``codec_for`` reads (set to junk or to callables that return junk), and real
tokenizers (mistral-common's, ``transformers``' ``MistralCommonBackend``, a ``transformers``
tokenizer) with one attribute removed. Such a tokenizer either still reads (a codec) or is refused."""

from __future__ import annotations

import copy
import types
from typing import Any, cast

from hypothesis import given, settings
from hypothesis import strategies as st

import mistral_objects as mo
from helpers import tokenizer
from puredetok import Codec, UnsupportedTokenizerError, codec_for

READ = (
    "decode",
    "get_vocab",
    "backend_tokenizer",
    "tokenizer",
    "instruct",
    "instruct_tokenizer",
    "mistral",
    "transformers_tokenizer",
    "n_words",
    "num_special_tokens",
    "name_or_path",
    "all_special_ids",
    "added_tokens_decoder",
    "clean_up_tokenization_spaces",
    "encode",
)
"""Attributes codec_for looks at."""

CALLABLES = [
    lambda *args, **kwargs: 5,
    lambda *args, **kwargs: None,
    lambda *args, **kwargs: "x",
    lambda *args, **kwargs: {"a": 0, "b": "1"},
    lambda *args, **kwargs: {"a": -3},
    lambda *args, **kwargs: {"a": 0, "b": 1},
]
"""Methods that return junk (or, for get_vocab, a vocabulary)."""

JUNK = st.one_of(
    st.none(),
    st.integers(),
    st.text(max_size=5),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=3),
    st.sampled_from(CALLABLES),
)


def _refused_or_read(thing: object) -> None:
    try:
        codec = codec_for(cast(Any, thing))
    except UnsupportedTokenizerError as error:
        assert type(thing).__name__ in str(error), str(error)
        return
    assert isinstance(codec, Codec)


class Sized(types.SimpleNamespace):
    def __len__(self) -> int:
        return 3


@settings(max_examples=max(30, settings().max_examples))
@given(
    thing=st.one_of(
        JUNK,
        st.builds(object),
        st.dictionaries(st.sampled_from(READ), JUNK, max_size=6).map(
            lambda attrs: types.SimpleNamespace(**attrs)
        ),
        st.dictionaries(st.sampled_from(READ), JUNK, max_size=6).map(lambda attrs: Sized(**attrs)),
        st.tuples(
            st.sampled_from(CALLABLES),
            st.sampled_from(CALLABLES),
            st.dictionaries(st.sampled_from(READ[2:]), JUNK, max_size=4),
        ).map(lambda parts: Sized(decode=parts[0], get_vocab=parts[1], **parts[2])),
    )
)
def test_arbitrary_objects_are_refused_clearly(thing: object) -> None:
    _refused_or_read(thing)


def _without(thing: Any, name: str) -> Any:
    clone = copy.copy(thing)
    vars(clone).pop(name, None)
    return clone


def _objects() -> dict[str, Any]:
    return {
        "tekken": mo.inner("tekken_240911"),
        "spm": mo.inner("spm_v1"),
        "backend": mo.backend("spm_v1"),
        "mistral": mo.obj("mistral", "spm_v1"),
        "qwen3": tokenizer("qwen3"),
    }


@settings(max_examples=max(30, settings().max_examples))
@given(data=st.data())
def test_tokenizers_with_an_attribute_removed_are_read_or_refused_clearly(data: st.DataObject) -> None:
    objects = _objects()
    kind = data.draw(st.sampled_from(sorted(objects)))
    thing = objects[kind]
    name = data.draw(st.sampled_from(sorted(vars(thing))))
    _refused_or_read(_without(thing, name))


def test_a_tekkenizer_without_its_model_names_what_is_missing() -> None:
    thing = _without(mo.inner("tekken_240911"), "_model")
    try:
        codec_for(thing)
    except UnsupportedTokenizerError as error:
        assert "Tekkenizer" in str(error) and "_model" in str(error), str(error)
    else:
        raise AssertionError("a Tekkenizer without its tiktoken model was read")
