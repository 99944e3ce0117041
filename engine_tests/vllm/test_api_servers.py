"""``vllm serve --api-server-count 2``, run as a user runs it (``serve.py``): vLLM starts two
API-server processes, each of which loads vLLM's plugins and so decodes with puredetok, in its
``OutputProcessor`` and in its derender endpoints. The model is the one thing that is not vLLM's:
a worker that "samples" scripted ids (``fake_model.py``), so that vLLM's engine core, scheduler
and KV cache manager run on a machine without a GPU."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import helpers
from serve import post, served_model, vllm_serve

PROMPT, OUTPUT = [9707, 1879, 11162], [234, 114, 374, 47251]
"""Qwen3: ``"Hello world \\ufffd"`` (the prompt ends inside "🌶"), then the rest of it and
``" is spicy"``: vLLM's own detokenizer sends the prompt's text again."""
OURS = "🌶 is spicy"


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[int, Path]]:
    """Two API servers, requests logged (each line names its process), the derender endpoints on."""
    with vllm_serve(
        OUTPUT, "--api-server-count", "2", "--enable-log-requests", "--enable-scale-out"
    ) as running:
        yield running


def _servers_of(log: Path, request_ids: list[str]) -> dict[str, str]:
    """Which API-server process received each request (from its ``--enable-log-requests`` line)."""
    found = {}
    for line in log.read_text(errors="replace").splitlines():
        match = re.match(r"\((ApiServer_\d+) pid=\d+\).*Received request (\S+?):", line)
        if match:
            for request_id in request_ids:
                if match.group(2).startswith(request_id):
                    found[request_id] = match.group(1)
    return found


def test_each_api_server_process_decodes_with_puredetok(server: tuple[int, Path]) -> None:
    """Requests go to either API-server process (the kernel spreads the connections over the two
    listeners): each process answers with the exact text, which vLLM's own detokenizer gets
    wrong (it sends the prompt's text again), until both have answered."""
    port, log = server
    ids: list[str] = []
    served: dict[str, str] = {}
    body = {
        "model": served_model(port),
        "prompt": PROMPT,
        "max_tokens": len(OUTPUT),
        "return_token_ids": True,
    }
    for _ in range(64):
        reply = post(port, "/v1/completions", body)
        [choice] = reply["choices"]
        assert (choice["text"], choice["token_ids"]) == (OURS, OUTPUT)
        ids.append(reply["id"])
        time.sleep(0.2)  # the log line is written as the request is received
        served = _servers_of(log, ids)
        if len(set(served.values())) == 2:
            break
    assert set(served.values()) == {"ApiServer_0", "ApiServer_1"}, served


def test_the_api_servers_derender_with_puredetok(server: tuple[int, Path]) -> None:
    """The derender endpoints (``--enable-scale-out``) of the processes that answer (16 rounds,
    each call a new connection): the whole derender of the request above, which vLLM's own code
    cuts to ``" is spicy"``, and an output ending inside a character streamed one id a call (the
    client carrying the state), whose last U+FFFD vLLM's own code never sends."""
    port, _ = server
    tok = helpers.tokenizer("qwen3")
    cut = tok.encode("Hi 🌶", add_special_tokens=False)[:-1]
    response = {"request_id": "r", "choices": [{"index": 0, "token_ids": OUTPUT, "finish_reason": "length"}]}
    for _ in range(16):
        whole = {"generate_responses": [response], "prompt_token_ids": [PROMPT]}
        assert post(port, "/v1/completions/derender", whole)["choices"][0]["text"] == OURS
        state, text = None, ""
        for position, token_id in enumerate(cut):
            last = position == len(cut) - 1
            choice = {"index": 0, "token_ids": [token_id], "finish_reason": "length" if last else None}
            chunk = {"request_id": "r", "choices": [choice]}
            reply = post(
                port,
                "/v1/completions/derender",
                {"stream": True, "generate_chunk": chunk, "stream_state": state},
            )
            state = reply["stream_state"]
            text += reply["chunk"]["choices"][0]["text"]
        assert text == tok.decode(cut) == "Hi \ufffd"
