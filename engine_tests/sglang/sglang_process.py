"""SGLang's own detokenizer process, run and fed the way SGLang's scheduler feeds it.

For the engine tests and the benchmark (in an environment with SGLang installed):
:func:`model_folder` makes the folder ``ServerArgs(model_path=...)`` needs (tokenizer files and a
small ``config.json``), :class:`DetokenizerProcess` starts ``run_detokenizer_process`` in a
process of its own (which loads SGLang's plugins, so puredetok's entry point too) and talks to it
over its ZeroMQ sockets with SGLang's own message encoding, and :func:`iterations` turns
requests into the ``BatchTokenIDOutput`` frames of successive decode iterations as SGLang's
scheduler builds them (``SchedulerOutputStreamer``): the first frame of a request carries its
prompt's last ids and ``read_offsets``, later ones the new ids only; a request with stop strings
is held back while its tail could begin one; a non-streaming request is sent once, finished.
"""

from __future__ import annotations

__all__ = [
    "PROMPT_WINDOW",
    "DetokenizerProcess",
    "Request",
    "Row",
    "iterations",
    "model_folder",
    "token_batch",
]

import contextlib
import gzip
import inspect
import json
import multiprocessing
import os
import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROMPT_WINDOW = 5
"""How many of the prompt's last ids SGLang's scheduler sends first (its
``INIT_INCREMENTAL_DETOKENIZATION_OFFSET``)."""

_CONFIG = {
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


def model_folder(tokenizer_files: Path, target: Path, vocab_size: int) -> Path:
    """``target`` made a model folder: the tokenizer files of ``tokenizer_files`` (``*.gz``
    decompressed) and a one-layer Llama ``config.json`` with ``vocab_size`` (no weights: nothing
    here loads a model).
    """
    target.mkdir(parents=True, exist_ok=True)
    for file in tokenizer_files.iterdir():
        if file.suffix == ".gz":
            (target / file.stem).write_bytes(gzip.decompress(file.read_bytes()))
        elif file.is_file():
            shutil.copyfile(file, target / file.name)
    (target / "config.json").write_text(json.dumps({**_CONFIG, "vocab_size": vocab_size}))
    return target


@dataclass(frozen=True)
class Row:
    """One request's entry in a ``BatchTokenIDOutput``."""

    rid: str
    decode_ids: Sequence[int]
    read_offset: int = 0
    finished_reason: Mapping[str, Any] | None = None
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    no_stop_trim: bool = False
    decoded_text: str = ""
    http_worker_ipc: str | None = None
    """The tokenizer worker the reply goes to (multi-tokenizer-worker mode; None: the one)."""


def token_batch(rows: Sequence[Row]) -> Any:
    """SGLang's ``BatchTokenIDOutput`` of these rows (the fields the detokenizer does not read are
    filled as the scheduler fills them for a request that asked for no logprobs; each SGLang
    version gets its own fields: 0.5.20 has ``output_token_sampling_logprobs``, 0.5.23 not).
    """
    from array import array

    from sglang.srt.managers.io_struct import BatchTokenIDOutput

    n = len(rows)
    empty: list[list[Any]] = [[] for _ in rows]
    values: dict[str, Any] = dict(
        rids=[row.rid for row in rows],
        http_worker_ipcs=[row.http_worker_ipc for row in rows],
        finished_reasons=[
            dict(row.finished_reason) if row.finished_reason is not None else None for row in rows
        ],
        decoded_texts=[row.decoded_text for row in rows],
        decode_ids=[array("q", row.decode_ids) for row in rows],
        read_offsets=[row.read_offset for row in rows],
        output_ids=[array("q") for _ in rows],
        skip_special_tokens=[row.skip_special_tokens for row in rows],
        spaces_between_special_tokens=[row.spaces_between_special_tokens for row in rows],
        no_stop_trim=[row.no_stop_trim for row in rows],
        prompt_tokens=[0] * n,
        reasoning_tokens=[0] * n,
        completion_tokens=[len(row.decode_ids) for row in rows],
        cached_tokens=[0] * n,
        input_token_logprobs_val=empty,
        input_token_logprobs_idx=empty,
        output_token_logprobs_val=empty,
        output_token_logprobs_idx=empty,
        input_top_logprobs_val=empty,
        input_top_logprobs_idx=empty,
        output_top_logprobs_val=empty,
        output_top_logprobs_idx=empty,
        input_token_ids_logprobs_val=empty,
        input_token_ids_logprobs_idx=empty,
        output_token_ids_logprobs_val=empty,
        output_token_ids_logprobs_idx=empty,
        output_token_entropy_val=None,
        output_token_sampling_mask=None,
        output_token_sampling_logprobs=None,
        output_hidden_states=None,
        routed_experts=None,
        indexer_topk=None,
        placeholder_tokens_idx=None,
        placeholder_tokens_val=None,
    )
    return BatchTokenIDOutput(
        **{name: values[name] for name in BatchTokenIDOutput.__struct_fields__ if name in values}
    )


@dataclass
class Request:
    """A request as the scheduler sees it: its prompt, the ids it generates (through its stop
    token or the end of its stop string), how it ends, and how it streams.
    """

    rid: str
    prompt: Sequence[int]
    output: Sequence[int]
    finished_reason: Mapping[str, Any] | None = None
    """How it ends (None: ``{"type": "length"}``)."""
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    no_stop_trim: bool = False
    stop: tuple[str, ...] = ()
    """Its stop strings: the stream is held back while the text's tail could begin one."""
    per_step: int = 1
    """Ids generated per iteration (more than one: speculative decoding, a stream interval)."""
    stream: bool = True
    """False: sent once, when it finishes."""
    start_at: int = 0
    """The iteration it starts in."""


def _held(request: Request, generated: int, decode: Callable[[Sequence[int]], str]) -> bool:
    """SGLang's ``check_match_stop_str_prefix``: the tail's text contains a stop string or ends
    with the start of one.
    """
    if not request.stop:
        return False
    longest = max(len(stop) for stop in request.stop) + 1
    tail = decode(list(request.output[max(0, generated - longest) : generated]))
    if not tail:
        return False
    for stop in request.stop:
        if stop and (stop in tail or any(tail.endswith(stop[:k]) for k in range(1, len(stop) + 1))):
            return True
    return False


def iterations(
    requests: Sequence[Request], decode: Callable[[Sequence[int]], str] | None = None
) -> Iterator[list[Row]]:
    """The rows of each decode iteration, as SGLang's scheduler sends them (an iteration with no
    request to send is an idle batch, an empty list). ``decode`` (the tokenizer's, for the
    stop-string hold-back) is needed only if a request has stop strings.
    """
    generated = {request.rid: 0 for request in requests}
    sent = {request.rid: -1 for request in requests}  # -1: nothing sent yet
    done: set[str] = set()
    iteration = 0
    while len(done) < len(requests):
        rows: list[Row] = []
        for request in requests:
            rid = request.rid
            if rid in done or iteration < request.start_at:
                continue
            count = generated[rid] = min(len(request.output), generated[rid] + max(1, request.per_step))
            finished = count >= len(request.output)
            if not finished and (
                not request.stream or (decode is not None and _held(request, count, decode))
            ):
                continue
            if sent[rid] < 0:
                window = list(request.prompt[-PROMPT_WINDOW:]) if PROMPT_WINDOW else []
                ids = window + list(request.output[:count])
                offset = len(window)
            else:
                ids, offset = list(request.output[sent[rid] : count]), len(request.prompt[-PROMPT_WINDOW:])
            sent[rid] = count
            reason = None
            if finished:
                reason = (
                    request.finished_reason if request.finished_reason is not None else {"type": "length"}
                )
                done.add(rid)
            rows.append(
                Row(
                    rid,
                    ids,
                    offset,
                    reason,
                    request.skip_special_tokens,
                    request.spaces_between_special_tokens,
                    request.no_stop_trim,
                )
            )
        iteration += 1
        yield rows


class DetokenizerProcess:
    """``run_detokenizer_process`` of SGLang in a process of its own, over its ZeroMQ sockets.

    ``environment`` is set while the process starts (it inherits it: ``SGLANG_PLUGINS``,
    ``PUREDETOK_SGLANG``). With ``detokenizer_worker_num=N`` > 1 among the server arguments, N
    such processes on private sockets and SGLang's ``MultiDetokenizerRouter`` in front of them, as
    SGLang's engine launches them: the router sends each request to one detokenizer (by its
    ``rid``, or its tokenizer worker), and each replies with its part of the batch. A context
    manager; :meth:`close` ends the processes.
    """

    def __init__(self, model_path: Path, environment: Mapping[str, str] | None = None, **server: Any) -> None:
        import dataclasses
        import tempfile

        import zmq
        from sglang.srt.managers.detokenizer_manager import run_detokenizer_process
        from sglang.srt.managers.multi_tokenizer_mixin import run_multi_detokenizer_router_process
        from sglang.srt.server_args import PortArgs, ServerArgs

        self.server_args = ServerArgs(model_path=str(model_path), device="cpu", **server)
        self.port_args = PortArgs.init_new(self.server_args)
        detokenizers = int(server.get("detokenizer_worker_num", 1))
        self.detokenizers = max(1, detokenizers)
        """How many detokenizer processes answer (each its part of a batch; all an idle one)."""
        self.context = zmq.Context()
        self.to_detokenizer = self.context.socket(zmq.PUSH)
        self.to_detokenizer.setsockopt(zmq.SNDHWM, 0)
        self.to_detokenizer.connect(self.port_args.detokenizer_ipc_name)
        self.from_detokenizer = self.context.socket(zmq.PULL)
        self.from_detokenizer.setsockopt(zmq.RCVHWM, 0)
        self.from_detokenizer.bind(self.port_args.tokenizer_ipc_name)
        self._workers: list[Any] = []
        self._ready = False
        spawn = multiprocessing.get_context("spawn")
        self.processes: list[Any] = []
        """Every process started: the detokenizer(s), then the router if there are several."""
        with _environment(environment or {}):
            if detokenizers <= 1:
                own = [self.port_args]
            else:  # as SGLang's engine launches them: a private socket each, its router in front
                own = [
                    dataclasses.replace(
                        self.port_args,
                        detokenizer_ipc_name=f"ipc://{tempfile.mkdtemp(prefix='puredetok-detok-')}/socket",
                    )
                    for _ in range(detokenizers)
                ]
            for port_args in own:
                self.processes.append(
                    spawn.Process(
                        target=run_detokenizer_process, args=(self.server_args, port_args), daemon=True
                    )
                )
            if detokenizers > 1:
                names = [port_args.detokenizer_ipc_name for port_args in own]
                router = inspect.signature(run_multi_detokenizer_router_process).parameters
                self.processes.append(
                    spawn.Process(
                        target=run_multi_detokenizer_router_process,
                        args=(names, self.server_args, self.port_args),
                        # SGLang 0.5.23 takes whether to collect metrics, 0.5.22 and older not
                        kwargs={"enable_metrics": False} if "enable_metrics" in router else {},
                        daemon=True,
                    )
                )
            for process in self.processes:
                process.start()
        self.process = self.processes[0]

    def send(self, batch: Any) -> None:
        """Send one message (a ``BatchTokenIDOutput``) as the scheduler does."""
        from sglang.srt.managers.io_struct import sock_send

        sock_send(self.to_detokenizer, batch)

    def send_bytes(self, frame: bytes) -> None:
        """Send a message already encoded (:meth:`encode`)."""
        self.to_detokenizer.send(frame, copy=False)

    @staticmethod
    def encode(batch: Any) -> bytes:
        """A message as SGLang's ``sock_send`` puts it on the wire (msgpack; pickle if SGLang is
        set to it).
        """
        import pickle

        from sglang.srt.managers import io_struct

        if getattr(io_struct, "_USE_PICKLE_IPC", False):
            return pickle.dumps(batch, protocol=pickle.HIGHEST_PROTOCOL)
        return bytes(io_struct.msgpack_encode(batch))

    def receive(self, timeout: float = 120.0, socket: Any = None) -> Any:
        """The next ``BatchStrOutput`` (from ``socket``, a tokenizer worker's: :meth:`worker`),
        TimeoutError after ``timeout`` seconds or if the process has died.
        """
        from sglang.srt.managers.io_struct import sock_recv

        socket = self.from_detokenizer if socket is None else socket
        waited = 0.0
        while not socket.poll(500):
            waited += 0.5
            for process in self.processes:
                if not process.is_alive():
                    raise TimeoutError(f"a detokenizer process ended (exit code {process.exitcode})")
            if waited >= timeout:
                raise TimeoutError(f"no reply from the detokenizer process in {timeout} s")
        return sock_recv(socket)

    def worker(self) -> tuple[str, Any]:
        """A tokenizer worker's socket, for multi-tokenizer-worker mode: ``(ipc name, socket)``;
        rows naming it in ``http_worker_ipc`` get their replies there.
        """
        import tempfile

        import zmq

        name = f"ipc://{tempfile.mkdtemp(prefix='puredetok-worker-')}/socket"
        socket = self.context.socket(zmq.PULL)
        socket.setsockopt(zmq.RCVHWM, 0)
        socket.bind(name)
        self._workers.append(socket)
        return name, socket

    def wait_ready(self, timeout: float = 900.0) -> None:
        """Wait until the process answers (an idle batch): it imports SGLang and loads the
        tokenizer first, which takes seconds, or minutes on a loaded machine.
        """
        if not self._ready:
            self.send(token_batch([]))
            for _ in range(self.detokenizers):  # the router sends an idle batch to each
                self.receive(timeout)
            self._ready = True

    def exchange(self, rows: Sequence[Row]) -> list[str]:
        """Send one iteration's rows and return the output strings of the reply. After a
        timeout the process is ended (a late reply would answer the next message).
        """
        self.wait_ready()
        self.send(token_batch(rows))
        try:
            reply = self.receive()
        except TimeoutError:
            self.close()
            raise
        if list(reply.rids) != [row.rid for row in rows]:
            raise AssertionError(f"reply for {reply.rids}, sent {[row.rid for row in rows]}")
        return list(reply.output_strs)

    def run(
        self, requests: Sequence[Request], decode: Callable[[Sequence[int]], str] | None = None
    ) -> dict[str, str]:
        """Stream ``requests`` through the process; each request's text as its client joins it."""
        texts = {request.rid: "" for request in requests}
        for rows in iterations(requests, decode):
            if not rows:
                continue  # an idle batch: SGLang's detokenizer replies with an empty one
            for row, text in zip(rows, self.exchange(rows)):
                texts[row.rid] += text
        return texts

    def close(self) -> None:
        """End the process and the sockets (again: nothing)."""
        if self.to_detokenizer.closed:
            return
        for process in self.processes:
            if process.is_alive():
                process.terminate()
                process.join(10)
                if process.is_alive():
                    process.kill()
                    process.join(10)
        self.to_detokenizer.close(linger=0)
        self.from_detokenizer.close(linger=0)
        for socket in self._workers:
            socket.close(linger=0)
        self.context.term()

    def __enter__(self) -> DetokenizerProcess:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


@contextlib.contextmanager
def _environment(values: Mapping[str, str]) -> Iterator[None]:
    """``os.environ`` with ``values`` set (an empty value: unset) for the ``with`` block."""
    saved = {name: os.environ.get(name) for name in values}
    try:
        for name, value in values.items():
            if value:
                os.environ[name] = value
            else:
                os.environ.pop(name, None)
        yield
    finally:
        for name, old in saved.items():
            if old is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = old
