"""What the sync and asyncio clients share, so that each keeps only its I/O: the errors a request
raises, hand-backs, the tracker that keeps each request's replies, deadline and failure, and each
side's messages built and read (the frontend's requests, probes and aborts; the backend's ids).
"""

from __future__ import annotations

import abc
import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, TypeVar, cast

import attrs
import zmq
import zmq.asyncio

from puredetok.errors import PuredetokError
from puredetok.serving._messages import (
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
from puredetok.serving._uids import check_uid
from puredetok.worker._routing import WorkerPool, route
from puredetok.worker._wire import DropCounter, FrameDecoder, FrameError

LOG = logging.getLogger("puredetok.client")
"""Where the clients say what they could not read: the first frame of each reason is logged (a
worker of another protocol version: ``dropped (version): a frame of protocol version ...``)."""

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


class RequestError(PuredetokError):
    """A request that ended without its text, and why (``reply``: the worker's error reply, if any)."""

    def __init__(self, uid: Uid, message: str, reply: UserReply | None = None) -> None:
        super().__init__(f"request {uid!r}: {message}")
        self.uid = uid
        self.reply = reply


class RequestTimeout(RequestError):
    """No reply came for the request within the client's ``timeout`` (the client aborted it)."""


class RequestLost(RequestError):
    """The worker that held the request restarted: the request is gone with the old worker."""


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

    __slots__ = ("uid", "replies", "failure", "ended", "done", "awaiting", "deadline", "wake", "tokenized_at")

    def __init__(self, uid: Uid, deadline: float | None) -> None:
        self.uid = uid
        self.replies: deque[UserReply] = deque()
        self.failure: RequestError | None = None
        self.ended = False
        """Its finished reply has come (read or not)."""
        self.done = False
        """Its last reply has been read."""
        self.awaiting = False
        """Handed back, and its re-opening not answered yet."""
        self.tokenized_at: str | None = None
        """The worker its tokenize message went to, until its first reply (a restart of that
        worker before then loses it too)."""
        self.deadline = deadline
        self.wake: asyncio.Event | None = None

    def left(self) -> float | None:
        """Seconds until its deadline (none: None)."""
        return None if self.deadline is None else max(0.0, self.deadline - time.monotonic())


class _Tracker:
    """What both frontend clients do with what arrives: replies to their requests, hand-backs,
    restarts (one :class:`ReadyMsg` per worker process), health replies. ``abort`` sends the
    aborts of the requests a restarted worker lost (so that the scheduler stops generating them).
    """

    def __init__(
        self,
        addresses: Sequence[str],
        timeout: float | None,
        on_hand_back: Callable[[HandBack], None] | None,
        abort: Callable[[list[Uid]], None],
    ) -> None:
        self.addresses = tuple(addresses)
        self.timeout = _seconds(timeout)
        self.on_hand_back = on_hand_back
        self.abort = abort
        self.entries: dict[Uid, _Entry] = {}
        self.instances: dict[str, str] = {}
        """The worker (its :attr:`ReadyMsg.instance`) last heard of at each worker address."""
        self.health: list[HealthReply] = []
        """The replies to the current probe, one per worker."""
        self.probe = 0
        """The id of the current health probe: a late reply to an earlier one is not its answer."""
        self.unclaimed = 0
        """Replies for uids no request of this client has (counted, dropped)."""
        self._decoder = FrameDecoder(TO_FRONTEND)
        self.drops = DropCounter(LOG)
        """Frames from the workers that could not be read, by reason (``"version"``: a worker of
        another protocol version; its replies are never misread, and the first is logged)."""

    def deadline(self) -> float | None:
        return None if self.timeout is None else time.monotonic() + self.timeout

    def add(self, uid: Uid) -> _Entry:
        if uid in self.entries:
            raise ValueError(f"request {uid!r} is already open in this client")
        entry = self.entries[uid] = _Entry(uid, self.deadline())
        return entry

    def frame(self, frame: bytes) -> None:
        try:
            decoded = self._decoder.decode(frame)
        except FrameError as error:
            self.drops.drop(error.reason, error.detail)
            return
        for message in decoded.batch.items:
            self.message(message)

    def message(self, message: Message) -> None:
        if isinstance(message, UserReply):
            self.reply(message)
        elif isinstance(message, ReadyMsg):
            self.ready(message)
        elif isinstance(message, HealthReply):
            if message.address and message.instance:
                self.instances.setdefault(message.address, message.instance)
            worker = (message.address, message.worker)  # a worker that sends no address: its name
            if message.probe == self.probe and all((h.address, h.worker) != worker for h in self.health):
                self.health.append(message)

    def reply(self, reply: UserReply) -> None:
        entry = self.entries.get(reply.uid)
        if entry is None:
            self.unclaimed += 1
            return
        if entry.failure is not None:
            return  # the client gave it up (its worker restarted): a new worker knows nothing of it
        entry.deadline = self.deadline()
        entry.tokenized_at = None
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
        entry.ended = reply.finished
        entry.replies.append(reply)
        self.notify(entry)

    def ready(self, ready: ReadyMsg) -> None:
        """A worker started: if another worker had announced itself at its address (in a ReadyMsg
        or a health reply), that one is gone, and so are the requests it held and those it was
        tokenizing: each fails with :class:`RequestLost`, and is aborted once (its abort reaches the
        scheduler through the request's owner, the new worker if it was the one). Workers are told
        apart by address and instance, never by name or pid (see :class:`ReadyMsg`).
        """
        before = self.instances.get(ready.address)
        self.instances[ready.address] = ready.instance
        if before is None or before == ready.instance:
            return
        owners = len(self.addresses)
        lost = [
            entry
            for entry in self.entries.values()
            if entry.failure is None
            and not entry.ended
            and not entry.awaiting
            and ready.address in (self.addresses[route(entry.uid, owners)], entry.tokenized_at)
        ]
        for entry in lost:
            self.fail(entry, RequestLost(entry.uid, f"its worker at {ready.address} restarted"))
        if lost:
            self.abort([entry.uid for entry in lost])

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


_Pull = TypeVar("_Pull", bound="zmq.Socket[Any]")
"""The socket a client reads the workers with: a plain one, or an asyncio one."""
_Req = TypeVar("_Req")
"""What a frontend client's :meth:`_Frontend.request` returns: an iterator, or an async one."""


class _Side(Generic[_Pull]):
    """What every client holds: the pool it sends through and the socket it binds to hear from the
    workers at ``listen``.
    """

    def __init__(
        self, workers: Sequence[str], listen: str, tokenize: Sequence[str] | None, context: zmq.Context[_Pull]
    ) -> None:
        # Sends go through plain (blocking) sockets even for the asyncio clients: they never wait
        # unless a worker has 100,000 frames queued.
        self._pool = WorkerPool(workers, tokenize, context=zmq.Context.shadow(context.underlying))
        # The bound socket lives in a context of its own, which close() terminates: libzmq closes a
        # socket's connections later, in its own threads, and a frame a worker sent down one in
        # between was lost, even once another client bound the address (a scheduler restarted).
        # Terminating waits for them: when close() returns, the next frames wait for the next client.
        own = zmq.asyncio.Context() if isinstance(context, zmq.asyncio.Context) else zmq.Context()
        self._listening = cast(zmq.Context[_Pull], own)
        self._pull: _Pull = self._listening.socket(zmq.PULL)
        self._pull.setsockopt(zmq.LINGER, 0)
        try:
            self._pull.bind(listen)
        except zmq.ZMQError:
            self._close_sockets()
            raise

    def _close_sockets(self) -> None:
        self._pool.close()
        self._pull.close(linger=0)
        self._listening.term()


class _Frontend(_Side[_Pull], Generic[_Pull, _Req], abc.ABC):
    """What the sync and async frontend clients share: requests tracked, tokenize requests, aborts
    and health probes sent.
    """

    def __init__(
        self,
        workers: Sequence[str],
        listen: str,
        tokenize: Sequence[str] | None,
        context: zmq.Context[_Pull],
        timeout: float | None,
        on_hand_back: Callable[[HandBack], None] | None,
    ) -> None:
        timeout = _seconds(timeout)  # checked before the sockets open
        super().__init__(workers, listen, tokenize, context)
        self._tracker = _Tracker(self._pool.detokenize_addresses, timeout, on_hand_back, self._abort_all)

    @property
    def drops(self) -> DropCounter:
        """Frames from the workers that could not be read, by reason (``"version"``: a worker of
        another protocol version; the first of each reason is logged).
        """
        return self._tracker.drops

    @property
    def unclaimed(self) -> int:
        """Replies that came for uids this client has no request for (dropped)."""
        return self._tracker.unclaimed

    @abc.abstractmethod
    def request(self, uid: Uid) -> _Req:
        """Read the replies of request ``uid``, whose ids another party sends (say, a scheduler that
        got the request some other way). Raises ValueError if this client already reads it.
        """

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
    ) -> _Req:
        """Send one request to be tokenized (plain ``text`` or chat ``messages``, see
        :class:`TokenizeMsg`); its replies come through the returned request (an asyncio client's:
        call it from the running loop).
        """
        request = self.request(uid)
        entry = self._tracker.entries[uid]
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
            entry.tokenized_at = self._pool.send([message]).get(uid)
        except BaseException:
            self._tracker.entries.pop(uid, None)
            raise
        return request

    def abort(self, uid: Uid) -> None:
        """The client is gone: drop the request at its worker and at the scheduler. Its iterator
        ends with the abort reply. ``uid`` is one request's id (an ``int`` or ``str``); anything
        else (a list, bytes) raises ``TypeError``.
        """
        self._pool.send([AbortMsg(check_uid(uid))])

    def _abort_all(self, uids: list[Uid]) -> None:
        self._pool.send([AbortMsg(uid) for uid in uids])

    def _probe(self, timeout: float) -> float:
        """Send a health probe to every worker (forgetting earlier replies); when to stop waiting."""
        tracker = self._tracker
        tracker.health.clear()
        tracker.probe = max(tracker.probe + 1, int(time.monotonic() * 1000))
        self._pool.send([HealthCheckMsg(tracker.probe)])
        return time.monotonic() + timeout

    def _probing(self, deadline: float) -> bool:
        """Whether a worker has not answered the probe yet, and there is time left to wait for it."""
        wanted = len(set(self._pool.detokenize_addresses + self._pool.tokenize_addresses))
        return len(self._tracker.health) < wanted and time.monotonic() < deadline


_Client = TypeVar("_Client", bound="_Frontend[Any, Any]")


class _Replies(Generic[_Client]):
    """What a request's sync and async iterators share: its entry, its final reply, its timeout."""

    def __init__(self, client: _Client, entry: _Entry) -> None:
        self._client = client
        self._entry = entry
        self.uid = entry.uid
        self.final: UserReply | None = None
        """The finished reply, once it has been read."""

    def _take(self) -> UserReply | None:
        """The request's next reply if one is in, None if it must wait; raises as
        :meth:`_Tracker.next` does, aborting the request that timed out.
        """
        try:
            reply = self._client._tracker.next(self._entry)
        except RequestTimeout:
            self._client.abort(self.uid)
            raise
        if reply is not None and reply.finished:
            self.final = reply
        return reply


class _Backend(_Side[_Pull]):
    """What the sync and async scheduler clients share: ids sent, frames read."""

    def __init__(
        self, workers: Sequence[str], listen: str, tokenize: Sequence[str] | None, context: zmq.Context[_Pull]
    ) -> None:
        super().__init__(workers, listen, tokenize, context)
        self._decoder = FrameDecoder(TO_BACKEND)
        self.drops = DropCounter(LOG)
        """Frames from the workers that could not be read, by reason (``"version"``: a worker of
        another protocol version, logged once)."""

    def send(self, messages: Sequence[DetokenizeMsg]) -> None:
        """Send generated ids (each request's first message with its :class:`Opening`)."""
        self._pool.send(messages)

    def close(self) -> None:
        """Close the sockets: when this returns the workers' connections to ``listen`` are closed, and
        what they send next waits for the next client to bind it.
        """
        self._close_sockets()

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
        self._pool.send([DetokenizeMsg(hand_back.uid, ids, finished, opening, finish_reason, matched_stop)])

    def _decode(self, frame: bytes) -> list[UserMsg | AbortBackendMsg]:
        try:
            items = self._decoder.decode(frame).batch.items
        except FrameError as error:
            self.drops.drop(error.reason, error.detail)
            return []
        return [m for m in items if isinstance(m, UserMsg | AbortBackendMsg)]
