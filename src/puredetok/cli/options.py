"""Options several commands share."""

from __future__ import annotations

__all__ = ["add_tokenizer_option"]

import argparse

from puredetok.serving.loading import DEFAULT_TOKENIZER

_HELP = "tokenizer folder or tokenizer.json (default: the embedded Qwen3)"


def add_tokenizer_option(
    parser: argparse.ArgumentParser, default: str | None = DEFAULT_TOKENIZER, help: str = _HELP
) -> None:
    """``--tokenizer PATH``: which tokenizer the command loads (offline)."""
    parser.add_argument("--tokenizer", default=default, help=help)
