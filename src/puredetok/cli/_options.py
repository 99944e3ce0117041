"""Options several commands share."""

from __future__ import annotations

import argparse

_HELP = (
    "the tokenizer: a folder of tokenizer files (tokenizer.json, tokenizer_config.json, ...) or a "
    "tokenizer.json, loaded offline; 'qwen3' is the embedded one (default: the embedded Qwen3)"
)

TOKENIZER_NOTE = (
    "Tokenizer: the embedded Qwen3 (byte-level BPE) unless --tokenizer PATH names another (a folder "
    "of tokenizer files or a tokenizer.json, read offline); the command says which one it loaded."
)
"""What every command's ``--help`` says of its tokenizer."""


def add_tokenizer_option(parser: argparse.ArgumentParser, help: str = _HELP) -> None:
    """``--tokenizer PATH``: which tokenizer the command loads (offline; None: not given)."""
    parser.add_argument("--tokenizer", default=None, metavar="PATH", help=help)


def tokenizer_choice(args: argparse.Namespace) -> str:
    """What chose the command's tokenizer: ``"--tokenizer"`` or ``"default"``."""
    return "default" if args.tokenizer is None else "--tokenizer"
