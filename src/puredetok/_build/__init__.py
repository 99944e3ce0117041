"""What builds: a codec from a tokenizer object, read once, its model checked against its decode.

It reads the tokenizer (its ``tokenizers`` backend and decoder configuration, or the tables of a
``transformers`` class that decodes in Python, of mistral-common's objects, of a
``tiktoken.Encoding``), compiles the decoders' models of :mod:`puredetok._core` over the
vocabulary, holds the model to ``tokenizer.decode`` before the codec claims exactness, and builds
the generic fallback (which calls the tokenizer's own ``decode``) where no exact model exists. It
never imports ``tokenizers`` nor ``transformers`` at the top: an object of theirs exists only once
they are imported (``tests/package/test_core_alone.py``).

This package's ``__all__`` is the face the layers above use.
"""

from __future__ import annotations

__all__ = [
    "MAX_VOCAB",
    "TokenizerLike",
    "backend_of",
    "codec_for",
    "mistral_tokenizer_of",
    "read_vocabulary",
    "reference_decode",
    "resolved_cleanup",
    "with_max_byte_run",
]

from puredetok._build.build import (
    MAX_VOCAB,
    codec_for,
    read_vocabulary,
    reference_decode,
    resolved_cleanup,
    with_max_byte_run,
)
from puredetok._build.protocols import TokenizerLike
from puredetok._build.pyclasses.mistral import mistral_tokenizer_of
from puredetok._build.reading import backend_of
