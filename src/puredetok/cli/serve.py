"""``puredetok serve``: run the tokenizer/detokenizer worker (or a pool of them) until SIGINT/SIGTERM."""

from __future__ import annotations

import argparse
import logging
import signal
import subprocess
import sys
from types import FrameType

from puredetok.adapters.messages import ReadyMsg
from puredetok.adapters.wire import DEFAULT_MAX_FRAME_BYTES
from puredetok.adapters.worker import DEFAULT_LOCAL_BS, default_address, tokenize_worker
from puredetok.cli.options import add_tokenizer_option

NAME = "serve"
HELP = "run the ZeroMQ tokenizer/detokenizer worker process (N workers with --workers)"


def configure(parser: argparse.ArgumentParser) -> None:
    """Declare the arguments."""
    add_tokenizer_option(parser)
    parser.add_argument(
        "--listen",
        default=default_address("worker-{index}"),
        help="address this worker binds its PULL socket to; '{index}' is the worker's number "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--backend",
        default=default_address("backend"),
        help="scheduler's PULL address (default: %(default)s)",
    )
    parser.add_argument(
        "--frontend",
        default=default_address("frontend"),
        help="API server's PULL address (default: %(default)s)",
    )
    parser.add_argument("--workers", type=int, default=1, help="worker processes to run (default: 1)")
    parser.add_argument("--index", type=int, default=0, help="number of the first worker (default: 0)")
    parser.add_argument(
        "--local-bs",
        type=int,
        default=DEFAULT_LOCAL_BS,
        help="messages handled per loop at most (default: %(default)s)",
    )
    parser.add_argument(
        "--max-frame-bytes",
        type=int,
        default=DEFAULT_MAX_FRAME_BYTES,
        help="larger frames are dropped unread (default: %(default)s)",
    )
    parser.add_argument(
        "--max-byte-run",
        type=int,
        default=None,
        metavar="N",
        help="hold at most N byte-fallback tokens of a still-valid run (Llama-2, Mistral, Phi-3) for "
        "requests that do not set max_byte_run; exact unless a longer valid run later turns invalid "
        "(default: no cap, always exact)",
    )
    parser.add_argument(
        "--out-of-vocab",
        choices=("raise", "ignore"),
        default="raise",
        help="what an id past the tokenizer's vocabulary does in requests that do not say: an error "
        "for that request, or nothing, as tokenizer.decode skips it (models pad their embedding table "
        "and can sample such ids) (default: %(default)s)",
    )
    parser.add_argument("--quiet", action="store_true", help="log warnings only")


def run(args: argparse.Namespace) -> int:
    """Run one worker here, or start ``--workers`` worker processes and wait for them."""
    if args.workers < 1 or args.local_bs < 1 or args.max_frame_bytes < 1 or args.index < 0:
        raise ValueError("--workers, --local-bs and --max-frame-bytes must be >= 1, --index >= 0")
    if args.max_byte_run is not None and args.max_byte_run < 1:
        raise ValueError("--max-byte-run must be >= 1 (leave it out for no cap)")
    if args.workers > 1 and "{index}" not in args.listen:
        raise ValueError(
            "with --workers > 1, --listen must contain '{index}' (each worker binds its own address)"
        )
    if args.workers > 1:
        return _pool(args)
    logging.basicConfig(
        level=logging.WARNING if args.quiet else logging.INFO,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
        stream=sys.stderr,
    )

    def ready(message: ReadyMsg) -> None:
        print(f"ready: {message.worker} (pid {message.pid}) on {message.address}", flush=True)

    tokenize_worker(
        args.tokenizer,
        listen=args.listen.replace("{index}", str(args.index)),
        backend=args.backend,
        frontend=args.frontend,
        local_bs=args.local_bs,
        max_frame_bytes=args.max_frame_bytes,
        name=f"worker-{args.index}",
        on_ready=ready,
        max_byte_run=args.max_byte_run,
        out_of_vocab=args.out_of_vocab,
    )
    return 0


def _pool(args: argparse.Namespace) -> int:
    """Start one ``serve`` process per worker; pass SIGINT/SIGTERM on to them; wait for all."""
    children = []
    for index in range(args.index, args.index + args.workers):
        command = [sys.executable, "-m", "puredetok.cli", "serve", "--workers", "1", "--index", str(index)]
        for option in (
            "tokenizer",
            "listen",
            "backend",
            "frontend",
            "local_bs",
            "max_frame_bytes",
            "out_of_vocab",
        ):
            command += [f"--{option.replace('_', '-')}", str(getattr(args, option))]
        if args.max_byte_run is not None:
            command += ["--max-byte-run", str(args.max_byte_run)]
        if args.quiet:
            command.append("--quiet")
        children.append(subprocess.Popen(command))

    def forward(number: int, frame: FrameType | None) -> None:
        for child in children:
            if child.poll() is None:
                child.send_signal(number)

    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, forward)
    codes = [child.wait() for child in children]
    return 0 if not any(codes) else 1
