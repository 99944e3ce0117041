"""Tokenizing beside the worker's loop, so that a long text never holds up the streams: a
:class:`TokenizeThread` tokenizes batches in a thread of its own, in order, wakes the loop when
results are ready, and hands the memory a long text took back to the system (:func:`trim_memory`).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from typing import Any

from puredetok.serving._background import Background
from puredetok.serving._messages import TokenizeMsg
from puredetok.serving._tokenize_manager import TokenizeManager, TokenizeResult

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


class TokenizeThread(Background[Sequence[TokenizeMsg], list[TokenizeResult]]):
    """A thread that runs :meth:`TokenizeManager.tokenize` on the batches given to :meth:`submit`.

    :attr:`fd` becomes readable when results wait; :meth:`results` takes them, in order. A batch
    that makes the manager raise (a bug) gets an error result per message.
    """

    def __init__(self, manager: TokenizeManager) -> None:
        super().__init__(manager.tokenize, "puredetok-tokenize", after=_trim_after)

    def submit(self, job: Sequence[TokenizeMsg]) -> None:
        """Tokenize the messages of ``job`` after the batches already given (none: nothing to do)."""
        if job:
            super().submit(job)

    def results(self) -> list[tuple[TokenizeMsg, TokenizeResult]]:
        """The results ready now, message by message, in the order their messages were submitted."""
        ready: list[tuple[TokenizeMsg, TokenizeResult]] = []
        for messages, results in self.collect():
            if isinstance(results, Exception):  # a bug costs this batch, never the thread
                results = [TokenizeResult(m.uid, None, f"internal error: {results}") for m in messages]
            ready.extend(zip(messages, results))
        return ready


def _trim_after(messages: Sequence[TokenizeMsg]) -> None:
    if sum(map(text_chars, messages)) >= TRIM_CHARS:
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
