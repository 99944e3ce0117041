"""A small program that uses puredetok's public API as another project would.

The suite type-checks it with ``mypy --strict`` (mypy.ini covers tests/): the ``assert_type`` calls
pin the public types, so a change to a public signature fails the type check. test_public_api.py
runs it too.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import assert_type

import tokenizers
from hypothesis import strategies as st

from puredetok import (
    Codec,
    DecodeState,
    InvalidTokenError,
    TokenizerLike,
    feed,
    finish,
    start,
    step,
)
from puredetok.serving._messages import DetokenizeMsg, Opening, SamplingParams, TokenizeMsg, UserMsg
from puredetok.streamer import TextIteratorStreamer, TextStreamer
from puredetok.testing import (
    Detokenizer,
    DetokenizerFactory,
    Guarantee,
    Reference,
    Violation,
    check_ids,
    core_detokenizer,
    from_step_function,
    reference_for,
    strategies,
)


class Words:
    """A tokenizer of one's own: anything with ``decode`` and ``get_vocab`` is a TokenizerLike."""

    def __init__(self, words: Sequence[str]) -> None:
        self.words = list(words)

    def decode(
        self,
        ids: list[int],
        /,
        *,
        skip_special_tokens: bool = False,
        clean_up_tokenization_spaces: bool | None = None,
    ) -> str:
        """The words joined with spaces."""
        return " ".join(self.words[i] for i in ids)

    def get_vocab(self) -> dict[str, int]:
        """Word to id."""
        return {word: index for index, word in enumerate(self.words)}

    def __len__(self) -> int:
        return len(self.words)


def as_tokenizer(tokenizer: tokenizers.Tokenizer | Words) -> TokenizerLike:
    """Both a ``tokenizers.Tokenizer`` and a class of one's own satisfy the protocol."""
    return tokenizer


def stream(codec: Codec, ids: Sequence[int]) -> list[str]:
    """The deltas of ``ids``, then the final flush."""
    state = start(codec)
    assert_type(state, DecodeState)
    deltas: list[str] = []
    for token_id in ids:
        state, delta = step(state, token_id)
        assert_type(delta, str)
        deltas.append(delta)
    state, rest = feed(state, [])
    return [*deltas, rest + finish(state)]


def stream_or_report(codec: Codec, ids: Sequence[int]) -> tuple[str, str | None]:
    """Stream ``ids``, stopping at the first invalid id with its message."""
    state, text = start(codec), ""
    for token_id in ids:
        try:
            state, delta = step(state, token_id)
        except InvalidTokenError as error:
            assert_type(error.vocab_size, int)
            assert_type(error.position, int | None)
            return text + finish(state), str(error)
        text += delta
    return text + finish(state), None


class Lazy:
    """A detokenizer that sends everything at the end (exact, but not eager)."""

    def __init__(self, reference: Reference) -> None:
        self.reference = reference
        self.ids: list[int] = []

    def step(self, token_id: int) -> str:
        """Keep the id, send nothing."""
        self.ids.append(token_id)
        return ""

    def finish(self) -> str:
        """Send it all."""
        return self.reference.decode(self.ids)


def conformance(tokenizer: tokenizers.Tokenizer, ids: Sequence[int]) -> list[Violation | None]:
    """Check a few detokenizers on one id sequence."""
    reference = reference_for(tokenizer)
    assert_type(reference.codec, Codec)

    def lazy() -> Detokenizer:
        return Lazy(reference)

    per_token: DetokenizerFactory = from_step_function(lambda ids_so_far, new_id: reference.decode([new_id]))
    results = [
        check_ids(core_detokenizer(reference.codec), reference, ids),
        check_ids(lazy, reference, ids, guarantees={Guarantee.EAGER}),
        check_ids(per_token, reference, ids),
    ]
    return results


def id_strategy(tokenizer: tokenizers.Tokenizer) -> st.SearchStrategy[list[int]]:
    """The kit's default id strategy for a tokenizer."""
    return strategies.token_ids(strategies.Vocabulary.of(tokenizer))


def printing_streamer(tokenizer: TokenizerLike, codec: Codec) -> TextStreamer:
    """A streamer for ``model.generate(streamer=...)`` that shares a prebuilt codec."""
    return TextStreamer(tokenizer, skip_prompt=True, codec=codec)


def iterate(streamer: TextIteratorStreamer) -> Iterator[str]:
    """The text pieces of an iterator streamer, as another thread reads them."""
    for text in streamer:
        assert_type(text, str)
        yield text


def messages_from_lists(stops: list[str], ids: list[int]) -> tuple[DetokenizeMsg, TokenizeMsg, UserMsg]:
    """Messages built from lists, as user code holds them: they take lists and store tuples."""
    params = SamplingParams(stop=["a", *stops], stop_token_ids=[2], max_tokens=8)
    assert_type(params.stop, Sequence[str])
    first = DetokenizeMsg("u", [5, 6], open=Opening(prompt_ids=ids, params=params))
    return (
        first,
        TokenizeMsg("u", messages=[{"role": "user", "content": "hi"}], params=params),
        UserMsg("u", ids),
    )
