"""``WordPiece`` (BERT, DistilBERT): ``##`` marks a piece that continues a word; every other token
after the first gets a space before it; with ``cleanup`` each token is cleaned on its own.
"""

from __future__ import annotations

import re
from typing import Any

import attrs

from puredetok._core.decoders.base import Stage, Tokenwise, Unmodelled
from puredetok._core.decoders.cleanup import WORDPIECE_RULES, apply_rules

_ANY_RULE = re.compile("|".join(re.escape(pattern) for pattern, _ in WORDPIECE_RULES))


@attrs.frozen
class WordPiece(Tokenwise):
    """The WordPiece decoder; a pure per-token map."""

    prefix: str
    cleanup: bool
    depends_on_first = True

    def map_token(self, token: Any, first: bool) -> str:
        """Join marker, word space, and per-token cleanup."""
        text = str(token)
        if not first:
            text = text.replace(self.prefix, "", 1) if text.startswith(self.prefix) else " " + text
        if self.cleanup and _ANY_RULE.search(text):
            # Where no pattern occurs, no rule of the cascade changes the text.
            return apply_rules(WORDPIECE_RULES, text)
        return text

    def map_tokens(self, tokens: list[Any], first: bool) -> list[Any]:
        """Every token mapped; the cleanup runs only on the few where a pattern occurs."""
        prefix = self.prefix
        texts: list[Any] = [None if token is None else str(token) for token in tokens]
        if not first:
            texts = [
                None
                if text is None
                else (text.replace(prefix, "", 1) if text.startswith(prefix) else " " + text)
                for text in texts
            ]
        if self.cleanup:
            search = _ANY_RULE.search
            texts = [
                apply_rules(WORDPIECE_RULES, text) if text is not None and search(text) else text
                for text in texts
            ]
        return texts

    def fragment_stage(self) -> Stage:
        """Not modelled: the continuation marker is only recognised on whole tokens."""
        raise Unmodelled("WordPiece after a decoder that joins tokens")
