"""SGLang's detokenizer with its own decode step and with puredetok's, side by side in one run.

Run in an environment with SGLang (``python3 tasks.py test-engines sglang`` builds one)::

    python -m benchmarks.engines.sglang [--requests 256] [--tokens 256] [--repeats 3]

Two sections per tokenizer (Qwen3, Llama-2):

* **process**: SGLang's own ``run_detokenizer_process`` twice, one with the plugin off
  (``PUREDETOK_SGLANG=0``) and one with it, each fed the same frames over its ZeroMQ sockets by a
  stand-in scheduler, frames encoded beforehand: time from the first frame sent to the last reply
  received, per generated token (the process's own message decoding and encoding included);
* **decode step**: ``DetokenizerManager._decode_batch_token_id_output`` alone, in this process,
  on the same batches: SGLang's own method against the one hooked by the plugin.

The workload is a serving one: ``--requests`` requests with prompts, one id each per decode
iteration, four stop strings (the scheduler holds a request's stream back while its text could be
starting one, so some frames carry several ids), ``--tokens`` as max_tokens; a quarter of the
requests end on a stop string, a quarter on EOS, the rest on their length. min_tokens is the
scheduler's business and changes nothing here. Rounds alternate between the two sides, best of
each; ratios are shown over ``--repeats`` repeats (min - max).
"""

from __future__ import annotations

__all__ = ["main", "workload", "process_section", "decode_step_section", "default_tokenizers"]

import argparse
import os
import platform
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from puredetok.cli._measure import STOPS
from puredetok.cli._timing import TEXT
from puredetok.serving._loading import default_tokenizer_path

ROOT = Path(__file__).resolve().parents[2]
# SGLang's detokenizer process is driven by the engine tests' driver (engine_tests/sglang).
sys.path.insert(0, str(ROOT / "engine_tests" / "sglang"))

from sglang_process import (  # noqa: E402
    DetokenizerProcess,
    Request,
    Row,
    iterations,
    model_folder,
    token_batch,
)

OFF = {"PUREDETOK_SGLANG": "0"}
"""The plugin off: SGLang's own decode step."""

PROMPT = (
    "<|im_start|>user\nTell me about streaming text, in several languages.<|im_end|>\n<|im_start|>assistant\n"
)


def workload(tokenizer: Any, requests: int, tokens: int) -> list[Request]:
    """The serving requests (see the module): outputs cut from a long mixed-script text at
    different places, each request's ending chosen in turn (length, stop string, EOS, length).
    """
    corpus: list[int] = tokenizer.encode(TEXT * 40, add_special_tokens=False)
    prompt: list[int] = tokenizer.encode(PROMPT, add_special_tokens=False)
    eos = tokenizer.eos_token_id
    made = []
    for index in range(requests):
        start = (index * 97) % (len(corpus) - tokens - 1)
        output = corpus[start : start + tokens]
        ending = index % 4
        reason: dict[str, Any] = {"type": "length", "length": tokens}
        if ending == 1:
            stop = STOPS[index % len(STOPS)]
            output = output[: tokens - 8] + tokenizer.encode(stop, add_special_tokens=False)
            reason = {"type": "stop", "matched": stop}
        elif ending == 2 and eos is not None:
            output = [*output[: tokens - 1], eos]
            reason = {"type": "stop", "matched": eos}
        made.append(Request(f"r{index}", prompt, output, reason, stop=STOPS))
    return made


def _frames(tokenizer: Any, requests: Sequence[Request]) -> list[list[Row]]:
    def decode(ids: Sequence[int]) -> str:
        return str(tokenizer.decode(list(ids)))

    return [rows for rows in iterations(requests, decode) if rows]


def _renamed(frames: list[list[Row]], prefix: str) -> list[list[Row]]:
    """The frames with request ids unique to one round (states are per request id)."""
    return [
        [
            Row(
                f"{prefix}{row.rid}",
                row.decode_ids,
                row.read_offset,
                row.finished_reason,
                row.skip_special_tokens,
                row.spaces_between_special_tokens,
                row.no_stop_trim,
            )
            for row in rows
        ]
        for rows in frames
    ]


def _one_round(process: DetokenizerProcess, encoded: list[bytes]) -> float:
    """Seconds from the first frame sent to the last reply received."""
    socket = process.from_detokenizer
    began = time.perf_counter()
    for frame in encoded:
        process.send_bytes(frame)
    for _ in encoded:
        if not socket.poll(120_000):
            raise TimeoutError("the detokenizer process stopped replying")
        socket.recv(copy=False)
    return time.perf_counter() - began


def process_section(
    model: Path, frames: list[list[Row]], tokens: int, rounds: int, repeats: int
) -> list[dict[str, float]]:
    """Per repeat, the best microseconds per token of each process (``own``, ``puredetok``)."""
    samples = []
    with DetokenizerProcess(model, OFF) as own, DetokenizerProcess(model, {}) as ours:
        sides = {"own": own, "puredetok": ours}
        for side, process in sides.items():  # warm up: the first frames wait for the tokenizer, codecs
            process.exchange(_renamed(frames, f"warm-{side}-")[0])
        counter = 0
        for _ in range(repeats):
            best = {side: float("inf") for side in sides}
            for _ in range(rounds):
                for side, process in sides.items():
                    counter += 1
                    encoded = [process.encode(token_batch(rows)) for rows in _renamed(frames, f"{counter}-")]
                    best[side] = min(best[side], _one_round(process, encoded) * 1e6 / tokens)
            samples.append(best)
    return samples


def _manager(tokenizer: Any) -> Any:
    from sglang.srt.managers.detokenizer_manager import DetokenizerManager, LimitedCapacityDict

    manager = object.__new__(DetokenizerManager)
    manager.tokenizer = tokenizer
    manager.vocab_size = len(tokenizer)
    manager.decode_status = LimitedCapacityDict(capacity=1 << 16)
    manager.disable_tokenizer_batch_decode = False
    manager.is_tool_call_parser_gpt_oss = False
    manager.tool_close_token_ids = frozenset()
    return manager


def decode_step_section(
    tokenizer: Any, frames: list[list[Row]], tokens: int, rounds: int, repeats: int
) -> list[dict[str, float]]:
    """Per repeat, the best microseconds per token of the decode step alone, each side."""
    from sglang.srt.managers.detokenizer_manager import DetokenizerManager
    from sglang.srt.plugins.hook_registry import HookRegistry

    from puredetok.engines.sglang import register

    register()
    HookRegistry.apply_hooks()
    hooked = DetokenizerManager._decode_batch_token_id_output
    own = hooked.__wrapped__
    manager = _manager(tokenizer)
    hooked(manager, token_batch(_renamed(frames, "warm-")[0]))  # the codec is built here
    counter = 0
    samples = []
    for _ in range(repeats):
        best = {"own": float("inf"), "puredetok": float("inf")}
        for _ in range(rounds):
            for side, method in (("own", own), ("puredetok", hooked)):
                counter += 1
                batches = [token_batch(rows) for rows in _renamed(frames, f"{counter}-")]
                began = time.perf_counter()
                for batch in batches:
                    method(manager, batch)
                best[side] = min(best[side], (time.perf_counter() - began) * 1e6 / tokens)
        samples.append(best)
    return samples


def _line(label: str, samples: list[dict[str, float]], target: float) -> str:
    own = sorted(sample["own"] for sample in samples)
    ours = sorted(sample["puredetok"] for sample in samples)
    ratios = sorted(sample["own"] / sample["puredetok"] for sample in samples)
    met = sum(ratio >= target for ratio in ratios)
    return (
        f"  {label:<34} SGLang {own[0]:6.2f}-{own[-1]:6.2f} us/token"
        f"   puredetok {ours[0]:5.2f}-{ours[-1]:5.2f} us/token"
        f"   {ratios[0]:5.1f}x-{ratios[-1]:5.1f}x faster (target >= {target:g}x: met {met}/{len(ratios)})"
    )


def default_tokenizers() -> dict[str, str]:
    """The tokenizers benchmarked by default: the packaged Qwen3, and Llama-2 from the test data of
    a source checkout (absent from an installed wheel).
    """
    sources = {"qwen3": str(default_tokenizer_path())}
    llama2 = ROOT / "tests" / "data" / "tokenizers" / "llama2"
    if llama2.exists():
        sources["llama2"] = str(llama2)
    return sources


def main(argv: Sequence[str] | None = None) -> int:
    """Print both sections for each tokenizer."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.engines.sglang", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--requests", type=int, default=256)
    parser.add_argument("--tokens", type=int, default=256, help="max_tokens of every request")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per repeat (best of)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--tokenizer",
        action="append",
        metavar="NAME=FOLDER",
        help="a tokenizer folder (default: the packaged Qwen3 and the repository's Llama-2)",
    )
    args = parser.parse_args(argv)
    if args.requests < 1 or args.tokens < 16 or args.rounds < 1 or args.repeats < 1:
        parser.error("--requests, --rounds, --repeats must be >= 1 and --tokens >= 16")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from sglang.srt.utils.hf_transformers_utils import get_tokenizer

    sources = dict(item.split("=", 1) for item in args.tokenizer or ()) or default_tokenizers()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"SGLang's detokenizer, its own decode step against puredetok's: {args.requests} requests,"
        f" one id each per iteration, max_tokens {args.tokens}, 4 stop strings;"
        f" Python {platform.python_version()}, {os.cpu_count()} cores, load average {load:.2f};"
        f" {args.repeats} repeats of {args.rounds} rounds"
    )
    with tempfile.TemporaryDirectory(prefix="puredetok-bench-sglang-") as scratch:
        for name, source in sources.items():
            model = model_folder(Path(source), Path(scratch) / name, 200_000)
            tokenizer = get_tokenizer(str(model))
            requests = workload(tokenizer, args.requests, args.tokens)
            frames = _frames(tokenizer, requests)
            tokens = sum(len(request.output) for request in requests)
            print(f"{name}: {tokens} tokens in {len(frames)} frames")
            step = decode_step_section(tokenizer, frames, tokens, args.rounds, args.repeats)
            print(_line("decode step alone", step, 8))
            end_to_end = process_section(model, frames, tokens, args.rounds, args.repeats)
            print(_line("process, end to end (IPC included)", end_to_end, 3))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
