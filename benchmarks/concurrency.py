"""How the cost of one decode step grows with the number of concurrent streams:
``python -m benchmarks.concurrency``.

Concurrency is where the field's detokenizers hurt (SGLang issue 23393: 180 ms between tokens at
1,024 streams against 39 ms with its tokenizer process skipped). One decode step gives every live
stream one id. At each concurrency (256, 1,024 and 4,096 by default) that many requests of
``--length`` ids are live at once, staggered as continuous batching staggers them: in every step
about ``streams / length`` of them take their last id and as many new ones take their first, so
every concurrency has the same mix of openings, mid-stream steps and ends. Two sides, in this
process, on the same ids (the manager section's workload, :mod:`benchmarks.manager`):

* **puredetok**: ``DetokenizeManager.handle_batch`` with the serving parameters (4 stop strings,
  the tokenizer's EOS ids, ``min_tokens``, ``max_new_tokens``), one batch per step, made beforehand;
* **two-window**: the engines' two-window algorithm batched as engines batch it (two
  ``batch_decode`` calls per step over all streams: :class:`~benchmarks.manager.BatchedTwoWindow`);

and, against the first, the same manager with Python's garbage collector held to between steps, as
puredetok's worker holds it (the process has frozen its start-up objects in both: ``gc.freeze``).

Every round runs every side at every concurrency in turn, each on ``--tokens`` ids (``tokens /
streams`` steps, continuing its streams from the round before), so that machine noise hits them
all alike; the best round of each is kept, and the whole is repeated (``--repeats``), every figure
printed as its range over the repeats: per step, milliseconds; per stream, the step's time over
the streams (flat across concurrencies: O(1) per token); the ratio of the two sides; and the growth
of each side's per-stream cost from the smallest concurrency to the largest (flat: 1.0). Each is
printed in wall-clock time, then in CPU time (of the measuring thread; a side in another process,
that process's own), which other jobs on a shared machine disturb much less. Then the memory each
side holds per live stream (tracemalloc, after ``length`` steps: every stream is past its first
request).
"""

from __future__ import annotations

__all__ = [
    "CONCURRENCIES",
    "Step",
    "Churn",
    "Level",
    "Pair",
    "IN_PROCESS",
    "COLLECTOR",
    "Samples",
    "process_clock",
    "in_process_levels",
    "measure",
    "report",
    "memory_per_stream",
    "main",
]

import argparse
import functools
import gc
import os
import platform
import sys
import time
import tracemalloc
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from benchmarks.manager import BatchedTwoWindow, serving_params
from puredetok.cli._measure import trace_ids
from puredetok.cli._timing import Result, ratio_result, repeated
from puredetok.serving._codec_cache import CodecCache
from puredetok.serving._detokenize_manager import DetokenizeManager
from puredetok.serving._loading import load_tokenizer
from puredetok.serving._messages import DetokenizeBatch, Opening
from puredetok.worker._worker import _Collector

CONCURRENCIES = (256, 1_024, 4_096)
"""The concurrent streams measured by default."""

LENGTH = 256
"""Ids per request by default (SGLang's bench: ``max_tokens`` 256)."""

TOKENS = 32_768
"""Ids each side handles per round and concurrency by default (``TOKENS / streams`` steps)."""


@attrs.frozen
class Step:
    """One decode step: stream ``n`` (its slot) is request ``uids[n]`` and gets id ``tokens[n]``;
    the slots in ``opened`` start a request with it, those in ``ended`` end theirs with it.
    """

    uids: tuple[int, ...]
    tokens: tuple[int, ...]
    opened: tuple[int, ...]
    ended: tuple[int, ...]


class Churn:
    """The steps of ``streams`` concurrent requests of ``length`` ids each, continuous batching:
    slot ``n`` starts ``n * length // streams`` ids into its first request (so the requests end
    in different steps), and a slot whose request took its last id starts a new request (a new
    uid) in the next step. In the first step every slot opens its request. The ids are the
    mixed-script trace's, each slot at its own offset.
    """

    def __init__(self, trace: Sequence[int], streams: int, length: int) -> None:
        if streams < 1 or length < 1 or not trace:
            raise ValueError("a churn needs streams >= 1, length >= 1 and a trace")
        self.trace = trace
        self.streams = streams
        self.length = length
        self.steps = 0
        """How many steps were made."""

    def next(self) -> Step:
        """The next step."""
        now, streams, length, trace = self.steps, self.streams, self.length, self.trace
        self.steps += 1
        uids, tokens, opened, ended = [], [], [], []
        for slot in range(streams):
            generation, position = divmod(now + slot * length // streams, length)
            uids.append(generation * streams + slot)
            tokens.append(trace[(slot * 97 + now) % len(trace)])
            if position == 0 or now == 0:
                opened.append(slot)
            if position == length - 1:
                ended.append(slot)
        return Step(tuple(uids), tuple(tokens), tuple(opened), tuple(ended))


def _batch(step: Step, opening: Opening) -> DetokenizeBatch:
    """The manager's batch of ``step``: each request opened with ``opening``, ended by the scheduler."""
    return DetokenizeBatch(
        step.uids, step.tokens, finished=step.ended, opens=tuple((slot, opening) for slot in step.opened)
    )


@attrs.frozen
class Level:
    """One concurrency of a benchmark: its streams, the steps per round, and the runs.

    ``prepare`` makes a round's input (timed apart, and not shown); each of ``sides`` runs the
    round prepared last, continuing its own streams. ``clocks`` reads, in nanoseconds, the CPU
    time of where a side runs (the measuring thread by default; another process's own).
    """

    streams: int
    steps: int
    prepare: Callable[[], object]
    sides: Mapping[str, Callable[[], object]]
    clocks: Mapping[str, Callable[[], int]] = attrs.field(factory=dict)


@attrs.frozen
class Samples:
    """Per repeat, the best nanoseconds per step of every side at every level (keyed ``"SIDE
    STREAMS"``), in wall-clock time and in CPU time.
    """

    wall: list[dict[str, float]]
    cpu: list[dict[str, float]]


@attrs.frozen
class Pair:
    """Two sides printed side by side, ``ours`` against ``theirs``."""

    title: str
    ours: str
    theirs: str
    ours_label: str
    theirs_label: str


MANAGER = "puredetok"
BETWEEN = "puredetok, collector between steps"
TWO_WINDOW = "two-window"
IN_PROCESS = Pair(
    "in process: DetokenizeManager.handle_batch (4 stops + EOS + min/max tokens) against the two-window "
    "algorithm batched (2 batch_decode per step)",
    MANAGER,
    TWO_WINDOW,
    "handle_batch",
    "two-window",
)
"""The in-process pair."""

COLLECTOR = Pair(
    "in process: DetokenizeManager.handle_batch with Python's garbage collector held to between steps, as "
    "puredetok's worker holds it, against with the collector as it comes (both after gc.freeze)",
    BETWEEN,
    MANAGER,
    "between steps",
    "as it comes",
)
"""The manager with the worker's collector against the manager with the default one."""


class _InProcess:
    """The in-process sides at one concurrency, fed the same steps: the manager (twice: with the
    garbage collector as it comes, and held to between steps) and the batched two-window algorithm.
    """

    def __init__(
        self, tokenizer: Any, trace: Sequence[int], streams: int, length: int, codecs: CodecCache
    ) -> None:
        self.churn = Churn(trace, streams, length)
        self.opening = Opening((), serving_params(length))
        self.manager = DetokenizeManager(tokenizer, codecs=codecs, remember_ended=0)
        self.between = DetokenizeManager(tokenizer, codecs=codecs, remember_ended=0)
        self.two_window = BatchedTwoWindow(tokenizer, streams)
        self.steps: list[Step] = []
        self.batches: list[DetokenizeBatch] = []
        self.collections = 0
        """Collections run between steps (:meth:`run_between`)."""

    def prepare(self, steps: int) -> None:
        """Make the next ``steps`` steps (both sides run them next)."""
        self.steps = [self.churn.next() for _ in range(steps)]
        self.batches = [_batch(step, self.opening) for step in self.steps]

    def run_manager(self) -> None:
        """The prepared steps through ``handle_batch``."""
        handle = self.manager.handle_batch
        for batch in self.batches:
            errors = handle(batch).errors
            if errors:
                raise AssertionError(f"the manager refused a message: {errors[0]}")

    def run_between(self) -> None:
        """The prepared steps through ``handle_batch`` of the second manager, with the collector
        off during a step and run between two steps once ``_Collector.BUSY`` objects have piled up
        (every ``FULL_EVERY``-th collection the oldest generation too), as puredetok's worker runs
        it (docs/worker.md).
        """
        handle, busy, full = self.between.handle_batch, _Collector.BUSY, _Collector.FULL_EVERY
        enabled = gc.isenabled()
        gc.disable()
        try:
            for batch in self.batches:
                errors = handle(batch).errors
                if errors:
                    raise AssertionError(f"the manager refused a message: {errors[0]}")
                if gc.get_count()[0] > busy:
                    self.collections += 1
                    gc.collect(2 if self.collections % full == 0 else 1)
        finally:
            if enabled:
                gc.enable()

    def run_two_window(self) -> None:
        """The prepared steps through the two-window algorithm (a new request starts a new row)."""
        engine = self.two_window
        ids, prefix, read = engine.ids, engine.prefix, engine.read
        for step in self.steps:
            for slot in step.opened:
                ids[slot] = []
                prefix[slot] = read[slot] = 0
            engine.step(step.tokens)


def in_process_levels(
    tokenizer: Any,
    concurrencies: Sequence[int] = CONCURRENCIES,
    length: int = LENGTH,
    tokens: int = TOKENS,
    codecs: CodecCache | None = None,
) -> list[Level]:
    """The in-process pair's levels, one per concurrency; each has run its first step (every
    request opening) untimed.
    """
    trace = trace_ids(tokenizer, 4_096)
    codecs = CodecCache() if codecs is None else codecs
    levels = []
    for streams in concurrencies:
        sides = _InProcess(tokenizer, trace, streams, length, codecs)
        sides.prepare(1)
        sides.run_manager()
        sides.run_between()
        sides.run_two_window()
        steps = max(1, tokens // streams)
        levels.append(
            Level(
                streams,
                steps,
                functools.partial(sides.prepare, steps),
                {MANAGER: sides.run_manager, BETWEEN: sides.run_between, TWO_WINDOW: sides.run_two_window},
            )
        )
    return levels


def _key(side: str, streams: int) -> str:
    return f"{side} {streams}"


def measure(levels: Sequence[Level], rounds: int, repeats: int) -> Samples:
    """Every side at every level: the rounds interleave every level's preparation and sides
    (:func:`~puredetok.cli._timing.repeated`, wall-clock), and each side's CPU time is read
    around each of its runs.
    """
    spent: dict[str, list[int]] = {}
    runs: list[tuple[str, Callable[[], object]]] = []
    for level in levels:
        runs.append((f"prepare {level.streams}", level.prepare))
        for side, run in level.sides.items():
            key = _key(side, level.streams)
            spent[key] = []
            runs.append((key, _clocked(run, level.clocks.get(side, time.thread_time_ns), spent[key])))
    per_round = repeated(runs, 1, rounds, repeats)
    steps = {_key(side, level.streams): level.steps for level in levels for side in level.sides}
    wall = [{key: sample[key] / steps[key] for key in steps} for sample in per_round]
    cpu = [
        {key: min(spent[key][repeat * rounds : (repeat + 1) * rounds]) / steps[key] for key in steps}
        for repeat in range(len(per_round))
    ]
    return Samples(wall, cpu)


def _clocked(run: Callable[[], object], clock: Callable[[], int], spent: list[int]) -> Callable[[], None]:
    """``run``, adding the CPU time it took to ``spent``."""

    def clocked() -> None:
        began = clock()
        run()
        spent.append(clock() - began)

    return clocked


def process_clock(pid: int) -> Callable[[], int]:
    """The CPU time of process ``pid`` (all its threads), in nanoseconds: from Linux's
    ``/proc/PID/task/*/schedstat``, or, where the kernel does not keep it, ``/proc/PID/stat``'s
    clock ticks (10 ms each, usually).
    """
    tasks = Path(f"/proc/{pid}/task")

    def exact() -> int:
        total = 0
        for task in tasks.iterdir():
            try:
                total += int((task / "schedstat").read_text().split()[0])
            except (FileNotFoundError, ProcessLookupError):  # a thread that ended meanwhile
                pass
        return total

    def ticks() -> int:
        # the fields after the command's closing parenthesis; utime and stime are the 12th and 13th
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) * 1_000_000_000 // os.sysconf("SC_CLK_TCK")

    try:
        return exact if exact() > 0 else ticks
    except OSError:
        return ticks


def _span(values: Sequence[float], scale: float, digits: int) -> str:
    low, high = min(values) * scale, max(values) * scale
    return f"{low:,.{digits}f} - {high:,.{digits}f}"


def _ratio(result: Result) -> str:
    assert result.low is not None and result.high is not None
    return f"{result.low:.2f} - {result.high:.2f}"


def per_stream(samples: Sequence[dict[str, float]]) -> list[dict[str, float]]:
    """The samples of :func:`measure` divided by each level's streams: nanoseconds per stream."""
    return [{key: value / int(key.rsplit(" ", 1)[1]) for key, value in sample.items()} for sample in samples]


def report(
    pair: Pair,
    samples: Samples,
    concurrencies: Sequence[int],
    memory: Mapping[int, tuple[float, float]] | None = None,
) -> str:
    """The pair's tables, in wall-clock time then in CPU time: per concurrency, each side's
    milliseconds per step and microseconds per stream, ``ours / theirs`` (and the bytes each
    holds per stream, ``memory``, if measured); then the growth of each side's per-stream cost from
    the first concurrency to the last. Every figure is its range over the repeats.
    """
    return "\n".join(
        [
            pair.title,
            *_table("wall-clock", pair, samples.wall, concurrencies, memory),
            *_table("CPU time (of this thread; of a process, its own)", pair, samples.cpu, concurrencies),
        ]
    )


def _table(
    clock: str,
    pair: Pair,
    samples: Sequence[dict[str, float]],
    concurrencies: Sequence[int],
    memory: Mapping[int, tuple[float, float]] | None = None,
) -> list[str]:
    streams_samples = per_stream(samples)
    lines = [
        f"  {clock}",
        f"  {'streams':>7}  {pair.ours_label + ' ms/step':>22} {'us/stream':>13}"
        f"  {pair.theirs_label + ' ms/step':>22} {'us/stream':>13}  {'ours / theirs':>13}"
        + ("  memory/stream (ours, theirs)" if memory else ""),
    ]
    for streams in concurrencies:
        ours, theirs = _key(pair.ours, streams), _key(pair.theirs, streams)
        ratio = ratio_result(ours, samples, theirs)
        line = (
            f"  {streams:>7,}  {_span([s[ours] for s in samples], 1e-6, 3):>22}"
            f" {_span([s[ours] for s in streams_samples], 1e-3, 2):>13}"
            f"  {_span([s[theirs] for s in samples], 1e-6, 3):>22}"
            f" {_span([s[theirs] for s in streams_samples], 1e-3, 2):>13}  {_ratio(ratio):>13}"
        )
        if memory and streams in memory:
            line += f"  {memory[streams][0]:,.0f} B, {memory[streams][1]:,.0f} B"
        lines.append(line)
    first, last = concurrencies[0], concurrencies[-1]
    if last != first:
        growth = [
            f"{label} {_ratio(ratio_result(_key(side, last), streams_samples, _key(side, first)))}"
            for side, label in ((pair.ours, pair.ours_label), (pair.theirs, pair.theirs_label))
        ]
        lines.append(f"  per-stream cost at {last:,} / at {first:,} streams (flat: 1.0): {', '.join(growth)}")
    return lines


def memory_per_stream(
    tokenizer: Any, streams: int, length: int = LENGTH, codecs: CodecCache | None = None
) -> tuple[float, float]:
    """Bytes each in-process side holds per live stream (tracemalloc) after ``length + 1`` steps
    (every stream is then past its first request, at any point of its second): the manager's,
    the two-window algorithm's.
    """
    trace = trace_ids(tokenizer, 4_096)
    held = []
    for run in ("run_manager", "run_two_window"):
        sides = _InProcess(tokenizer, trace, streams, length, CodecCache() if codecs is None else codecs)
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for _ in range(length + 1):
                sides.prepare(1)
                getattr(sides, run)()
            sides.prepare(0)  # drops the last step's input
            gc.collect()
            held.append((tracemalloc.get_traced_memory()[0] - before) / streams)
        finally:
            tracemalloc.stop()
    return held[0], held[1]


def header(
    what: str, concurrencies: Sequence[int], length: int, tokens: int, rounds: int, repeats: int
) -> str:
    """The run's first line: what, the machine, the load average now."""
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    return (
        f"{what}: {', '.join(f'{n:,}' for n in concurrencies)} concurrent streams, one id each per step,"
        f" requests of {length} ids (continuous batching), {tokens:,} ids per side and concurrency per round;"
        f" {repeats} repeats of {rounds} rounds (best of each; ranges over the repeats);"
        f" Python {platform.python_version()}, {os.cpu_count()} cores,"
        f" load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )


def parser(prog: str, description: str) -> argparse.ArgumentParser:
    """The options both concurrency benchmarks take."""
    made = argparse.ArgumentParser(prog=prog, description=description)
    made.add_argument(
        "--streams",
        default=",".join(map(str, CONCURRENCIES)),
        help="the concurrencies, comma-separated (default: 256,1024,4096)",
    )
    made.add_argument("--length", type=int, default=LENGTH, help=f"ids per request (default: {LENGTH})")
    made.add_argument(
        "--tokens",
        type=int,
        default=TOKENS,
        help=f"ids per side and concurrency per round (default: {TOKENS})",
    )
    made.add_argument(
        "--rounds", type=int, default=5, help="interleaved rounds per repeat (best of; default 5)"
    )
    made.add_argument("--repeats", type=int, default=3, help="repeats, shown as ranges (default 3)")
    made.add_argument("--no-memory", action="store_true", help="skip the memory per stream")
    return made


def concurrencies_of(args: argparse.Namespace, made: argparse.ArgumentParser) -> list[int]:
    """The checked ``--streams`` (and the other counts), or a usage error."""
    try:
        counts = [int(part) for part in args.streams.split(",")]
    except ValueError:
        made.error(f"--streams takes comma-separated counts, not {args.streams!r}")
    if not counts or min(counts) < 1 or len(set(counts)) != len(counts):
        made.error("--streams takes distinct counts >= 1")
    if min(args.length, args.tokens, args.rounds, args.repeats) < 1:
        made.error("--length, --tokens, --rounds and --repeats must be >= 1")
    return counts


def main(argv: Sequence[str] | None = None) -> int:
    """Print the in-process pair on one tokenizer."""
    made = parser("python -m benchmarks.concurrency", __doc__.split("\n")[0] if __doc__ else "")
    made.add_argument("--tokenizer", default=None, help="a tokenizer folder (default: the packaged Qwen3)")
    args = made.parse_args(argv)
    concurrencies = concurrencies_of(args, made)
    tokenizer = load_tokenizer(args.tokenizer)
    print(header("concurrency", concurrencies, args.length, args.tokens, args.rounds, args.repeats))
    codecs = CodecCache()
    levels = in_process_levels(tokenizer, concurrencies, args.length, args.tokens, codecs)
    gc.freeze()  # a serving process freezes its start-up objects (see the worker)
    samples = measure(levels, args.rounds, args.repeats)
    memory = None
    if not args.no_memory:
        memory = {
            streams: memory_per_stream(tokenizer, streams, args.length, codecs) for streams in concurrencies
        }
    print(report(IN_PROCESS, samples, concurrencies, memory))
    print(report(COLLECTOR, samples, concurrencies))
    return 0


if __name__ == "__main__":
    sys.exit(main())
