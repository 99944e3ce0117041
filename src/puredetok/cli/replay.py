"""``puredetok replay TRACE``: stream a token trace through the manager and check every request."""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
from pathlib import Path
from typing import IO, Any

from puredetok.adapters.loading import DEFAULT_TOKENIZER, load_tokenizer
from puredetok.adapters.messages import SamplingParams, UserReply
from puredetok.adapters.replay import CHECKS, Replayer, RequestReport
from puredetok.adapters.trace import TraceEvent, TraceHeader, read_trace
from puredetok.cli.options import add_tokenizer_option

NAME = "replay"
HELP = "replay a token trace (JSON lines), print each request's text, and check G1/G2/G4 per request"

PROGRESS_AFTER = 0.5
"""Seconds a replay runs before a progress bar appears."""


def configure(parser: argparse.ArgumentParser) -> None:
    """Declare the arguments."""
    parser.add_argument("trace", help="the trace file (JSON lines; '-' reads standard input)")
    add_tokenizer_option(
        parser,
        default=None,
        help="tokenizer folder or tokenizer.json (default: the trace's, else the embedded Qwen3)",
    )
    parser.add_argument(
        "--json", action="store_true", help="print one JSON line per reply, then a summary line"
    )
    parser.add_argument("--quiet", action="store_true", help="print only the summary")
    parser.add_argument(
        "--progress", action="store_true", help="show the progress bar even if stderr is not a tty"
    )


class Progress:
    """A one-line progress bar on stderr, shown once the work has taken more than a moment."""

    INTERVAL = 0.1
    """Seconds between redraws at least."""

    def __init__(self, total: int | None, stream: IO[str], enabled: bool) -> None:
        self.total, self.stream, self.enabled = total, stream, enabled
        self.began = time.monotonic()
        self.last = 0.0
        self.shown = False

    def update(self, done: int, events: int) -> None:
        """Redraw, at most ten times a second."""
        now = time.monotonic()
        if not self.enabled or now - self.began < PROGRESS_AFTER or now - self.last < self.INTERVAL:
            return
        self.last = now
        elapsed = now - self.began
        if self.total:
            share = min(done / self.total, 1.0)
            bar = "#" * int(share * 30)
            line = f"\r[{bar:<30}] {share:6.1%}  {events:,} events  {elapsed:5.1f} s"
        else:
            line = f"\r{events:,} events  {elapsed:5.1f} s"
        self.stream.write(line)
        self.stream.flush()
        self.shown = True

    def done(self) -> None:
        """Erase the bar."""
        if self.shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()


def _tokenizer(args: argparse.Namespace, header: TraceHeader | None) -> Any:
    name = args.tokenizer or (header.tokenizer if header else None) or DEFAULT_TOKENIZER
    if not args.tokenizer and header and header.tokenizer and args.trace != "-":
        beside = Path(args.trace).parent / header.tokenizer
        if beside.exists():  # a relative path in a trace is relative to the trace
            name = str(beside)
    return load_tokenizer(name)


def _show_finish(report: RequestReport) -> str:
    if report.finish_reason is None:
        return "-"
    if report.matched is None:
        return report.finish_reason
    return f"{report.finish_reason} {json.dumps(report.matched, ensure_ascii=False)}"


def _json_reply(reply: UserReply) -> str:
    record: dict[str, Any] = {"uid": reply.uid, "delta": reply.incremental_output, "finished": reply.finished}
    if reply.finish_reason is not None:
        record["finish_reason"] = reply.finish_reason
    if reply.matched_stop is not None:
        record["matched_stop"] = reply.matched_stop
    if reply.error is not None:
        record["error"] = reply.error
    return json.dumps(record, ensure_ascii=False)


def _summary(reports: list[RequestReport], elapsed: float) -> dict[str, Any]:
    tokens = sum(len(report.ids) for report in reports)
    return {
        "requests": len(reports),
        "tokens": tokens,
        "failed": sum(not report.ok for report in reports),
        "with_input_errors": sum(bool(report.errors) for report in reports),
        "seconds": round(elapsed, 3),
        "per_request": [
            {
                "uid": report.uid,
                "tokens": len(report.ids),
                "events": report.events,
                "finish_reason": report.finish_reason,
                "matched_stop": report.matched,
                "closed_at_end": report.closed_at_end,
                "ignored_after_stop": report.ignored,
                "checks": report.checks,
                "failures": report.failures,
                "errors": report.errors,
            }
            for report in reports
        ],
    }


def _table(reports: list[RequestReport], elapsed: float) -> str:
    def cell(value: bool | None) -> str:
        return "-" if value is None else ("ok" if value else "FAIL")

    rows: list[tuple[str, ...]] = [("uid", "tokens", "events", "finish", *CHECKS, "note")]
    for report in reports:
        notes = report.failures + report.errors + (["closed at end of trace"] if report.closed_at_end else [])
        if report.ignored:
            notes.append(f"{report.ignored} later event(s) ignored after the stop")
        rows.append(
            (
                str(report.uid),
                f"{len(report.ids):,}",
                f"{report.events:,}",
                _show_finish(report),
                *(cell(report.checks[check]) for check in CHECKS),
                "; ".join(notes),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    lines = [
        "  ".join(value.ljust(width) for value, width in zip(row, widths)) + "  " + row[-1] for row in rows
    ]
    tokens = sum(len(report.ids) for report in reports)
    failed = sum(not report.ok for report in reports)
    errored = sum(bool(report.errors) for report in reports)
    rate = f", {tokens / elapsed:,.0f} tokens/s" if elapsed > 0 else ""
    lines.append(
        f"{len(reports)} requests, {tokens:,} tokens, {failed} failed, {errored} with input errors "
        f"[{elapsed:.2f} s{rate}]"
    )
    return "\n".join(line.rstrip() for line in lines)


def run(args: argparse.Namespace) -> int:
    """Replay; exit 0 if every check passed, 1 if one failed, 2 for a bad trace or bad ids in it."""
    try:
        return _replay(args)
    except BrokenPipeError:  # the reader went away (``| head``): stop quietly, as Unix tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _replay(args: argparse.Namespace) -> int:
    source: IO[bytes] = sys.stdin.buffer if args.trace == "-" else open(args.trace, "rb")  # noqa: SIM115
    with source:
        total = None if args.trace == "-" else os.fstat(source.fileno()).st_size
        progress = Progress(total, sys.stderr, args.progress or sys.stderr.isatty())
        events = read_trace(source)
        first = next(events, None)
        header = first if isinstance(first, TraceHeader) else None
        tokenizer = _tokenizer(args, header)
        defaults: SamplingParams = header.options if header else SamplingParams()
        replayer = Replayer(tokenizer, defaults)
        began = time.monotonic()
        pending = [first] if isinstance(first, TraceEvent) else []
        count = 0
        try:
            for event in itertools.chain(pending, events):
                assert isinstance(event, TraceEvent)  # read_trace gives a header only first
                _print(args, replayer, replayer.event(event))
                count += 1
                progress.update(source.tell() if total else 0, count)
            _print(args, replayer, replayer.close_all())
        finally:
            progress.done()
    elapsed = time.monotonic() - began
    reports = list(replayer.requests.values())
    if args.json:
        print(json.dumps({"summary": _summary(reports, elapsed)}, ensure_ascii=False))
    else:
        print(_table(reports, elapsed))
    if any(not report.ok for report in reports):
        return 1
    return 2 if any(report.errors for report in reports) else 0


def _print(args: argparse.Namespace, replayer: Replayer, replies: list[UserReply]) -> None:
    """JSON lines of the replies, or the text of each request that just ended."""
    ended = replayer.take_ended()
    if args.quiet:
        return
    if args.json:
        for reply in replies:
            print(_json_reply(reply))
        return
    for report in ended:
        print(f"--- request {report.uid} ({_show_finish(report)}, {len(report.ids):,} tokens) ---")
        print(report.text)
