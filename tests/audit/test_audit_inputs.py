"""``puredetok audit`` on files as users keep them: encodings, line endings, batch answers
(compressed files: tests/audit/test_audit_compressed.py), engine errors and cut streams, in the
engines' own shapes (``vllm/entrypoints/openai``: ``completion/serving.py``'s stream generator,
which sends ``data: {"error": ...}`` then ``data: [DONE]`` when a request fails;
``sglang/srt/entrypoints/http_server.py``, whose ``/generate`` answers a batch as a list and an
error as ``{"error": {"message"}}``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from test_audit import _sample, _sglang_stream, _sse, audit, completion, report, table, write_lines


def _sglang(uid: str, text: str, ids: list[int]) -> dict[str, Any]:
    return {"text": text, "output_ids": ids, "meta_info": {"id": uid, "finish_reason": {"type": "length"}}}


@pytest.mark.parametrize("kind", ["lines", "array", "sse"])
def test_a_utf8_bom_and_crlf_line_endings_are_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    """Files written by Windows tools (a BOM, CRLF) give the verdicts of the same file without."""
    prompt, ids, text = _sample()
    records = [completion("a", prompt, ids, text), completion("b", prompt, ids, text[:-1])]
    lines = [json.dumps(r) for r in records]
    if kind == "array":
        lines = ["[", ",\n".join(lines), "]"]
    elif kind == "sse":
        lines = _sse("a", prompt, [(text, ids)]) + _sse("b", prompt, [(text[:-1], ids)])
    path = tmp_path / "log.txt"
    path.write_bytes(b"\xef\xbb\xbf" + "\r\n".join(lines).encode())  # no newline at the end either
    out_path = tmp_path / "report.jsonl"
    code, out, err = audit(capsys, str(path), "--report", str(out_path))
    assert (code, err) == (1, "")
    assert [(r["id"], r["kind"]) for r in report(out_path)] == [("b", "lost tail")]
    assert table(out)["requests"] == "2"


def test_json_lines_of_batch_answers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """SGLang answers a batch request with a list: a log keeps one list per line."""
    _, ids, text = _sample()
    batch = [_sglang("g1", text, ids), _sglang("g2", text[:-1], ids)]
    path = write_lines(tmp_path / "batches.jsonl", [batch, [_sglang("g3", text, ids)], "[oops"])
    out_path = tmp_path / "report.jsonl"
    code, out, _ = audit(capsys, str(path), "--report", str(out_path))
    assert code == 2
    found = report(out_path)
    assert [(r.get("id"), r["line"]) for r in found] == [("g2", 1), (None, 3)]
    assert table(out)["requests"] == "3"


def test_engine_errors_are_skipped_not_audited(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An error answer (vLLM's newer ``{"error": {...}}``, its older ``{"object": "error"}``,
    SGLang's) is counted as skipped; a stream that an error ended is not compared."""
    prompt, ids, text = _sample()
    vllm = write_lines(
        tmp_path / "vllm.jsonl",
        [
            completion("a", prompt, ids, text),
            {"error": {"message": "too long", "type": "BadRequestError", "param": None, "code": 400}},
            {"object": "error", "message": "too long", "type": "BadRequestError", "param": None, "code": 400},
        ],
    )
    sglang = write_lines(
        tmp_path / "sglang.jsonl", [_sglang("g1", text, ids), {"error": {"message": "aborted"}}]
    )
    cut = _sse("s1", prompt, [(text[:1], ids[:1]), (text[1:4], ids[1:4])])[:2]
    error = ['data: {"error": {"message": "boom", "type": "InternalServerError", "code": 500}}', ""]
    stream = write_lines(tmp_path / "stream.sse", [*cut, *error, "data: [DONE]", ""])
    sglang_cut = {**_sglang("g2", text[:1], ids[:2]), "meta_info": {"id": "g2", "finish_reason": None}}
    sglang_stream = write_lines(
        tmp_path / "sglang.sse",
        [f"data: {json.dumps(sglang_cut)}", 'data: {"error": {"message": "boom"}}', "data: [DONE]"],
    )
    code, out, err = audit(capsys, str(vllm), str(sglang), str(stream), str(sglang_stream))
    assert (code, err) == (0, "")
    assert (table(out)["requests"], table(out)["skipped"]) == ("2", "5")


def test_chunks_as_json_lines_are_a_stream(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A client that logs each chunk as a line (``chunk.model_dump_json()``): a completion chunk's
    ``object`` is ``text_completion`` as a whole response's, but its ``finish_reason`` is null, as
    an SGLang chunk's ``meta_info.finish_reason`` is."""
    prompt, ids, text = _sample()
    chunks = [
        line[len("data: ") :] for line in _sse("c1", prompt, [(text[:3], ids[:3]), (text[3:], ids[3:])])
    ]
    path = write_lines(tmp_path / "chunks.jsonl", [line for line in chunks if line and "[DONE]" not in line])
    code, out, err = audit(capsys, str(path))
    assert (code, err) == (0, "")
    assert "vllm-stream: 1" in out and table(out)["streams"] == "1"
    _, ids, text = _sample()
    chunks = [
        line[len("data: ") :] for line in _sglang_stream("g", ids, [text[:2], text], [2, len(ids)], "new")
    ]
    path = write_lines(tmp_path / "sglang.jsonl", [line for line in chunks if line and "[DONE]" not in line])
    code, out, err = audit(capsys, str(path))
    assert (code, err) == (0, "")
    assert "sglang-stream: 1" in out and table(out)["streams"] == "1"


def test_a_stream_cut_before_its_end_is_compared_as_far_as_it_went(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No ``finish_reason`` (a client that disconnected, a log cut short): the text may still
    have been held (an incomplete character, the start of a stop string), so a text that is a
    beginning of the exact one is skipped, not a difference; a wrong text still is one."""
    prompt, ids, text = _sample()
    held = _sse("held", prompt, [(text[:1], ids[:1]), ("", ids[1:2])])[:2]  # "猫" still incomplete
    wrong = _sse("wrong", prompt, [(text[:1] + "x", ids[:1]), ("", ids[1:2])])[:2]
    path = write_lines(tmp_path / "cut.sse", [*held, *wrong, "retry: 3000"])
    out_path = tmp_path / "report.jsonl"
    code, out, err = audit(capsys, str(path), "--report", str(out_path))
    assert (code, err) == (1, "")
    assert [r["id"] for r in report(out_path)] == ["wrong"]
    assert (table(out)["requests"], table(out)["skipped"]) == ("1", "1")
    aborted = {
        "text": text[:1],
        "output_ids": ids[:1],
        "meta_info": {"id": "g", "finish_reason": {"type": "abort"}},
    }
    code, out, err = audit(capsys, str(write_lines(tmp_path / "aborted.jsonl", [aborted])))
    assert (code, err, table(out)["skipped"]) == (0, "", "1")


def test_ids_from_logprobs_asked_as_token_ids(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Servers before ``return_token_ids`` (vLLM < 0.10.2) give a choice's ids only in its logprobs,
    asked with ``return_tokens_as_token_ids``: each token ``"token_id:N"`` (a completion's
    ``logprobs.tokens``, a chat completion's ``logprobs.content[].token``), whole and streamed."""
    _, ids, text = _sample()

    def placeholders(part: list[int]) -> list[str]:
        return [f"token_id:{i}" for i in part]

    whole = completion("a", [], [], text[:-1], logprobs={"tokens": placeholders(ids), "text_offset": []})
    del whole["choices"][0]["token_ids"]
    content = [{"token": token, "logprob": -0.5, "bytes": None} for token in placeholders(ids)]
    chat = {"id": "b", "object": "chat.completion", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": {"content": content},
         "finish_reason": "length"}]}  # fmt: skip
    words = {"tokens": ["cat"], "text_offset": [0]}  # without return_tokens_as_token_ids
    plain = completion("c", [], [], text, logprobs=words)
    del plain["choices"][0]["token_ids"]
    path = write_lines(tmp_path / "logprobs.jsonl", [whole, chat, plain])
    out_path = tmp_path / "report.jsonl"
    code, _, err = audit(capsys, str(path), "--report", str(out_path))
    assert code == 2 and f"{path}:3: response c: a choice without token_ids" in err
    assert [(r.get("id"), r.get("kind")) for r in report(out_path)] == [("a", "lost tail"), (None, None)]
    chunks = []
    for index, (piece, part) in enumerate([(text[:2], ids[:2]), (text[2:], ids[2:])]):
        delta = {"index": 0, "delta": {"content": piece}, "finish_reason": "length" if index else None}
        delta["logprobs"] = {"content": [{"token": token, "logprob": 0.0} for token in placeholders(part)]}
        chunks += [
            f"data: {json.dumps({'id': 's', 'object': 'chat.completion.chunk', 'choices': [delta]})}",
            "",
        ]
    path = write_lines(tmp_path / "stream.sse", [*chunks, "data: [DONE]"])
    code, out, err = audit(capsys, str(path))
    assert (code, err) == (0, "") and table(out)["tokens"] == str(len(ids))


def test_choices_of_a_stream_are_named_as_in_a_whole_response(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``n`` > 1: the choices' chunks interleave, with a usage chunk (no choices) at the end;
    each choice is ``ID/INDEX``, as in a whole response."""
    prompt, ids, text = _sample()
    first = _sse("s", prompt, [(text[:2], ids[:2]), (text[2:-1], ids[2:])])
    second = [
        line.replace('"index": 0', '"index": 1')
        for line in _sse("s", prompt, [(text[:2], ids[:2]), (text[2:], ids[2:])])
    ]
    usage = {
        "id": "s",
        "object": "text_completion",
        "choices": [],
        "usage": {"completion_tokens": 2 * len(ids)},
    }
    lines = [first[0], second[0], first[2], second[2], f"data: {json.dumps(usage)}", "data: [DONE]"]
    out_path = tmp_path / "report.jsonl"
    code, out, _ = audit(capsys, str(write_lines(tmp_path / "n2.sse", lines)), "--report", str(out_path))
    assert code == 1 and table(out)["requests"] == "2"
    assert [(r["id"], r["kind"]) for r in report(out_path)] == [("s/0", "lost tail")]
    whole = completion("s", prompt, ids, text[:-1])
    whole["choices"].append({**whole["choices"][0], "index": 1, "text": text})
    code, _, _ = audit(capsys, str(write_lines(tmp_path / "n2.jsonl", [whole])), "--report", str(out_path))
    assert [r["id"] for r in report(out_path)] == ["s/0"]
    swapped = [first[0], second[0], second[2], first[2], "data: [DONE]"]
    code, _, _ = audit(capsys, str(write_lines(tmp_path / "n2b.sse", swapped)), "--report", str(out_path))
    assert [r["id"] for r in report(out_path)] == ["s/0"]


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_a_bad_item_of_a_json_array_is_named_and_the_rest_audited(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], engine: str
) -> None:
    prompt, ids, text = _sample()
    if engine == "vllm":
        good, short = completion("a", prompt, ids, text), completion("b", prompt, ids, text[:-1])
        bad = completion("c", prompt, ids, text, token_ids="1 2 3")
    else:
        good, short, bad = _sglang("a", text, ids), _sglang("b", text[:-1], ids), _sglang("c", text, [])
        bad["output_ids"] = None
    path = tmp_path / "array.json"
    path.write_text(json.dumps([good, bad, short], indent=2))
    out_path = tmp_path / "report.jsonl"
    code, out, err = audit(capsys, str(path), "--report", str(out_path))
    assert code == 2 and len(err.splitlines()) == 1 and f"{path}:2: not " in err
    assert [r.get("id") for r in report(out_path)] == [None, "b"]
    assert table(out)["requests"] == "2"


@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
def test_a_named_id_column_that_is_missing_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    """``--id-column`` names rows; a name the table does not have is said, not replaced by the
    row index. Ids may be strings or integers, list columns of int32 or int64, large or not."""
    import pyarrow
    import pyarrow.parquet

    prompt, ids, text = _sample()
    rows = [{"uid": 7, "prompt_ids": prompt, "response_ids": ids, "response_text": text[:-1]}]
    rows.append({**rows[0], "uid": "x", "prompt_ids": None})
    path = tmp_path / f"rows.{kind}"
    if kind == "jsonl":
        write_lines(path, rows)
    else:
        ints = pyarrow.large_list(pyarrow.int32())
        schema = pyarrow.schema([("uid", pyarrow.string()), ("prompt_ids", ints), ("response_ids", ints),
                                 ("response_text", pyarrow.large_string())])  # fmt: skip
        table_ = [{**row, "uid": str(row["uid"])} for row in rows]
        pyarrow.parquet.write_table(pyarrow.Table.from_pylist(table_, schema=schema), path)
    out_path = tmp_path / "report.jsonl"
    code, _, err = audit(capsys, str(path), "--id-column", "uid", "--report", str(out_path))
    assert (code, err) == (1, "")
    assert [r["id"] for r in report(out_path)] == [7 if kind == "jsonl" else "7", "x"]
    code, _, err = audit(capsys, str(path), "--id-column", "row_id")
    assert code == 2 and f"{path}:1: " in err and "'row_id'" in err


def test_sglang_prompt_token_ids_are_the_prompt(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Newer SGLang servers return the prompt's ids with ``return_prompt_token_ids``
    (``tokenizer_manager.py``: ``out_dict["prompt_token_ids"]``), whole and streamed; the exact
    text is then contract C's after them (on Llama-2 the output's first space shows only after
    a prompt)."""
    from helpers import _folder

    prompt, ids, text = _sample("llama2")
    whole = {**_sglang("g1", text, ids), "prompt_token_ids": prompt}
    chunk = {**_sglang("g2", text, ids), "prompt_token_ids": prompt}
    whole_path = write_lines(tmp_path / "sglang.jsonl", [whole])
    stream_path = write_lines(tmp_path / "sglang.sse", [f"data: {json.dumps(chunk)}", "data: [DONE]"])
    for path in (whole_path, stream_path):
        code, _, err = audit(capsys, str(path), "--tokenizer", str(_folder("llama2")))
        assert (code, err) == (0, ""), path


def test_a_log_that_begins_with_an_error_is_told_by_what_follows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prompt, ids, text = _sample()
    error = {"error": {"message": "too long"}}
    sglang = write_lines(tmp_path / "sglang.jsonl", [error, _sglang("g1", text, ids)])
    vllm = write_lines(
        tmp_path / "vllm.jsonl", [{"object": "error", "message": "x"}, completion("a", prompt, ids, text)]
    )
    chunk = {**_sglang("g2", text, ids), "meta_info": {"id": "g2", "finish_reason": {"type": "length"}}}
    stream = write_lines(
        tmp_path / "sglang.sse",
        [f"data: {json.dumps(error)}", "data: [DONE]", f"data: {json.dumps(chunk)}", "data: [DONE]"],
    )
    code, out, err = audit(capsys, str(sglang), str(vllm), str(stream))  # one tokenizer load
    assert (code, err) == (0, "") and "sglang: 1, vllm: 1, sglang-stream: 1" in out
    assert (table(out)["requests"], table(out)["skipped"]) == ("3", "3")


def test_a_directory_a_missing_file_and_null_ids_are_said_plainly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prompt, ids, text = _sample()
    rows = write_lines(
        tmp_path / "rows.jsonl", [{"prompt_ids": prompt, "response_ids": None, "response_text": text}]
    )
    code, _, err = audit(capsys, str(tmp_path), str(tmp_path / "gone.jsonl"), str(rows))
    assert code == 2 and err.splitlines() == [
        f"puredetok audit: error: {tmp_path}: Is a directory",
        f"puredetok audit: error: {tmp_path / 'gone.jsonl'}: No such file or directory",
        f"puredetok audit: error: {rows}:1: 'response_ids' is null",
    ]


def test_an_error_among_interleaved_streams_skips_the_requests_it_may_have_ended(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An error event names no request: every request then streaming is skipped, and their later
    chunks (interleaved with others') are passed over, never read as a request that began there."""
    prompt, ids, text = _sample("llama2")
    from helpers import _folder

    first = _sse("r1", prompt, [(text[:3], ids[:2]), (text[3:], ids[2:])])
    second = _sse("r2", prompt, [(text[:3], ids[:2]), (text[3:], ids[2:])])
    error = 'data: {"error": {"message": "boom"}}'
    after = _sse("r3", prompt, [(text, ids)])
    lines = [first[0], second[0], error, second[2], first[2], "data: [DONE]", *after]
    code, out, err = audit(
        capsys, str(write_lines(tmp_path / "mixed.sse", lines)), "--tokenizer", str(_folder("llama2"))
    )
    assert (code, err) == (0, "")
    assert (table(out)["requests"], table(out)["skipped"]) == ("1", "2")
