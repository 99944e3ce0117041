"""puredetok's own token traces (see ``docs/trace.md``): the engine audited is puredetok's
:class:`~puredetok.serving._detokenize_manager.DetokenizeManager` itself.

A trace records the ids a scheduler sent, not an engine's text: each request is replayed
through the manager, and the text it streamed is the text audited, against the exact text of
the ids the request consumed (up to the stop rule that ended it). An aborted request has no
final text and is skipped.

With an exact codec, a request is compared as it is replayed (:mod:`puredetok.audit._follow`:
the ids it consumes and the text the manager streams, neither kept; its stop strings are its
options'), so that memory does not grow with its length; with any other, the replay keeps its
ids and text and it is checked when it ends.
"""

from __future__ import annotations

__all__ = ["read_trace_requests"]

from collections.abc import Iterable, Iterator
from typing import Any

import attrs

from puredetok._core import ID_LIMIT
from puredetok.audit._compare import Auditor
from puredetok.audit._follow import Followed, Follower
from puredetok.audit._records import InputError, Item, Request, Skipped
from puredetok.replay._replay import Replayer, RequestReport
from puredetok.replay._trace import TraceError, TraceEvent, TraceHeader, read_trace
from puredetok.serving._codec_cache import CodecCache
from puredetok.serving._messages import SamplingParams, UserReply
from puredetok.stops import Stream, advance, open_stream


@attrs.define
class _Following:
    """A request compared as it is replayed: its comparison and its stop rules' stream."""

    follower: Follower
    stream: Stream
    size: int
    """Ids from this on are not valid (the manager skips them)."""


def _open(replayer: Replayer, report: RequestReport, auditor: Auditor) -> _Following | None:
    head = _head(report, 0)
    codec = auditor.codec(head)
    if report.reference is None or not codec.exact:
        return None  # the replay keeps its ids and text
    params = report.params
    follower = Follower(
        codec, report.prompt, params.stop, auditor.include_stop(head), auditor.options.context
    )
    stream = open_stream(report.codec, replayer.manager.rules(params), report.prompt)
    size = ID_LIMIT if report.codec.out_of_vocab == "ignore" else report.codec.vocab_size
    return _Following(follower, stream, size)


def _feed(following: _Following, event: TraceEvent, replies: list[UserReply]) -> None:
    consumed = []
    for token in event.tokens:
        if type(token) is int and 0 <= token < following.size and following.stream.finish_reason is None:
            following.stream, _ = advance(following.stream, token)
            consumed.append(token)
    following.follower.add(consumed, "".join(reply.incremental_output for reply in replies))


def _head(report: RequestReport, line: int) -> Request:
    matched = report.matched
    return Request(
        report.uid,
        line,
        (),
        (),
        "",
        report.finish_reason,
        matched if isinstance(matched, str) else None,
        type(matched) is int,
        report.params.skip_special_tokens,
        include_stop=report.params.include_stop_str_in_output,
    )


def _request(replayer: Replayer, report: RequestReport, line: int) -> Item:
    if report.finish_reason == "abort":
        return Skipped("", line, f"request {report.uid}: aborted, it has no final text")
    stream = open_stream(report.codec, replayer.manager.rules(report.params), report.prompt)
    consumed = 0
    while consumed < len(report.ids) and stream.finish_reason is None:
        stream, _ = advance(stream, report.ids[consumed])
        consumed += 1
    matched = report.matched
    return Request(
        report.uid,
        line,
        report.prompt,
        tuple(report.ids[:consumed]),
        report.text,
        report.finish_reason,
        matched if isinstance(matched, str) else None,
        type(matched) is int,
        report.params.skip_special_tokens,
        include_stop=report.params.include_stop_str_in_output,
    )


def read_trace_requests(
    lines: Iterable[tuple[int, bytes]],
    tokenizer: Any,
    file: str,
    codecs: CodecCache | None = None,
    auditor: Auditor | None = None,
) -> Iterator[Item | Followed]:
    """The requests of a trace, each as the manager streamed it, when it ends (``codecs``: shared
    with other replays of the same tokenizer, see :class:`~puredetok.replay._replay.Replayer`).
    With an ``auditor``, those it can be are compared as they are replayed (:class:`Followed`).
    """
    replayer: Replayer | None = None
    firsts: dict[Any, int] = {}
    following: dict[Any, _Following | None] = {}
    whole = auditor is None
    for number, line in lines:
        if not line.strip():
            continue
        try:
            parsed = list(read_trace([line]))
        except TraceError as error:
            yield InputError(file, number, str(error).removeprefix("line 1: "))
            continue
        for item in parsed:
            if isinstance(item, TraceHeader):
                if replayer is not None:
                    yield InputError(file, number, "a header belongs on the first line")
                else:
                    replayer = Replayer(tokenizer, item.options, codecs=codecs, whole=whole)
                continue
            if replayer is None:
                replayer = Replayer(tokenizer, SamplingParams(), codecs=codecs, whole=whole)
            firsts.setdefault(item.uid, number)
            opening = item.uid not in replayer.live
            replies = replayer.event(attrs.evolve(item, line=number))
            if auditor is not None and opening and replies:
                report = replayer.live.get(item.uid) or next(r for r in replayer.ended if r.uid == item.uid)
                following[item.uid] = _open(replayer, report, auditor)
            state = following.get(item.uid)
            if state is not None and replies:
                _feed(state, item, replies)
            yield from _ended(replayer, firsts, file, following)
    if replayer is not None:
        for reply in replayer.close_all():
            state = following.get(reply.uid)
            if state is not None:
                state.follower.add((), reply.incremental_output)
        yield from _ended(replayer, firsts, file, following)


def _ended(
    replayer: Replayer, firsts: dict[Any, int], file: str, following: dict[Any, _Following | None]
) -> Iterator[Item | Followed]:
    for note in replayer.take_notes():
        number, _, message = note.partition(": ")
        yield InputError(file, int(number.removeprefix("line ")), message)
    for report in replayer.take_ended():
        line = firsts.pop(report.uid, 0)
        for error in report.errors:
            yield InputError(file, line, f"request {report.uid}: {error}")
        state = following.pop(report.uid, None)
        if report.finish_reason == "abort":
            yield Skipped(file, line, f"request {report.uid}: aborted, it has no final text")
        elif state is not None:
            yield state.follower.end(_head(report, line))
        else:
            item = _request(replayer, report, line)
            yield attrs.evolve(item, file=file) if isinstance(item, Skipped) else item
