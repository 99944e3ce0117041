"""``puredetok audit FILE... --tokenizer PATH``: check that engines returned the exact text of their ids."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import IO, Any

from tqdm import tqdm

from puredetok.audit import FORMATS, AuditOptions, Auditor, Columns, Shard, Tally, shards_of
from puredetok.audit.distributed import TaskFailedError
from puredetok.audit.report import summary_rows
from puredetok.audit.sources import SHARD_BYTES, ShardResult, audit_stretches
from puredetok.cli.options import add_tokenizer_option
from puredetok.serving.loading import load_tokenizer

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
    counts: dict[str, int] = {}
    for shard in shards:
        counts[shard.path] = counts.get(shard.path, 0) + 1
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
    )
    auditor = Auditor(load_tokenizer(args.tokenizer), options)
    if built:
        auditor.codec_of(options.skip_special_tokens)
    return auditor


def _prepared(args: argparse.Namespace) -> Auditor:
    """The auditor; with ``--ray``, Ray started meanwhile (seconds, mostly in its own processes,
    while this process loads the tokenizer and builds the codec the workers are given).
    """
    if not (args.ray or args.ray_address):
        return _auditor(args, built=False)
    from puredetok.audit.distributed import start_ray

    with ThreadPoolExecutor(1) as pool:
        loading = pool.submit(_auditor, args, True)
        start_ray(args.ray_address, args.ray_cpus)
        return loading.result()


def _results(
    args: argparse.Namespace, shards: list[Shard], auditor: Auditor
) -> Iterator[tuple[ShardResult, bool]]:
    """Each shard's findings (a compressed file's a stretch at a time), and whether they end the
    shard.
    """
    columns = Columns(args.prompt_ids_column, args.response_ids_column, args.text_column, args.id_column)
    if args.ray or args.ray_address:
        from puredetok.audit.distributed import audit_on_ray

        for result in audit_on_ray(
            shards, auditor, args.tokenizer, columns, address=args.ray_address, num_cpus=args.ray_cpus
        ):
            yield result, result.last
        return
    for shard in shards:
        stretches = audit_stretches(shard, auditor, columns)
        result = next(stretches)
        for following in stretches:
            yield result, False
            result = following
        yield result, True


def _table(tally: Tally, seconds: float, formats: dict[str, int]) -> str:
    files = ", ".join(f"{name}: {count}" for name, count in formats.items())
    rows = [("files", files or "-")] + summary_rows(tally, seconds)
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)


def _write(report: IO[str] | None, records: Iterable[dict[str, Any]]) -> None:
    for record in records:
        if "error" in record:
            _error(f"{record['file']}:{record['line']}: {record['error']}")
        if report is not None:
            report.write(json.dumps(record, ensure_ascii=False) + "\n")


def run(args: argparse.Namespace) -> int:
    """Audit; exit 0 if every request's text is exact, 1 if one differs, 2 for bad input."""
    auditor = _prepared(args)
    began = time.monotonic()
    shards, bad, sizes = _shards(args)
    for message in bad:
        _error(message)
    formats: dict[str, int] = {}
    for path in sizes:
        kind = next((shard.format for shard in shards if shard.path == path), "-")
        formats[kind] = formats.get(kind, 0) + 1
    tally = Tally()
    report = open(args.report, "w", encoding="utf-8") if args.report else None  # noqa: SIM115
    enabled = args.progress or sys.stderr.isatty()
    try:
        with tqdm(
            total=sum(sizes.values()),
            unit="B",
            unit_scale=True,
            unit_divisor=1024,
            desc="audit",
            file=sys.stderr,
            disable=not enabled,
            delay=PROGRESS_AFTER,
            leave=False,
        ) as bar:
            weights = iter(_weights(shards, sizes))
            for result, ends in _results(args, shards, auditor):
                _write(report, result.records)
                tally.add(result.tally)
                bar.update(next(weights) if ends else 0)
                bar.set_postfix_str(f"{tally.requests:,} requests, {tally.differing:,} differ", refresh=False)
    except TaskFailedError as error:  # the run stops: what it found so far is not the file's
        _error(str(error))
        return 2
    finally:
        if report is not None:
            report.close()
    print(_table(tally, time.monotonic() - began, formats))
    if bad or tally.errors:
        return 2
    return 1 if tally.differing else 0
