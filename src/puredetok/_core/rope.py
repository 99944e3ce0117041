"""An immutable string that grows by appending in O(1): the text of a held byte-fallback run."""

from __future__ import annotations

from typing import Any

import attrs

_LEAF = 256


@attrs.frozen(eq=False, repr=False)
class Rope:
    """Leaves of at most 256 characters, each linked to the older ones.

    Appending copies at most one leaf, so a run held for a million tokens still costs O(1) per
    token. Equality, hashing, repr and pickling use the flat string.
    """

    older: Rope | None
    leaf: str
    size: int

    @staticmethod
    def of(text: str) -> Rope:
        """A rope holding ``text`` (static: pickles name it, and cloudpickle copies class methods)."""
        rope = EMPTY_ROPE
        for i in range(0, len(text), _LEAF):
            rope = rope.append(text[i : i + _LEAF])
        return rope

    def append(self, text: str) -> Rope:
        """This rope followed by ``text``."""
        if not text:
            return self
        if len(self.leaf) + len(text) <= _LEAF:
            return Rope(self.older, self.leaf + text, self.size + len(text))
        return Rope(self, text, self.size + len(text))

    def __str__(self) -> str:
        leaves = []
        node: Rope | None = self
        while node is not None:
            leaves.append(node.leaf)
            node = node.older
        # Each node's leaf is newer than its older node's, and a node linked as "older" keeps its
        # own leaf, so walking back collects every leaf exactly once, newest first.
        return "".join(reversed(leaves))

    def __len__(self) -> int:
        return self.size

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Rope):
            return NotImplemented
        return self.size == other.size and str(self) == str(other)

    def __hash__(self) -> int:
        return hash(str(self))

    def __repr__(self) -> str:
        return f"Rope({str(self)!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Rope.of, (str(self),))


EMPTY_ROPE = Rope(None, "", 0)
"""The rope of no text (every rope is built from it)."""
