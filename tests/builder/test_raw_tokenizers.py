"""``codec_for`` also takes a raw ``tokenizers.Tokenizer`` and then matches its ``decode``."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import TOKENIZERS, assert_streams_exactly, codec, id_lists, reference


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
