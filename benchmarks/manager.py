"""The manager's benchmark: many concurrent requests, against the two-window algorithm batched as
engines batch it (two ``batch_decode`` calls per step over all requests), and its memory.
"""

from __future__ import annotations

__all__ = ["manager_section", "memory_section", "BatchedTwoWindow"]

import gc
import tracemalloc
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from puredetok.cli._measure import MIN_TOKENS, STOPS, trace_ids
from puredetok.cli._timing import Result, ratio_result, repeated
from puredetok.serving._detokenize_manager import DetokenizeManager
from puredetok.serving._messages import DetokenizeBatch, DetokenizeMsg, Opening, SamplingParams


class BatchedTwoWindow:
    """SGLang's detokenizer loop: per step, ``batch_decode`` the read windows and the new windows of
    every request, and emit the differences (held while the new text ends in U+FFFD).
    """

    def __init__(self, tokenizer: Any, requests: int) -> None:
        self.tokenizer = tokenizer
        self.ids: list[list[int]] = [[] for _ in range(requests)]
        self.prefix = [0] * requests
        self.read = [0] * requests

    def step(self, tokens: Sequence[int]) -> list[str]:
        """One token for every request; the deltas."""
        ids, prefix, read = self.ids, self.prefix, self.read
        for row, token in zip(ids, tokens):
            row.append(token)
        surrounding = self.tokenizer.batch_decode([row[p:r] for row, p, r in zip(ids, prefix, read)])
        whole = self.tokenizer.batch_decode([row[p:] for row, p in zip(ids, prefix)])
        deltas = []
        for n, (old, new) in enumerate(zip(surrounding, whole)):
            if len(new) > len(old) and not new.endswith("\ufffd"):
                prefix[n], read[n] = read[n], len(ids[n])
                deltas.append(new[len(old) :])
            else:
                deltas.append("")
        return deltas


def _steps(tokenizer: Any, requests: int, steps: int, per_message: int) -> list[list[list[int]]]:
    """``steps`` rounds of ``per_message`` ids for each request (each request at its own offset)."""
    ids = trace_ids(tokenizer, 4_096)
    return [
        [
            [ids[(n * 97 + step * per_message + k) % len(ids)] for k in range(per_message)]
            for n in range(requests)
        ]
        for step in range(steps)
    ]


def serving_params(steps: int) -> SamplingParams:
    """The parameters engines serve with: 4 stop strings, the tokenizer's EOS ids (the manager's
    default), ``min_tokens`` and ``max_new_tokens`` (past the last step: the scheduler ends each
    request with its last message; never below ``min_tokens``, which parameters refuse).
    """
    return SamplingParams(stop=STOPS, min_tokens=MIN_TOKENS, max_new_tokens=max(steps + 1, MIN_TOKENS))


def _messages(rounds: list[list[list[int]]], params: SamplingParams) -> list[list[DetokenizeMsg]]:
    """One list of messages per step: each request opens with its first and ends with its last."""
    last, opening = len(rounds) - 1, Opening((), params)
    return [
        [
            DetokenizeMsg(n, tuple(ids), step == last, opening if step == 0 else None)
            for n, ids in enumerate(row)
        ]
        for step, row in enumerate(rounds)
    ]


def manager_section(tokenizer: Any, requests: int = 256, steps: int = 64, repeats: int = 3) -> list[Result]:
    """Per-token cost of the manager (through ``handle_batch``, as the worker runs it, and through
    ``handle``) and of the batched two-window algorithm, same run, same ids; with no parameters and
    with the serving ones (ratios over ``repeats`` repeats).
    """
    codecs = DetokenizeManager(tokenizer).codecs  # the shared codec, built outside the timings
    single = _steps(tokenizer, requests, steps, 1)
    four = _steps(tokenizer, requests, steps // 4, 4)
    serving = serving_params(steps)

    def runner(handle: Callable[[DetokenizeManager, Any], object], steps: Sequence[Any]) -> Any:
        # One manager per measure, made untimed (it reads the vocabulary); it forgets ended uids.
        manager = DetokenizeManager(tokenizer, codecs=codecs, remember_ended=0)

        def run() -> None:
            for step in steps:
                handle(manager, step)
            assert not len(manager)

        return run

    def run_batches(batches: list[DetokenizeBatch]) -> Any:
        return runner(DetokenizeManager.handle_batch, batches)

    def run_messages(lists: list[list[DetokenizeMsg]]) -> Any:
        return runner(DetokenizeManager.handle, lists)

    def run_two_window() -> None:
        engine = BatchedTwoWindow(tokenizer, requests)
        for rows in single:
            engine.step([row[0] for row in rows])

    # The batches are built outside the timings, as the two-window algorithm's token lists are.
    def batches(rounds: list[list[list[int]]], params: SamplingParams) -> list[DetokenizeBatch]:
        return [DetokenizeBatch.of(messages) for messages in _messages(rounds, params)]

    names = {
        "plain": "DetokenizeManager.handle_batch, no parameters",
        "batch": "handle_batch, 4 stops + EOS + min/max tokens",
        "handle": "handle (one UserReply each), the same",
        "four": "handle_batch, the same, 4 ids per message",
        "two": "two-window, 2 batch_decode per step",
    }
    runs = [
        (names["plain"], run_batches(batches(single, SamplingParams()))),
        (names["batch"], run_batches(batches(single, serving))),
        (names["handle"], run_messages(_messages(single, serving))),
        (names["four"], run_batches(batches(four, serving))),
        (names["two"], run_two_window),
    ]
    samples = repeated(runs, requests * steps, 5, repeats)
    target = "<= 0.1 x two-window (10x throughput)"
    results = [
        ratio_result(names["plain"], samples, names["two"]),
        ratio_result(names["batch"], samples, names["two"], target, 0.1),
        ratio_result(names["handle"], samples, names["two"], "<= 1/6 x two-window (6x throughput)", 1 / 6),
        ratio_result(names["four"], samples, names["two"]),
        ratio_result(names["two"], samples, names["two"]),
    ]
    return [
        attrs.evolve(result, name=f"{result.name} ({1e9 / result.ns_per_token:,.0f} tok/s)")
        for result in results
    ]


def memory_section(tokenizer: Any, requests: int = 10_000) -> list[Result]:
    """Memory held by ``requests`` live requests in mid-stream (tracemalloc), including requests
    holding an incomplete character and text that could start a stop string, a third opened after
    a prompt with a token limit; and the same requests
    saved as bytes (what a worker hands back when it stops, or what parking them costs).
    """
    manager = DetokenizeManager(tokenizer)
    backend = getattr(tokenizer, "backend_tokenizer", tokenizer)
    text = backend.encode("streaming 推理 text 🦩", add_special_tokens=False).ids
    partial = text[:-1]  # ends inside the emoji: the state holds bytes
    with_stop = Opening((), SamplingParams(stop=("text 🦩 done", "\n\n")))
    plain = Opening()
    prompted = Opening(tuple(text), SamplingParams(stop=("\n\n",), max_new_tokens=256))
    manager.codec_of(plain.params)  # built once per tokenizer and options, outside the measure
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    batch = [
        DetokenizeMsg(n, tuple(partial if n % 2 else text[:3]), False, (with_stop, prompted, plain)[n % 3])
        for n in range(requests)
    ]
    messages = tracemalloc.get_traced_memory()[0]
    manager.handle(batch)
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    held = after - messages
    del batch
    assert len(manager) == requests
    saved = sum(len(state) for _, state, _ in manager.drain())
    limit = 10 * 1024 * 1024
    return [
        Result(
            f"{requests:,} live requests: {held / 1e6:.2f} MB of state ({held / requests:,.0f} B each)",
            0.0,
            None,
            "< 10 MB",
            held < limit,
        ),
        Result(f"  (the {requests:,} messages themselves: {(messages - before) / 1e6:.2f} MB)", 0.0),
        Result(
            f"  the same requests saved as bytes: {saved / 1e3:.0f} kB ({saved / requests:.0f} B each)",
            0.0,
            None,
            "< 100 B each",
            saved < 100 * requests,
        ),
    ]
