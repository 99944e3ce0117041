"""What steps: the records, start / step / feed / finish, and the decoders' stages and per-token maps.

Pure and small in what it needs: attrs and the standard library, nothing else (a process without
``tokenizers`` or ``transformers`` unpickles an exact codec built elsewhere and streams with it;
``tests/package/test_core_alone.py`` checks it; the generic fallback's codec holds its tokenizer). No I/O,
no mutation, no globals, no logging. What builds a codec from a tokenizer object is the room above,
:mod:`puredetok._build`.

This package's ``__all__`` is the face the layers above use (the stop layer, serving, the adapters,
the command line, the testing kit): they import from here, never from one of its modules, nor a
private name (``tests/package/test_layers.py`` checks it). It holds more than the public face
(:mod:`puredetok`): the fast path a layer with its own record takes (:func:`steady`,
:func:`step_hold`, ...), the saved-bytes helpers, the character classes.
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
    "admit_token",
    "byte_alphabet",
    "byte_token_value",
    "check_hold",
    "check_token",
    "class_of",
    "continuation_text",
    "feed",
    "feed_hold",
    "finish",
    "finish_hold",
    "pack",
    "start",
    "steady",
    "step",
    "step_hold",
    "unpack",
]

from puredetok._core.classes import ADDED, ALL_CLASSES, class_of
from puredetok._core.codec import ID_LIMIT, OUT_OF_VOCAB, Codec, DecodeState, OutOfVocab, SavedState
from puredetok._core.decoders.byte_fallback import byte_token_value
from puredetok._core.decoders.byte_level import byte_alphabet
from puredetok._core.echo import continuation_text
from puredetok._core.saving import check_hold, pack, unpack
from puredetok._core.stream import (
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
