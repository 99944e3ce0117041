"""``with_max_byte_run``: a codec with another byte-run cap, derived from one already built, is the
codec ``codec_for`` builds from scratch (equal, same fingerprint, same text at every step)."""

from __future__ import annotations

import functools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import puredetok
from helpers import byte_ids, codec, id_lists, tokenizer
from puredetok._build import read_vocabulary, with_max_byte_run

SHARED = ("llama2", "mistral_v03", "phi3_mini", "qwen3", "t5_small")
CAPS = (None, 1, 4)


@functools.cache
def built(name: str, cap: int | None, ignore: bool = False) -> puredetok.Codec:
    return puredetok.codec_for(
        tokenizer(name), max_byte_run=cap, out_of_vocab="ignore" if ignore else "raise"
    )


def _deltas(c: puredetok.Codec, ids: list[int]) -> list[str]:
    state, deltas = puredetok.start(c), []
    for token_id in ids:
        state, delta = puredetok.step(state, token_id)
        deltas.append(delta)
    fed, text = puredetok.feed(puredetok.start(c), ids)
    return [*deltas, puredetok.finish(state), text + puredetok.finish(fed)]


@pytest.mark.parametrize("name", SHARED)
@pytest.mark.parametrize("start_cap", CAPS)
@pytest.mark.parametrize("cap", CAPS)
def test_a_derived_codec_is_the_one_built_from_scratch(
    name: str, start_cap: int | None, cap: int | None
) -> None:
    derived = with_max_byte_run(built(name, start_cap), cap)
    scratch = built(name, cap)
    assert derived is not None
    assert derived == scratch and derived.fingerprint == scratch.fingerprint
    assert derived.reason == scratch.reason and derived.classes == scratch.classes
    if byte_ids(name) and name != "qwen3" and start_cap != cap:
        # A cap on a byte-fallback vocabulary is a new stage over the very same per-id tables.
        assert derived is not built(name, start_cap)
        assert derived.decoding.fast is built(name, start_cap).decoding.fast


@pytest.mark.parametrize("name", SHARED)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_a_derived_codec_decodes_as_the_one_built_from_scratch(name: str, data: st.DataObject) -> None:
    cap = data.draw(st.sampled_from(CAPS[1:]))
    ids = data.draw(id_lists(name))
    derived = with_max_byte_run(built(name, None), cap)
    assert derived is not None
    assert _deltas(derived, ids) == _deltas(built(name, cap), ids)


def test_a_cap_that_changes_nothing_shares_the_codec() -> None:
    """A byte-level vocabulary (Qwen3) has no byte-fallback runs: every cap is the same codec."""
    base = codec("qwen3")
    assert with_max_byte_run(base, 4) is base and with_max_byte_run(base, 1) is base
    assert built("qwen3", 4) == base and built("qwen3", 4).fingerprint == base.fingerprint


def test_ignoring_out_of_vocab_is_kept() -> None:
    derived = with_max_byte_run(built("llama2", None, ignore=True), 4)
    assert derived == built("llama2", 4, ignore=True) and derived is not None
    assert derived.out_of_vocab == "ignore"


def test_the_fallback_is_not_derived_and_bad_caps_are_refused() -> None:
    window = puredetok.codec_for(tokenizer("llama2"), window=True)
    assert with_max_byte_run(window, 4) is None
    with pytest.raises(ValueError, match="max_byte_run"):
        with_max_byte_run(codec("llama2"), 0)


@pytest.mark.parametrize("cap", [0, -1, "4", 4.0, True, 2**63])
def test_a_bad_cap_is_refused_as_codec_for_refuses_it(cap: object) -> None:
    """One check of ``max_byte_run`` for both: the same error, type and message."""
    with pytest.raises(ValueError) as built_error:
        puredetok.codec_for(tokenizer("llama2"), max_byte_run=cap)  # type: ignore[arg-type]
    with pytest.raises(ValueError) as derived_error:
        with_max_byte_run(codec("llama2"), cap)  # type: ignore[arg-type]
    assert type(derived_error.value) is type(built_error.value)
    assert str(derived_error.value) == str(built_error.value)


def test_an_integer_cap_of_another_type_derives_the_codec_codec_for_builds() -> None:
    """A NumPy integer is a cap, as ``codec_for`` takes it."""
    numpy = pytest.importorskip("numpy")
    assert with_max_byte_run(codec("llama2"), numpy.int64(4)) == built("llama2", 4)


@pytest.mark.parametrize("name", ["qwen3", "llama2", "t5_small"])
def test_a_vocabulary_read_once_builds_the_same_codec(name: str) -> None:
    """``codec_for(..., vocabulary=read_vocabulary(tokenizer))``, as a manager builds its codecs."""
    tok = tokenizer(name)
    vocabulary = read_vocabulary(tok)
    assert vocabulary == tok.backend_tokenizer.get_vocab(with_added_tokens=True)
    for skip in (False, True):
        assert puredetok.codec_for(tok, skip_special_tokens=skip, vocabulary=vocabulary) == codec(name, skip)
    assert read_vocabulary(object()) is None  # type: ignore[arg-type]
