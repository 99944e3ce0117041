"""Helpers of the mini-sglang engine tests: model folders of the shared tokenizers, the tokenizer
process (mini-sglang's own ``tokenize_worker`` or puredetok's) in a process of its own on real
ZeroMQ sockets, driven with mini-sglang's own message classes as its API server and scheduler
drive it, and seeded random requests.
"""

from __future__ import annotations

import gzip
import itertools
import json
import multiprocessing
import random
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from minisgl.message import (
    BaseBackendMsg,
    BaseFrontendMsg,
    BaseTokenizerMsg,
    BatchBackendMsg,
    BatchFrontendMsg,
    BatchTokenizerMsg,
    DetokenizeMsg,
)
from minisgl.utils import ZmqPullQueue, ZmqPushQueue, load_tokenizer

from puredetok.serving._loading import default_tokenizer_path
from puredetok.testing.strategies import Vocabulary

TOKENIZERS = Path(__file__).resolve().parents[2] / "tests" / "data" / "tokenizers"
"""The real tokenizers of the main test suite."""

ALL = (
    "qwen3",
    "qwen2_5",
    "llama3",
    "gpt2",
    "phi2",
    "llama2",
    "mistral_v03",
    "phi3_mini",
    "t5_small",
    "distilbert_base_uncased",
)
"""Every shared tokenizer."""

COMPARED = ("qwen3", "llama2", "mistral_v03", "t5_small")
"""The tokenizers both workers are compared on in CI (``PUREDETOK_MINISGL_TOKENIZERS=all``: :data:`ALL`)."""

_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "num_hidden_layers": 1,
    "max_position_embeddings": 4096,
    "vocab_size": 200_000,
    "torch_dtype": "bfloat16",
}
"""A one-layer model's ``config.json`` (mini-sglang's server reads the model's config; no weights)."""

_SCRATCH = tempfile.TemporaryDirectory(prefix="puredetok-minisgl-")
_FOLDERS: dict[str, Path] = {}


def folder(name: str) -> Path:
    """The model folder of tokenizer ``name``: its files (``*.gz`` decompressed) and a config.json."""
    if name not in _FOLDERS:
        source = default_tokenizer_path() if name == "qwen3" else TOKENIZERS / name
        target = Path(_SCRATCH.name) / name
        target.mkdir()
        if name == "qwen2_5":  # its vocab.json and merges.txt are Qwen3's (tests/data/tokenizers/MANIFEST.md)
            for shared in ("vocab.json", "merges.txt"):
                shutil.copyfile(default_tokenizer_path() / shared, target / shared)
        for file in source.iterdir():
            if file.suffix == ".gz":
                (target / file.stem).write_bytes(gzip.decompress(file.read_bytes()))
            elif file.is_file():
                shutil.copyfile(file, target / file.name)
        (target / "config.json").write_text(json.dumps(_CONFIG))
        _FOLDERS[name] = target
    return _FOLDERS[name]


_TOKENIZERS: dict[str, Any] = {}


def tokenizer(name: str) -> Any:
    """The tokenizer mini-sglang loads from that folder (its own ``load_tokenizer``)."""
    if name not in _TOKENIZERS:
        _TOKENIZERS[name] = load_tokenizer(str(folder(name)))
    return _TOKENIZERS[name]


def offline_text(name: str, ids: Sequence[int]) -> str:
    """What mini-sglang's offline ``LLM.generate`` returns for a request that generated ``ids``:
    ``tokenizer.decode`` of them, a finishing EOS left out.
    """
    tok = tokenizer(name)
    if ids and ids[-1] == tok.eos_token_id:
        ids = ids[:-1]
    return str(tok.decode(list(ids)))


WORKERS = {
    "minisgl": "minisgl.tokenizer.server",
    "puredetok": "puredetok.engines.minisgl",
}
"""The two tokenizer processes: the module each one's ``tokenize_worker`` is in."""

_UIDS = itertools.count(1)


def new_uid() -> int:
    """A request id no other request of the session has (as mini-sglang's API server counts them)."""
    return next(_UIDS)


def _target(kind: str, **kwargs: Any) -> None:
    import importlib

    importlib.import_module(WORKERS[kind]).tokenize_worker(**kwargs)


class Worker:
    """A tokenizer process (``kind``: a key of :data:`WORKERS`) over tokenizer ``name``, on ZeroMQ
    sockets in a folder of its own: this side sends as mini-sglang's API server and scheduler do
    (mini-sglang's own classes and queues) and receives what the worker sends both of them.
    """

    def __init__(self, kind: str, name: str) -> None:
        self.kind, self.name = kind, name
        self._folder = tempfile.mkdtemp(prefix=f"puredetok-minisgl-{kind}-")
        address = f"ipc://{self._folder}/"
        self.addr = address + "tokenizer"
        self.frontend: Any = ZmqPullQueue(address + "frontend", create=True, decoder=BaseFrontendMsg.decoder)
        self.backend: Any = ZmqPullQueue(address + "backend", create=True, decoder=BaseBackendMsg.decoder)
        self.sender: Any = ZmqPushQueue(self.addr, create=False, encoder=BaseTokenizerMsg.encoder)
        context = multiprocessing.get_context("spawn")
        self.acks: Any = context.Queue()
        self.process = context.Process(
            target=_target,
            args=(kind,),
            kwargs={
                "tokenizer_path": str(folder(name)),
                "addr": self.addr,
                "create": True,
                "backend_addr": address + "backend",
                "frontend_addr": address + "frontend",
                "local_bs": 1,
                "tokenizer_id": 0,
                "ack_queue": self.acks,
            },
            daemon=True,
        )
        self.process.start()
        self.ack: str | None = None

    def ready(self, timeout: float = 180) -> str:
        """The worker's ready message (waits for it)."""
        if self.ack is None:
            self.ack = str(self.acks.get(timeout=timeout))
        return self.ack

    def send(self, messages: Sequence[Any]) -> None:
        """One frame: a message alone, or a ``BatchTokenizerMsg`` of several (as mini-sglang sends)."""
        self.sender.put(messages[0] if len(messages) == 1 else BatchTokenizerMsg(data=list(messages)))

    def send_raw(self, frame: bytes) -> None:
        """A frame of these bytes."""
        self.sender.socket.send(frame)

    def replies(self, timeout: float = 0.5, expect: int | None = None) -> list[Any]:
        """The ``UserReply`` records received until none has come for ``timeout`` seconds (or, with
        ``expect``, until that many have come: for up to 30 seconds).
        """
        return _drain(self.frontend, BatchFrontendMsg, timeout, expect)

    def to_backend(self, timeout: float = 0.5, expect: int | None = None) -> list[Any]:
        """The records sent to the scheduler, as :meth:`replies`."""
        return _drain(self.backend, BatchBackendMsg, timeout, expect)

    def alive(self) -> bool:
        """Whether the process still runs."""
        return self.process.is_alive()

    def close(self) -> None:
        """Stop the process and close the sockets."""
        if self.process.is_alive():
            self.process.terminate()
        self.process.join(10)
        for queue in (self.frontend, self.backend, self.sender):
            queue.socket.close(linger=0)
        shutil.rmtree(self._folder, ignore_errors=True)


def _drain(queue: Any, batch: type, timeout: float, expect: int | None) -> list[Any]:
    found: list[Any] = []
    wait = timeout if expect is None else 30
    while (expect is None or len(found) < expect) and queue.socket.poll(int(wait * 1000)):
        message = queue.get()
        found.extend(message.data if isinstance(message, batch) else [message])
    return found


@dataclass
class Request:
    """A request the scheduler streams: its uid, the ids it generates, and the frame it starts in."""

    uid: int
    ids: list[int]
    start: int = 0


def frames(requests: Sequence[Request]) -> Iterator[list[Any]]:
    """The scheduler's frames for these requests: each decode step, one ``DetokenizeMsg`` per
    running request, ``finished`` on its last id (the end on its length, or its EOS if it is the
    last id), as mini-sglang's scheduler sends them.
    """
    steps = max((request.start + len(request.ids) for request in requests), default=0)
    for step in range(steps):
        frame = []
        for request in requests:
            at = step - request.start
            if 0 <= at < len(request.ids):
                last = at == len(request.ids) - 1
                frame.append(DetokenizeMsg(uid=request.uid, next_token=request.ids[at], finished=last))
        if frame:
            yield frame


def stream(worker: Worker, requests: Sequence[Request]) -> dict[int, tuple[str, bool]]:
    """Each request's text as the API server joins it, and whether it was told the request finished
    (both workers send one reply per message).
    """
    for frame in frames(requests):
        worker.send(frame)
    texts: dict[int, tuple[str, bool]] = {request.uid: ("", False) for request in requests}
    for reply in worker.replies(expect=sum(len(request.ids) for request in requests)):
        if reply.uid in texts:
            text, finished = texts[reply.uid]
            texts[reply.uid] = (text + reply.incremental_output, finished or reply.finished)
    return texts


_SNIPPETS = (
    "Hello, world! ",
    "naïve café ",
    "推理模型 ",
    "🦩🏳️‍🌈👍🏽 ",
    "Ελληνικά ",
    "日本語のテキスト ",
    "don't ",
    " spaces  and\ttabs\n",
    "ünïcödé ",
    "한국어 ",
    "\n\n",
    "1234 ",
)


def random_requests(name: str, count: int, seed: int) -> list[Request]:
    """``count`` requests over tokenizer ``name`` (seeded): text cut anywhere (in a character too),
    split characters and byte runs spelled with byte tokens, ids where detokenizers go wrong, ids
    from the whole vocabulary; a third end on the tokenizer's EOS, the rest on their length.
    """
    rng = random.Random(f"{name}-{seed}")
    v = vocabulary(name)
    eos = tokenizer(name).eos_token_id
    requests = []
    for _ in range(count):
        kind = rng.randrange(4)
        if kind == 0:
            text = "".join(rng.choices(_SNIPPETS, k=rng.randint(1, 6)))
            ids = v.encode(text)
            ids = ids[: rng.randint(1, max(1, len(ids)))]
        elif kind == 1 and v.pieces:
            ids = []
            for _ in range(rng.randint(1, 4)):
                data = rng.choice(_SNIPPETS).encode()
                ids += v.encode(rng.choice(_SNIPPETS))
                ids += [v.pieces[bytes([byte])] for byte in data[: rng.randint(1, len(data))]]
        elif kind == 2:
            ids = rng.choices(v.edge_ids, k=rng.randint(1, 12))
            ids += v.encode(rng.choice(_SNIPPETS))[: rng.randint(0, 3)]
        else:
            ids = [rng.randrange(v.size) for _ in range(rng.randint(1, 12))]
        if eos is not None and rng.randrange(3) == 0:
            ids.append(eos)
        elif ids and ids[-1] == eos:
            ids.append(v.encode("ok")[0])
        requests.append(Request(new_uid(), ids or [v.encode("a")[0]], rng.randrange(8)))
    return requests


_VOCABULARIES: dict[str, Vocabulary] = {}


def vocabulary(name: str) -> Vocabulary:
    """The conformance kit's view of the tokenizer's ids (read once)."""
    if name not in _VOCABULARIES:
        _VOCABULARIES[name] = Vocabulary.of(tokenizer(name))
    return _VOCABULARIES[name]
