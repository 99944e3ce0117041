"""Drop-ins for ``transformers``' ``TextStreamer`` and ``TextIteratorStreamer``, built on the core.

``model.generate(..., streamer=streamer)`` calls ``streamer.put(input_ids)`` once with the prompt
(shape ``(1, prompt_length)``), then ``streamer.put(next_tokens)`` after every step (shape ``(1,)``;
``(1, n)`` when assisted decoding accepts several tokens at once), then ``streamer.end()``. These
classes take the same calls and the same options, but every character is sent as soon as it is
certain, and the text sent adds up exactly to ``tokenizer.decode`` of the ids (of the prompt and
the output, or of the output alone with ``skip_prompt=True``). ``transformers``' own streamers wait
for a space after symbols, emoji and punctuation and can send text that a later token changes.

``put`` accepts anything with ``.tolist()`` (``torch`` tensors, NumPy arrays) and plain lists; it
never imports ``torch``. Batch size 1 only, as in ``transformers``.
"""

from __future__ import annotations

__all__ = ["TextStreamer", "TextIteratorStreamer", "SupportsToList", "TokenBatch"]

from collections.abc import Iterator, Sequence
from queue import Queue
from typing import Any, Protocol, TypeAlias

from puredetok.core import Codec, TokenizerLike, codec_for, feed, finish, start


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


class TextStreamer:
    """Prints text to stdout as ``generate`` produces it; a drop-in for ``transformers.TextStreamer``.

    ``skip_prompt`` leaves the prompt out; ``skip_special_tokens`` and
    ``clean_up_tokenization_spaces`` are the decode options (the only two it accepts: they are
    what the codec models). Building the codec reads the whole vocabulary once (up to a second):
    to start many streamers for one tokenizer, build it once with :func:`puredetok.codec_for` and
    pass ``codec=`` instead of the options. Override :meth:`on_finalized_text` to send the text
    elsewhere. After :meth:`end` the streamer is ready for the next ``generate`` call.
    """

    def __init__(
        self,
        tokenizer: TokenizerLike,
        skip_prompt: bool = False,
        *,
        codec: Codec | None = None,
        skip_special_tokens: bool | None = None,
        clean_up_tokenization_spaces: bool | None = None,
    ) -> None:
        if codec is not None and (
            skip_special_tokens is not None or clean_up_tokenization_spaces is not None
        ):
            raise ValueError("give the decode options or a codec built with them, not both")
        self.tokenizer = tokenizer
        self.skip_prompt = skip_prompt
        self.decode_kwargs: dict[str, bool] = {}
        """The decode options, as ``transformers``' streamers keep them."""
        if skip_special_tokens is not None:
            self.decode_kwargs["skip_special_tokens"] = skip_special_tokens
        if clean_up_tokenization_spaces is not None:
            self.decode_kwargs["clean_up_tokenization_spaces"] = clean_up_tokenization_spaces
        self.codec = codec or codec_for(
            tokenizer,
            skip_special_tokens=bool(skip_special_tokens),
            clean_up_tokenization_spaces=clean_up_tokenization_spaces,
        )
        """The codec the stream decodes with."""
        self.state = start(self.codec)
        """Where the current stream stands."""
        self.next_tokens_are_prompt = True
        """Whether the next ``put`` carries the prompt (it does after construction and ``end``)."""

    def put(self, value: TokenBatch) -> None:
        """Take the next ids (the prompt first) and pass the text that became certain to
        :meth:`on_finalized_text` (``""`` when nothing did, as ``transformers`` does).

        Raises ``ValueError`` for a batch of more than one sequence, and
        :class:`~puredetok.InvalidTokenError` for an id outside the vocabulary (the stream is
        unchanged and can go on).
        """
        ids = _ids_of(value)
        if self.skip_prompt and self.next_tokens_are_prompt:
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
    forever) bounds each wait, after which iteration raises ``queue.Empty``.
    """

    def __init__(
        self,
        tokenizer: TokenizerLike,
        skip_prompt: bool = False,
        timeout: float | None = None,
        *,
        codec: Codec | None = None,
        skip_special_tokens: bool | None = None,
        clean_up_tokenization_spaces: bool | None = None,
    ) -> None:
        super().__init__(
            tokenizer,
            skip_prompt,
            codec=codec,
            skip_special_tokens=skip_special_tokens,
            clean_up_tokenization_spaces=clean_up_tokenization_spaces,
        )
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
