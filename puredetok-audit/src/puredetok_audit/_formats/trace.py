"""puredetok's own token traces (see ``docs/trace.md``): the engine audited is puredetok's
:class:`~puredetok.serving._detokenize_manager.DetokenizeManager` itself.

A trace records the ids a scheduler sent, not an engine's text: each request is replayed
through the manager, and the text it streamed is the text audited, against the exact text of
the ids the request consumed (up to the stop rule that ended it). An aborted request has no
final text and is skipped.

With an exact codec, a request is compared as it is replayed (:mod:`puredetok_audit._follow`:
the ids it consumes and the text the manager streams, neither kept; its stop strings are its
options'), so that memory does not grow with its length; with any other, the replay keeps its
ids and text and it is checked when it ends.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import attrs

from puredetok.serving._codec_cache import CodecCache
from puredetok.serving._messages import SamplingParams, UserReply
from puredetok_audit._compare import Auditor
from puredetok_audit._follow import Followed, Follower
from puredetok_audit._records import NOT_PASSED, InputError, Item, Request, Skipped
from puredetok_audit.replay._replay import Reference, Replayer, RequestReport, id_limit
from puredetok_audit.replay._trace import TraceError, TraceEvent, TraceHeader, read_trace


@attrs.define
class _Following:
    """A request compared as it is replayed: its comparison, and the replay's reference of it."""

    follower: Follower
    reference: Reference
    size: int
    """Ids from this on are not valid (the manager skips them)."""
    consumed: int = 0
    """How many of its ids the reference had consumed (up to the stop rule that ended it)."""


def _open(report: RequestReport, auditor: Auditor) -> _Following | None:
    head = _head(report, 0)
    codec = auditor.codec(head)
    if report.reference is None or not codec.exact:
        return None  # the replay keeps its ids and text
    params = report.params
    follower = Follower(
        codec, report.prompt, params.stop, auditor.include_stop(head), auditor.options.context
    )
    return _Following(follower, report.reference, id_limit(report.codec))


def _feed(following: _Following, event: TraceEvent, replies: list[UserReply]) -> None:
    valid = [token for token in event.tokens if type(token) is int and 0 <= token < following.size]
    consumed = following.reference.consumed
    text = "".join(reply.incremental_output for reply in replies)
    following.follower.add(valid[: consumed - following.consumed], text)
    following.consumed = consumed


def _head(report: RequestReport, line: int) -> Request:
    matched, spaces = report.matched, report.params.spaces_between_special_tokens
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
        spaces_between_special_tokens=NOT_PASSED if spaces is None else spaces,  # as the manager did
    )


def read_trace_requests(
    lines: Iterable[tuple[int, bytes]],
    tokenizer: Any,
    file: str,
    codecs: CodecCache | None = None,
    auditor: Auditor | None = None,
) -> Iterator[Item | Followed]:
    """The requests of a trace, each as the manager streamed it, when it ends (``codecs``: shared
    with other replays of the same tokenizer, see :class:`~puredetok_audit.replay._replay.Replayer`).
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
                following[item.uid] = _open(report, auditor)
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
        else:  # the ids it consumed, up to the stop rule that ended it
            ids = tuple(report.ids[: report.decoded])
            yield attrs.evolve(
                _head(report, line), prompt_ids=report.prompt, output_ids=ids, text=report.text
            )
