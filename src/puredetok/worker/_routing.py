"""A pool of workers: :class:`WorkerPool` sends to it (a request's messages by a stable hash of its
uid, never by who sent them: its stream lives on one worker), :class:`WorkerProcesses` keeps the
workers of this host running, and :class:`Incarnations` tells which requests a restart lost
(docs/worker.md, "Scale-out" and "Failure model").
"""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Sequence
from typing import Any

import zmq

from puredetok.serving._messages import (
    AbortMsg,
    DetokenizeMsg,
    HealthCheckMsg,
    Message,
    ReadyMsg,
    TokenizeMsg,
    Uid,
)
from puredetok.worker._wire import DEFAULT_MAX_FRAME_BYTES, encode_batch

logger = logging.getLogger("puredetok.pool")


def route(uid: Uid, workers: int) -> int:
    """The worker (``0 <= index < workers``) that owns request ``uid``: the CRC-32 of ``str(uid)``
    encoded as UTF-8, modulo ``workers`` (the int 7 and the string "7" have one owner).

    Stable across processes and hosts (unlike ``hash``), so every sender agrees.
    """
    return zlib.crc32(str(uid).encode("utf-8")) % workers


class WorkerPool:
    """PUSH sockets to workers, used by the API server and the scheduler to reach them.

    ``detokenize`` lists the workers that own requests (routed by uid); ``tokenize`` the workers
    that tokenize (by default the same ones: then a request's tokenize goes to its owner too, so
    that the worker that answers the request has seen its tokenize first; a separate list is
    spread evenly). Both lists must be in the same order for every sender. A frame is never
    larger than ``max_frame_bytes`` (the workers' limit): a batch that would be is sent as several
    frames, and one message over it raises ``ValueError`` before anything is sent (a worker would
    refuse the frame unread, and close the connection it came on).
    """

    def __init__(
        self,
        detokenize: Sequence[str],
        tokenize: Sequence[str] | None = None,
        *,
        context: zmq.Context[Any] | None = None,
        send_hwm: int = 100_000,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
    ) -> None:
        if not detokenize:
            raise ValueError("a worker pool needs at least one worker address")
        self.max_frame_bytes = max_frame_bytes
        self.detokenize_addresses = tuple(detokenize)
        self.tokenize_addresses = tuple(tokenize) if tokenize else self.detokenize_addresses
        self._context = context or zmq.Context.instance()
        self._sockets: dict[str, zmq.Socket[bytes]] = {}
        for address in dict.fromkeys(self.detokenize_addresses + self.tokenize_addresses):
            socket = self._context.socket(zmq.PUSH)
            socket.setsockopt(zmq.SNDHWM, send_hwm)
            socket.setsockopt(zmq.LINGER, 5_000)
            socket.connect(address)
            self._sockets[address] = socket
        self._next = 0

    def send(self, messages: Sequence[Message]) -> dict[Uid, str]:
        """Send ``messages`` (any mix of inbound kinds): one frame per kind and worker (more if one
        would pass ``max_frame_bytes``). Returns the address each tokenize message went to (its
        owner, unless a separate set of workers tokenizes): a frontend keeps it until the
        request's first reply, to know which requests a restarted worker lost (see
        :class:`Incarnations`).
        """
        per_address: dict[str, dict[str, list[Message]]] = {}

        def put(address: str, message: Message) -> None:
            per_address.setdefault(address, {}).setdefault(type(message).KIND, []).append(message)

        owners = self.detokenize_addresses
        tokenizing = [m for m in messages if isinstance(m, TokenizeMsg)]
        for message in messages:
            if isinstance(message, DetokenizeMsg | AbortMsg):
                put(owners[route(message.uid, len(owners))], message)
            elif isinstance(message, HealthCheckMsg):
                for address in self._sockets:
                    put(address, message)
            elif not isinstance(message, TokenizeMsg):
                raise ValueError(f"workers do not accept {type(message).__name__}")
        spread = self.tokenize_addresses
        sent: dict[Uid, str] = {}
        for index, message in enumerate(tokenizing):
            if spread == owners:
                address = owners[route(message.uid, len(owners))]
            else:
                address = spread[(self._next + index * len(spread) // len(tokenizing)) % len(spread)]
            put(address, message)
            sent[message.uid] = address
        self._next = (self._next + 1) % len(spread)
        frames = [
            (a, frame)
            for a, kinds in per_address.items()
            for b in kinds.values()
            for frame in self._frames(b)
        ]
        for address, frame in frames:
            self._sockets[address].send(frame, copy=False)
        return sent

    def owner(self, uid: Uid) -> str:
        """The address of the worker that holds request ``uid``'s stream."""
        return self.detokenize_addresses[route(uid, len(self.detokenize_addresses))]

    def _frames(self, messages: list[Message]) -> list[bytes]:
        """``messages`` as frames of ``max_frame_bytes`` at most (halving a batch until it fits)."""
        frame = encode_batch(messages)
        if len(frame) <= self.max_frame_bytes:
            return [frame]
        if len(messages) == 1:
            raise ValueError(
                f"a {type(messages[0]).KIND} message for uid {getattr(messages[0], 'uid', None)!r} "
                f"takes {len(frame):,} bytes, over the workers' frame limit of {self.max_frame_bytes:,}"
            )
        half = len(messages) // 2
        return self._frames(messages[:half]) + self._frames(messages[half:])

    def send_frame(self, address: str, frame: bytes) -> None:
        """Send raw bytes to one worker (for tests and tools)."""
        self._sockets[address].send(frame, copy=False)

    def close(self) -> None:
        """Close the sockets (queued frames are still delivered, for up to 5 seconds)."""
        for socket in self._sockets.values():
            socket.close()
        self._sockets.clear()


class Incarnations:
    """The frontend's record of which worker it has heard from at each address, to tell a restart.

    Give it every :class:`ReadyMsg`: :meth:`restarted` is True when another worker (another
    ``instance``) announces itself at an address it has heard from before. Workers are told apart
    by address, never by name or pid: two unnamed workers of one process share both, and a worker
    restarted in the same process keeps its pid. The new worker held nothing when it started, so
    every request routed to it that the frontend has not seen end was lost with the old one: those
    it owns (:meth:`WorkerPool.owner` is its ``address``), and those whose tokenize message went
    to it (what :meth:`WorkerPool.send` returned) and have had no reply yet. Fail each with an
    error, and send an :class:`~puredetok.serving._messages.AbortMsg` for it so that the scheduler
    stops generating it. A worker's replies all come after its ``ReadyMsg`` (one connection, in
    order), so nothing the new worker sent is mistaken for the old one's.
    """

    def __init__(self) -> None:
        self._instances: dict[str, str] = {}
        """The instance last heard of at each address."""

    def restarted(self, ready: ReadyMsg) -> bool:
        """Note ``ready``; whether it announces a new worker at an address heard from before."""
        previous = self._instances.get(ready.address)
        self._instances[ready.address] = ready.instance
        return previous is not None and previous != ready.instance


RESTART_BACKOFF = (0.0, 1.0, 2.0, 5.0, 10.0, 30.0)
"""Seconds before restarting a worker, by how many times it died in the minute before: the first
death is answered at once, a worker that keeps dying is restarted ever more slowly."""

_POLL = 0.05
"""Seconds between two looks at the workers."""

_START_FAILED = 2
"""The exit code of a worker that refused to start (bad option, address held, no tokenizer):
restarting it would fail the same way."""


class WorkerProcesses:
    """Runs ``puredetok serve`` worker processes, one per worker of this host, and keeps them
    running: one that dies (``kill -9``, a crash, an exit the pool did not ask for) is started
    again within ``_POLL`` seconds, as incarnation ``n + 1`` of the same worker (same index, same
    address), and announces itself to the frontend (:class:`ReadyMsg`, see :class:`Incarnations`).

    ``arguments`` are the ``serve`` options every worker gets (addresses with ``{index}``,
    tokenizer, limits...); worker *i* (``first_index <= i < first_index + workers``) gets
    ``--index i``. A worker that exits with code 2 refused to start and is not restarted: the pool
    stops, with exit code 2. Use :meth:`run` (until :meth:`stop`, or a signal in the CLI), or
    ``with WorkerProcesses(...) as pool:`` (supervised from a thread).
    """

    def __init__(
        self,
        workers: int,
        arguments: Sequence[str] = (),
        *,
        first_index: int = 0,
        python: str = sys.executable,
    ) -> None:
        if workers < 1 or first_index < 0:
            raise ValueError("a pool runs workers >= 1 processes, from first_index >= 0")
        self.indexes = range(first_index, first_index + workers)
        self._command = [python, "-m", "puredetok.cli", "serve", *arguments]
        self.processes: dict[int, subprocess.Popen[bytes]] = {}
        """The live process of each worker index."""
        self.incarnations = dict.fromkeys(self.indexes, 0)
        """How many times each worker has been restarted."""
        self._deaths: dict[int, list[float]] = {index: [] for index in self.indexes}
        self._due: dict[int, float] = {}
        self._stopping = threading.Event()
        self._lock = threading.RLock()  # check() may run in a thread, stop() in a signal handler
        self._thread: threading.Thread | None = None
        self.exit_code = 0
        """0 while all is well; 2 once a worker refused to start; 1 if one failed when stopped."""

    def start(self) -> None:
        """Start every worker."""
        for index in self.indexes:
            self._spawn(index)

    def _spawn(self, index: int) -> None:
        incarnation = self.incarnations[index]
        command = [*self._command, "--workers", "1", "--index", str(index), "--incarnation", str(incarnation)]
        self.processes[index] = subprocess.Popen(command)

    def check(self) -> None:
        """Restart the workers that have died (or note when they may be); call it often."""
        with self._lock:
            self._check()

    def _check(self) -> None:
        now = time.monotonic()
        for index, process in list(self.processes.items()):
            code = process.poll()
            if code is None or self._stopping.is_set():
                continue
            del self.processes[index]
            how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
            if code == _START_FAILED:
                logger.error(
                    "worker-%d (pid %d) refused to start (%s): stopping the pool", index, process.pid, how
                )
                self.exit_code = _START_FAILED
                self.stop()
                return
            deaths = [when for when in self._deaths[index] if now - when < 60.0] + [now]
            self._deaths[index] = deaths
            delay = RESTART_BACKOFF[min(len(deaths) - 1, len(RESTART_BACKOFF) - 1)]
            self.incarnations[index] += 1
            logger.warning(
                "worker-%d (pid %d) died (%s): restarting it as incarnation %d in %.0f s; "
                "its requests are lost and its replacement announces itself",
                index,
                process.pid,
                how,
                self.incarnations[index],
                delay,
            )
            self._due[index] = now + delay
        for index, when in list(self._due.items()):
            if when <= now and not self._stopping.is_set():
                del self._due[index]
                self._spawn(index)

    def run(self) -> int:
        """Start the workers and keep them running until :meth:`stop`; the pool's exit code."""
        self.start()
        while not self._stopping.is_set():
            self.check()
            self._stopping.wait(_POLL)
        return self._wait()

    def stop(self, number: int = signal.SIGTERM) -> None:
        """Stop the pool: send ``number`` to every worker (they finish what they hold and exit)."""
        with self._lock:
            self._stopping.set()
            self._due.clear()
            for process in self.processes.values():
                if process.poll() is None:
                    process.send_signal(number)

    def _wait(self) -> int:
        codes = [process.wait() for process in self.processes.values()]
        if self.exit_code == 0 and any(codes):
            self.exit_code = 1
        return self.exit_code

    def __enter__(self) -> WorkerProcesses:
        self.start()

        def supervise() -> None:
            while not self._stopping.wait(_POLL):
                self.check()

        self._thread = threading.Thread(target=supervise, name="puredetok-pool", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
        if self._thread is not None:
            self._thread.join()
        self._wait()
