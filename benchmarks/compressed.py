"""``python -m benchmarks.compressed``: what reading a compressed log costs ``puredetok audit``.

It writes two logs of vLLM completions (200 output ids each, every tenth text wrong): one of
100 distinct responses written over and over (:func:`benchmarks.audit.write_log`: it
compresses as well as logs of repeated text do) and one of random ids (its text nearly
incompressible: the most decompression per output id). It compresses each with gzip, bzip2, xz
and zstd and audits every file in a child process of its own (the plain file first in each
repeat, the others after it): the audit's CPU seconds, their ratio to the plain file's in the
same repeat, and the peak of traced Python memory on the repeated log in gzip and on one four
times as long.
"""

from __future__ import annotations

import argparse
import bz2
import gzip
import json
import lzma
import os
import random
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import zstandard

from benchmarks.audit import write_log
from puredetok.serving._loading import load_tokenizer
from puredetok_audit import Auditor, Tally, shards_of
from puredetok_audit._sources import audit_stretches

COMPRESS: dict[str, Callable[[bytes], bytes]] = {
    "gz": gzip.compress,
    "bz2": bz2.compress,
    "xz": lzma.compress,
    "zst": zstandard.ZstdCompressor(level=3).compress,
}


def _random_log(path: Path, tokenizer: Any, tokens: int) -> None:
    rng = random.Random(7)
    prompt = list(tokenizer.encode("Translate into every language you know: "))
    shown = len(tokenizer.decode(prompt))
    with open(path, "w", encoding="utf-8") as log:
        for number in range(max(1, tokens // 200)):
            ids = [rng.randrange(150_000) for _ in range(200)]
            text = tokenizer.decode(prompt + ids)[shown:]
            choice = {"index": 0, "text": text[:-1] if number % 10 == 9 else text, "token_ids": ids}
            choice |= {"prompt_token_ids": prompt, "finish_reason": "length"}
            record = {"id": f"cmpl-{number}", "object": "text_completion", "choices": [choice]}
            log.write(json.dumps(record, ensure_ascii=False) + "\n")


def _child(path: str, traced: bool) -> None:
    """Audit one file as the command does (stretch by stretch); print its CPU seconds and peak."""
    auditor = Auditor(load_tokenizer("qwen3"))
    auditor.codec_of(True)
    if traced:
        tracemalloc.start()
    cpu, tally = time.process_time(), Tally()
    for shard in shards_of(path):
        for result in audit_stretches(shard, auditor):
            tally.add(result.tally)
    peak = tracemalloc.get_traced_memory()[1] if traced else 0
    print(json.dumps({"cpu": time.process_time() - cpu, "peak": peak, "tokens": tally.tokens}))


def _run(path: Path, traced: bool = False) -> dict[str, float]:
    argv = [sys.executable, "-m", "benchmarks.compressed", "--child", str(path)] + (
        ["--traced"] if traced else []
    )
    done = subprocess.run(argv, check=True, capture_output=True, cwd=Path(__file__).parents[1])
    result: dict[str, float] = json.loads(done.stdout)
    return result


def main(argv: list[str] | None = None) -> int:
    """Print the measurements."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tokens", type=int, default=4_000_000, help="output ids in each log")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--traced", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(args.child, args.traced)
        return 0
    tokenizer = load_tokenizer("qwen3")
    print(f"compressed logs: {args.tokens:,} output ids a log, {args.repeats} repeats (min - max)")
    print(f"load average at the start {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as folder:
        logs = {"repeated": Path(folder) / "repeated.jsonl", "random": Path(folder) / "random.jsonl"}
        write_log(logs["repeated"], tokenizer, args.tokens)
        _random_log(logs["random"], tokenizer, args.tokens)
        for name, plain in logs.items():
            data = plain.read_bytes()
            for suffix, compress in COMPRESS.items():
                Path(f"{plain}.{suffix}").write_bytes(compress(data))
            cpus: dict[str, list[float]] = {suffix: [] for suffix in ("", *COMPRESS)}
            for _ in range(args.repeats):
                for suffix in cpus:
                    cpus[suffix].append(_run(Path(f"{plain}.{suffix}" if suffix else plain))["cpu"])
            for suffix, cpu in cpus.items():
                ratios = [one / base for one, base in zip(cpu, cpus[""], strict=True)]
                size = Path(f"{plain}.{suffix}" if suffix else plain).stat().st_size
                print(
                    f"{name:8} {suffix or 'plain':5} {size / 1e6:8.3f} MB"
                    f"  CPU s {min(cpu):.2f} - {max(cpu):.2f}  / plain {min(ratios):.2f} - {max(ratios):.2f}"
                )
        long = Path(folder) / "long.jsonl"
        write_log(long, tokenizer, 4 * args.tokens)
        long.with_suffix(".jsonl.gz").write_bytes(gzip.compress(long.read_bytes()))
        for path in (logs["repeated"], Path(f"{logs['repeated']}.gz"), long, long.with_suffix(".jsonl.gz")):
            print(f"peak traced memory, {path.name}: {_run(path, traced=True)['peak'] / 2**20:.2f} MiB")
    print(f"load average at the end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
