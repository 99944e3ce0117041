"""``ByT5Tokenizer``: ids 3-258 are the bytes 0-255, the rest are added tokens (pad, eos, unk and
the sentinels); the bytes of all tokens are decoded together as UTF-8 with invalid bytes dropped
(``errors="ignore"``). Streaming holds at most an incomplete UTF-8 sequence (3 bytes).
"""

from __future__ import annotations

from typing import Any

from puredetok._build.compile import compile_chain
from puredetok._core.decoders.base import Unmodelled
from puredetok._core.decoders.byte_level import Utf8Stage
from puredetok._core.decoders.cleanup import cleanup_stages
from puredetok._build.pyclasses.base import ClassModel, Given, special_ids


def _token_bytes(token: str, added: dict[str, int]) -> bytes:
    """``ByT5Tokenizer.convert_tokens_to_string`` for one token."""
    if token in added:
        return token.encode("utf-8")
    if len(token) != 1 or ord(token) > 255:
        raise Unmodelled(f"ByT5 token {token!r} is neither an added token nor a byte")
    return bytes([ord(token)])


def byt5_model(tokenizer: Any, *, size: int, skip: bool, cleanup: bool) -> ClassModel:
    """The model of a ``ByT5Tokenizer``."""
    added = dict(tokenizer.added_tokens_encoder)
    dropped = special_ids(tokenizer) if skip else frozenset()
    values: list[bytes | None] = []
    for token_id in range(size):
        if token_id in dropped:
            values.append(None)
            continue
        values.append(_token_bytes(str(tokenizer.convert_ids_to_tokens(token_id)), added))
    tail = cleanup_stages() if cleanup else ()
    chain = compile_chain([Given(Utf8Stage("ignore"))], values, tail)
    description = "ByT5 bytes (invalid UTF-8 dropped)" + (" + cleanup" if cleanup else "")
    return ClassModel("byt5", description, chain, values, fast_oracle=False)
