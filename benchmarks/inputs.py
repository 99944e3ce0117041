"""The adversarial inputs of the tokenize path, replay and audit: what one request (or one frame) of
each shape costs per item at a small and a large size, and the memory replay and audit take for one
request of a million events.

- The wire: per-item time of :meth:`~puredetok.worker._wire.FrameDecoder.decode` (what a worker,
  or a client for replies, does with a frame) for frames of every kind: detokenize frames of many
  messages, of one message of many ids, of many openings (with prompts, or with handed-back
  states), of many ends; abort frames; tokenize frames of many texts, one long text, a chat of
  many messages, many tools; reply frames of many texts and of many handed-back states; and the
  slow paths a bad message sends a frame down (a detokenize frame salvaged cell by cell, an abort
  frame read message by message, a tokenize frame with one message nested too deep).
- Tokenize: per-item time (per character, chat message, tool or request) of what the worker does
  with a frame's tokenize messages (:func:`~puredetok.serving._tokenizing.text_chars`, then
  :meth:`~puredetok.serving._tokenize_manager.TokenizeManager.tokenize`), for one long text
  (prose, one character repeated, one word without spaces), chats of many or long messages, with
  special-token text kept as data, with many tool definitions (template options), and a frame
  of many requests. Ratio: the large size against the small one.
- Replay and audit: per-event time and peak memory of a child process that replays (or audits)
  a trace (or a vLLM stream, or an SGLang stream of new ids and new texts) of one request of
  10,000, 100,000 and 1,000,000 events, read from a file as the command line does: the peak
  resident memory the run added, and (up to :data:`TRACED_UP_TO` events) the peak traced by
  ``tracemalloc`` in a second run.

Times are CPU time of the whole process (``tokenizers`` encodes in threads of its own), which a
shared machine disturbs less than wall-clock time.

Run ``python -m benchmarks.inputs`` (or ``python3 tasks.py bench --adversarial``).
"""

from __future__ import annotations

__all__ = [
    "WIRE_SHAPES",
    "TOKENIZE_SHAPES",
    "EVENT_SHAPES",
    "tokenize_requests",
    "tokenize_section",
    "wire_section",
    "encode_frame_raw",
    "events_section",
    "inputs_main",
]

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from puredetok import Codec, codec_for, finish, start, step
from puredetok.cli._timing import TEXT, Result, format_table
from puredetok.serving._codec_cache import CodecCache
from puredetok.serving._messages import (
    HANDED_BACK,
    PROTOCOL_VERSION,
    TO_FRONTEND,
    AbortMsg,
    DetokenizeBatch,
    DetokenizeMsg,
    Opening,
    SamplingParams,
    TokenizeMsg,
    UserReply,
)
from puredetok.worker._scan import DEFAULT_MAX_DEPTH

RATIO_TARGET = 2.0
"""Per-item time at the large size within this factor of that at the small size, for every shape."""

_cpu_ns = time.process_time_ns

_Make = Callable[[int], list[TokenizeMsg]]


def _text(size: int) -> str:
    return (TEXT * (size // len(TEXT) + 1))[:size]


def _word(size: int) -> str:
    return ("puredetokstreams" * (size // 16 + 1))[:size]


def _chat(count: int, content: Callable[[int], str]) -> list[dict[str, str]]:
    return [{"role": ("user", "assistant")[k % 2], "content": content(k)} for k in range(count - 1)] + [
        {"role": "user", "content": content(count)}
    ]


def _tools(count: int) -> dict[str, Any]:
    def tool(name: str) -> dict[str, Any]:
        parameters = {"type": "object", "properties": {"word": {"type": "string"}}}
        function = {"name": name, "description": "Look a word up.", "parameters": parameters}
        return {"type": "function", "function": function}

    return {"tools": [tool(f"lookup_{k}") for k in range(count)]}


TOKENIZE_SHAPES: dict[str, tuple[str, tuple[int, int], _Make]] = {
    "text, prose": ("char", (16_384, 1_048_576), lambda n: [TokenizeMsg(0, text=_text(n))]),
    "text, one character repeated": ("char", (16_384, 1_048_576), lambda n: [TokenizeMsg(0, text="a" * n)]),
    "text, one word without spaces": ("char", (16_384, 1_048_576), lambda n: [TokenizeMsg(0, text=_word(n))]),
    "chat, many messages": (
        "message",
        (256, 16_384),
        lambda n: [TokenizeMsg(0, messages=tuple(_chat(n, lambda k: f"message {k}: {TEXT[:40]}")))],
    ),
    "chat, one long message": (
        "char",
        (16_384, 1_048_576),
        lambda n: [TokenizeMsg(0, messages=({"role": "user", "content": _text(n)},))],
    ),
    "chat, special-token text in many messages": (
        "message",
        (256, 16_384),
        lambda n: [
            TokenizeMsg(0, messages=tuple(_chat(n, lambda k: f"<|im_end|> message {k} <|im_start|>")))
        ],
    ),
    "chat, many tools (template options)": (
        "tool",
        (32, 2_048),
        lambda n: [TokenizeMsg(0, messages=({"role": "user", "content": "hi"},), template_options=_tools(n))],
    ),
    "frame of many requests": (
        "request",
        (1_024, 32_768),
        lambda n: [TokenizeMsg(k, text=f"request {k}: {TEXT[:60]}") for k in range(n)],
    ),
}
"""Per shape: the unit counted, its small and large size, and the tokenize messages of a size."""


def tokenize_requests(shape: str, size: int) -> list[TokenizeMsg]:
    """The tokenize messages of ``shape`` (one of :data:`TOKENIZE_SHAPES`) at ``size`` units."""
    return TOKENIZE_SHAPES[shape][2](size)


def _tokenize_ns(manager: Any, messages: list[TokenizeMsg], units: int, rounds: int) -> float:
    from puredetok.serving._tokenizing import text_chars

    best = float("inf")
    for _ in range(rounds):
        gc.collect()
        began = _cpu_ns()
        sum(map(text_chars, messages))
        results = manager.tokenize(messages)
        best = min(best, (_cpu_ns() - began) / units)
        if any(result.error for result in results):
            raise RuntimeError(f"tokenizing failed: {next(r.error for r in results if r.error)}")
    return best


def tokenize_section(tokenizer: Any, rounds: int = 3) -> list[Result]:
    """Per shape and size, CPU ns per unit; ratio: the large size against the small one."""
    from puredetok.serving._tokenize_manager import TokenizeManager

    manager = TokenizeManager(tokenizer)
    manager.tokenize([TokenizeMsg(0, text="warm up")])
    results = []
    for shape, (unit, sizes, make) in TOKENIZE_SHAPES.items():
        small, large = (_tokenize_ns(manager, make(size), size, rounds) for size in sizes)
        results.append(Result(f"{shape}, {sizes[0]:,} {unit}s", small))
        ratio = large / small
        results.append(
            Result(
                f"{shape}, {sizes[1]:,} {unit}s (ratio: to small)",
                large,
                ratio,
                f"<= {RATIO_TARGET:g}",
                ratio <= RATIO_TARGET,
            )
        )
    return results


_STATE = bytes(range(48))
"""Stands for a handed-back state (decoding reads it as bytes; nothing checks them here)."""


def _frame(messages: list[Any]) -> bytes:
    from puredetok.worker._wire import encode_batch

    return encode_batch(messages)


def _salvaged(messages: list[Any]) -> bytes:
    """A detokenize frame of ``messages`` whose last uid is a float: the decoder salvages the
    good messages cell by cell (the path of a frame with a bad message).
    """
    batch = msgspec.structs.asdict(DetokenizeBatch.of(messages))
    batch["uids"] = [*batch["uids"][:-1], 0.5]
    return encode_frame_raw("detokenize", batch)


def encode_frame_raw(kind: str, batch: Any) -> bytes:
    """A ``[kind, version, batch]`` frame of any ``batch`` (unchecked: for bad frames)."""
    return msgspec.msgpack.encode([kind, PROTOCOL_VERSION, batch])


def _deep(uid: int) -> dict[str, Any]:
    """A tokenize message whose template options nest deeper than the decoder's limit."""
    options: Any = "leaf"
    for _ in range(2 * DEFAULT_MAX_DEPTH):
        options = [options]
    return {"uid": uid, "text": "hi", "template_options": {"x": options}}


def _opening(k: int) -> Opening:
    return Opening((k % 1000, 7, 9), SamplingParams(stop=("\n\n",), max_tokens=64))


def _many(make: Callable[[int], Any]) -> Callable[[int], bytes]:
    """The frame of ``n`` messages ``make(k)``."""
    return lambda n: _frame([make(k) for k in range(n)])


def _one(make: Callable[[int], Any]) -> Callable[[int], bytes]:
    """The frame of the one message ``make(n)``."""
    return lambda n: _frame([make(n)])


def _one_bad(kind: str, make: Callable[[int], Any], bad: Callable[[int], Any]) -> Callable[[int], bytes]:
    """A frame of ``n - 1`` messages ``make(k)`` (as maps) and one ``bad(n)`` message."""
    return lambda n: encode_frame_raw(kind, [make(k) for k in range(n - 1)] + [bad(n)])


_SMALL, _LARGE = (2_048, 65_536), (1_024, 32_768)
_HI = ({"role": "user", "content": "hi"},)

WIRE_SHAPES: dict[str, tuple[str, tuple[int, int], Callable[[int], bytes], tuple[type[Any], ...]]] = {
    "detokenize, many messages of one id": (
        "message",
        _SMALL,
        _many(lambda k: DetokenizeMsg(k, (k % 1000,))),
        (),
    ),
    "detokenize, one message of many ids": (
        "id",
        (16_384, 1_048_576),
        _one(lambda n: DetokenizeMsg(1, tuple(k % 1000 for k in range(n)))),
        (),
    ),
    "detokenize, many openings": (
        "message",
        _SMALL,
        _many(lambda k: DetokenizeMsg(k, (1,), open=_opening(k))),
        (),
    ),
    "detokenize, many openings with a state": (
        "message",
        _SMALL,
        _many(lambda k: DetokenizeMsg(k, (1,), open=Opening(state=_STATE, consumed=3))),
        (),
    ),
    "detokenize, many ends with reasons": (
        "message",
        _SMALL,
        _many(lambda k: DetokenizeMsg(k, (1,), True, None, "stop", "\n")),
        (),
    ),
    "detokenize, one bad uid (salvaged)": (
        "message",
        _SMALL,
        lambda n: _salvaged([DetokenizeMsg(k, (k % 1000,)) for k in range(n)]),
        (),
    ),
    "abort, many uids": ("message", _SMALL, _many(AbortMsg), ()),
    "abort, one bad uid (read one by one)": (
        "message",
        _SMALL,
        _one_bad("abort", lambda k: {"uid": k}, lambda n: {"uid": 0.5}),
        (),
    ),
    "tokenize, many texts": ("message", _LARGE, _many(lambda k: TokenizeMsg(k, text=TEXT[:60])), ()),
    "tokenize, many texts, one nested too deep": (
        "message",
        _LARGE,
        _one_bad("tokenize", lambda k: {"uid": k, "text": TEXT[:60]}, _deep),
        (),
    ),
    "tokenize, one long text": (
        "char",
        (65_536, 4_194_304),
        _one(lambda n: TokenizeMsg(0, text=_text(n))),
        (),
    ),
    "tokenize, chat of many messages": (
        "message",
        _LARGE,
        _one(lambda n: TokenizeMsg(0, messages=tuple(_chat(n, lambda k: TEXT[:40])))),
        (),
    ),
    "tokenize, many tools (template options)": (
        "tool",
        (128, 4_096),
        _one(lambda n: TokenizeMsg(0, messages=_HI, template_options=_tools(n))),
        (),
    ),
    "reply, many texts": ("message", _SMALL, _many(lambda k: UserReply(k, TEXT[:8])), TO_FRONTEND),
    "reply, many states handed back": (
        "message",
        _SMALL,
        _many(lambda k: UserReply(k, "", True, None, None, HANDED_BACK, _STATE, 3)),
        TO_FRONTEND,
    ),
}
"""Per shape: the unit counted, its small and large size, the frame of a size, and the kinds the
decoder reads (empty: a worker's, :data:`~puredetok.serving._messages.INBOUND`)."""


def _decode_ns(decoder: Any, frame: bytes, units: int, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        gc.collect()
        began = _cpu_ns()
        decoded = decoder.decode(frame)
        best = min(best, (_cpu_ns() - began) / units)
        del decoded
    return best


def _growth(name: str, best: float, ratios: list[float]) -> Result:
    """The row of a large size: its best time, and its per-unit cost against the small size (the
    median and range of the sorted ``ratios``) held to :data:`RATIO_TARGET`.
    """
    return Result(
        f"{name} (ratio: to small)",
        best,
        ratios[len(ratios) // 2],
        f"<= {RATIO_TARGET:g}",
        all(ratio <= RATIO_TARGET for ratio in ratios),
        ratios[0],
        ratios[-1],
        sum(ratio <= RATIO_TARGET for ratio in ratios),
        len(ratios),
    )


def wire_section(rounds: int = 3, repeats: int = 3) -> list[Result]:
    """Per shape and size, CPU ns per unit of :meth:`FrameDecoder.decode` (best of ``rounds``);
    ratio: the large size against the small one, the median and range over ``repeats``.
    """
    from puredetok.worker._wire import FrameDecoder

    results = []
    for shape, (unit, sizes, make, kinds) in WIRE_SHAPES.items():
        decoder = FrameDecoder(kinds) if kinds else FrameDecoder()
        frames = [make(size) for size in sizes]
        decoded = decoder.decode(frames[0])
        if len(decoded.batch) == 0:
            raise RuntimeError(f"{shape}: nothing decoded")
        per = [
            [_decode_ns(decoder, frame, size, rounds) for frame, size in zip(frames, sizes)]
            for _ in range(repeats)
        ]
        ratios = sorted(large / small for small, large in per)
        results.append(Result(f"{shape}, {sizes[0]:,} {unit}s", min(small for small, _ in per)))
        results.append(_growth(f"{shape}, {sizes[1]:,} {unit}s", min(large for _, large in per), ratios))
    return results


EVENT_SIZES = (10_000, 100_000, 1_000_000)
"""The events of the one request replayed or audited."""

TRACED_UP_TO = 100_000
"""Sizes up to this are run a second time under ``tracemalloc`` (a million events traced take
minutes)."""

EVENT_SHAPES = ("replay, a trace", "audit, a trace", "audit, a vLLM stream", "audit, an SGLang stream")
"""What is measured on one request of many events."""


def _write_input(shape: str, events: int, path: Path, ids: list[int], codec: Codec) -> None:
    with path.open("w") as out:
        if shape == "audit, a vLLM stream":
            state = start(codec)  # each chunk carries the exact text of its id (the audit finds none wrong)
            for k in range(events):
                token = ids[k % len(ids)]
                state, text = step(state, token)
                if k == events - 1:
                    text += finish(state)
                end = "length" if k == events - 1 else None
                choice = {"index": 0, "text": text, "token_ids": [token], "finish_reason": end}
                out.write(f"data: {json.dumps({'id': 'r', 'choices': [choice]})}\n")
            out.write("data: [DONE]\n")
            return
        if shape == "audit, an SGLang stream":  # --incremental-streaming-output: new ids, new text
            state = start(codec)
            for k in range(events):
                token = ids[k % len(ids)]
                state, text = step(state, token)
                if k == events - 1:
                    text += finish(state)
                meta = {"id": "r", "completion_tokens": k + 1, "finish_reason": None}
                if k == events - 1:
                    meta["finish_reason"] = {"type": "length", "length": events}
                out.write(f"data: {json.dumps({'text': text, 'output_ids': [token], 'meta_info': meta})}\n")
            out.write("data: [DONE]\n")
            return
        for k in range(events):
            finished = ', "finished": true' if k == events - 1 else ""
            out.write(f'{{"uid": 1, "tokens": [{ids[k % len(ids)]}]{finished}}}\n')


def _rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _run(shape: str, path: str, tokenizer: Any, shared: dict[str, Any]) -> tuple[bool, int]:
    """Replay or audit the file at ``path``: whether its one request was checked whole and exact,
    and its events. ``shared`` keeps the codecs (and the auditor) from one run to the next.
    """
    if shape == "replay, a trace":
        from puredetok_audit.replay._replay import Replayer
        from puredetok_audit.replay._trace import TraceEvent, read_trace

        replayer = Replayer(tokenizer, codecs=shared.setdefault("codecs", CodecCache()))
        with open(path, "rb") as source:
            for event in read_trace(source):
                assert isinstance(event, TraceEvent)
                replayer.event(event)
                replayer.take_ended()
        replayer.close_all()
        summary = replayer.summary
        return summary.failed == 0 and summary.requests == 1, summary.events
    from puredetok_audit import Auditor, Tally, audit_shard, shards_of

    tally = Tally()
    auditor = shared.setdefault("auditor", Auditor(tokenizer))
    for shard in shards_of(path):
        tally.add(audit_shard(shard, auditor).tally)
    return tally.requests == 1 and tally.errors == 0 and tally.differing == 0, tally.tokens


def _peak() -> int:
    """The process's peak resident memory since the last :func:`_reset_peak`, in bytes."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM")


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")  # resets VmHWM to the resident memory now (Linux)


def _once(shape: str, path: str, tokenizer: Any, shared: dict[str, Any]) -> tuple[bool, int, int, int]:
    """One run: whether its request was exact, its events, CPU ns, peak memory growth in bytes."""
    gc.collect()
    _reset_peak()
    before = _rss()
    began = _cpu_ns()
    ok, events = _run(shape, path, tokenizer, shared)
    return ok, events, _cpu_ns() - began, max(0, _peak() - before)


def _child(shape: str, warm: str, path: str, tokenizer_name: str | None) -> dict[str, Any]:
    """Measure the file at ``path`` in a process of its own, after the short file at ``warm``
    (which builds the codecs, kept for the measured run as a replay or audit of many files keeps
    them, and warms the imports).
    """
    from puredetok.serving._loading import load_tokenizer

    tokenizer = load_tokenizer(tokenizer_name)
    shared: dict[str, Any] = {}
    _once(shape, warm, tokenizer, shared)
    ok, events, spent, growth = _once(shape, path, tokenizer, shared)
    traced = None
    if events <= TRACED_UP_TO:
        tracemalloc.start()
        _run(shape, path, tokenizer, shared)
        traced = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return {"ns": spent, "events": events, "ok": ok, "growth": growth, "traced": traced}


def _measure(
    shape: str, events: int, folder: Path, ids: list[int], codec: Codec, tokenizer_name: str | None
) -> dict[str, Any]:
    warm, path = folder / "warm.jsonl", folder / f"input-{events}.jsonl"
    _write_input(shape, 100, warm, ids, codec)
    _write_input(shape, events, path, ids, codec)
    command = [sys.executable, "-m", "benchmarks.inputs", "--child", shape, str(warm), str(path)]
    if tokenizer_name is not None:
        command += ["--tokenizer", tokenizer_name]
    done = subprocess.run(command, capture_output=True, text=True, check=True, cwd=Path(__file__).parents[1])
    path.unlink()
    measured: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return measured


def events_section(
    tokenizer: Any,
    tokenizer_name: str | None,
    sizes: tuple[int, ...] = EVENT_SIZES,
    repeats: int = 3,
    shapes: tuple[str, ...] = EVENT_SHAPES,
) -> list[Result]:
    """Per shape: CPU ns per event at the smallest and the largest size (the best of ``repeats``
    child processes; ratio: largest against smallest, their range over the repeats) and, at each
    size, the peak memory growth in bytes per event (the largest over the repeats).
    """
    from puredetok.cli._measure import trace_ids

    ids = trace_ids(tokenizer, 4_096)
    codec = codec_for(tokenizer)
    results = []
    with tempfile.TemporaryDirectory(prefix="puredetok-inputs-") as folder:
        for shape in shapes:
            runs = [
                {size: _measure(shape, size, Path(folder), ids, codec, tokenizer_name) for size in sizes}
                for _ in range(repeats)
            ]
            small, large = sizes[0], sizes[-1]
            if not all(run[size]["ok"] and run[size]["events"] == size for run in runs for size in sizes):
                raise RuntimeError(f"{shape}: the request was not checked whole: {runs}")
            per = {size: [run[size]["ns"] / size for run in runs] for size in sizes}
            ratios = sorted(large_ns / small_ns for large_ns, small_ns in zip(per[large], per[small]))
            results.append(Result(f"{shape}, one request of {small:,} events", min(per[small])))
            results.append(_growth(f"{shape}, one request of {large:,} events", min(per[large]), ratios))
            for size in sizes:
                growth = max(run[size]["growth"] for run in runs)
                results.append(
                    Result(
                        f"{shape}, memory at {size:,} events: {growth / 2**20:,.1f} MB (B/event)",
                        growth / size,
                    )
                )
                if size > TRACED_UP_TO:
                    continue
                traced = max(run[size]["traced"] for run in runs)
                results.append(
                    Result(
                        f"{shape}, traced peak at {size:,} events: {traced / 2**20:,.1f} MB (B/event)",
                        traced / size,
                    )
                )
    return results


def inputs_main(argv: list[str] | None = None) -> int:
    """Print the wire, tokenize and replay/audit sections."""
    from puredetok.serving._loading import load_tokenizer

    parser = argparse.ArgumentParser(prog="python -m benchmarks.inputs", description=__doc__)
    parser.add_argument("--tokenizer", default=None, help="tokenizer name or path (default: the bundled one)")
    parser.add_argument("--repeats", type=int, default=3, help="child processes per size (default: 3)")
    parser.add_argument("--no-events", action="store_true", help="skip the replay and audit section")
    parser.add_argument("--child", nargs=3, metavar=("SHAPE", "WARM", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        shape, warm, path = args.child
        print(json.dumps(_child(shape, warm, path, args.tokenizer)))
        return 0
    print(format_table("the wire: decoding a frame (CPU ns per unit)", wire_section(repeats=args.repeats)))
    tokenizer = load_tokenizer(args.tokenizer)
    print(format_table("tokenize path (CPU ns per unit)", tokenize_section(tokenizer)))
    if not args.no_events:
        print(
            format_table(
                "replay and audit, one request of many events (CPU ns per event; a child process each)",
                events_section(tokenizer, args.tokenizer, repeats=args.repeats),
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(inputs_main())
