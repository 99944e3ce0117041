"""Tokenizing beside the worker's loop, so that a long text never holds up the streams.

Encoding a prompt of a million characters takes a second or more; done in the loop, it would
hold every stream's next text and every health probe that long. A :class:`TokenizeThread`
tokenizes batches in a thread of its own, in the order they were given (the ``tokenizers``
library lets go of the interpreter's lock while it encodes, so the loop keeps running), and
wakes the loop through a pipe when results are ready; the loop sends them. The loop keeps every
socket to itself (ZeroMQ sockets are not shared between threads).

Encoding a long text takes memory for a moment (some 250 MB for a million characters, most of it
in the encoder's own allocations): after a batch of :data:`TRIM_CHARS` characters or more, the
thread hands the freed memory back to the system (glibc's ``malloc_trim``, where there is one),
so that a worker's resident memory after a long prompt is what it was before.
"""

from __future__ import annotations

__all__ = ["TokenizeThread", "TRIM_CHARS", "text_chars", "trim_memory"]

import collections
import ctypes
import os
import queue
import threading
from collections.abc import Callable, Sequence
from typing import Any

from puredetok.serving.messages import TokenizeMsg
from puredetok.serving.tokenize_manager import TokenizeManager, TokenizeResult

TRIM_CHARS = 1 << 18
"""After tokenizing a batch of this many characters or more, freed memory goes back to the system."""


def _malloc_trim() -> Callable[[int], int] | None:
    """The C library's ``malloc_trim`` (glibc's), or None where it has none."""
    try:
        trim: Callable[[int], int] = ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError):
        return None
    return trim


_TRIM = _malloc_trim()


def trim_memory() -> None:
    """Hand memory the process has freed back to the system (where the C library can)."""
    if _TRIM is not None:
        _TRIM(0)


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
            chars = sum(map(text_chars, messages))
            if chars >= TRIM_CHARS:
                trim_memory()


def text_chars(msg: TokenizeMsg) -> int:
    """The characters of text a tokenize request carries: its text, or every string of its chat
    messages and template options (values the wire has already bounded in depth and number).
    """
    if msg.text is not None:
        return len(msg.text)
    total = 0
    pending: list[Any] = [msg.messages, msg.template_options]
    while pending:
        value = pending.pop()
        if isinstance(value, str):
            total += len(value)
        elif isinstance(value, dict):
            pending.extend(value.keys())
            pending.extend(value.values())
        elif isinstance(value, list | tuple):
            pending.extend(value)
    return total
