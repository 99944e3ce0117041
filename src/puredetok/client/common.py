"""What both client sides share: the errors a request raises, hand-backs, and the tracker that
keeps each request's replies, deadline and failure.
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_TIMEOUT",
    "HandBack",
    "RequestError",
    "RequestTimeout",
    "RequestLost",
    "RequestHandedBack",
]

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence

import attrs

from puredetok.serving.messages import (
    TO_FRONTEND,
    UNKNOWN_REQUEST,
    HealthReply,
    Message,
    ReadyMsg,
    Uid,
    UserReply,
)
from puredetok.worker.routing import route
from puredetok.worker.wire import DropCounter, FrameDecoder, FrameError

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
            decoded = self.decoder.decode(frame)
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
