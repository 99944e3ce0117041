"""Typed Python clients for the two sides of the worker, sync and asyncio.

- The API server's side (:class:`FrontendClient`, :class:`AsyncFrontendClient`) binds the address
  the workers send text to, sends tokenize requests and aborts, and reads each request's replies
  as an iterator (``for reply in request``, ``async for reply in request``).
- The scheduler's side (:class:`BackendClient`, :class:`AsyncBackendClient`) binds the address the
  workers send token ids to, reads each tokenized request (:class:`UserMsg`) and each abort
  (:class:`AbortBackendMsg`), and sends generated ids (:class:`DetokenizeMsg`, the first one of a
  request with its :class:`Opening`, the last one with its finish reason).

Both route through a :class:`~puredetok.worker.routing.WorkerPool` (a request's messages always
reach the worker that holds it). The failure model, request by request (docs/worker.md):

- an error reply that ends a request raises :class:`RequestError` from its iterator (an error that
  does not end it, such as invalid ids skipped, comes as a reply with ``error`` set);
- a worker that restarted (a :class:`ReadyMsg` from its address with another process id) lost the
  requests it held: each raises :class:`RequestLost` at once;
- no reply for ``timeout`` seconds: :class:`RequestTimeout` (and an abort is sent, so that the
  worker and the scheduler let the request go); a request never hangs;
- a worker that stops hands its requests back (:attr:`UserReply.state`): with ``on_hand_back``,
  the client gives each :class:`HandBack` to it (the scheduler re-opens the request on a worker
  with :meth:`BackendClient.reopen`) and the request's iterator goes on as if nothing happened;
  without, the request raises :class:`RequestHandedBack`, which carries the hand-back.
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_TIMEOUT",
    "HandBack",
    "RequestError",
    "RequestTimeout",
    "RequestLost",
    "RequestHandedBack",
    "FrontendClient",
    "AsyncFrontendClient",
    "Request",
    "AsyncRequest",
    "BackendClient",
    "AsyncBackendClient",
]

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from typing import Any

import attrs
import zmq
import zmq.asyncio

from puredetok.serving.messages import (
    DEFAULT_PARAMS,
    TO_BACKEND,
    TO_FRONTEND,
    UNKNOWN_REQUEST,
    AbortBackendMsg,
    AbortMsg,
    DetokenizeMsg,
    HealthCheckMsg,
    HealthReply,
    Message,
    Opening,
    ReadyMsg,
    SamplingParams,
    TokenizeMsg,
    Uid,
    UserMsg,
    UserReply,
)
from puredetok.worker.routing import WorkerPool, route
from puredetok.worker.wire import FrameDecoder, FrameError

DEFAULT_TIMEOUT = 60.0
"""Seconds a request may go without a reply before it fails with :class:`RequestTimeout`."""


@attrs.frozen
class HandBack:
    """A request a stopping worker handed back: its stream and how many generated ids it consumed.

    Re-open it with :meth:`BackendClient.reopen` (a :class:`DetokenizeMsg` whose :class:`Opening`
    carries the state, with the request's ids from ``consumed`` on): it continues exactly.
    """

    uid: Uid
    state: bytes
    """The request's stream as bytes (:meth:`puredetok.Stream.to_bytes`)."""
    consumed: int
    """How many of the request's generated ids the state has consumed."""


class RequestError(Exception):
    """A request that ended without its text, and why (``reply``: the worker's error reply, if any)."""

    def __init__(self, uid: Uid, message: str, reply: UserReply | None = None) -> None:
        super().__init__(f"request {uid!r}: {message}")
        self.uid = uid
        self.reply = reply


class RequestTimeout(RequestError):
    """No reply came for the request within the client's ``timeout`` (the client aborted it)."""


class RequestLost(RequestError):
    """The worker that held the request restarted: the request is gone with the old process."""


class RequestHandedBack(RequestError):
    """A stopping worker handed the request back, and the client has no ``on_hand_back`` to give it
    to; :attr:`hand_back` re-opens it (:meth:`BackendClient.reopen`).
    """

    def __init__(self, hand_back: HandBack, reply: UserReply) -> None:
        super().__init__(hand_back.uid, "handed back by a stopping worker (re-open it with its state)", reply)
        self.hand_back = hand_back


def _seconds(timeout: float | None) -> float | None:
    if timeout is not None and (
        not isinstance(timeout, int | float) or isinstance(timeout, bool) or timeout <= 0
    ):
        raise ValueError(f"timeout must be a positive number of seconds or None, not {timeout!r}")
    return timeout


class _Entry:
    """One request's replies not yet read, and how it stands."""

    __slots__ = ("uid", "replies", "failure", "done", "awaiting", "deadline", "wake")

    def __init__(self, uid: Uid, deadline: float | None) -> None:
        self.uid = uid
        self.replies: deque[UserReply] = deque()
        self.failure: RequestError | None = None
        self.done = False
        """Its last reply has been read."""
        self.awaiting = False
        """Handed back, and its re-opening not answered yet."""
        self.deadline = deadline
        self.wake: asyncio.Event | None = None


class _Tracker:
    """What both frontend clients do with what arrives: replies to their requests, hand-backs,
    restarts (one :class:`ReadyMsg` per worker process), health replies.
    """

    def __init__(
        self,
        addresses: Sequence[str],
        timeout: float | None,
        on_hand_back: Callable[[HandBack], None] | None,
    ) -> None:
        self.addresses = tuple(addresses)
        self.timeout = _seconds(timeout)
        self.on_hand_back = on_hand_back
        self.entries: dict[Uid, _Entry] = {}
        self.processes: dict[str, int] = {}
        """The process id last heard of at each worker address and under each worker name."""
        self.health: list[HealthReply] = []
        self.unclaimed = 0
        """Replies for uids no request of this client has (counted, dropped)."""
        self.decoder = FrameDecoder(TO_FRONTEND)

    def deadline(self) -> float | None:
        return None if self.timeout is None else time.monotonic() + self.timeout

    def add(self, uid: Uid) -> _Entry:
        if uid in self.entries:
            raise ValueError(f"request {uid!r} is already open in this client")
        entry = self.entries[uid] = _Entry(uid, self.deadline())
        return entry

    def frame(self, frame: bytes) -> None:
        try:
            decoded = self.decoder.decode(frame)
        except FrameError:
            return
        for message in decoded.batch.items:
            self.message(message)

    def message(self, message: Message) -> None:
        if isinstance(message, UserReply):
            self.reply(message)
        elif isinstance(message, ReadyMsg):
            self.ready(message)
        elif isinstance(message, HealthReply):
            self.processes.setdefault(message.worker, message.pid)
            self.health.append(message)

    def reply(self, reply: UserReply) -> None:
        entry = self.entries.get(reply.uid)
        if entry is None:
            self.unclaimed += 1
            return
        if entry.failure is not None:
            return  # the client gave it up (its worker restarted): a new worker knows nothing of it
        entry.deadline = self.deadline()
        if reply.state is not None and reply.consumed is not None:
            hand_back = HandBack(reply.uid, reply.state, reply.consumed)
            if self.on_hand_back is None:
                self.fail(entry, RequestHandedBack(hand_back, reply))
                return
            entry.awaiting = True
            self.on_hand_back(hand_back)
            return
        if entry.awaiting and reply.error is not None and reply.error.startswith(UNKNOWN_REQUEST):
            return  # ids sent before the re-opening reached the new worker first: they come again
        entry.awaiting = False
        entry.replies.append(reply)
        self.notify(entry)

    def ready(self, ready: ReadyMsg) -> None:
        """A worker started: if another process had announced itself at its address (or under its
        name, as a health reply tells), that one is gone, and so are the requests it held.
        """
        before = {self.processes.get(ready.address), self.processes.get(ready.worker)} - {None}
        self.processes[ready.address] = self.processes[ready.worker] = ready.pid
        if not before - {ready.pid} or ready.address not in self.addresses:
            return
        owners = len(self.addresses)
        for entry in list(self.entries.values()):
            if not entry.awaiting and self.addresses[route(entry.uid, owners)] == ready.address:
                self.fail(entry, RequestLost(entry.uid, f"its worker at {ready.address} restarted"))

    def fail(self, entry: _Entry, failure: RequestError) -> None:
        if entry.failure is None:
            entry.failure = failure
        self.notify(entry)

    def notify(self, entry: _Entry) -> None:
        if entry.wake is not None:
            entry.wake.set()

    def next(self, entry: _Entry) -> UserReply | None:
        """The request's next reply if one is in, None if it must wait; raises when it failed or
        when its last reply was read (``StopIteration``, or its error).
        """
        if entry.done:
            raise StopIteration
        if entry.replies:
            reply = entry.replies.popleft()
            if reply.finished:
                self.entries.pop(entry.uid, None)
                entry.done = True
                if reply.error is not None:
                    raise RequestError(entry.uid, reply.error, reply)
            return reply
        if entry.failure is not None:
            self.entries.pop(entry.uid, None)
            entry.done = True
            raise entry.failure
        if entry.deadline is not None and time.monotonic() >= entry.deadline:
            self.entries.pop(entry.uid, None)
            entry.done = True
            raise RequestTimeout(entry.uid, f"no reply for {self.timeout} s (aborted)")
        return None


class _Frontend:
    """What the sync and async frontend clients share: the pool they send through."""

    def __init__(
        self,
        workers: Sequence[str],
        tokenize: Sequence[str] | None,
        context: zmq.Context[Any],
        timeout: float | None,
        on_hand_back: Callable[[HandBack], None] | None,
    ) -> None:
        # Sends go through plain (blocking) sockets even for the asyncio clients: they never wait
        # unless a worker has 100,000 frames queued.
        self.pool = WorkerPool(workers, tokenize, context=zmq.Context.shadow(context.underlying))
        self.tracker = _Tracker(self.pool.detokenize_addresses, timeout, on_hand_back)

    def _send_tokenize(
        self,
        uid: Uid,
        text: str | None,
        messages: Sequence[Mapping[str, Any]] | None,
        params: SamplingParams,
        template_options: Mapping[str, Any] | None,
        add_special_tokens: bool,
        parse_special_tokens: bool,
    ) -> None:
        """Send a tokenize message for ``uid``, whose request is already tracked (dropped again if
        the message cannot be sent).
        """
        try:
            message = TokenizeMsg(
                uid,
                text,
                None if messages is None else tuple(dict(message) for message in messages),
                params,
                dict(template_options or {}),
                add_special_tokens,
                parse_special_tokens,
            )
            self.pool.send([message])
        except BaseException:
            self.tracker.entries.pop(uid, None)
            raise

    @property
    def unclaimed(self) -> int:
        """Replies that came for uids this client has no request for (dropped)."""
        return self.tracker.unclaimed


class FrontendClient(_Frontend):
    """The API server's side of the workers: tokenize and abort, read each request's replies.

    ``listen`` is the address the workers send text to (their ``--frontend``); this client binds
    it. ``workers`` are the workers' own addresses in routing order (``tokenize``: the workers that
    tokenize, by default the same). ``timeout``: seconds a request may wait for its next reply
    (None: forever). ``on_hand_back``: what to do with a request a stopping worker handed back
    (see the module). Use it as a context manager, or :meth:`close` it.
    """

    def __init__(
        self,
        workers: Sequence[str],
        listen: str,
        *,
        tokenize: Sequence[str] | None = None,
        timeout: float | None = DEFAULT_TIMEOUT,
        on_hand_back: Callable[[HandBack], None] | None = None,
        context: zmq.Context[Any] | None = None,
    ) -> None:
        context = context or zmq.Context.instance()
        super().__init__(workers, tokenize, context, timeout, on_hand_back)
        self._pull: zmq.Socket[bytes] = context.socket(zmq.PULL)
        self._pull.setsockopt(zmq.LINGER, 0)
        self._pull.bind(listen)

    def tokenize(
        self,
        uid: Uid,
        text: str | None = None,
        *,
        messages: Sequence[Mapping[str, Any]] | None = None,
        params: SamplingParams = DEFAULT_PARAMS,
        template_options: Mapping[str, Any] | None = None,
        add_special_tokens: bool = True,
        parse_special_tokens: bool = False,
    ) -> Request:
        """Send one request to be tokenized (plain ``text`` or chat ``messages``, see
        :class:`TokenizeMsg`); its replies come through the returned :class:`Request`.
        """
        request = self.request(uid)
        self._send_tokenize(
            uid, text, messages, params, template_options, add_special_tokens, parse_special_tokens
        )
        return request

    def request(self, uid: Uid) -> Request:
        """Read the replies of request ``uid``, whose ids another party sends (say, a scheduler that
        got the request some other way). Raises ValueError if this client already reads it.
        """
        return Request(self, self.tracker.add(uid))

    def abort(self, uid: Uid) -> None:
        """The client is gone: drop the request at its worker and at the scheduler. Its iterator
        ends with the abort reply.
        """
        self.pool.send([AbortMsg(uid)])

    def poll(self, timeout: float = 0.0) -> None:
        """Take in whatever has arrived, waiting up to ``timeout`` seconds for the first frame."""
        wait = max(0, int(timeout * 1000))
        while self._pull.poll(wait):
            self.tracker.frame(self._pull.recv())
            wait = 0

    def health(self, timeout: float = 10.0) -> list[HealthReply]:
        """Probe every worker; their replies (one per worker that answered within ``timeout``)."""
        self.tracker.health.clear()
        self.pool.send([HealthCheckMsg(int(time.monotonic() * 1000))])
        wanted = len(set(self.pool.detokenize_addresses + self.pool.tokenize_addresses))
        deadline = time.monotonic() + timeout
        while len(self.tracker.health) < wanted and time.monotonic() < deadline:
            self.poll(deadline - time.monotonic())
        return list(self.tracker.health)

    def _wait(self, entry: _Entry) -> UserReply | None:
        reply = self.tracker.next(entry)
        if reply is None:
            left = 0.25 if entry.deadline is None else max(0.0, entry.deadline - time.monotonic())
            self.poll(min(left, 0.25))
            reply = self.tracker.next(entry)
        return reply

    def close(self) -> None:
        """Close the sockets (frames already sent are still delivered for a few seconds)."""
        self.pool.close()
        self._pull.close(linger=0)

    def __enter__(self) -> FrontendClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class Request:
    """One request's replies, as an iterator of :class:`UserReply` (see the module for how it fails).

    The last reply yielded is the finished one; an error reply that ends the request raises
    :class:`RequestError` instead. :meth:`text` reads to the end and returns the whole text.
    """

    def __init__(self, client: FrontendClient, entry: _Entry) -> None:
        self._client = client
        self._entry = entry
        self.uid = entry.uid
        self.final: UserReply | None = None
        """The finished reply, once it has been read."""

    def __iter__(self) -> Iterator[UserReply]:
        return self

    def __next__(self) -> UserReply:
        entry = self._entry
        while True:
            try:
                reply = self._client._wait(entry)
            except RequestTimeout:
                self._client.abort(entry.uid)
                raise
            if reply is not None:
                if reply.finished:
                    self.final = reply
                return reply

    def text(self) -> str:
        """Read every reply; the request's whole text (raises as iteration does)."""
        return "".join(reply.incremental_output for reply in self)


class AsyncFrontendClient(_Frontend):
    """:class:`FrontendClient` for asyncio: ``async for reply in client.tokenize(...)``.

    Its socket is read by one task of the running loop (started by the first request, stopped by
    :meth:`close`); sending never waits (unless 100,000 frames are queued for one worker).
    """

    def __init__(
        self,
        workers: Sequence[str],
        listen: str,
        *,
        tokenize: Sequence[str] | None = None,
        timeout: float | None = DEFAULT_TIMEOUT,
        on_hand_back: Callable[[HandBack], None] | None = None,
        context: zmq.asyncio.Context | None = None,
    ) -> None:
        context = context or zmq.asyncio.Context.instance()
        super().__init__(workers, tokenize, context, timeout, on_hand_back)
        self._pull = context.socket(zmq.PULL)
        self._pull.setsockopt(zmq.LINGER, 0)
        self._pull.bind(listen)
        self._reader: asyncio.Task[None] | None = None

    def tokenize(
        self,
        uid: Uid,
        text: str | None = None,
        *,
        messages: Sequence[Mapping[str, Any]] | None = None,
        params: SamplingParams = DEFAULT_PARAMS,
        template_options: Mapping[str, Any] | None = None,
        add_special_tokens: bool = True,
        parse_special_tokens: bool = False,
    ) -> AsyncRequest:
        """As :meth:`FrontendClient.tokenize`; call it from the running loop."""
        request = self.request(uid)
        self._send_tokenize(
            uid, text, messages, params, template_options, add_special_tokens, parse_special_tokens
        )
        return request

    def request(self, uid: Uid) -> AsyncRequest:
        """As :meth:`FrontendClient.request`; call it from the running loop."""
        entry = self.tracker.add(uid)
        entry.wake = asyncio.Event()
        self._start_reading()
        return AsyncRequest(self, entry)

    def abort(self, uid: Uid) -> None:
        """As :meth:`FrontendClient.abort`."""
        self.pool.send([AbortMsg(uid)])

    async def health(self, timeout: float = 10.0) -> list[HealthReply]:
        """As :meth:`FrontendClient.health`."""
        self.tracker.health.clear()
        self._start_reading()
        self.pool.send([HealthCheckMsg(int(time.monotonic() * 1000))])
        wanted = len(set(self.pool.detokenize_addresses + self.pool.tokenize_addresses))
        deadline = time.monotonic() + timeout
        while len(self.tracker.health) < wanted and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        return list(self.tracker.health)

    def _start_reading(self) -> None:
        if self._reader is None:
            self._reader = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        while True:
            self.tracker.frame(await self._pull.recv())

    async def close(self) -> None:
        """Stop reading and close the sockets."""
        if self._reader is not None:
            self._reader.cancel()
            try:
                await self._reader
            except asyncio.CancelledError:
                pass
            self._reader = None
        self.pool.close()
        self._pull.close(linger=0)

    async def __aenter__(self) -> AsyncFrontendClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


class AsyncRequest:
    """One request's replies, as an async iterator of :class:`UserReply` (as :class:`Request`)."""

    def __init__(self, client: AsyncFrontendClient, entry: _Entry) -> None:
        self._client = client
        self._entry = entry
        self.uid = entry.uid
        self.final: UserReply | None = None
        """The finished reply, once it has been read."""

    def __aiter__(self) -> AsyncIterator[UserReply]:
        return self

    async def __anext__(self) -> UserReply:
        entry, tracker = self._entry, self._client.tracker
        wake = entry.wake
        assert wake is not None
        while True:
            try:
                reply = tracker.next(entry)
            except StopIteration:
                raise StopAsyncIteration from None
            except RequestTimeout:
                self._client.abort(entry.uid)
                raise
            if reply is not None:
                if reply.finished:
                    self.final = reply
                return reply
            wake.clear()
            left = None if entry.deadline is None else max(0.0, entry.deadline - time.monotonic())
            try:
                await asyncio.wait_for(wake.wait(), left)
            except TimeoutError:
                pass

    async def text(self) -> str:
        """Read every reply; the request's whole text (raises as iteration does)."""
        return "".join([reply.incremental_output async for reply in self])


class _Backend:
    """What the sync and async scheduler clients share: the pool they send through."""

    def __init__(
        self, workers: Sequence[str], tokenize: Sequence[str] | None, context: zmq.Context[Any]
    ) -> None:
        self.pool = WorkerPool(workers, tokenize, context=zmq.Context.shadow(context.underlying))
        self.decoder = FrameDecoder(TO_BACKEND)

    def send(self, messages: Sequence[DetokenizeMsg]) -> None:
        """Send generated ids (each request's first message with its :class:`Opening`)."""
        self.pool.send(messages)

    def reopen(
        self,
        hand_back: HandBack,
        output_ids: Sequence[int],
        params: SamplingParams,
        *,
        finished: bool = False,
        finish_reason: Any = None,
        matched_stop: str | int | None = None,
    ) -> None:
        """Continue a request a stopping worker handed back: ``output_ids`` are all the ids it has
        generated so far (the ones from ``hand_back.consumed`` on are sent with its state);
        ``params`` are the request's (their decode options choose the codec).
        """
        if len(output_ids) < hand_back.consumed:
            raise ValueError(
                f"request {hand_back.uid!r}: {len(output_ids)} ids generated, "
                f"but its state consumed {hand_back.consumed}"
            )
        opening = Opening((), params, hand_back.state, hand_back.consumed)
        ids = tuple(output_ids[hand_back.consumed :])
        self.pool.send([DetokenizeMsg(hand_back.uid, ids, finished, opening, finish_reason, matched_stop)])

    def _decode(self, frame: bytes) -> list[UserMsg | AbortBackendMsg]:
        try:
            items = self.decoder.decode(frame).batch.items
        except FrameError:
            return []
        return [m for m in items if isinstance(m, UserMsg | AbortBackendMsg)]


class BackendClient(_Backend):
    """The scheduler's side of the workers: read tokenized requests and aborts, send ids.

    ``listen`` is the address the workers send ids to (their ``--backend``); this client binds it.
    ``workers`` are the workers' addresses in routing order (as every sender must list them).
    """

    def __init__(
        self,
        workers: Sequence[str],
        listen: str,
        *,
        tokenize: Sequence[str] | None = None,
        context: zmq.Context[Any] | None = None,
    ) -> None:
        context = context or zmq.Context.instance()
        super().__init__(workers, tokenize, context)
        self._pull: zmq.Socket[bytes] = context.socket(zmq.PULL)
        self._pull.setsockopt(zmq.LINGER, 0)
        self._pull.bind(listen)

    def receive(self, timeout: float | None = 0.0) -> list[UserMsg | AbortBackendMsg]:
        """What the workers sent, waiting up to ``timeout`` seconds (None: until something comes)
        for the first frame; empty if nothing came.
        """
        wait = -1 if timeout is None else max(0, int(timeout * 1000))
        got: list[UserMsg | AbortBackendMsg] = []
        while self._pull.poll(wait):
            got.extend(self._decode(self._pull.recv()))
            wait = 0
        return got

    def __iter__(self) -> Iterator[UserMsg | AbortBackendMsg]:
        """Every message from the workers, as it comes (forever)."""
        while True:
            yield from self.receive(None)

    def close(self) -> None:
        """Close the sockets."""
        self.pool.close()
        self._pull.close(linger=0)

    def __enter__(self) -> BackendClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class AsyncBackendClient(_Backend):
    """:class:`BackendClient` for asyncio: ``await client.receive()``, ``async for message in client``."""

    def __init__(
        self,
        workers: Sequence[str],
        listen: str,
        *,
        tokenize: Sequence[str] | None = None,
        context: zmq.asyncio.Context | None = None,
    ) -> None:
        context = context or zmq.asyncio.Context.instance()
        super().__init__(workers, tokenize, context)
        self._pull = context.socket(zmq.PULL)
        self._pull.setsockopt(zmq.LINGER, 0)
        self._pull.bind(listen)

    async def receive(self, timeout: float | None = None) -> list[UserMsg | AbortBackendMsg]:
        """What the workers sent, waiting up to ``timeout`` seconds (None: until something comes)."""
        wait = None if timeout is None else max(0, int(timeout * 1000))
        got: list[UserMsg | AbortBackendMsg] = []
        while await self._pull.poll(wait):
            got.extend(self._decode(await self._pull.recv()))
            wait = 0
        return got

    def __aiter__(self) -> AsyncIterator[UserMsg | AbortBackendMsg]:
        return self._messages()

    async def _messages(self) -> AsyncIterator[UserMsg | AbortBackendMsg]:
        while True:
            for message in await self.receive(None):
                yield message

    def close(self) -> None:
        """Close the sockets."""
        self.pool.close()
        self._pull.close(linger=0)

    async def __aenter__(self) -> AsyncBackendClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.close()
