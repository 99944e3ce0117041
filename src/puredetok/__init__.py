"""puredetok: exact, pure-functional streaming detokenization for LLM serving.

The core is five functions over two frozen records::

    codec = codec_for(tokenizer)              # once per tokenizer and options
    state = start(codec, prompt_ids)          # once per request
    state, delta = step(state, token_id)      # per generated token (or feed(state, ids))
    tail = finish(state)                      # at the end

``"".join(deltas) + tail == tokenizer.decode(ids)``, and every delta is final as soon as it is
returned.

Stop conditions (stop strings, stop and EOS tokens, token limits) are a pure layer on top:
``open_stream``, ``advance``, ``advance_many``, ``close``, ``abort`` over a frozen ``Stream``
(see :mod:`puredetok.stops`).

A state (and a stream) is a value that travels without its codec: ``state.to_bytes()`` is a few
dozen bytes, ``DecodeState.from_bytes(codec, data)`` resumes it where the codec is, and a pickled
state unpickles as a ``SavedState`` to ``resume(codec)``.

``puredetok.__version__`` is the installed distribution's version.
"""

from __future__ import annotations

__all__ = [
    "Codec",
    "CodecMismatchError",
    "DecodeState",
    "FinishReason",
    "InvalidStateError",
    "InvalidTokenError",
    "PuredetokError",
    "SavedState",
    "SavedStream",
    "StopRules",
    "Stream",
    "StreamFinishedError",
    "TokenizerLike",
    "UnsupportedTokenizerError",
    "abort",
    "advance",
    "advance_many",
    "close",
    "codec_for",
    "feed",
    "finish",
    "open_stream",
    "start",
    "step",
]

from importlib import metadata as _metadata

from puredetok._build import TokenizerLike, codec_for
from puredetok._core import Codec, DecodeState, SavedState, feed, finish, start, step
from puredetok.errors import (
    CodecMismatchError,
    InvalidStateError,
    InvalidTokenError,
    PuredetokError,
    StreamFinishedError,
    UnsupportedTokenizerError,
)
from puredetok.stops import (
    FinishReason,
    SavedStream,
    StopRules,
    Stream,
    abort,
    advance,
    advance_many,
    close,
    open_stream,
)

for _public in (Codec, DecodeState, TokenizerLike):
    _public.__module__ = __name__  # a pickle names the public path, never the private module


def _version() -> str:
    try:
        return _metadata.version("puredetok")
    except _metadata.PackageNotFoundError:  # a source tree on the path that was never installed
        return "0+unknown"


__version__: str = _version()
"""The installed distribution's version (``pyproject.toml``'s, read from the package metadata):
``"0+unknown"`` where puredetok runs from a source tree that was never installed."""
