"""The stepping core needs nothing but attrs and the standard library: a process in which
every other library is refused imports ``puredetok``, its core and its stop layer, unpickles codecs
built elsewhere and streams exactly ``tokenizer.decode``'s text; the builder reads a
``tokenizers.Tokenizer`` without importing ``transformers``.

Each check runs a fresh interpreter whose first act is to put a finder at the head of
``sys.meta_path`` that refuses every module outside the allowed ones (as if it were not installed).
"""

from __future__ import annotations

import json
import os
import pickle
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import puredetok
from helpers import codec, tokenizer
from puredetok import StopRules, advance, close, feed, open_stream, start

SOURCE = Path(puredetok.__file__).resolve().parents[1]
"""The folder the package under test is imported from: the child imports the same one."""

REFUSING = """
import importlib.abc, json, sys

ALLOWED = set(sys.stdlib_module_names) | {ALLOWED}
REFUSED = []


class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.partition(".")[0] in ALLOWED:
            return None
        REFUSED.append(name)
        raise ModuleNotFoundError(f"refused: {name}", name=name)


sys.meta_path.insert(0, Refuse())
"""
"""The head of every child's script: ``{ALLOWED}`` is replaced by the allowed top-level modules."""


def run_alone(allowed: set[str], script: str, payload: bytes) -> dict[str, Any]:
    """Run ``script`` in a fresh interpreter that refuses every module but the standard library and
    ``allowed``, with ``payload`` on its standard input; its standard output is read as JSON."""
    head = REFUSING.replace("{ALLOWED}", repr(allowed))
    environment = {**os.environ, "PYTHONPATH": str(SOURCE)}
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            head + script + "print(json.dumps(result))",
        ],
        input=payload,
        capture_output=True,
        env=environment,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.decode().strip().splitlines()[-1])
    return result


STREAMING = """
import pickle

cases = pickle.loads(sys.stdin.buffer.read())  # codecs and states unpickle with the core alone

from puredetok import Codec, DecodeState, feed, finish, start, step
from puredetok.stops import StopRules, advance, close, open_stream
import puredetok._core

assert puredetok._core.steady(cases["qwen3"][0])[0] is cases["qwen3"][0].decoding.idle
result = {"texts": {}}
for name, (codec, ids, stop, saved) in cases.items():
    assert type(codec) is Codec, type(codec)
    state, stepped = start(codec), []
    for token_id in ids:
        state, text = step(state, token_id)
        stepped.append(text)
    fed, text = feed(start(codec), ids)
    stream, streamed = open_stream(codec, StopRules(stop=[stop])), []
    for token_id in ids:
        if stream.finished:
            break
        stream, delta = advance(stream, token_id)
        streamed.append(delta)
    stream, tail = close(stream)
    state_of_saved = saved.resume(codec)
    result["texts"][name] = {
        "stepped": "".join(stepped) + finish(state),
        "fed": text + finish(fed),
        "same_state": fed == state and isinstance(state, DecodeState),
        "stopped": "".join(streamed) + tail,
        "reason": str(stream.finish_reason),
        "resumed": finish(feed(state_of_saved, ids[len(ids) // 2 :])[0]) == finish(state),
    }
result["refused"] = list(REFUSED)
"""


def _ids(name: str) -> list[int]:
    """Text with split characters, byte runs and a stop string's text, then ids from the whole
    vocabulary (a fixed sample)."""
    text = "Streaming 推理 🦩 naïve café\n\nthe end. 한국어 ok"
    ids = [int(i) for i in tokenizer(name).encode(text, add_special_tokens=False)]
    sample = random.Random(36)
    return ids + [sample.randrange(len(tokenizer(name))) for _ in range(40)]


def test_the_core_and_the_stop_layer_stream_with_only_attrs() -> None:
    """Fails where ``import puredetok`` reaches ``tokenizers`` (as before the core had a room of
    its own)."""
    cases: dict[str, Any] = {}
    expected: dict[str, tuple[str, str, str]] = {}
    for name in ("qwen3", "llama2"):
        c, ids = codec(name), _ids(name)
        decoded, stop = tokenizer(name).decode(ids), "the end"
        assert c.exact and stop in decoded
        half = feed(start(c), ids[: len(ids) // 2])[0]
        cases[name] = (c, ids, stop, pickle.loads(pickle.dumps(half)))
        stream = open_stream(c, StopRules(stop=[stop]))
        for token_id in ids:
            if stream.finished:
                break
            stream, _ = advance(stream, token_id)
        expected[name] = (decoded, decoded[: decoded.index(stop)], str(close(stream)[0].finish_reason))
    result = run_alone({"attrs", "attr", "puredetok"}, STREAMING, pickle.dumps(cases))
    for name, (decoded, stopped, reason) in expected.items():
        got = result["texts"][name]
        assert got["stepped"] == decoded and got["fed"] == decoded and got["same_state"], name
        assert got["stopped"] == stopped and got["reason"] == reason, (name, got)
        assert got["resumed"], name
    # Nothing else was even looked for (the standard library's copy looks for Jython's org.python).
    assert {name.partition(".")[0] for name in result["refused"]} <= {"org"}, result["refused"]


BUILDING = """
from tokenizers import Tokenizer

import puredetok

tok = Tokenizer.from_file(sys.stdin.read())
codec = puredetok.codec_for(tok)
ids = tok.encode("Streaming 推理 🦩 naïve", add_special_tokens=False).ids
state, text = puredetok.feed(puredetok.start(codec), ids)
result = {
    "exact": codec.exact,
    "fingerprint": codec.fingerprint,
    "text": text + puredetok.finish(state),
    "decoded": tok.decode(ids, skip_special_tokens=False),
    "refused": list(REFUSED),
}
"""


def test_the_builder_reads_a_tokenizers_tokenizer_without_transformers(tmp_path: Path) -> None:
    """The builder imports neither library: it looks their classes up among the modules already
    imported (an object of theirs exists only then)."""
    path = tmp_path / "tokenizer.json"
    path.write_text(tokenizer("llama2").backend_tokenizer.to_str(), encoding="utf-8")
    result = run_alone({"attrs", "attr", "puredetok", "tokenizers"}, BUILDING, str(path).encode())
    assert {name.partition(".")[0] for name in result["refused"]} <= {"org"}, result["refused"]
    assert result["exact"] and result["fingerprint"] == codec("llama2", raw=True).fingerprint
    assert result["text"] == result["decoded"] == "Streaming 推理 🦩 naïve"


FALLBACK = """
import pickle

try:
    pickle.loads(sys.stdin.buffer.read())
except ModuleNotFoundError as error:
    result = {"error": str(error)}
"""


def test_the_fallback_codec_unpickles_only_with_its_tokenizers_library() -> None:
    """The documented exception: the generic fallback decodes with the tokenizer it holds."""
    window = puredetok.codec_for(tokenizer("qwen3"), window=True)
    assert run_alone({"attrs", "attr", "puredetok"}, FALLBACK, pickle.dumps(window)) == {
        "error": "refused: tokenizers"
    }


@pytest.mark.parametrize("module", ["tokenizers", "transformers", "msgspec", "zmq", "numpy"])
def test_the_refusing_finder_refuses(module: str) -> None:
    """The check above would prove nothing if the finder let a library through."""
    script = f"""
try:
    import {module}
except ModuleNotFoundError as error:
    result = {{"refused": str(error)}}
else:
    result = {{"refused": ""}}
"""
    assert run_alone({"attrs"}, script, b"")["refused"] == f"refused: {module}"
