"""puredetok's own token traces (see ``docs/trace.md``): the engine audited is puredetok's
:class:`~puredetok.serving.detokenize_manager.DetokenizeManager` itself.

A trace records the ids a scheduler sent, not an engine's text: each request is replayed
through the manager, and the text it streamed is the text audited, against the exact text of
the ids the request consumed (up to the stop rule that ended it). An aborted request has no
final text and is skipped.
"""

from __future__ import annotations

__all__ = ["read_trace_requests"]

from collections.abc import Iterable, Iterator
from typing import Any

import attrs

from puredetok.audit.records import InputError, Item, Request, Skipped
from puredetok.core import Codec
from puredetok.replay.replay import Replayer, RequestReport
from puredetok.replay.trace import TraceError, TraceHeader, read_trace
from puredetok.serving.messages import SamplingParams
from puredetok.stops import advance, open_stream


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
    lines: Iterable[tuple[int, bytes]], tokenizer: Any, file: str, codecs: dict[Any, Codec] | None = None
) -> Iterator[Item]:
    """The requests of a trace, each as the manager streamed it, when it ends (``codecs``: shared
    with other replays of the same tokenizer, see :class:`~puredetok.replay.replay.Replayer`).
    """
    replayer: Replayer | None = None
    firsts: dict[Any, int] = {}
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
                    replayer = Replayer(tokenizer, item.options, codecs=codecs, whole=True)
                continue
            if replayer is None:
                replayer = Replayer(tokenizer, SamplingParams(), codecs=codecs, whole=True)
            firsts.setdefault(item.uid, number)
            replayer.event(attrs.evolve(item, line=number))
            yield from _ended(replayer, firsts, file)
    if replayer is not None:
        replayer.close_all()
        yield from _ended(replayer, firsts, file)


def _ended(replayer: Replayer, firsts: dict[Any, int], file: str) -> Iterator[Item]:
    for note in replayer.take_notes():
        number, _, message = note.partition(": ")
        yield InputError(file, int(number.removeprefix("line ")), message)
    for report in replayer.take_ended():
        line = firsts.pop(report.uid, 0)
        for error in report.errors:
            yield InputError(file, line, f"request {report.uid}: {error}")
        item = _request(replayer, report, line)
        yield attrs.evolve(item, file=file) if isinstance(item, Skipped) else item
