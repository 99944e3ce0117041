"""The API server's side of the workers, sync and asyncio: tokenize and abort, read each
request's replies as an iterator.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any

import zmq
import zmq.asyncio

from puredetok.client._common import DEFAULT_TIMEOUT, HandBack, _Frontend, _Replies
from puredetok.serving._messages import HealthReply, Uid, UserReply


class FrontendClient(_Frontend[zmq.Socket[bytes], "Request"]):
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
        super().__init__(workers, listen, tokenize, context or zmq.Context.instance(), timeout, on_hand_back)

    def request(self, uid: Uid) -> Request:
        """Read the replies of request ``uid``, whose ids another party sends (say, a scheduler that
        got the request some other way). Raises ValueError if this client already reads it.
        """
        return Request(self, self._tracker.add(uid))

    def poll(self, timeout: float = 0.0) -> None:
        """Take in whatever has arrived, waiting up to ``timeout`` seconds for the first frame."""
        wait = max(0, int(timeout * 1000))
        while self._pull.poll(wait):
            self._tracker.frame(self._pull.recv())
            wait = 0

    def health(self, timeout: float = 10.0) -> list[HealthReply]:
        """Probe every worker; their replies (one per worker that answered within ``timeout``)."""
        deadline = self._probe(timeout)
        while self._probing(deadline):
            self.poll(deadline - time.monotonic())
        return list(self._tracker.health)

    def close(self) -> None:
        """Close the sockets: when this returns the workers' connections to ``listen`` are closed, and
        what they send next waits for the next client to bind it (frames already sent to the workers
        are still delivered for a few seconds).
        """
        self._close_sockets()

    def __enter__(self) -> FrontendClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class Request(_Replies[FrontendClient]):
    """One request's replies, as an iterator of :class:`UserReply` (see the module for how it fails).

    The last reply yielded is the finished one; an error reply that ends the request raises
    :class:`RequestError` instead. :meth:`text` reads to the end and returns the whole text.
    """

    def __iter__(self) -> Iterator[UserReply]:
        return self

    def __next__(self) -> UserReply:
        while (reply := self._take()) is None:
            left = self._entry.left()
            self._client.poll(0.25 if left is None else min(left, 0.25))
        return reply

    def text(self) -> str:
        """Read every reply; the request's whole text (raises as iteration does)."""
        return "".join(reply.incremental_output for reply in self)


class AsyncFrontendClient(_Frontend[zmq.asyncio.Socket, "AsyncRequest"]):
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
        super().__init__(workers, listen, tokenize, context, timeout, on_hand_back)
        self._reader: asyncio.Task[None] | None = None

    def request(self, uid: Uid) -> AsyncRequest:
        """As :meth:`FrontendClient.request`; call it from the running loop."""
        entry = self._tracker.add(uid)
        entry.wake = asyncio.Event()
        self._start_reading()
        return AsyncRequest(self, entry)

    async def health(self, timeout: float = 10.0) -> list[HealthReply]:
        """As :meth:`FrontendClient.health`."""
        self._start_reading()
        deadline = self._probe(timeout)
        while self._probing(deadline):
            await asyncio.sleep(0.01)
        return list(self._tracker.health)

    def _start_reading(self) -> None:
        if self._reader is None:
            self._reader = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        while True:
            self._tracker.frame(await self._pull.recv())

    async def close(self) -> None:
        """Stop reading and close the sockets (as :meth:`FrontendClient.close`)."""
        if self._reader is not None:
            self._reader.cancel()
            try:
                await self._reader
            except asyncio.CancelledError:
                pass
            self._reader = None
        self._close_sockets()

    async def __aenter__(self) -> AsyncFrontendClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


class AsyncRequest(_Replies[AsyncFrontendClient]):
    """One request's replies, as an async iterator of :class:`UserReply` (as :class:`Request`)."""

    def __aiter__(self) -> AsyncIterator[UserReply]:
        return self

    async def __anext__(self) -> UserReply:
        wake = self._entry.wake
        assert wake is not None
        while True:
            try:
                reply = self._take()
            except StopIteration:
                raise StopAsyncIteration from None
            if reply is not None:
                return reply
            wake.clear()
            try:
                await asyncio.wait_for(wake.wait(), self._entry.left())
            except TimeoutError:
                pass

    async def text(self) -> str:
        """Read every reply; the request's whole text (raises as iteration does)."""
        return "".join([reply.incremental_output async for reply in self])
