"""The tokenizer/detokenizer worker process: ZeroMQ in, ZeroMQ out, the managers in between.

A worker binds its own address and PULLs frames from it; it connects to the scheduler
(``backend``) and the API server (``frontend``) and PUSHes to them, so any number of workers can
share them. Each loop reads up to ``local_bs`` messages (and about :data:`LOOP_BYTES` of frames),
handles them kind by kind (each request's messages in order) and sends one frame per kind;
tokenizing and codec builds run beside the loop. docs/worker.md says how a worker bounds what it
holds ("Limits"), stays fair under load ("Fairness and backpressure") and hands its open requests
back when it stops ("Stopping and restarting on purpose").
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from types import FrameType
from typing import Any, cast

import attrs
import zmq
from zmq.utils.monitor import parse_monitor_message

from puredetok._core import OutOfVocab
from puredetok.serving._codec_cache import DEFAULT_MAX_CODECS, CodecCache, Setting
from puredetok.serving._detokenize_manager import (
    DEFAULT_MAX_LIVE,
    DEFAULT_MAX_STOP_CHARS,
    DEFAULT_MAX_STOPS,
    DEFAULT_REMEMBER_ENDED,
    DetokenizeManager,
)
from puredetok.serving._loading import load_tokenizer
from puredetok.serving._messages import (
    HANDED_BACK,
    UNKNOWN_REQUEST,
    AbortBackendMsg,
    AbortMsg,
    AnyBatch,
    DetokenizeBatch,
    HealthCheckMsg,
    HealthReply,
    Message,
    ReadyMsg,
    ReplyBatch,
    SamplingParams,
    TokenizeMsg,
    Uid,
    UserMsg,
    UserReply,
)
from puredetok.serving._tokenize_manager import TokenizeManager, TokenizeResult
from puredetok.serving._tokenizing import TokenizeThread, text_chars, trim_memory
from puredetok.worker._addresses import AddressError, check_bind_address, claim, default_address, loopback
from puredetok.worker._codecs import Parking, codec_builder
from puredetok.worker._flow import Backlog, Outgoing
from puredetok.worker._wire import (
    DEFAULT_MAX_FRAME_BYTES,
    Decoded,
    DropCounter,
    FrameDecoder,
    FrameError,
    encode_batch,
    encode_frame,
)

DEFAULT_LOCAL_BS = 4096
"""Messages drained per loop at most."""

DEFAULT_MAX_TEXT_CHARS = 1 << 20
"""The longest text one tokenize request may carry: 1,048,576 characters (about 250,000 tokens of
English; the text of its chat messages and template options, counted together)."""

DEFAULT_MAX_CHAT_MESSAGES = 8_192
"""The most chat messages of one tokenize request. Rendering a chat template costs some 30 -
150 us per message (Jinja, in Python), against about 1 us per character of text: this bounds a
request of many tiny messages to about what a text of ``max_text_chars`` costs."""

DEFAULT_MAX_IDS = 1 << 20
"""The most token ids one request may carry in one message (its prompt and its new ids
together), and the most a tokenized prompt may have: 1,048,576."""

LOOP_BYTES = 1 << 18
"""Bytes of frames one loop takes in at most, 256 KiB (and one frame at least, whatever its size):
what one loop decodes, and so how long a probe waits behind frames that came before it on other
connections, stays bounded whatever the frames hold (a detokenize frame of 4,096 requests is
some 40 KB)."""

DEFAULT_MAX_OUTBOX_BYTES = 32 << 20
"""Bytes of frames waiting to be sent (their peer not reading) past which the worker stops reading
and handling its input, 32 MiB: see :mod:`puredetok.worker._flow`."""

QUEUE_FRAMES = 64
"""ZeroMQ's high-water mark of every socket of a worker, in frames: what ZeroMQ queues per peer
(frames beyond it wait in the worker's own bounded queue, or in the sender's)."""

BACKLOG_BYTES = 4 * LOOP_BYTES
"""Bytes of frames read but not handled, behind the one being handled, past which the loop stops
reading: a large frame is handled a slice at a time while the loop goes on reading (and answering
health probes) behind it, up to this much."""

TRIM_BYTES = 8 << 20
"""After a loop that took in this many bytes of frames or more, freed memory goes back to the system."""

TOKENIZE_BACKLOG = 4
"""The loop stops reading frames while the text waiting for the tokenizing thread is over this
many times ``max_text_chars`` (the frames then wait in ZeroMQ's queue: back-pressure)."""

DRAIN_SECONDS = 1.0
"""When stopping, how long the worker goes on handling frames that keep arriving before it hands
its requests back (ids that arrive later are not lost: the hand-back says how many ids each state
has consumed, and the re-opening brings the rest)."""

UNBIND_SECONDS = 1.0
"""When closing, how long the worker waits for ZeroMQ's I/O thread to close its listening socket
(it takes microseconds, a few milliseconds on a loaded machine)."""

logger = logging.getLogger("puredetok.worker")


@attrs.frozen
class Limits:
    """What one frame, one request and one worker may hold; past each, a clear error.

    Every limit is checked before the work it bounds: a frame's size before ZeroMQ reads it (its
    ``MAXMSGSIZE``), a text's length before it is tokenized, a message's ids before they are
    decoded, the live requests before one more opens.
    """

    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    """Larger frames are refused unread (see :data:`~puredetok.worker._wire.DEFAULT_MAX_FRAME_BYTES`)."""
    max_text_chars: int = DEFAULT_MAX_TEXT_CHARS
    """The longest text of a tokenize request (:data:`DEFAULT_MAX_TEXT_CHARS`)."""
    max_ids: int = DEFAULT_MAX_IDS
    """The most ids of one message, prompt included, or of a tokenized prompt (:data:`DEFAULT_MAX_IDS`)."""
    max_live: int = DEFAULT_MAX_LIVE
    """The most live requests (see :data:`~puredetok.serving._detokenize_manager.DEFAULT_MAX_LIVE`)."""
    max_stops: int = DEFAULT_MAX_STOPS
    """The most stop strings of one request
    (:data:`~puredetok.serving._detokenize_manager.DEFAULT_MAX_STOPS`)."""
    max_stop_chars: int = DEFAULT_MAX_STOP_CHARS
    """The most characters of one request's stop strings together
    (:data:`~puredetok.serving._detokenize_manager.DEFAULT_MAX_STOP_CHARS`)."""
    max_outbox_bytes: int = DEFAULT_MAX_OUTBOX_BYTES
    """Bytes waiting to be sent past which the worker stops taking input
    (:data:`DEFAULT_MAX_OUTBOX_BYTES`)."""
    max_codecs: int = DEFAULT_MAX_CODECS
    """The most codecs (sets of decode options) kept, least recently used dropped first
    (:data:`~puredetok.serving._detokenize_manager.DEFAULT_MAX_CODECS`)."""
    max_chat_messages: int = DEFAULT_MAX_CHAT_MESSAGES
    """The most chat messages of one tokenize request (:data:`DEFAULT_MAX_CHAT_MESSAGES`)."""

    def __attrs_post_init__(self) -> None:
        for name, value in attrs.asdict(self).items():
            if type(value) is not int or value < 1:
                raise ValueError(f"{name} must be an int >= 1, not {value!r}")


@attrs.frozen
class WorkerStats:
    """What a worker did, returned when it stops."""

    name: str
    messages_handled: dict[str, int]
    frames_received: int
    frames_dropped: dict[str, int]
    live_requests: int


class Worker:
    """One worker: its sockets, its two managers and its tokenizing thread. :meth:`serve` runs the loop.

    ``tokenizer`` is a loaded tokenizer, or a name or path for :func:`load_tokenizer`.
    ``max_byte_run`` and ``out_of_vocab`` are the detokenizer's setting of those codec options
    for requests that do not set them (see :class:`DetokenizeManager`); the codecs of
    ``codec_options`` (the decode options of each :class:`SamplingParams`) are built before the
    worker is ready, any other is built beside the loop when a request first asks for it
    (:mod:`puredetok.worker._codecs`). ``listen`` must be a
    loopback address (``ipc://`` or a ``tcp://`` host that resolves to loopback addresses only)
    unless ``allow_remote``; it must not be held by a live worker (see
    :func:`~puredetok.worker._addresses.claim`). ``incarnation`` is how many times a pool has
    restarted this worker (it goes out in the :class:`ReadyMsg`). ``assistant_as_data``: the
    assistant turns of chat requests are data, as the rest of a chat is, instead of being trusted as
    the model's own output (see :class:`TokenizeManager`).
    """

    def __init__(
        self,
        tokenizer: Any = None,
        *,
        listen: str | None = None,
        backend: str | None = None,
        frontend: str | None = None,
        local_bs: int = DEFAULT_LOCAL_BS,
        limits: Limits = Limits(),
        name: str | None = None,
        context: zmq.Context[Any] | None = None,
        poll_ms: int = 100,
        send_timeout_ms: int = 30_000,
        max_byte_run: int | None = None,
        out_of_vocab: OutOfVocab = "raise",
        allow_remote: bool = False,
        incarnation: int = 0,
        codec_options: Sequence[SamplingParams] = (),
        assistant_as_data: bool = False,
    ) -> None:
        if local_bs < 1:
            raise ValueError(f"local_bs must be >= 1, got {local_bs}")
        self.address = listen or default_address("worker-0")
        check_bind_address(self.address, allow_remote=allow_remote)
        self.limits = limits
        self.decoder = FrameDecoder(max_frame_bytes=limits.max_frame_bytes)
        self.drops = DropCounter(logger)
        self.handled: dict[str, int] = {}
        self.frames_received = 0
        self._stop = threading.Event()
        self._context = context or zmq.Context.instance()
        self._tokenizing: dict[Uid, int] = {}
        """Requests given to the tokenizing thread, with how many of their messages it still has."""
        self._cancelled: set[Uid] = set()
        """Requests aborted while the tokenizing thread has them: their ids are not sent on."""
        self._named: OrderedDict[Uid, None] = OrderedDict()
        """The last uids a tokenize named (a tokenize naming one again is another request: refused)."""
        self._waiting_chars = 0
        """Characters of text given to the tokenizing thread, not yet tokenized."""
        self._tokenizer: TokenizeThread | None = None
        self._taken = 0
        """Bytes of frames the last loop took in."""
        self._codecs = CodecCache(limits.max_codecs)
        """The worker's codecs: its manager, its builder and its parking ask this cache."""
        setting = Setting(max_byte_run, out_of_vocab)
        self._claim = claim(self.address)  # fails now if a live worker holds the address
        try:
            if isinstance(tokenizer, str | os.PathLike) or tokenizer is None:
                tokenizer = load_tokenizer(tokenizer)
            self.tokenize_manager = TokenizeManager(tokenizer, assistant_as_data=assistant_as_data)
            # settles the tokenizer before the thread
            self.tokenize_manager.tokenize([TokenizeMsg(0, "warm up")])
            self.detokenize_manager = DetokenizeManager(
                tokenizer,
                max_byte_run=max_byte_run,
                out_of_vocab=out_of_vocab,
                max_live=limits.max_live,
                max_stops=limits.max_stops,
                max_stop_chars=limits.max_stop_chars,
                codecs=self._codecs,
            )
            for params in codec_options:  # built before the worker is ready
                self._codecs.codec(tokenizer, setting.options_of(params))
            self._backend = self._socket(zmq.PUSH, backend or default_address("backend"), bind=False)
            self._frontend = self._socket(zmq.PUSH, frontend or default_address("frontend"), bind=False)
            self._builder = codec_builder(self._codecs, tokenizer)
            self._parking = Parking(self._codecs, tokenizer, setting, self._builder)
            """Requests waiting for a codec being built (new decode options), their messages in order."""
            self._pull = self._socket(zmq.PULL, self.address, bind=True)
        except BaseException:
            if hasattr(self, "_builder"):
                self._builder.close()
            for made in ("_backend", "_frontend"):  # else open while the error's traceback is kept
                if hasattr(self, made):
                    getattr(self, made).close(linger=0)
            self._claim.release()
            raise
        self.name = name or f"worker-{os.getpid()}"
        self.local_bs = local_bs
        self.poll_ms = poll_ms
        self.incarnation = incarnation
        self.instance = uuid.uuid4().hex
        bound = self._bound = self._pull.getsockopt_string(zmq.LAST_ENDPOINT)
        self._monitor = self._pull.get_monitor_socket(zmq.EVENT_DISCONNECTED | zmq.EVENT_CLOSED)
        if not allow_remote and not loopback(bound):
            self.close()
            raise AddressError(f"{self.address} bound {bound}, which is not a loopback address")
        if not loopback(bound):
            logger.warning(
                "%s listens on %s, beyond this machine: the protocol has no authentication", self.name, bound
            )
        for push in (self._backend, self._frontend):
            push.setsockopt(zmq.SNDTIMEO, send_timeout_ms)
        self._backlog = Backlog(local_bs)
        self._outgoing = Outgoing()
        self._linger_seconds = min(send_timeout_ms, 10_000) / 1000
        """At shutdown, how long frames not yet sent wait for their peer to read them."""

    def _socket(self, kind: int, address: str, *, bind: bool) -> zmq.Socket[bytes]:
        socket: zmq.Socket[bytes] = self._context.socket(kind)
        socket.setsockopt(zmq.LINGER, 10_000)
        socket.setsockopt(zmq.SNDHWM, QUEUE_FRAMES)
        try:
            if bind:
                socket.setsockopt(zmq.RCVHWM, QUEUE_FRAMES)
                socket.setsockopt(zmq.MAXMSGSIZE, self.limits.max_frame_bytes)
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
        ready = ReadyMsg(self.name, os.getpid(), self.address, self.instance, self.incarnation)
        self._tokenizer = TokenizeThread(self.tokenize_manager)
        self._send(self._frontend, [ready])
        logger.info("%s ready on %s", self.name, self.address)
        if on_ready is not None:
            on_ready(ready)
        collector = _Collector()
        try:
            while not self._stop.is_set():
                self._loop(collector)
            # Shutting down: answer everything that has already arrived, including frames the I/O
            # thread is still delivering (a short quiet period ends it, or DRAIN_SECONDS), then
            # what is tokenizing, then hand every open request back.
            deadline = time.monotonic() + DRAIN_SECONDS
            while time.monotonic() < deadline and self._pull.poll(50):
                self._read()
            while len(self._backlog) or self._parking.ready:
                self._handle_slices()
            building = zmq.Poller()
            building.register(self._builder.fd, zmq.POLLIN)
            while self._parking.building:
                if building.poll(1000):
                    self._built()
                    self._handle_slices()
            waiting = zmq.Poller()
            waiting.register(self._tokenizer.fd, zmq.POLLIN)
            while self._tokenizer.pending:
                if waiting.poll(1000):
                    self._tokenized()
            self._hand_back()
            self._send_waiting(self._linger_seconds)
        finally:
            collector.stop()
            self.close()
        return self.stats()

    def _loop(self, collector: _Collector) -> None:
        """One turn: send what waits, read what came (health probes answered at once), handle one
        slice of what waits to be handled. Input is neither read nor handled while too much waits
        to be sent (backpressure); it is not read while too much waits behind the frame at hand.
        """
        assert self._tokenizer is not None
        full = self._outgoing.bytes > self.limits.max_outbox_bytes
        backlog = self._waiting_chars > TOKENIZE_BACKLOG * self.limits.max_text_chars
        poller = zmq.Poller()
        poller.register(self._tokenizer.fd, zmq.POLLIN)
        poller.register(self._builder.fd, zmq.POLLIN)
        poller.register(self._monitor, zmq.POLLIN)
        if not (full or backlog) and self._backlog.waiting_bytes < BACKLOG_BYTES:
            poller.register(self._pull, zmq.POLLIN)
        blocked = self._outgoing.blocked()
        for socket in blocked:
            poller.register(socket, zmq.POLLOUT)
        work = (len(self._backlog) or self._parking.ready) and not full
        events = dict(poller.poll(0 if work else self.poll_ms))
        for socket in blocked:
            if events.get(socket, 0) & zmq.POLLOUT:
                self._outgoing.pump(socket)
        if self._tokenizer.fd in events:
            self._tokenized()
        if self._builder.fd in events:
            self._built()
            collector.settle()
        if self._monitor in events:
            self._disconnections()
        if self._pull in events:
            self._read()
        if (
            len(self._backlog) or self._parking.ready
        ) and self._outgoing.bytes <= self.limits.max_outbox_bytes:
            self._handle_slices()
            if not self._parking.building:  # a collection now would walk the codec being built
                collector.between_batches()
        elif not events and not self._parking.building:
            collector.idle()

    def _send_waiting(self, seconds: float) -> None:
        """Send what waits to be sent, for up to ``seconds`` (a peer that never reads loses it)."""
        deadline = time.monotonic() + seconds
        while (blocked := self._outgoing.blocked()) and time.monotonic() < deadline:
            poller = zmq.Poller()
            for socket in blocked:
                poller.register(socket, zmq.POLLOUT)
            for socket, _ in poller.poll(100):
                self._outgoing.pump(cast(zmq.Socket[bytes], socket))
        if self._outgoing.bytes:
            self.drops.drop(
                "not_sent", f"{self._outgoing.frames()} frames: their peer did not read them in {seconds:g} s"
            )

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
        """Close the sockets, flushing replies still queued (up to their linger time), and let the
        address go: when it returns, nothing listens there, and another worker (in this process or
        another) can bind it at once.
        """
        if self._tokenizer is not None:
            self._tokenizer.close()
            self._tokenizer = None
        self._builder.close()
        if hasattr(self, "_monitor"):
            self._unbind()
            self._pull.disable_monitor()
            self._monitor.close(linger=0)
        self._pull.close(linger=0)
        self._backend.close()
        self._frontend.close()
        self._claim.release()

    def _drain(self) -> Iterator[tuple[Decoded, int]]:
        """Frames waiting now, decoded, with their sizes, until ``local_bs`` messages (or
        :data:`LOOP_BYTES` bytes of frames) are in hand.
        """
        count = self._taken = 0
        while count < self.local_bs and self._taken < LOOP_BYTES:
            try:
                frame = self._pull.recv(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            self.frames_received += 1
            self._taken += len(frame)
            try:
                decoded = self.decoder.decode(frame.buffer)
            except FrameError as error:
                self.drops.drop(error.reason, error.detail)
                continue
            count += len(decoded.batch)
            yield decoded, len(frame)

    def _read(self) -> None:
        """One loop's frames: health probes answered now, the rest put in the backlog; after large
        frames, freed memory goes back to the system.
        """
        for decoded, size in self._drain():
            if decoded.batch.kind == HealthCheckMsg.KIND:
                self.handle([decoded])
            else:
                self._backlog.add(decoded, size)
        if self._taken >= TRIM_BYTES:
            trim_memory()

    def _handle_slices(self) -> None:
        """Handle the messages whose codec is now ready (they come before any later message of
        their requests), then about ``local_bs`` messages from the front of the backlog.
        """
        released = self._parking.release()
        if released is not None:
            self.handle([Decoded(released, ())])
        if len(self._backlog):
            self.handle(self._backlog.take(self.local_bs))

    def _built(self) -> None:
        """Take the codecs built beside the loop; a request whose codec failed ends with the error
        (and the scheduler is told to drop it).
        """
        out = _Outbox()
        for uid, error in self._parking.built():
            self._refuse(DetokenizeBatch.KIND, uid, error, out)  # remembered: late messages are refused
        self._flush(out)

    def _disconnections(self) -> bool:
        """Count the senders' connections that closed; whether the listening socket has closed
        (it does only when :meth:`close` unbinds it).
        """
        closed = False
        while self._monitor.poll(0):
            event = parse_monitor_message(self._monitor.recv_multipart())
            if event["event"] == zmq.EVENT_DISCONNECTED:
                self.drops.count(
                    "connection_closed",
                    f"a sender's connection closed: it went away (a client closed: the usual case), or "
                    f"sent a frame over {self.limits.max_frame_bytes:,} bytes, refused unread",
                )
            elif event["event"] == zmq.EVENT_CLOSED:
                closed = True
        return closed

    def _unbind(self) -> None:
        """Stop listening, and wait (up to :data:`UNBIND_SECONDS`) until ZeroMQ's I/O thread has
        closed the listening socket: a socket's close returns before that, and meanwhile the
        address is still taken (``EADDRINUSE`` for a ``tcp://`` bind; an ``ipc://`` path still
        accepts connections, which a new worker's claim takes for a live worker).
        """
        try:
            self._pull.unbind(self._bound)
        except zmq.ZMQError:
            return
        deadline = time.monotonic() + UNBIND_SECONDS
        while not self._disconnections():
            left = deadline - time.monotonic()
            if left <= 0 or not self._monitor.poll(max(1, int(left * 1000))):
                return

    def handle(self, frames: Sequence[Decoded]) -> None:
        """Handle decoded frames, in arrival order, and send one frame per kind.

        The messages of a frame that could not be read are answered before its other messages
        (each ends its request: see :meth:`_refuse`).
        """
        out = _Outbox()
        for kind, frames_of_run in _runs(frames):
            for decoded in frames_of_run:
                for rejected in decoded.rejected:
                    self.drops.drop("bad_message", rejected.reason)
                    if rejected.uid is not None:
                        self._refuse(
                            rejected.kind, rejected.uid, rejected.reason, out, opening=rejected.opening
                        )
            run = [decoded.batch for decoded in frames_of_run if len(decoded.batch)]
            if not run:
                continue
            self.handled[kind] = self.handled.get(kind, 0) + sum(map(len, run))
            try:
                self._handle_run(kind, run, out)
            except Exception as error:  # a bug must cost these requests, never the worker
                logger.exception("internal error on %d %s messages", len(run), kind)
                self.drops.drop("internal_error", f"{type(error).__name__}: {error}")
                uids = {
                    message.uid: None for batch in run for message in batch.items if hasattr(message, "uid")
                }
                for uid in uids:
                    if kind == TokenizeMsg.KIND and uid in self._tokenizing:
                        self._cancelled.add(uid)  # answered here: its ids must not go out
                    self._refuse(kind, uid, f"internal error: {error}", out)
        self._flush(out)

    def _refuse(self, kind: str, uid: Uid, error: str, out: _Outbox, *, opening: bool = False) -> None:
        """End request ``uid`` with ``error``: a message of ``kind`` for it could not be handled.

        A tokenize message is a request of its own: its reply is finished, whatever the uid. A
        detokenize or abort message ends its request (see :meth:`DetokenizeManager.refuse`; its
        ids, if the tokenizing thread has it, never go out), and the scheduler is told to drop it.
        """
        if kind == TokenizeMsg.KIND:
            out.reply(UserReply(uid, "", True, error=error))
            return
        reply = self.detokenize_manager.refuse(uid, error, opening=opening)
        if uid in self._tokenizing:
            self._cancelled.add(uid)
        out.reply(reply)
        if reply.finished:
            out.to_backend.setdefault(AbortBackendMsg.KIND, []).append(AbortBackendMsg(uid))

    def _flush(self, out: _Outbox) -> None:
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
            waited = self._parking.drop(uids)
            for reply in self.detokenize_manager.abort(uids):
                if reply.uid in waited:  # aborted while its codec was being built
                    reply = UserReply(reply.uid, "", True, "abort")
                elif reply.uid in self._tokenizing:  # aborted before its ids went out: they never will
                    self._cancelled.add(reply.uid)
                    if reply.finished:  # not "no live request": the request was here, tokenizing
                        reply = UserReply(reply.uid, "", True, "abort")
                out.reply(reply)
            out.to_backend.setdefault(AbortBackendMsg.KIND, []).extend(AbortBackendMsg(uid) for uid in uids)
        elif kind == HealthCheckMsg.KIND:
            out.to_frontend.setdefault(HealthReply.KIND, []).extend(
                self._health(message.probe) for message in messages if isinstance(message, HealthCheckMsg)
            )

    def _detokenize(self, batch: DetokenizeBatch, out: _Outbox) -> None:
        batch = self._within_limits(self._parking.sort(batch), out)
        if not len(batch):
            return
        replies = self.detokenize_manager.handle_batch(batch)
        out.replies_of(replies)
        if not replies.ended:
            return
        closing = frozenset(batch.finished)
        errors = dict(replies.errors) if replies.errors else {}
        for position, reason, _ in replies.ended:
            if reason is None:  # refused (an invalid opening, max_live, opened twice): stop it there
                # (a uid this worker does not hold may live on elsewhere: handed back, re-opened)
                if errors[position].startswith(UNKNOWN_REQUEST):
                    continue
            elif position in closing or reason == "abort":
                continue  # the scheduler ended it itself
            # else a stop rule ended it here while the scheduler is still generating it
            out.to_backend.setdefault(AbortBackendMsg.KIND, []).append(AbortBackendMsg(batch.uids[position]))

    def _within_limits(self, batch: DetokenizeBatch, out: _Outbox) -> DetokenizeBatch:
        """``batch`` without its messages over ``max_ids``; each of those ends its request with an
        error (and the scheduler is told to stop it, unless it has finished it).
        """
        if batch.counts is None and not batch.opens:
            return batch  # one id per message, the decode step
        limit = self.limits.max_ids
        prompts = {position: len(opening.prompt_ids) for position, opening in batch.opens}
        counts = batch.counts or (1,) * len(batch)
        if max(counts, default=0) + max(prompts.values(), default=0) <= limit:
            return batch
        over = {p for p, count in enumerate(counts) if count + prompts.get(p, 0) > limit}
        items = batch.items
        for position in sorted(over):
            uid, size = items[position].uid, counts[position] + prompts.get(position, 0)
            error = f"request {uid!r} refused: {size:,} ids in one message > {limit:,} (max_ids)"
            self._refuse(DetokenizeBatch.KIND, uid, error, out, opening=position in prompts)
        self.drops.drop("over_max_ids", f"{len(over)} messages over {limit:,} ids")
        return DetokenizeBatch.of([message for p, message in enumerate(items) if p not in over])

    def _hand_back(self) -> None:
        """Send every open request back to the frontend, as its state and the ids it has consumed;
        one whose state cannot be saved ends alone, with an error reply (named in the log), and
        the scheduler is told to drop it.
        """
        drained, failed = self.detokenize_manager.hand_back()
        if not drained and not failed:
            return
        why = (
            f"{HANDED_BACK}: the worker is stopping; send a DetokenizeMsg with "
            "Opening(params=..., state=<this state>, consumed=<this count>) and the ids from there on "
            "to continue the request exactly"
        )
        replies = [
            UserReply(uid, "", True, None, None, why, state, consumed) for uid, state, consumed in drained
        ]
        replies += [UserReply(uid, "", True, error=error) for uid, error in failed]
        self._send(self._frontend, ReplyBatch.of(replies))
        if failed:
            self._send(self._backend, [AbortBackendMsg(uid) for uid, _ in failed])
            for _, error in failed:
                logger.error("%s: %s", self.name, error)
        logger.info("%s handed %d open requests back", self.name, len(drained))

    def _tokenize(self, msgs: list[TokenizeMsg], out: _Outbox) -> None:
        assert self._tokenizer is not None, "the tokenizing thread starts with serve()"
        limit = self.limits.max_text_chars
        taken: list[TokenizeMsg] = []
        taken_chars = 0
        most = self.limits.max_chat_messages
        for msg in msgs:
            if msg.uid in self._tokenizing or msg.uid in self._named:
                error = (
                    f"request {msg.uid!r} refused: this uid already names a request (a uid names one request)"
                )
                out.reply(UserReply(msg.uid, "", True, error=error))
                continue
            self._named[msg.uid] = None
            if len(self._named) > DEFAULT_REMEMBER_ENDED:
                self._named.popitem(last=False)
            if self.detokenize_manager.known(msg.uid):
                out.reply(UserReply(msg.uid, "", False, error=self._named_before(msg.uid)))
                continue
            if msg.messages is not None and len(msg.messages) > most:
                error = (
                    f"{len(msg.messages):,} chat messages > the limit of {most:,} (max_chat_messages): "
                    "not tokenized"
                )
                self._refuse_tokenized(msg.uid, error, out)
                continue
            chars = text_chars(msg)
            if chars > limit:
                error = (
                    f"text of {chars:,} characters > the limit of {limit:,} (max_text_chars): not tokenized"
                )
                self._refuse_tokenized(msg.uid, error, out)
                continue
            if taken and taken_chars + chars > limit:  # one encode call holds one long text's worth
                self._tokenizer.submit(taken)
                taken, taken_chars = [], 0
            taken.append(msg)
            taken_chars += chars
            self._waiting_chars += chars
            self._tokenizing[msg.uid] = self._tokenizing.get(msg.uid, 0) + 1
        self._tokenizer.submit(taken)

    def _tokenized(self) -> None:
        """Send on what the tokenizing thread has finished."""
        assert self._tokenizer is not None
        out = _Outbox()
        for msg, result in self._tokenizer.results():
            self._waiting_chars -= text_chars(msg)
            left = self._tokenizing.pop(msg.uid) - 1
            if left:
                self._tokenizing[msg.uid] = left
            if msg.uid in self._cancelled:
                if not left:
                    self._cancelled.discard(msg.uid)
                continue
            manager = self.detokenize_manager
            if msg.uid not in manager and manager.known(msg.uid):
                continue  # it ended while tokenizing (its finished reply has gone): nothing goes on
            self._tokenize_result(msg, result, out)
        self._flush(out)

    def _tokenize_result(self, msg: TokenizeMsg, result: TokenizeResult, out: _Outbox) -> None:
        if result.input_ids is None:
            self._refuse_tokenized(msg.uid, result.error or "not tokenized", out)
        elif len(result.input_ids) > self.limits.max_ids:
            error = (
                f"prompt of {len(result.input_ids):,} ids > the limit of {self.limits.max_ids:,} (max_ids)"
            )
            self._refuse_tokenized(msg.uid, error, out)
        elif (refused := self._refused(msg.params)) is not None:
            self._refuse_tokenized(msg.uid, f"request {msg.uid!r} refused: {refused}", out)
        else:
            out.to_backend.setdefault(UserMsg.KIND, []).append(
                UserMsg(msg.uid, tuple(result.input_ids), msg.params)
            )

    def _named_before(self, uid: Uid) -> str:
        """The error of a tokenize for a uid that another message named here first (ids, an
        opening, an abort): those were this request's, and its finished reply has gone (or, open,
        will come): the tokenize is answered, unfinished, and goes nowhere.
        """
        how = (
            "is open here: the scheduler opened it before its tokenize came"
            if uid in self.detokenize_manager
            else "was named here by a message before its tokenize came, and has had its finished reply"
        )
        return f"request {uid!r} {how}: tokenize ignored (a uid names one request, which ends once)"

    def _refuse_tokenized(self, uid: Uid, error: str, out: _Outbox) -> None:
        """A tokenize request that cannot go to the scheduler ends with ``error``; its uid is
        remembered as ended (an opening for it is refused).
        """
        live = uid in self.detokenize_manager
        out.reply(self.detokenize_manager.refuse(uid, error))
        if live:  # the scheduler opened it before it was tokenized: stop it there
            out.to_backend.setdefault(AbortBackendMsg.KIND, []).append(AbortBackendMsg(uid))

    def _refused(self, params: SamplingParams) -> str | None:
        """Why the opening of a request with ``params`` would be refused here, if it would (its
        stop strings past this worker's limits): such a request never reaches the scheduler. The
        parameters themselves were checked when they were made (or decoded).
        """
        try:
            self.detokenize_manager.rules(params)
        except ValueError as error:
            return str(error).removeprefix("request refused: ")
        return None

    def _health(self, probe: int) -> HealthReply:
        return HealthReply(
            probe,
            self.name,
            os.getpid(),
            len(self.detokenize_manager),
            dict(self.handled),
            dict(self.drops.counts),
            self.address,
            self.instance,
        )

    def _send(self, socket: zmq.Socket[bytes], batch: Sequence[Message] | ReplyBatch) -> None:
        frame = encode_frame(batch) if isinstance(batch, ReplyBatch) else encode_batch(batch)
        self._outgoing.send(socket, frame)


class _Collector:
    """Keeps Python's cyclic garbage collector out of the middle of a batch.

    The tokenizer and codecs are a million long-lived objects: they are frozen out of every
    collection (a codec built later too, once built; no collection runs while one is being built, as
    it would walk the new objects and stall the loop). In a worker process (``serve`` on the main
    thread), automatic collection is then turned off: the worker collects when it is idle, or
    between two batches once many objects have piled up (a safety valve under endless load); every
    ``FULL_EVERY``-th collection also takes the oldest generation. An automatic collection could
    start in the middle of a batch and delay every reply of it; on the development machine such
    pauses made most of the round trips over 5 ms. A worker running in a thread of another program
    leaves that program's collector alone.
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

    def settle(self) -> None:
        """A codec was built: its million objects leave every collection, as the first ones did."""
        if self._managed:
            gc.freeze()  # not collected first: that would walk them all, the stall this avoids

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


def _runs(frames: Sequence[Decoded]) -> Iterator[tuple[str, list[Decoded]]]:
    """Consecutive frames of one kind, handled together in arrival order; a detokenize frame is
    a run of its own (the unit an internal error may cost), and a frame with no message, read or
    rejected, is no run at all.
    """
    kind, run = "", list[Decoded]()
    for decoded in frames:
        batch = decoded.batch
        if not len(batch) and not decoded.rejected:
            continue
        if run and (batch.kind != kind or kind == DetokenizeBatch.KIND):
            yield kind, run
            run = []
        kind = batch.kind
        run.append(decoded)
    if run:
        yield kind, run


def tokenize_worker(
    tokenizer: Any = None,
    *,
    listen: str | None = None,
    backend: str | None = None,
    frontend: str | None = None,
    local_bs: int = DEFAULT_LOCAL_BS,
    limits: Limits = Limits(),
    name: str | None = None,
    on_ready: Callable[[ReadyMsg], None] | None = None,
    stop_event: threading.Event | None = None,
    max_byte_run: int | None = None,
    out_of_vocab: OutOfVocab = "raise",
    allow_remote: bool = False,
    incarnation: int = 0,
    codec_options: Sequence[SamplingParams] = (),
    assistant_as_data: bool = False,
    on_start: Callable[[Worker], None] | None = None,
) -> WorkerStats:
    """Run a worker until SIGINT/SIGTERM (in the main thread) or ``stop_event``; its stats at the end.

    See :class:`Worker` for the arguments; addresses default to ``ipc://`` files in a folder
    private to this user (:func:`~puredetok.worker._addresses.default_address`). ``on_start`` is
    given the worker once it is made, before it serves (``puredetok serve`` reads its codec there
    to say what it loaded).
    """
    worker = Worker(
        tokenizer,
        listen=listen,
        backend=backend,
        frontend=frontend,
        local_bs=local_bs,
        limits=limits,
        name=name,
        max_byte_run=max_byte_run,
        out_of_vocab=out_of_vocab,
        allow_remote=allow_remote,
        incarnation=incarnation,
        codec_options=codec_options,
        assistant_as_data=assistant_as_data,
    )
    if on_start is not None:
        try:
            on_start(worker)
        except BaseException:
            worker.close()
            raise
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
