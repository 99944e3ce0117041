"""The adversarial benchmark: what a hostile peer, or a scheduler that has fallen behind, can make
the worker pay.

- The manager's per-message time for batches of 2,000 and 32,000 messages of each adversarial
  shape, beside the batch of distinct live requests (the ratios: 32,000 against 2,000 of the same
  shape, and each shape against the all-live batch of the same size).
- The stop rules' build time for one stop string of 1k, 4k and 16k characters (ratio to 1k).
- A worker process's health-check latency after the worst frame within its limits.
- A worker process's memory while its frontend never reads, and whether every stream is complete
  and exact once it reads again.
- The tokenize path, replay and audit (:mod:`benchmarks.inputs`).

Run ``python -m benchmarks.adversarial`` (or ``python3 tasks.py bench --adversarial``).
"""

from __future__ import annotations

__all__ = [
    "SHAPES",
    "shape_batch",
    "manager_shapes_section",
    "stop_build_section",
    "health_section",
    "stalled_section",
    "worst_frame",
    "adversarial_main",
]

import argparse
import gc
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import zmq

from benchmarks.inputs import events_section, tokenize_section, wire_section
from puredetok import codec_for, feed, finish, start
from puredetok.cli._measure import trace_ids
from puredetok.cli._timing import Result, format_table
from puredetok.serving._codec_cache import CodecCache
from puredetok.serving._detokenize_manager import DetokenizeManager
from puredetok.serving._messages import (
    TO_FRONTEND,
    DetokenizeBatch,
    DetokenizeMsg,
    HealthCheckMsg,
    HealthReply,
    Opening,
    ReadyMsg,
    SamplingParams,
    UserReply,
)
from puredetok.stops import StopRules
from puredetok.worker._wire import FrameDecoder, encode_batch, encode_frame

_cpu_ns = time.thread_time_ns
"""The in-process sections time the CPU this thread spends: on a shared machine, wall-clock time
of a longer run takes in more of the time other processes run (the 32,000-message batches then
looked 2-4 times slower per message than the 2,000-message ones on a machine with a load of 15
on 2 cores, while their CPU time per message was within 15 %)."""

SIZES = (2_000, 32_000)
"""The batch sizes each shape is measured at."""

SHAPE_TARGET = 2.0
"""Per-message time at 32,000 messages within this factor of that at 2,000, for every shape."""

LIVE_TARGET = 10.0
"""No shape's per-message time over this many times the all-live batch's."""

BUILD_TARGET = 20.0
"""The stop rules of a 16k-character stop string built within this many times those of 1k."""

_Setup = Callable[[DetokenizeManager], None]


def _opened(count: int) -> _Setup:
    def setup(manager: DetokenizeManager) -> None:
        for uid in range(count):
            manager.open(uid)

    return setup


def _ended(count: int) -> _Setup:
    def setup(manager: DetokenizeManager) -> None:
        manager.abort(range(1_000_000, 1_000_000 + count))

    return setup


def shape_batch(shape: str, size: int, ids: list[int]) -> tuple[_Setup, list[DetokenizeMsg]]:
    """The manager's state before the batch (a function that sets it up) and the batch of ``size``
    messages of ``shape`` (one of :data:`SHAPES`), one id each from ``ids``.
    """
    token = ids.__getitem__
    n = len(ids)
    if shape == "all live":
        return _opened(size), [DetokenizeMsg(k, (token(k % n),)) for k in range(size)]
    if shape == "one request":
        return _opened(1), [DetokenizeMsg(0, (token(k % n),)) for k in range(size)]
    if shape == "live and unknown":
        return _opened(size), [DetokenizeMsg(k if k % 2 else -k - 1, (token(k % n),)) for k in range(size)]
    if shape == "unknown, finished":
        return _opened(0), [DetokenizeMsg(-k - 1, (token(k % n),), True) for k in range(size)]
    if shape == "ended":
        return _ended(size), [DetokenizeMsg(1_000_000 + k, (token(k % n),)) for k in range(size)]
    if shape == "two requests":
        return _opened(2), [DetokenizeMsg(k % 2, (token(k % n),)) for k in range(size)]
    if shape == "open, tokens, end":
        # Each request opens, gets a message and ends, in turn: many openings and ends in one batch.
        messages = []
        for k in range(size):
            uid, step = k // 3, k % 3
            opening = Opening() if step == 0 else None
            messages.append(DetokenizeMsg(uid, (token(k % n),), step == 2, opening))
        return _opened(0), messages
    if shape == "open repeated":
        # The same uid opened again and again: one opening taken, the rest refused.
        return _opened(0), [DetokenizeMsg(7, (token(k % n),), False, Opening()) for k in range(size)]
    raise ValueError(f"unknown shape {shape!r}")


SHAPES = (
    "all live",
    "one request",
    "two requests",
    "live and unknown",
    "unknown, finished",
    "ended",
    "open, tokens, end",
    "open repeated",
)
"""The batch shapes: distinct live requests (the reference), then the adversarial ones."""


def _time_shape(tokenizer: Any, codecs: CodecCache, shape: str, size: int, ids: list[int]) -> float:
    """Best of five: CPU nanoseconds per message of ``handle_batch`` on a fresh manager."""
    setup, messages = shape_batch(shape, size, ids)
    batch = DetokenizeBatch.of(messages)
    best = float("inf")
    for _ in range(5):
        manager = DetokenizeManager(tokenizer, codecs=codecs, max_live=2 * size + 1)
        setup(manager)
        gc.collect()
        gc.disable()  # as in the worker, which collects between batches (see Worker's collector)
        try:
            began = _cpu_ns()
            manager.handle_batch(batch)
            best = min(best, (_cpu_ns() - began) / size)
        finally:
            gc.enable()
    return best


def manager_shapes_section(tokenizer: Any, sizes: tuple[int, int] = SIZES) -> list[Result]:
    """Per shape and size, ns per message; ratio: 32k against 2k of the shape (for the large size)
    and, on a second line, the shape against the all-live batch at the large size.
    """
    ids = trace_ids(tokenizer, 4_096)
    codecs = CodecCache()
    small, large = sizes
    times = {
        (shape, size): _time_shape(tokenizer, codecs, shape, size, ids) for shape in SHAPES for size in sizes
    }
    results = []
    for shape in SHAPES:
        results.append(Result(f"{shape}, {small:,} messages", times[shape, small]))
        growth = times[shape, large] / times[shape, small]
        results.append(
            Result(
                f"{shape}, {large:,} messages (ratio: to {small:,})",
                times[shape, large],
                growth,
                f"<= {SHAPE_TARGET:g}",
                growth <= SHAPE_TARGET,
            )
        )
    for shape in SHAPES[1:]:
        against = max(times[shape, size] / times["all live", size] for size in sizes)
        results.append(
            Result(
                f"{shape} / all live (worse of the two sizes)",
                times[shape, large],
                against,
                f"<= {LIVE_TARGET:g}",
                against <= LIVE_TARGET,
            )
        )
    return results


def _build_ns(stops: list[str], rounds: int = 7) -> list[float]:
    """Best of ``rounds``, interleaved: nanoseconds to build the stop rules of each stop string."""
    best = [float("inf")] * len(stops)
    for _ in range(rounds):
        for index, stop in enumerate(stops):
            began = _cpu_ns()
            StopRules(stop=(stop,))
            best[index] = min(best[index], _cpu_ns() - began)
    return best


def _repetitive(size: int) -> str:
    return ("ab" * size)[:size]


def _varied(size: int) -> str:
    return "".join(chr(0x4E00 + (k * 7919) % 20_000) for k in range(size))


def stop_build_section(lengths: tuple[int, ...] = (1_000, 4_000, 16_000)) -> list[Result]:
    """Build time of the stop rules of one stop string per length (ns per character; ratio of the
    whole build to that of the first length).
    """
    results = []
    # A stop string that repeats itself (the worst case for failure links) and one that does not.
    for name, make in (("repetitive", _repetitive), ("varied", _varied)):
        took = _build_ns([make(length) for length in lengths])
        for length, spent in zip(lengths, took):
            ratio = spent / took[0]
            last = length == lengths[-1]
            results.append(
                Result(
                    f"stop rules, one {name} stop string of {length:,} chars",
                    spent / length,
                    ratio,
                    f"<= {BUILD_TARGET:g}" if last else "",
                    ratio <= BUILD_TARGET if last else None,
                )
            )
    return results


HEALTH_TARGET = 2.0
"""Seconds within which a health probe sent right after the worst frame is answered."""

GROWTH_TARGET = 100 << 20
"""Memory a worker may grow by while its frontend does not read (over :data:`STALL_SECONDS`)."""

STALL_SECONDS = 60.0
"""How long the frontend does not read in the memory section."""


class _Process:
    """A ``puredetok serve`` process with this process as its scheduler and its frontend."""

    def __init__(
        self, tokenizer_name: str | None, folder: Path, *options: str, frontend_hwm: int = 1000
    ) -> None:
        self.context: zmq.Context[Any] = zmq.Context()
        self.frontend: zmq.Socket[bytes] = self.context.socket(zmq.PULL)
        self.frontend.setsockopt(zmq.RCVHWM, frontend_hwm)
        self.frontend.bind(f"ipc://{folder}/frontend")
        self.backend: zmq.Socket[bytes] = self.context.socket(zmq.PULL)
        self.backend.bind(f"ipc://{folder}/backend")
        command = [sys.executable, "-m", "puredetok.cli", "serve", "--quiet", *options]
        if tokenizer_name is not None:
            command += ["--tokenizer", tokenizer_name]
        command += ["--listen", f"ipc://{folder}/worker-{{index}}"]
        command += ["--backend", f"ipc://{folder}/backend", "--frontend", f"ipc://{folder}/frontend"]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
        self.decoder = FrameDecoder(TO_FRONTEND)
        if not self.frontend.poll(120_000):
            raise RuntimeError("the worker did not start within 120 s")
        ready = self.decoder.decode(self.frontend.recv()).batch.items[0]
        assert isinstance(ready, ReadyMsg)
        self.pid = ready.pid
        self.push: zmq.Socket[bytes] = self.context.socket(zmq.PUSH)
        self.push.setsockopt(zmq.SNDHWM, 4)
        self.push.setsockopt(zmq.LINGER, 0)
        self.push.connect(ready.address)

    def rss(self) -> int:
        """The worker's resident memory, in bytes."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS")

    def close(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        for socket in (self.frontend, self.backend, self.push):
            socket.close(linger=0)
        self.context.term()


def worst_frame(size: int) -> bytes:
    """The worst detokenize frame: ``size`` messages for uids never opened, each finished (every one
    takes the per-message path and gets an error reply).
    """
    return encode_frame(
        DetokenizeBatch(tuple(range(10**9, 10**9 + size)), (32,) * size, None, tuple(range(size)))
    )


def health_section(
    tokenizer_name: str | None, sizes: tuple[int, ...] = (100_000, 1_000_000, 5_000_000)
) -> list[Result]:
    """Seconds until a probe sent right behind the worst frame of ``size`` messages is answered
    (``ns_per_token``: ms; ratio: to the target), beside the seconds the whole frame takes.
    """
    results = []
    with tempfile.TemporaryDirectory(prefix="puredetok-bench-") as folder:
        served = _Process(tokenizer_name, Path(folder))
        try:
            for size in sizes:
                frame = worst_frame(size)
                began = time.perf_counter()
                served.push.send(frame)
                served.push.send(encode_batch([HealthCheckMsg(size)]))
                answered, replies = None, 0
                while replies < size:
                    if not served.frontend.poll(600_000):
                        raise RuntimeError("the worker stopped answering")
                    for item in served.decoder.decode(served.frontend.recv()).batch.items:
                        if isinstance(item, HealthReply):
                            answered = time.perf_counter() - began
                        else:
                            replies += 1
                whole = time.perf_counter() - began
                assert answered is not None
                results.append(
                    Result(
                        f"probe behind {size:,} unknown uids ({len(frame) / 1e6:.1f} MB; "
                        f"the frame: {whole:.1f} s) ms",
                        answered * 1000,
                        answered / HEALTH_TARGET,
                        f"<= {HEALTH_TARGET:g} s",
                        answered <= HEALTH_TARGET,
                    )
                )
        finally:
            served.close()
    return results


def stalled_section(
    tokenizer: Any, tokenizer_name: str | None, seconds: float = STALL_SECONDS
) -> list[Result]:
    """A worker fed 256 open requests' ids (frames of 256 messages x 64 ids) by a sender that
    keeps trying, while its frontend does not read for ``seconds``: its memory growth (MB), then,
    once the frontend reads, whether every stream is complete and exact.
    """
    requests, per_message, steps = 256, 64, 1_200  # some 80 MB of replies: past the outbox bound
    ids = trace_ids(tokenizer, 4_096)
    rows = {
        uid: [ids[(uid * 97 + k) % len(ids)] for k in range(per_message * steps)] for uid in range(requests)
    }
    params = SamplingParams(ignore_eos=True)
    frames = [
        encode_batch(
            [
                DetokenizeMsg(
                    uid,
                    tuple(rows[uid][step * per_message : (step + 1) * per_message]),
                    step == steps - 1,
                    Opening((), params) if step == 0 else None,
                )
                for uid in range(requests)
            ]
        )
        for step in range(steps)
    ]
    codec = codec_for(tokenizer)
    expected = {}
    for uid, row in rows.items():
        state, text = feed(start(codec), row)
        expected[uid] = text + finish(state)
    with tempfile.TemporaryDirectory(prefix="puredetok-bench-") as folder:
        served = _Process(tokenizer_name, Path(folder), frontend_hwm=4)
        try:
            before = served.rss()
            sent, peak = 0, before
            ends = time.monotonic() + seconds
            while time.monotonic() < ends:
                try:
                    served.push.send(frames[sent % steps] if sent < steps else frames[-1], zmq.NOBLOCK)
                    sent += 1
                except zmq.Again:
                    time.sleep(0.05)
                peak = max(peak, served.rss())
                if sent >= steps:
                    break  # every frame taken: the worker did not push back
            stalled, taken = served.rss(), sent
            texts = {uid: "" for uid in range(requests)}
            finished: set[int] = set()
            deadline = time.monotonic() + 600
            while len(finished) < requests and time.monotonic() < deadline:
                while sent < steps:
                    try:
                        served.push.send(frames[sent], zmq.NOBLOCK)
                        sent += 1
                    except zmq.Again:
                        break
                if served.frontend.poll(20):
                    for reply in served.decoder.decode(served.frontend.recv()).batch.items:
                        if isinstance(reply, UserReply):
                            texts[cast(int, reply.uid)] += reply.incremental_output
                            if reply.finished:
                                finished.add(cast(int, reply.uid))
        finally:
            served.close()
    exact = len(finished) == requests and texts == expected
    growth = peak - before
    return [
        Result(
            f"stalled frontend {seconds:g} s: {taken} of {steps} frames taken; RSS {before >> 20} -> "
            f"{stalled >> 20} MB (peak +MB)",
            growth / (1 << 20),
            growth / GROWTH_TARGET,
            f"< {GROWTH_TARGET >> 20} MB",
            growth < GROWTH_TARGET,
        ),
        Result(
            f"then every stream complete and exact ({len(finished)} of {requests})",
            float(len(finished)),
            None,
            "all",
            exact,
        ),
    ]


def adversarial_main(argv: list[str] | None = None) -> int:
    """Print the adversarial sections."""
    from puredetok.serving._loading import load_tokenizer

    parser = argparse.ArgumentParser(prog="python -m benchmarks.adversarial", description=__doc__)
    parser.add_argument("--tokenizer", default=None, help="tokenizer name or path (default: the bundled one)")
    parser.add_argument(
        "--no-worker",
        action="store_true",
        help="skip the sections that start processes (a worker, replay and audit)",
    )
    parser.add_argument(
        "--stall", type=float, default=STALL_SECONDS, help="seconds the frontend does not read (default: 60)"
    )
    args = parser.parse_args(argv)
    tokenizer = load_tokenizer(args.tokenizer)
    print(format_table("manager, adversarial batches (ns per message)", manager_shapes_section(tokenizer)))
    print(format_table("stop rules build (ns per character)", stop_build_section()))
    print(format_table("the wire: decoding a frame (CPU ns per unit)", wire_section()))
    print(format_table("tokenize path (CPU ns per unit)", tokenize_section(tokenizer)))
    if not args.no_worker:
        print(
            format_table(
                "health probe behind the worst frame (a worker process)", health_section(args.tokenizer)
            )
        )
        print(
            format_table(
                "memory with a frontend that does not read (a worker process)",
                stalled_section(tokenizer, args.tokenizer, args.stall),
            )
        )
        print(
            format_table(
                "replay and audit, one request of many events (CPU ns per event; a child process each)",
                events_section(tokenizer, args.tokenizer),
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(adversarial_main())
