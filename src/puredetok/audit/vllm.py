"""vLLM's OpenAI-compatible responses with ``return_token_ids``: whole ones and streamed chunks.

A completion (``"object": "text_completion"``) carries each choice's ``text``, ``token_ids`` and
``prompt_token_ids`` (older servers put ``prompt_token_ids`` beside ``choices``); a chat
completion (``"chat.completion"``) carries ``prompt_token_ids`` beside ``choices`` and each
choice's ``message.content`` and ``token_ids``. ``finish_reason`` is ``"stop"`` or ``"length"``;
``stop_reason`` is the stop string or stop token id that ended it (None for EOS). A streamed
response is server-sent events, ``data: {chunk}`` lines ending in ``data: [DONE]``: each chunk's
choices carry the new ``text`` (chat: ``delta.content``) and the new ``token_ids``, and the
first chunk the prompt's ids.

A chat response that vLLM's reasoning parser (``--reasoning-parser``) or tool parser
(``--tool-call-parser``) split carries ``message.reasoning_content`` (``message.reasoning`` in
newer servers), ``message.content`` and ``message.tool_calls`` (``[{"id", "type": "function",
"function": {"name", "arguments"}}]``); streamed, the same fields of ``delta``, a tool call's
name in its first delta (``delta.tool_calls[].index`` and ``function.name``). It is read as its
pieces (``Request.parts``; streamed, each chunk's in order, ``Chunk.parts``), which the audit
joins again (:mod:`puredetok.audit.parsers`).
"""

from __future__ import annotations

__all__ = ["read_responses", "read_stream", "response_requests"]

from collections.abc import Iterable, Iterator
from typing import Any

import attrs
import msgspec

from puredetok.audit.records import Chunk, InputError, Item, Request


class _Message(msgspec.Struct):
    content: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    tool_calls: list[Any] | None = None


class _Choice(msgspec.Struct):
    index: int = 0
    text: str | None = None
    message: _Message | None = None
    delta: _Message | None = None
    token_ids: list[int] | None = None
    prompt_token_ids: list[int] | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None


class _Response(msgspec.Struct):
    id: str | int | None = None
    object: str | None = None
    choices: list[_Choice] | None = None
    prompt_token_ids: list[int] | None = None


_decoder = msgspec.json.Decoder(_Response)
_array = msgspec.json.Decoder(list[_Response])


def _tool_names(calls: list[Any] | None) -> list[str]:
    """The function names of tool calls (a streamed call's name is in its first delta only)."""
    names = []
    for call in calls or ():
        function = call.get("function") if isinstance(call, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        if isinstance(name, str) and name:
            names.append(name)
    return names


def _choice_parts(choice: _Choice) -> tuple[str | None, tuple[tuple[str, str], ...] | None]:
    """The choice's text (for a chat choice, its content), and its pieces if a parser split it."""
    part = choice.message if choice.message is not None else choice.delta
    if part is None:
        return choice.text, None
    parts: list[tuple[str, str]] = []
    reasoning = part.reasoning_content if part.reasoning_content is not None else part.reasoning
    if reasoning is not None:  # even "": the parser split the text (an empty reasoning)
        parts.append(("reasoning", reasoning))
    split = reasoning is not None or bool(part.tool_calls)
    if part.content and split:
        parts.append(("content", part.content))
    parts += [("tool", name) for name in _tool_names(part.tool_calls)]
    return part.content or "", tuple(parts) if split else None


def _ending(choice: _Choice) -> tuple[str | None, bool]:
    """The stop string, and whether a stop token ended the choice (vLLM does not decode it)."""
    if choice.finish_reason != "stop":
        return None, False
    if isinstance(choice.stop_reason, str):
        return choice.stop_reason, False
    return None, True


def _name(response: _Response, choice: _Choice, line: int, many: bool) -> str | int:
    base: str | int = response.id if response.id is not None else line
    return f"{base}/{choice.index}" if many else base


def response_requests(response: _Response, file: str, line: int) -> Iterator[Item]:
    """The requests of one whole response (one per choice)."""
    choices = response.choices
    if not choices:
        yield InputError(file, line, "a response without choices")
        return
    for choice in choices:
        name = _name(response, choice, line, len(choices) > 1)
        if choice.token_ids is None:
            yield InputError(
                file, line, f"response {name}: a choice without token_ids (ask with return_token_ids)"
            )
            continue
        text, parts = _choice_parts(choice)
        prompt = choice.prompt_token_ids if choice.prompt_token_ids is not None else response.prompt_token_ids
        stop, stop_token = _ending(choice)
        yield Request(
            name,
            line,
            tuple(prompt or ()),
            tuple(choice.token_ids),
            text or "",
            choice.finish_reason,
            stop,
            stop_token,
            parts=parts,
        )


def read_responses(lines: Iterable[tuple[int, bytes]], file: str) -> Iterator[Item]:
    """Whole responses, one JSON object per line (blank lines skipped)."""
    for number, line in lines:
        if not line.strip():
            continue
        try:
            response = _decoder.decode(line)
        except (msgspec.ValidationError, msgspec.DecodeError) as error:
            yield InputError(file, number, f"not a vLLM response: {error}")
            continue
        yield from response_requests(response, file, number)


def read_array(data: bytes, file: str) -> Iterator[Item]:
    """Whole responses in one JSON array (each one's place is its item number, from 1)."""
    try:
        responses = _array.decode(data)
    except (msgspec.ValidationError, msgspec.DecodeError) as error:
        yield InputError(file, 1, f"not a JSON array of vLLM responses: {error}")
        return
    for number, response in enumerate(responses, 1):
        yield from response_requests(response, file, number)


@attrs.define
class _Live:
    """A streamed choice still running."""

    name: str | int
    line: int
    prompt: tuple[int, ...]
    ids: list[int] = attrs.field(factory=list)
    chunks: list[Chunk] = attrs.field(factory=list)
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    failed: bool = False
    """An error was reported for it: it is not audited."""
    split: bool = False
    """A chunk carried reasoning or a tool call: a parser split the stream."""
    tools: set[int] = attrs.field(factory=set)
    """The indexes of the tool calls whose names were seen."""


def _ended(live: _Live) -> Request:
    choice = _Choice(finish_reason=live.finish_reason, stop_reason=live.stop_reason)
    stop, stop_token = _ending(choice)
    text = "".join(chunk.text for chunk in live.chunks)
    if not live.split:
        chunks = tuple(attrs.evolve(chunk, parts=None) for chunk in live.chunks)
        return Request(
            live.name, live.line, live.prompt, tuple(live.ids), text, live.finish_reason, stop,
            stop_token, chunks=chunks,
        )  # fmt: skip
    parts = tuple(part for chunk in live.chunks for part in chunk.parts or ())
    return Request(
        live.name, live.line, live.prompt, tuple(live.ids), text, live.finish_reason, stop, stop_token,
        chunks=tuple(live.chunks), parts=parts,
    )  # fmt: skip


def _carries(delta: _Message | None) -> bool:
    """A delta carries reasoning or a tool call."""
    return delta is not None and bool(delta.reasoning_content or delta.reasoning or delta.tool_calls)


def _delta_parts(request: _Live, choice: _Choice, content: str) -> tuple[tuple[str, str], ...]:
    """A chat chunk's pieces in the order of its text: reasoning, content, the names of the tool
    calls that begin in it.
    """
    delta = choice.delta
    if delta is None:
        return (("content", content),) if content else ()
    parts: list[tuple[str, str]] = []
    reasoning = delta.reasoning_content if delta.reasoning_content is not None else delta.reasoning
    if reasoning is not None:  # even "": the parser took this delta's text (markers alone)
        request.split = True
        parts.append(("reasoning", reasoning))
    if content:
        parts.append(("content", content))
    for position, call in enumerate(delta.tool_calls or ()):
        request.split = True
        index = call.get("index", position) if isinstance(call, dict) else position
        index = index if type(index) is int else position
        for name in _tool_names([call]):
            if index not in request.tools:
                request.tools.add(index)
                parts.append(("tool", name))
    return tuple(parts)


def read_stream(lines: Iterable[tuple[int, bytes]], file: str) -> Iterator[Item]:
    """Streamed responses: server-sent events (``data:`` lines; other fields and comments are
    skipped) or one chunk per line. A choice ends with its ``finish_reason``; one still running at
    ``[DONE]`` or at the end of the input ends there.
    """
    live: dict[tuple[str | int, int], _Live] = {}
    for number, raw in lines:
        line = raw.strip()
        if not line or line.startswith(b":") or line.startswith(b"event:") or line.startswith(b"id:"):
            continue
        if line.startswith(b"data:"):
            line = line[5:].strip()
        if line == b"[DONE]":
            for key in list(live):
                yield from _close(live.pop(key), file)
            continue
        try:
            chunk = _decoder.decode(line)
        except (msgspec.ValidationError, msgspec.DecodeError) as error:
            yield InputError(file, number, f"not a vLLM stream chunk: {error}")
            continue
        for choice in chunk.choices or ():
            key = (chunk.id if chunk.id is not None else "", choice.index)
            request = live.get(key)
            if request is None:
                base: str | int = chunk.id if chunk.id is not None else number
                name = f"{base}/{choice.index}" if choice.index else base
                prompt = choice.prompt_token_ids or chunk.prompt_token_ids or ()
                request = live[key] = _Live(name, number, tuple(prompt))
            text, _ = _choice_parts(choice)
            parts = _delta_parts(request, choice, text or "")
            if choice.token_ids is None:
                if (text or _carries(choice.delta)) and not request.failed:
                    yield InputError(
                        file, number, f"response {request.name}: a chunk with text but no token_ids"
                    )
                    request.failed = True
            else:
                request.ids.extend(choice.token_ids)
            request.chunks.append(Chunk(text or "", len(choice.token_ids or ()), parts))
            if choice.finish_reason is not None:
                request.finish_reason, request.stop_reason = choice.finish_reason, choice.stop_reason
                yield from _close(live.pop(key), file)
    for request in live.values():
        yield from _close(request, file)


def _close(request: _Live, file: str) -> Iterator[Item]:
    if not request.failed:
        yield _ended(request)
