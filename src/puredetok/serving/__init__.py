"""Serving: the batched managers, their request options and messages, EOS ids, tokenizer loading.

- :class:`DetokenizeManager` streams many requests' text, batch by batch, with the stop layer's
  rules per request (:class:`SamplingParams`); :class:`TokenizeManager` turns prompts and chats
  into ids (:class:`TokenizeResult`, or a :class:`TokenizeError` naming the request).
- The messages a worker exchanges with the API server and the scheduler are frozen msgspec
  Structs whose annotations are their wire schema (docs/worker.md): into a worker
  :class:`TokenizeMsg`, :class:`DetokenizeMsg` (the first with its :class:`Opening`),
  :class:`AbortMsg`, :class:`HealthCheckMsg`; out to the scheduler :class:`UserMsg`,
  :class:`AbortBackendMsg`; out to the API server :class:`UserReply`, :class:`HealthReply`,
  :class:`ReadyMsg`; batched as :class:`Batch`, :class:`DetokenizeBatch`, :class:`ReplyBatch`
  (:data:`TO_BACKEND` and :data:`TO_FRONTEND`: the kinds each side reads).
- :func:`load_tokenizer` loads a tokenizer by name or folder (:class:`TokenizerLoadError` if it
  cannot), :func:`eos_token_ids` reads the ids that end its generations.
"""

from __future__ import annotations

__all__ = [
    "PROTOCOL_VERSION",
    "TO_BACKEND",
    "TO_FRONTEND",
    "AbortBackendMsg",
    "AbortMsg",
    "Batch",
    "DetokenizeBatch",
    "DetokenizeManager",
    "DetokenizeMsg",
    "HealthCheckMsg",
    "HealthReply",
    "LoadedTokenizer",
    "Opening",
    "ReadyMsg",
    "ReplyBatch",
    "SamplingParams",
    "TokenizeError",
    "TokenizeManager",
    "TokenizeMsg",
    "TokenizeResult",
    "TokenizerLoadError",
    "UserMsg",
    "UserReply",
    "eos_token_ids",
    "load_tokenizer",
]

from puredetok.serving._detokenize_manager import DetokenizeManager
from puredetok.serving._eos import eos_token_ids
from puredetok.serving._loading import (
    LoadedTokenizer,
    TokenizerLoadError,
    load_tokenizer,
)
from puredetok.serving._messages import (
    PROTOCOL_VERSION,
    TO_BACKEND,
    TO_FRONTEND,
    AbortBackendMsg,
    AbortMsg,
    Batch,
    DetokenizeBatch,
    DetokenizeMsg,
    HealthCheckMsg,
    HealthReply,
    Opening,
    ReadyMsg,
    ReplyBatch,
    SamplingParams,
    TokenizeMsg,
    UserMsg,
    UserReply,
)
from puredetok.serving._tokenize_manager import TokenizeError, TokenizeManager, TokenizeResult

# The messages (msgspec Structs) keep their module: msgspec and typing read a Struct's string
# annotations in the module its __module__ names. The wire never names a module.
for _public in (
    DetokenizeManager,
    LoadedTokenizer,
    TokenizeError,
    TokenizeManager,
    TokenizeResult,
    TokenizerLoadError,
):
    _public.__module__ = __name__  # a pickle names the public path, never the private module
