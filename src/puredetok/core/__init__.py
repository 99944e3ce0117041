"""The pure core: records, streaming functions, and the codec builder. No I/O, no globals."""

from __future__ import annotations

__all__ = [
    "Codec",
    "DecodeState",
    "TokenizerLike",
    "codec_for",
    "start",
    "step",
    "feed",
    "finish",
    "step_hold",
    "finish_hold",
    "continuation_text",
]

from puredetok.core.build import codec_for
from puredetok.core.codec import Codec, DecodeState
from puredetok.core.echo import continuation_text
from puredetok.core.protocols import TokenizerLike
from puredetok.core.stream import feed, finish, finish_hold, start, step, step_hold
