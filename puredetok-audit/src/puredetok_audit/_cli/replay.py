"""``puredetok replay TRACE``: stream a token trace through the manager and check every request."""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import sys
import time
from collections.abc import Iterable, Iterator
from typing import IO, Any

import attrs
from tqdm import tqdm

from puredetok.cli._loaded import Loaded, load, loaded
from puredetok.cli._options import add_tokenizer_option
from puredetok.serving._loading import LoadedTokenizer
from puredetok.serving._messages import SamplingParams, UserReply
from puredetok_audit._files import Decompressed, compression_of
from puredetok_audit._files.text import binary
from puredetok_audit.replay._replay import CHECKS, MAX_LISTED, Replayer, ReplaySummary, RequestReport
from puredetok_audit.replay._trace import TraceError, TraceEvent, TraceHeader, trace_items

NAME = "replay"
HELP = (
    "replay a token trace (JSON lines), print each request's text, and check G1/G2/G4 per request "
    "(exit 0 all passed, 1 a check failed, 2 bad input)"
)
TOKENIZER_NOTE = (
    "Tokenizer: --tokenizer PATH if given, else the one the trace's header names, else the embedded "
    "Qwen3 (byte-level BPE); the summary says which one it loaded."
)

PROGRESS_AFTER = 0.5
"""Seconds a replay runs before its progress bar appears."""
PROGRESS_INTERVAL = 0.1
"""Seconds between two redraws of the bar at least."""
PROGRESS_EVERY = 256
"""Events between two updates of the bar's event count."""


def configure(parser: argparse.ArgumentParser) -> None:
    """Declare the arguments."""
    parser.add_argument(
        "trace",
        help="the trace file (JSON lines, plain or compressed: gzip, bzip2, xz, zstd; '-' reads standard "
        "input, plain)",
    )
    add_tokenizer_option(
        parser,
        help="a folder of tokenizer files or a tokenizer.json, loaded offline (default: the one the "
        "trace's header names, else the embedded Qwen3)",
    )
    parser.add_argument(
        "--json", action="store_true", help="print one JSON line per reply and per request, then a summary"
    )
    parser.add_argument("--quiet", action="store_true", help="print only the summary and each input error")
    parser.add_argument(
        "--progress", action="store_true", help="show the progress bar even if stderr is not a terminal"
    )


class _Counted:
    """The lines of a binary file (decompressed, if it is compressed), counting their bytes (what
    the progress bar shows).
    """

    def __init__(self, source: Iterable[bytes]) -> None:
        self.source = source
        self.read = 0
        self.head = b""
        """The first bytes read (a compression's magic bytes, if the input is compressed)."""
        self.first = b""
        """The start of the first line that is not blank (to tell binary data)."""

    def __iter__(self) -> Iterator[bytes]:
        for line in self.source:
            if not self.read:
                self.head = line[:8]
            if not self.first:
                self.first = line[:4096].strip()
            self.read += len(line)
            yield line


def progress(desc: str, total: int | None, enabled: bool, delay: float, interval: float) -> tqdm[Any]:
    """A bar on stderr in bytes of the input, with rate and time left (when the size is known),
    shown once the command has run ``delay`` seconds, redrawn every ``interval`` at most.
    """
    return tqdm(
        total=total,
        unit="B",
        unit_scale=True,
        unit_divisor=1024,
        desc=desc,
        file=sys.stderr,
        disable=not enabled,
        delay=delay,
        mininterval=interval,
        leave=False,
    )


def _tokenizer(
    args: argparse.Namespace, header: TraceHeader | None
) -> tuple[LoadedTokenizer, str | None, str]:
    """The tokenizer, the name it was loaded by (None: the embedded one), and what chose it."""
    if args.tokenizer is not None:
        return load(args.tokenizer), args.tokenizer, "--tokenizer"
    if header is None or header.tokenizer is None:
        return load(None), None, "default"
    name = header.tokenizer
    if args.trace != "-":
        beside = os.path.join(os.path.dirname(args.trace), header.tokenizer)
        if os.path.exists(beside):  # a relative path in a trace is relative to the trace
            name = beside
    return load(name), name, "the trace"


def _show_finish(report: RequestReport) -> str:
    if report.finish_reason is None:
        return "-"
    if report.matched is None:
        return report.finish_reason
    return f"{report.finish_reason} {json.dumps(report.matched, ensure_ascii=False)}"


def _plural(count: int, word: str) -> str:
    return f"{count:,} {word}{'' if count == 1 else 's'}"


def _verdicts(report: RequestReport) -> str:
    def cell(value: bool | None) -> str:
        return "-" if value is None else ("ok" if value else "FAIL")

    return ", ".join(f"{check} {cell(report.checks[check])}" for check in CHECKS)


def _notes(report: RequestReport) -> list[str]:
    return report.failures + report.errors + (["closed at end of trace"] if report.closed_at_end else [])


def _header(report: RequestReport) -> str:
    """One line that says how a request ended and what its checks found."""
    decoded = report.count if report.decoded is None else report.decoded
    after = f", {report.after_end:,} after the end" if report.after_end else ""
    what = f"{_show_finish(report)}, {_plural(decoded, 'token')}{after}, {_plural(report.events, 'event')}"
    notes = "".join(f"; {note}" for note in _notes(report))
    return f"--- request {report.uid} ({what}) {_verdicts(report)}{notes} ---"


def _json_reply(reply: UserReply) -> str:
    record: dict[str, Any] = {"uid": reply.uid, "delta": reply.incremental_output, "finished": reply.finished}
    if reply.finish_reason is not None:
        record["finish_reason"] = reply.finish_reason
    if reply.matched_stop is not None:
        record["matched_stop"] = reply.matched_stop
    if reply.error is not None:
        record["error"] = reply.error
    return json.dumps(record, ensure_ascii=False)


def _json_request(report: RequestReport) -> str:
    record = {
        "uid": report.uid,
        "tokens": report.count if report.decoded is None else report.decoded,
        "after_end": report.after_end,
        "events": report.events,
        "finish_reason": report.finish_reason,
        "matched_stop": report.matched,
        "closed_at_end": report.closed_at_end,
        "checks": report.checks,
        "failures": report.failures,
        "errors": report.errors,
    }
    return json.dumps({"request": record}, ensure_ascii=False)


def _summary_line(summary: ReplaySummary, elapsed: float) -> str:
    rate = f", {summary.tokens / elapsed:,.0f} tokens/s" if elapsed > 0 else ""
    ignored = (
        f", {_plural(summary.ignored_after_stop, 'event')} ignored after a stop"
        if summary.ignored_after_stop
        else ""
    )
    after = f", {summary.after_end:,} after the end" if summary.after_end else ""
    bad = f", {_plural(summary.bad_lines, 'bad line')} skipped" if summary.bad_lines else ""
    return (
        f"{_plural(summary.requests, 'request')}, {_plural(summary.tokens, 'token')}{after}, "
        f"{summary.failed:,} failed, {summary.with_input_errors:,} with input errors{ignored}{bad} "
        f"[{elapsed:.2f} s{rate}]"
    )


def _summary_text(summary: ReplaySummary, elapsed: float, said: Loaded) -> str:
    lines = [f"FAILED request {uid}: {'; '.join(why)}" for uid, why in summary.failures]
    if summary.failed > len(summary.failures):
        more = summary.failed - len(summary.failures)
        lines.append(f"... and {more:,} more failed (the first {MAX_LISTED} are named)")
    lines.append(f"tokenizer: {said.line}")
    lines.append(_summary_line(summary, elapsed))
    return "\n".join(lines)


def _summary_json(summary: ReplaySummary, elapsed: float, said: Loaded) -> str:
    counts = attrs.asdict(summary, filter=lambda field, _: field.name != "failures")
    record = {
        "tokenizer": said.to_json(),
        **counts,
        "seconds": round(elapsed, 3),
        "failures": [{"uid": uid, "failures": why} for uid, why in summary.failures],
    }
    return json.dumps({"summary": record}, ensure_ascii=False)


def run(args: argparse.Namespace) -> int:
    """Replay; exit 0 if every check passed, 1 if one failed, 2 for a bad or empty trace or bad
    lines or ids in it (2 wins over 1: part of the trace was not checked).
    """
    name = "<stdin>" if args.trace == "-" else args.trace
    try:
        reading = None if args.trace == "-" else Decompressed.open(args.trace)
        if reading is not None and reading.compression is not None:
            source: IO[bytes] | None = None
            lines: Iterable[bytes] = _decompressed(reading)
            total = None  # the bar counts decompressed bytes, whose total is not known before the end
        else:
            source = sys.stdin.buffer if args.trace == "-" else open(args.trace, "rb")  # noqa: SIM115
            lines, total = source, None if args.trace == "-" else os.fstat(source.fileno()).st_size
    except OSError as error:
        raise ValueError(f"{name}: {error.strerror or error}") from None
    counted = _Counted(lines)
    with source or contextlib.nullcontext():
        return _replay_lines(args, _Trace(name, reading, counted), total)


@attrs.frozen
class _Trace:
    """The trace read: its name in messages, the compressed file (None: plain or standard input)."""

    name: str
    reading: Decompressed | None
    counted: _Counted

    def ended_early(self) -> ValueError | None:
        """The error that ended the compressed data early, if one did."""
        reading = self.reading
        if reading is None or reading.error is None:
            return None
        return _ended_early(reading)

    def not_a_trace(self, error: TraceError) -> ValueError:
        """Why a trace whose first line is not a header or an event is not read: its compressed
        data broken, compressed standard input, binary data, or what is wrong with that line.
        """
        early = self.ended_early()
        if early is not None:
            return early
        compression = compression_of(self.counted.head) if self.reading is None else None
        if compression is not None:
            return ValueError(f"standard input is {compression}-compressed: give the file, or decompress it")
        if binary(self.counted.first):
            packed = (
                f"{self.reading.compression}-compressed " if self.reading and self.reading.compression else ""
            )
            return ValueError(f"{self.name}: {packed}binary data, not a trace (JSON lines of events)")
        return ValueError(
            f"{self.name}:{error.line}: not a trace's first line (a header or an event): {error.why} "
            "(engines' logs are read by puredetok audit)"
        )


def _decompressed(reading: Decompressed) -> Iterator[bytes]:
    """A compressed trace's lines; at their end, the error that ended the compressed data early,
    if one did (every event before it replayed).
    """
    yield from reading.lines()
    if reading.error is not None:
        raise _ended_early(reading)


def _ended_early(reading: Decompressed) -> ValueError:
    return ValueError(f"{reading.path}:{max(reading.line, 1)}: {reading.error}")


def _opening(
    trace: _Trace, items: Iterator[TraceHeader | TraceEvent | TraceError]
) -> tuple[TraceHeader | None, list[TraceEvent | TraceError]]:
    """The trace's header and the item after it; raises ValueError for a trace that is empty,
    holds only a header, or whose first line is neither.
    """
    first = next(items, None)
    if isinstance(first, TraceError):
        raise trace.not_a_trace(first)
    header = first if isinstance(first, TraceHeader) else None
    following = next(items, None) if header is not None else first
    if following is None:
        early = trace.ended_early()
        if early is not None:
            raise early
        what = "holds only its header" if header is not None else "is empty"
        raise ValueError(f"{trace.name}: the trace {what}: no events to replay")
    assert not isinstance(following, TraceHeader)  # trace_items gives a header only first
    return header, [following]


def _replay_lines(args: argparse.Namespace, trace: _Trace, total: int | None) -> int:
    items = trace_items(trace.counted)
    header, pending = _opening(trace, items)
    tokenizer, name, chosen_by = _tokenizer(args, header)
    defaults: SamplingParams = header.options if header else SamplingParams()
    replayer = Replayer(tokenizer, defaults, keep_text=not (args.quiet or args.json), trace_name=trace.name)
    said = loaded(name, chosen_by, replayer.manager.codec_of(defaults))
    began = time.monotonic()
    enabled = args.progress or sys.stderr.isatty()
    with progress("replay", total, enabled, PROGRESS_AFTER, PROGRESS_INTERVAL) as bar:
        shown = 0
        for count, item in enumerate(itertools.chain(pending, items), 1):
            if isinstance(item, TraceError):
                early = trace.ended_early()
                if early is not None:  # the line it cut is not JSON: the break is what to say
                    raise early
                replayer.skip_line(item)
                _print(args, replayer, ())
                continue
            assert isinstance(item, TraceEvent)  # trace_items gives a header only first
            _print(args, replayer, replayer.event(item))
            if count % PROGRESS_EVERY == 0:
                bar.set_postfix_str(f"{count:,} events", refresh=False)
            bar.update(trace.counted.read - shown)
            shown = trace.counted.read
        _print(args, replayer, replayer.close_all())
    elapsed = time.monotonic() - began
    summary = replayer.summary
    print(_summary_json(summary, elapsed, said) if args.json else _summary_text(summary, elapsed, said))
    if summary.with_input_errors or summary.bad_lines:
        return 2
    return 1 if summary.failed else 0


def _print(args: argparse.Namespace, replayer: Replayer, replies: Iterable[UserReply]) -> None:
    """JSON lines of the replies and of each request that just ended, or its text."""
    ended, notes = replayer.take_ended(), replayer.take_notes()
    if args.quiet:  # the summary, and every input error still named
        errors = [f"request {report.uid}: {error}" for report in ended for error in report.errors]
        for error in errors + notes:
            print(
                json.dumps({"input_error": error}, ensure_ascii=False)
                if args.json
                else f"--- {error} (input error) ---"
            )
        return
    if args.json:
        for reply in replies:
            print(_json_reply(reply))
        for report in ended:
            print(_json_request(report))
        for note in notes:
            print(json.dumps({"input_error": note}, ensure_ascii=False))
        return
    for report in ended:
        print(_header(report))
        print(report.text)
    for note in notes:
        print(f"--- {note} (input error) ---")
