"""No decoder at all: ``tokenizers`` then joins the tokens with single spaces."""

from __future__ import annotations

from typing import Any

import attrs

from puredetok._core.decoders.base import Stage, Tokenwise, Unmodelled


@attrs.frozen
class JoinWithSpaces(Tokenwise):
    """``" ".join(tokens)``, as a per-token map."""

    depends_on_first = True

    def map_token(self, token: Any, first: bool) -> str:
        """A space before every token but the first."""
        return str(token) if first else " " + str(token)

    def fragment_stage(self) -> Stage:
        """Never part of a chain."""
        raise Unmodelled("space joining after another decoder")
