"""What every decoder module provides: a per-token map and, where it needs memory, a stage.

A ``tokenizers`` decoder turns the list of token strings into the list of output strings that are
then joined. puredetok splits each decoder into

* a **per-token map** (``map_token``): the part that looks at one token at a time. While no decoder
  with memory has run yet, these maps are applied to the whole vocabulary once, when the codec is
  built, so streaming pays nothing for them.
* a **stage** (:class:`Stage`): the part with memory (a byte run, an incomplete UTF-8 sequence, the
  first characters of the output). A stage is a pure function ``(hold, piece) -> (hold, pieces)``.

Between stages flow *pieces*: ``(value, glued)``, where ``glued`` says the value continues the
previous output element instead of starting a new one (after ``Fuse`` or ``ByteLevel`` the whole
output is one element, so every later piece is glued).

A stage may also offer ``push_lanes`` (:class:`LaneStage`): the same ``push`` for many values at once,
each pushed alone from one hold. The codec builder uses it to find the text of every id of a
vocabulary alone (:mod:`puredetok._build.lanes`); a stage without it is pushed one value at a time.

A stage may also say what it will release next (``ahead``, :class:`AheadStage`: ``Strip`` holds a
trailing run that any later text of its element starts with), and the stage right after it may use
that to release what it held only because it could not see it (``release``,
:class:`ReleasingStage`: ``Replace`` holding ``"a"`` of the pattern ``"ab"`` while ``"▁"`` is
bound to come next). The chain asks after every step (:class:`puredetok._core.chain.Chain`), so
that nothing certain stays held (G3).

A stage may also offer ``settle`` (:class:`SettlingStage`): whether a step whose pieces end in a
known way leaves the stage idle whatever it held before. A stream opened after a prompt starts from
the last prompt id after which every stage is known to be idle, reading only the ids after it
(:func:`settles`, :meth:`puredetok._core.chain.Chain.tail_start`).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from typing import Any, Final, Protocol, cast

from puredetok.errors import PuredetokError

Piece = tuple[Any, bool]
"""A value passed between stages (``str``, or ``bytes`` before ``ByteLevel``'s UTF-8 stage) and
whether it is glued to the element before it."""


Group = tuple[list[Any], bool]
"""Consecutive values that share one ``glued`` flag (how :meth:`Stage.push_run` passes batches)."""


class _Miss:
    """The type of :data:`MISS`."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "MISS"

    def __reduce__(self) -> str:
        return "MISS"


MISS: Final = _Miss()
"""In :meth:`LaneStage.push_lanes`' result: this value takes another path through the stage."""

Lanes = tuple[list[Any], Any, bool]
"""What :meth:`LaneStage.push_lanes` returns: per value its one output value (or :data:`MISS`), the
hold each of those pushes leaves, and the ``glued`` flag of each output piece."""


class Unmodelled(PuredetokError):
    """This decoder configuration has no exact streaming model; the reason is the message."""


class Stage(Protocol):
    """The stateful part of a decoder, as pure functions over an immutable ``hold``."""

    @property
    def initial(self) -> Hashable:
        """The hold at the start of a stream."""

    @property
    def idle(self) -> Hashable:
        """The hold in the steady state (what most tokens leave behind)."""

    def push(self, hold: Any, value: Any, glued: bool) -> tuple[Any, list[Piece]]:
        """Take one piece; return the new hold and the pieces that are now certain."""

    def push_run(self, hold: Any, values: Iterable[Any], glued: bool) -> tuple[Any, list[Group]]:
        """Take several pieces that share ``glued``; the same result as pushing them one by one."""

    def flush(self, hold: Any) -> list[Piece]:
        """The end of the stream: release whatever is held."""

    def is_hold(self, hold: object) -> bool:
        """Whether ``hold`` is a value this stage's functions take safely: of the right types and
        within the bounds they rely on (a restored state is checked with it; see
        :mod:`puredetok._core.saving`).
        """


class LaneStage(Stage, Protocol):
    """A stage that can push many values at once, each alone (see :mod:`puredetok._build.lanes`)."""

    def push_lanes(self, hold: Any, values: list[Any], glued: bool) -> Lanes | None:
        """Each value pushed alone from ``hold`` with ``glued``: where ``push`` gives exactly one
        piece ``(out, glued_out)`` and leaves ``hold_out``, the same for every such value, ``out``;
        :data:`MISS` for every other value. Returns ``(outs, hold_out, glued_out)``, or None when
        this hold has no such common path (then every value is pushed alone).
        """


class AheadStage(Stage, Protocol):
    """A stage that knows how the text it still holds back will go on, if it goes on."""

    def ahead(self, hold: Any) -> str:
        """Text that all this stage releases glued from ``hold`` on, joined, either begins with or
        is a prefix of (until it releases an unglued piece, which starts a new element); "" when
        it cannot tell.
        """


class ReleasingStage(Stage, Protocol):
    """A stage that can release held text once it knows how the text coming to it begins."""

    def release(self, hold: Any, ahead: str) -> tuple[Any, list[Piece]]:
        """Told that the glued text still to come (until an unglued piece or the end), joined,
        begins with ``ahead`` or is a prefix of it: the text certain in every such future,
        released now, and the hold that leaves. Whatever comes, the pieces released here and
        after give the same text, element by element, as from ``hold`` itself.
        """


class SettlingStage(Stage, Protocol):
    """A stage that can tell when a step leaves it idle, whatever it held before."""

    def settle(self, tail: Any, solid: bool) -> tuple[Any, bool] | None:
        """What one step's pieces into this stage say of its hold after them, whatever it held.

        The step's pieces end in ``tail``: for the first stage, ``tail`` is the step's one value
        itself; for a later one, the values of the pieces joined end with it (an empty ``tail``
        says nothing). With ``solid``, no piece is both empty and unglued. If then, from every
        hold this stage takes, it is left holding its ``idle`` hold, the result is
        ``(tail_out, solid_out)``, the same said of the pieces it releases in that step; else None.
        """


def settles(stages: Sequence[Stage], value: Any) -> bool:
    """Whether pushing ``value`` (one step's piece ``(value, False)``) through ``stages`` leaves
    every one of them idle, whatever they held (each stage's ``settle``; a stage without one
    cannot tell, so this is False).
    """
    tail, solid = value, bool(value)  # the first stage gets the one piece (value, False)
    for stage in stages:
        settle = getattr(stage, "settle", None)
        told = None if settle is None else settle(tail, solid)
        if told is None:
            return False
        tail, solid = told
    return True


class Decoder(Protocol):
    """One decoder of a ``tokenizers`` decoder chain, as puredetok models it."""

    @property
    def depends_on_first(self) -> bool:
        """Whether ``map_token`` treats the first token of the output differently."""

    def map_token(self, token: Any, first: bool) -> Any:
        """The per-token part, applied to a whole token (``first``: it is the output's first)."""

    def stage(self) -> Stage | None:
        """The part with memory that runs after ``map_token``, if any."""

    def fragment_stage(self) -> Stage:
        """The whole decoder as a stage over glued fragments (it runs after a joining decoder).

        Raises :class:`Unmodelled` if the decoder cannot work on fragments.
        """


class BulkDecoder(Decoder, Protocol):
    """A decoder whose per-token map can run over a whole vocabulary in one pass (see
    :func:`map_all`).
    """

    def map_tokens(self, tokens: list[Any], first: bool) -> list[Any]:
        """``map_token`` of every token (``first`` for all of them), None staying None: the same
        values, in one loop without a call per token.
        """


class Tokenwise:
    """A decoder that is all per-token map: whole tokens need no memory, so it has no stage."""

    __slots__ = ()

    def stage(self) -> Stage | None:
        """Whole tokens need no memory."""
        return None


def map_all(decoder: Decoder, tokens: list[Any], first: bool) -> list[Any]:
    """``decoder.map_token`` over a vocabulary (None for a dropped id stays None): through the
    decoder's ``map_tokens`` where it has one (:class:`BulkDecoder`), else token by token.
    """
    bulk = getattr(decoder, "map_tokens", None)
    if bulk is not None:
        mapped: list[Any] = bulk(tokens, first)
        return mapped
    map_token = decoder.map_token
    return [None if token is None else map_token(token, first) for token in tokens]


def push_each(stage: Stage, hold: Any, values: Iterable[Any], glued: bool) -> tuple[Any, list[Group]]:
    """:meth:`Stage.push_run` by pushing one value at a time (for stages with no faster way)."""
    groups: list[Group] = []
    for value in values:
        hold, produced = stage.push(hold, value, glued)
        for out, out_glued in produced:
            if groups and groups[-1][1] == out_glued:
                groups[-1][0].append(out)
            else:
                groups.append(([out], out_glued))
    return hold, groups


class OneAtATime:
    """A stage whose :meth:`Stage.push_run` pushes one value at a time (it has no faster way)."""

    __slots__ = ()

    def push_run(self, hold: Any, values: Iterable[Any], glued: bool) -> tuple[Any, list[Group]]:
        """One at a time."""
        return push_each(cast(Stage, self), hold, values, glued)


def push_on(stages: Sequence[Stage], holds: list[Any], pieces: list[Piece], index: int = 1) -> list[Piece]:
    """What the stage before ``index`` released (the first stage's, by default), through the
    stages from ``index`` on (``holds``: every stage's hold, updated in place): a chain's step.

    Written with an index: ``zip`` and star-arguments cost more here than the stages' own work.
    """
    count = len(stages)
    while pieces and index < count:  # once nothing comes out, the later stages keep their holds
        stage, hold = stages[index], holds[index]
        if len(pieces) == 1:
            piece_value, glued = pieces[0]
            hold, pieces = stage.push(hold, piece_value, glued)
        else:
            out: list[Piece] = []
            for piece_value, glued in pieces:
                hold, produced = stage.push(hold, piece_value, glued)
                out.extend(produced)
            pieces = out
        holds[index] = hold
        index += 1
    return pieces


def release_ahead(stages: Sequence[Stage], pairs: Sequence[int], holds: list[Any]) -> list[Piece]:
    """What the stage after each stage of ``pairs`` releases once told what that one will release
    next (:class:`AheadStage`, :class:`ReleasingStage`), through the stages after them (``holds``
    updated in place): a chain asks after every step that leaves its later stages holding text.
    """
    out: list[Piece] = []
    for at in pairs:
        ahead = cast(AheadStage, stages[at]).ahead(holds[at])
        if ahead:
            holds[at + 1], released = cast(ReleasingStage, stages[at + 1]).release(holds[at + 1], ahead)
            if released:
                out.extend(push_on(stages, holds, released, at + 2))
    return out


def lookahead(stages: Sequence[Stage]) -> tuple[int, ...]:
    """The stages that say what they will release next and whose next stage can use it (what
    :func:`release_ahead` takes).
    """
    return tuple(
        at
        for at, (stage, after) in enumerate(zip(stages, stages[1:]))
        if hasattr(stage, "ahead") and hasattr(after, "release")
    )


def finish_holds(stages: Sequence[Stage], holds: Sequence[Any]) -> str:
    """The end of a stream whose stages hold ``holds``: flush each in order, what one releases
    passing through the ones after it.
    """
    pieces: list[Piece] = []
    for stage, hold in zip(stages, holds):
        out: list[Piece] = []
        for value, glued in pieces:
            hold, produced = stage.push(hold, value, glued)
            out.extend(produced)
        out.extend(stage.flush(hold))
        pieces = out
    return "".join([text for text, _ in pieces])
