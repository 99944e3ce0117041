"""Exact models of the ``transformers`` tokenizer classes that decode in Python.

These classes decode instead of, or on top of, their ``tokenizers`` backend. One module per class:

==========================  ===========================================================
module                      class
==========================  ===========================================================
:mod:`.byt5`                ``ByT5Tokenizer`` (bytes; invalid UTF-8 dropped)
:mod:`.speech_ctc`          ``Wav2Vec2CTCTokenizer`` (CTC grouping, pad, word delimiter)
:mod:`.whisper`             ``WhisperTokenizer`` (timestamps removed, the prompt rule)
:mod:`.marian`              ``MarianTokenizer`` (SentencePiece without a backend)
:mod:`.clip`                ``CLIPTokenizer`` (``</w>`` suffix, strip)
==========================  ===========================================================

A class is recognised only as itself or as a subclass that changes nothing about decoding; any
other class that overrides a decoding method is not a known one (see
:func:`puredetok._build.reading.override`).
"""

from __future__ import annotations

__all__ = ["ClassModel", "model_for_class", "KNOWN_CLASSES"]

from typing import Any

from puredetok._core.decoders.base import Unmodelled
from puredetok._build.pyclasses.base import ClassModel
from puredetok._build.pyclasses.byt5 import byt5_model
from puredetok._build.pyclasses.clip import clip_model
from puredetok._build.pyclasses.marian import marian_model
from puredetok._build.pyclasses.speech_ctc import ctc_tokenizer_model
from puredetok._build.pyclasses.whisper import whisper_model
from puredetok._build.reading import loaded_class, override

KNOWN_CLASSES = (
    ("transformers.models.byt5.tokenization_byt5", "ByT5Tokenizer"),
    ("transformers.models.wav2vec2.tokenization_wav2vec2", "Wav2Vec2CTCTokenizer"),
    ("transformers.models.whisper.tokenization_whisper", "WhisperTokenizer"),
    ("transformers.models.marian.tokenization_marian", "MarianTokenizer"),
    ("transformers.models.clip.tokenization_clip", "CLIPTokenizer"),
)
"""The classes with a model here, by module and name."""

_HARMLESS = (("transformers.models.codegen.tokenization_codegen", "CodeGenTokenizer"),)
"""Classes whose ``decode`` override adds only options that are off by default: their backend
decides, as for any other backend class."""


def harmless_reference(tokenizer: Any) -> type | None:
    """The class to compare overrides against for a class whose own overrides are harmless."""
    for module, name in _HARMLESS:
        cls = loaded_class(module, name)
        if cls is not None and isinstance(tokenizer, cls):
            return cls
    return None


def model_for_class(
    tokenizer: Any, *, size: int, skip: bool, cleanup: bool, max_byte_run: int | None
) -> ClassModel | None:
    """The model of a known class; None for any other object. Raises :class:`Unmodelled` for a
    known class used in a way its model does not cover.
    """
    for module, name in KNOWN_CLASSES:
        cls = loaded_class(module, name)
        if cls is None or not isinstance(tokenizer, cls):
            continue
        # CLIP's model reads the wrapper CLIP sets on its backend's decode (and checks it is that).
        problem = override(tokenizer, reference=cls, backend_decode_allowed=name == "CLIPTokenizer")
        if problem is not None:
            raise Unmodelled(problem)
        if name == "ByT5Tokenizer":
            return byt5_model(tokenizer, size=size, skip=skip, cleanup=cleanup)
        if name == "Wav2Vec2CTCTokenizer":
            return ctc_tokenizer_model(tokenizer, size=size, skip=skip, cleanup=cleanup)
        if name == "WhisperTokenizer":
            return whisper_model(tokenizer, skip=skip, cleanup=cleanup, max_byte_run=max_byte_run)
        if name == "MarianTokenizer":
            return marian_model(tokenizer, size=size, skip=skip, cleanup=cleanup)
        return clip_model(tokenizer, skip=skip, cleanup=cleanup, max_byte_run=max_byte_run)
    return None
