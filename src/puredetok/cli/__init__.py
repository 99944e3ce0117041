"""The ``puredetok`` command line: ``explain``, ``bench``, ``replay`` and ``serve``.

Exit codes: 0 success, 1 the command ran and found a failure (a mismatch), 2 bad usage or input
(unknown option, missing tokenizer, unreadable file). Errors are one line on stderr, never a
traceback.
"""

from __future__ import annotations

__all__ = ["main", "UsageError"]

import argparse
import sys
from collections.abc import Sequence
from typing import NoReturn

from puredetok.adapters.loading import TokenizerLoadError
from puredetok.cli import bench, explain, replay, serve


class UsageError(Exception):
    """Bad input to a command: reported in one line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="puredetok", description="Exact streaming detokenization for LLM serving.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    commands.required = True
    for module in (explain, bench, replay, serve):
        sub = commands.add_parser(module.NAME, help=module.HELP, description=module.HELP)
        module.configure(sub)
        sub.set_defaults(run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    args = _parser().parse_args(argv)
    try:
        code: int = args.run(args)
    except (TokenizerLoadError, UsageError, OSError, ValueError) as error:
        print(f"puredetok {args.command}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return code
