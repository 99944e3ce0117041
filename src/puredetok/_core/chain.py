"""The exact streaming model: a per-token table followed by a chain of stages.

Compiled from a list of decoder models (:func:`puredetok._build.compile.compile_chain`): the
per-token maps of the leading decoders are applied to the whole vocabulary once (``table``, and
``first_table`` for a decoder that treats the first token differently); from the first decoder
that needs memory on, every decoder runs as a stage.

The fast path: when every stage is idle and a token passes through all of them unchanged in hold,
its text is precomputed in ``fast`` and a step is one tuple lookup. The few ids that leave the idle
hold (a byte token that starts a run, a token ending inside a character) have their step from it
precomputed too, in ``exits``: from the idle hold every step is a lookup.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import compress, repeat
from operator import index, is_, itemgetter
from typing import Any

import attrs

from puredetok._core.decoders.base import (
    Group,
    Stage,
    finish_holds,
    lookahead,
    push_on,
    release_ahead,
    settles,
)

Hold = tuple[Any, ...]
"""``(first, *stage holds)``: ``first`` is True until a token reaches the decoders."""


def _run_batch(
    stages: Sequence[Stage], holds: Sequence[Any], values: list[Any]
) -> tuple[list[Any], list[Group]]:
    """Many elements through the stages, each stage taking them in runs."""
    new_holds = []
    groups: list[Group] = [(values, False)]
    for stage, hold in zip(stages, holds):
        out: list[Group] = []
        for group_values, glued in groups:
            hold, produced = stage.push_run(hold, group_values, glued)
            out.extend(produced)
        new_holds.append(hold)
        groups = out
    return new_holds, groups


@attrs.frozen(eq=False)
class Chain:
    """A compiled decoder chain (implements :class:`puredetok._core.codec.Decoding`)."""

    table: tuple[Any, ...] = attrs.field(repr=False)
    """Per id, what the first stage receives; None for an id the decode drops."""
    first_table: tuple[Any, ...] | None = attrs.field(repr=False)
    """The same for the output's first token, when a per-token map depends on it."""
    stages: tuple[Stage, ...]
    fast: tuple[str | None, ...] = attrs.field(repr=False)
    """Per id, its text when every stage is idle and stays idle; None otherwise."""
    dropped: frozenset[int] = attrs.field(repr=False)
    """Ids whose table entry is None."""
    initial: Hold
    idle: Hold
    lookahead: tuple[int, ...] = attrs.field(init=False, repr=False)
    """The stages whose next stage releases what it held once told what they will release next:
    after a step that leaves them holding something, it is asked (derived from ``stages``)."""
    exits: dict[int, tuple[Hold, str]] = attrs.field(init=False, repr=False)
    """Per id whose ``fast`` text is None, its step from ``idle``: ``(hold, text)`` (derived: a
    step is pure, so it is computed once, when the chain is made)."""

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "lookahead", lookahead(self.stages))
        object.__setattr__(self, "exits", {})  # step reads it while the exits are computed
        leaving = compress(range(len(self.fast)), map(is_, self.fast, repeat(None)))
        object.__setattr__(self, "exits", {token_id: self.step(self.idle, token_id) for token_id in leaving})

    def step(self, hold: Hold, token_id: int) -> tuple[Hold, str]:
        """One token."""
        if hold is self.idle:
            text = self.fast[token_id]
            if text is not None:
                return hold, text
            exit = self.exits.get(token_id)
            if exit is not None:
                return exit
        value = (self.first_table if hold[0] and self.first_table is not None else self.table)[token_id]
        if value is None:
            return hold, ""
        stages = self.stages
        if not stages:  # the per-token maps are the whole decoding
            return self.idle, value
        first_hold, pieces = stages[0].push(hold[1], value, False)
        idle = self.idle
        if len(stages) == 1:
            new: Hold = idle if first_hold == idle[1] else (False, first_hold)
            if not pieces:
                return new, ""
            return new, pieces[0][0] if len(pieces) == 1 else "".join([text for text, _ in pieces])
        if not pieces:  # the first stage took it (a byte of a run): the later ones are as they were
            if first_hold != idle[1]:
                return (False, first_hold) + hold[2:], ""
            new = (False, first_hold) + hold[2:]
        else:
            holds = [first_hold, *hold[2:]]
            pieces = push_on(stages, holds, pieces)
            if self.lookahead:
                pieces = pieces + release_ahead(stages, self.lookahead, holds)
            new = (False, *holds)
        if new == idle:
            new = idle
        if not pieces:
            return new, ""
        if len(pieces) == 1:
            return new, pieces[0][0]
        return new, "".join([text for text, _ in pieces])

    def feed(self, hold: Hold, token_ids: Sequence[int]) -> tuple[Hold, str]:
        """Several tokens at once: every stage takes them as one run."""
        head = ""
        position = 0
        while hold[0] and position < len(token_ids):
            # Until a token reaches the decoders, the first-token table decides.
            hold, text = self.step(hold, token_ids[position])
            head += text
            position += 1
        rest = token_ids[position:] if position else token_ids
        if not rest:
            return hold, head
        # One C-level call looks every id up (a map of the table's __getitem__ costs 7 x as much).
        looked_up = itemgetter(*rest)(self.table) if len(rest) > 1 else (self.table[rest[0]],)
        if self.dropped.isdisjoint(rest):
            values = list(looked_up)
        else:
            values = [v for v in looked_up if v is not None]
        if not values:
            return hold, head
        if not self.stages:
            return hold, head + "".join(values)
        stages = self.stages
        if len(stages) == 1:
            stage_hold, groups = stages[0].push_run(hold[1], values, False)
            new: Hold = (False, stage_hold)
        else:
            holds, groups = _run_batch(stages, hold[1:], values)
            if self.lookahead:
                groups.extend(([text], glued) for text, glued in release_ahead(stages, self.lookahead, holds))
            new = (False, *holds)
        if new == self.idle:
            new = self.idle
        if len(groups) == 1 and len(groups[0][0]) == 1:
            return new, head + groups[0][0][0]
        return new, head + "".join([text for group_values, _ in groups for text in group_values])

    def finish(self, hold: Hold) -> str:
        """Flush every stage in order; what one releases passes through the ones after it."""
        if hold is self.idle:  # an idle stage holds nothing (the Stage contract)
            return ""
        return finish_holds(self.stages, hold[1:])

    def tail_start(self, token_ids: Sequence[Any]) -> tuple[int, Hold]:
        """Where a stream after ``token_ids`` can start reading them: ``(position, hold)``, the
        hold after ``token_ids[:position]``, found from the end with a few calls per id.

        That is just after the last id whose step leaves every stage idle whatever it held (each
        stage's ``settle``, with the first-token table's value too where there is one): the hold
        after it is ``idle``, and not first (the id reached the decoders). Ids the decode drops
        change no hold and are passed over (a prompt of nothing else leaves ``initial``). Where no
        such id is found (a byte run to the very start, a stage that cannot tell), or an id is not
        one the chain takes as it is (the full feed then checks it, or ignores it),
        ``(0, initial)``: every id is read.
        """
        table, first_table, stages = self.table, self.first_table, self.stages
        size = len(table)
        dropped_only = True
        for position in range(len(token_ids) - 1, -1, -1):
            token_id = token_ids[position]
            if type(token_id) is not int:
                if isinstance(token_id, bool) or not hasattr(type(token_id), "__index__"):
                    return 0, self.initial
                token_id = index(token_id)
            if not 0 <= token_id < size:
                return 0, self.initial
            value = table[token_id]
            if value is None:
                continue
            if settles(stages, value) and (first_table is None or settles(stages, first_table[token_id])):
                return position + 1, self.idle
            dropped_only = False
        return (len(token_ids), self.initial) if dropped_only else (0, self.initial)

    def is_hold(self, hold: object) -> bool:
        """``(first, *stage holds)``, each stage's hold one that stage takes."""
        return (
            type(hold) is tuple
            and len(hold) == len(self.stages) + 1
            and type(hold[0]) is bool
            and all(stage.is_hold(part) for stage, part in zip(self.stages, hold[1:]))
        )
