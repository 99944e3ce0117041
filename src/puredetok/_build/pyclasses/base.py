"""What every class model provides: a :class:`ClassModel`, built from per-id values the class
model computes itself and the stages that give them memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from puredetok._core.decoders.base import Stage, Unmodelled


@attrs.frozen(eq=False)
class ClassModel:
    """An exact model of how one tokenizer decodes, before it is checked."""

    family: str
    """The codec family (``codec.family``)."""
    description: str
    """What the model is made of, for ``codec.reason``."""
    chain: Any
    """The streaming model (a :class:`~puredetok._core.chain.Chain`, or a wrapper of one)."""
    vocabulary: Sequence[Any]
    """Per id, what decides its text (for the codec's fingerprint)."""
    fast_oracle: bool
    """Whether the backend's ``decode_batch`` decodes single ids as ``tokenizer.decode`` does."""


@attrs.frozen
class Given:
    """A decoder whose per-token values the class model has already computed: only its stage runs."""

    given: Stage | None
    depends_on_first = False

    def map_token(self, token: Any, first: bool) -> Any:
        """The value as computed."""
        return token

    def stage(self) -> Stage | None:
        """The stage given."""
        return self.given

    def fragment_stage(self) -> Stage:
        """Never after another decoder."""
        raise Unmodelled("a class model after a decoder with memory")


def special_ids(tokenizer: Any) -> frozenset[int]:
    """The ids ``decode(..., skip_special_tokens=True)`` drops in a ``transformers`` Python class."""
    return frozenset(int(i) for i in tokenizer.all_special_ids if i is not None)
