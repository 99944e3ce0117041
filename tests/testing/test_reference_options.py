"""``reference_for(..., codec=...)`` refuses a codec built with other decode options than the ones
asked for: the oracle would disagree with itself (its decode with one cleanup, its codec with
another). ``clean_up_tokenization_spaces=None`` is compared as ``codec_for`` resolves it, so that
None and the tokenizer's own default (or ``transformers``' BPE exception) are no false mismatch."""

from __future__ import annotations

from typing import Any

import pytest

from helpers import CLEANED, CLEANUP_OBJECTS, cleanup_object, codec, tokenizer
from puredetok import Codec, feed, finish, start
from puredetok._build import reference_decode, resolved_cleanup
from puredetok.errors import OptionTypeError
from puredetok.testing import Guarantee, Reference, check_ids, core_detokenizer, reference_for


def source(name: str, raw: bool) -> Any:
    """The tokenizer ``helpers.codec(name, raw=raw)`` is built from."""
    return tokenizer(name).backend_tokenizer if raw else tokenizer(name)


def cleanup_ids(tok: Any) -> list[int]:
    """The ids of a text that ``transformers``' cleanup changes."""
    if hasattr(tok, "encode_batch"):  # a tokenizers.Tokenizer
        return list(tok.encode(CLEANED[0], add_special_tokens=False).ids)
    return [int(i) for i in tok.encode(CLEANED[0], add_special_tokens=False)]


def streamed(c: Codec, ids: list[int]) -> str:
    state, text = feed(start(c), ids)
    return text + finish(state)


# (tokenizer, raw, the cleanup the codec was built with, the cleanup asked of reference_for)
MISMATCHED = [
    ("t5_small", False, None, False),  # its default is True
    ("t5_small", False, False, None),
    ("distilbert_base_uncased", False, True, None),  # its default is False
    ("distilbert_base_uncased", False, None, True),
    ("qwen3", True, None, True),  # a tokenizers.Tokenizer: True applies transformers' cleanup
    ("qwen3", True, True, False),
]


@pytest.mark.parametrize(("name", "raw", "built", "asked"), MISMATCHED)
def test_reference_for_refuses_a_codec_with_another_cleanup(
    name: str, raw: bool, built: bool | None, asked: bool | None
) -> None:
    tok, given = source(name, raw), codec(name, cleanup=built, raw=raw)
    ids = cleanup_ids(tok)
    # The two really disagree: the codec streams one text, the decode asked for gives another.
    decode = reference_decode(tok, skip_special_tokens=False, clean_up_tokenization_spaces=asked)
    assert streamed(given, ids) != decode(ids)
    applied, wanted = given.clean_up_tokenization_spaces, not given.clean_up_tokenization_spaces
    means = "" if asked is wanted else rf" \(which this {type(tok).__name__}'s decode takes as {wanted}\)"
    message = (
        rf"the codec applies clean_up_tokenization_spaces={applied}, "
        rf"but clean_up_tokenization_spaces={asked}{means} was asked for"
    )
    with pytest.raises(ValueError, match=message):
        reference_for(tok, clean_up_tokenization_spaces=asked, codec=given)


def test_an_oracle_whose_codec_has_another_cleanup_blames_the_core() -> None:
    """What ``reference_for`` let through: T5's codec (cleanup on, its default) with the decode
    without cleanup, and puredetok's own core reported as breaking G2."""
    tok = tokenizer("t5_small")
    decode = reference_decode(tok, skip_special_tokens=False, clean_up_tokenization_spaces=False)
    inconsistent = Reference(decode, codec("t5_small"))
    found = check_ids(core_detokenizer(inconsistent.codec), inconsistent, cleanup_ids(tok))
    assert found is not None and found.guarantee is Guarantee.PREFIX_SAFE
    assert (found.emitted, found.expected) == ("Hello.", "Hello .")
    with pytest.raises(ValueError, match="clean_up_tokenization_spaces"):
        reference_for(tok, clean_up_tokenization_spaces=False, codec=inconsistent.codec)


# (tokenizer, raw, the cleanup the codec was built with, a cleanup asked that resolves to the same)
MATCHED = [
    ("t5_small", False, None, True),
    ("t5_small", False, True, None),
    ("distilbert_base_uncased", False, None, False),
    ("distilbert_base_uncased", False, False, None),
    ("qwen3", False, None, True),  # transformers leaves a BPE backend's text as it is
    ("qwen3", False, True, None),
    ("qwen3", True, None, False),
]


@pytest.mark.parametrize(("name", "raw", "built", "asked"), MATCHED)
def test_reference_for_takes_a_codec_whose_cleanup_the_options_resolve_to(
    name: str, raw: bool, built: bool | None, asked: bool | None
) -> None:
    tok, given = source(name, raw), codec(name, cleanup=built, raw=raw)
    ref = reference_for(tok, clean_up_tokenization_spaces=asked, codec=given)
    assert ref.codec is given
    ids = cleanup_ids(tok)
    assert streamed(given, ids) == ref.decode(ids)
    assert check_ids(core_detokenizer(ref.codec), ref, ids) is None


@pytest.mark.parametrize(("name", "raw", "built", "asked"), MISMATCHED + MATCHED)
def test_resolved_cleanup_is_what_codec_for_records(
    name: str, raw: bool, built: bool | None, asked: bool | None
) -> None:
    tok = source(name, raw)
    for request in (built, asked):
        built_codec = codec(name, cleanup=request, raw=raw)
        assert resolved_cleanup(tok, request) is built_codec.clean_up_tokenization_spaces


@pytest.mark.parametrize("label", CLEANUP_OBJECTS)
def test_reference_for_refuses_a_codec_with_cleanup_for_an_object_without_the_option(label: str) -> None:
    """Raw, mistral-common and tiktoken objects: their cleanup is ``transformers``' applied to the
    text, and None (their default) applies none."""
    tok, ids = cleanup_object(label)
    cleaned = reference_for(tok, skip_special_tokens=True, clean_up_tokenization_spaces=True)
    assert streamed(cleaned.codec, list(ids)) == CLEANED[1]
    with pytest.raises(ValueError, match=r"applies clean_up_tokenization_spaces=True, but .*=None"):
        reference_for(tok, skip_special_tokens=True, codec=cleaned.codec)
    assert resolved_cleanup(tok, None) is False and resolved_cleanup(tok, True) is True
    again = reference_for(
        tok, skip_special_tokens=True, clean_up_tokenization_spaces=True, codec=cleaned.codec
    )
    assert again.codec is cleaned.codec and again.decode(list(ids)) == CLEANED[1]


@pytest.mark.parametrize("skip", [False, True])
def test_reference_for_refuses_a_codec_with_another_skip_special_tokens_naming_both(skip: bool) -> None:
    message = f"the codec was built with skip_special_tokens={not skip}, but skip_special_tokens={skip} was"
    with pytest.raises(ValueError, match=message):
        reference_for(tokenizer("qwen3"), skip_special_tokens=skip, codec=codec("qwen3", not skip))


@pytest.mark.parametrize("bad", [True, "qwen3", {"skip_special_tokens": False}])
def test_reference_for_refuses_a_codec_that_is_not_one(bad: object) -> None:
    with pytest.raises(OptionTypeError, match="codec must be a Codec"):
        reference_for(tokenizer("qwen3"), codec=bad)  # type: ignore[arg-type]


def test_a_bad_option_is_named_before_the_codec_is_compared() -> None:
    with pytest.raises(OptionTypeError, match="clean_up_tokenization_spaces"):
        reference_for(tokenizer("t5_small"), clean_up_tokenization_spaces=0, codec=codec("t5_small"))  # type: ignore[arg-type]
    with pytest.raises(OptionTypeError, match="skip_special_tokens"):
        reference_for(tokenizer("qwen3"), skip_special_tokens=1, codec=codec("qwen3", True))  # type: ignore[arg-type]
    with pytest.raises(OptionTypeError, match="clean_up_tokenization_spaces"):
        resolved_cleanup(tokenizer("t5_small"), "no")  # type: ignore[arg-type]
