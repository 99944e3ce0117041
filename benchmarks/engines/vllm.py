"""vLLM's ``OutputProcessor`` per token, side by side in one run: with vLLM's own detokenizer, with
puredetok's (the plugin) and with ``detokenize=False`` (no detokenizer at all).

Run it in an environment with vLLM (``python -m benchmarks.engines.vllm [--tokenizer PATH ...]``;
``tasks.py test-engines vllm`` builds one). 256 requests with the serving parameters (4 stop
strings, ``max_tokens``, ``min_tokens``, streamed as deltas) each get one id per engine step, as
vLLM's engine core sends them; a run times ``add_request`` for every request and
``process_outputs`` for every step, handing each step to the three configurations in turn
(``detokenize=False`` takes no stop strings: vLLM refuses them there). A detokenizer's *share* is
its time minus the time with ``detokenize=False``; the target is puredetok's share <= 0.2 x
vLLM's.
"""

from __future__ import annotations

__all__ = ["Figures", "PARTS", "main", "measure", "parts"]

import argparse
import gc
import os
import platform
import time
from collections.abc import Sequence
from typing import Any

import attrs

from puredetok.cli._timing import TEXT

STOPS = ("<|stop|>", "\n\nUser:", "###", "</answer>")
"""Four stop strings that do not occur in the trace (so every request runs to its length)."""
TARGET = 0.2
"""puredetok's share of the OutputProcessor's time, at most this times vLLM's own detokenizer's."""
CONFIGS = ("vllm", "puredetok", "no-detokenize")
_cpu_ns = time.thread_time_ns  # CPU time: on a shared machine, wall time takes in the other jobs


@attrs.frozen
class Figures:
    """Nanoseconds per token of each configuration (of one repeat: the fastest of its runs, part by
    part).
    """

    tokenizer: str
    ns: dict[str, float]
    alone: dict[str, float]
    """The same for the detokenizers alone (:func:`_alone`)."""

    @property
    def ratio(self) -> float:
        """The share of puredetok over the share of vLLM's own detokenizer."""
        base = self.ns["no-detokenize"]
        return (self.ns["puredetok"] - base) / (self.ns["vllm"] - base)

    @property
    def alone_ratio(self) -> float:
        """The same ratio for the detokenizers alone."""
        base = self.alone["no-detokenize"]
        return (self.alone["puredetok"] - base) / (self.alone["vllm"] - base)


def _traces(tokenizer: Any, requests: int, tokens: int) -> tuple[list[list[int]], list[list[int]]]:
    ids = tokenizer.encode(TEXT * (1 + tokens // 50), add_special_tokens=False)
    prompt = tokenizer.encode("You are a helpful assistant.\nUser: write something.\nAssistant:")
    step = max(1, (len(ids) - tokens) // max(requests, 1))
    outputs = [ids[(i * step) % (len(ids) - tokens) :][:tokens] for i in range(requests)]
    return [list(prompt) for _ in range(requests)], outputs


def _prepare(config: str, prompts: list[list[int]], outputs: list[list[int]], tag: str) -> tuple[Any, Any]:
    """The requests of one configuration and the engine core's outputs for each step."""
    from vllm.sampling_params import RequestOutputKind, SamplingParams
    from vllm.v1.engine import EngineCoreOutput, EngineCoreRequest, FinishReason

    tokens = len(outputs[0])
    requests = []
    for index, prompt in enumerate(prompts):
        params = SamplingParams(
            max_tokens=tokens,
            min_tokens=min(16, tokens),
            stop=list(STOPS) if config != "no-detokenize" else None,
            output_kind=RequestOutputKind.DELTA,
            detokenize=config != "no-detokenize",
        )
        rid = f"{config}-{tag}-{index}"
        requests.append(
            EngineCoreRequest(
                request_id=rid,
                external_req_id=rid,
                prompt_token_ids=list(prompt),
                mm_features=None,
                sampling_params=params,
                pooling_params=None,
                arrival_time=0.0,
                lora_request=None,
                cache_salt=None,
                data_parallel_rank=None,
            )
        )
    steps = [
        [
            EngineCoreOutput(
                request_id=req.request_id,
                new_token_ids=[output[position]],
                finish_reason=FinishReason.LENGTH if position == tokens - 1 else None,
            )
            for req, output in zip(requests, outputs)
        ]
        for position in range(tokens)
    ]
    return requests, steps


def _run(
    tokenizer: Any, prompts: list[list[int]], outputs: list[list[int]], tag: str
) -> dict[str, list[int]]:
    """One run of the three configurations side by side: each has its own ``OutputProcessor`` and
    requests, and every engine step is handed to the three in turn (the order rotating), so that
    the machine's load, which changes over seconds, weighs on all three alike. Nanoseconds per
    token of each: its ``add_request`` calls and its ``process_outputs`` calls.
    """
    from vllm.v1.engine.output_processor import OutputProcessor

    from puredetok.engines import vllm as plugin

    prepared = {config: _prepare(config, prompts, outputs, tag) for config in CONFIGS}
    processors = {config: OutputProcessor(tokenizer, log_stats=False) for config in CONFIGS}
    spent: dict[str, list[int]] = {config: [] for config in CONFIGS}
    gc.collect()
    gc.disable()
    try:
        for config in CONFIGS:
            if config == "vllm":
                plugin.unregister()
            else:
                plugin.register()
            processor, (requests, _) = processors[config], prepared[config]
            began = _cpu_ns()
            for req in requests:
                processor.add_request(req, None)
            spent[config].append(_cpu_ns() - began)
        plugin.register()
        for position in range(len(outputs[0])):
            for shift in range(len(CONFIGS)):
                config = CONFIGS[(position + shift) % len(CONFIGS)]
                batch = prepared[config][1][position]
                processor = processors[config]
                began = _cpu_ns()
                processor.process_outputs(batch)
                spent[config].append(_cpu_ns() - began)
    finally:
        gc.enable()
    assert not any(p.request_states for p in processors.values()), "every request ends on its length"
    return spent


def _alone(
    tokenizer: Any, prompts: list[list[int]], outputs: list[list[int]], tag: str
) -> dict[str, list[int]]:
    """The detokenizers alone, side by side per step as in :func:`_run`: per id, the three calls
    vLLM's ``OutputProcessor`` makes (``num_output_tokens``, ``update``, ``get_next_output_text``)
    on vLLM's detokenizer, on puredetok's, and on vLLM's do-nothing base class (what
    ``detokenize=False`` gets). The nanoseconds of each step.
    """
    from vllm.v1.engine.detokenizer import IncrementalDetokenizer

    from puredetok.engines import vllm as plugin

    made: dict[str, list[Any]] = {}
    for config in CONFIGS:
        requests, _ = _prepare(config, prompts, outputs, tag)
        if config == "vllm":
            plugin.unregister()
        else:
            plugin.register()
        made[config] = [
            IncrementalDetokenizer()
            if config == "no-detokenize"
            else IncrementalDetokenizer.from_new_request(tokenizer, req)
            for req in requests
        ]
    plugin.register()
    tokens = len(outputs[0])
    spent: dict[str, list[int]] = {config: [] for config in CONFIGS}
    gc.collect()
    gc.disable()
    try:
        for position in range(tokens):
            last = position == tokens - 1
            ids = [[output[position]] for output in outputs]
            for shift in range(len(CONFIGS)):
                config = CONFIGS[(position + shift) % len(CONFIGS)]
                began = _cpu_ns()
                for detokenizer, new in zip(made[config], ids):
                    detokenizer.num_output_tokens()
                    detokenizer.update(new, False)
                    detokenizer.get_next_output_text(last, True)
                spent[config].append(_cpu_ns() - began)
    finally:
        gc.enable()
    return spent


def _best(runs: list[dict[str, list[int]]], ids: int) -> dict[str, float]:
    """Nanoseconds per id of each configuration: for each part of a run (a step, the openings) the
    fastest of the runs, summed; a part that another job's time slice fell into in one run counts
    with its time from another.
    """
    return {config: sum(map(min, zip(*(run[config] for run in runs)))) / ids for config in CONFIGS}


def measure(tokenizer: Any, label: str, requests: int = 256, tokens: int = 128, rounds: int = 5) -> Figures:
    """One repeat: ``rounds`` side-by-side runs of each kind, the fastest of each part."""
    prompts, outputs = _traces(tokenizer, requests, tokens)
    _run(tokenizer, prompts[:8], [o[:16] for o in outputs[:8]], "warm-up")  # codecs built, caches filled
    runs = [_run(tokenizer, prompts, outputs, str(round_)) for round_ in range(rounds)]
    alone = [_alone(tokenizer, prompts, outputs, f"alone-{round_}") for round_ in range(rounds)]
    return Figures(label, _best(runs, requests * tokens), _best(alone, requests * tokens))


PARTS = ("no decoding", "the prompt read", "as shipped")
"""The plugin with parts of it replaced (:func:`parts`): its stop-layer calls returning their
stream and no text (``open_like`` and ``advance``), then only ``advance`` so (the prompt read),
then nothing replaced."""


def _replaced(part: str) -> dict[str, Any]:
    def no_text(stream: Any, token_id: int) -> tuple[Any, str]:
        return stream, ""

    def no_prompt(stream: Any, prompt_ids: Any = ()) -> Any:
        return stream

    if part == "no decoding":
        return {"advance": no_text, "open_like": no_prompt}
    if part == "the prompt read":
        return {"advance": no_text}
    return {}


def parts(tokenizer: Any, requests: int = 256, tokens: int = 128, rounds: int = 3) -> dict[str, float]:
    """Where puredetok's share goes: per part of :data:`PARTS`, puredetok's share of the
    ``OutputProcessor``'s time over vLLM's share in the same side-by-side runs (:func:`_run`,
    the fastest of each part over ``rounds`` runs).
    """
    from puredetok.engines import vllm as plugin

    prompts, outputs = _traces(tokenizer, requests, tokens)
    _run(tokenizer, prompts[:8], [o[:16] for o in outputs[:8]], "warm-up")
    shares: dict[str, float] = {}
    for part in PARTS:
        kept = {name: getattr(plugin, name) for name in ("advance", "open_like")}
        for name, function in _replaced(part).items():
            setattr(plugin, name, function)
        try:
            runs = [_run(tokenizer, prompts, outputs, f"{part}-{round_}") for round_ in range(rounds)]
        finally:
            for name, function in kept.items():
                setattr(plugin, name, function)
        ns = _best(runs, requests * tokens)
        base = ns["no-detokenize"]
        shares[part] = (ns["puredetok"] - base) / (ns["vllm"] - base)
    return shares


def main(argv: Sequence[str] | None = None) -> int:
    """Print the per-token costs and the ratio of the shares, over several repeats."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.engines.vllm", description=__doc__)
    parser.add_argument(
        "--tokenizer",
        action="append",
        help="a tokenizer folder (repeatable; default: the embedded Qwen3)",
    )
    parser.add_argument("--requests", type=int, default=256)
    parser.add_argument("--tokens", type=int, default=128, help="ids per request")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--parts", action="store_true", help="also show where puredetok's share goes (parts replaced)"
    )
    args = parser.parse_args(argv)
    if args.requests < 1 or args.tokens < 16 or args.repeats < 1:
        parser.error("--requests and --repeats must be >= 1, --tokens >= 16")
    from vllm.tokenizers.registry import get_tokenizer

    from puredetok.serving._loading import TokenizerLoadError, check_vocabulary, default_tokenizer_path

    folders = args.tokenizer or [str(default_tokenizer_path())]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"vLLM OutputProcessor per token: {args.requests} requests x {args.tokens} ids, 4 stop strings, "
        f"min_tokens, max_tokens, DELTA; Python {platform.python_version()}, {os.cpu_count()} cores, "
        f"load {load:.2f}; {args.repeats} repeats"
    )
    print(f"{'tokenizer':<12} {'vLLM ns':>9} {'puredetok ns':>13} {'no-detok ns':>12} {'shares':>16}  ratio")
    for folder in folders:
        tokenizer = get_tokenizer(folder)
        try:
            check_vocabulary(tokenizer, folder)
        except TokenizerLoadError as error:
            parser.error(str(error))
        label = os.path.basename(folder.rstrip("/"))
        figures = [measure(tokenizer, label, args.requests, args.tokens) for _ in range(args.repeats)]
        for f in figures:
            base = f.ns["no-detokenize"]
            shares = f"{f.ns['vllm'] - base:6.0f} / {f.ns['puredetok'] - base:5.0f}"
            print(
                f"{label:<12} {f.ns['vllm']:9.0f} {f.ns['puredetok']:13.0f} {base:12.0f} {shares:>16}  "
                f"{f.ratio:.3f}   alone: {f.alone['vllm']:.0f} / {f.alone['puredetok']:.0f} / "
                f"{f.alone['no-detokenize']:.0f} ns, ratio {f.alone_ratio:.3f}"
            )
        ratios = sorted(f.ratio for f in figures)
        verdict = "met" if ratios[-1] <= TARGET else "missed"
        print(f"{label:<12} share ratio {ratios[0]:.3f} - {ratios[-1]:.3f} (target <= {TARGET}): {verdict}")
        alone = sorted(f.alone_ratio for f in figures)
        print(f"{label:<12} detokenizers alone: ratio {alone[0]:.3f} - {alone[-1]:.3f}")
        if args.parts:
            found = [parts(tokenizer, args.requests, args.tokens) for _ in range(args.repeats)]
            for part in PARTS:
                values = sorted(shares[part] for shares in found)
                print(f"{label:<12} the plugin with {part}: share ratio {values[0]:.3f} - {values[-1]:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
