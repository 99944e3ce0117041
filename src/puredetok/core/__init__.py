"""The pure core: records, streaming functions, and the codec builder. No I/O, no globals.

This package is the core's public face: the layers above it (the stop layer, the adapters, the
command line, the testing kit) import from here and never from the core's modules, nor any
private name (``tests/test_layers.py`` checks it).
"""

from __future__ import annotations

__all__ = [
    "ADDED",
    "ALL_CLASSES",
    "Codec",
    "DecodeState",
    "ID_LIMIT",
    "OUT_OF_VOCAB",
    "OutOfVocab",
    "SavedState",
    "TokenizerLike",
    "admit_token",
    "byte_alphabet",
    "check_hold",
    "check_token",
    "class_of",
    "clean_up_tokenization",
    "codec_for",
    "continuation_text",
    "feed",
    "feed_hold",
    "finish",
    "finish_hold",
    "mistral_tokenizer_of",
    "pack",
    "read_vocabulary",
    "start",
    "steady",
    "step",
    "step_hold",
    "unpack",
    "with_max_byte_run",
]

from puredetok.core.build import codec_for, read_vocabulary, with_max_byte_run
from puredetok.core.classes import ADDED, ALL_CLASSES, class_of
from puredetok.core.codec import ID_LIMIT, OUT_OF_VOCAB, Codec, DecodeState, OutOfVocab, SavedState
from puredetok.core.decoders.byte_level import byte_alphabet
from puredetok.core.decoders.cleanup import TRANSFORMERS_RULES, apply_rules
from puredetok.core.echo import continuation_text
from puredetok.core.protocols import TokenizerLike
from puredetok.core.pyclasses.mistral import mistral_tokenizer_of
from puredetok.core.saving import check_hold, pack, unpack
from puredetok.core.stream import (
    admit_token,
    check_token,
    feed,
    feed_hold,
    finish,
    finish_hold,
    start,
    steady,
    step,
    step_hold,
)


def clean_up_tokenization(text: str) -> str:
    """``transformers``' ``clean_up_tokenization`` of a whole text: what ``tokenizer.decode`` does
    to its text with ``clean_up_tokenization_spaces=True`` (a codec built with it streams the same).
    """
    return apply_rules(TRANSFORMERS_RULES, text)
