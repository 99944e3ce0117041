"""User code as the README and the docs write it, with the tokenizers users load: the README's
first call (``codec_for(AutoTokenizer.from_pretrained(...))``), the stop layer, a
``tokenizers.Tokenizer``, mistral-common's objects and ``tiktoken``, the managers given a
``transformers`` tokenizer, the streamer and the conformance kit.

test_typing_user_code.py type-checks it with ``mypy --strict`` outside the repository (a clean
configuration, ``transformers`` and the others followed, puredetok installed with its
``py.typed``), and runs :func:`readme_first_call` and :func:`readme_stops` on the embedded tokenizer.
"""

from __future__ import annotations

from collections.abc import Callable

import tiktoken
import tokenizers
from mistral_common.tokens.tokenizers.mistral import MistralTokenizer
from mistral_common.tokens.tokenizers.sentencepiece import SentencePieceTokenizer
from mistral_common.tokens.tokenizers.tekken import Tekkenizer
from transformers import AutoTokenizer, PreTrainedTokenizerBase

from puredetok import (
    Codec,
    FinishReason,
    StopRules,
    TokenizerLike,
    advance,
    advance_many,
    close,
    codec_for,
    finish,
    open_stream,
    start,
    step,
)
from puredetok.serving._detokenize_manager import DetokenizeManager
from puredetok.serving._eos import eos_token_ids
from puredetok.serving._messages import DetokenizeMsg, Opening, SamplingParams
from puredetok.serving._tokenize_manager import TokenizeManager
from puredetok.streamer import AsyncTextIteratorStreamer, TextIteratorStreamer, TextStreamer
from puredetok.testing import check_ids, core_detokenizer, reference_for
from puredetok.testing.strategies import Vocabulary


def readme_first_call(
    path: str, prompt_ids: list[int], generated: list[int], send: Callable[[str], None]
) -> None:
    """The README's first example, as it is written there."""
    tokenizer = AutoTokenizer.from_pretrained(path)  # any transformers tokenizer, offline
    codec = codec_for(tokenizer, skip_special_tokens=True)  # once per tokenizer and options
    state = start(codec, prompt_ids)  # once per request
    for token_id in generated:  # per token: pure, O(1)
        state, delta = step(state, token_id)
        send(delta)  # final as soon as it is returned
    send(finish(state))  # the held tail, at the end


def readme_stops(path: str, prompt_ids: list[int], generated: list[int]) -> tuple[str, FinishReason | None]:
    """The README's stop conditions."""
    tokenizer = AutoTokenizer.from_pretrained(path)
    codec = codec_for(tokenizer)
    rules = StopRules(stop=["\n\nUser:"], eos_token_ids=eos_token_ids(tokenizer), max_new_tokens=256)
    stream = open_stream(codec, rules, prompt_ids)
    text = ""
    for token_id in generated[:1]:
        stream, delta = advance(stream, token_id)
        text += delta
    stream, delta = advance_many(stream, generated[1:])
    stream, tail = close(stream)
    return text + delta + tail, stream.finish_reason


def every_kind_of_tokenizer(path: str, tekken: str, spm: str) -> list[Codec]:
    """``codec_for`` takes every kind of tokenizer object it reads."""
    loaded = AutoTokenizer.from_pretrained(path)
    assert isinstance(loaded, PreTrainedTokenizerBase)
    return [
        codec_for(loaded.backend_tokenizer),
        codec_for(tokenizers.Tokenizer.from_file(f"{path}/tokenizer.json")),
        codec_for(MistralTokenizer.from_file(tekken), skip_special_tokens=True),
        codec_for(Tekkenizer.from_file(tekken)),
        codec_for(SentencePieceTokenizer(spm)),
        codec_for(tiktoken.get_encoding("cl100k_base")),
    ]


def managers(path: str) -> tuple[DetokenizeManager, TokenizeManager]:
    """The managers, given a transformers tokenizer."""
    tokenizer = AutoTokenizer.from_pretrained(path)
    detokenize = DetokenizeManager(tokenizer)
    detokenize.handle([DetokenizeMsg("a", (1, 2), True, Opening([], SamplingParams(max_tokens=4)))])
    return detokenize, TokenizeManager(tokenizer)


def streamers(
    path: str, codec: Codec
) -> tuple[TextStreamer, TextIteratorStreamer, AsyncTextIteratorStreamer]:
    """The streamers, given a transformers tokenizer."""
    tokenizer = AutoTokenizer.from_pretrained(path)
    return (
        TextStreamer(tokenizer, skip_prompt=True),
        TextIteratorStreamer(tokenizer, codec=codec, timeout=1.0),
        AsyncTextIteratorStreamer(tokenizer, skip_special_tokens=True),
    )


def conformance(path: str, ids: list[int]) -> bool:
    """The conformance kit, given a transformers tokenizer."""
    tokenizer = AutoTokenizer.from_pretrained(path)
    reference = reference_for(tokenizer, skip_special_tokens=True)
    Vocabulary.of(tokenizer)
    return check_ids(core_detokenizer(reference.codec), reference, ids) is None


def as_tokenizer_like(path: str) -> TokenizerLike:
    """A loaded tokenizer is a TokenizerLike (for code that stores one)."""
    tokenizer: TokenizerLike = AutoTokenizer.from_pretrained(path)
    return tokenizer
