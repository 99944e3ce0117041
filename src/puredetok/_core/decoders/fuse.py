"""``Fuse``: joins all tokens into one string, so later decoders see a single element."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import attrs

from puredetok._core.decoders.base import Group, Lanes, Piece, Stage


@attrs.frozen
class GlueStage:
    """Marks every piece as continuing the one output element."""

    initial: None = None
    idle: None = None

    def push(self, hold: None, value: Any, glued: bool) -> tuple[None, list[Piece]]:
        """Pass the value on, glued."""
        return None, [(value, True)]

    def push_run(self, hold: None, values: Iterable[Any], glued: bool) -> tuple[None, list[Group]]:
        """The values, glued into one."""
        batch = values if type(values) is list else list(values)
        try:
            return None, [(["".join(batch)], True)]
        except TypeError:  # bytes, before a later stage decodes them: passed as they are
            return None, [(batch, True)]

    def push_lanes(self, hold: None, values: list[Any], glued: bool) -> Lanes:
        """Every value passes, glued."""
        return values, None, True

    def settle(self, tail: Any, solid: bool) -> tuple[Any, bool]:
        """Never anything held; the same values pass, glued."""
        return tail, True

    def flush(self, hold: None) -> list[Piece]:
        """Nothing is ever held."""
        return []

    def is_hold(self, hold: object) -> bool:
        """Always None."""
        return hold is None


@attrs.frozen
class Fuse:
    """The Fuse decoder."""

    depends_on_first = False

    def map_token(self, token: Any, first: bool) -> Any:
        """Tokens are not changed, only joined."""
        return token

    def stage(self) -> Stage:
        """Joining is the stage."""
        return GlueStage()

    def fragment_stage(self) -> Stage:
        """After another join, joining again changes nothing."""
        return GlueStage()
