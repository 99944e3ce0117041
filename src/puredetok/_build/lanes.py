"""Every id of a vocabulary through a chain's stages at once, each id alone.

Building a codec needs, for every id, the text of that one token pushed through the chain's stages
from one hold: from the steady hold for the chain's fast table (``compile_chain``), and from a
fresh stream's hold, flushed at the end, for the build-time check of every id alone
(:mod:`puredetok._build.verify`). Stepping the ids one at a time costs microseconds an id on a chain of
several stages. Here each stage takes all the ids at once through its ``push_lanes``
(:class:`~puredetok._core.decoders.base.LaneStage`: one loop over the values for the common path
through the stage, where every value comes out as one piece and leaves the same hold), and only
the ids that take another path through a stage (a byte token that starts a run, a tail that the
stage holds) are pushed on from there one by one, exactly as a step does.

The result equals pushing each id alone: the Stage contract holds every stage's ``push_lanes`` to
its ``push`` (``check_lanes`` in tests/decoder_contract.py), ``tests/builder/test_lanes.py`` holds these
texts to a step and a finish per id, and the build-time check compares every one of them with the
tokenizer's own decode of that id.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import compress, repeat
from operator import is_, is_not
from typing import Any

from puredetok._core.decoders.base import MISS, Lanes, Piece, Stage, finish_holds


def _one(
    stages: Sequence[Stage],
    holds: list[Any],
    start: Sequence[Any],
    index: int,
    value: Any,
    glued: bool,
    flush: bool,
) -> str | None:
    """One value from stage ``index`` on, the stages before it holding ``holds``."""
    pieces: list[Piece] = [(value, glued)]
    for position in range(index, len(stages)):
        stage, hold = stages[position], holds[position]
        out: list[Piece] = []
        for piece_value, piece_glued in pieces:
            hold, produced = stage.push(hold, piece_value, piece_glued)
            out.extend(produced)
        if not flush and hold != start[position]:
            return None
        holds[position] = hold
        pieces = out
    text = "".join([text for text, _ in pieces])
    return text + finish_holds(stages, holds) if flush else text


def texts_alone(
    stages: Sequence[Stage], holds: Sequence[Any], values: Sequence[Any], *, flush: bool
) -> list[str | None]:
    """Per value, the text of the piece ``(value, False)`` pushed alone through ``stages`` from
    ``holds`` (a None value puts in nothing: the id is dropped).

    With ``flush``, the stages are then flushed (a step from a fresh stream and its finish: every
    value gets its text). Without, a value after which some stage holds anything but what it held
    before gets None (from the steady holds: the chain's fast table).
    """
    if not stages:
        return ["" if value is None else value for value in values]
    count = len(values)
    ids: Sequence[int] = range(count)
    lane = list(values)
    texts: list[str | None] = [None] * count
    # Identity tests in C loops (``in`` would compare every text with None, or with MISS, by ``==``).
    present = list(map(is_not, lane, repeat(None)))
    if not all(present):
        empty = finish_holds(stages, holds) if flush else ""
        for i in compress(ids, map(is_, lane, repeat(None))):
            texts[i] = empty
        ids = list(compress(ids, present))
        lane = list(compress(lane, present))
    shared = list(holds)
    glued = False
    slow: list[tuple[int, int, Any, bool, list[Any]]] = []
    for index, stage in enumerate(stages):
        if not lane:
            break
        push_lanes = getattr(stage, "push_lanes", None)
        lanes: Lanes | None = None if push_lanes is None else push_lanes(holds[index], lane, glued)
        if lanes is None:
            before = shared[:index]
            slow.extend((i, index, value, glued, before) for i, value in zip(ids, lane))
            ids, lane = [], []
            break
        outs, hold, out_glued = lanes
        passed = list(map(is_not, outs, repeat(MISS)))
        if not all(passed):
            before = shared[:index]
            missed = list(compress(range(len(outs)), map(is_, outs, repeat(MISS))))
            slow.extend((ids[k], index, lane[k], glued, before) for k in missed)
            ids = list(compress(ids, passed))
            lane = list(compress(outs, passed))
        else:
            lane = outs
        if not flush and hold != holds[index]:
            ids, lane = [], []  # every one of them leaves the stage holding something else
        shared[index] = hold
        glued = out_glued
    tail = finish_holds(stages, shared) if flush and lane else ""
    if tail:
        lane = [text + tail for text in lane]
    if len(lane) == count:
        texts = lane
    else:
        for i, text in zip(ids, lane):
            texts[i] = text
    for i, index, value, piece_glued, before in slow:
        texts[i] = _one(stages, [*before, *holds[index:]], holds, index, value, piece_glued, flush)
    return texts
