"""``codec_for`` also takes a raw ``tokenizers.Tokenizer`` and then matches its ``decode``."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import puredetok
from helpers import TOKENIZERS, assert_streams_exactly, codec, id_lists, reference, tokenizer
from puredetok._build import reference_decode
from puredetok.errors import OptionTypeError, UnsupportedTokenizerError


@pytest.mark.parametrize("name", TOKENIZERS)
@settings(max_examples=max(10, settings().max_examples // 3))
@given(data=st.data())
def test_raw_backend_streams_exactly(name: str, data: st.DataObject) -> None:
    ids = data.draw(id_lists(name))
    skip = data.draw(st.booleans())
    c = codec(name, skip, raw=True)
    assert c.exact and not c.clean_up_tokenization_spaces
    assert_streams_exactly(c, ids, reference(name, ids, skip, raw=True))


def test_same_decoding_gives_equal_codecs() -> None:
    assert codec("qwen3") == codec("qwen3")
    assert codec("qwen3") != codec("qwen3", True)
    # Qwen2.5 and Qwen3 share vocabulary and decoder but not their added tokens.
    assert codec("qwen3").fingerprint != codec("qwen2_5").fingerprint


@pytest.mark.parametrize(
    "option", ["skip_special_tokens", "clean_up_tokenization_spaces", "spaces_between_special_tokens"]
)
def test_the_reference_decode_refuses_a_mistyped_option_as_codec_for_does(option: str) -> None:
    raw = tokenizer("qwen3").backend_tokenizer
    options: dict[str, Any] = {"skip_special_tokens": False, option: "yes"}
    with pytest.raises(OptionTypeError) as built:
        puredetok.codec_for(raw, **options)
    with pytest.raises(OptionTypeError) as decoded:
        reference_decode(raw, **options)
    assert str(decoded.value) == str(built.value)


def test_the_reference_decode_of_a_raw_tokenizer_ignores_spaces_between_special_tokens() -> None:
    """A ``tokenizers.Tokenizer``'s decode has no such option: it is not passed (no TypeError)."""
    raw = tokenizer("qwen3").backend_tokenizer
    ids = [*raw.encode("a b").ids, raw.token_to_id("<|im_end|>")]
    decode = reference_decode(raw, skip_special_tokens=False, spaces_between_special_tokens=False)
    assert decode(ids) == raw.decode(ids, skip_special_tokens=False) == "a b<|im_end|>"


@pytest.mark.parametrize("thing", [object(), "qwen3", None])
def test_the_reference_decode_of_an_object_with_no_decode_says_so(thing: Any) -> None:
    with pytest.raises(UnsupportedTokenizerError, match="it has no decode method"):
        reference_decode(thing, skip_special_tokens=False)
