"""The worker's benchmark, end to end over ZeroMQ: a ``puredetok serve`` process, and this process
playing the scheduler (sending token ids) and the API server (receiving text).
"""

from __future__ import annotations

__all__ = ["worker_section"]

import gc
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec
import zmq

from benchmarks.manager import serving_params
from puredetok.cli._measure import trace_ids
from puredetok.cli._timing import Result
from puredetok.serving._detokenize_manager import DetokenizeManager
from puredetok.serving._messages import (
    TO_FRONTEND,
    DetokenizeBatch,
    DetokenizeMsg,
    Opening,
    ReadyMsg,
)
from puredetok.worker._wire import FrameDecoder, encode_batch


class _Replies(msgspec.Struct):
    """Just enough of a reply frame to count its replies."""

    uids: list[msgspec.Raw]


class _Served:
    """A worker process and the sockets to drive it."""

    def __init__(self, tokenizer_name: str, folder: Path) -> None:
        self.context: zmq.Context[Any] = zmq.Context()
        self.frontend: zmq.Socket[bytes] = self.context.socket(zmq.PULL)
        self.frontend.bind(f"ipc://{folder}/frontend")
        backend: zmq.Socket[bytes] = self.context.socket(zmq.PULL)
        backend.bind(f"ipc://{folder}/backend")
        self.backend = backend
        command = [sys.executable, "-m", "puredetok.cli", "serve", "--quiet", "--tokenizer", tokenizer_name]
        command += ["--listen", f"ipc://{folder}/worker-{{index}}", "--local-bs", "8192"]
        command += ["--backend", f"ipc://{folder}/backend", "--frontend", f"ipc://{folder}/frontend"]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
        self.decoder = FrameDecoder(TO_FRONTEND)
        self.split = msgspec.msgpack.Decoder(tuple[str, int, _Replies])
        if not self.frontend.poll(120_000):
            raise RuntimeError("the worker did not start within 120 s")
        ready = self.decoder.decode(self.frontend.recv()).batch.items[0]
        assert isinstance(ready, ReadyMsg)
        self.push: zmq.Socket[bytes] = self.context.socket(zmq.PUSH)
        self.push.setsockopt(zmq.SNDHWM, 0)
        self.push.connect(ready.address)

    def replies(self, count: int) -> int:
        """Receive frames until ``count`` replies have come back; the number of frames.

        Only the uid column is read: on a 2-core machine the client's work would otherwise
        compete with the worker it measures.
        """
        got = frames = 0
        while got < count:
            if not self.frontend.poll(60_000):
                raise RuntimeError(f"the worker stopped answering ({got} of {count} replies)")
            kind, _, replies = self.split.decode(self.frontend.recv())
            if kind != "reply":
                raise RuntimeError(f"unexpected {kind!r} frame from the worker")
            got += len(replies.uids)
            frames += 1
        return frames

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


def _frames(tokenizer: Any, requests: int, steps: int, per_message: int, prefix: str) -> list[bytes]:
    """``steps`` frames of one message per request, opened with the serving parameters."""
    ids = trace_ids(tokenizer, 4_096)
    opening = Opening((), serving_params(steps * per_message))
    frames = []
    for step in range(steps):
        batch = [
            DetokenizeMsg(
                f"{prefix}{n}",
                tuple(ids[(n * 97 + step * per_message + k) % len(ids)] for k in range(per_message)),
                step == steps - 1,
                opening if step == 0 else None,
            )
            for n in range(requests)
        ]
        frames.append(encode_batch(batch))
    return frames


def _in_process(tokenizer: Any, frames: list[bytes]) -> float:
    """Seconds the in-process manager takes on the same frames' batches (decoded outside the
    timing): the worker's ratio to it is what the process, the sockets and the wire cost.
    """
    decoder = FrameDecoder()
    batches = [decoder.decode(frame).batch for frame in frames]
    manager = DetokenizeManager(tokenizer)
    began = time.perf_counter()
    for batch in batches:
        assert isinstance(batch, DetokenizeBatch)
        manager.handle_batch(batch)
    return time.perf_counter() - began


PASSES = 3
"""Each measure is taken this many times and the best kept, as the other sections keep the best of
interleaved rounds: other jobs on a shared machine only ever make a pass slower."""


def worker_section(
    tokenizer: Any, tokenizer_name: str, requests: int = 1_024, rounds: int = 300
) -> list[Result]:
    """Tokens per second through the worker with pipelined batched frames of requests opened with
    the serving parameters (the ratio column: the in-process manager's time on the same batches
    over the worker's), and the round-trip time of one frame of ``requests`` messages (p50, p99),
    each the best of :data:`PASSES` passes.
    """
    results = []
    with tempfile.TemporaryDirectory(prefix="puredetok-bench-") as folder:
        served = _Served(tokenizer_name, Path(folder))
        # The measuring client keeps its own collector out of the timings (the worker manages its
        # own: see puredetok.worker._worker); what is measured is the worker.
        collecting = gc.isenabled()
        gc.disable()
        try:
            served.push.send(_frames(tokenizer, 8, 2, 1, "warm")[0])
            served.replies(8)
            for per_message in (1, 8):
                steps = 64 if per_message == 1 else 16
                elapsed = in_process = float("inf")
                for attempt in range(PASSES):
                    frames = _frames(tokenizer, requests, steps, per_message, f"t{per_message}-{attempt}-")
                    began = time.perf_counter()
                    for frame in frames:
                        served.push.send(frame, copy=False)
                    served.replies(requests * steps)
                    elapsed = min(elapsed, time.perf_counter() - began)
                    in_process = min(in_process, _in_process(tokenizer, frames))
                tokens = requests * steps * per_message
                rate = tokens / elapsed
                results.append(
                    Result(
                        f"worker, {requests} requests x {per_message} id(s)/msg: {rate:,.0f} tok/s",
                        elapsed * 1e9 / tokens,
                        in_process / elapsed,
                        ">= 1,000,000 tokens/s" if per_message == 1 else "",
                        rate >= 1_000_000 if per_message == 1 else None,
                    )
                )
            p50 = p99 = float("inf")
            for attempt in range(PASSES):
                frames = _frames(tokenizer, requests, rounds, 1, f"rtt-{attempt}-")
                times = []
                for frame in frames:
                    began = time.perf_counter()
                    served.push.send(frame, copy=False)
                    served.replies(requests)
                    times.append(time.perf_counter() - began)
                times.sort()
                p50 = min(p50, times[len(times) // 2])
                p99 = min(p99, times[min(len(times) - 1, int(len(times) * 0.99))])
            results.append(
                Result(
                    f"{requests}-request frame round trip: p50 {p50 * 1e3:.2f} ms, p99 {p99 * 1e3:.2f} ms",
                    p99 * 1e9 / requests,
                    None,
                    "p99 < 5 ms",
                    p99 < 0.005,
                )
            )
        finally:
            if collecting:
                gc.enable()
            served.close()
    results.append(Result(f"(worker pid was separate; this machine has {os.cpu_count()} cores)", 0.0))
    return results
