"""``codec_for``: what it accepts, what it refuses, and what the codec says about itself."""

from __future__ import annotations

import copy
import pickle
from typing import Any, cast

import attrs
import pytest

import puredetok
from helpers import codec, reference, tokenizer
from puredetok import UnsupportedTokenizerError, codec_for, feed, finish, start


@pytest.mark.parametrize("thing", [None, "qwen3", 42, object(), {"vocab": {}}])
def test_objects_that_are_not_tokenizers_are_refused_clearly(thing: object) -> None:
    with pytest.raises(
        UnsupportedTokenizerError, match="expected a transformers tokenizer or a tokenizers.Tokenizer"
    ):
        codec_for(cast(Any, thing))


class DuckTokenizer:
    """Something with decode and get_vocab but no tokenizers backend (like a slow tokenizer)."""

    def __init__(self) -> None:
        self.inner = tokenizer("gpt2")

    def decode(
        self, ids: list[int], skip_special_tokens: bool = False, clean_up_tokenization_spaces: Any = None
    ) -> str:
        return str(self.inner.decode(ids, skip_special_tokens=skip_special_tokens))

    def get_vocab(self) -> dict[str, int]:
        return dict(self.inner.get_vocab())

    def __len__(self) -> int:
        return len(self.inner)


def test_a_tokenizer_without_backend_gets_the_window_codec() -> None:
    c = codec_for(DuckTokenizer())
    assert not c.exact and c.family == "window" and "no tokenizers backend" in c.reason
    ids = list(tokenizer("gpt2").encode("window 🦩 codec"))
    state, text = feed(start(c), ids)
    assert text + finish(state) == reference("gpt2", ids)


def test_codec_describes_itself_briefly() -> None:
    c = codec("qwen3")
    assert c.family == "byte_level" and c.exact and c.reason.startswith("exact model")
    assert c.vocab_size == len(tokenizer("qwen3"))
    assert len(repr(c)) < 400  # no tables in the repr


def test_codec_copies_are_itself_and_pickles_are_equal() -> None:
    c = codec("mistral_v03")
    assert copy.copy(c) is c and copy.deepcopy(c) is c
    clone = pickle.loads(pickle.dumps(c))
    assert clone == c and hash(clone) == hash(c)
    ids = list(
        tokenizer("mistral_v03").encode("pickled codecs stream the same 中文", add_special_tokens=False)
    )
    assert feed(start(clone), ids)[1] == feed(start(c), ids)[1]


def test_states_are_frozen() -> None:
    state = start(codec("qwen3"))
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        setattr(state, "hold", b"x")  # noqa: B010 - the assignment itself is what is tested
    assert isinstance(hash(state), int)


def test_invalid_prompt_ids_raise() -> None:
    with pytest.raises(puredetok.InvalidTokenError, match="position 1"):
        start(codec("qwen3"), [1, -1])
