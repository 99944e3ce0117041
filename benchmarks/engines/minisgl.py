"""mini-sglang's tokenizer process, its own and puredetok's, side by side in one run.

Run from the repository's root in an environment with mini-sglang (``python3 tasks.py test-engines
minisgl`` builds one)::

    python -m benchmarks.engines.minisgl [--requests 64] [--tokens 256] [--repeats 3]

For each tokenizer (Qwen3, and Llama-2 from a source checkout), both ``tokenize_worker`` functions
run in processes of their own, started as mini-sglang's ``launch_server`` starts them (the
detokenizer: ``local_bs=1``), on ZeroMQ sockets in a scratch folder. A stand-in scheduler sends
each the same frames, encoded beforehand with mini-sglang's own classes: every decode step, one
``BatchTokenizerMsg`` with a ``DetokenizeMsg`` for each of ``--requests`` requests, their outputs
cut from the ids of a long mixed-script text (valid text: mini-sglang's own handles it), ``--tokens``
steps, ``finished`` on the last. The time is from the first frame sent to the last reply frame
received (each worker sends one reply frame per frame), per generated token: the worker's own
message decoding and encoding included, and the CPU time the worker process used (not lengthened
by other work on the machine); then the CPU time of each part of a worker's turn, in this process
(:func:`parts`). Rounds alternate between the two workers, best of each;
repeats give the ranges (min - max). Afterwards, each worker's text of every request is checked
against ``tokenizer.decode`` (mini-sglang's offline ``LLM.generate``'s text).
"""

from __future__ import annotations

__all__ = [
    "main",
    "model_folder",
    "workload",
    "frames",
    "Side",
    "measure",
    "parts",
    "texts",
    "default_tokenizers",
]

import argparse
import gzip
import importlib
import multiprocessing
import os
import platform
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from puredetok.serving._loading import default_tokenizer_path

ROOT = Path(__file__).resolve().parents[2]
"""The repository's root."""

TEXT = (
    "Streaming detokenization turns token ids into text as they are generated. "
    "Le texte arrive morceau par morceau, naïvement ou pas. "
    "推理模型逐个生成词元，文本随之流出。 "
    "Ελληνικά, русский текст, 日本語のテキスト, 한국어 문장. "
    "Emoji too: 🦩🏳️‍🌈👍🏽 and math ∑∫√∞. "
)
"""The text whose ids the outputs are cut from (repeated as needed)."""

SIDES = {"mini-sglang": "minisgl.tokenizer.server", "puredetok": "puredetok.engines.minisgl"}
"""Each side's ``tokenize_worker``: the module it is in."""


def model_folder(source: Path, target: Path) -> Path:
    """``target`` made a folder mini-sglang's ``load_tokenizer`` loads: the tokenizer files of
    ``source``, ``*.gz`` decompressed.
    """
    target.mkdir(parents=True, exist_ok=True)
    for file in source.iterdir():
        if file.suffix == ".gz":
            (target / file.stem).write_bytes(gzip.decompress(file.read_bytes()))
        elif file.is_file():
            shutil.copyfile(file, target / file.name)
    return target


def workload(tokenizer: Any, requests: int, tokens: int) -> list[list[int]]:
    """Each request's output: ``tokens`` ids of :data:`TEXT`, each request starting elsewhere in it."""
    ids = list(tokenizer.encode(TEXT, add_special_tokens=False))
    ids = ids * (tokens // len(ids) + 2)
    shift = max(1, len(ids) // (2 * requests + 1))
    return [ids[(n * shift) % (len(ids) - tokens) :][:tokens] for n in range(requests)]


def frames(outputs: Sequence[Sequence[int]], first_uid: int) -> list[bytes]:
    """The scheduler's frames for these outputs, encoded as mini-sglang encodes them: one per step."""
    import msgpack
    from minisgl.message import BaseTokenizerMsg, BatchTokenizerMsg, DetokenizeMsg

    steps = max(map(len, outputs))
    encoded = []
    for step in range(steps):
        batch = [
            DetokenizeMsg(uid=first_uid + n, next_token=ids[step], finished=step == len(ids) - 1)
            for n, ids in enumerate(outputs)
            if step < len(ids)
        ]
        message = batch[0] if len(batch) == 1 else BatchTokenizerMsg(data=batch)
        encoded.append(msgpack.packb(BaseTokenizerMsg.encoder(message), use_bin_type=True))
    return encoded


def _run(module: str, **kwargs: Any) -> None:
    importlib.import_module(module).tokenize_worker(**kwargs)


class Side:
    """One side's worker process over a tokenizer folder, and this process's ends of its sockets."""

    def __init__(self, name: str, folder: Path, scratch: Path) -> None:
        import zmq

        self.name = name
        address = f"ipc://{scratch}/{name}-"
        self._context = zmq.Context()
        self._replies = self._context.socket(zmq.PULL)
        self._replies.bind(address + "frontend")
        self._scheduler = self._context.socket(zmq.PULL)
        self._scheduler.bind(address + "backend")
        self._send = self._context.socket(zmq.PUSH)
        self._send.connect(address + "tokenizer")
        context = multiprocessing.get_context("spawn")
        acks: Any = context.Queue()
        self.process = context.Process(
            target=_run,
            args=(SIDES[name],),
            kwargs={
                "tokenizer_path": str(folder),
                "addr": address + "tokenizer",
                "create": True,
                "backend_addr": address + "backend",
                "frontend_addr": address + "frontend",
                "local_bs": 1,
                "tokenizer_id": 0,
                "ack_queue": acks,
            },
            daemon=True,
        )
        self.process.start()
        acks.get(timeout=600)

    def cpu_seconds(self) -> float:
        """The CPU time the worker process has used (all its threads; NaN where ``/proc`` has no
        record of it): unlike the wall time, not lengthened by other work on the machine.
        """
        try:
            stat = Path(f"/proc/{self.process.pid}/stat").read_text()
        except OSError:
            return float("nan")
        fields = stat[stat.rindex(")") + 2 :].split()  # after the command's name: the state is field 3
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime

    def round(self, encoded: Sequence[bytes]) -> tuple[float, float, list[bytes]]:
        """Send the frames, take one reply frame per frame: the seconds it took, the worker's CPU
        seconds, and the replies.
        """
        replies = []
        cpu = self.cpu_seconds()
        began = time.perf_counter()
        for frame in encoded:
            self._send.send(frame, copy=False)
            while self._replies.poll(0):
                replies.append(self._replies.recv())
        while len(replies) < len(encoded):
            if not self._replies.poll(60_000):
                raise RuntimeError(f"{self.name}'s worker sent {len(replies)} of {len(encoded)} reply frames")
            replies.append(self._replies.recv())
        return time.perf_counter() - began, self.cpu_seconds() - cpu, replies

    def close(self) -> None:
        """Stop the worker and close the sockets."""
        self.process.terminate()
        self.process.join(10)
        self._context.destroy(linger=0)


def texts(replies: Sequence[bytes]) -> dict[int, str]:
    """Each request's text in these reply frames."""
    import msgpack
    from minisgl.message import BaseFrontendMsg, BatchFrontendMsg

    joined: dict[int, str] = {}
    for frame in replies:
        message = BaseFrontendMsg.decoder(msgpack.unpackb(frame, raw=False))
        for reply in message.data if isinstance(message, BatchFrontendMsg) else [message]:
            joined[reply.uid] = joined.get(reply.uid, "") + reply.incremental_output
    return joined


def measure(
    folder: Path, outputs: Sequence[Sequence[int]], rounds: int, repeats: int, scratch: Path
) -> tuple[list[dict[str, float]], dict[str, dict[int, str]]]:
    """Per repeat, each side's best per-token time (microseconds) over ``rounds`` alternating
    rounds, wall (``"mini-sglang"``, ``"puredetok"``) and its worker's CPU (``"mini-sglang CPU"``,
    ``"puredetok CPU"``); and each side's text of every request (uids from 0, in ``outputs``' order)
    in its last round.
    """
    tokens = sum(map(len, outputs))
    sides = [Side(name, folder, scratch) for name in SIDES]
    samples: list[dict[str, float]] = []
    last: dict[str, dict[int, str]] = {}
    uid = 0
    try:
        for _ in range(repeats):
            best = {name: float("inf") for side in sides for name in (side.name, f"{side.name} CPU")}
            for _ in range(rounds):
                for side in sides:
                    encoded = frames(outputs, uid)
                    seconds, cpu, replies = side.round(encoded)
                    best[side.name] = min(best[side.name], seconds * 1e6 / tokens)
                    best[f"{side.name} CPU"] = min(best[f"{side.name} CPU"], cpu * 1e6 / tokens)
                    last[side.name] = {key - uid: text for key, text in texts(replies).items()}
                    uid += len(outputs)
            samples.append(best)
    finally:
        for side in sides:
            side.close()
    return samples, last


def parts(tokenizer: Any, outputs: Sequence[Sequence[int]], repeats: int) -> dict[str, list[float]]:
    """Per repeat, the per-token CPU time (microseconds, this process's) of each part of a worker's
    turn, in this process, on the same frames: mini-sglang's decoding of the frames (both sides run it), each
    side's handling of the decoded messages (mini-sglang's ``DetokenizeManager.detokenize`` and its
    replies built as its worker builds them; puredetok's
    :class:`~puredetok.engines.minisgl.MiniSglTokenizer`), and mini-sglang's encoding of the reply
    frames (both sides).
    """
    import msgpack
    from minisgl.message import BaseFrontendMsg, BatchFrontendMsg, BatchTokenizerMsg, UserReply
    from minisgl.tokenizer.detokenize import DetokenizeManager

    from puredetok.engines.minisgl import MiniSglTokenizer

    tokens = sum(map(len, outputs))
    times: dict[str, list[float]] = {
        "decode frames": [],
        "mini-sglang": [],
        "puredetok": [],
        "encode replies": [],
    }
    ours = MiniSglTokenizer(tokenizer)
    for repeat in range(repeats):
        encoded = frames(outputs, (repeat + 1) * 10**6)
        began = time.process_time()
        batches = [BatchTokenizerMsg.decoder(msgpack.unpackb(frame, raw=False)).data for frame in encoded]
        times["decode frames"].append((time.process_time() - began) * 1e6 / tokens)
        theirs = DetokenizeManager(tokenizer)
        began = time.process_time()
        for batch in batches:
            outputs_of = theirs.detokenize(batch)
            BatchFrontendMsg(data=[UserReply(m.uid, text, m.finished) for m, text in zip(batch, outputs_of)])
        times["mini-sglang"].append((time.process_time() - began) * 1e6 / tokens)
        began = time.process_time()
        replies = [BatchFrontendMsg(data=ours.handle(batch)[0]) for batch in batches]
        times["puredetok"].append((time.process_time() - began) * 1e6 / tokens)
        began = time.process_time()
        for reply in replies:
            msgpack.packb(BaseFrontendMsg.encoder(reply), use_bin_type=True)
        times["encode replies"].append((time.process_time() - began) * 1e6 / tokens)
    return times


def _line(samples: list[dict[str, float]], what: str = "") -> str:
    own = sorted(sample[f"mini-sglang{what}"] for sample in samples)
    ours = sorted(sample[f"puredetok{what}"] for sample in samples)
    # a run too short for the CPU clock's ticks (10 ms) measures no CPU time: no ratio
    ratios = sorted(
        sample[f"mini-sglang{what}"] / sample[f"puredetok{what}"]
        if sample[f"puredetok{what}"]
        else float("nan")
        for sample in samples
    )
    label = "CPU of the worker" if what else "wall, end to end"
    return (
        f"  {label:<17} mini-sglang {own[0]:6.2f}-{own[-1]:6.2f} us/token"
        f"   puredetok {ours[0]:5.2f}-{ours[-1]:5.2f} us/token"
        f"   mini-sglang / puredetok {ratios[0]:5.2f}-{ratios[-1]:5.2f}"
    )


def default_tokenizers() -> dict[str, Path]:
    """The tokenizers benchmarked by default: the packaged Qwen3, and Llama-2 of the test data."""
    return {"qwen3": default_tokenizer_path(), "llama2": ROOT / "tests" / "data" / "tokenizers" / "llama2"}


def main(argv: Sequence[str] | None = None) -> int:
    """Print each tokenizer's per-token times and how many texts each side got exactly right."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.engines.minisgl", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=256, help="generated ids per request")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per repeat (best of)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--tokenizer",
        action="append",
        metavar="NAME=FOLDER",
        help="a tokenizer folder (default: the packaged Qwen3 and the repository's Llama-2)",
    )
    args = parser.parse_args(argv)
    if min(args.requests, args.tokens, args.rounds, args.repeats) < 1:
        parser.error("--requests, --tokens, --rounds and --repeats must be >= 1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from minisgl.utils import load_tokenizer

    sources = {name: Path(folder) for name, folder in (item.split("=", 1) for item in args.tokenizer or ())}
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"mini-sglang's tokenizer process, its own tokenize_worker against puredetok's: {args.requests}"
        f" requests, one id each per step, {args.tokens} steps; Python {platform.python_version()},"
        f" {os.cpu_count()} cores, load average {load:.2f}; {args.repeats} repeats of {args.rounds} rounds"
    )
    with tempfile.TemporaryDirectory(prefix="puredetok-bench-minisgl-") as scratch:
        for name, source in (sources or default_tokenizers()).items():
            folder = model_folder(source, Path(scratch) / name)
            tokenizer = load_tokenizer(str(folder))
            outputs = workload(tokenizer, args.requests, args.tokens)
            samples, last = measure(folder, outputs, args.rounds, args.repeats, Path(scratch))
            expected = [tokenizer.decode(ids) for ids in outputs]
            exact = {
                side: sum(got.get(n) == text for n, text in enumerate(expected)) for side, got in last.items()
            }
            print(f"{name}: {sum(map(len, outputs))} tokens in {args.tokens} frames")
            print(_line(samples))
            print(_line(samples, " CPU"))
            split = parts(tokenizer, outputs, args.repeats)
            print(
                "  parts, CPU in this process, us/token: "
                + ", ".join(f"{part} {min(t):.2f}-{max(t):.2f}" for part, t in split.items())
            )
            print(
                "  texts equal to tokenizer.decode: "
                + ", ".join(f"{s} {n} of {len(outputs)}" for s, n in exact.items())
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
