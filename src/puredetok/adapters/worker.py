"""The tokenizer/detokenizer worker process: ZeroMQ in, ZeroMQ out, the managers in between.

A worker PULLs frames on its own address (it binds), and PUSHes token ids and aborts to the
scheduler (``backend``) and text to the API server (``frontend``); it connects to both, so any
number of workers can share them. Each loop drains up to ``local_bs`` waiting messages, handles
them kind by kind (keeping the order of each request's messages), and sends one frame per kind.

Shutdown: SIGINT or SIGTERM (or ``stop_event``) ends the loop after the current batch; the frames
already waiting are still handled (for up to :data:`DRAIN_SECONDS`), then every open request is
handed back to the frontend: a finished reply whose ``error`` starts with ``"handed back"``,
carrying the request's stream as bytes (:attr:`UserReply.state`) and how many of its generated ids
that stream has consumed (:attr:`UserReply.consumed`). A :class:`DetokenizeMsg` whose
:class:`Opening` carries them, with the request's ids from ``consumed`` on, continues the request
exactly on any worker of the same tokenizer. The replies are flushed before the sockets close.
"""

from __future__ import annotations

__all__ = ["Worker", "WorkerStats", "tokenize_worker", "default_address", "DEFAULT_LOCAL_BS", "DRAIN_SECONDS"]

import gc
import logging
import os
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import Any, cast

import attrs
import zmq

from puredetok.adapters.detokenize_manager import DetokenizeManager
from puredetok.adapters.loading import load_tokenizer
from puredetok.adapters.messages import (
    HANDED_BACK,
    AbortBackendMsg,
    AbortMsg,
    AnyBatch,
    DetokenizeBatch,
    DetokenizeMsg,
    HealthCheckMsg,
    HealthReply,
    Message,
    ReadyMsg,
    ReplyBatch,
    TokenizeMsg,
    UserMsg,
    UserReply,
)
from puredetok.adapters.tokenize_manager import TokenizeManager
from puredetok.adapters.wire import (
    DEFAULT_MAX_FRAME_BYTES,
    Decoded,
    DropCounter,
    FrameDecoder,
    FrameError,
    encode_batch,
    encode_frame,
)
from puredetok.core.codec import OutOfVocab

DEFAULT_LOCAL_BS = 4096
"""Messages drained per loop at most."""

DRAIN_SECONDS = 1.0
"""When stopping, how long the worker goes on handling frames that keep arriving before it hands
its requests back (ids that arrive later are not lost: the hand-back says how many ids each state
has consumed, and the re-opening brings the rest)."""

logger = logging.getLogger("puredetok.worker")


def default_address(role: str) -> str:
    """The default ``ipc://`` address of ``role`` (``"worker-0"``, ``"backend"``, ``"frontend"``)."""
    return f"ipc://{Path(tempfile.gettempdir()) / f'puredetok-{role}.ipc'}"


@attrs.frozen
class WorkerStats:
    """What a worker did, returned when it stops."""

    name: str
    messages_handled: dict[str, int]
    frames_received: int
    frames_dropped: dict[str, int]
    live_requests: int


class Worker:
    """One worker: its sockets and its two managers. :meth:`serve` runs the loop.

    ``tokenizer`` is a loaded tokenizer, or a name or path for :func:`load_tokenizer`.
    ``max_byte_run`` and ``out_of_vocab`` are the detokenizer's setting of those codec options
    for requests that do not set them (see :class:`DetokenizeManager`).
    """

    def __init__(
        self,
        tokenizer: Any = None,
        *,
        listen: str | None = None,
        backend: str | None = None,
        frontend: str | None = None,
        local_bs: int = DEFAULT_LOCAL_BS,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        name: str | None = None,
        context: zmq.Context[Any] | None = None,
        poll_ms: int = 100,
        send_timeout_ms: int = 30_000,
        max_byte_run: int | None = None,
        out_of_vocab: OutOfVocab = "raise",
    ) -> None:
        if local_bs < 1:
            raise ValueError(f"local_bs must be >= 1, got {local_bs}")
        if isinstance(tokenizer, str | os.PathLike) or tokenizer is None:
            tokenizer = load_tokenizer(tokenizer)
        self.name = name or f"worker-{os.getpid()}"
        self.address = listen or default_address("worker-0")
        self.local_bs = local_bs
        self.poll_ms = poll_ms
        self.tokenize_manager = TokenizeManager(tokenizer)
        self.detokenize_manager = DetokenizeManager(
            tokenizer, max_byte_run=max_byte_run, out_of_vocab=out_of_vocab
        )
        self.decoder = FrameDecoder(max_frame_bytes=max_frame_bytes)
        self.drops = DropCounter(logger)
        self.handled: dict[str, int] = {}
        self.frames_received = 0
        self._stop = threading.Event()
        self._context = context or zmq.Context.instance()
        self._pull = self._socket(zmq.PULL, self.address, bind=True)
        if not _private(self.address):
            logger.warning(
                "%s listens on %s, beyond this machine: the protocol has no authentication",
                self.name,
                self.address,
            )
        self._backend = self._socket(zmq.PUSH, backend or default_address("backend"), bind=False)
        self._frontend = self._socket(zmq.PUSH, frontend or default_address("frontend"), bind=False)
        for push in (self._backend, self._frontend):
            push.setsockopt(zmq.SNDTIMEO, send_timeout_ms)
            push.setsockopt(zmq.SNDHWM, 100_000)

    def _socket(self, kind: int, address: str, *, bind: bool) -> zmq.Socket[bytes]:
        socket: zmq.Socket[bytes] = self._context.socket(kind)
        socket.setsockopt(zmq.LINGER, 10_000)
        try:
            if bind:
                socket.setsockopt(zmq.RCVHWM, 100_000)
                socket.bind(address)
            else:
                socket.connect(address)
        except zmq.ZMQError as error:
            socket.close(linger=0)
            raise OSError(f"cannot {'bind' if bind else 'connect'} {address}: {error}") from None
        return socket

    def stop(self) -> None:
        """Ask the loop to finish (what has arrived is still answered); safe from any thread."""
        self._stop.set()

    def serve(self, on_ready: Callable[[ReadyMsg], None] | None = None) -> WorkerStats:
        """Run until :meth:`stop` (or a signal, through :func:`tokenize_worker`), then close."""
        ready = ReadyMsg(self.name, os.getpid(), self.address)
        self._send(self._frontend, [ready])
        logger.info("%s ready on %s", self.name, self.address)
        if on_ready is not None:
            on_ready(ready)
        poller = zmq.Poller()
        poller.register(self._pull, zmq.POLLIN)
        collector = _Collector()
        try:
            while not self._stop.is_set():
                if poller.poll(self.poll_ms):
                    self.handle(list(self._drain()))
                    collector.between_batches()
                else:
                    collector.idle()
            # Shutting down: answer everything that has already arrived, including frames the I/O
            # thread is still delivering (a short quiet period ends it, or DRAIN_SECONDS), then
            # hand every open request back.
            deadline = time.monotonic() + DRAIN_SECONDS
            while time.monotonic() < deadline and poller.poll(50):
                self.handle(list(self._drain()))
            self._pull.close(linger=0)
            self._hand_back()
        finally:
            collector.stop()
            self.close()
        return self.stats()

    def stats(self) -> WorkerStats:
        """The counters so far."""
        return WorkerStats(
            self.name,
            dict(self.handled),
            self.frames_received,
            dict(self.drops.counts),
            len(self.detokenize_manager),
        )

    def close(self) -> None:
        """Close the sockets, flushing replies still queued (up to their linger time)."""
        self._pull.close(linger=0)
        self._backend.close()
        self._frontend.close()

    def _drain(self) -> Iterator[Decoded]:
        """Frames waiting now, decoded, until ``local_bs`` messages are in hand."""
        count = 0
        while count < self.local_bs:
            try:
                frame = self._pull.recv(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            self.frames_received += 1
            try:
                decoded = self.decoder.decode(frame.buffer)
            except FrameError as error:
                self.drops.drop(error.reason, error.detail)
                continue
            count += len(decoded.batch)
            yield decoded

    def handle(self, frames: Sequence[Decoded]) -> None:
        """Handle decoded frames, in arrival order, and send one frame per kind."""
        out = _Outbox()
        for kind, run in _runs(frames):
            self.handled[kind] = self.handled.get(kind, 0) + sum(map(len, run))
            try:
                self._handle_run(kind, run, out)
            except Exception as error:  # a bug must cost these requests, never the worker
                logger.exception("internal error on %d %s messages", len(run), kind)
                self.drops.drop("internal_error", f"{type(error).__name__}: {error}")
                for batch in run:
                    for message in batch.items:
                        if isinstance(message, TokenizeMsg | DetokenizeMsg | AbortMsg):
                            out.reply(UserReply(message.uid, "", True, error=f"internal error: {error}"))
        for decoded in frames:
            for rejected in decoded.rejected:
                self.drops.drop("bad_message", rejected.reason)
                if rejected.uid is not None:
                    finished = rejected.kind != DetokenizeMsg.KIND
                    out.reply(UserReply(rejected.uid, "", finished, error=rejected.reason))
        for messages in out.to_backend.values():
            self._send(self._backend, messages)
        replies = out.replies()
        if replies is not None:
            self._send(self._frontend, replies)
        for messages in out.to_frontend.values():
            self._send(self._frontend, messages)

    def _handle_run(self, kind: str, run: list[AnyBatch], out: _Outbox) -> None:
        if kind == DetokenizeBatch.KIND:
            for batch in run:
                self._detokenize(cast(DetokenizeBatch, batch), out)
            return
        messages = [message for batch in run for message in batch.items]
        if kind == TokenizeMsg.KIND:
            self._tokenize(cast(list[TokenizeMsg], messages), out)
        elif kind == AbortMsg.KIND:
            uids = [message.uid for message in messages if isinstance(message, AbortMsg)]
            for reply in self.detokenize_manager.abort(uids):
                out.reply(reply)
            out.to_backend.setdefault(AbortBackendMsg.KIND, []).extend(AbortBackendMsg(uid) for uid in uids)
        elif kind == HealthCheckMsg.KIND:
            out.to_frontend.setdefault(HealthReply.KIND, []).extend(
                self._health(message.probe) for message in messages if isinstance(message, HealthCheckMsg)
            )

    def _detokenize(self, batch: DetokenizeBatch, out: _Outbox) -> None:
        replies = self.detokenize_manager.handle_batch(batch)
        out.replies_of(replies)
        closing = frozenset(batch.finished)
        failed = frozenset(position for position, _ in replies.errors)
        for position, reason, _ in replies.ended:
            # A stop rule ended the request here while the scheduler is still generating it.
            if position not in closing and position not in failed and reason not in (None, "abort"):
                out.to_backend.setdefault(AbortBackendMsg.KIND, []).append(
                    AbortBackendMsg(batch.uids[position])
                )

    def _hand_back(self) -> None:
        """Send every open request back to the frontend, as its state and the ids it has consumed."""
        drained = self.detokenize_manager.drain()
        if not drained:
            return
        why = (
            f"{HANDED_BACK}: the worker is stopping; send a DetokenizeMsg with "
            "Opening(params=..., state=<this state>, consumed=<this count>) and the ids from there on "
            "to continue the request exactly"
        )
        replies = [
            UserReply(uid, "", True, None, None, why, state, consumed) for uid, state, consumed in drained
        ]
        self._send(self._frontend, ReplyBatch.of(replies))
        logger.info("%s handed %d open requests back", self.name, len(replies))

    def _tokenize(self, msgs: list[TokenizeMsg], out: _Outbox) -> None:
        for msg, result in zip(msgs, self.tokenize_manager.tokenize(msgs)):
            if result.input_ids is None:
                out.reply(UserReply(msg.uid, "", True, error=result.error))
            else:
                out.to_backend.setdefault(UserMsg.KIND, []).append(
                    UserMsg(msg.uid, tuple(result.input_ids), msg.params)
                )

    def _health(self, probe: int) -> HealthReply:
        return HealthReply(
            probe,
            self.name,
            os.getpid(),
            len(self.detokenize_manager),
            dict(self.handled),
            dict(self.drops.counts),
        )

    def _send(self, socket: zmq.Socket[bytes], batch: Sequence[Message] | ReplyBatch) -> None:
        try:
            frame = encode_frame(batch) if isinstance(batch, ReplyBatch) else encode_batch(batch)
            socket.send(frame, copy=False)
        except zmq.Again:
            kind = batch.kind if isinstance(batch, ReplyBatch) else type(batch[0]).KIND
            self.drops.drop(f"send_timeout_{kind}", f"{len(batch)} messages: no reader in time")


def _private(address: str) -> bool:
    """Whether an address is reachable from this machine only (ipc://, inproc://, loopback tcp://)."""
    if not address.startswith("tcp://"):
        return True
    host = address[len("tcp://") :].rsplit(":", 1)[0].strip("[]")
    return host == "localhost" or host == "::1" or host.startswith("127.")


class _Collector:
    """Keeps Python's cyclic garbage collector out of the middle of a batch.

    The tokenizer and codecs are a million long-lived objects: they are frozen out of every
    collection. In a worker process (``serve`` on the main thread), automatic collection is then
    turned off: the worker collects when it is idle, or between two batches once many objects have
    piled up (a safety valve under endless load); every ``FULL_EVERY``-th collection also takes the
    oldest generation. An automatic collection could start in the middle of a batch and delay every
    reply of it; on the development machine such pauses made most of the round trips over 5 ms. A
    worker running in a thread of another program leaves that program's collector alone.
    """

    IDLE = 1_000
    """Objects allocated since the last collection that trigger one when no frame is waiting."""
    BUSY = 200_000
    """The same between two batches (the safety valve)."""
    FULL_EVERY = 20
    """One collection in this many also collects the oldest generation."""

    def __init__(self) -> None:
        gc.freeze()
        self._managed = threading.current_thread() is threading.main_thread() and gc.isenabled()
        self._collections = 0
        if self._managed:
            gc.disable()

    def between_batches(self) -> None:
        self._collect(self.BUSY)

    def idle(self) -> None:
        self._collect(self.IDLE)

    def _collect(self, threshold: int) -> None:
        if self._managed and gc.get_count()[0] > threshold:
            self._collections += 1
            gc.collect(2 if self._collections % self.FULL_EVERY == 0 else 1)

    def stop(self) -> None:
        if self._managed:
            gc.enable()


class _Outbox:
    """What one loop sends: per kind, the messages for the backend and the frontend; the replies
    (a reply frame is built from the managers' reply batches and single replies, in order).
    """

    def __init__(self) -> None:
        self.to_backend: dict[str, list[Message]] = {}
        self.to_frontend: dict[str, list[Message]] = {}
        self._parts: list[ReplyBatch] = []
        self._loose: list[UserReply] = []

    def reply(self, reply: UserReply) -> None:
        self._loose.append(reply)

    def replies_of(self, batch: ReplyBatch) -> None:
        self._flush()
        self._parts.append(batch)

    def replies(self) -> ReplyBatch | None:
        self._flush()
        return ReplyBatch.join(self._parts) if self._parts else None

    def _flush(self) -> None:
        if self._loose:
            self._parts.append(ReplyBatch.of(self._loose))
            self._loose = []


def _runs(frames: Sequence[Decoded]) -> Iterator[tuple[str, list[AnyBatch]]]:
    """Consecutive batches of one kind, handled together in arrival order; a detokenize batch is
    a run of its own (the unit an internal error may cost), and an empty batch is no run at all.
    """
    kind, run = "", list[AnyBatch]()
    for decoded in frames:
        batch = decoded.batch
        if not len(batch):
            continue
        if run and (batch.kind != kind or kind == DetokenizeBatch.KIND):
            yield kind, run
            run = []
        kind = batch.kind
        run.append(batch)
    if run:
        yield kind, run


def tokenize_worker(
    tokenizer: Any = None,
    *,
    listen: str | None = None,
    backend: str | None = None,
    frontend: str | None = None,
    local_bs: int = DEFAULT_LOCAL_BS,
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
    name: str | None = None,
    on_ready: Callable[[ReadyMsg], None] | None = None,
    stop_event: threading.Event | None = None,
    max_byte_run: int | None = None,
    out_of_vocab: OutOfVocab = "raise",
) -> WorkerStats:
    """Run a worker until SIGINT/SIGTERM (in the main thread) or ``stop_event``; its stats at the end.

    See :class:`Worker` for the arguments; addresses default to ``ipc://`` files in the temporary
    folder (:func:`default_address`).
    """
    worker = Worker(
        tokenizer,
        listen=listen,
        backend=backend,
        frontend=frontend,
        local_bs=local_bs,
        max_frame_bytes=max_frame_bytes,
        name=name,
        max_byte_run=max_byte_run,
        out_of_vocab=out_of_vocab,
    )
    previous: dict[signal.Signals, Any] = {}

    def on_signal(number: int, frame: FrameType | None) -> None:
        logger.info("%s: %s, finishing", worker.name, signal.Signals(number).name)
        worker.stop()

    if threading.current_thread() is threading.main_thread():
        for number in (signal.SIGINT, signal.SIGTERM):
            previous[number] = signal.signal(number, on_signal)
    if stop_event is not None:
        event = stop_event

        def watch() -> None:
            event.wait()
            worker.stop()

        threading.Thread(target=watch, daemon=True).start()
    began = time.monotonic()
    try:
        stats = worker.serve(on_ready)
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
    logger.info(
        "%s stopped after %.1f s: %d frames, handled %s, dropped %s, %d live requests",
        stats.name,
        time.monotonic() - began,
        stats.frames_received,
        stats.messages_handled,
        stats.frames_dropped,
        stats.live_requests,
    )
    return stats
