"""User code of the serving side, as another project writes it: the manager, both clients (sync
and asyncio), aborts with a list, the loaded tokenizer.

The suite type-checks it with ``mypy --strict`` (test_typing_serving.py, beside samples that must
be refused) and runs :func:`detokenize_and_abort`; the client functions need a worker, so they are
type-checked only (test_client.py runs the same calls against real workers).
"""

from __future__ import annotations

import asyncio
from typing import assert_type

from puredetok.client import AsyncBackendClient, AsyncFrontendClient, BackendClient, FrontendClient
from puredetok.serving._detokenize_manager import DetokenizeManager
from puredetok.serving._loading import LoadedTokenizer, load_tokenizer
from puredetok.serving._messages import DetokenizeMsg, Opening, SamplingParams, TokenizeMsg, UserReply
from puredetok.serving._tokenize_manager import TokenizeManager


def detokenize_and_abort() -> list[str]:
    """The manager: open two requests, stream one to its end, abort the other with a list."""
    tokenizer = load_tokenizer()
    assert_type(tokenizer, LoadedTokenizer)
    ids = tokenizer.encode("Hello, world", add_special_tokens=False)
    manager = DetokenizeManager(tokenizer)
    params = SamplingParams(max_tokens=16, stop=["\n"], skip_special_tokens=True)  # lists are taken
    replies = manager.handle(
        [
            DetokenizeMsg("a", ids, True, Opening([], params)),
            DetokenizeMsg("b", (9,), False, Opening()),
        ]
    )
    aborted: list[UserReply] = manager.abort(["b"])
    manager.abort(("nobody",))
    manager.abort({"nobody", "else"})
    manager.abort(uid for uid in ["x"])
    manager.abort(range(2))
    manager.abort({"late": 1}.keys())
    [chat] = TokenizeManager(tokenizer).tokenize(
        [TokenizeMsg("c", messages=({"role": "user", "content": "Hi"},))]
    )
    assert chat.input_ids is not None and chat.error is None
    return [reply.incremental_output for reply in replies + aborted]


def sync_clients(workers: list[str], frontend: str, backend: str) -> str:
    """The API server's and the scheduler's sides, sync; uids in a list."""
    with FrontendClient(workers, frontend, timeout=5.0) as api, BackendClient(workers, backend) as scheduler:
        request = api.tokenize(
            "r1", messages=[{"role": "user", "content": "Hi"}], params=SamplingParams(max_tokens=4)
        )
        for message in scheduler.receive(timeout=5.0):
            scheduler.send([DetokenizeMsg(message.uid, (5, 6), True)])
        api.abort("r2")
        return request.text()


async def async_clients(workers: list[str], frontend: str, backend: str) -> str:
    """The same, asyncio."""
    async with (
        AsyncFrontendClient(workers, frontend) as api,
        AsyncBackendClient(workers, backend) as scheduler,
    ):
        request = api.tokenize(1, "Hello", params=SamplingParams(stop=("x",)))
        for message in await scheduler.receive(timeout=5.0):
            scheduler.send([DetokenizeMsg(message.uid, (5,), True)])
        api.abort(1)
        text = await request.text()
        await asyncio.sleep(0)
        return text
