"""The command line's parser and its ``main``: each command's options, its run, its exit code."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from importlib import metadata
from typing import Any, NoReturn

import attrs

from puredetok.cli import _bench, _explain, _serve
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


COMMANDS_GROUP = "puredetok.commands"
"""The entry-point group through which another distribution adds commands: each entry point names a
module with ``NAME``, ``HELP``, ``configure(parser)`` and ``run(args) -> int`` (puredetok-audit adds
``replay`` and ``audit`` so)."""


@attrs.frozen
class _Missing:
    """A command another distribution brings that cannot run here: it says why (not installed,
    or its module does not import) and exits 2, and every other command still runs.
    """

    NAME: str
    reason: str

    @property
    def HELP(self) -> str:  # upper case: read as a command module's constant
        return self.reason

    def configure(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("arguments", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)

    def run(self, args: argparse.Namespace) -> int:
        raise ValueError(self.reason)


_INSTALL = (
    "needs puredetok-audit, not installed: pip install 'puredetok[audit]' "
    "(from a checkout: pip install ./puredetok-audit)"
)


def _load(point: metadata.EntryPoint) -> Any:
    """The command module an entry point names, or a :class:`_Missing` saying why it did not load."""
    try:
        return point.load()
    except Exception as error:  # a broken install of another distribution: its command says so
        return _Missing(point.name, f"{point.value} (from {point.group}) does not import: {error!r}")


def _commands() -> list[Any]:
    """The commands in the order ``--help`` lists them: this package's, then each one an installed
    distribution adds, ``replay`` and ``audit`` saying what to install when none does.
    """
    added = {point.name: _load(point) for point in metadata.entry_points(group=COMMANDS_GROUP)}
    replay = added.pop("replay", None) or _Missing("replay", _INSTALL)
    audit = added.pop("audit", None) or _Missing("audit", _INSTALL)
    return [_explain, _bench, replay, _serve, audit, *added.values()]


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="puredetok", description="Exact streaming detokenization for LLM serving.", epilog=TOKENIZER_NOTE
    )
    parser.add_argument("--version", action="version", version=f"puredetok {version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    commands.required = True
    for module in _commands():
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
