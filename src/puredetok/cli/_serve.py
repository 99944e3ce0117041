"""``puredetok serve``: run the tokenizer/detokenizer worker (or a pool of them) until SIGINT/SIGTERM."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from types import FrameType

from puredetok.cli._loaded import Loaded, load, loaded
from puredetok.cli._options import add_tokenizer_option, tokenizer_choice
from puredetok.serving._codec_cache import DEFAULT_MAX_CODECS
from puredetok.serving._detokenize_manager import (
    DEFAULT_MAX_LIVE,
    DEFAULT_MAX_STOP_CHARS,
    DEFAULT_MAX_STOPS,
)
from puredetok.serving._messages import DEFAULT_PARAMS, ReadyMsg, SamplingParams
from puredetok.worker._addresses import check_address, check_bind_address, default_address
from puredetok.worker._routing import WorkerProcesses
from puredetok.worker._wire import DEFAULT_MAX_FRAME_BYTES
from puredetok.worker._worker import (
    DEFAULT_LOCAL_BS,
    DEFAULT_MAX_CHAT_MESSAGES,
    DEFAULT_MAX_IDS,
    DEFAULT_MAX_OUTBOX_BYTES,
    DEFAULT_MAX_TEXT_CHARS,
    Limits,
    Worker,
    tokenize_worker,
)

NAME = "serve"
HELP = "run the ZeroMQ tokenizer/detokenizer worker process (a supervised pool of N with --workers N)"

_LIMITS = (
    "max_frame_bytes",
    "max_text_chars",
    "max_ids",
    "max_live",
    "max_stops",
    "max_stop_chars",
    "max_outbox_bytes",
    "max_codecs",
    "max_chat_messages",
)

_CODEC_FIELDS = (
    "skip_special_tokens",
    "clean_up_tokenization_spaces",
    "spaces_between_special_tokens",
    "max_byte_run",
    "out_of_vocab",
)


def configure(parser: argparse.ArgumentParser) -> None:
    """Declare the arguments."""
    add_tokenizer_option(parser)
    parser.add_argument(
        "--listen",
        default=None,
        help="address this worker binds its PULL socket to; '{index}' is the worker's number "
        "(default: ipc://FOLDER/worker-{index}.ipc, FOLDER being $XDG_RUNTIME_DIR/puredetok or "
        "/tmp/puredetok-UID, private to this user)",
    )
    parser.add_argument(
        "--backend", default=None, help="scheduler's PULL address (default: ipc://FOLDER/backend.ipc)"
    )
    parser.add_argument(
        "--frontend", default=None, help="API server's PULL address (default: ipc://FOLDER/frontend.ipc)"
    )
    parser.add_argument(
        "--allow-remote",
        action="store_true",
        help="let --listen be an address other machines can reach (the protocol has no authentication); "
        "without it, a tcp:// host must resolve to loopback addresses only",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="worker processes to run: with 2 or more, this process supervises them and restarts one "
        "that dies (default: 1, run here)",
    )
    parser.add_argument("--index", type=int, default=0, help="number of the first worker (default: 0)")
    parser.add_argument("--incarnation", type=int, default=0, help=argparse.SUPPRESS)  # set by the pool
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
        help="larger frames are refused before they are read (default: %(default)s)",
    )
    parser.add_argument(
        "--max-text-chars",
        type=int,
        default=DEFAULT_MAX_TEXT_CHARS,
        help="longer texts of tokenize requests are refused before they are tokenized (default: %(default)s)",
    )
    parser.add_argument(
        "--max-ids",
        type=int,
        default=DEFAULT_MAX_IDS,
        help="most token ids of one detokenize message (its prompt included) or of a tokenized prompt "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--max-live",
        type=int,
        default=DEFAULT_MAX_LIVE,
        help="most live requests per worker: past it a new request is refused (default: %(default)s)",
    )
    parser.add_argument(
        "--max-stops",
        type=int,
        default=DEFAULT_MAX_STOPS,
        help="most stop strings of one request: past it the request is refused (default: %(default)s)",
    )
    parser.add_argument(
        "--max-stop-chars",
        type=int,
        default=DEFAULT_MAX_STOP_CHARS,
        help="most characters of one request's stop strings together: past it the request is refused "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--max-outbox-bytes",
        type=int,
        default=DEFAULT_MAX_OUTBOX_BYTES,
        help="bytes of frames waiting for a peer that does not read, past which the worker stops taking "
        "input until it reads again (default: %(default)s)",
    )
    parser.add_argument(
        "--max-chat-messages",
        type=int,
        default=DEFAULT_MAX_CHAT_MESSAGES,
        help="most chat messages of one tokenize request: past it the request is refused before its "
        "template is rendered (default: %(default)s)",
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
    parser.add_argument(
        "--max-codecs",
        type=int,
        default=DEFAULT_MAX_CODECS,
        help="most codecs (sets of decode options) kept per worker, the least recently used dropped "
        "first, never one a live request uses (default: %(default)s)",
    )
    parser.add_argument(
        "--codec-options",
        action="append",
        default=[],
        type=_codec_options,
        metavar="KEY=VALUE,...",
        help="build the codec of these decode options before the worker is ready (repeat it for several "
        "sets), e.g. 'skip_special_tokens=false' or 'clean_up_tokenization_spaces=true,max_byte_run=8'; "
        f"keys: {', '.join(_CODEC_FIELDS)}; any other set is built beside the loop when a request first "
        "asks for it (only that request waits)",
    )
    parser.add_argument(
        "--assistant-as-data",
        action="store_true",
        help="treat the assistant turns of chat requests as data, as the rest of a chat is: added-token "
        "text in them (<|im_end|>, <think>, <tool_call>...) gets the ids of its characters; by default "
        "they are trusted as the model's own earlier output and keep their control ids (use it when "
        "clients send earlier assistant turns back)",
    )
    parser.add_argument("--quiet", action="store_true", help="log warnings only")


def _codec_options(text: str) -> SamplingParams:
    """``KEY=VALUE,...`` of the decode options of :class:`SamplingParams`."""
    values: dict[str, object] = {}
    for part in text.split(","):
        key, equals, value = part.strip().partition("=")
        if not equals or key not in _CODEC_FIELDS:
            raise argparse.ArgumentTypeError(
                f"{part.strip()!r} is not KEY=VALUE with KEY one of {', '.join(_CODEC_FIELDS)}"
            )
        word = value.strip().lower()
        if word == "none" and key != "skip_special_tokens":
            values[key] = None  # the worker's setting
        elif key == "out_of_vocab":
            if word not in ("raise", "ignore"):
                raise argparse.ArgumentTypeError(f"out_of_vocab must be raise or ignore, not {value!r}")
            values[key] = word
        elif key == "max_byte_run":
            if not word.isdigit():
                raise argparse.ArgumentTypeError(
                    f"max_byte_run must be an int >= 0 (0: no cap), not {value!r}"
                )
            values[key] = int(word)
        elif word in ("true", "false"):
            values[key] = word == "true"
        else:
            raise argparse.ArgumentTypeError(f"{key} must be true or false (or none), not {value!r}")
    return SamplingParams(**values)  # type: ignore[arg-type]


def run(args: argparse.Namespace) -> int:
    """Run one worker here, or a supervised pool of ``--workers`` worker processes."""
    if args.workers < 1 or args.local_bs < 1 or args.index < 0 or args.incarnation < 0:
        raise ValueError("--workers and --local-bs must be >= 1, --index >= 0")
    if any(getattr(args, name) < 1 for name in _LIMITS):
        raise ValueError(
            "--max-frame-bytes, --max-text-chars, --max-ids, --max-live, --max-stops, --max-stop-chars, "
            "--max-outbox-bytes, --max-codecs and --max-chat-messages must be >= 1"
        )
    if args.max_byte_run is not None and args.max_byte_run < 1:
        raise ValueError("--max-byte-run must be >= 1 (leave it out for no cap)")
    if len(args.codec_options) > args.max_codecs:
        raise ValueError(f"{len(args.codec_options)} --codec-options sets > --max-codecs {args.max_codecs}")
    args.listen = args.listen or default_address("worker-{index}")
    args.backend = args.backend or default_address("backend")
    args.frontend = args.frontend or default_address("frontend")
    if args.workers > 1 and "{index}" not in args.listen:
        raise ValueError(
            "with --workers > 1, --listen must contain '{index}' (each worker binds its own address)"
        )
    check_address(args.backend)
    check_address(args.frontend)
    check_bind_address(args.listen.replace("{index}", str(args.index)), allow_remote=args.allow_remote)
    logging.basicConfig(
        level=logging.WARNING if args.quiet else logging.INFO,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    if args.workers > 1:
        return _pool(args)

    said: list[Loaded] = []

    def started(worker: Worker) -> None:
        codec = worker.detokenize_manager.codec_of(DEFAULT_PARAMS)  # built before it serves
        said.append(loaded(args.tokenizer, tokenizer_choice(args), codec))

    def ready(message: ReadyMsg) -> None:
        print(ready_line(message, said[0]), flush=True)

    tokenize_worker(
        load(args.tokenizer),
        listen=args.listen.replace("{index}", str(args.index)),
        backend=args.backend,
        frontend=args.frontend,
        local_bs=args.local_bs,
        limits=Limits(*(getattr(args, name) for name in _LIMITS)),
        name=f"worker-{args.index}",
        on_ready=ready,
        max_byte_run=args.max_byte_run,
        out_of_vocab=args.out_of_vocab,
        allow_remote=args.allow_remote,
        incarnation=args.incarnation,
        codec_options=args.codec_options,
        assistant_as_data=args.assistant_as_data,
        on_start=started,
    )
    return 0


def ready_line(message: ReadyMsg, said: Loaded) -> str:
    """What ``serve`` prints when a worker is ready: the worker, its tokenizer, its address last."""
    return f"ready: {message.worker} (pid {message.pid}), tokenizer {said.line}, on {message.address}"


def _pool(args: argparse.Namespace) -> int:
    """Run a :class:`WorkerProcesses` pool; SIGINT/SIGTERM stop it (passed on to every worker)."""
    arguments: list[str] = []
    if args.tokenizer is not None:
        arguments += ["--tokenizer", str(args.tokenizer)]
    for option in ("listen", "backend", "frontend", "local_bs", *_LIMITS, "out_of_vocab"):
        arguments += [f"--{option.replace('_', '-')}", str(getattr(args, option))]
    if args.max_byte_run is not None:
        arguments += ["--max-byte-run", str(args.max_byte_run)]
    for options in args.codec_options:
        arguments += ["--codec-options", _spelled(options)]
    for flag in ("allow_remote", "assistant_as_data", "quiet"):
        if getattr(args, flag):
            arguments.append(f"--{flag.replace('_', '-')}")
    pool = WorkerProcesses(args.workers, arguments, first_index=args.index)

    def forward(number: int, frame: FrameType | None) -> None:
        pool.stop(number)

    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, forward)
    return pool.run()


def _spelled(params: SamplingParams) -> str:
    """The decode options of ``params`` as ``--codec-options`` takes them."""
    words = {True: "true", False: "false", None: "none"}
    parts = []
    for key in _CODEC_FIELDS:
        value = getattr(params, key)
        parts.append(f"{key}={words[value] if value is None or type(value) is bool else value}")
    return ",".join(parts)
