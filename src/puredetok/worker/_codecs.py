"""Codecs built beside the worker's loop, so that a request with new decode options stalls no other.

The :func:`codec_builder` builds into the worker's one codec cache in a thread of its own, and
:class:`Parking` keeps the messages of the requests that wait for a build, in order, out of the
batches the loop handles (docs/worker.md, "Codecs: built beside the loop, bounded").
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Iterable
from typing import Any

from puredetok._core import Codec
from puredetok.serving._background import Background
from puredetok.serving._codec_cache import CodecCache, CodecOptions, Setting
from puredetok.serving._messages import DetokenizeBatch, DetokenizeMsg, Uid

SWITCH_SECONDS = 0.0005
"""While a codec is built, the interpreter switches threads this often (Python's default is every
5 ms): the loop, waking for a frame, waits that long at most for the build to let it run (but not
through one long C call: a pass over the whole vocabulary)."""


def codec_builder(codecs: CodecCache, tokenizer: Any) -> Background[CodecOptions, Codec]:
    """A thread that builds into ``codecs`` the codecs of ``tokenizer`` asked for with ``submit``,
    one at a time, in order (``collect`` gives each codec, or the error its build raised).
    """
    return Background(functools.partial(_switching_often, codecs, tokenizer), "puredetok-codecs")


def _switching_often(codecs: CodecCache, tokenizer: Any, options: CodecOptions) -> Codec:
    usual = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_SECONDS)
    try:
        return codecs.codec(tokenizer, options)
    finally:
        sys.setswitchinterval(usual)


class Parking:
    """The requests waiting for a codec being built, with their messages in arrival order.

    ``codecs`` is the cache the builder builds into, ``tokenizer`` the worker's, ``setting`` the
    ``max_byte_run`` and ``out_of_vocab`` of requests that leave them None (the manager's).
    """

    def __init__(
        self, codecs: CodecCache, tokenizer: Any, setting: Setting, builder: Background[CodecOptions, Codec]
    ) -> None:
        self._codecs = codecs
        self._tokenizer = tokenizer
        self._setting = setting
        self._builder = builder
        self._messages: dict[Uid, list[DetokenizeMsg]] = {}
        """Per waiting request, its messages not handled yet."""
        self._waiting: dict[CodecOptions, list[Uid]] = {}
        """Per codec being built, the requests waiting for it."""
        self._ready: list[DetokenizeMsg] = []
        """Messages whose codec is ready, to handle next."""
        self._coming: list[Codec] = []
        """The codecs built for the messages :meth:`release` gives next."""
        self._held: list[Codec] = []
        """The codecs of the messages :meth:`release` gave last: held while those are handled, so
        that the cache finds them whatever it has dropped meanwhile."""

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
        new: dict[int, CodecOptions] = {}
        for position, opening in batch.opens:
            if batch.uids[position] in waiting:
                continue
            try:
                options = self._setting.options_of(opening.params)
            except ValueError:
                continue  # the manager refuses it as it opens
            if not self._codecs.ready(self._tokenizer, options):
                new[position] = options
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
        """Take the codecs built (the cache keeps them); their requests' messages are then
        :attr:`ready`. The requests whose codec could not be built, each with the error.
        """
        failed = []
        for key, result in self._builder.collect():
            uids = [uid for uid in self._waiting.pop(key, ()) if uid in self._messages]
            if isinstance(result, Codec):
                self._coming.append(result)
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
        self._held, self._coming = self._coming, []
        return batch

    def drop(self, uids: Iterable[Uid]) -> set[Uid]:
        """Forget the waiting requests among ``uids`` (aborted) with their messages; which they were."""
        dropped = {uid for uid in uids if self._messages.pop(uid, None) is not None}
        return dropped
