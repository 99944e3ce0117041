"""What the conformance kit tests: one stream of an incremental detokenizer, behind a tiny protocol.

Wrap your detokenizer in a :data:`DetokenizerFactory` (a callable that opens a fresh stream), or
give a plain step function to :func:`from_step_function`.
"""

from __future__ import annotations

__all__ = [
    "Detokenizer",
    "DetokenizerFactory",
    "StepFunction",
    "FinishFunction",
    "from_step_function",
    "core_detokenizer",
    "CoreStream",
]

from collections.abc import Callable, Sequence
from typing import Protocol, TypeAlias

import attrs

from puredetok.core import Codec, DecodeState, feed, finish, start, step


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


def from_step_function(step: StepFunction, finish: FinishFunction | None = None) -> DetokenizerFactory:
    """A detokenizer made of a step function ``(ids so far, new id) -> delta``.

    ``finish(all ids) -> tail`` is the final flush; without it the stream has none (its tail is
    ``""``). Each function receives a tuple: the history before the new id, or all ids.
    """

    def open_stream() -> Detokenizer:
        return _StepFunctionStream(step, finish)

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


def core_detokenizer(codec: Codec) -> DetokenizerFactory:
    """Puredetok's core over ``codec``, as a detokenizer the kit can check (it passes)."""

    def open_stream() -> Detokenizer:
        return CoreStream(start(codec))

    return open_stream
