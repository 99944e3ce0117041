"""The bench of both tokenizer processes (``python -m benchmarks.engines.minisgl``) runs in
mini-sglang's environment and prints each side's per-token time and how many of its texts are
``tokenizer.decode``'s; its workload is valid text, its frames mini-sglang's own encoding.
"""

from __future__ import annotations

import re

import msgpack
import pytest
from minisgl.message import BaseTokenizerMsg, BatchTokenizerMsg, DetokenizeMsg
from minisgl_helpers import TOKENIZERS, tokenizer

from benchmarks.engines import minisgl as bench


def test_the_workload_and_its_frames() -> None:
    tok = tokenizer("llama2")
    outputs = bench.workload(tok, 3, 40)
    assert [len(ids) for ids in outputs] == [40] * 3 and len({tuple(ids) for ids in outputs}) == 3
    frames = [
        BaseTokenizerMsg.decoder(msgpack.unpackb(frame, raw=False)) for frame in bench.frames(outputs, 5)
    ]
    assert len(frames) == 40 and all(isinstance(frame, BatchTokenizerMsg) for frame in frames)
    assert frames[0].data[2] == DetokenizeMsg(uid=7, next_token=outputs[2][0], finished=False)
    assert [message.finished for message in frames[-1].data] == [True] * 3


def test_the_bench_prints_both_sides(capsys: pytest.CaptureFixture[str]) -> None:
    arguments = ["--requests", "3", "--tokens", "8", "--rounds", "1", "--repeats", "2"]
    assert bench.main([*arguments, "--tokenizer", f"llama2={TOKENIZERS / 'llama2'}"]) == 0
    out = capsys.readouterr().out
    assert "llama2: 24 tokens in 8 frames" in out
    for label in ("wall, end to end", "CPU of the worker"):
        numbers = r"+\d+\.\d\d- *\d+\.\d\d us/token"
        assert re.search(rf"{label} +mini-sglang {numbers} +puredetok {numbers}", out), label
    assert re.search(r"texts equal to tokenizer.decode: mini-sglang \d of 3, puredetok 3 of 3", out)
    parts = r"decode frames [\d.]+-[\d.]+, mini-sglang [\d.]+-[\d.]+, puredetok [\d.]+-[\d.]+, encode"
    assert re.search(rf"parts, CPU in this process, us/token: {parts}", out)
