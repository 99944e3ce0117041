"""SGLang's detokenizer process at 256, 1,024 and 4,096 concurrent streams, its own decode step
against puredetok's, side by side in one run with the in-process pair of
:mod:`benchmarks.concurrency`.

Run in an environment with SGLang (``python3 tasks.py test-engines sglang`` builds one)::

    python -m benchmarks.engines.sglang_concurrency [--streams 256,1024,4096] [--tokens 32768]
        [--length 256] [--rounds 5] [--repeats 3] [--no-memory] [--tokenizer NAME=FOLDER ...]

At each concurrency, two of SGLang's own ``run_detokenizer_process`` run, one with the plugin off
(``PUREDETOK_SGLANG=0``: SGLang's own decode step) and one with it, each fed the same frames over
its ZeroMQ sockets by a stand-in scheduler (``engine_tests/sglang/sglang_process.py``): ``streams``
requests live at once, staggered as continuous batching staggers them (a request that ends is
followed by a new one in its slot the next iteration), each with a prompt (the scheduler sends its
last ids first), four stop strings (the scheduler holds a stream back while its text could be
starting one, so some frames carry several ids of a request and none of another), ``--length``
ids, and the SGLang benchmark's endings (:func:`benchmarks.engines.sglang.workload`: a quarter on a
stop string, a quarter on EOS, the rest on their length). A step is one decode iteration, one
frame; its time is from the first frame of a round sent to the last reply received, over the
round's frames (the process's message decoding and encoding included), frames encoded beforehand.
Rounds interleave these two and the in-process pair at every concurrency; every figure is shown
as its range over the repeats.
"""

from __future__ import annotations

__all__ = ["SGLANG_PROCESS", "churned", "sglang_levels", "main"]

import dataclasses
import functools
import gc
import os
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from benchmarks.concurrency import (
    COLLECTOR,
    IN_PROCESS,
    Level,
    Pair,
    concurrencies_of,
    header,
    in_process_levels,
    measure,
    memory_per_stream,
    parser,
    process_clock,
    report,
)
from benchmarks.engines.sglang import OFF, default_tokenizers, workload

# SGLang's detokenizer process is driven by the engine tests' driver (engine_tests/sglang).
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "engine_tests" / "sglang"))

from sglang_process import (  # noqa: E402
    DetokenizerProcess,
    Request,
    Row,
    iterations,
    model_folder,
    token_batch,
)

OWN = "sglang process"
PLUGIN = "sglang+puredetok process"
SGLANG_PROCESS = Pair(
    "SGLang's detokenizer process (run_detokenizer_process over its sockets): with puredetok against its own "
    "decode step",
    PLUGIN,
    OWN,
    "with puredetok",
    "SGLang's own",
)
"""The process pair."""


MIN_CUT = 16
"""A slot's first request shorter than this ends on its length (the ids of a stop string are at
most 8 of the SGLang benchmark's requests' last ids)."""


def churned(tokenizer: Any, streams: int, length: int, horizon: int) -> list[Request]:
    """The requests of ``streams`` slots over ``horizon`` iterations, each starting the iteration
    after the one before it in its slot ended: the SGLang benchmark's requests of ``length`` ids
    (those that end on a stop string have its ids in place of their last 8: a few ids fewer or
    more), but slot ``n``'s first, which is the last ``length - n * length // streams`` ids of one
    (so the requests of different slots end in different iterations; under :data:`MIN_CUT` ids it
    ends on its length).
    """
    whole = iter(workload(tokenizer, streams * (horizon // length + 2), length))
    made = []
    for slot in range(streams):
        start, generation = 0, 0
        while start < horizon:
            request = next(whole)
            output = request.output
            if generation == 0:
                output = output[max(0, len(output) - length + slot * length // streams) :]
            # a first request cut too short to hold its stop string or EOS whole ends on its length
            reason = request.finished_reason if len(output) >= MIN_CUT else {"type": "length"}
            made.append(
                dataclasses.replace(
                    request,
                    rid=f"{streams}-{slot}-{generation}",
                    output=output,
                    finished_reason=reason,
                    start_at=start,
                )
            )
            start, generation = start + len(output), generation + 1
    return made


class _Processes:
    """The two processes at one concurrency, and the frames of its iterations."""

    def __init__(self, model: Path, tokenizer: Any, streams: int, length: int, horizon: int) -> None:
        self.own = DetokenizerProcess(model, OFF)
        self.plugin = DetokenizerProcess(model, {})
        requests = churned(tokenizer, streams, length, horizon)

        def decode(ids: Sequence[int]) -> str:
            return str(tokenizer.decode(list(ids)))

        self.iterations: Iterator[list[Row]] = iterations(requests, decode)
        self.frames: list[bytes] = []

    def start(self, freeze_gc: bool) -> None:
        """Wait for both processes (with ``freeze_gc``, then have them freeze their garbage
        collector, as SGLang's ``/freeze_gc`` does), and give each the first iteration (every
        request opening).
        """
        from sglang.srt.managers.io_struct import FreezeGCReq

        for process in (self.own, self.plugin):
            process.wait_ready()
            if freeze_gc:
                process.send(FreezeGCReq())  # handled before the next frame; no reply
        self.prepare(1)
        self.run_own()
        self.run_plugin()

    def prepare(self, steps: int) -> None:
        """Encode the next ``steps`` iterations' frames (an idle one is not sent)."""
        self.frames = [
            DetokenizerProcess.encode(token_batch(rows))
            for rows in (next(self.iterations) for _ in range(steps))
            if rows
        ]

    def run_own(self) -> None:
        """The prepared frames through SGLang's own process."""
        _pipelined(self.own, self.frames)

    def run_plugin(self) -> None:
        """The prepared frames through the process with puredetok."""
        _pipelined(self.plugin, self.frames)

    def close(self) -> None:
        """End both processes."""
        self.own.close()
        self.plugin.close()


def _pipelined(process: DetokenizerProcess, frames: Sequence[bytes]) -> None:
    """Send every frame, then take every reply (the scheduler does not wait for the detokenizer)."""
    socket = process.from_detokenizer
    for frame in frames:
        process.send_bytes(frame)
    for _ in frames:
        if not socket.poll(300_000):
            raise TimeoutError("the detokenizer process stopped replying")
        socket.recv(copy=False)


def sglang_levels(
    model: Path,
    tokenizer: Any,
    concurrencies: Sequence[int],
    length: int,
    tokens: int,
    rounds: int,
    repeats: int,
    stack: ExitStack,
    freeze_gc: bool = False,
) -> list[Level]:
    """The process pair's levels, one per concurrency (its processes closed with ``stack``), each
    with its first iteration run; their CPU clocks are the processes' own (where the system counts
    them).
    """
    made = []
    for streams in concurrencies:
        steps = max(1, tokens // streams)
        processes = _Processes(model, tokenizer, streams, length, 1 + steps * rounds * repeats)
        stack.callback(processes.close)
        made.append((streams, steps, processes))
    levels = []
    for streams, steps, processes in made:  # the processes import SGLang at once
        processes.start(freeze_gc)
        levels.append(
            Level(
                streams,
                steps,
                functools.partial(processes.prepare, steps),
                {OWN: processes.run_own, PLUGIN: processes.run_plugin},
                {
                    OWN: process_clock(processes.own.process.pid),
                    PLUGIN: process_clock(processes.plugin.process.pid),
                },
            )
        )
    return levels


def main(argv: Sequence[str] | None = None) -> int:
    """Print both pairs for each tokenizer."""
    made = parser("python -m benchmarks.engines.sglang_concurrency", (__doc__ or "").split("\n")[0])
    made.add_argument(
        "--tokenizer",
        action="append",
        metavar="NAME=FOLDER",
        help="a tokenizer folder (default: the packaged Qwen3 and the repository's Llama-2)",
    )
    made.add_argument(
        "--freeze-gc",
        action="store_true",
        help="have SGLang's processes freeze their garbage collector once started (SGLang's /freeze_gc)",
    )
    args = made.parse_args(argv)
    concurrencies = concurrencies_of(args, made)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from sglang.srt.utils.hf_transformers_utils import get_tokenizer

    sources = dict(item.split("=", 1) for item in args.tokenizer or ()) or default_tokenizers()
    print(header("concurrency, SGLang", concurrencies, args.length, args.tokens, args.rounds, args.repeats))
    with tempfile.TemporaryDirectory(prefix="puredetok-bench-concurrency-") as scratch:
        for name, source in sources.items():
            model = model_folder(Path(source), Path(scratch) / name, 200_000)
            tokenizer = get_tokenizer(str(model))
            with ExitStack() as stack:
                began = time.perf_counter()
                levels = in_process_levels(tokenizer, concurrencies, args.length, args.tokens)
                levels += sglang_levels(
                    model,
                    tokenizer,
                    concurrencies,
                    args.length,
                    args.tokens,
                    args.rounds,
                    args.repeats,
                    stack,
                    args.freeze_gc,
                )
                gc.freeze()
                samples = measure(levels, args.rounds, args.repeats)
                print(
                    f"{name} ({time.perf_counter() - began:.0f} s; load average now {os.getloadavg()[0]:.2f})"
                )
                memory = None
                if not args.no_memory:
                    memory = {n: memory_per_stream(tokenizer, n, args.length) for n in concurrencies}
                print(report(IN_PROCESS, samples, concurrencies, memory))
                print(report(COLLECTOR, samples, concurrencies))
                print(report(SGLANG_PROCESS, samples, concurrencies))
    return 0


if __name__ == "__main__":
    sys.exit(main())
