"""``puredetok bench``: the core's and the stop layer's per-token cost against the other
algorithms, as ratios measured side by side in one run.

The serving benchmarks (managers, worker, engines, audit) are tools of the repository, beside the
package: ``python3 tasks.py bench`` (see docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import os
import platform
from typing import Any

from puredetok._build import codec_for
from puredetok.cli._loaded import load, loaded
from puredetok.cli._measure import MIN_TOKENS, core_section, stops_section
from puredetok.cli._options import add_tokenizer_option, tokenizer_choice
from puredetok.cli._timing import format_table

NAME = "bench"
HELP = "measure per-token cost side by side with DecodeStream and the two-window algorithm"


def configure(parser: argparse.ArgumentParser) -> None:
    """Declare the arguments."""
    add_tokenizer_option(parser)
    parser.add_argument(
        "--tokens", type=int, default=20_000, help="trace length for the side-by-side section"
    )
    parser.add_argument("--long", type=int, default=1_000_000, help="longest stream of the flatness section")
    parser.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="repeats of each side-by-side section; ratios are shown as their range (default: 3)",
    )


def check(args: argparse.Namespace) -> None:
    """Refuse sizes too small to measure."""
    if args.tokens < 100 or args.long < 1_000 or args.repeats < 1:
        raise ValueError("--tokens must be >= 100, --long >= 1000, --repeats >= 1")


def header(args: argparse.Namespace, tokenizer: Any) -> str:
    """The report's first line: what is measured (the tokenizer, said as every command says what
    it loaded), on what machine, under what load.
    """
    said = loaded(args.tokenizer, tokenizer_choice(args), codec_for(tokenizer, skip_special_tokens=True))
    average = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (
        f"puredetok bench: tokenizer {said.line}; Python {platform.python_version()}, "
        f"{platform.machine()}, {os.cpu_count()} cores, load average {average:.2f}; ratios over "
        f"{args.repeats} repeats (min-max)"
    )


def run(args: argparse.Namespace) -> int:
    """Print the core's and the stop layer's sections."""
    check(args)
    tokenizer = load(args.tokenizer)
    print(header(args, tokenizer))
    sections(args, tokenizer)
    return 0


def sections(args: argparse.Namespace, tokenizer: Any) -> None:
    """Print the core's section and the stop layer's, measured on ``tokenizer``."""
    print(
        format_table(
            "core (one stream, same trace for every line)",
            core_section(tokenizer, args.tokens, args.long, args.repeats),
        )
    )
    print(
        format_table(
            f"stops (same trace; 4 stop strings that never match; EOS id, min_tokens={MIN_TOKENS})",
            stops_section(tokenizer, args.tokens, args.repeats),
        )
    )
