"""What SGLang's own ``/generate`` endpoint writes, with no model: a stand-in scheduler sends the
detokenizer process (``sglang_helpers``) each iteration's ``BatchTokenIDOutput`` (new ids in
``output_ids``, the counts in ``prompt_tokens`` / ``completion_tokens``, logprobs if asked); each
``BatchStrOutput`` it answers goes through SGLang's own ``TokenizerManager._handle_batch_output``
(the ``out`` dict: ``text``, ``output_ids``, ``meta_info``, ``prompt_token_ids``) and its
``_wait_one_response`` (what a client is sent: the last of the queued dicts, coalesced deltas,
the deferred text); ``http_server``'s ``stream_results`` framing and ``dumps_json`` make the
bytes (``data: {...}`` events and ``data: [DONE]``, or the JSON body).

The ``TokenizerManager`` is made without its constructor (which starts the scheduler and loads
a model): the attributes those two methods read are set as a server with default options sets
them (``incremental_streaming_output`` as its flag). Not covered: the constructor, request
tokenization (the prompt is given as ids), batch requests (a list of prompts), ``n`` > 1, and
the HTTP layer itself (its framing is copied from ``stream_results``: three lines).
"""

from __future__ import annotations

import asyncio
from array import array
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from sglang.srt.managers.io_struct import GenerateReqInput
from sglang.srt.managers.tokenizer_manager import ReqState, TokenizerManager
from sglang.srt.observability.req_time_stats import APIServerReqTimeStats
from sglang.srt.runtime_context import publish
from sglang.srt.utils.json_response import dumps_json

from sglang_process import DetokenizerProcess, Request, iterations, token_batch


@dataclass
class Served:
    """One request's response as sent (the JSON body, or its events), and the text its client
    joined from the detokenizer's replies."""

    request: Request
    lines: list[str] = field(default_factory=list)
    text: str = ""


class _Logger:
    """The request logger of a server that logs nothing."""

    def log_finished_request(self, *args: Any, **kwargs: Any) -> None:
        """Nothing to log."""


def manager(incremental: bool) -> TokenizerManager:
    """A ``TokenizerManager`` holding what ``_handle_batch_output`` and ``_wait_one_response``
    read (defaults of ``ServerArgs``; ``--incremental-streaming-output`` if ``incremental``)."""
    tm = TokenizerManager.__new__(TokenizerManager)
    tm.rid_to_state = {}
    tm.enable_metrics = False
    tm.skip_tokenizer_init = False
    tm.incremental_streaming_output = incremental
    tm.enable_lora = False
    tm.dump_requests_folder = ""
    tm.crash_dump_folder = None
    tm.request_logger = _Logger()
    tm.request_metrics_exporter_manager = SimpleNamespace(exporter_enabled=lambda: False)
    return tm


def _batch(rows: Sequence[Any], requests: dict[str, Request], sent: dict[str, int], logprobs: bool) -> Any:
    """The scheduler's ``BatchTokenIDOutput``: the rows' ids to decode, and what a scheduler
    also sends (the new ids, counts, the new ids' logprobs)."""
    batch = token_batch(rows)
    new, counts = [], []
    for row in rows:
        request = requests[row.rid]
        first = row.rid not in sent
        start = sent.get(row.rid, 0)
        count = len(row.decode_ids) - row.read_offset if first else start + len(row.decode_ids)
        new.append(array("q", request.output[start:count]))
        sent[row.rid] = count
        counts.append(count)
    extra: dict[str, Any] = {
        "output_ids": new,
        "completion_tokens": counts,
        "prompt_tokens": [len(requests[row.rid].prompt) for row in rows],
        "retraction_counts": [0] * len(rows),
    }
    if logprobs:
        extra["output_token_logprobs_val"] = [[-0.5] * len(ids) for ids in new]
        extra["output_token_logprobs_idx"] = [list(ids) for ids in new]
    for name, value in extra.items():
        setattr(batch, name, value)
    return batch


async def _serve(
    process: DetokenizerProcess, tm: TokenizerManager, requests: Sequence[Request],
    bodies: dict[str, dict[str, Any]], lag: int,
) -> dict[str, Served]:  # fmt: skip
    served = {request.rid: Served(request) for request in requests}
    by_rid = {request.rid: request for request in requests}
    clients = []
    for request in requests:
        obj = GenerateReqInput(input_ids=list(request.prompt), rid=request.rid, **bodies[request.rid])
        obj.normalize_batch_and_arguments()  # as generate_request does first
        state = ReqState([], False, asyncio.Event(), obj, APIServerReqTimeStats())
        if obj.return_prompt_token_ids:
            state.prompt_token_ids = list(request.prompt)
        tm.rid_to_state[request.rid] = state
        # the waiter takes the state before the request is dispatched, as generate_request does
        waiter = tm._wait_one_response(obj, None)
        clients.append(asyncio.create_task(_client(waiter, obj, served[request.rid])))
    sent: dict[str, int] = {}
    logprobs = any(body.get("return_logprob") for body in bodies.values())
    for step, rows in enumerate(iterations(requests)):
        if not rows:
            continue
        process.wait_ready()
        process.send(_batch(rows, by_rid, sent, logprobs))
        reply = process.receive()
        for rid, text in zip(reply.rids, reply.output_strs):
            served[rid].text += text
        await tm._handle_batch_output(reply)
        if step % lag == 0:  # else the clients fall behind: queued dicts pile up
            for _ in range(3):
                await asyncio.sleep(0)
    await asyncio.gather(*clients)
    return served


async def _client(outputs: AsyncIterator[dict[str, Any]], obj: GenerateReqInput, served: Served) -> None:
    """``http_server.serve_generate_request``: the events of a stream, or the JSON body."""
    if obj.stream:
        async for out in outputs:
            served.lines.append("data: " + dumps_json(out).decode() + "\n\n")
        served.lines.append("data: [DONE]\n\n")
    else:
        served.lines.append(dumps_json(await outputs.__anext__()).decode() + "\n")


def serve(
    process: DetokenizerProcess, requests: Sequence[Request], bodies: dict[str, dict[str, Any]],
    incremental: bool = False, lag: int = 1,
) -> dict[str, Served]:  # fmt: skip
    """The requests through the detokenizer process and SGLang's ``TokenizerManager``, their
    ``/generate`` bodies (``stream``, ``return_prompt_token_ids``, ``return_logprob``, ...) by
    rid; the clients read what is queued for them every ``lag`` iterations."""
    publish(process.server_args, role="tokenizer")  # the config a server's tokenizer manager reads
    return asyncio.run(_serve(process, manager(incremental), requests, bodies, lag))
