"""Real worker processes over real ZeroMQ sockets: the tests play API server and scheduler.

A :class:`Harness` binds the frontend and backend PULL sockets, starts ``puredetok serve``
processes, sends frames to them, and collects what comes back.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import msgspec
import zmq

from puredetok.serving._messages import (
    PROTOCOL_VERSION,
    TO_BACKEND,
    TO_FRONTEND,
    Message,
    ReadyMsg,
    UserReply,
)
from puredetok.worker._routing import WorkerPool
from puredetok.worker._wire import FrameDecoder


def raw_detokenize_frame(
    messages: Sequence[tuple[Any, Sequence[int], bool, dict[str, Any] | None, str | None]],
) -> bytes:
    """A detokenize frame built by hand as msgpack, column by column (docs/worker.md), as a
    scheduler in any language sends it: each message is ``(uid, ids, finished, opening, reason)``,
    ``opening`` a map of the Opening's fields (missing ones take their defaults) or None. Values
    the message classes would refuse to construct can be sent this way."""
    columns = {
        "uids": [uid for uid, *_ in messages],
        "token_ids": [one for _, ids, _, _, _ in messages for one in ids],
        "counts": [len(ids) for _, ids, _, _, _ in messages],
        "finished": [n for n, message in enumerate(messages) if message[2]],
        "opens": [[n, message[3]] for n, message in enumerate(messages) if message[3] is not None],
        "reasons": [[n, message[4], None] for n, message in enumerate(messages) if message[2] and message[4]],
    }
    return msgspec.msgpack.encode(["detokenize", PROTOCOL_VERSION, columns])


TIMEOUT = 60.0
"""Seconds to wait for anything a worker should send (workers start in a few seconds)."""


def stop_processes(processes: Sequence[subprocess.Popen[bytes]]) -> None:
    """SIGTERM every process still running, then wait for each (killed after 30 s)."""
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def free_port() -> int:
    """A loopback TCP port that is free now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Harness:
    """Frontend and backend sockets in this process, worker processes outside it."""

    def __init__(self, folder: Path, tcp: bool = False) -> None:
        self.folder = folder
        self.tcp = tcp
        self.context: zmq.Context[Any] = zmq.Context()
        self.frontend: zmq.Socket[bytes] = self.context.socket(zmq.PULL)
        self.backend: zmq.Socket[bytes] = self.context.socket(zmq.PULL)
        if tcp:  # loopback TCP, on ports the system picks (workers get theirs from free_port)
            self.frontend_address = f"tcp://127.0.0.1:{self.frontend.bind_to_random_port('tcp://127.0.0.1')}"
            self.backend_address = f"tcp://127.0.0.1:{self.backend.bind_to_random_port('tcp://127.0.0.1')}"
            self.worker_ports = [free_port() for _ in range(4)]
        else:
            self.frontend_address = f"ipc://{folder}/frontend"
            self.backend_address = f"ipc://{folder}/backend"
            self.frontend.bind(self.frontend_address)
            self.backend.bind(self.backend_address)
        self.from_frontend = FrameDecoder(TO_FRONTEND)
        self.from_backend = FrameDecoder(TO_BACKEND)
        self.processes: list[subprocess.Popen[bytes]] = []
        self.pools: list[WorkerPool] = []

    def worker_address(self, index: int) -> str:
        if self.tcp:
            return f"tcp://127.0.0.1:{self.worker_ports[index]}"
        return f"ipc://{self.folder}/worker-{index}"

    def start(self, workers: int = 1, *options: str) -> subprocess.Popen[bytes]:
        """``puredetok serve`` with ``workers`` workers (one process, or a parent and children)."""
        command = [
            sys.executable,
            "-m",
            "puredetok.cli",
            "serve",
            "--workers",
            str(workers),
            "--listen",
            self.worker_address(0) if self.tcp else f"ipc://{self.folder}/worker-{{index}}",
            "--backend",
            self.backend_address,
            "--frontend",
            self.frontend_address,
            *options,
        ]
        log = open(self.folder / f"serve-{len(self.processes)}.log", "wb")  # noqa: SIM115
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env={**os.environ})
        self.processes.append(process)
        return process

    def log(self, index: int = 0) -> str:
        return (self.folder / f"serve-{index}.log").read_text()

    def wait_ready(self, count: int) -> list[ReadyMsg]:
        got = self.receive(self.frontend, lambda got: sum(isinstance(m, ReadyMsg) for m in got) >= count)
        return [m for m in got if isinstance(m, ReadyMsg)]

    def pool(self, detokenize: Sequence[int], tokenize: Sequence[int] | None = None) -> WorkerPool:
        pool = WorkerPool(
            [self.worker_address(i) for i in detokenize],
            None if tokenize is None else [self.worker_address(i) for i in tokenize],
            context=self.context,
        )
        self.pools.append(pool)
        return pool

    def receive(
        self, pull: zmq.Socket[bytes], done: Callable[[list[Message]], bool], timeout: float = TIMEOUT
    ) -> list[Message]:
        """Messages from ``pull`` until ``done(all so far)``; fails after ``timeout`` seconds."""
        decoder = self.from_frontend if pull is self.frontend else self.from_backend
        got: list[Message] = []
        deadline = time.monotonic() + timeout
        while not done(got):
            left = deadline - time.monotonic()
            if left <= 0 or not pull.poll(int(left * 1000)):
                raise AssertionError(f"timed out after {timeout} s with {len(got)} messages: {got[-3:]}")
            decoded = decoder.decode(pull.recv())
            assert not decoded.rejected
            got.extend(decoded.batch.items)
        return got

    def replies_until_finished(self, uids: set[Any], timeout: float = TIMEOUT) -> dict[Any, list[UserReply]]:
        """Replies from the frontend socket until every uid in ``uids`` has a finished reply."""
        by_uid: dict[Any, list[UserReply]] = {}
        waiting = set(uids)
        seen = 0

        def done(got: list[Message]) -> bool:
            nonlocal seen
            for message in got[seen:]:
                if isinstance(message, UserReply):
                    by_uid.setdefault(message.uid, []).append(message)
                    if message.finished:
                        waiting.discard(message.uid)
            seen = len(got)
            return not waiting

        self.receive(self.frontend, done, timeout)
        return by_uid

    def drain(self) -> None:
        """Drop whatever is waiting on both sockets."""
        for pull in (self.frontend, self.backend):
            while pull.poll(50):
                pull.recv()

    def close(self) -> None:
        stop_processes(self.processes)
        for pool in self.pools:
            pool.close()
        self.frontend.close(linger=0)
        self.backend.close(linger=0)
        self.context.term()
