"""vLLM's own render server (``vllm launch render``: the GPU-less server of the scale-out
``/render`` and ``/derender`` endpoints), built in this process as ``run_launch_fastapi`` builds it
(vLLM's argument parser, engine arguments, configuration, ``build_app`` and
``init_render_app_state``) and driven through its HTTP routes with Starlette's test client: the
derender endpoints decode with vLLM's ``OnlineDerenderer`` (hooked by the plugin, or vLLM's own
when it is unregistered). A client carries each ``stream_state`` to its next call, as vLLM's
protocol asks.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import json
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import vllm.envs as envs
from starlette.testclient import TestClient
from vllm import AsyncEngineArgs
from vllm.config import VllmConfig
from vllm.entrypoints.common.cli_args import make_arg_parser
from vllm.entrypoints.launchers.app import build_app
from vllm.entrypoints.launchers.render.app_state import init_render_app_state
from vllm.utils.argparse_utils import FlexibleArgumentParser

import helpers
import puredetok.engines.vllm as plugin

CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "num_hidden_layers": 1,
    "max_position_embeddings": 4096,
    "torch_dtype": "float32",
}
"""A one-layer model's ``config.json`` (its ``vocab_size`` is the tokenizer's; no weights: the
render server loads none)."""

_ids = itertools.count()


@functools.cache
def model_folder(name: str) -> Path:
    """A folder with the tokenizer's files and a small ``config.json`` (kept for the session)."""
    folder = Path(tempfile.mkdtemp(prefix=f"puredetok-render-{name}-"))
    for file in helpers._folder(name).iterdir():
        if file.is_file():
            shutil.copyfile(file, folder / file.name)
    vocab_size = len(helpers.tokenizer(name))
    (folder / "config.json").write_text(json.dumps({**CONFIG, "vocab_size": vocab_size}))
    return folder


def render_client(name: str, *options: str) -> TestClient:
    """A client of vLLM's render server for this tokenizer, started with ``options`` (made once,
    with the plugin registered, as vLLM loads its plugins before it builds a server: vLLM's
    ``OnlineDerenderer`` keeps the methods it finds then in its async wrappers; the plugin's
    hooks call vLLM's own code when it is unregistered)."""
    registered = plugin.registered()
    if not registered:
        plugin.register()
    try:
        return _render_client(name, *options)
    finally:
        if not registered:
            plugin.unregister()


@functools.cache
def _render_client(name: str, *options: str) -> TestClient:
    args = make_arg_parser(FlexibleArgumentParser()).parse_args([str(model_folder(name)), *options])
    args.model = args.model_tag  # as ``vllm launch`` does
    engine_args = AsyncEngineArgs.from_cli_args(args)  # vLLM loads its plugins here
    model_config = engine_args.create_model_config()
    model_config.quantization = None  # as run_launch_fastapi does
    envs.VLLM_CPU_KVCACHE_SPACE = 0
    config = VllmConfig(
        model_config=model_config,
        logging_config=engine_args.create_logging_config(),
        structured_outputs_config=engine_args.create_structured_outputs_config(),
    )
    app = build_app(args, ("render",))
    asyncio.run(init_render_app_state(config, app.state, args))
    return TestClient(app)


@dataclass
class Streamed:
    """What a client of a streamed derender got."""

    texts: list[str]
    """Each chunk's text (a chat delta's content, with its reasoning before it)."""
    states: list[dict[str, Any]]
    """The state each call returned."""

    @property
    def text(self) -> str:
        """The whole text."""
        return "".join(self.texts)


def _chunk(
    request_id: str, ids: Sequence[int], finish: str | None, stop_reason: int | None
) -> dict[str, Any]:
    choice = {"index": 0, "token_ids": list(ids), "finish_reason": finish, "stop_reason": stop_reason}
    return {"request_id": request_id, "choices": [choice]}


def _pieces(ids: Sequence[int], chunks: Sequence[int]) -> list[list[int]]:
    """``ids`` cut in chunks of the sizes in ``chunks`` (cycled)."""
    out, position, sizes = [], 0, itertools.cycle(chunks)
    while position < len(ids):
        size = next(sizes)
        out.append(list(ids[position : position + size]))
        position += size
    return out or [[]]


def stream(
    client: TestClient,
    prompt: Sequence[int] | None,
    output: Sequence[int],
    chunks: Sequence[int] = (1,),
    *,
    chat: bool = False,
    skip_special_tokens: bool = True,
    finish: str = "length",
    stop_reason: int | None = None,
    finish_apart: bool = False,
) -> Streamed:
    """One request's output streamed through ``/v1/completions/derender`` (or the chat one),
    ``output`` cut in chunks, the last with ``finish`` as its ``finish_reason`` (with
    ``finish_apart``, a chunk of its own, without ids)."""
    request_id = f"r{next(_ids)}"
    pieces = _pieces(output, chunks) + ([[]] if finish_apart else [])
    state: dict[str, Any] | None = None
    result = Streamed([], [])
    for number, ids in enumerate(pieces):
        last = number == len(pieces) - 1
        body: dict[str, Any] = {
            "stream": True,
            "generate_chunk": _chunk(
                request_id, ids, finish if last else None, stop_reason if last else None
            ),
            "stream_state": state,
            "prompt_token_ids": None if prompt is None else list(prompt),
        }
        if chat:
            body["chat_request"] = {
                "messages": [{"role": "user", "content": "Hello"}],
                "skip_special_tokens": skip_special_tokens,
            }
        else:
            body["completion_request"] = {
                "prompt": list(prompt or [0]),
                "skip_special_tokens": skip_special_tokens,
            }
        answer = client.post(
            "/v1/chat/completions/derender" if chat else "/v1/completions/derender", json=body
        )
        assert answer.status_code == 200, answer.text
        reply = answer.json()
        state = reply["stream_state"]
        result.states.append(state)
        [choice] = reply["chunk"]["choices"]
        if chat:
            delta = choice["delta"]
            result.texts.append((delta.get("reasoning") or "") + (delta.get("content") or ""))
        else:
            result.texts.append(choice["text"])
    return result


def whole(
    client: TestClient,
    prompt: Sequence[int] | None,
    output: Sequence[int],
    *,
    chat: bool = False,
    skip_special_tokens: bool = True,
    finish: str = "length",
    stop_reason: int | None = None,
) -> str:
    """One request's whole output through the non-streamed derender (a chat message's reasoning
    and content joined)."""
    response = {
        "request_id": f"r{next(_ids)}",
        "choices": [
            {"index": 0, "token_ids": list(output), "finish_reason": finish, "stop_reason": stop_reason}
        ],
    }
    if chat:
        body: dict[str, Any] = {
            "generate_response": response,
            "prompt_token_ids": None if prompt is None else list(prompt),
            "chat_request": {
                "messages": [{"role": "user", "content": "Hello"}],
                "skip_special_tokens": skip_special_tokens,
            },
        }
    else:
        body = {
            "generate_responses": [response],
            "prompt_token_ids": [None if prompt is None else list(prompt)],
            "completion_request": {"prompt": list(prompt or [0]), "skip_special_tokens": skip_special_tokens},
        }
    answer = client.post("/v1/chat/completions/derender" if chat else "/v1/completions/derender", json=body)
    assert answer.status_code == 200, answer.text
    [choice] = answer.json()["choices"]
    if chat:
        message = choice["message"]
        return str((message.get("reasoning") or "") + (message.get("content") or ""))
    return str(choice["text"])
