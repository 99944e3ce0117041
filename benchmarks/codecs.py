"""Codecs for new decode options ("no request stalls another"), side by side in one run.

``python -m benchmarks.codecs [--tokenizer NAME_OR_FOLDER ...] [--repeats N]`` prints, per tokenizer:

* **other streams while a new option set's first request is served**: eight streams send one id
  each per round through a real ``puredetok serve`` process and wait for their eight replies; in
  the middle of it a ninth request opens with decode options the worker has not seen (one new set
  per repeat: ``skip_special_tokens=False``, ``clean_up_tokenization_spaces=True``, both). Shown:
  the rounds' steady latency, their worst latency while the codec was built (from the opening
  until its request's first reply), and beside them how long building that codec takes in this
  process: what the worker's loop used to stall every stream for, as it built it there. Target:
  worst <= 50 ms.
* **a new max_byte_run**: the time and the memory of the codec for a new cap, derived from the
  codec already built (what the worker does now), beside building it from scratch (what it did).
  Targets: <= 50 ms, <= 5 MB.
"""

from __future__ import annotations

__all__ = ["main"]

import argparse
import os
import statistics
import tempfile
import time
import tracemalloc
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.worker import _Served
from puredetok import codec_for
from puredetok.serving._codec_cache import CodecCache, Setting
from puredetok.serving._detokenize_manager import DetokenizeManager
from puredetok.serving._loading import load_tokenizer
from puredetok.serving._messages import DetokenizeMsg, Opening, SamplingParams
from puredetok.worker._wire import encode_batch

STREAMS = 8
NEW_OPTIONS = (
    SamplingParams(skip_special_tokens=False, ignore_eos=True),
    SamplingParams(clean_up_tokenization_spaces=True, ignore_eos=True),
    SamplingParams(skip_special_tokens=False, clean_up_tokenization_spaces=False, ignore_eos=True),
    SamplingParams(out_of_vocab="ignore", ignore_eos=True),
)
"""One new option set per repeat (each builds a codec the worker has not built yet)."""


def _latencies(served: _Served, ids: Sequence[int], options: SamplingParams) -> tuple[float, float]:
    """Median round latency before the new request, and the worst while its codec was built (s)."""
    opening = Opening((), SamplingParams(ignore_eos=True))
    served.push.send(
        encode_batch([DetokenizeMsg(f"s{n}", (ids[0],), False, opening) for n in range(STREAMS)])
    )
    served.replies(STREAMS)
    rounds = [
        encode_batch([DetokenizeMsg(f"s{n}", (ids[(k + n) % len(ids)],)) for n in range(STREAMS)])
        for k in range(64)
    ]
    steady = []
    for frame in rounds * 4:
        began = time.perf_counter()
        served.push.send(frame)
        served.replies(STREAMS)
        steady.append(time.perf_counter() - began)
    new = f"new-{time.monotonic_ns()}"
    served.push.send(encode_batch([DetokenizeMsg(new, (ids[0],), False, Opening((), options))]))
    worst, waiting, count = 0.0, True, 0
    while waiting:
        began = time.perf_counter()
        served.push.send(rounds[count % len(rounds)])
        count += 1
        got = 0
        while got < STREAMS:
            if not served.frontend.poll(60_000):
                raise RuntimeError("the worker stopped answering")
            _, _, replies = served.split.decode(served.frontend.recv())
            uids = [bytes(uid) for uid in replies.uids]
            if any(new.encode() in uid for uid in uids):
                waiting = False
            got += sum(new.encode() not in uid for uid in uids)
        worst = max(worst, time.perf_counter() - began)
    served.push.send(encode_batch([DetokenizeMsg(new, (), True)]))
    served.replies(1)
    return statistics.median(steady), worst


def _build_seconds(manager: DetokenizeManager, options: SamplingParams) -> float:
    """How long building the codec of ``options`` takes (what the worker's loop stalled for)."""
    codecs = CodecCache()  # a cache of its own: the build is not found in the manager's
    codecs.read(manager.tokenizer)  # as the worker's manager read it, before the loop
    began = time.perf_counter()
    codecs.codec(manager.tokenizer, Setting().options_of(options))
    return time.perf_counter() - began


def _byte_run(tokenizer: Any, cap: int) -> tuple[float, int, float, int]:
    """A new cap: seconds and bytes derived from the built codec, and built from scratch."""
    manager = DetokenizeManager(tokenizer)
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    derived = manager.codec(max_byte_run=cap)
    derived_bytes = tracemalloc.get_traced_memory()[0] - before
    before = tracemalloc.get_traced_memory()[0]
    built = codec_for(tokenizer, skip_special_tokens=True, max_byte_run=cap)
    built_bytes = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert derived == built
    began = time.perf_counter()
    manager.codec(max_byte_run=cap + 1)
    derived_seconds = time.perf_counter() - began
    began = time.perf_counter()
    codec_for(tokenizer, skip_special_tokens=True, max_byte_run=cap + 1)
    built_seconds = time.perf_counter() - began
    return derived_seconds, derived_bytes, built_seconds, built_bytes


def _span(values: Sequence[float], scale: float, unit: str) -> str:
    low, high = min(values) * scale, max(values) * scale
    return f"{low:.1f} - {high:.1f} {unit}" if high - low >= 0.05 else f"{low:.1f} {unit}"


def main(argv: Sequence[str] | None = None) -> int:
    """Print both sections for each tokenizer."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.codecs", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--tokenizer", action="append", default=None, help="name or folder (repeatable; default: qwen3)"
    )
    parser.add_argument("--repeats", type=int, default=3, help="repeats, at least 3 (default: %(default)s)")
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.repeats > len(NEW_OPTIONS):
        raise SystemExit(f"--repeats must be 1 - {len(NEW_OPTIONS)}")
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}, {os.cpu_count()} cores")
    for name in args.tokenizer or ["qwen3"]:
        tokenizer = load_tokenizer(name)
        ids = list(tokenizer.encode("Streams go on while a codec is built beside the loop. 🦩 ok"))
        manager = DetokenizeManager(tokenizer)
        steady, worst, built = [], [], []
        with tempfile.TemporaryDirectory() as folder:
            served = _Served(str(name), Path(folder))
            try:
                for options in NEW_OPTIONS[: args.repeats]:
                    median, most = _latencies(served, ids, options)
                    steady.append(median)
                    worst.append(most)
                    built.append(_build_seconds(manager, options))
            finally:
                served.close()
        runs = [_byte_run(tokenizer, 3 + repeat) for repeat in range(args.repeats)]
        rows = [
            ("other streams, steady round latency", _span(steady, 1e3, "ms"), ""),
            ("other streams, worst while a codec builds", _span(worst, 1e3, "ms"), "target <= 50 ms"),
            ("the codec's build (the stall before)", _span(built, 1e3, "ms"), ""),
            ("new max_byte_run, derived: time", _span([r[0] for r in runs], 1e3, "ms"), "target <= 50 ms"),
            (
                "new max_byte_run, derived: memory",
                _span([r[1] for r in runs], 1 / 2**10, "KB"),
                "target <= 5 MB",
            ),
            ("new max_byte_run, rebuilt: time", _span([r[2] for r in runs], 1e3, "ms"), ""),
            ("new max_byte_run, rebuilt: memory", _span([r[3] for r in runs], 1 / 2**20, "MB"), ""),
        ]
        print(f"\n{name}: {args.repeats} repeats")
        for label, value, target in rows:
            print(f"  {label:<44}{value:<22}{target}")
    print(f"\nload average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
