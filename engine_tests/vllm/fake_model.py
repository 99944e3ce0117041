"""A stand-in for a model, so that vLLM's own engine core runs on a machine without a GPU:
``vllm serve MODEL --distributed-executor-backend uni --worker-cls fake_model.ScriptedWorker``
(with ``VLLM_ENABLE_V1_MULTIPROCESSING=0``, which keeps vLLM's CPU platform from choosing its
multiprocess executor, and this folder on ``PYTHONPATH``). vLLM's engine core, scheduler and KV
cache manager run as they do; where a worker would run the model, this one "samples" the ids of
``PUREDETOK_SCRIPT`` (a JSON list), one a step per request, from the first on. No weights, no
kernels: a KV cache spec and memory figures for one small layer.
"""

from __future__ import annotations

import json
import os
from typing import Any

import torch
from vllm.v1.kv_cache_interface import FullAttentionSpec
from vllm.v1.outputs import ModelRunnerOutput
from vllm.v1.worker.worker_base import CompilationTimes, WorkerBase

SCRIPT_VARIABLE = "PUREDETOK_SCRIPT"


class ScriptedWorker(WorkerBase):
    """A worker whose model always continues with the ids of ``PUREDETOK_SCRIPT``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.pop("shared_worker_lock", None)
        super().__init__(*args, **kwargs)
        self.script: list[int] = json.loads(os.environ[SCRIPT_VARIABLE])
        self.prompt_length: dict[str, int] = {}
        self.seen: dict[str, int] = {}
        self.made: dict[str, int] = {}
        self.last: list[str] = []
        self.scheduled: dict[str, int] = {}

    def init_device(self) -> None:
        """No device."""

    def load_model(self, *, load_dummy_weights: bool = False) -> None:
        """No weights."""

    def get_kv_cache_spec(self) -> dict[str, Any]:
        """One small attention layer."""
        return {
            "model.layers.0.self_attn.attn": FullAttentionSpec(
                block_size=16, num_kv_heads=1, head_size=8, dtype=torch.float32
            )
        }

    def determine_available_memory(self) -> int:
        """Room for a few hundred blocks."""
        return 16 << 20

    def initialize_from_config(self, kv_cache_config: Any) -> None:
        """No cache to allocate."""

    def compile_or_warm_up_model(self) -> CompilationTimes:
        """Nothing to compile."""
        return CompilationTimes(language_model=0.0, encoder=0.0)

    def get_supported_tasks(self) -> tuple[str, ...]:
        """Generation only."""
        return ("generate",)

    def execute_model(self, scheduler_output: Any) -> None:
        """Remember what this step computes; the ids come from :meth:`sample_tokens`."""
        for new in scheduler_output.scheduled_new_reqs:
            self.prompt_length[new.req_id] = len(new.prompt_token_ids or ())
            self.seen[new.req_id] = 0
            self.made[new.req_id] = 0
        for finished in scheduler_output.finished_req_ids:
            for table in (self.prompt_length, self.seen, self.made):
                table.pop(finished, None)
        self.scheduled = dict(scheduler_output.num_scheduled_tokens)

    def sample_tokens(self, grammar_output: Any) -> ModelRunnerOutput:
        """The next scripted id of each request whose whole context this step computed."""
        ids = list(self.scheduled)
        sampled: list[list[int]] = []
        for req_id in ids:
            self.seen[req_id] += self.scheduled[req_id]
            if self.seen[req_id] >= self.prompt_length[req_id] + self.made[req_id]:
                sampled.append([self.script[self.made[req_id] % len(self.script)]])
                self.made[req_id] += 1
            else:
                sampled.append([])
        return ModelRunnerOutput(
            req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)}, sampled_token_ids=sampled
        )

    def take_draft_token_ids(self) -> None:
        """No speculation."""

    def get_model(self) -> Any:
        """No model."""
        return None

    def get_cache_block_size_bytes(self) -> int:
        """The block of :meth:`get_kv_cache_spec`."""
        return 16 * 2 * 8 * 4

    def add_lora(self, lora_request: Any) -> bool:
        """No LoRA."""
        return False

    def remove_lora(self, lora_id: int) -> bool:
        """No LoRA."""
        return False

    def pin_lora(self, lora_id: int) -> bool:
        """No LoRA."""
        return False

    def list_loras(self) -> set[int]:
        """No LoRA."""
        return set()

    def shutdown(self) -> None:
        """Nothing to release."""
