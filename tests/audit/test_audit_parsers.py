"""``puredetok audit`` on chat responses that vLLM's reasoning parsers split: the text a parser
drops is named, and a split stream is checked chunk by chunk.

The streamed parsers are simulated here as their sources read (``vllm/reasoning/basic_parsers.py``
``BaseThinkingReasoningParser.extract_reasoning_streaming``, ``deepseek_r1_reasoning_parser.py``,
``qwen3_reasoning_parser.py``), delta by delta over generated cuts of generated outputs; the
server sends a chunk with an empty delta and its ids when the parser returns None (with
``return_token_ids``, ``serving_chat.py``).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st

from helpers import tokenizer, vocabulary
from puredetok.testing.strategies import text_ids
from puredetok_audit import Request
from puredetok_audit._compare import Auditor, Difference
from puredetok_audit._formats.vllm import read_stream
from test_audit import _chat, _vllm_think_parser, audit, exact, report, table, write_lines

STYLES = ("base", "deepseek_r1", "qwen3")
"""vLLM's streamed reasoning parsers: what each does with the text before ``<think>``
(content; reasoning; reasoning, but dropped within the delta that holds the marker)."""

START, END = "<think>", "</think>"


def _delta(
    style: str, text: str, previous: Sequence[int], delta: Sequence[int], start: int, end: int
) -> dict[str, str] | None:
    """One streamed delta as the ``style`` parser splits it (None: the parser sends nothing)."""
    if style == "qwen3":
        if start in delta and START in text:
            text = text[text.index(START) + len(START) :]
        if end in delta:
            if END not in text:
                return None
            reasoning, _, content = text.partition(END)
            return {k: v for k, v in (("reasoning", reasoning), ("content", content)) if v} or None
        if not text:
            return None
        return {"content": text} if end in previous else {"reasoning": text}
    if len(delta) == 1 and delta[0] in (start, end):
        return None
    if start in previous or start in delta or style == "deepseek_r1":
        head = 0
        if start not in previous and start in delta:
            head = text.find(START) + len(START) if end in delta else 0
        if end in delta:
            at = text.find(END)
            return _pieces(text[head:at], text[at + len(END) :])
        return {"content": text} if end in previous else {"reasoning": text}
    return {"content": text}


def _pieces(reasoning: str, content: str) -> dict[str, str]:
    return {"reasoning": reasoning, **({"content": content} if content else {})}


def _stream(
    uid: str, style: str, prompt: list[int], ids: list[int], cuts: list[int], start: int, end: int
) -> list[tuple[int, bytes]]:
    """The server-sent events of a chat stream of ``ids`` cut at ``cuts``, each delta's text
    the exact text so far (the longest prefix of the whole one that the ids so far show)."""
    whole = exact("qwen3", prompt, ids)
    bounds = [0, *cuts, len(ids)]
    shown, lines = 0, []
    for index, (low, high) in enumerate(zip(bounds, bounds[1:])):
        last = high == len(ids)
        so_far = whole if last else exact("qwen3", prompt, ids[:high])
        now = (
            len(whole)
            if last
            else next(
                (i for i, (a, b) in enumerate(zip(so_far, whole)) if a != b), min(len(so_far), len(whole))
            )
        )
        now = max(now, shown)
        delta = _delta(style, whole[shown:now], ids[:low], ids[low:high], start, end) or {}
        shown = now
        choice = {
            "index": 0,
            "delta": delta,
            "token_ids": ids[low:high],
            "finish_reason": "length" if last else None,
        }
        chunk: dict[str, Any] = {"id": uid, "object": "chat.completion.chunk", "choices": [choice]}
        if index == 0:
            chunk["prompt_token_ids"] = prompt
        lines.append(f"data: {json.dumps(chunk, ensure_ascii=False)}")
    lines.append("data: [DONE]")
    return [(number, line.encode()) for number, line in enumerate(lines, 1)]


def _markers(text: str) -> list[str]:
    return [marker for marker in (START, END) if marker in text]


THINK = (151667, 151668)
"""Qwen3's ids of ``<think>`` and ``</think>`` (the drawn outputs check them)."""


def _output(draw: Callable[[st.SearchStrategy[Any]], Any]) -> tuple[list[int], list[int], int, int]:
    """A prompt and an output: text, maybe ``<think>``, text, maybe ``</think>``, text."""
    tok = tokenizer("qwen3")
    vocab = vocabulary("qwen3")
    start, end = tok.convert_tokens_to_ids(START), tok.convert_tokens_to_ids(END)
    assert (start, end) == THINK
    prompt = tok.encode("Translate: cat")
    before = draw(st.sampled_from([[], draw(text_ids(vocab, max_size=8))]))
    opened = draw(st.booleans())
    closed = draw(st.booleans())
    ids = [
        *before,
        *([start] if opened else []),
        *draw(text_ids(vocab, max_size=20)),
        *([end] if closed else []),
        *draw(text_ids(vocab, max_size=20)),
    ]
    assume(ids)
    return prompt, ids, start, end


@st.composite
def _split_streams(draw: st.DrawFn) -> tuple[list[int], str, list[int]]:
    """An output (:func:`_output`), the streamed parser that splits it, and where it is cut."""
    _, ids, _, _ = _output(draw)
    style = draw(st.sampled_from(STYLES))
    cuts = sorted(set(draw(st.lists(st.integers(1, max(1, len(ids) - 1)), max_size=8))))
    return ids, style, [c for c in cuts if c < len(ids)]


@functools.cache
def _auditor() -> Auditor:
    """One auditor for every example, as the command keeps one for a whole file."""
    return Auditor(tokenizer("qwen3"))


def _check(lines: list[tuple[int, bytes]]) -> tuple[Request, Difference | None]:
    (request,) = read_stream(lines, "f")
    assert isinstance(request, Request)
    return request, _auditor().check(request)


S, E = THINK


@given(case=_split_streams())
# Found on new seeds: a piece that fits both before <think> and after </think> by
# chance, placed before it, left the text after the markers unplaced ("lost tail").
@example(case=([16, S, E, 16], "base", []))
@example(case=([16, S, E, 16], "deepseek_r1", [1]))
@example(case=([16, 16, S, 16], "qwen3", [1]))
@example(case=([16, 16, S, E, 16], "qwen3", [1]))
@example(case=([16, 16, S, E, 16, 16], "qwen3", [1]))
@example(case=([16, 17, S, E, 16], "qwen3", [1]))
def test_a_stream_split_by_a_parser_is_never_a_difference(case: tuple[list[int], str, list[int]]) -> None:
    """Any output, cut anywhere, split by each streamed parser: equal, or (the text before
    ``<think>`` in the delta that holds it, which Qwen3's parser drops, and the others when the
    delta holds ``</think>`` too) kind "parser split" naming the dropped stretch, which ends at
    the marker."""
    ids, style, cuts = case
    prompt, (start, end) = tokenizer("qwen3").encode("Translate: cat"), THINK
    lines = _stream("s", style, prompt, ids, cuts, start, end)
    text = exact("qwen3", prompt, ids)
    # A parser that sent no reasoning at all, only dropped lone markers, left no sign of a split:
    # the audit reads a plain stream (a limit docs/audit.md states).
    assume(b'"reasoning"' in b"".join(line for _, line in lines) or not {START, END} & set(_markers(text)))
    _, difference = _check(lines)
    if difference is None:
        return
    assert difference.kind == "parser split" and difference.dropped is not None
    offset, length = difference.dropped
    assert length > 0 and text.startswith(START, offset + length)
    assert difference.offset == offset and difference.chunk is None


@given(data=st.data())
def test_a_wrong_chunk_of_a_split_stream_is_the_one_named(data: st.DataObject) -> None:
    """A piece of one chunk changed (a character added at its end): it is counted as a
    difference, never as the parser's split, and the chunk named is that one (or, where a
    reasoning piece could be placed before or after the start marker, an earlier one)."""
    prompt, ids, start, end = _output(data.draw)
    style = data.draw(st.sampled_from(STYLES), label="style")
    cuts = sorted(
        {c for c in data.draw(st.lists(st.integers(1, max(1, len(ids) - 1)), max_size=8)) if c < len(ids)}
    )
    lines = _stream("s", style, prompt, ids, cuts, start, end)
    text = exact("qwen3", prompt, ids)
    assume(b'"reasoning"' in b"".join(line for _, line in lines) or not _markers(text))  # the limit above
    chunks = [json.loads(line[5:]) for _, line in lines[:-1]]
    pieces = [(i, k) for i, c in enumerate(chunks) for k, v in c["choices"][0]["delta"].items() if v]
    assume(pieces)
    assume("\u2603" not in text)
    index, key = data.draw(st.sampled_from(pieces), label="changed")
    chunks[index]["choices"][0]["delta"][key] += "\u2603"
    changed = [(n, f"data: {json.dumps(c, ensure_ascii=False)}".encode()) for n, c in enumerate(chunks, 1)]
    _, difference = _check([*changed, lines[-1]])
    assert difference is not None and difference.kind != "parser split"
    assert difference.chunk is not None and difference.chunk <= index
    if not any(c["choices"][0]["delta"].get("reasoning") for c in chunks[: index + 1]):
        assert difference.chunk == index  # no reasoning yet: nothing to place two ways


def test_text_before_think_that_the_parser_drops_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A whole response: vLLM's parser drops what comes before ``<think>``; the report names the
    stretch (offset and length), kind "parser split", not counted as differing; a wrong piece
    after it is still a difference, with the dropped stretch named too."""
    tok = tokenizer("qwen3")
    prompt = tok.encode("Translate: cat")
    ids = tok.encode("Sure.<think>\n猫 is cat.\n</think>\n\nIt means cat.")
    text = exact("qwen3", prompt, ids)
    reasoning, content = _vllm_think_parser(text)
    good = _chat("dropped", prompt, ids, reasoning_content=reasoning, content=content)
    bad = _chat("wrong", prompt, ids, reasoning_content=reasoning, content=(content or "")[:-1])
    path = write_lines(tmp_path / "chat.jsonl", [good])
    out_path = tmp_path / "report.jsonl"
    code, out, err = audit(capsys, str(path), "--report", str(out_path))
    assert (code, err) == (0, "")
    (found,) = report(out_path)
    assert found["kind"] == "parser split" and found["offset"] == 0
    assert found["dropped"] == {"offset": 0, "length": len("Sure.")}
    assert found["engine"].startswith(START) and found["exact"].startswith("Sure." + START)
    rows = table(out)
    assert (rows["differing"], rows["not joinable (parser split)"], rows["with text the parser dropped"]) == (
        "0",
        "1",
        "1",
    )
    path = write_lines(tmp_path / "bad.jsonl", [good, bad])
    code, out, err = audit(capsys, str(path), "--report", str(out_path))
    assert code == 1
    dropped, wrong = report(out_path)
    assert wrong["id"] == "wrong" and wrong["kind"] == "lost tail" and wrong["dropped"]["length"] == 5
    assert table(out)["differing"] == "1"


def test_a_stream_keeps_the_text_before_think_and_is_compared(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Streamed, the base parser sends the text before ``<think>`` as content and DeepSeek-R1's
    as reasoning: the record still has it, and it is compared (a wrong one is found there, in
    its chunk)."""
    tok = tokenizer("qwen3")
    prompt = tok.encode("Translate: cat")
    ids = tok.encode("Sure.<think>\n猫 is cat.\n</think>\n\nIt means cat.")
    start, end = tok.convert_tokens_to_ids(START), tok.convert_tokens_to_ids(END)
    cuts = list(range(1, len(ids)))
    lines = []
    for style in ("base", "deepseek_r1"):
        lines += [line.decode() for _, line in _stream(style, style, prompt, ids, cuts, start, end)]
    wrong = [
        line.replace('"Sure', '"Surely') if '"Sure' in line else line for line in lines[: len(lines) // 2]
    ]
    path = write_lines(
        tmp_path / "chat.sse", [*lines, *[line.replace('"id": "base"', '"id": "wrong"') for line in wrong]]
    )
    out_path = tmp_path / "report.jsonl"
    code, out, err = audit(capsys, str(path), "--report", str(out_path))
    assert (code, err) == (1, "")
    (found,) = report(out_path)
    changed = next(i for i, line in enumerate(wrong) if '"Surely' in line)
    assert found["id"] == "wrong" and found["offset"] == len("Sure") and found["chunk"] == changed
    assert "dropped" not in found
    rows = table(out)
    assert (rows["streams"], rows["with a contradicted chunk"], rows["split by a parser"]) == ("3", "1", "3")
