"""``codec_for``: what it accepts, what it refuses, and what the codec says about itself."""

from __future__ import annotations

import copy
import pickle
from typing import Any, cast

import attrs
import pytest
import tokenizers

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


def _stream_text(c: puredetok.Codec, ids: list[int]) -> tuple[list[str], str]:
    state, deltas = start(c), []
    for token_id in ids:
        state, delta = puredetok.step(state, token_id)
        deltas.append(delta)
    return deltas, finish(state)


def test_the_check_catches_a_wrong_model_and_names_the_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    """A model that recognises the configuration but decodes it wrongly is never called exact."""
    from puredetok._core.decoders.metaspace import Metaspace

    monkeypatch.setattr(Metaspace, "map_token", lambda self, token, first: str(token))  # "▁" kept
    monkeypatch.setattr(Metaspace, "map_tokens", lambda self, tokens, first: [*tokens])
    c = codec_for(tokenizer("t5_small"))
    assert not c.exact and c.family == "window"
    assert "the exact model (Metaspace + cleanup) disagrees with decode on ids [" in c.reason
    assert "the model gives '▁" in c.reason


def test_clip_streams_what_decode_gives() -> None:
    """CLIP's ``</w>`` suffix (its class replaces it in decode) was ignored while the codec claimed
    exactness."""
    import families

    clip = families.family("clip")
    c = codec_for(clip)
    assert c.exact and c.family == "clip", c.reason
    ids = list(clip.encode("a photo", add_special_tokens=False))
    assert clip.convert_ids_to_tokens(ids[:1]) == ["a</w>"]
    assert _stream_text(c, ids[:1]) == (["a"], "")  # the suffix's space is held: sent if a word follows
    deltas, rest = _stream_text(c, ids)
    assert "".join(deltas) + rest == clip.decode(ids) == "a photo"


@pytest.mark.parametrize("window", [False, True])
def test_the_fallback_failures_of_the_issue(window: bool) -> None:
    """ByT5's split character and wav2vec2's run of delimiters, exact and through the fallback."""
    import families

    byt5 = codec_for(families.family("byt5"), window=window)
    deltas, rest = _stream_text(byt5, [198, 172])
    assert "".join(deltas) + rest == "é" and "\ufffd" not in "".join(deltas)
    speech = families.family("wav2vec2")
    unknown, bar = speech.convert_tokens_to_ids(["[UNK]", "|"])
    ids = [unknown, bar, bar, bar, bar, unknown]
    deltas, rest = _stream_text(codec_for(speech, window=window), ids)
    assert "".join(deltas) + rest == speech.decode(ids) == "[UNK] [UNK]"


def _backend_class(**methods: Any) -> Any:
    from transformers import PreTrainedTokenizerFast

    return type("Custom", (PreTrainedTokenizerFast,), methods)


@pytest.mark.parametrize("method", ["decode", "_decode", "convert_tokens_to_string", "clean_up_tokenization"])
def test_a_class_that_overrides_decoding_is_not_a_known_one(method: str) -> None:
    backend = tokenizer("gpt2").backend_tokenizer
    custom = _backend_class(**{method: lambda self, *args, **kwargs: "x"})(tokenizer_object=backend)
    c = codec_for(custom)
    assert not c.exact and c.reason == f"not modelled exactly: Custom overrides {method}"


def test_decode_replaced_on_the_object_or_its_backend_is_not_a_known_one() -> None:
    from transformers import PreTrainedTokenizerFast

    raw = tokenizers.Tokenizer.from_str(tokenizer("gpt2").backend_tokenizer.to_str())
    plain = PreTrainedTokenizerFast(tokenizer_object=raw)
    assert codec_for(plain).exact
    plain.decode = lambda *args, **kwargs: "x"
    assert codec_for(plain).reason == "not modelled exactly: decode set on the object"
    other = PreTrainedTokenizerFast(tokenizer_object=tokenizers.Tokenizer.from_str(raw.to_str()))
    other.backend_tokenizer.decode = lambda *args, **kwargs: "x"
    assert codec_for(other).reason == "not modelled exactly: the backend's decode replaced"


def test_unknown_decoder_fields_and_types_are_not_known_ones() -> None:
    from puredetok._build.config import from_config
    from puredetok._core.decoders import Unmodelled

    for config, why in (
        ({"type": "Fuse", "joiner": "-"}, "the Fuse decoder has fields puredetok does not know: joiner"),
        (
            {"type": "Strip", "content": " ", "start": 1, "stop": 0, "all": True},
            "fields puredetok does not know",
        ),
        ({"type": "Cyrillic"}, "no exact model for the Cyrillic decoder"),
        ({"type": "Replace", "pattern": {"Regex": "a+"}, "content": "b"}, "Replace with a Regex pattern"),
        ({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "sometimes"}, "prepend scheme"),
        ({"type": "Sequence", "decoders": [{"type": "Fuse"}, {"type": "Nope"}]}, "Nope"),
        ({"type": "Strip", "content": " ", "start": -1, "stop": 0}, "start of -1"),
    ):
        with pytest.raises(Unmodelled, match=why):
            from_config(config)
