"""``python -m benchmarks.audit``: how fast ``puredetok audit`` checks a log, per core and on Ray.

It writes a log of vLLM completion responses (the mixed-script text of :data:`TEXT`, every
tenth one wrong) and times, side by side in each repeat:

- the local audit, in tokens per second of the process's CPU time (one core; target >= 1M on
  Qwen3) and of wall time, beside ``tokenizer.decode`` of the same outputs alone; and the peak of
  its Python memory on a log a quarter as long and on the whole (flat: shard by shard);
- the audit on a local Ray Data of 2 CPUs with 1 worker and with 2, end to end (the
  workers' start included), and their ratio (target >= 1.6); beside it, the same on a
  one-response log (the start alone), where each run's time
  went (:func:`breakdown`: the start, a worker's CPU before its first shard, the span in which shards
  were audited, the time after the last one, how many shards ran at once, the share of a core
  they got), and its CPU time (:func:`cpu_use`: the workers' per shard, the driver's and Ray's
  own processes' per shard, the cores the whole run kept busy), which a loaded machine does not
  bend as it bends wall times;
- the same with 1 worker and 2 on one gzip-compressed log, which the 2 workers share (each
  decompresses all of it and audits every other stretch).
"""

from __future__ import annotations

__all__ = ["write_log", "local_run", "ray_runs", "process_cpu", "cpu_use", "cpu_bound", "breakdown", "main"]

import argparse
import gzip
import itertools
import json
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

from puredetok.cli._timing import TEXT
from puredetok.serving._loading import load_tokenizer
from puredetok_audit import AuditOptions, Auditor, Columns, Tally, audit_shard, shards_of
from puredetok_audit._sources import SHARD_BYTES

PROMPT = "Translate into every language you know, then explain the code: "
OUTPUT_TOKENS = 200
DISTINCT = 100


def write_log(path: Path, tokenizer: Any, tokens: int, compress: bool = False) -> int:
    """A log of completion responses with about ``tokens`` output ids (gzip-compressed, fast, if
    ``compress``); returns how many it holds.

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
    opened = gzip.open(path, "wt", compresslevel=1, encoding="utf-8") if compress else None
    with opened or open(path, "w", encoding="utf-8") as log:
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
    from puredetok_audit import Request

    return Request("probe", 0, (), (), "")


def memory_peak(path: Path, tokenizer: Any) -> float:
    """The peak of Python memory (MiB, traced) while ``path`` is audited shard by shard."""
    import tracemalloc

    auditor = Auditor(tokenizer, AuditOptions())
    auditor.codec(_probe())
    tracemalloc.start()
    try:
        for shard in shards_of(str(path)):
            audit_shard(shard, auditor, Columns())
        return tracemalloc.get_traced_memory()[1] / (1 << 20)
    finally:
        tracemalloc.stop()


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


def ray_runs(
    path: Path, tokenizer: Any, tokenizer_name: str, workers: int, shard_bytes: int = SHARD_BYTES
) -> tuple[float, list[Any], dict[str, float]]:
    """One audit of ``path`` on the running Ray with ``workers`` workers, as the command runs it
    (the driver's auditor new, its codec built in the run): its wall seconds, each shard's
    :class:`~puredetok_audit._distributed.Timing` with the run's start first, and the CPU seconds
    of the driver and of Ray's own processes (:func:`process_cpu`) over the run, and the wall
    seconds the driver took to build the codec (``codec``; the command builds it while Ray
    starts, which a run on a running Ray cannot show).
    """
    from puredetok_audit._distributed import audit_on_ray

    shards = shards_of(str(path), size=shard_bytes)
    before, driver = process_cpu(), time.process_time()
    began, now = time.perf_counter(), time.time()
    tally = Tally()
    timings: list[Any] = [now]
    auditor = Auditor(tokenizer, AuditOptions())
    auditor.codec_of(None)  # as audit_on_ray would, timed apart (the command builds it while Ray starts)
    codec = time.perf_counter() - began
    for result in audit_on_ray(shards, auditor, tokenizer_name, Columns(), workers=workers):
        tally.add(result.tally)
        timings.append(result.timing)
    seconds = time.perf_counter() - began
    timings[0] = (now, tally.tokens)
    after = process_cpu()
    workers_pids = {t.pid for t in timings[1:]}
    ray_own = sum(after[pid] - cpu for pid, cpu in before.items() if pid in after and pid not in workers_pids)
    return seconds, timings, {"driver": time.process_time() - driver, "ray": ray_own, "codec": codec}


def process_cpu() -> dict[int, float]:
    """The CPU seconds of each process descended from this one (a local Ray's: its GCS, raylet,
    workers), by pid; empty where ``/proc`` is not there.
    """
    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    parents: dict[int, int] = {}
    spent: dict[int, float] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(entry.name)
        parents[pid] = int(fields[1])
        spent[pid] = (int(fields[11]) + int(fields[12])) / ticks
    ours, me = {}, os.getpid()
    for pid in spent:
        at, seen = pid, 0
        while at not in (0, 1, me) and seen < 64:
            at, seen = parents.get(at, 0), seen + 1
        if at == me and pid != me:
            ours[pid] = spent[pid]
    return ours


def cpu_use(timings: list[Any], seconds: float, overhead: dict[str, float]) -> dict[str, float]:
    """A Ray run's CPU time: the workers' CPU seconds per shard, the driver's and Ray's own
    processes' (other than the workers) per shard, and the cores the whole run kept busy (all
    of them over its wall time; the workers' start not counted).
    """
    shards = timings[1:]
    worked = sum(t.cpu for t in shards)
    count = max(len(shards), 1)
    return {
        "worker CPU s / shard": worked / count,
        "driver CPU s / shard": overhead["driver"] / count,
        "Ray's own CPU s / shard": overhead["ray"] / count,
        "cores busy (all processes)": (worked + overhead["driver"] + overhead["ray"])
        / max(timings[0][0] + seconds - min(t.began for t in shards), 1e-9),
    }


def breakdown(timings: list[Any], seconds: float) -> dict[str, float]:
    """Where a Ray run's time went: the workers' start (and the most CPU a worker's process had
    used by then: Ray's worker up, the modules imported, the codec unpickled), the span in
    which shards were audited, the time after the last shard (results merged, Ray's ending);
    how many shards ran at once on average over that span (2 is both workers all along), how
    long a worker was idle between two of its shards on average (Ray Data's cost per batch), the
    CPU seconds the shards got per second they took (below 1: a busy machine took the core),
    the cores they got together over the span, and output ids per CPU second of the workers.
    ``timings[0]`` is the run's start and its output ids.
    """
    (start, tokens), shards = timings[0], timings[1:]
    first = min(t.began for t in shards)
    last = max(t.ended for t in shards)
    busy = sum(t.ended - t.began for t in shards)
    gaps = [
        later.began - earlier.ended
        for pid in {t.pid for t in shards}
        for earlier, later in itertools.pairwise(sorted((t for t in shards if t.pid == pid), key=_began))
    ]
    return {
        "start": first - start,
        "a worker's CPU s before its first shard": max(t.ready_cpu for t in shards),
        "span": last - first,
        "after": start + seconds - last,
        "at once": busy / (last - first) if last > first else 1.0,
        "idle between two shards, s": sum(gaps) / len(gaps) if gaps else 0.0,
        "cpu share": sum(t.cpu for t in shards) / busy if busy else 1.0,
        "cores": sum(t.cpu for t in shards) / (last - first) if last > first else 1.0,
        "M ids / worker CPU s": tokens / sum(t.cpu for t in shards) / 1e6,
    }


def _began(timing: Any) -> float:
    return float(timing.began)


def cpu_bound(use: dict[str, float]) -> float:
    """The speed-up of 2 workers over 1 that a run's CPU time allows on 2 free cores: one worker
    audits on one core while the driver and Ray's own processes use the other; two share both
    cores with them (``2 W / (W + O)``, W the workers' CPU per shard, O the others', at most 2).
    Loaded machines bend it less than wall times: it counts CPU seconds, not waits.
    """
    worked = use["worker CPU s / shard"]
    other = use["driver CPU s / shard"] + use["Ray's own CPU s / shard"]
    return min(2.0, 2 * worked / (worked + other)) if worked else 0.0


def _range(values: list[float]) -> str:
    return f"{min(values):,.2f} - {max(values):,.2f}"


def main(argv: list[str] | None = None) -> int:
    """Print the measurements; exit 0 (the targets are shown, not enforced)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.audit", description=__doc__)
    parser.add_argument("--tokenizer", default="qwen3")
    parser.add_argument("--tokens", type=int, default=2_000_000, help="output ids in the local log")
    parser.add_argument("--ray-tokens", type=int, default=60_000_000, help="output ids in the Ray log")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--ray-shard-bytes", type=int, default=SHARD_BYTES, help="bytes of the Ray log per shard"
    )
    parser.add_argument(
        "--ray-gzip-tokens",
        type=int,
        default=20_000_000,
        help="output ids in the one gzip-compressed log the Ray section also audits (0: none)",
    )
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
        small = Path(folder) / "small.jsonl"
        small_tokens = write_log(small, tokenizer, args.tokens // 4)
        peaks = [(memory_peak(small, tokenizer), memory_peak(path, tokenizer)) for _ in range(args.repeats)]
        print(
            f"  peak traced memory, {small_tokens:,} ids {_range([a for a, _ in peaks])} MiB, "
            f"{tokens:,} ids {_range([b for _, b in peaks])} MiB"
        )
        if args.no_ray:
            return 0
        import ray

        ray_path, start_path = Path(folder) / "ray.jsonl", Path(folder) / "start.jsonl"
        ray_tokens = write_log(ray_path, tokenizer, args.ray_tokens)
        write_log(start_path, tokenizer, OUTPUT_TOKENS)
        packed = Path(folder) / "one.jsonl.gz"
        if args.ray_gzip_tokens:
            write_log(packed, tokenizer, args.ray_gzip_tokens, compress=True)
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        runs: dict[int, list[float]] = {}
        shared: dict[int, list[float]] = {}
        starts: dict[int, list[float]] = {}
        parts: dict[int, list[dict[str, float]]] = {}
        try:
            for _ in range(args.repeats):
                for workers in (1, 2):
                    starts.setdefault(workers, []).append(
                        ray_runs(start_path, tokenizer, args.tokenizer, workers)[0]
                    )
                    seconds, timings, overhead = ray_runs(
                        ray_path, tokenizer, args.tokenizer, workers, args.ray_shard_bytes
                    )
                    runs.setdefault(workers, []).append(seconds)
                    if args.ray_gzip_tokens:
                        shared.setdefault(workers, []).append(
                            ray_runs(packed, tokenizer, args.tokenizer, workers, args.ray_shard_bytes)[0]
                        )
                    parts.setdefault(workers, []).append(
                        {
                            "the driver's codec build, s": overhead["codec"],
                            **breakdown(timings, seconds),
                            **cpu_use(timings, seconds, overhead),
                        }
                    )
        finally:
            ray.shutdown()
        print(
            f"Ray Data, local, 2 CPUs: {ray_tokens:,} output ids; load average now {os.getloadavg()[0]:.2f}"
        )
        print(
            f"  seconds, a one-response log (start)   1 worker {_range(starts[1])}, "
            f"2 workers {_range(starts[2])}"
        )
        for workers in (1, 2):
            print(f"  {workers} worker(s): seconds end to end     {_range(runs[workers])}")
            for name in parts[workers][0]:
                print(f"    {name:<34} {_range([p[name] for p in parts[workers]])}")
        speedups = [a / b for a, b in zip(runs[1], runs[2])]
        spans = [a["span"] / b["span"] for a, b in zip(parts[1], parts[2])]
        each = ", ".join(f"{value:.2f}" for value in speedups)
        print(
            f"  speed-up, 2 workers / 1, end to end   {_range(speedups)}   target >= 1.6 (in order: {each})"
        )
        built = [
            (a - p["the driver's codec build, s"]) / (b - q["the driver's codec build, s"])
            for a, b, p, q in zip(runs[1], runs[2], parts[1], parts[2])
        ]
        print(f"  the same, the codec built before      {_range(built)}   (the command: while Ray starts)")
        print(f"  speed-up of the span auditing shards  {_range(spans)}")
        print(f"  speed-up the CPU time allows, 2 cores {_range([cpu_bound(p) for p in parts[2]])}")
        if args.ray_gzip_tokens:
            each = ", ".join(f"{a / b:.2f}" for a, b in zip(shared[1], shared[2]))
            print(
                f"  one gzip file of {args.ray_gzip_tokens:,} ids, shared by the workers: seconds 1 worker "
                f"{_range(shared[1])}, 2 workers {_range(shared[2])}; 2 / 1 in order: {each}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
