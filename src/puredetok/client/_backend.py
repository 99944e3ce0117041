"""The scheduler's side of the workers, sync and asyncio: read tokenized requests and aborts,
send generated ids.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

import zmq
import zmq.asyncio

from puredetok.client._common import _Backend
from puredetok.serving._messages import AbortBackendMsg, UserMsg


class BackendClient(_Backend[zmq.Socket[bytes]]):
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
        super().__init__(workers, listen, tokenize, context or zmq.Context.instance())

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

    def __enter__(self) -> BackendClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class AsyncBackendClient(_Backend[zmq.asyncio.Socket]):
    """:class:`BackendClient` for asyncio: ``await client.receive()``, ``async for message in client``."""

    def __init__(
        self,
        workers: Sequence[str],
        listen: str,
        *,
        tokenize: Sequence[str] | None = None,
        context: zmq.asyncio.Context | None = None,
    ) -> None:
        super().__init__(workers, listen, tokenize, context or zmq.asyncio.Context.instance())

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

    async def __aenter__(self) -> AsyncBackendClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.close()
