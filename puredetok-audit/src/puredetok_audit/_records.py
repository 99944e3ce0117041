"""What every reader yields: one request as the engine logged it, or a bad line named by its place."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Final, Literal

import attrs

NOT_PASSED: Final = "not passed"
"""A record's :attr:`Request.spaces_between_special_tokens` when its engine passed no such option
to ``tokenizer.decode``, which then did what it does by default (a trace's request without it)."""


@attrs.frozen
class Chunk:
    """One streamed chunk of a response: the text it carried and how many ids came with it."""

    text: str
    """The new text (or, in a stream of cumulative texts, the whole text so far)."""
    ids: int
    parts: tuple[tuple[str, str], ...] | None = None
    """In a stream that a reasoning or tool parser split: the chunk's pieces, as
    :attr:`Request.parts` (``text`` is then its content alone)."""


@attrs.frozen
class Request:
    """One request: its prompt and generated ids, the text the engine returned for them, and how
    the engine says it ended.
    """

    id: str | int
    """The response's own id (with ``/N`` for choice N of several), or the row index of a table."""
    line: int
    """The line (or row) where the request's record starts, from 1."""
    prompt_ids: tuple[int, ...]
    output_ids: tuple[int, ...]
    text: str
    """The text the engine returned (for a stream: its chunks joined)."""
    finish_reason: str | None = None
    stop: str | None = None
    """The stop string the engine says ended the request (its text is cut before it)."""
    stop_token: bool = False
    """The last id ended the request as a stop or EOS token (engines do not decode it)."""
    skip_special_tokens: bool | None = None
    """The record's own decode option, if it carries one."""
    chunks: tuple[Chunk, ...] | None = None
    """A streamed response's chunks, in order."""
    include_stop: bool | None = None
    """The record's own ``include_stop_str_in_output``, if it carries one."""
    cumulative: bool = False
    """Each chunk's text is the whole text so far (SGLang's default stream), not the new text."""
    either: bool = False
    """The chunks' texts can be read as cumulative or as new (an SGLang stream of new ids): the
    audit takes the other reading too when this one differs."""
    parts: tuple[tuple[str, str], ...] | None = None
    """A chat response that a reasoning or tool parser split: its pieces in the order the parser
    takes them from the text, each ``(kind, text)`` with kind ``"reasoning"``, ``"content"`` or
    ``"tool"`` (a tool call's function name); ``text`` is then its content alone. A stream's
    are its chunks' pieces one after the other."""
    counts: tuple[int, int] | None = None
    """A stream compared as it came (:mod:`puredetok_audit._follow`), whose ids and text were not
    kept (``output_ids`` and ``text`` are then empty, ``chunks`` None): how many output ids and
    chunks it had."""
    spaces_between_special_tokens: bool | Literal["not passed"] | None = None
    """The record's own decode option, if it carries one (:data:`NOT_PASSED`: it says its engine
    passed none)."""

    @property
    def token_count(self) -> int:
        """How many output ids it had."""
        return len(self.output_ids) if self.counts is None else self.counts[0]

    @property
    def chunk_count(self) -> int | None:
        """How many chunks it had (None: not a stream)."""
        if self.counts is not None:
            return self.counts[1]
        return None if self.chunks is None else len(self.chunks)


@attrs.frozen
class InputError:
    """A record that cannot be audited: where it is and why (the rest of the file still is)."""

    file: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.message}"


@attrs.frozen
class Skipped:
    """A well-formed record whose text cannot be compared with its ids (say, a reasoning parser
    split it): counted, not an error.
    """

    file: str
    line: int
    reason: str


Item = Request | InputError | Skipped
"""What a reader yields."""


@attrs.frozen
class Columns:
    """The column (or key) names of a rollout table."""

    prompt_ids: str = "prompt_ids"
    response_ids: str = "response_ids"
    text: str = "response_text"
    id: str | None = None
    """A column that names each row (default: the row index)."""


def token_ids(value: Any, what: str) -> tuple[int, ...]:
    """``value`` as ids; raises ValueError naming ``what`` if it is not a list of integers."""
    if value is None:
        raise ValueError(f"{what} is null")
    if not isinstance(value, list | tuple) or not all(type(i) is int for i in value):
        raise ValueError(f"{what} is not a list of integer token ids")
    return tuple(value)


def request_id(value: Any, default: str | int) -> str | int:
    """A record's id as a string or integer (``default`` if it has none)."""
    if isinstance(value, str) or (type(value) is int):
        return value
    return default


def failed(
    live: dict[Any, Any], file: str, line: int, error: Any, dead: set[Any] | None = None
) -> Iterator[Skipped]:
    """An error the engine answered: it ends every request still streaming (moved from ``live``
    to ``dead``, whose later chunks, interleaved with others', are passed over until
    ``[DONE]``), each skipped, or is one skipped request where none is.
    """
    for _ in range(max(len(live), 1)):
        yield Skipped(file, line, f"the engine answered an error: {error}")
    (dead if dead is not None else set()).update(live)
    live.clear()


Lines = Iterable[tuple[int, bytes]]
"""A file's lines with their numbers (from 1)."""


def stream_data(lines: Lines) -> Iterator[tuple[int, bytes]]:
    """A streamed response's chunks with their line numbers: the ``data:`` lines of server-sent
    events (other fields, comments and blank lines skipped) or one chunk per line; ``[DONE]`` as
    it is.
    """
    for number, raw in lines:
        line = raw.strip()
        if line and not line.startswith((b":", b"event:", b"id:", b"retry:")):
            yield number, line[5:].strip() if line.startswith(b"data:") else line
