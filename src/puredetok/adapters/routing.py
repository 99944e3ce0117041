"""Sending to a pool of workers: detokenize and abort messages by uid, tokenize messages spread.

One request's detokenize messages must always reach the same worker (its stream lives there), so
they are routed by a stable hash of the uid, never by who sent them (SGLang issue 29366 routed by
the sender and broke with one sender). Tokenize messages carry no state and are spread evenly.
The pool may span hosts: give it ``tcp://host:port`` addresses.
"""

from __future__ import annotations

__all__ = ["route", "WorkerPool"]

import zlib
from collections.abc import Sequence
from typing import Any

import zmq

from puredetok.adapters.messages import AbortMsg, DetokenizeMsg, HealthCheckMsg, Message, TokenizeMsg, Uid
from puredetok.adapters.wire import encode_batch


def route(uid: Uid, workers: int) -> int:
    """The worker (``0 <= index < workers``) that owns request ``uid``: the CRC-32 of ``str(uid)``
    encoded as UTF-8, modulo ``workers`` (the int 7 and the string "7" have one owner).

    Stable across processes and hosts (unlike ``hash``), so every sender agrees.
    """
    return zlib.crc32(str(uid).encode("utf-8")) % workers


class WorkerPool:
    """PUSH sockets to workers, used by the API server and the scheduler to reach them.

    ``detokenize`` lists the workers that own requests (routed by uid); ``tokenize`` the workers
    that tokenize (by default the same ones). Both lists must be in the same order for every
    sender.
    """

    def __init__(
        self,
        detokenize: Sequence[str],
        tokenize: Sequence[str] | None = None,
        *,
        context: zmq.Context[Any] | None = None,
        send_hwm: int = 100_000,
    ) -> None:
        if not detokenize:
            raise ValueError("a worker pool needs at least one worker address")
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

    def send(self, messages: Sequence[Message]) -> None:
        """Send ``messages`` (any mix of inbound kinds): one frame per kind and worker."""
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
        for index, message in enumerate(tokenizing):
            put(spread[(self._next + index * len(spread) // len(tokenizing)) % len(spread)], message)
        self._next = (self._next + 1) % len(spread)
        for address, kinds in per_address.items():
            for batch in kinds.values():
                self._sockets[address].send(encode_batch(batch), copy=False)

    def send_frame(self, address: str, frame: bytes) -> None:
        """Send raw bytes to one worker (for tests and tools)."""
        self._sockets[address].send(frame, copy=False)

    def close(self) -> None:
        """Close the sockets (queued frames are still delivered, for up to 5 seconds)."""
        for socket in self._sockets.values():
            socket.close()
        self._sockets.clear()
