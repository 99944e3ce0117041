"""``puredetok audit`` on the logs vLLM's own serving code writes (``serving_logs.py``: vLLM's
``OpenAIServingCompletion`` / ``OpenAIServingChat`` over ``RequestOutput``s from its real
``OutputProcessor``): completions and chat completions, whole and streamed, ``n`` = 1 and 2,
``return_token_ids`` or logprobs with ``return_tokens_as_token_ids``, ``stream_options`` usage
chunks, logprobs, an error event. The audit runs as the command, in a subprocess, on the files
as a server sent them. Decoded by the plugin, every request is equal; decoded by vLLM's own
detokenizer, the requests reported differing are exactly those whose text is not the exact
decode of their ids after the prompt."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import helpers
from driver import own_detokenizer, vllm_tokenizer
from puredetok._core import continuation_text
from serving_logs import Choice, Served, Server

NAMES = ("llama2", "qwen3")
"""SentencePiece with byte fallback (byte runs vLLM's own detokenizer drops or splits) and
byte-level BPE (characters split across tokens)."""


@dataclass
class Case:
    """One request as a client sends it, and what it generates."""

    chat: bool
    body: dict[str, Any]
    prompt: list[int]
    choices: list[Choice]
    batch: int


@st.composite
def cases(draw: st.DrawFn, name: str) -> Case:
    """A request over the tokenizer: completion or chat, streamed or not, one or two choices each
    ending on its length or a stop token, ids asked as ``token_ids`` or as logprobs' placeholders
    (then without a prompt: such a response carries no prompt ids), usage chunks, logprobs."""
    chat, stream, n = draw(st.booleans()), draw(st.booleans()), draw(st.sampled_from([1, 2]))
    placeholders = draw(st.integers(0, 4)) == 0
    prompt = [] if placeholders else draw(st.one_of(st.just([]), helpers.prompt_lists(name)))
    outputs = [draw(helpers.output_lists(name).filter(bool)) for _ in range(n)]
    choices = [Choice(ids, draw(st.booleans())) for ids in outputs]
    budget = "max_completion_tokens" if chat else "max_tokens"
    body: dict[str, Any] = {"stream": stream, budget: max(map(len, outputs)), "n": n}
    if draw(st.integers(0, 3)) == 0:  # a stop string from the text of the first choice
        text = exact(name, prompt, choices[0])
        if text.strip():
            start = draw(st.integers(0, len(text) - 1))
            body["stop"] = [text[start : start + draw(st.integers(1, 3))]]
    if placeholders:
        body["return_tokens_as_token_ids"] = True
    else:
        body["return_token_ids"] = True
    logprobs = placeholders or draw(st.booleans())
    if logprobs:
        body.update({"logprobs": True, "top_logprobs": 1} if chat else {"logprobs": 1})
    # vLLM echoes logprobs from the prompt's, which the engine core made up here does not give
    # (a request asking both fails inside vLLM's serving code): echo only without logprobs
    if not chat and not placeholders and not logprobs:
        body["echo"] = draw(st.booleans())  # with return_token_ids: the text and ids are the output's
    if stream and draw(st.booleans()):
        body["stream_options"] = {"include_usage": True, "continuous_usage_stats": draw(st.booleans())}
    return Case(chat, body, prompt, choices, draw(st.sampled_from([1, 1, 2, 3])))


def exact(name: str, prompt: list[int], choice: Choice, stop: str | None = None) -> str:
    """Contract C from the tokenizer's decode; a stop token is not decoded (as vLLM does); a
    stop string ends the text before its first occurrence."""
    tok = helpers.tokenizer(name)
    ids = choice.ids[:-1] if choice.stop_token else choice.ids
    before = str(tok.decode(prompt, skip_special_tokens=True))
    text = continuation_text(before, str(tok.decode([*prompt, *ids], skip_special_tokens=True)))
    return text if stop is None or stop not in text else text[: text.index(stop)]


def serve(name: str, own: bool, many: list[Case]) -> list[tuple[Case, Served]]:
    """Each case through vLLM's serving code, decoded by the plugin or by vLLM's own detokenizer."""
    server = Server(vllm_tokenizer(name))
    results = []
    for case in many:
        make = server.chat if case.chat else server.completion
        if own:
            with own_detokenizer():
                results.append((case, make(case.body, case.prompt, case.choices, case.batch)))
        else:
            results.append((case, make(case.body, case.prompt, case.choices, case.batch)))
    return results


def response_id(served: Served) -> str:
    """The id vLLM gave the response (the same in every chunk)."""
    first = served.lines[0].removeprefix("data: ")
    return str(json.loads(first)["id"])


def write(folder: Path, results: list[tuple[Case, Served]]) -> list[Path]:
    """The responses as a server sent them: whole bodies one a line, streams' events one after
    the other."""
    whole, streams = folder / "responses.jsonl", folder / "streams.txt"
    whole.write_text("".join(s.lines[0] + "\n" for c, s in results if not c.body["stream"]))
    streams.write_text("".join("".join(s.lines) for c, s in results if c.body["stream"]))
    return [path for path in (whole, streams) if path.stat().st_size]


def audit(name: str, files: list[Path], report: Path) -> tuple[int, dict[str, str], list[dict[str, Any]]]:
    """``puredetok audit FILES --tokenizer FOLDER --report REPORT``: the exit code, the summary's
    rows and the report's lines."""
    done = subprocess.run(
        [sys.executable, "-m", "puredetok.cli", "audit", *map(str, files), "--tokenizer",
         str(helpers._folder(name)), "--report", str(report)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    rows = {}
    for line in done.stdout.splitlines():
        key, _, value = line.strip().rpartition("  ")
        rows[key.strip()] = value.strip()
    lines = [json.loads(line) for line in report.read_text().splitlines()] if report.exists() else []
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, rows, lines


def truth(name: str, results: list[tuple[Case, Served]]) -> dict[str, bool]:
    """Each request's name as the audit gives it, and whether its text really differs."""
    differs = {}
    for case, served in results:
        rid, many = response_id(served), len(case.choices) > 1
        for index, choice in enumerate(case.choices):
            ids, (reason, stop) = served.ids[index], served.finish[index]
            assert ids == choice.ids[: len(ids)]  # all of them, or up to where a stop string ended it
            ended = Choice(ids, choice.stop_token and ids == choice.ids)
            string = stop if reason == "stop" and isinstance(stop, str) else None
            text = exact(name, case.prompt, ended, string)
            differs[f"{rid}/{index}" if many else rid] = served.texts[index] != text
    return differs


@pytest.mark.parametrize("name", NAMES)
def test_the_audit_reads_what_vllm_serves(name: str) -> None:
    """Random requests through vLLM's serving code, decoded by the plugin and by vLLM's own
    detokenizer: every request is read (none bad, none skipped); the plugin's are all equal;
    vLLM's own differ exactly where their text is not the exact text (and some do)."""
    many: list[Case] = []

    @settings(max_examples=25)  # requests per tokenizer, each served twice: within the file's budget
    @given(cases(name))
    def collect(case: Case) -> None:
        many.append(case)

    collect()
    results = {own: serve(name, own, many) for own in (False, True)}
    expected = {own: truth(name, results[own]) for own in (False, True)}
    with tempfile.TemporaryDirectory(prefix="puredetok-vllm-logs-") as scratch:
        folders = {own: Path(scratch) / ("vllm" if own else "plugin") for own in (False, True)}
        files = []
        for own, folder in folders.items():
            folder.mkdir()
            files += write(folder, results[own])
        code, rows, report = audit(name, files, Path(scratch) / "report.jsonl")
        reported = {own: {r["id"] for r in report if str(path) in r["file"]} for own, path in folders.items()}
    assert rows["requests"] == str(len(expected[False]) + len(expected[True])), rows
    assert rows["bad records"] == "0" and rows["skipped"] == "0", (rows, report)
    assert len(report) == len(reported[False]) + len(reported[True])
    assert reported[False] == set() and not any(expected[False].values())
    assert reported[True] == {rid for rid, differs in expected[True].items() if differs}, report
    assert reported[True] and code == 1  # vLLM's own detokenizer erred on some: something to find


def test_an_error_in_a_stream_skips_the_choices_then_streaming(tmp_path: Path) -> None:
    """A choice that fails (``finish_reason="error"``): vLLM's stream sends an error event and
    ``[DONE]``; the audit skips the choices still streaming and reads those that ended before."""
    tok = vllm_tokenizer("qwen3")
    server = Server(tok)
    ids = tok.encode(" Hello world, how are you?", add_special_tokens=False)
    choices = [Choice(ids[:2], stop_token=True), Choice(ids, error=True)]
    body = {"stream": True, "n": 2, "max_tokens": len(ids), "return_token_ids": True}
    lines: list[str] = []
    for make in (server.completion, server.chat):
        served = make(body, tok.encode("Say hi:"), choices)
        assert '"error"' in served.lines[-2] and served.lines[-1] == "data: [DONE]\n\n"
        lines += served.lines
    (tmp_path / "streams.txt").write_text("".join(lines))
    code, rows, report = audit("qwen3", [tmp_path / "streams.txt"], tmp_path / "report.jsonl")
    counts = (rows["requests"], rows["equal"], rows["skipped"], rows["bad records"])
    assert (code, counts) == (0, ("2", "2", "2", "0"))
    assert report == []
