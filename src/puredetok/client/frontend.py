"""The API server's side of the workers, sync and asyncio: tokenize and abort, read each
request's replies as an iterator.
"""

from __future__ import annotations

__all__ = ["FrontendClient", "AsyncFrontendClient", "Request", "AsyncRequest"]

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from typing import Any

import zmq
import zmq.asyncio

from puredetok.client.common import (
    DEFAULT_TIMEOUT,
    HandBack,
    RequestTimeout,
    _Entry,
    _Tracker,
)
from puredetok.serving.messages import (
    DEFAULT_PARAMS,
    AbortMsg,
    HealthCheckMsg,
    HealthReply,
    SamplingParams,
    TokenizeMsg,
    Uid,
    UserReply,
)
from puredetok.serving.uids import check_uid
from puredetok.worker.routing import WorkerPool
from puredetok.worker.wire import DropCounter


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

    @property
    def drops(self) -> DropCounter:
        """Frames from the workers that could not be read, by reason (``"version"``: a worker of
        another protocol version; the first of each reason is logged).
        """
        return self.tracker.drops

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
        ends with the abort reply. ``uid`` is one request's id (an ``int`` or ``str``); anything
        else (a list, bytes) raises ``TypeError``.
        """
        self.pool.send([AbortMsg(check_uid(uid))])

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
        self.pool.send([AbortMsg(check_uid(uid))])

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
