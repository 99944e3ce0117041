"""``puredetok audit FILE... --tokenizer PATH``: check that engines returned the exact text of their ids."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from collections import Counter
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import IO, Any

import attrs

from puredetok.cli._loaded import Loaded, load, loaded
from puredetok.cli._options import add_tokenizer_option, tokenizer_choice
from puredetok_audit import FORMATS, AuditOptions, Auditor, Columns, Shard, Tally, shards_of
from puredetok_audit._cli.replay import PROGRESS_INTERVAL, progress
from puredetok_audit._compare import PARSER_SPLIT
from puredetok_audit._distributed import TaskFailedError
from puredetok_audit._report import MAX_NAMED, difference_line, summary_rows
from puredetok_audit._sources import SHARD_BYTES, ShardResult, audit_stretches

NAME = "audit"
HELP = (
    "check engines' logged responses and rollouts: is each text the exact decode of its ids? "
    "(exit 0 all equal, 1 some differ, 2 bad input)"
)

PROGRESS_AFTER = 0.5
"""Seconds an audit runs before its progress bar appears."""


def configure(parser: argparse.ArgumentParser) -> None:
    """Declare the arguments."""
    parser.add_argument(
        "files",
        nargs="+",
        metavar="FILE",
        help="the logs or tables to audit, plain or compressed (gzip, bzip2, xz, zstd: told by content)",
    )
    add_tokenizer_option(parser)
    parser.add_argument(
        "--format", choices=FORMATS, help="the files' format (default: told from each file's content)"
    )
    parser.add_argument("--report", metavar="OUT.jsonl", help="write one JSON line per differing request")
    parser.add_argument(
        "--json",
        action="store_true",
        help="print the summary as one JSON object (the tokenizer, the counts, the first differing "
        "requests, the warnings) instead of the table",
    )
    parser.add_argument(
        "--skip-special-tokens",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the engine's decode option (default: the record's, else true as engines default)",
    )
    parser.add_argument(
        "--clean-up-tokenization-spaces",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="transformers' space cleanup (default: what the tokenizer's decode does)",
    )
    parser.add_argument(
        "--spaces-between-special-tokens",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the engine's decode option (default: the record's, else true as engines default)",
    )
    parser.add_argument(
        "--include-stop-str-in-output",
        action="store_true",
        help="the engine kept the stop string (and decoded the stop token) (default: the record's, else no)",
    )
    columns = Columns()
    parser.add_argument("--prompt-ids-column", default=columns.prompt_ids, help="rollouts: the prompt ids")
    parser.add_argument(
        "--response-ids-column", default=columns.response_ids, help="rollouts: the response ids"
    )
    parser.add_argument("--text-column", default=columns.text, help="rollouts: the response text")
    parser.add_argument("--id-column", help="rollouts: a column naming each row (default: its index)")
    parser.add_argument(
        "--ray", action="store_true", help="audit in parallel on a local Ray (puredetok[ray])"
    )
    parser.add_argument("--ray-address", metavar="ADDRESS", help="audit on this Ray cluster (implies --ray)")
    parser.add_argument("--ray-cpus", type=int, metavar="N", help="CPUs of the local Ray (default: all)")
    parser.add_argument(
        "--shard-bytes", type=int, default=SHARD_BYTES, metavar="N", help="about N bytes of a file per shard"
    )
    parser.add_argument(
        "--progress", action="store_true", help="show the progress bar even if stderr is not a terminal"
    )


def _error(message: str) -> None:
    print(f"puredetok audit: error: {message}", file=sys.stderr)


def _weights(shards: list[Shard], sizes: dict[str, int]) -> list[int]:
    """Each shard's bytes, for the progress bar (a file read whole, or by row groups, shares its size)."""
    counts = Counter(shard.path for shard in shards)
    return [
        shard.end - shard.start if shard.layout == "lines" else sizes[shard.path] // counts[shard.path]
        for shard in shards
    ]


def _shards(args: argparse.Namespace) -> tuple[list[Shard], list[str], dict[str, int]]:
    shards: list[Shard] = []
    bad: list[str] = []
    sizes: dict[str, int] = {}
    for path in args.files:
        try:
            found = shards_of(path, args.format, args.shard_bytes)
            sizes[path] = os.path.getsize(path)
        except (OSError, ValueError) as error:
            message = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
            message = " ".join(message.split()) or type(error).__name__
            bad.append(f"{path}: {message}")
            continue
        shards.extend(found)
    return shards, bad, sizes


def _auditor(args: argparse.Namespace, built: bool) -> Auditor:
    """The auditor of the options, its tokenizer loaded (and its codec ``built`` now)."""
    options = AuditOptions(
        skip_special_tokens=args.skip_special_tokens,
        clean_up_tokenization_spaces=args.clean_up_tokenization_spaces,
        include_stop_str_in_output=args.include_stop_str_in_output,
        spaces_between_special_tokens=args.spaces_between_special_tokens,
    )
    auditor = Auditor(load(args.tokenizer), options)
    if built:
        auditor.codec_of(options.skip_special_tokens, options.spaces_between_special_tokens)
    return auditor


def _prepared(args: argparse.Namespace) -> Auditor:
    """The auditor; with ``--ray``, Ray started meanwhile (seconds, mostly in its own processes,
    while this process loads the tokenizer and builds the codec the workers are given).
    """
    if not (args.ray or args.ray_address):
        return _auditor(args, built=False)
    from puredetok_audit._distributed import start_ray

    # Said before the thread starts (catch_warnings and filters are process-wide, not per thread):
    # Ray 2.51 warns at every start that a later Ray will stop setting the accelerators' variables
    # when no GPU is asked for (the audit asks for none); tokenizers, once its thread pool has run
    # here, warns in every process Ray forks meanwhile (each execs at once) unless the variable is
    # set. Either broke the promise of one line on stderr for a failed run. The variable is set
    # for the overlap only: a process forked later, as usual, gets the pool turned off.
    warnings.filterwarnings("ignore", "Tip: In future versions of Ray", FutureWarning)
    unset = "TOKENIZERS_PARALLELISM" not in os.environ
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
    try:
        with ThreadPoolExecutor(1) as pool:
            loading = pool.submit(_auditor, args, True)
            start_ray(args.ray_address, args.ray_cpus)
            return loading.result()
    finally:
        if unset:
            del os.environ["TOKENIZERS_PARALLELISM"]


def _results(args: argparse.Namespace, shards: list[Shard], auditor: Auditor) -> Iterator[ShardResult]:
    """Each shard's findings (a compressed file's a stretch at a time: :attr:`ShardResult.last`
    says whether they end the shard).
    """
    columns = Columns(args.prompt_ids_column, args.response_ids_column, args.text_column, args.id_column)
    if args.ray or args.ray_address:
        from puredetok_audit._distributed import audit_on_ray

        yield from audit_on_ray(
            shards, auditor, args.tokenizer, columns, address=args.ray_address, num_cpus=args.ray_cpus
        )
        return
    for shard in shards:
        yield from audit_stretches(shard, auditor, columns)


def _table(tally: Tally, seconds: float, formats: dict[str, int], said: Loaded) -> str:
    files = ", ".join(f"{name}: {count}" for name, count in formats.items())
    rows = [("tokenizer", said.line), ("files", files or "-")] + summary_rows(tally, seconds)
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)


@attrs.define
class _Named:
    """The first :data:`MAX_NAMED` differing requests of the report, for the summary."""

    records: list[dict[str, Any]] = attrs.field(factory=list)

    def add(self, record: dict[str, Any]) -> None:
        if len(self.records) < MAX_NAMED and "kind" in record and record["kind"] != PARSER_SPLIT:
            self.records.append(record)

    def lines(self, differing: int, report: str | None) -> list[str]:
        """The named requests, one a line, and how many more differ."""
        lines = [difference_line(record) for record in self.records]
        if differing > len(self.records):
            where = f"{report} lists every one" if report else "--report FILE lists every one"
            lines.append(f"... and {differing - len(self.records):,} more differ ({where})")
        return lines


def _write(report: IO[str] | None, records: Iterable[dict[str, Any]], named: _Named) -> None:
    for record in records:
        if "error" in record:
            _error(f"{record['file']}:{record['line']}: {record['error']}")
        else:
            named.add(record)
        if report is not None:
            report.write(json.dumps(record, ensure_ascii=False) + "\n")


def _warnings(tally: Tally, said: Loaded) -> list[str]:
    """The signs that the tokenizer is not the one that generated the ids: most requests differ,
    their texts unrelated after the difference (:func:`~puredetok_audit._report.unrelated`), or ids
    run past its vocabulary.
    """
    hint = "pass --tokenizer" if said.chosen_by == "default" else "check --tokenizer"
    used = f"this audit used {said.name}, {said.family}"
    why = f"the tokenizer may not be the one that generated these ids: {hint} ({used})"
    found = []
    if tally.unrelated * 2 > tally.requests:
        found.append(
            f"{tally.unrelated:,} of {tally.requests:,} requests differ, with unrelated texts: {why}"
        )
    if tally.past_vocabulary:
        found.append(
            f"{tally.past_vocabulary:,} request{'s have' if tally.past_vocabulary > 1 else ' has'} ids past "
            f"the vocabulary ({said.vocab_size:,} ids): {why}"
        )
    return found


def _summary_json(
    tally: Tally, seconds: float, formats: dict[str, int], said: Loaded, named: _Named, found: list[str]
) -> str:
    summary = {
        "tokenizer": said.to_json(),
        "files": formats,
        **tally.to_json(),
        "equal": tally.requests - tally.differing - tally.unjoinable,
        "seconds": round(seconds, 3),
        "differing_named": [
            {key: record.get(key) for key in ("file", "line", "id", "offset", "token", "chunk", "kind")}
            for record in named.records
        ],
        "warnings": found,
    }
    return json.dumps({"summary": summary}, ensure_ascii=False)


def run(args: argparse.Namespace) -> int:
    """Audit; exit 0 if every request's text is exact, 1 if one differs, 2 for bad input (2 wins)."""
    began = time.monotonic()
    shards, bad, sizes = _shards(args)
    for message in bad:
        _error(message)
    if not sizes:
        return 2  # no file could be read: nothing is loaded, and there is nothing to sum up
    auditor = _prepared(args)
    codec = auditor.codec_of(args.skip_special_tokens, args.spaces_between_special_tokens)
    said = loaded(args.tokenizer, tokenizer_choice(args), codec)
    formats = dict(Counter(next((s.format for s in shards if s.path == path), "-") for path in sizes))
    tally, named = Tally(), _Named()
    records = dict.fromkeys(sizes, 0)  # per file, its records read: a file of none had nothing to audit
    ended = iter(shards)
    report = open(args.report, "w", encoding="utf-8") if args.report else None  # noqa: SIM115
    enabled = args.progress or sys.stderr.isatty()
    try:
        with progress("audit", sum(sizes.values()), enabled, PROGRESS_AFTER, PROGRESS_INTERVAL) as bar:
            weights = iter(_weights(shards, sizes))
            shard = next(ended)
            for result in _results(args, shards, auditor):
                _write(report, result.records, named)
                tally.add(result.tally)
                records[shard.path] += result.tally.requests + result.tally.skipped + result.tally.errors
                shard = next(ended, shard) if result.last else shard
                bar.update(next(weights) if result.last else 0)
                bar.set_postfix_str(f"{tally.requests:,} requests, {tally.differing:,} differ", refresh=False)
    except TaskFailedError as error:  # the run stops: what it found so far is not the file's
        _error(str(error))
        return 2
    finally:
        if report is not None:
            report.close()
    seconds = time.monotonic() - began
    for path in (path for path, count in records.items() if not count):
        bad.append(path)
        _error(f"{path}: no records in it: nothing to audit")
    found = _warnings(tally, said)
    if args.json:
        print(_summary_json(tally, seconds, formats, said, named, found))
    else:
        print("\n".join([*named.lines(tally.differing, args.report), _table(tally, seconds, formats, said)]))
    for warning in found:
        print(f"puredetok audit: warning: {warning}", file=sys.stderr)
    if bad or tally.errors:
        return 2
    return 1 if tally.differing else 0
