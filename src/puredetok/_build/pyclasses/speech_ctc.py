"""``Wav2Vec2CTCTokenizer`` (and the CTC speech tokenizers built on it), as its ``decode`` works
by default: special tokens other than the word delimiter are dropped when skipped; runs of equal
tokens count once; the pad token (CTC's blank) vanishes and the word delimiter becomes
``replace_word_delimiter_char``; the text is joined, stripped of whitespace at both ends, and
lower-cased with ``do_lower_case``.

Held back: trailing whitespace (until text follows it); the grouping needs only the previous token.
"""

from __future__ import annotations

from typing import Any

from puredetok._build.compile import compile_chain
from puredetok._build.pyclasses.base import ClassModel, Given
from puredetok._core.decoders.base import Stage, Unmodelled
from puredetok._core.decoders.cleanup import cleanup_stages
from puredetok._core.decoders.ctc import GroupStage
from puredetok._core.decoders.whitespace import StripStage
from puredetok._core.pyclasses.speech_ctc import LowerStage

_SIGMA = "\u03a3"


def _token(tokenizer: Any, token_id: int) -> str:
    """``Wav2Vec2CTCTokenizer.convert_ids_to_tokens`` for one id in a list."""
    if token_id in tokenizer.decoder:
        return str(tokenizer.decoder[token_id])
    added = tokenizer.added_tokens_decoder
    if token_id in added:
        return str(added[token_id].content)
    return str(tokenizer.unk_token)


def ctc_tokenizer_model(tokenizer: Any, *, size: int, skip: bool, cleanup: bool) -> ClassModel:
    """The model of a ``Wav2Vec2CTCTokenizer``."""
    pad = tokenizer.pad_token
    delimiter = tokenizer.word_delimiter_token
    replacement = tokenizer.replace_word_delimiter_char
    lower = bool(tokenizer.do_lower_case)
    special = set(tokenizer.all_special_tokens)
    values: list[tuple[str, str] | None] = []
    for token_id in range(size):
        token = _token(tokenizer, token_id)
        if skip and token in special and token != delimiter:
            values.append(None)
            continue
        text = "" if token == pad else (replacement if token == delimiter else token)
        if lower and _SIGMA in text:
            raise Unmodelled("lower-casing a capital sigma depends on the letter after it")
        values.append((token, text))
    tail: list[Stage] = [StripStage()]
    if lower:
        tail.append(LowerStage())
    if cleanup:
        tail.extend(cleanup_stages())
    chain = compile_chain([Given(GroupStage())], values, tail)
    description = "CTC tokenizer: grouping, pad dropped, delimiter to a space, strip" + (
        ", lower case" if lower else ""
    )
    return ClassModel(
        "ctc", description + (" + cleanup" if cleanup else ""), chain, values, fast_oracle=False
    )
