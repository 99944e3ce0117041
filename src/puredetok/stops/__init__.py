"""Stop conditions and finish reasons: a pure layer over the core (docs/stops.md).

::

    rules = StopRules(stop=["</answer>"], eos_token_ids=eos_token_ids(tokenizer), max_new_tokens=256)
    stream = open_stream(codec, rules, prompt_ids)     # once per request
    stream, delta = advance(stream, token_id)          # per token (or advance_many)
    stream, tail = close(stream)                       # when no more tokens will come
    stream.finish_reason                               # FinishReason("stop", "</answer>"), ...

Streaming and non-streaming give the same text, nothing after a stop is ever emitted, and only
the text that could still start a stop string is held back. See docs/stops.md.
"""

from __future__ import annotations

__all__ = [
    "FinishReason",
    "SavedStream",
    "StopRules",
    "Stream",
    "StreamFinishedError",
    "abort",
    "advance",
    "advance_each",
    "advance_many",
    "close",
    "open_like",
    "open_stream",
]

from puredetok.errors import StreamFinishedError
from puredetok.stops._rules import FinishReason, StopRules
from puredetok.stops._stream import (
    SavedStream,
    Stream,
    abort,
    advance,
    advance_each,
    advance_many,
    close,
    open_like,
    open_stream,
)

for _record in (FinishReason, SavedStream, StopRules, Stream):
    _record.__module__ = __name__  # a pickle names the public path, never the private module
