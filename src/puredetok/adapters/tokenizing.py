"""Tokenizing beside the worker's loop, so that a long text never holds up the streams.

Encoding a prompt of a million characters takes a second or more; done in the loop, it would
hold every stream's next text and every health probe that long. A :class:`TokenizeThread`
tokenizes batches in a thread of its own, in the order they were given (the ``tokenizers``
library lets go of the interpreter's lock while it encodes, so the loop keeps running), and
wakes the loop through a pipe when results are ready; the loop sends them. The loop keeps every
socket to itself (ZeroMQ sockets are not shared between threads).
"""

from __future__ import annotations

__all__ = ["TokenizeThread"]

import collections
import os
import queue
import threading
from collections.abc import Sequence

from puredetok.adapters.messages import TokenizeMsg
from puredetok.adapters.tokenize_manager import TokenizeManager, TokenizeResult


class TokenizeThread:
    """A thread that runs :meth:`TokenizeManager.tokenize` on the batches given to :meth:`submit`.

    :attr:`fd` becomes readable when results wait; :meth:`collect` takes them, in order. A batch
    that makes the manager raise (a bug) gets an error result per message.
    """

    def __init__(self, manager: TokenizeManager) -> None:
        self._manager = manager
        self._jobs: queue.SimpleQueue[Sequence[TokenizeMsg] | None] = queue.SimpleQueue()
        self._done: collections.deque[tuple[Sequence[TokenizeMsg], list[TokenizeResult]]] = (
            collections.deque()
        )
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_read, False)
        self.pending = 0
        """Messages submitted whose results have not been collected yet."""
        self._thread = threading.Thread(target=self._run, name="puredetok-tokenize", daemon=True)
        self._thread.start()

    @property
    def fd(self) -> int:
        """A file descriptor that is readable while results wait (for the loop's poller)."""
        return self._wake_read

    def submit(self, messages: Sequence[TokenizeMsg]) -> None:
        """Tokenize ``messages`` after the batches already given."""
        if messages:
            self.pending += len(messages)
            self._jobs.put(messages)

    def collect(self) -> list[tuple[TokenizeMsg, TokenizeResult]]:
        """The results ready now, in the order their messages were submitted."""
        try:
            os.read(self._wake_read, 1 << 16)
        except BlockingIOError:
            pass
        ready: list[tuple[TokenizeMsg, TokenizeResult]] = []
        while self._done:
            messages, results = self._done.popleft()
            ready.extend(zip(messages, results))
        self.pending -= len(ready)
        return ready

    def close(self) -> None:
        """Finish the batches given, then stop the thread (collect their results before)."""
        self._jobs.put(None)
        self._thread.join()
        os.close(self._wake_read)
        os.close(self._wake_write)

    def _run(self) -> None:
        while (messages := self._jobs.get()) is not None:
            try:
                results = self._manager.tokenize(messages)
            except Exception as error:  # a bug costs this batch, never the thread
                results = [TokenizeResult(m.uid, None, f"internal error: {error}") for m in messages]
            self._done.append((messages, results))
            os.write(self._wake_write, b"\0")
