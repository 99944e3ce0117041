"""``puredetok._build.config``: reading a decoder's JSON into decoder models. The crate's own
serialization vectors (tokenizers/src/decoders/mod.rs, pre_tokenizers/metaspace.rs), its Sequence
vector (decoders/sequence.rs), and every decoder type of the installed library read to its model."""

from __future__ import annotations

import json
from typing import Any

import pytest
from tokenizers import Regex, Tokenizer, decoders, models

import puredetok
from decoder_contract import check_vector, models_of
from puredetok._build.config import from_config
from puredetok._core.decoders import Decoder, Unmodelled
from puredetok._core.decoders.bpe import BPEDecoder
from puredetok._core.decoders.byte_fallback import ByteFallback
from puredetok._core.decoders.byte_level import ByteLevel
from puredetok._core.decoders.ctc import CTC
from puredetok._core.decoders.fuse import Fuse
from puredetok._core.decoders.metaspace import Metaspace
from puredetok._core.decoders.replace import Replace
from puredetok._core.decoders.strip import Strip
from puredetok._core.decoders.wordpiece import WordPiece

SP = "\u2581"
SERIALIZED: list[tuple[str, list[Decoder]]] = [
    # decoders/mod.rs, "decoder_serialization" (the old and the current form)
    (
        '{"type":"Sequence","decoders":[{"type":"ByteFallback"},{"type":"Metaspace","replacement":"▁",'
        '"add_prefix_space":true,"prepend_scheme":"always"}]}',
        [ByteFallback(), Metaspace(SP, "always")],
    ),
    (
        '{"type":"Sequence","decoders":[{"type":"ByteFallback"},{"type":"Metaspace","replacement":"▁",'
        '"prepend_scheme":"always","split":true}]}',
        [ByteFallback(), Metaspace(SP, "always")],
    ),
    # decoders/mod.rs, "decoder_serialization_other_no_arg"
    (
        '{"type":"Sequence","decoders":[{"type":"Fuse"},{"type":"Metaspace","replacement":"▁",'
        '"prepend_scheme":"always","split":true}]}',
        [Fuse(), Metaspace(SP, "always")],
    ),
    # pre_tokenizers/metaspace.rs, "serialization": a config older than prepend_scheme
    ('{"type":"Metaspace","replacement":"_","add_prefix_space":true}', [Metaspace("_", "always")]),
    ('{"type":"Metaspace","replacement":"_","add_prefix_space":false}', [Metaspace("_", "never")]),
]
REFUSED = [
    # decoders/mod.rs, "decoder_serialization_no_decode": configs the crate refuses to read
    '{"type":"Sequence","decoders":[{},{"type":"Metaspace","replacement":"▁","prepend_scheme":"always"}]}',
    '{"replacement":"▁","prepend_scheme":"always"}',
    '{"type":"Sequence","prepend_scheme":"always"}',
]


@pytest.mark.parametrize(
    ("config", "expected"), SERIALIZED, ids=[f"config{i}" for i in range(len(SERIALIZED))]
)
def test_the_crates_serialized_configs(config: str, expected: list[Decoder]) -> None:
    assert from_config(json.loads(config)) == expected


@pytest.mark.parametrize("config", REFUSED)
def test_configs_the_crate_refuses_are_not_modelled(config: str) -> None:
    with pytest.raises(Unmodelled):
        from_config(json.loads(config))


def test_a_config_written_by_an_older_library_is_read_as_the_crate_reads_it() -> None:
    """metaspace.rs, "serialization": the crate still reads the ``str_rep`` field of old files."""
    old = '{"type":"Metaspace","str_rep":"▁","replacement":"▁","add_prefix_space":true}'
    state = json.loads(Tokenizer(models.WordLevel({f"{SP}a": 0, "b": 1}, unk_token="b")).to_str())
    state["decoder"] = json.loads(old)
    tokenizer = Tokenizer.from_str(json.dumps(state))
    c = puredetok.codec_for(tokenizer)
    assert c.exact and c.family == "metaspace", c.reason
    state_, text = puredetok.feed(puredetok.start(c), [0, 1, 0])
    assert text + puredetok.finish(state_) == tokenizer.decode([0, 1, 0]) == "ab a"


def test_the_crates_sequence_vector() -> None:
    """decoders/sequence.rs, "sequence_basic" (and the Python bindings' TestSequenceDecoder)."""
    tokens = [SP, SP, "H", "H", "i", "i", SP, "y", "o", "u"]
    check_vector(decoders.Sequence([decoders.CTC(), decoders.Metaspace()]), tokens, "Hi you")


LIBRARY: list[tuple[Any, list[Decoder]]] = [
    (decoders.ByteLevel(), [ByteLevel()]),
    (decoders.ByteFallback(), [ByteFallback()]),
    (decoders.Fuse(), [Fuse()]),
    (decoders.Strip(" ", 1, 2), [Strip(" ", 1, 2)]),
    (decoders.Replace(SP, " "), [Replace(SP, " ")]),
    (decoders.Metaspace(), [Metaspace(SP, "always")]),
    (decoders.Metaspace("-", "first", split=False), [Metaspace("-", "first")]),
    (decoders.WordPiece("@@", False), [WordPiece("@@", False)]),
    (decoders.BPEDecoder("_"), [BPEDecoder("_")]),
    (decoders.CTC("[PAD]", "/", False), [CTC("[PAD]", "/", False)]),
    (
        decoders.Sequence(
            [decoders.Replace(SP, " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
        ),
        [Replace(SP, " "), ByteFallback(), Fuse(), Strip(" ", 1, 0)],
    ),
    (decoders.Sequence([decoders.Sequence([decoders.Fuse()]), decoders.Fuse()]), [Fuse(), Fuse()]),
]


@pytest.mark.parametrize(("library", "expected"), LIBRARY, ids=[str(m) for _, m in LIBRARY])
def test_every_library_decoder_reads_to_its_model(library: Any, expected: list[Decoder]) -> None:
    assert models_of(library) == expected


def test_byte_fallback_takes_the_codecs_cap() -> None:
    assert from_config({"type": "ByteFallback"}, max_byte_run=5) == [ByteFallback(5)]


def test_a_regex_replace_is_not_modelled() -> None:
    with pytest.raises(Unmodelled, match="Regex pattern"):
        models_of(decoders.Replace(Regex(" +"), " "))
