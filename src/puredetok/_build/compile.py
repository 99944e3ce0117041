"""Compiling decoder models over a vocabulary into the streaming model a codec holds (a
:class:`~puredetok._core.chain.Chain`): the per-token maps run over the whole vocabulary once, the
fast table is every id pushed alone through the stages from their steady holds (:mod:`.lanes`).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import compress, repeat
from operator import is_
from typing import Any

from puredetok._build.lanes import texts_alone
from puredetok._core.chain import Chain, Hold
from puredetok._core.decoders.base import Decoder, Stage, map_all


def compile_chain(decoders: Sequence[Decoder], tokens: Sequence[Any], tail: Sequence[Stage] = ()) -> Chain:
    """Compile decoders over a vocabulary (``tokens[id]``, None for a dropped id).

    ``tail`` stages run after the decoders (``transformers``' cleanup). Raises
    :class:`~puredetok._core.decoders.base.Unmodelled` if a decoder cannot be placed where it is.
    """
    maps: list[Decoder] = []
    stages: list[Stage] = []
    depends_on_first = False
    for decoder in decoders:
        if stages:
            stages.append(decoder.fragment_stage())
            continue
        maps.append(decoder)
        depends_on_first = depends_on_first or decoder.depends_on_first
        stage = decoder.stage()
        if stage is not None:
            stages.append(stage)
    stages.extend(tail)

    def build(first: bool) -> tuple[Any, ...]:
        values = list(tokens)
        for decoder in maps:  # each map over the whole vocabulary (no map turns a token into None)
            values = map_all(decoder, values, first)
        return tuple(values)

    table = build(False)
    first_table = build(True) if depends_on_first else None
    fast = tuple(texts_alone(stages, [stage.idle for stage in stages], table, flush=False))
    idle: Hold = (False, *(stage.idle for stage in stages))
    # Without a first-token table the flag decides nothing: a fresh stream is then the idle hold
    # itself (the same object), so that its first token takes the fast path too.
    initial: Hold = (True, *(stage.initial for stage in stages))
    return Chain(
        table=table,
        first_table=first_table,
        stages=tuple(stages),
        fast=fast,
        dropped=frozenset(compress(range(len(table)), map(is_, table, repeat(None)))),
        initial=initial if first_table is not None or initial[1:] != idle[1:] else idle,
        idle=idle,
    )
