"""The streaming model a codec holds: the :class:`Decoding` protocol (pure functions over a hold)."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any, Protocol


class Decoding(Protocol):
    """The streaming model inside a codec: pure functions over an immutable ``hold``.

    Token ids reaching it are already checked to be ints inside the vocabulary.
    """

    @property
    def initial(self) -> Hashable:
        """The hold of a fresh stream."""

    @property
    def idle(self) -> Hashable:
        """The steady-state hold: while the hold *is* this object, ``fast`` applies."""

    @property
    def fast(self) -> Sequence[str | None]:
        """Per id, the delta of a step from ``idle`` that leaves the hold unchanged (or None)."""

    def step(self, hold: Any, token_id: int) -> tuple[Any, str]:
        """One token: the new hold (the same object if nothing changed) and the certain text."""

    def feed(self, hold: Any, token_ids: Sequence[int]) -> tuple[Any, str]:
        """Several tokens; equal to stepping them one by one."""

    def tail_start(self, token_ids: Sequence[Any]) -> tuple[int, Any]:
        """Where a stream after the prompt ``token_ids`` starts reading it: ``(position, hold)``,
        the hold after ``token_ids[:position]`` (so feeding ``token_ids[position:]`` from it gives
        the hold the whole prompt gives), found reading only ids from ``position`` on, from the
        end, with bounded work per id; ``(0, initial)`` where the model cannot tell.
        """

    def finish(self, hold: Any) -> str:
        """The text still held, as the full decode would end it."""

    def is_hold(self, hold: object) -> bool:
        """Whether ``hold`` is a value this model's functions take safely (a restored state is
        checked with it, see :mod:`puredetok._core.saving`).
        """
