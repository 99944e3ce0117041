"""The pure core: records, streaming functions, and the codec builder. No I/O, no globals."""

from __future__ import annotations

__all__ = ["Codec", "DecodeState", "TokenizerLike", "codec_for", "start", "step", "feed", "finish"]

from puredetok.core.build import codec_for
from puredetok.core.codec import Codec, DecodeState
from puredetok.core.protocols import TokenizerLike
from puredetok.core.stream import feed, finish, start, step
