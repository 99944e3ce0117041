"""vLLM's OpenAI-compatible responses with ``return_token_ids``: whole ones and streamed chunks.

Completions and chat completions (their fields: docs/audit.md's table of formats); a chat
response that a reasoning or tool parser split is read as its pieces (``Request.parts``), which
the audit joins again (:mod:`puredetok_audit._parsers`). A stream says how a choice ended only
in its last chunk: :func:`read_stream` reads ahead for each choice's ending, so that it can be
compared as it streams (:mod:`puredetok_audit._follow`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any

import attrs
import msgspec

from puredetok_audit._compare import Auditor
from puredetok_audit._follow import Followed, Follower
from puredetok_audit._records import Chunk, InputError, Item, Lines, Request, failed, stream_data


class _Message(msgspec.Struct):
    content: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    tool_calls: list[Any] | None = None


class _Logprobs(msgspec.Struct):
    tokens: list[Any] | None = None
    """A completion's, one per output token."""
    content: list[Any] | None = None
    """A chat completion's, ``{"token", ...}`` per output token."""

    def ids(self) -> list[int] | None:
        """The tokens' ids, if each is a ``return_tokens_as_token_ids`` placeholder ``"token_id:N"``."""
        tokens = self.tokens if self.tokens is not None else self.content
        names: list[Any] = [
            token.get("token") if isinstance(token, dict) else token for token in tokens or ()
        ]
        if tokens is None or not all(
            isinstance(n, str) and n[:9] == "token_id:" and n[9:].isdigit() for n in names
        ):
            return None
        return [int(name[9:]) for name in names]


class _Choice(msgspec.Struct):
    index: int = 0
    text: str | None = None
    message: _Message | None = None
    delta: _Message | None = None
    token_ids: list[int] | None = None
    prompt_token_ids: list[int] | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    logprobs: _Logprobs | None = None

    @property
    def ids(self) -> list[int] | None:
        """Its ``token_ids``, else those its logprobs name (asked with ``return_tokens_as_token_ids``)."""
        return self.token_ids if self.token_ids is not None or self.logprobs is None else self.logprobs.ids()


class _Response(msgspec.Struct):
    id: str | int | None = None
    object: str | None = None
    choices: list[_Choice] | None = None
    prompt_token_ids: list[int] | None = None
    error: Any = None
    message: Any = None
    """An error's (older servers: ``{"object": "error", "message"}``; newer: ``{"error": {...}}``)."""

    @property
    def failure(self) -> Any:
        """The error the engine answered instead (None: a response)."""
        return self.error if self.error is not None or self.object != "error" else self.message


_decoder = msgspec.json.Decoder(_Response | list[_Response])
_ASK = "return_token_ids, or logprobs with return_tokens_as_token_ids"
_chunk = msgspec.json.Decoder(_Response)


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


def _head(name: str | int, line: int, finish_reason: str | None, stop_reason: int | str | None) -> Request:
    """A choice's record but its ids and text: how it ended (vLLM does not decode a stop token)."""
    stopped = finish_reason == "stop"
    stop = stop_reason if stopped and isinstance(stop_reason, str) else None
    return Request(name, line, (), (), "", finish_reason, stop, stopped and stop is None)


def _name(response: _Response, choice: _Choice, line: int, many: bool) -> str | int:
    base: str | int = response.id if response.id is not None else line
    return f"{base}/{choice.index}" if many else base


def response_requests(response: _Response, file: str, line: int) -> Iterator[Item]:
    """The requests of one whole response (one per choice)."""
    choices = response.choices
    if not choices:
        failure = response.failure
        yield from (
            [InputError(file, line, "a response without choices")]
            if failure is None
            else failed({}, file, line, failure)
        )
        return
    for choice in choices:
        name = _name(response, choice, line, len(choices) > 1)
        ids = choice.ids
        if ids is None:
            yield InputError(file, line, f"response {name}: a choice without token_ids (ask with {_ASK})")
            continue
        text, parts = _choice_parts(choice)
        prompt = choice.prompt_token_ids if choice.prompt_token_ids is not None else response.prompt_token_ids
        head = _head(name, line, choice.finish_reason, choice.stop_reason)
        yield attrs.evolve(
            head, prompt_ids=tuple(prompt or ()), output_ids=tuple(ids), text=text or "", parts=parts
        )


def read_responses(lines: Iterable[tuple[int, bytes]], file: str) -> Iterator[Item]:
    """Whole responses, one JSON object per line (blank lines skipped)."""
    for number, line in lines:
        if not line.strip():
            continue
        try:
            decoded = _decoder.decode(line)
        except (msgspec.ValidationError, msgspec.DecodeError) as error:
            yield InputError(file, number, f"not a vLLM response: {error}")
            continue
        for response in decoded if isinstance(decoded, list) else [decoded]:  # a line may hold a list
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
    follower: Follower | None = None
    """Its comparison as it streams (its ids and chunks are then not kept)."""
    ends: int = 0
    """With a follower: the line where the look ahead saw it end."""


def _ended(live: _Live) -> Request:
    chunks = tuple(live.chunks if live.split else (attrs.evolve(chunk, parts=None) for chunk in live.chunks))
    return attrs.evolve(
        _head(live.name, live.line, live.finish_reason, live.stop_reason),
        prompt_ids=live.prompt,
        output_ids=tuple(live.ids),
        text="".join(chunk.text for chunk in live.chunks),
        chunks=chunks,
        parts=tuple(part for chunk in live.chunks for part in chunk.parts or ()) if live.split else None,
    )


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


class _SplitDelta(msgspec.Struct):
    reasoning_content: Any = None
    reasoning: Any = None
    tool_calls: Any = None


class _EndChoice(msgspec.Struct):
    index: int = 0
    delta: _SplitDelta | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None


class _EndChunk(msgspec.Struct):
    id: str | int | None = None
    choices: list[_EndChoice] | None = None


_ends = msgspec.json.Decoder(_EndChunk)

_Key = tuple[str | int, int]
_Fate = tuple[int, str | None, int | str | None, bool]
"""How the look ahead saw a choice end: the line, ``finish_reason``, ``stop_reason``, split."""

_END_OF_INPUT = 1 << 62


def _look_ahead(lines: Iterable[tuple[int, bytes]]) -> dict[_Key, deque[_Fate]]:
    """Each choice's ending, in the order of the lines (see the module)."""
    fates: dict[_Key, deque[_Fate]] = {}
    live: dict[_Key, list[Any]] = {}

    def close(key: _Key, line: int, reason: str | None, stop: int | str | None) -> None:
        fates.setdefault(key, deque()).append((line, reason, stop, live.pop(key)[0]))

    for number, line in stream_data(lines):
        if line == b"[DONE]":
            for key in list(live):
                close(key, number, None, None)
            continue
        try:
            chunk = _ends.decode(line)
        except (msgspec.ValidationError, msgspec.DecodeError):
            continue
        for choice in chunk.choices or ():
            key = (chunk.id if chunk.id is not None else "", choice.index)
            state = live.setdefault(key, [False])
            delta = choice.delta
            if delta is not None and (
                delta.reasoning_content is not None or delta.reasoning is not None or delta.tool_calls
            ):
                state[0] = True
            if choice.finish_reason is not None:
                close(key, number, choice.finish_reason, choice.stop_reason)
    for key in list(live):
        close(key, _END_OF_INPUT, None, None)
    return fates


def _follow(
    request: _Live, fates: dict[_Key, deque[_Fate]], key: _Key, number: int, auditor: Auditor
) -> None:
    """Compare the choice as it streams, if the look ahead saw how it ends and it is not split."""
    queue = fates.get(key)
    while queue and queue[0][0] < number:
        queue.popleft()
    if not queue or queue[0][3]:
        return
    line, reason, stop_reason, _ = queue[0]
    head = _head(request.name, request.line, reason, stop_reason)
    codec = auditor.codec(head)
    if not codec.exact:
        return
    request.ends = line
    include, context = auditor.include_stop(head), auditor.options.context
    request.follower = Follower.opened(codec, request.prompt, (head.stop or "",), include, context)


def read_stream(
    lines: Lines, file: str, auditor: Auditor | None = None, again: Lines | None = None
) -> Iterator[Item | Followed]:
    """Streamed responses: server-sent events (``data:`` lines; other fields and comments are
    skipped) or one chunk per line. A choice ends with its ``finish_reason``; one still running at
    ``[DONE]`` or at the end of the input ends there. With an ``auditor`` and ``again`` (the same
    lines a second time), ``lines`` are read ahead for the choices' endings and the choices that
    can be are compared as they stream (:class:`Followed`).
    """
    fates: dict[_Key, deque[_Fate]] | None = None
    if auditor is not None and again is not None:
        fates = _look_ahead(lines)
        lines = again
    live: dict[_Key, _Live] = {}
    many = {key[0] for key in fates or () if key[1]}  # the responses of several choices
    dead: set[_Key] = set()
    for number, line in stream_data(lines):
        if line == b"[DONE]":
            for key in list(live):
                yield from _close(live.pop(key), file, number)
            dead.clear()
            continue
        try:
            chunk = _chunk.decode(line)
        except (msgspec.ValidationError, msgspec.DecodeError) as error:
            yield InputError(file, number, f"not a vLLM stream chunk: {error}")
            continue
        if chunk.failure is not None:  # the server then sends [DONE]
            yield from failed(live, file, number, chunk.failure, dead)
            continue
        for choice in chunk.choices or ():
            key = (chunk.id if chunk.id is not None else "", choice.index)
            if key in dead:
                continue
            request = live.get(key)
            if request is None:
                name = _name(chunk, choice, number, bool(choice.index) or key[0] in many)
                prompt = choice.prompt_token_ids or chunk.prompt_token_ids or ()
                request = live[key] = _Live(name, number, tuple(prompt))
                if fates is not None and auditor is not None:
                    _follow(request, fates, key, number, auditor)
            text, _ = _choice_parts(choice)
            parts = _delta_parts(request, choice, text or "")
            ids = choice.ids
            if ids is None:
                if (text or _carries(choice.delta)) and not request.failed:
                    yield InputError(
                        file, number, f"response {request.name}: a chunk with text but no token_ids"
                    )
                    request.failed = True
            if request.follower is not None:
                if not request.failed:
                    request.follower.add(ids or (), text or "")
            else:
                request.ids.extend(ids or ())
                request.chunks.append(Chunk(text or "", len(ids or ()), parts))
            if choice.finish_reason is not None:
                request.finish_reason, request.stop_reason = choice.finish_reason, choice.stop_reason
                yield from _close(live.pop(key), file, number)
    for request in live.values():
        yield from _close(request, file, _END_OF_INPUT)


def _close(request: _Live, file: str, number: int) -> Iterator[Item | Followed]:
    if request.failed:
        return
    follower = request.follower
    if follower is None:
        yield _ended(request)
        return
    if number != request.ends:
        yield InputError(
            file, request.line, f"response {request.name}: its end was not where a first reading saw it"
        )
        return
    yield follower.end(_head(request.name, request.line, request.finish_reason, request.stop_reason))
