"""The worker's flow control: frames waiting to be handled, a slice at a time (:class:`Backlog`:
fairness), and frames waiting to be sent (:class:`Outgoing`: backpressure). docs/worker.md,
"Fairness and backpressure", says how they behave.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from operator import itemgetter
from typing import Any

import zmq

from puredetok.serving._messages import Batch, DetokenizeBatch, ReplyBatch
from puredetok.worker._wire import Decoded


def slices(decoded: Decoded, size: int) -> Iterator[Decoded]:
    """``decoded`` cut into frames of at most ``size`` messages, in order; the frame's rejected
    messages go with the first slice (the worker answers them before the frame's other messages).

    Lazy, and linear in the batch overall: each slice costs its own messages (a detokenize
    batch's positions are found by bisection in its sorted positions), so the first slice of a
    frame of millions of messages is ready at once. Frames of other kinds are cut as well: a
    frame of millions of aborts (some 2 us each) held a health probe for seconds.
    """
    batch = decoded.batch
    if len(batch) <= size or isinstance(batch, ReplyBatch):
        yield decoded
        return
    if isinstance(batch, Batch):
        total = len(batch)
        for begin in range(0, total, size):
            end = min(total, begin + size)
            part = Batch(batch.kind, batch.items[begin:end])
            yield Decoded(part, decoded.rejected if begin == 0 else ())
        return
    total = len(batch)
    finished = _ascending(batch.finished)
    opens = _ascending(batch.opens, itemgetter(0))
    reasons = _ascending(batch.reasons, itemgetter(0))
    opened = [position for position, _ in opens]
    explained = [position for position, _, _ in reasons]
    counts = batch.counts
    cursor = 0
    for begin in range(0, total, size):
        end = min(total, begin + size)
        if counts is None:
            ids, part_counts = batch.token_ids[begin:end], None
        else:
            part_counts = counts[begin:end]
            step = sum(part_counts)
            ids, cursor = batch.token_ids[cursor : cursor + step], cursor + step
        low, high = bisect_left(finished, begin), bisect_left(finished, end)
        part_finished = tuple(position - begin for position in finished[low:high])
        low, high = bisect_left(opened, begin), bisect_left(opened, end)
        part_opens = tuple((position - begin, opening) for position, opening in opens[low:high])
        low, high = bisect_left(explained, begin), bisect_left(explained, end)
        part_reasons = tuple(
            (position - begin, reason, matched) for position, reason, matched in reasons[low:high]
        )
        piece = DetokenizeBatch(
            batch.uids[begin:end], ids, part_counts, part_finished, part_opens, part_reasons
        )
        yield Decoded(piece, decoded.rejected if begin == 0 else ())


def _ascending(items: Sequence[Any], key: Callable[[Any], int] | None = None) -> Sequence[Any]:
    """``items`` in ascending order of ``key`` (as they come from an encoder: then in one pass)."""
    listed = list(items)
    ordered = sorted(listed, key=key)
    return listed if ordered == listed else ordered


class Backlog:
    """Decoded frames waiting to be handled, in arrival order, cut in slices.

    ``waiting_bytes`` counts the bytes of the frames behind the one being handled: the loop reads
    more while it is under its bound, so a large frame at the front does not stop the loop from
    reading (and answering health probes), and what waits behind it stays bounded.
    """

    def __init__(self, slice_size: int) -> None:
        self.slice_size = slice_size
        self._frames: deque[tuple[Iterator[Decoded], int]] = deque()
        self._next: Decoded | None = None
        """The next slice of the first frame, once cut (None: not cut yet)."""
        self.waiting_bytes = 0
        """Bytes of the frames waiting behind the first."""

    def __len__(self) -> int:
        return len(self._frames)

    def add(self, decoded: Decoded, size: int) -> None:
        """A frame of ``size`` bytes, decoded, to handle after those already here."""
        if self._frames:
            self.waiting_bytes += size
        self._frames.append((slices(decoded, self.slice_size), size))

    def take(self, most: int) -> list[Decoded]:
        """Slices from the front, at most ``most`` messages of them (at least one slice): many small
        frames are handled together, as one batch per kind.
        """
        taken: list[Decoded] = []
        count = 0
        while self._frames:
            parts = self._frames[0][0]
            if self._next is None:
                self._next = next(parts)
            piece = self._next
            if taken and count + len(piece.batch) > most:
                break
            taken.append(piece)
            count += len(piece.batch)
            self._next = next(parts, None)
            if self._next is None:
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
