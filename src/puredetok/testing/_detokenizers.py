"""What the conformance kit tests: one stream of an incremental detokenizer, behind a tiny protocol.

Wrap your detokenizer in a :data:`DetokenizerFactory` (a callable that opens a fresh stream; a
:data:`ContinuingFactory` opens one after a prompt), or give a plain step function to
:func:`from_step_function`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, TypeAlias

import attrs

from puredetok._core import Codec, DecodeState, feed, finish, start, step


class Detokenizer(Protocol):
    """One stream of the detokenizer under test (the kit opens a fresh one for every id sequence)."""

    def step(self, token_id: int) -> str:
        """Take the next generated id; return the text the stream sends to the client now."""
        ...

    def finish(self) -> str:
        """The stream has ended: return the text it still has to send (the final flush)."""
        ...


DetokenizerFactory: TypeAlias = Callable[[], Detokenizer]
"""Opens a fresh stream of the detokenizer under test."""

ContinuingFactory: TypeAlias = Callable[[Sequence[int]], Detokenizer]
"""Opens a fresh stream that continues after a prompt (its ids are the argument): the stream must
send only the output's text (contract C), never the prompt's."""


class StreamOpener(Protocol):
    """Both kinds of factory at once: opens a fresh stream, after ``prompt`` if one is given."""

    def __call__(self, prompt: Sequence[int] = ()) -> Detokenizer:
        """A fresh stream (primed with ``prompt``)."""
        ...


StepFunction: TypeAlias = Callable[[Sequence[int], int], str]
"""``(ids so far, new id) -> delta``: a detokenizer written as one function of the whole history."""

FinishFunction: TypeAlias = Callable[[Sequence[int]], str]
"""``(all ids) -> tail``: the final flush of a step-function detokenizer."""


@attrs.define
class _StepFunctionStream:
    step_function: StepFunction
    finish_function: FinishFunction | None
    ids: list[int] = attrs.field(factory=list)

    def step(self, token_id: int) -> str:
        delta = self.step_function(tuple(self.ids), token_id)
        self.ids.append(token_id)
        return delta

    def finish(self) -> str:
        return "" if self.finish_function is None else self.finish_function(tuple(self.ids))


def from_step_function(step: StepFunction, finish: FinishFunction | None = None) -> StreamOpener:
    """A detokenizer made of a step function ``(ids so far, new id) -> delta``.

    ``finish(all ids) -> tail`` is the final flush; without it the stream has none (its tail is
    ``""``). Each function receives a tuple: the history before the new id, or all ids; after a
    prompt, the history starts with the prompt's ids.
    """

    def open_stream(prompt: Sequence[int] = ()) -> Detokenizer:
        return _StepFunctionStream(step, finish, list(prompt))

    return open_stream


@attrs.define
class CoreStream:
    """puredetok's own core as a :class:`Detokenizer`: one :class:`~puredetok.DecodeState`."""

    state: DecodeState
    """The current state (replaced, never mutated, at every step)."""

    def step(self, token_id: int) -> str:
        """:func:`puredetok.step`."""
        self.state, delta = step(self.state, token_id)
        return delta

    def feed(self, token_ids: Sequence[int]) -> str:
        """:func:`puredetok.feed`."""
        self.state, delta = feed(self.state, token_ids)
        return delta

    def finish(self) -> str:
        """:func:`puredetok.finish`."""
        return finish(self.state)


def core_detokenizer(codec: Codec) -> StreamOpener:
    """Puredetok's core over ``codec``, as a detokenizer the kit can check (it passes); after a
    prompt, its stream starts with :func:`puredetok.start` ``(codec, prompt)``.
    """

    def open_stream(prompt: Sequence[int] = ()) -> Detokenizer:
        return CoreStream(start(codec, prompt))

    return open_stream
