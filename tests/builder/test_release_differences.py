"""What ``transformers`` releases inside the declared range decode differently, and how
``codec_for`` follows each, here with whichever release is installed.

transformers 5.0 - 5.6 apply ``clean_up_tokenization_spaces`` to a BPE backend's text as to any
other; 5.7 and later skip it there unless
``clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output`` (an attribute they set
on every tokenizer) is on. Llama-3's and Phi-2's files ask for the cleanup, so an older release
cleans their text up (``"Hello . world"`` decodes to ``"Hello. world"``). An older release's
``_decode`` is played here by the installed one's own class, patched to clean up whatever the model
(``python3 tasks.py test-oldest`` runs the whole suite on transformers 5.0.0 itself). The codec must
be exact with the cleanup the decode applies, or, where it cannot tell, find the disagreement in its
check and fall back to a codec that still streams exactly what ``decode`` gives.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from transformers.tokenization_utils_tokenizers import TokenizersBackend

import puredetok
from helpers import assert_streams_exactly, id_lists, tokenizer
from puredetok.serving._loading import load_tokenizer

SWITCH = "clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output"
NAMES = ("llama3", "phi2")  # the shared BPE tokenizers whose files ask for the cleanup
TEXTS = ("Hello . world , don't", "it 's a test ! yes ?", "' quoted ' . .")


def _decode_cleaning_bpe_too(
    self: Any,
    token_ids: Any,
    skip_special_tokens: bool = False,
    clean_up_tokenization_spaces: bool | None = None,
    **kwargs: Any,
) -> str:
    """``_decode`` as transformers 5.0 - 5.6 do it: the cleanup whatever the backend's model."""
    if isinstance(token_ids, int):
        token_ids = [token_ids]
    text: str = self._tokenizer.decode(token_ids, skip_special_tokens=skip_special_tokens)
    cleanup = (
        self.clean_up_tokenization_spaces
        if clean_up_tokenization_spaces is None
        else clean_up_tokenization_spaces
    )
    return str(self.clean_up_tokenization(text)) if cleanup else text


@functools.cache
def installed_release_skips_bpe_cleanup() -> bool:
    """Whether the installed transformers is 5.7 or later (it sets the switch on a tokenizer)."""
    return SWITCH in vars(load_tokenizer(tokenizer("llama3").name_or_path))


def _act_as_older(patch: pytest.MonkeyPatch) -> None:
    if installed_release_skips_bpe_cleanup():  # an older release decodes so already
        patch.setattr(TokenizersBackend, "_decode", _decode_cleaning_bpe_too)


@pytest.fixture
def older_release(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The installed transformers made to decode as 5.0 - 5.6 do (restored after the test)."""
    _act_as_older(monkeypatch)
    yield


def _fresh(name: str, switch: bool) -> Any:
    """A tokenizer loaded anew (not the suite's shared one) as transformers 5.0 loads both (its
    ``TokenizersBackend``, where later releases load Phi-2 as ``CodeGenTokenizer``), without the
    5.7 switch or with it off."""
    tok = TokenizersBackend.from_pretrained(tokenizer(name).name_or_path)
    if switch:
        setattr(tok, SWITCH, False)
    else:
        vars(tok).pop(SWITCH, None)
    assert getattr(tok, "clean_up_tokenization_spaces", None) is True
    return tok


def _marked_ids(tok: Any) -> list[list[int]]:
    return [list(tok.encode(text, add_special_tokens=False)) for text in TEXTS]


@pytest.mark.parametrize("name", NAMES)
def test_an_older_release_gets_an_exact_codec_with_its_cleanup(name: str, older_release: None) -> None:
    tok = _fresh(name, switch=False)
    codec = puredetok.codec_for(tok)
    assert codec.exact and codec.clean_up_tokenization_spaces, codec.reason
    assert codec.reason.endswith("+ cleanup"), codec.reason
    for ids in _marked_ids(tok):
        assert_streams_exactly(codec, ids, tok.decode(ids))
    assert tok.decode(_marked_ids(tok)[0]) == "Hello. world, don't"


@pytest.mark.parametrize("name", NAMES)
def test_a_decode_that_differs_from_what_its_release_says_is_found_and_the_fallback_is_exact(
    name: str, older_release: None
) -> None:
    """The switch says "5.7 or later" (no cleanup of BPE text), yet decode cleans up: the check
    finds it, and the fallback decodes through ``decode`` itself, not the backend it disagrees with."""
    tok = _fresh(name, switch=True)
    codec = puredetok.codec_for(tok)
    assert not codec.exact
    assert "disagrees with decode" in codec.reason and "its backend" in codec.reason, codec.reason
    for ids in _marked_ids(tok):
        assert_streams_exactly(codec, ids, tok.decode(ids))


@pytest.mark.parametrize("name", NAMES)
@given(data=st.data())
def test_both_codecs_stream_what_the_older_decode_gives(name: str, data: st.DataObject) -> None:
    with pytest.MonkeyPatch.context() as patch:
        _act_as_older(patch)
        switch = data.draw(st.booleans(), label="switch")
        tok, codec = _codec(name, switch)
        marks = _marked_ids(tok)
        ids = data.draw(st.one_of(id_lists(name), st.sampled_from(marks)).map(list))
        ids = [*ids, *data.draw(st.sampled_from(marks))]
        assert_streams_exactly(codec, ids, tok.decode(ids))


_CODECS: dict[tuple[str, bool], tuple[Any, puredetok.Codec]] = {}


def _codec(name: str, switch: bool) -> tuple[Any, puredetok.Codec]:
    """One tokenizer and codec per case for the whole session (built under the patch)."""
    if (name, switch) not in _CODECS:
        tok = _fresh(name, switch)
        _CODECS[name, switch] = tok, puredetok.codec_for(tok)
    return _CODECS[name, switch]


def test_the_installed_release_is_followed_as_it_is() -> None:
    """Unpatched, the codec's cleanup is what the installed release's decode does."""
    tok = load_tokenizer(tokenizer("llama3").name_or_path)
    codec = puredetok.codec_for(tok)
    ids = _marked_ids(tok)[0]
    cleans = tok.decode(ids) == "Hello. world, don't"
    assert codec.exact and codec.clean_up_tokenization_spaces == cleans
    assert cleans == (getattr(tok, SWITCH, None) is None)
    assert_streams_exactly(codec, ids, tok.decode(ids))
