"""The worker's flow control: frames waiting to be handled, in slices (fairness), and frames waiting
to be sent (backpressure).

A frame of many detokenize messages is cut into slices of at most ``local_bs`` messages; the loop
handles one slice, then reads what has arrived meanwhile, so a health probe behind a large frame
is answered after one slice instead of after the whole frame. Frames wait in a :class:`Backlog`
in arrival order (the order of each request's messages is kept).

Frames the worker could not send at once (the peer is not reading, ZeroMQ's high-water mark is
reached) wait in the :class:`Outgoing` queue, in order, and go out as soon as the peer can take
them: nothing is dropped. While that queue holds more than the worker's limit, the worker stops
reading its input: the senders' own queues fill and block them in turn (backpressure), and the
worker's memory stays bounded whatever its peers do.
"""

from __future__ import annotations

__all__ = ["Backlog", "Outgoing", "slices"]

from collections import deque
from collections.abc import Iterator
from typing import Any

import zmq

from puredetok.serving.messages import DetokenizeBatch
from puredetok.worker.wire import Decoded


def slices(decoded: Decoded, size: int) -> Iterator[Decoded]:
    """``decoded`` cut into frames of at most ``size`` messages (a detokenize batch; any other
    batch is left whole), in order; the frame's rejected messages go with the last slice.

    Linear in the batch: its positions lists are split in one pass.
    """
    batch = decoded.batch
    if not isinstance(batch, DetokenizeBatch) or len(batch) <= size:
        yield decoded
        return
    total = len(batch)
    parts = range(0, total, size)
    finished: list[list[int]] = [[] for _ in parts]
    opens: list[list[Any]] = [[] for _ in parts]
    reasons: list[list[Any]] = [[] for _ in parts]
    for position in batch.finished:
        finished[position // size].append(position % size)
    for position, opening in batch.opens:
        opens[position // size].append((position % size, opening))
    for position, reason, matched in batch.reasons:
        reasons[position // size].append((position % size, reason, matched))
    counts = batch.counts
    cursor = 0
    for part, begin in enumerate(parts):
        end = min(total, begin + size)
        if counts is None:
            ids, part_counts = batch.token_ids[begin:end], None
        else:
            part_counts = counts[begin:end]
            step = sum(part_counts)
            ids, cursor = batch.token_ids[cursor : cursor + step], cursor + step
        piece = DetokenizeBatch(
            batch.uids[begin:end],
            ids,
            part_counts,
            tuple(sorted(finished[part])),
            tuple(sorted(opens[part], key=_first)),
            tuple(sorted(reasons[part], key=_first)),
        )
        yield Decoded(piece, decoded.rejected if end == total else ())


def _first(item: tuple[Any, ...]) -> int:
    position: int = item[0]
    return position


class Backlog:
    """Decoded frames waiting to be handled, in arrival order, cut in slices.

    ``waiting_bytes`` counts the bytes of the frames behind the one being handled: the loop reads
    more while it is under its bound, so a large frame at the front does not stop the loop from
    reading (and answering health probes), and what waits behind it stays bounded.
    """

    def __init__(self, slice_size: int) -> None:
        self.slice_size = slice_size
        self._frames: deque[tuple[deque[Decoded], int]] = deque()
        self.waiting_bytes = 0
        """Bytes of the frames waiting behind the first."""

    def __len__(self) -> int:
        return len(self._frames)

    def add(self, decoded: Decoded, size: int) -> None:
        """A frame of ``size`` bytes, decoded, to handle after those already here."""
        if self._frames:
            self.waiting_bytes += size
        self._frames.append((deque(slices(decoded, self.slice_size)), size))

    def take(self, most: int) -> list[Decoded]:
        """Slices from the front, about ``most`` messages of them (at least one slice)."""
        taken: list[Decoded] = []
        count = 0
        while self._frames and (not taken or count + self.slice_size <= most):
            parts, _ = self._frames[0]
            piece = parts.popleft()
            taken.append(piece)
            count += len(piece.batch)
            if not parts:
                self._frames.popleft()
                if self._frames:
                    self.waiting_bytes -= self._frames[0][1]
        return taken


class Outgoing:
    """Frames not yet sent, per socket, in order; sent as soon as the socket takes them."""

    def __init__(self) -> None:
        self._queues: dict[zmq.Socket[bytes], deque[bytes]] = {}
        self.bytes = 0
        """Bytes of the frames waiting."""

    def send(self, socket: zmq.Socket[bytes], frame: bytes) -> None:
        """Send ``frame`` now if nothing waits before it and the socket takes it, else queue it."""
        queue = self._queues.get(socket)
        if not queue:
            try:
                socket.send(frame, zmq.NOBLOCK, copy=False)
                return
            except zmq.Again:
                queue = self._queues.setdefault(socket, deque())
        queue.append(frame)
        self.bytes += len(frame)

    def pump(self, socket: zmq.Socket[bytes]) -> None:
        """Send what waits for ``socket``, until it takes no more."""
        queue = self._queues.get(socket)
        while queue:
            try:
                socket.send(queue[0], zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            self.bytes -= len(queue.popleft())

    def blocked(self) -> list[zmq.Socket[bytes]]:
        """The sockets with frames waiting."""
        return [socket for socket, queue in self._queues.items() if queue]

    def frames(self) -> int:
        """How many frames wait."""
        return sum(map(len, self._queues.values()))
