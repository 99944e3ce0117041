"""``puredetok audit`` on the logs SGLang's own ``/generate`` code writes (``generate_logs.py``:
its detokenizer process, then its ``TokenizerManager`` building the ``out`` dicts): whole outputs
and streams, by default and with ``--incremental-streaming-output``, clients that keep up and
clients that fall behind, logprobs, requests ending on their length, a stop token or an abort.
The audit runs as the command, in a subprocess, on the files as the server sent them. Decoded by
the plugin, every request is equal; decoded by SGLang's own detokenizer, the requests reported
differing are exactly those whose text is not the exact decode of their ids after the prompt."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from generate_logs import Served, serve
from puredetok._core import continuation_text
from sglang_helpers import OFF, REFUSED, decoder, detokenizer, folder, fresh_rid, tokenizer
from sglang_process import Request
from test_streams import id_lists

NAME = "llama2"
"""SentencePiece with byte fallback: byte runs SGLang's own detokenizer splits."""


def byte_runs() -> st.SearchStrategy[list[int]]:
    """Runs of byte-fallback tokens among text, many an ASCII byte then a continuation byte: a
    run decides its text only as a whole (here two U+FFFD), and SGLang's own streaming sends the
    ASCII character before the run ends."""
    tok = tokenizer(NAME)

    def byte(value: int) -> int:
        return int(tok.convert_tokens_to_ids(f"<0x{value:02X}>"))

    ascii_ = st.integers(0x61, 0x7A).map(byte)
    rest = st.sampled_from([0x80, 0x9F, 0xC3, 0xE4, 0xF0]).map(byte)
    words = [tok.encode(word, add_special_tokens=False) for word in (" ok", "é", " 日本")]
    part = st.one_of(st.tuples(ascii_, rest).map(list), st.sampled_from(words), ascii_.map(lambda i: [i]))
    return st.lists(part, min_size=1, max_size=6).map(lambda parts: [i for p in parts for i in p])


@st.composite
def requests(draw: st.DrawFn) -> tuple[Request, dict[str, Any]]:
    """A ``/generate`` request (its prompt as ids, asked with ``return_prompt_token_ids``) and how
    the scheduler runs it: streamed or not, ids per step, its ending."""
    prompt, output = draw(id_lists(NAME)), draw(st.one_of(id_lists(NAME), byte_runs()))
    ending = draw(st.sampled_from(["length", "length", "token", "abort"]))
    reason = {
        "length": {"type": "length", "length": len(output)},
        "token": {"type": "stop", "matched": output[-1]},
        "abort": {"type": "abort", "message": "Abort before prefill"},
    }[ending]
    stream = draw(st.booleans())
    request = Request(
        fresh_rid("audit"), prompt, output, reason, per_step=draw(st.sampled_from([1, 1, 2])), stream=stream
    )
    body = {"stream": stream, "return_prompt_token_ids": True, "return_logprob": draw(st.booleans())}
    return request, body


def exact(request: Request) -> str:
    """Contract C from the tokenizer's decode, after the whole prompt; a stop token is not
    decoded (as SGLang does)."""
    decode = decoder(NAME)
    reason = request.finished_reason or {}
    token = reason.get("type") == "stop" and type(reason.get("matched")) is int
    ids = list(request.output[:-1] if token else request.output)
    return continuation_text(decode(request.prompt), decode([*request.prompt, *ids]))


def audit(files: list[Path], report: Path) -> tuple[int, dict[str, str], list[dict[str, Any]]]:
    """``puredetok audit FILES --tokenizer FOLDER --report REPORT``: the exit code, the summary's
    rows and the report's lines."""
    done = subprocess.run(
        [sys.executable, "-m", "puredetok.cli", "audit", *map(str, files), "--tokenizer", str(folder(NAME)),
         "--report", str(report)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode in (0, 1), done.stderr
    rows = {}
    for line in done.stdout.splitlines():
        key, _, value = line.strip().rpartition("  ")
        rows[key.strip()] = value.strip()
    lines = [json.loads(line) for line in report.read_text().splitlines()] if report.exists() else []
    return done.returncode, rows, lines


def test_the_audit_reads_what_sglang_serves(tmp_path: Path) -> None:
    """Random batches through SGLang's detokenizer and tokenizer manager, with the plugin and with
    SGLang's own detokenizer, each server option: every request is read (none bad); the plugin's
    are all equal (where it does not refuse SGLang: ``REFUSED``); SGLang's own differ exactly
    where their text is not the exact text (and some do); an aborted request whose text stops
    short of the exact text is skipped."""
    batches: list[tuple[list[tuple[Request, dict[str, Any]]], bool, int]] = []

    @settings(max_examples=20)  # batches, each served twice: within the file's budget
    @given(st.lists(requests(), min_size=1, max_size=4), st.booleans(), st.sampled_from([1, 3]))
    def collect(batch: list[tuple[Request, dict[str, Any]]], incremental: bool, lag: int) -> None:
        batches.append((batch, incremental, lag))

    collect()
    wrong = 0
    for own in (False, True):
        process = detokenizer(NAME, OFF if own else {})
        served: list[Served] = []
        files = {False: tmp_path / f"{own}-outputs.jsonl", True: tmp_path / f"{own}-streams.txt"}
        for batch, incremental, lag in batches:
            # fresh ids: the same batch again is a new set of requests to the server
            runs = [(replace(r, rid=f"{r.rid}-{own}"), body) for r, body in batch]
            out = serve(process, [r for r, _ in runs], {r.rid: body for r, body in runs}, incremental, lag)
            served += out.values()
        whole = "".join(s.lines[0] for s in served if not s.request.stream)
        streams = "".join("".join(s.lines) for s in served if s.request.stream)
        files[False].write_text(whole)
        files[True].write_text(streams)
        inputs = [path for path in files.values() if path.stat().st_size]
        code, rows, report = audit(inputs, tmp_path / f"{own}.jsonl")
        differs, skipped = set(), 0
        for s in served:
            text, want = s.text, exact(s.request)
            aborted = (s.request.finished_reason or {}).get("type") == "abort"
            if aborted and text != want and want.startswith(text):
                skipped += 1  # the engine may have held the rest: not compared
            elif text != want:
                differs.add(s.request.rid)
        assert rows["bad records"] == "0", (rows, report)
        assert rows["skipped"] == str(skipped), rows
        assert rows["requests"] == str(len(served) - skipped), rows
        assert {line["id"] for line in report} == differs, (own, report)
        assert code == (1 if differs else 0)
        if not own and REFUSED is None:  # where the plugin refuses SGLang, its own decodes both
            assert not differs
        wrong += len(differs) if own else 0
    assert wrong > 0  # SGLang's own detokenizer erred on some: the check above had something to find


def test_the_streams_of_one_request_read_as_sent(tmp_path: Path) -> None:
    """One stream with its first, middle and last chunks as SGLang sends them (text and ids so
    far, or new ones with ``--incremental-streaming-output``): each read as one request, equal."""
    tok = tokenizer(NAME)
    prompt = tok.encode("Hello")
    output = tok.encode(" 你好 world 🌶 ok", add_special_tokens=False)
    files = []
    for incremental in (False, True):
        request = Request(fresh_rid("one"), prompt, output, {"type": "length", "length": len(output)})
        body = {"stream": True, "return_prompt_token_ids": True}
        out = serve(detokenizer(NAME), [request], {request.rid: body}, incremental)[request.rid]
        chunks = [json.loads(line.removeprefix("data: ")) for line in out.lines[:-1]]
        assert out.lines[-1] == "data: [DONE]\n\n" and len(chunks) > 1
        assert chunks[-1]["meta_info"]["finish_reason"]["type"] == "length"
        joined = [i for c in chunks for i in c["output_ids"]] if incremental else chunks[-1]["output_ids"]
        assert joined == output and all(c["prompt_token_ids"] == prompt for c in chunks)
        files.append(tmp_path / f"stream-{incremental}.txt")
        files[-1].write_text("".join(out.lines))
    code, rows, report = audit(files, tmp_path / "report.jsonl")
    assert (code, rows["requests"], rows["equal"], rows["bad records"], report) == (0, "2", "2", "0", [])
