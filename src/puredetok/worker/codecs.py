"""Codecs built beside the worker's loop, so that a request with new decode options stalls no other.

Building a codec for a set of decode options the worker has not seen (``skip_special_tokens=False``,
``clean_up_tokenization_spaces=True``, ...) reads the whole vocabulary and checks the model against
the tokenizer's decode: 0.2 - 0.9 s. A :class:`CodecBuilder` does it in a thread of its own (a
:class:`~puredetok.serving.background.Background`: one build at a time, in the order asked) and
wakes the loop when a codec is ready.
Meanwhile :class:`Parking` keeps the messages of the requests that wait for it, in order, out of the
batches the loop handles: only those requests wait; a codec that can be had at once (kept, or
derived from a kept one: another ``max_byte_run``) is never waited for. When the codec is ready the
waiting messages are handled (in their order, before any later message of their request); a build
that fails ends each waiting request with an error, and nothing else.
"""

from __future__ import annotations

__all__ = ["CodecBuilder", "Parking"]

import functools
import sys
from collections.abc import Callable, Iterable

from puredetok.core import Codec
from puredetok.serving.background import Background
from puredetok.serving.detokenize_manager import CodecKey, DetokenizeManager
from puredetok.serving.messages import DetokenizeBatch, DetokenizeMsg, Uid

SWITCH_SECONDS = 0.0005
"""While a codec is built, the interpreter switches threads this often (Python's default is every
5 ms): the loop, waking for a frame, waits that long at most for the build to let it run (but not
through one long C call: a pass over the whole vocabulary)."""


class CodecBuilder(Background[CodecKey, Codec]):
    """A thread that builds the codecs asked for with :meth:`submit`, one at a time, in order.

    :attr:`fd` becomes readable when results wait; :meth:`collect` takes them (a codec, or the
    error its build raised).
    """

    def __init__(self, build: Callable[[CodecKey], Codec]) -> None:
        super().__init__(functools.partial(_switching_often, build), "puredetok-codecs")


def _switching_often(build: Callable[[CodecKey], Codec], key: CodecKey) -> Codec:
    usual = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_SECONDS)
    try:
        return build(key)
    finally:
        sys.setswitchinterval(usual)


class Parking:
    """The requests waiting for a codec being built, with their messages in arrival order."""

    def __init__(self, manager: DetokenizeManager, builder: CodecBuilder) -> None:
        self._manager = manager
        self._builder = builder
        self._messages: dict[Uid, list[DetokenizeMsg]] = {}
        """Per waiting request, its messages not handled yet."""
        self._waiting: dict[CodecKey, list[Uid]] = {}
        """Per codec being built, the requests waiting for it."""
        self._ready: list[DetokenizeMsg] = []
        """Messages whose codec is ready, to handle next."""

    @property
    def ready(self) -> bool:
        """Whether messages whose codec is ready wait to be handled (:meth:`release`)."""
        return bool(self._ready)

    @property
    def building(self) -> bool:
        """Whether requests wait for a codec being built."""
        return bool(self._waiting)

    def __contains__(self, uid: object) -> bool:
        return uid in self._messages

    def sort(self, batch: DetokenizeBatch) -> DetokenizeBatch:
        """``batch`` without the messages that must wait: an opening whose codec must be built
        (it is asked for), and every message of a request already waiting (kept in order).
        """
        waiting = self._messages
        if not waiting and not batch.opens:
            return batch
        new: dict[int, CodecKey] = {}
        for position, opening in batch.opens:
            if batch.uids[position] in waiting:
                continue
            try:
                key = self._manager.codec_key(opening.params)
            except ValueError:
                continue  # the manager refuses it as it opens
            if self._manager.cached_codec(key) is None:
                new[position] = key
        if not new and not (waiting and any(uid in waiting for uid in batch.uids)):
            return batch
        kept: list[DetokenizeMsg] = []
        for position, message in enumerate(batch.items):
            wanted = new.get(position)
            if wanted is not None:
                waiting[message.uid] = [message]
                if wanted not in self._waiting:
                    self._waiting[wanted] = []
                    self._builder.submit(wanted)
                self._waiting[wanted].append(message.uid)
            elif message.uid in waiting:
                waiting[message.uid].append(message)
            else:
                kept.append(message)
        return DetokenizeBatch.of(kept)

    def built(self) -> list[tuple[Uid, str]]:
        """Take the codecs built (each kept by the manager); their requests' messages are then
        :attr:`ready`. The requests whose codec could not be built, each with the error.
        """
        failed = []
        for key, result in self._builder.collect():
            uids = [uid for uid in self._waiting.pop(key, ()) if uid in self._messages]
            if isinstance(result, Codec):
                self._manager.add_codec(key, result)
                for uid in uids:
                    self._ready.extend(self._messages.pop(uid))
            else:
                for uid in uids:
                    del self._messages[uid]
                    failed.append((uid, f"request {uid!r} refused: its codec could not be built: {result}"))
        return failed

    def release(self) -> DetokenizeBatch | None:
        """The messages whose codec is ready, as one batch (None if there are none)."""
        if not self._ready:
            return None
        batch, self._ready = DetokenizeBatch.of(self._ready), []
        return batch

    def drop(self, uids: Iterable[Uid]) -> set[Uid]:
        """Forget the waiting requests among ``uids`` (aborted) with their messages; which they were."""
        dropped = {uid for uid in uids if self._messages.pop(uid, None) is not None}
        return dropped
