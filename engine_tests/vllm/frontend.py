"""What vLLM's own front end does with a request, in a fresh process (run as a script by
``test_frontend.py``): the engine arguments (whose construction loads vLLM's plugins, from the
installed packages' entry points), the engine configuration, the renderer's tokenizer, the
``InputProcessor`` and the ``OutputProcessor`` made as ``AsyncLLM`` and ``LLM`` make them; one
request given as token ids goes through them, the engine core's outputs are the ids given.
Nothing here calls puredetok. Prints one JSON line: what the client got and who decoded it.

``python frontend.py MODEL_FOLDER PROMPT_IDS OUTPUT_IDS [--skip-tokenizer-init]`` (ids as JSON
lists); needs ``VLLM_TARGET_DEVICE=cpu`` on a machine without a GPU (vLLM then configures its CPU
platform; no model is loaded).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any


def engine_config(args: Any) -> Any:
    """The engine configuration ``AsyncLLM`` makes from ``args``. vLLM 0.34's CPU platform refuses
    to configure an x86 machine without triton-cpu (0.32 and 0.33 warn), which only its model
    runner needs: no model runs here, so its check is told Triton is there while it configures."""
    import vllm.triton_utils

    has_triton = vllm.triton_utils.HAS_TRITON
    vllm.triton_utils.HAS_TRITON = True
    try:
        return args.create_engine_config()
    finally:
        vllm.triton_utils.HAS_TRITON = has_triton


def main() -> None:
    """Run one request through vLLM's front end and print the result as JSON."""
    folder, prompt, output = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
    skip_init = "--skip-tokenizer-init" in sys.argv
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.renderers import renderer_from_config
    from vllm.sampling_params import RequestOutputKind, SamplingParams
    from vllm.v1.engine import EngineCoreOutput, FinishReason
    from vllm.v1.engine.input_processor import InputProcessor
    from vllm.v1.engine.output_processor import OutputProcessor

    config = engine_config(AsyncEngineArgs(model=folder, skip_tokenizer_init=skip_init))
    renderer = renderer_from_config(config)
    inputs = InputProcessor(config, renderer)
    began = time.perf_counter()
    processor = OutputProcessor(
        renderer.tokenizer,
        log_stats=False,
        stream_interval=config.scheduler_config.stream_interval,
        tracing_enabled=False,
    )
    made = time.perf_counter() - began
    params = SamplingParams(
        max_tokens=len(output), output_kind=RequestOutputKind.DELTA, detokenize=not skip_init
    )
    request = inputs.process_inputs("q", {"prompt_token_ids": prompt}, params, supported_tasks=("generate",))
    inputs.assign_request_id(request)
    processor.add_request(request, None)
    text, ids = "", []
    for position, token_id in enumerate(output):
        last = position == len(output) - 1
        core = EngineCoreOutput(
            request_id=request.request_id,
            new_token_ids=[token_id],
            finish_reason=FinishReason.LENGTH if last else None,
        )
        if position == 0:
            detokenizer = processor.request_states[request.request_id].detokenizer
        for result in processor.process_outputs([core]).request_outputs:
            text += result.outputs[0].text
            ids += result.outputs[0].token_ids
    import puredetok.engines.vllm as plugin

    print(
        json.dumps(
            {
                "registered": plugin.registered(),
                "tokenizer": type(renderer.tokenizer).__name__,
                "detokenizer": type(detokenizer).__name__,
                "text": text,
                "ids": ids,
                "output_processor_seconds": made,
            }
        )
    )


if __name__ == "__main__":
    main()
