"""Cleanup of tokenization spaces (" ." -> "." and friends).

Two lists exist: ``transformers``' ``clean_up_tokenization`` (applied to the whole decoded text)
and the ``tokenizers`` WordPiece decoder's own (applied to each token; it adds " do not"). Each is
a cascade of ``str.replace`` calls; over a stream, it is a cascade of :class:`ReplaceStage`.
On text the longest hold-back is three characters (a proper prefix of " n't", " 've" or " 're");
a run of bare spaces can keep up to four (one per stage), where two can really still change.
"""

from __future__ import annotations

from puredetok._core.decoders.base import Stage
from puredetok._core.decoders.fuse import GlueStage
from puredetok._core.decoders.replace import ReplaceStage

TRANSFORMERS_RULES: tuple[tuple[str, str], ...] = (
    (" .", "."),
    (" ?", "?"),
    (" !", "!"),
    (" ,", ","),
    (" ' ", "'"),
    (" n't", "n't"),
    (" 'm", "'m"),
    (" 's", "'s"),
    (" 've", "'ve"),
    (" 're", "'re"),
)
"""``PreTrainedTokenizerBase.clean_up_tokenization``, in its order."""

WORDPIECE_RULES: tuple[tuple[str, str], ...] = (
    *TRANSFORMERS_RULES[:7],
    (" do not", " don't"),
    *TRANSFORMERS_RULES[7:],
)
"""The WordPiece decoder's ``cleanup``, in its order."""


def apply_rules(rules: tuple[tuple[str, str], ...], text: str) -> str:
    """Apply a cascade to a whole string."""
    if " " not in text and (rules is TRANSFORMERS_RULES or rules is WORDPIECE_RULES):
        return text  # every pattern of these two has a space
    for pattern, content in rules:
        text = text.replace(pattern, content)
    return text


# Consecutive rules that share their first characters and differ after them never match at the
# same place, and removing the space of one cannot make or break a match of another: one pass
# replaces them all, exactly as the one-by-one cascade does (tests/core/test_decoder_cleanup.py checks it).
_TRANSFORMERS_PASSES = (
    TRANSFORMERS_RULES[0:4],  # " ." " ?" " !" " ,"
    TRANSFORMERS_RULES[4:5],  # " ' "
    TRANSFORMERS_RULES[5:6],  # " n't"
    TRANSFORMERS_RULES[6:10],  # " 'm" " 's" " 've" " 're"
)


def cleanup_stages() -> list[Stage]:
    """The cleanup of transformers as stages over the joined output (four passes for ten rules)."""
    return [GlueStage(), *(ReplaceStage(rules) for rules in _TRANSFORMERS_PASSES)]
