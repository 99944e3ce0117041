"""The token trace format (JSON lines) that ``puredetok replay`` reads: an optional header
(``tokenizer``, ``options``), then one event per line (``uid``, ``tokens``; ``prompt`` and
``options`` on a request's first event; ``finished`` or ``abort``), as docs/trace.md shows.

An id is read as the line gives it: one the tokenizer does not have is an error of its request,
which :class:`~puredetok_audit.replay._replay.Replayer` skips and names, not of the line.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import attrs
import msgspec

from puredetok.errors import PuredetokError
from puredetok.serving._messages import SamplingParams, Uid


class TraceError(PuredetokError, ValueError):
    """A trace line that is not a valid event (the message names the line, :attr:`line`)."""

    def __init__(self, line: int, why: str) -> None:
        super().__init__(f"line {line}: {why}")
        self.line = line
        self.why = why
        """What is wrong with the line (the message without its number)."""


class _Header(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    tokenizer: str | None = None
    options: dict[str, Any] = {}


class _Event(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    uid: Uid
    tokens: tuple[Any, ...] = ()
    prompt: tuple[Any, ...] | None = None
    options: dict[str, Any] | None = None
    finished: bool = False
    abort: bool = False


@attrs.frozen
class TraceHeader:
    """The optional first line: which tokenizer, and the default options of every request."""

    tokenizer: str | None = None
    options: SamplingParams = SamplingParams()


@attrs.frozen
class TraceEvent:
    """One line: new tokens of a request, and whether it finished or was aborted."""

    line: int
    """Its line number in the trace."""
    uid: Uid
    tokens: tuple[Any, ...] = ()
    """The ids, as the line gives them (in a bad trace, some may be no ids at all: see the module)."""
    prompt: tuple[Any, ...] | None = None
    """The prompt ids (a request's first event only), as the line gives them."""
    options: SamplingParams | None = None
    """The request's own options (its first event only), replacing the header's."""
    finished: bool = False
    abort: bool = False


_header = msgspec.json.Decoder(_Header)
_event = msgspec.json.Decoder(_Event)
_OPTION_NAMES = frozenset(SamplingParams.__struct_fields__)


def _params(options: dict[str, Any]) -> SamplingParams:
    """The options as :class:`SamplingParams`; an unknown name, a mistyped value or a stop rule no
    request may have is an error. ``max_tokens`` is another name of ``max_new_tokens``.
    """
    if "max_tokens" in options:
        if "max_new_tokens" in options:
            raise msgspec.ValidationError("give max_tokens or max_new_tokens, not both - at `$.options`")
        options = {**options, "max_new_tokens": options["max_tokens"]}
        del options["max_tokens"]
    unknown = sorted(set(options) - _OPTION_NAMES)
    if unknown:
        raise msgspec.ValidationError(f"Object contains unknown field `{unknown[0]}` - at `$.options`")
    return msgspec.convert(options, SamplingParams)  # its constraints: no stop rule a request may not have


def read_trace(lines: Iterable[str | bytes]) -> Iterator[TraceHeader | TraceEvent]:
    """The header (if the first line is one) and the events, in order.

    Raises :class:`TraceError` naming the line for anything that is not a valid event: bad JSON,
    a missing or mistyped field, an unknown field or option, a header anywhere but first, an
    event that both finishes and aborts, a prompt or options on a request's later event.
    (:func:`trace_items` gives such a line's error and goes on.)
    """
    for item in trace_items(lines):
        if isinstance(item, TraceError):
            raise item
        yield item


def trace_items(lines: Iterable[str | bytes]) -> Iterator[TraceHeader | TraceEvent | TraceError]:
    """As :func:`read_trace`, but a line that is not a valid event is given as its
    :class:`TraceError`, and the lines after it are still read.
    """
    first = True
    seen: set[Uid] = set()
    for number, line in enumerate(lines, 1):
        if number == 1:  # a trace written by a Windows tool starts with a byte-order mark
            line = (
                line.removeprefix(b"\xef\xbb\xbf") if isinstance(line, bytes) else line.removeprefix("\ufeff")
            )
        if not line.strip():
            continue
        try:
            text = line if isinstance(line, bytes) else line.encode()
            header_like = b'"uid"' not in text and (b'"tokenizer"' in text or b'"options"' in text)
            if header_like and not first:
                yield TraceError(number, "a header (tokenizer, options) belongs on the trace's first line")
                continue
            first, was_first = False, first
            if was_first and header_like:
                header = _header.decode(line)
                yield TraceHeader(header.tokenizer, _params(header.options))
                continue
            raw = _event.decode(line)
            options = None if raw.options is None else _params(raw.options)
        except (msgspec.ValidationError, msgspec.DecodeError) as error:
            yield TraceError(number, str(error))
            continue
        if raw.finished and raw.abort:
            yield TraceError(number, "an event cannot both finish and abort")
            continue
        if (raw.prompt is not None or raw.options is not None) and raw.uid in seen:
            yield TraceError(number, f"'prompt' and 'options' belong on request {raw.uid!r}'s first event")
            continue
        seen.add(raw.uid)
        yield TraceEvent(number, raw.uid, raw.tokens, raw.prompt, options, raw.finished, raw.abort)
