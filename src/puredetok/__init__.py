"""puredetok: exact, pure-functional streaming detokenization for LLM serving.

The core is five functions over two frozen records::

    codec = codec_for(tokenizer)              # once per tokenizer and options
    state = start(codec, prompt_ids)          # once per request
    state, delta = step(state, token_id)      # per generated token (or feed(state, ids))
    tail = finish(state)                      # at the end

``"".join(deltas) + tail == tokenizer.decode(ids)``, and every delta is final as soon as it is
returned.
"""

from __future__ import annotations

__all__ = [
    "Codec",
    "DecodeState",
    "InvalidTokenError",
    "TokenizerLike",
    "UnsupportedTokenizerError",
    "codec_for",
    "feed",
    "finish",
    "start",
    "step",
]

from puredetok.core import Codec, DecodeState, TokenizerLike, codec_for, feed, finish, start, step
from puredetok.errors import InvalidTokenError, UnsupportedTokenizerError
