"""``python -m puredetok.bench.audit``: how fast ``puredetok audit`` checks a log, per core and on Ray.

It writes a log of vLLM completion responses (the mixed-script text of :data:`TEXT`, every
tenth one wrong) and times, side by side in each repeat:

- the local audit, in tokens per second of the process's CPU time (one core; target >= 1M on
  Qwen3) and of wall time, beside ``tokenizer.decode`` of the same outputs alone;
- the audit on a local Ray Data with 1 worker and with 2 (one CPU each), end to end (the
  workers' start included), and their ratio (target >= 1.6); and, beside it, the same on a
  one-response log (the start alone), so that the ratio of the times after the start is shown too.
"""

from __future__ import annotations

__all__ = ["write_log", "local_run", "ray_runs", "main"]

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

from puredetok.audit import AuditOptions, Auditor, Columns, Tally, audit_shard, shards_of
from puredetok.bench.timing import TEXT
from puredetok.serving.loading import load_tokenizer

PROMPT = "Translate into every language you know, then explain the code: "
OUTPUT_TOKENS = 200
DISTINCT = 100


def write_log(path: Path, tokenizer: Any, tokens: int) -> int:
    """A log of completion responses with about ``tokens`` output ids; returns how many it holds.

    :data:`DISTINCT` different responses are decoded once and written over and over (each with
    its own id), so that a long log is written quickly.
    """
    prompt = list(tokenizer.encode(PROMPT))
    pool = list(tokenizer.encode(TEXT * (2 + OUTPUT_TOKENS // 50)))
    shown = len(tokenizer.decode(prompt))
    bodies = []
    for number in range(DISTINCT):
        at = (number * 37) % (len(pool) - OUTPUT_TOKENS)
        ids = pool[at : at + OUTPUT_TOKENS]
        text = tokenizer.decode(prompt + ids)[shown:]
        if number % 10 == 9:
            text = text[:-1]
        choice = {
            "index": 0,
            "text": text,
            "token_ids": ids,
            "prompt_token_ids": prompt,
            "finish_reason": "length",
        }
        body = json.dumps(
            {"object": "text_completion", "model": "bench", "choices": [choice]}, ensure_ascii=False
        )
        bodies.append(body[1:])
    written = 0
    with open(path, "w", encoding="utf-8") as log:
        number = 0
        while written < tokens:
            log.write(f'{{"id": "cmpl-{number}", {bodies[number % DISTINCT]}\n')
            written += OUTPUT_TOKENS
            number += 1
    return written


def local_run(path: Path, tokenizer: Any) -> tuple[float, float, Tally]:
    """One local audit of ``path``: its CPU seconds, wall seconds and counts."""
    auditor = Auditor(tokenizer, AuditOptions())
    auditor.codec(_probe())  # built before the clock starts, as once per run
    tally = Tally()
    cpu, wall = time.process_time(), time.perf_counter()
    for shard in shards_of(str(path)):
        tally.add(audit_shard(shard, auditor, Columns()).tally)
    return time.process_time() - cpu, time.perf_counter() - wall, tally


def _probe() -> Any:
    from puredetok.audit import Request

    return Request("probe", 0, (), (), "")


def decode_run(path: Path, tokenizer: Any) -> float:
    """Wall seconds of ``tokenizer.decode`` of every output of the log alone (no parsing)."""
    outputs = []
    with open(path, "rb") as log:
        for line in log:
            outputs.append(json.loads(line)["choices"][0]["token_ids"])
    began = time.perf_counter()
    for ids in outputs:
        tokenizer.decode(ids, skip_special_tokens=True)
    return time.perf_counter() - began


def ray_runs(path: Path, tokenizer_name: str, workers: int) -> float:
    """Wall seconds of one audit of ``path`` on the running Ray with ``workers`` workers."""
    from puredetok.audit.distributed import audit_on_ray

    shards = shards_of(str(path), size=1 << 20)
    began = time.perf_counter()
    for _ in audit_on_ray(shards, tokenizer_name, AuditOptions(), Columns(), workers=workers):
        pass
    return time.perf_counter() - began


def _range(values: list[float]) -> str:
    return f"{min(values):,.2f} - {max(values):,.2f}"


def main(argv: list[str] | None = None) -> int:
    """Print the measurements; exit 0 (the targets are shown, not enforced)."""
    parser = argparse.ArgumentParser(prog="python -m puredetok.bench.audit", description=__doc__)
    parser.add_argument("--tokenizer", default="qwen3")
    parser.add_argument("--tokens", type=int, default=2_000_000, help="output ids in the local log")
    parser.add_argument("--ray-tokens", type=int, default=60_000_000, help="output ids in the Ray log")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-ray", action="store_true", help="skip the Ray section")
    args = parser.parse_args(argv)
    tokenizer = load_tokenizer(args.tokenizer)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"puredetok audit bench: {args.tokenizer}, Python {platform.python_version()}, "
        f"{os.cpu_count()} cores, "
        f"load average {load:.2f}; {args.repeats} repeats (min - max)"
    )
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "log.jsonl"
        tokens = write_log(path, tokenizer, args.tokens)
        per_cpu, per_wall, versus = [], [], []
        for _ in range(args.repeats):
            cpu, wall, tally = local_run(path, tokenizer)
            decode = decode_run(path, tokenizer)
            per_cpu.append(tally.tokens / cpu / 1e6)
            per_wall.append(tally.tokens / wall / 1e6)
            versus.append(wall / decode)
        print(
            f"local audit of {tokens:,} output ids ({tally.requests:,} requests, {tally.differing:,} differ)"
        )
        print(f"  M tokens / CPU second (one core)      {_range(per_cpu)}   target >= 1.0")
        print(f"  M tokens / wall second                {_range(per_wall)}")
        print(f"  audit time / tokenizer.decode alone   {_range(versus)}")
        if args.no_ray:
            return 0
        import ray

        ray_path, start_path = Path(folder) / "ray.jsonl", Path(folder) / "start.jsonl"
        ray_tokens = write_log(ray_path, tokenizer, args.ray_tokens)
        write_log(start_path, tokenizer, OUTPUT_TOKENS)
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        try:
            runs: dict[int, list[float]] = {1: [], 2: []}
            starts: dict[int, list[float]] = {1: [], 2: []}
            for _ in range(args.repeats):
                for workers in (1, 2):
                    starts[workers].append(ray_runs(start_path, args.tokenizer, workers))
                    runs[workers].append(ray_runs(ray_path, args.tokenizer, workers))
        finally:
            ray.shutdown()
        speedups = [one / two for one, two in zip(runs[1], runs[2])]
        work = [
            (one - s1) / (two - s2)
            for one, two, s1, s2 in zip(runs[1], runs[2], starts[1], starts[2])
            if one > s1 and two > s2
        ]
        print(f"Ray Data, local, 2 CPUs: {ray_tokens:,} output ids")
        print(
            f"  seconds, a one-response log (start)   1 worker {_range(starts[1])}, "
            f"2 workers {_range(starts[2])}"
        )
        print(f"  seconds with 1 worker                 {_range(runs[1])}")
        print(f"  seconds with 2 workers                {_range(runs[2])}")
        print(f"  speed-up, 2 workers / 1, end to end   {_range(speedups)}   target >= 1.6")
        shown = _range(work) if work else "-"
        print(
            f"  speed-up of the time after the start  {shown} "
            f"({len(work)} of {args.repeats} repeats measurable)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
