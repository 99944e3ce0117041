"""No frame of any bytes kills or stalls a worker. A real ``puredetok serve`` process gets thousands
of hostile frames (tests/worker/fuzz_frames.py) over one connection and frames over its size limit
over another, mixed with valid requests over a third; every valid request must come back exactly,
and the worker must still answer a probe at once.

``PUREDETOK_FUZZ_FRAMES`` and ``PUREDETOK_FUZZ_SEED`` scale the run (docs/benchmarks.md reports
larger runs); the summary is printed (``pytest -s``).
"""

from __future__ import annotations

import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

import zmq

from fuzz_frames import hostile_frames
from helpers import tokenizer
from puredetok.serving._messages import (
    DetokenizeMsg,
    HealthCheckMsg,
    HealthReply,
    Message,
    Opening,
    SamplingParams,
    TokenizeMsg,
    UserMsg,
    UserReply,
)
from puredetok.worker._wire import encode_batch
from test_worker import NO_EOS, core_text, encode, texts
from zmq_harness import Harness

FRAMES = int(os.environ.get("PUREDETOK_FUZZ_FRAMES", "3500"))
SEED = int(os.environ.get("PUREDETOK_FUZZ_SEED", "12"))
MAX_FRAME = 4 << 20


def _probe(h: Harness, pool: Any, probe: int, inbox: list[Message]) -> tuple[HealthReply, float]:
    """Send a probe, wait for its answer; what else came meanwhile goes to ``inbox``."""
    began = time.perf_counter()
    pool.send([HealthCheckMsg(probe)])
    got = h.receive(h.frontend, lambda got: any(isinstance(m, HealthReply) and m.probe == probe for m in got))
    [health] = [m for m in got if isinstance(m, HealthReply) and m.probe == probe]
    inbox.extend(m for m in got if m is not health)
    return health, time.perf_counter() - began


def _finished(h: Harness, uids: set[object], inbox: list[Message]) -> dict[object, list[UserReply]]:
    """Every reply of ``uids`` (those in ``inbox`` first), once each has a finished one."""
    by_uid: dict[object, list[UserReply]] = {}
    for message in inbox:
        if isinstance(message, UserReply):
            by_uid.setdefault(message.uid, []).append(message)
    waiting = {uid for uid in uids if not any(r.finished for r in by_uid.get(uid, []))}
    if waiting:
        for uid, replies in h.replies_until_finished(waiting, timeout=300).items():
            by_uid.setdefault(uid, []).extend(replies)
    return by_uid


def test_no_frame_kills_or_stalls_the_worker_and_valid_requests_stay_exact(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    attacker: zmq.Socket[bytes] = h.context.socket(zmq.PUSH)
    oversize: zmq.Socket[bytes] = h.context.socket(zmq.PUSH)
    try:
        process = h.start(1, "--max-frame-bytes", str(MAX_FRAME), "--local-bs", "512", "--quiet")
        h.wait_ready(1)
        pool = h.pool([0])
        attacker.setsockopt(zmq.LINGER, 0)
        attacker.setsockopt(zmq.SNDHWM, 0)
        attacker.connect(h.worker_address(0))
        sample = encode("fuzz 推理 🦩 naïve ┌──┐ café")
        flip_sources = [
            encode_batch(
                [DetokenizeMsg("flip", tuple(sample), True, Opening((4,), SamplingParams(stop=("x",))))]
            ),
            encode_batch([TokenizeMsg("flip", None, ({"role": "user", "content": "hi"},))]),
            encode_batch([TokenizeMsg("flip", "some text")]),
        ]
        expected: dict[object, str] = {}
        prompts: dict[object, str] = {}
        kinds: Counter[str] = Counter()
        began = time.perf_counter()
        latencies = []
        inbox: list[Message] = []
        for serial, (kind, frame) in enumerate(hostile_frames(FRAMES, SEED, flip_sources)):
            kinds[kind] += 1
            attacker.send(frame, copy=False)
            if serial % 500 == 250:  # a probe in the middle of the storm, on another connection
                latencies.append(_probe(h, pool, serial, inbox)[1])
            if serial % 10 == 0:
                uid = f"valid-{serial}"
                ids = sample[: 1 + serial % len(sample)]
                expected[uid] = core_text(ids)
                prompts[f"prompt-{serial}"] = f"prompt {serial}: 推理 naïve"
                batch: list[Message] = [DetokenizeMsg(uid, tuple(ids), True, Opening((), NO_EOS))]
                pool.send(batch)
                pool.send([TokenizeMsg(f"prompt-{serial}", prompts[f"prompt-{serial}"])])
        oversize.setsockopt(zmq.LINGER, 0)
        oversize.connect(h.worker_address(0))
        for _ in range(3):
            oversize.send(b"\x93\xa5abort\x02\x90" + b"\x00" * MAX_FRAME, copy=False)
        kinds["oversize"] += 3
        replies = _finished(h, set(expected), inbox)
        sent = time.perf_counter() - began
        got = texts(replies)
        assert {uid: got[uid] for uid in expected} == expected
        assert all(r.error is None for uid in expected for r in replies[uid])
        users = h.receive(
            h.backend, lambda got: {m.uid for m in got if isinstance(m, UserMsg)} >= set(prompts), 300
        )
        qwen = tokenizer("qwen3")
        for message in users:
            if isinstance(message, UserMsg) and message.uid in prompts:
                assert list(message.input_ids) == qwen.encode(prompts[message.uid])
        deadline = time.monotonic() + 30
        while True:  # the oversize frames' connection closes once ZeroMQ reads their header
            health, _ = _probe(h, pool, 7, inbox)
            if health.frames_dropped.get("connection_closed") or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        handled = time.perf_counter() - began  # every frame is handled: the probe came after them
        health, latency = _probe(h, pool, 8, inbox)
        assert latency < 2.0, latency  # generous: the machine is shared
        assert max(latencies) < 5.0, latencies  # bounded by one loop: LOOP_BYTES and one frame
        assert process.poll() is None
        dropped = health.frames_dropped
        assert dropped.get("connection_closed", 0) >= 1
        assert {"not_msgpack", "bad_frame", "bad_message"} <= set(dropped)
        assert "internal_error" not in dropped
        print(
            f"\nfuzz: {FRAMES:,} hostile frames (seed {SEED}) by kind {dict(kinds)}, {len(expected):,} valid "
            f"requests and {len(prompts):,} prompts exact; sent in {sent:.1f} s, all handled in "
            f"{handled:.1f} s; drops {dict(dropped)}; probes during: {min(latencies) * 1000:.0f} - "
            f"{max(latencies) * 1000:.0f} ms, after: {latency * 1000:.1f} ms"
        )
    finally:
        for socket in (attacker, oversize):
            socket.close(linger=0)
        h.close()
