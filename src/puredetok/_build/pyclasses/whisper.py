"""``WhisperTokenizer``, read: its backend's byte-level chain, then the timestamp filter and, with
``skip_special_tokens``, the prompt rule (the stages are :mod:`puredetok._core.pyclasses.whisper`'s).
"""

from __future__ import annotations

from typing import Any

from puredetok._build.backend_model import backend_parts
from puredetok._build.compile import compile_chain
from puredetok._build.pyclasses.base import ClassModel
from puredetok._core.decoders.base import Stage
from puredetok._core.decoders.cleanup import cleanup_stages
from puredetok._core.decoders.fuse import GlueStage
from puredetok._core.pyclasses.whisper import TimestampStage, WhisperPrompt


def whisper_model(tokenizer: Any, *, skip: bool, cleanup: bool, max_byte_run: int | None) -> ClassModel:
    """The model of a ``WhisperTokenizer``'s default ``decode``."""
    parts = backend_parts(tokenizer.backend_tokenizer, skip, max_byte_run)
    tail: list[Stage] = cleanup_stages() if cleanup else [GlueStage()]
    tail.append(TimestampStage())
    chain: Any = compile_chain(parts.decoders, parts.tokens, tail)
    description = f"Whisper: {parts.names}" + (" + cleanup" if cleanup else "") + ", timestamps removed"
    if skip:
        previous = tokenizer.convert_tokens_to_ids("<|startofprev|>")
        if isinstance(previous, int):
            transcript = tokenizer.convert_tokens_to_ids("<|startoftranscript|>")
            chain = WhisperPrompt(chain, previous, transcript if isinstance(transcript, int) else None)
            description += ", the prompt before <|startoftranscript|> dropped"
    return ClassModel("whisper", description, chain, parts.tokens, fast_oracle=False)
