"""``vllm serve`` as a user runs it (vLLM's own command, in a process group of its own), over
Qwen3's tokenizer and the scripted model of ``fake_model.py``, on a machine without a GPU: every
process of it is vLLM's own code, the model's worker but."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import helpers

HERE = Path(__file__).resolve().parent
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
    "vocab_size": 151936,
}
"""A one-layer model's ``config.json`` (no weights: the scripted worker loads none)."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def vllm_serve(script: Sequence[int], *options: str, **variables: str) -> Iterator[tuple[int, Path]]:
    """``vllm serve`` started with ``options`` and the environment ``variables``, its model
    answering ``script``: its port once it is healthy, and its log; stopped with every process it
    started at the end. The folder holds Qwen3's files as vLLM's Rust frontend reads them too
    (``tokenizer.json``); the model is served as ``qwen3``."""
    folder = Path(tempfile.mkdtemp(prefix="puredetok-vllm-serve-"))
    for file in helpers._folder("qwen3").iterdir():
        if file.is_file():
            shutil.copyfile(file, folder / file.name)
    helpers.tokenizer("qwen3").backend_tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "config.json").write_text(json.dumps(CONFIG))
    log = folder / "serve.log"
    port = _free_port()
    environment = {k: v for k, v in os.environ.items() if k not in ("VLLM_PLUGINS", "PUREDETOK_VLLM")}
    environment.update(
        VLLM_TARGET_DEVICE="cpu",
        VLLM_ENABLE_V1_MULTIPROCESSING="0",  # keeps the "uni" executor, in the engine core's process
        PUREDETOK_SCRIPT=json.dumps(list(script)),
        PYTHONPATH=os.pathsep.join([str(HERE), *sys.path]),
        **variables,
    )
    command = [
        str(Path(sys.executable).with_name("vllm")),
        "serve",
        str(folder),
        "--port",
        str(port),
        "--distributed-executor-backend",
        "uni",
        "--worker-cls",
        "fake_model.ScriptedWorker",
        "--max-model-len",
        "512",
        "--served-model-name",
        "qwen3",
        *options,
    ]
    with log.open("w") as output:
        process = subprocess.Popen(
            command, env=environment, stdout=output, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        deadline = time.monotonic() + 1200
        while True:
            assert process.poll() is None, log.read_text(errors="replace")[-5000:]
            assert time.monotonic() < deadline, log.read_text(errors="replace")[-5000:]
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as answer:
                    if answer.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(2)
        yield port, log
    finally:
        os.killpg(process.pid, signal.SIGINT)  # the group of the server started here
        try:
            process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        shutil.rmtree(folder, ignore_errors=True)


def post(port: int, path: str, body: dict[str, Any]) -> Any:
    """The JSON answer to ``body`` (a new connection each time)."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Connection": "close"},
    )
    with urllib.request.urlopen(request, timeout=120) as answer:
        return json.loads(answer.read())


def post_raw(port: int, path: str, body: dict[str, Any]) -> bytes:
    """The answer's body as the server sent it (a stream's server-sent events)."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Connection": "close"},
    )
    with urllib.request.urlopen(request, timeout=120) as answer:
        return bytes(answer.read())


def served_model(port: int) -> str:
    """The name the server serves its model under."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=30) as answer:
        return str(json.loads(answer.read())["data"][0]["id"])
