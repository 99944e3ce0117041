"""Drives vLLM's real ``OutputProcessor`` the way its engine client does: an ``EngineCoreRequest``
per request, then ``EngineCoreOutput`` batches as the engine core sends them (the core ends a
request on its length, or on a stop id with ``finish_reason=STOP`` and the id as ``stop_reason``).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from vllm.plugins import load_general_plugins
from vllm.sampling_params import RequestOutputKind, SamplingParams
from vllm.tokenizers.registry import get_tokenizer
from vllm.v1.engine import EngineCoreOutput, EngineCoreRequest, FinishReason
from vllm.v1.engine.output_processor import OutputProcessor

import helpers
import puredetok.engines.vllm as plugin

load_general_plugins()  # what vLLM does in each of its processes: runs our entry point

KINDS = (RequestOutputKind.DELTA, RequestOutputKind.CUMULATIVE, RequestOutputKind.FINAL_ONLY)
_ids = itertools.count()


@functools.cache
def vllm_tokenizer(name: str) -> Any:
    """The tokenizer as vLLM loads it for a model folder (its cached Hugging Face wrapper)."""
    return get_tokenizer(str(helpers._folder(name)))


@contextmanager
def own_detokenizer() -> Iterator[None]:
    """Within: vLLM's own detokenizer for new requests (the plugin unregistered, then back)."""
    plugin.unregister()
    try:
        yield
    finally:
        plugin.register()


def request(prompt: Sequence[int] | None, request_id: str | None = None, **params: Any) -> EngineCoreRequest:
    """An ``EngineCoreRequest`` with these sampling parameters (``max_tokens`` large unless given)."""
    rid = request_id or f"r{next(_ids)}"
    params.setdefault("max_tokens", 1 << 20)
    return EngineCoreRequest(
        request_id=rid,
        external_req_id=rid,
        prompt_token_ids=None if prompt is None else list(prompt),
        mm_features=None,
        sampling_params=SamplingParams(**params),
        pooling_params=None,
        arrival_time=0.0,
        lora_request=None,
        cache_salt=None,
        data_parallel_rank=None,
    )


@dataclass
class Result:
    """What the user of one request got."""

    outputs: list[Any] = field(default_factory=list)
    """The ``CompletionOutput`` of every ``RequestOutput``, in order."""
    finished: bool = False

    @property
    def text(self) -> str:
        """The request's whole text as a client assembles it."""
        if not self.outputs:
            return ""
        if self.kind == RequestOutputKind.DELTA:
            return "".join(o.text for o in self.outputs)
        return str(self.outputs[-1].text)

    @property
    def token_ids(self) -> list[int]:
        """The request's ids as a client assembles them."""
        if self.kind == RequestOutputKind.DELTA:
            return [i for o in self.outputs for i in o.token_ids]
        return list(self.outputs[-1].token_ids) if self.outputs else []

    @property
    def finish_reason(self) -> str | None:
        """The last output's finish reason."""
        return self.outputs[-1].finish_reason if self.outputs else None

    @property
    def stop_reason(self) -> int | str | None:
        """The last output's stop reason."""
        return self.outputs[-1].stop_reason if self.outputs else None

    kind: RequestOutputKind = RequestOutputKind.DELTA


def run(
    tokenizer: Any,
    prompt: Sequence[int] | None,
    output: Sequence[int],
    chunks: Sequence[int] = (1,),
    stop_id: bool = False,
    **params: Any,
) -> Result:
    """One request through a fresh ``OutputProcessor``: ``output`` sent in batches of the sizes in
    ``chunks`` (cycled); the last batch ends the request on its length, or on a stop id
    (``stop_id``: the last id is one). Batches stop when the processor finished the request."""
    processor = OutputProcessor(tokenizer, log_stats=False)
    params.setdefault("max_tokens", len(output))  # the engine core ends the request on its length
    req = request(prompt or [], **params)
    processor.add_request(req, None)
    result = Result(kind=req.sampling_params.output_kind)
    position, sizes = 0, itertools.cycle(chunks)
    while position < len(output) and req.request_id in processor.request_states:
        new = list(output[position : position + next(sizes)])
        position += len(new)
        last = position >= len(output)
        reason = (FinishReason.STOP if stop_id else FinishReason.LENGTH) if last else None
        core = EngineCoreOutput(
            request_id=req.request_id,
            new_token_ids=new,
            finish_reason=reason,
            stop_reason=output[-1] if last and stop_id else None,
        )
        for request_output in processor.process_outputs([core]).request_outputs:
            result.outputs.extend(request_output.outputs)
            result.finished = request_output.finished
    return result


def detokenizer_of(processor: OutputProcessor, request_id: str) -> Any:
    """The detokenizer vLLM gave a request."""
    return processor.request_states[request_id].detokenizer
