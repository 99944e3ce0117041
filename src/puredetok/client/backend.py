"""The scheduler's side of the workers, sync and asyncio: read tokenized requests and aborts,
send generated ids.
"""

from __future__ import annotations

__all__ = ["BackendClient", "AsyncBackendClient"]

from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

import zmq
import zmq.asyncio

from puredetok.client.common import (
    LOG,
    HandBack,
)
from puredetok.serving.messages import (
    TO_BACKEND,
    AbortBackendMsg,
    DetokenizeMsg,
    Opening,
    SamplingParams,
    UserMsg,
)
from puredetok.worker.routing import WorkerPool
from puredetok.worker.wire import DropCounter, FrameDecoder, FrameError


class _Backend:
    """What the sync and async scheduler clients share: the pool they send through."""

    def __init__(
        self, workers: Sequence[str], tokenize: Sequence[str] | None, context: zmq.Context[Any]
    ) -> None:
        self.pool = WorkerPool(workers, tokenize, context=zmq.Context.shadow(context.underlying))
        self.decoder = FrameDecoder(TO_BACKEND)
        self.drops = DropCounter(LOG)
        """Frames from the workers that could not be read, by reason (``"version"``: a worker of
        another protocol version, logged once)."""

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
        except FrameError as error:
            self.drops.drop(error.reason, error.detail)
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
