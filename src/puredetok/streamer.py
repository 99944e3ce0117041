"""Drop-ins for ``transformers``' ``TextStreamer``, ``TextIteratorStreamer`` and
``AsyncTextIteratorStreamer``, built on the core.

``model.generate(..., streamer=streamer)`` calls ``streamer.put(input_ids)`` once with the prompt
(shape ``(1, prompt_length)``), then ``streamer.put(next_tokens)`` after every step (shape ``(1,)``;
``(1, n)`` when assisted decoding accepts several tokens at once), then ``streamer.end()``. These
classes subclass ``transformers``' ``BaseStreamer`` and take the same calls and the same options, but
every piece of text is sent as soon as it is certain (a byte-fallback run, which a later byte can
still turn into U+FFFD, is held until it ends: see ``max_byte_run``), and the text sent adds up
exactly to ``tokenizer.decode`` of the ids: of the prompt and the output, or with
``skip_prompt=True`` of the output as it continues the prompt (contract C: ``decode(prompt +
output)`` after the longest prefix it shares with ``decode(prompt)``). ``transformers``' own
streamers wait for a space after symbols, emoji and punctuation and can send text that a later
token changes.

``put`` accepts anything with ``.tolist()`` (``torch`` tensors, NumPy arrays) and plain lists; it
never imports ``torch``. Batch size 1 only, as in ``transformers``.
"""

from __future__ import annotations

__all__ = [
    "TextStreamer",
    "TextIteratorStreamer",
    "AsyncTextIteratorStreamer",
    "SupportsToList",
    "TokenBatch",
    "DECODE_OPTIONS",
]

import asyncio
from collections.abc import Iterator, Sequence
from queue import Queue
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

from puredetok._build import TokenizerLike, codec_for
from puredetok._core import Codec, OutOfVocab, feed, finish, start

if TYPE_CHECKING:

    class BaseStreamer:
        """``transformers.generation.streamers.BaseStreamer``, as the type checker sees it (mypy
        does not read ``transformers``).
        """

        def put(self, value: Any) -> None:
            """Take the next ids."""

        def end(self) -> None:
            """The generation has ended."""

else:
    from transformers.generation.streamers import BaseStreamer

DECODE_OPTIONS = ("skip_special_tokens", "clean_up_tokenization_spaces", "max_byte_run", "out_of_vocab")
"""The decode options the streamers take (the codec's options): any other is a ``TypeError``."""


class SupportsToList(Protocol):
    """A tensor or array: ``torch.Tensor`` and ``numpy.ndarray`` both have ``tolist``."""

    def tolist(self) -> Any:
        """The values as (nested) Python lists, or a Python scalar for a 0-d array."""
        ...


TokenBatch: TypeAlias = SupportsToList | Sequence[int] | Sequence[Sequence[int]]
"""What ``put`` receives: ids of shape ``(n,)`` or ``(1, n)``."""


def _ids_of(value: TokenBatch) -> list[int]:
    """The ids of one ``put``, as ``transformers``' streamers read them (batch size 1)."""
    data: Any = value.tolist() if hasattr(value, "tolist") else value
    if isinstance(data, int):
        return [data]
    if not isinstance(data, Sequence) or isinstance(data, str | bytes):
        raise TypeError(f"put() takes token ids (a tensor, an array or a list), not {type(value).__name__}")
    rows = list(data)
    if rows and isinstance(rows[0], Sequence):
        if len(rows) > 1:
            raise ValueError("TextStreamer only supports batch size 1")
        return list(rows[0])
    return rows


class TextStreamer(BaseStreamer):
    """Prints text to stdout as ``generate`` produces it; a drop-in for ``transformers.TextStreamer``.

    ``skip_prompt`` leaves the prompt out (the output continues it, contract C). The decode options
    are those of :func:`puredetok.codec_for`: ``skip_special_tokens``,
    ``clean_up_tokenization_spaces``, ``max_byte_run`` (cap a held byte-fallback run) and
    ``out_of_vocab`` (``"ignore"``: ids past the vocabulary decode to nothing, as in
    ``tokenizer.decode``); any other keyword is a ``TypeError`` naming it. Building the codec reads
    the whole vocabulary once (up to a second): to start many streamers for one tokenizer, build it
    once with :func:`puredetok.codec_for` and pass ``codec=`` instead of the options. Override
    :meth:`on_finalized_text` to send the text elsewhere. After :meth:`end` the streamer is ready
    for the next ``generate`` call.
    """

    def __init__(
        self,
        tokenizer: TokenizerLike,
        skip_prompt: bool = False,
        *,
        codec: Codec | None = None,
        skip_special_tokens: bool | None = None,
        clean_up_tokenization_spaces: bool | None = None,
        max_byte_run: int | None = None,
        out_of_vocab: OutOfVocab | None = None,
        **other: Any,
    ) -> None:
        if other:
            names = ", ".join(sorted(other))
            raise TypeError(
                f"{type(self).__name__} does not take the decode option(s) {names}: it takes "
                f"{', '.join(DECODE_OPTIONS)} (the options puredetok's codec models)"
            )
        options: dict[str, Any] = {
            "skip_special_tokens": skip_special_tokens,
            "clean_up_tokenization_spaces": clean_up_tokenization_spaces,
            "max_byte_run": max_byte_run,
            "out_of_vocab": out_of_vocab,
        }
        given = {name: value for name, value in options.items() if value is not None}
        if codec is not None and given:
            raise ValueError("give the decode options or a codec built with them, not both")
        self.tokenizer = tokenizer
        self.skip_prompt = skip_prompt
        self.decode_kwargs: dict[str, Any] = given
        """The decode options, as ``transformers``' streamers keep them."""
        self.codec = codec or codec_for(
            tokenizer,
            skip_special_tokens=bool(skip_special_tokens),
            clean_up_tokenization_spaces=clean_up_tokenization_spaces,
            max_byte_run=max_byte_run,
            out_of_vocab=out_of_vocab or "raise",
        )
        """The codec the stream decodes with."""
        self.state = start(self.codec)
        """Where the current stream stands."""
        self.next_tokens_are_prompt = True
        """Whether the next ``put`` carries the prompt (it does after construction and ``end``)."""

    def put(self, value: TokenBatch) -> None:
        """Take the next ids (the prompt first) and pass the text that became certain to
        :meth:`on_finalized_text` (``""`` when nothing did, as ``transformers`` does). With
        ``skip_prompt``, the prompt primes the stream and sends nothing.

        Raises ``ValueError`` for a batch of more than one sequence, and
        :class:`~puredetok.InvalidTokenError` for an id outside the vocabulary (the stream is
        unchanged and can go on).
        """
        ids = _ids_of(value)
        if self.skip_prompt and self.next_tokens_are_prompt:
            self.state = start(self.codec, ids)
            self.next_tokens_are_prompt = False
            return
        self.state, text = feed(self.state, ids)
        self.on_finalized_text(text)

    def end(self) -> None:
        """Flush the text still held back, signal the end, and get ready for the next stream."""
        text = finish(self.state)
        self.state = start(self.codec)
        self.next_tokens_are_prompt = True
        self.on_finalized_text(text, stream_end=True)

    def on_finalized_text(self, text: str, stream_end: bool = False) -> None:
        """Print the new text to stdout (a newline after the last)."""
        print(text, flush=True, end="" if not stream_end else None)


class TextIteratorStreamer(TextStreamer):
    """Queues the text for another thread to iterate; a drop-in for
    ``transformers.TextIteratorStreamer``.

    Run ``generate`` in a thread and iterate over the streamer; ``timeout`` (seconds, None: wait
    forever) bounds each wait, after which iteration raises ``queue.Empty``. The other arguments
    are :class:`TextStreamer`'s.
    """

    def __init__(
        self,
        tokenizer: TokenizerLike,
        skip_prompt: bool = False,
        timeout: float | None = None,
        *,
        codec: Codec | None = None,
        **decode_options: Any,
    ) -> None:
        super().__init__(tokenizer, skip_prompt, codec=codec, **decode_options)
        self.text_queue: Queue[str | None] = Queue()
        """The text waiting to be read; ``stop_signal`` ends a stream."""
        self.stop_signal: None = None
        """What ends iteration."""
        self.timeout = timeout
        """Seconds to wait for the next text (None: wait forever)."""

    def on_finalized_text(self, text: str, stream_end: bool = False) -> None:
        """Queue the new text; at the end, queue the stop signal too."""
        self.text_queue.put(text, timeout=self.timeout)
        if stream_end:
            self.text_queue.put(self.stop_signal, timeout=self.timeout)

    def __iter__(self) -> Iterator[str]:
        return self

    def __next__(self) -> str:
        value = self.text_queue.get(timeout=self.timeout)
        if value is None:
            raise StopIteration
        return value


class AsyncTextIteratorStreamer(TextStreamer):
    """Queues the text for a coroutine to iterate; a drop-in for
    ``transformers.AsyncTextIteratorStreamer``.

    Build it inside a coroutine (it keeps the running event loop), run ``generate`` in a thread,
    and ``async for`` over the streamer: ``generate``'s thread hands each text to the loop
    (``call_soon_threadsafe``). ``timeout`` (seconds, None: wait forever) bounds each wait, after
    which iteration raises ``TimeoutError``. The other arguments are :class:`TextStreamer`'s.
    """

    def __init__(
        self,
        tokenizer: TokenizerLike,
        skip_prompt: bool = False,
        timeout: float | None = None,
        *,
        codec: Codec | None = None,
        **decode_options: Any,
    ) -> None:
        super().__init__(tokenizer, skip_prompt, codec=codec, **decode_options)
        self.text_queue: asyncio.Queue[str | None] = asyncio.Queue()
        """The text waiting to be read; ``stop_signal`` ends a stream."""
        self.stop_signal: None = None
        """What ends iteration."""
        self.timeout = timeout
        """Seconds to wait for the next text (None: wait forever)."""
        self.loop = asyncio.get_running_loop()
        """The event loop the streamer was built in (a ``RuntimeError`` outside a coroutine)."""

    def on_finalized_text(self, text: str, stream_end: bool = False) -> None:
        """Hand the new text to the loop's queue (from any thread); at the end, the stop signal too."""
        self.loop.call_soon_threadsafe(self.text_queue.put_nowait, text)
        if stream_end:
            self.loop.call_soon_threadsafe(self.text_queue.put_nowait, self.stop_signal)

    def __aiter__(self) -> AsyncTextIteratorStreamer:
        return self

    async def __anext__(self) -> str:
        async with asyncio.timeout(self.timeout):
            value = await self.text_queue.get()
        if value is None:
            raise StopAsyncIteration
        return value
