"""What vLLM's own OpenAI-compatible server writes, with no model: a request body is parsed into
vLLM's ``CompletionRequest`` / ``ChatCompletionRequest``, which gives its ``SamplingParams``; a
stand-in engine client drives vLLM's real ``OutputProcessor`` as ``AsyncLLM.generate`` does (a
``RequestOutputCollector`` per request, a ``ParentRequest`` fanning out ``n`` > 1 into child
requests, the engine core's outputs interleaved); and vLLM's ``OpenAIServingCompletion`` /
``OpenAIServingChat`` turn those ``RequestOutput``s into the response body or the server-sent
events a server sends. Only the engine core (the model) is stood in for.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import numpy as np
from vllm.entrypoints.generate.base.protocol import RequestResponseMetadata
from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
from vllm.entrypoints.openai.chat_completion.serving import OpenAIServingChat
from vllm.entrypoints.openai.completion.protocol import CompletionRequest
from vllm.entrypoints.openai.completion.serving import OpenAIServingCompletion
from vllm.entrypoints.openai.models.serving import BaseModelPath, OpenAIServingModels
from vllm.outputs import RequestOutput
from vllm.sampling_params import SamplingParams
from vllm.utils.async_utils import merge_async_iterators
from vllm.v1.engine import EngineCoreOutput, EngineCoreRequest, FinishReason
from vllm.v1.engine.output_processor import OutputProcessor, RequestOutputCollector
from vllm.v1.engine.parallel_sampling import ParentRequest
from vllm.v1.outputs import LogprobsLists

MODEL = "model"
_ids = itertools.count()


def _ending(choice: Choice) -> FinishReason:
    if choice.error:
        return FinishReason.ERROR
    return FinishReason.STOP if choice.stop_token else FinishReason.LENGTH


class _ModelConfig:
    """What the serving classes read of vLLM's ``ModelConfig``."""

    model = MODEL
    max_model_len = 1 << 16
    generation_config = "auto"
    override_generation_config: dict[str, Any] = {}
    hf_config = SimpleNamespace(model_type="llama")
    hf_text_config = hf_config
    skip_tokenizer_init = False
    is_encoder_decoder = False

    def get_diff_sampling_param(self) -> dict[str, Any]:
        """No defaults from a generation config."""
        return {}


@dataclass
class Choice:
    """One generated sequence: its ids, and whether its last id is a stop token (the engine core
    then ends it with ``finish_reason=STOP`` and that id as ``stop_reason``; else on its length)."""

    ids: list[int]
    stop_token: bool = False
    error: bool = False
    """Its last step fails instead (``FinishReason.ERROR``: the server answers an error)."""


@dataclass
class Served:
    """What one request gave: the lines a server sends (a JSON body, or ``data:`` lines), and
    what the engine's ``RequestOutput``s said of each choice (text joined as a client joins it)."""

    lines: list[str]
    prompt: list[int]
    texts: dict[int, str] = field(default_factory=dict)
    ids: dict[int, list[int]] = field(default_factory=dict)
    finish: dict[int, tuple[str | None, int | str | None]] = field(default_factory=dict)


class Server:
    """vLLM's serving classes over one tokenizer, built with their own constructors."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        engine = SimpleNamespace(
            model_config=_ModelConfig(),
            renderer=SimpleNamespace(tokenizer=tokenizer),
            input_processor=None,
            errored=False,
            vllm_config=None,
        )
        models = OpenAIServingModels(engine, [BaseModelPath(name=MODEL, model_path=MODEL)])
        self.completions = OpenAIServingCompletion(engine, models, online_renderer=None, request_logger=None)
        self.chats = OpenAIServingChat(
            engine, models, "assistant", online_renderer=None, request_logger=None, chat_template=None,
            chat_template_content_format="auto",
        )  # fmt: skip

    async def _generate(
        self, params: SamplingParams, prompt: Sequence[int], choices: Sequence[Choice], batch: int,
        served: Served,
    ) -> AsyncIterator[RequestOutput]:  # fmt: skip
        """``AsyncLLM.generate`` with the engine core's outputs made up: each step sends every
        running choice its next id; the consumer takes what the collector holds every ``batch``
        steps (a producer ahead of its consumer: the collector merges the deltas)."""
        processor = OutputProcessor(self.tokenizer, log_stats=False)
        rid = f"req-{next(_ids)}"
        request = EngineCoreRequest(
            request_id=rid, external_req_id=rid, prompt_token_ids=list(prompt), mm_features=None,
            sampling_params=params, pooling_params=None, arrival_time=0.0, lora_request=None,
            cache_salt=None, data_parallel_rank=None,
        )  # fmt: skip
        queue = RequestOutputCollector(params.output_kind, rid)
        if params.n == 1:
            processor.add_request(request, None, None, 0, queue)
            children = [request.request_id]
        else:
            parent = ParentRequest(request)
            children = []
            for index in range(params.n):
                child_id, child_params = parent.get_child_info(index)
                child = EngineCoreRequest(
                    request_id=child_id, external_req_id=rid, prompt_token_ids=list(prompt),
                    mm_features=None, sampling_params=child_params, pooling_params=None, arrival_time=0.0,
                    lora_request=None, cache_salt=None, data_parallel_rank=None,
                )  # fmt: skip
                processor.add_request(child, None, parent, index, queue)
                children.append(child_id)
        width = 1 + (params.logprobs or 0)
        for step in itertools.count():
            cores = []
            for child_id, choice in zip(children, choices):
                if step >= len(choice.ids) or child_id not in processor.request_states:
                    continue
                token = choice.ids[step]
                last = step == len(choice.ids) - 1
                logprobs = None
                if params.logprobs is not None:
                    logprobs = LogprobsLists(
                        np.array([[token] * width]), np.array([[-0.5] * width]), np.array([1])
                    )
                cores.append(
                    EngineCoreOutput(
                        request_id=child_id,
                        new_token_ids=[token],
                        new_logprobs=logprobs,
                        finish_reason=_ending(choice) if last else None,
                        stop_reason=token if last and choice.stop_token else None,
                    )
                )
            if not cores:
                break
            processor.process_outputs(cores)
            if (step + 1) % batch == 0 or not processor.request_states:
                output = queue.get_nowait()
                if output is not None:
                    self._note(output, params, served)
                    yield output
        output = queue.get_nowait()
        if output is not None:
            self._note(output, params, served)
            yield output

    @staticmethod
    def _note(output: RequestOutput, params: SamplingParams, served: Served) -> None:
        """What the engine's outputs say of each choice, joined as a client joins them."""
        for choice in output.outputs:
            final = params.output_kind.name != "DELTA"
            before = "" if final else served.texts.get(choice.index, "")
            served.texts[choice.index] = before + choice.text
            ids = [] if final else served.ids.get(choice.index, [])
            served.ids[choice.index] = [*ids, *choice.token_ids]
            served.finish[choice.index] = (choice.finish_reason, choice.stop_reason)

    def completion(
        self, body: dict[str, Any], prompt: Sequence[int], choices: Sequence[Choice], batch: int = 1
    ) -> Served:
        """A ``/v1/completions`` request with ``body`` (its ``prompt`` the ids): the JSON body, or
        the ``data:`` lines when ``body["stream"]``."""
        request = CompletionRequest.model_validate({"model": MODEL, "prompt": list(prompt), **body})
        served = Served([], list(prompt))
        params = request.to_sampling_params(request.max_tokens or max(len(c.ids) for c in choices), {})
        rid, engine_inputs = f"cmpl-{next(_ids)}", [{"type": "token", "prompt_token_ids": list(prompt)}]

        async def one() -> AsyncIterator[tuple[int, RequestOutput]]:
            async for pair in merge_async_iterators(self._generate(params, prompt, choices, batch, served)):
                yield pair

        async def go() -> None:
            metadata = RequestResponseMetadata(request_id=rid)
            if request.stream:
                stream = self.completions.completion_stream_generator(
                    request, engine_inputs, one(), rid, int(time.time()), MODEL, num_prompts=1,
                    tokenizer=self.tokenizer, request_metadata=metadata,
                )  # fmt: skip
                served.lines.extend([event async for event in stream])
                return
            final = None
            async for _, output in one():
                final = output
            assert final is not None
            if final.prompt is None:  # as the server's create_completion does
                final.prompt = self.completions._extract_prompt_text(engine_inputs[0])
            response = self.completions.request_output_to_completion_response(
                [final], request, rid, int(time.time()), MODEL, self.tokenizer, metadata
            )
            served.lines.append(response.model_dump_json())

        asyncio.run(go())
        return served

    def chat(
        self, body: dict[str, Any], prompt: Sequence[int], choices: Sequence[Choice], batch: int = 1
    ) -> Served:
        """A ``/v1/chat/completions`` request with ``body``, its chat template's ids ``prompt``."""
        request = ChatCompletionRequest.model_validate(
            {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], **body}
        )
        served = Served([], list(prompt))
        budget = request.max_completion_tokens or max(len(c.ids) for c in choices)
        params = request.to_sampling_params(budget, {})
        rid, conversation = f"chatcmpl-{next(_ids)}", [{"role": "user", "content": "hi"}]

        async def go() -> None:
            metadata = RequestResponseMetadata(request_id=rid)
            outputs = self._generate(params, prompt, choices, batch, served)
            if request.stream:
                stream = self.chats.chat_completion_stream_generator(
                    request, outputs, rid, MODEL, conversation, self.tokenizer, metadata
                )
                served.lines.extend([event async for event in stream])
                return
            response = await self.chats.chat_completion_full_generator(
                request, outputs, rid, MODEL, conversation, self.tokenizer, metadata
            )
            served.lines.append(response.model_dump_json())

        asyncio.run(go())
        return served
