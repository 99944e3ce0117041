"""Every benchmark of the repository in one report (``python3 tasks.py bench``): what
``puredetok bench`` prints (the core, the stop layer), then Tekken, an endless byte run, the
managers, their memory and the worker process; ``--serving-only`` the managers and the worker,
``--adversarial`` the adversarial inputs (:mod:`benchmarks.adversarial`).
"""

from __future__ import annotations

import argparse
import gc
import sys
from typing import Any

from benchmarks.byte_run import byte_run_section
from benchmarks.manager import manager_section, memory_section
from benchmarks.mistral import TEKKEN_FILE, installed_tekken, tekken_section
from benchmarks.worker import worker_section
from puredetok.cli import _bench as bench
from puredetok.cli._timing import format_table
from puredetok.serving._loading import DEFAULT_TOKENIZER, load_tokenizer


def main(argv: list[str] | None = None) -> int:
    """Print every section."""
    parser = argparse.ArgumentParser(prog="python3 tasks.py bench", description=__doc__)
    bench.configure(parser)
    parser.add_argument(
        "--requests", type=int, default=256, help="concurrent requests of the manager section (default: 256)"
    )
    parser.add_argument(
        "--no-worker", action="store_true", help="skip the worker section (it starts a process)"
    )
    parser.add_argument(
        "--serving-only",
        action="store_true",
        help="print only the manager and worker sections (handle, handle_batch and the worker, side by "
        "side with the two-window algorithm)",
    )
    parser.add_argument(
        "--adversarial",
        action="store_true",
        help="print only the adversarial sections (batch shapes, stop rules build, health probe behind "
        "the worst frame, memory under a stalled frontend)",
    )
    args = parser.parse_args(argv)
    if args.adversarial:
        from benchmarks.adversarial import adversarial_main

        named = [] if args.tokenizer is None else ["--tokenizer", str(args.tokenizer)]
        return adversarial_main([*named, *(["--no-worker"] if args.no_worker else [])])
    bench.check(args)
    if args.requests < 1:
        parser.error("--requests must be >= 1")
    tokenizer = load_tokenizer(args.tokenizer)
    print(bench.header(args, tokenizer))
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
                worker_section(tokenizer, args.tokenizer or DEFAULT_TOKENIZER),
            )
        )
    return 0


def _library_sections(args: argparse.Namespace, tokenizer: Any) -> None:
    """The sections of the library itself: ``puredetok bench``'s, then Tekken and byte fallback."""
    bench.sections(args, tokenizer)
    tekken = installed_tekken()
    if tekken is not None:  # mistral-common installed (puredetok[mistral])
        title = f"Tekken ({TEKKEN_FILE}) beside Qwen3 (both byte-level): step on the same texts"
        print(format_table(title, tekken_section(load_tokenizer(), tekken, args.tokens, args.repeats)))
    backend: Any = getattr(tokenizer, "backend_tokenizer", tokenizer)
    if "<0xE4>" in backend.get_vocab(with_added_tokens=True):
        print(format_table("byte fallback (an endless valid run)", byte_run_section(tokenizer, args.long)))


if __name__ == "__main__":
    sys.exit(main())
