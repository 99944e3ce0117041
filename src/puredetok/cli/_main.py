"""The command line's parser and its ``main``: each command's options, its run, its exit code."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from importlib import metadata
from typing import NoReturn

from puredetok.cli import _audit, _bench, _explain, _replay, _serve
from puredetok.cli._options import TOKENIZER_NOTE
from puredetok.serving._loading import TokenizerLoadError


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def version() -> str:
    """The installed version of puredetok."""
    try:
        return metadata.version("puredetok")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="puredetok", description="Exact streaming detokenization for LLM serving.", epilog=TOKENIZER_NOTE
    )
    parser.add_argument("--version", action="version", version=f"puredetok {version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    commands.required = True
    for module in (_explain, _bench, _replay, _serve, _audit):
        epilog = getattr(module, "TOKENIZER_NOTE", TOKENIZER_NOTE)
        sub = commands.add_parser(module.NAME, help=module.HELP, description=module.HELP, epilog=epilog)
        module.configure(sub)
        sub.set_defaults(run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    args = _parser().parse_args(argv)
    try:
        code: int = args.run(args)
    except BrokenPipeError:  # the reader went away (``| head``): stop quietly, as Unix tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (TokenizerLoadError, OSError, ValueError) as error:
        message = " ".join(str(error).split()) or type(error).__name__  # the whole of it, one line
        print(f"puredetok {args.command}: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return code
