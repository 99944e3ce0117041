"""``puredetok bench``: throughput and per-token cost against the other algorithms, as ratios."""

from __future__ import annotations

import argparse
import gc
import os
import platform
from typing import Any

from puredetok.bench.core import byte_run_section, core_section
from puredetok.bench.manager import manager_section, memory_section
from puredetok.bench.mistral import TEKKEN_FILE, installed_tekken, tekken_section
from puredetok.bench.stops import MIN_TOKENS, stops_section
from puredetok.bench.timing import format_table
from puredetok.bench.worker import worker_section
from puredetok.cli.options import add_tokenizer_option
from puredetok.serving.loading import load_tokenizer

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
        "--requests", type=int, default=256, help="concurrent requests of the manager section (default: 256)"
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="repeats of each side-by-side section; ratios are shown as their range (default: 3)",
    )
    parser.add_argument(
        "--no-worker", action="store_true", help="skip the worker section (it starts a process)"
    )
    parser.add_argument(
        "--serving-only",
        action="store_true",
        help="print only the manager and worker sections (the serving path: handle, handle_batch "
        "and the worker, side by side with the two-window algorithm)",
    )
    parser.add_argument(
        "--adversarial",
        action="store_true",
        help="print only the adversarial sections (issue 25: batch shapes, stop rules build, health "
        "probe behind the worst frame, memory under a stalled frontend; see puredetok.bench.adversarial)",
    )


def run(args: argparse.Namespace) -> int:
    """Print every section."""
    if args.adversarial:
        from puredetok.bench.adversarial import adversarial_main

        named = [] if args.tokenizer is None else ["--tokenizer", str(args.tokenizer)]
        return adversarial_main([*named, *(["--no-worker"] if args.no_worker else [])])
    if args.tokens < 100 or args.long < 1_000 or args.requests < 1 or args.repeats < 1:
        raise ValueError("--tokens must be >= 100, --long >= 1000, --requests and --repeats >= 1")
    tokenizer = load_tokenizer(args.tokenizer)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"puredetok bench: {args.tokenizer}, Python {platform.python_version()}, {platform.machine()}, "
        f"{os.cpu_count()} cores, load average {load:.2f}; ratios over {args.repeats} repeats (min-max)"
    )
    if not args.serving_only:
        _library_sections(args, tokenizer)
    # A serving process freezes its start-up objects (see the worker); measure under the same rule.
    gc.freeze()
    print(
        format_table(
            f"manager ({args.requests} concurrent requests, one batch per step)",
            manager_section(tokenizer, args.requests, repeats=args.repeats),
        )
    )
    if not args.serving_only:
        print(format_table("memory (tracemalloc)", memory_section(tokenizer)))
    if not args.no_worker:
        print(
            format_table(
                "worker (a separate process, over ZeroMQ ipc://; ratio: the in-process manager's time / its)",
                worker_section(tokenizer, args.tokenizer),
            )
        )
    return 0


def _library_sections(args: argparse.Namespace, tokenizer: Any) -> None:
    """The sections of the library itself: the core, the stops, Tekken, byte fallback."""
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
    tekken = installed_tekken()
    if tekken is not None:  # mistral-common installed (puredetok[mistral])
        title = f"Tekken ({TEKKEN_FILE}) beside Qwen3 (both byte-level): step on the same texts"
        print(format_table(title, tekken_section(load_tokenizer(), tekken, args.tokens, args.repeats)))
    backend: Any = getattr(tokenizer, "backend_tokenizer", tokenizer)
    vocab = backend.get_vocab(with_added_tokens=True)
    if "<0xE4>" in vocab:
        print(format_table("byte fallback (an endless valid run)", byte_run_section(tokenizer, args.long)))
