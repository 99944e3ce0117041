"""``puredetok audit``: engines' logged texts checked against the exact text of their ids.

The exact text a request should have is computed here with ``tokenizer.decode`` itself (contract
C: ``decode(p + s)`` after its common prefix with ``decode(p)``), never with the core, and the
inputs are built here in the engines' own response shapes.
"""

from __future__ import annotations

import functools
import json
import math
import re
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import CLEANED, CLEANUP_OBJECTS, cleanup_object, reference, tokenizer, vocabulary
from puredetok import codec_for
from puredetok._core import continuation_text
from puredetok.cli import main
from puredetok.testing.strategies import prompt_ids, text_ids, token_ids
from puredetok_audit import AuditOptions, Auditor, Chunk, Request, audit_shard, shards_of
from puredetok_audit._compare import Deferred

ROOT = Path(__file__).resolve().parents[2]
NAMES = ("qwen3", "llama2", "t5_small")
"""Byte-level BPE, SentencePiece with byte fallback, Metaspace: the field's three failure families."""


def exact(name: str, prompt: list[int], ids: list[int], skip: bool = True) -> str:
    """Contract C's text, from the tokenizer's own decode."""
    return continuation_text(reference(name, prompt, skip), reference(name, prompt + ids, skip))


def completion(uid: str, prompt: list[int], ids: list[int], text: str, **choice: Any) -> dict[str, Any]:
    """A vLLM completion response with ``return_token_ids``."""
    body = {"index": 0, "text": text, "token_ids": ids, "prompt_token_ids": prompt, "finish_reason": "length"}
    return {"id": uid, "object": "text_completion", "model": "m", "choices": [{**body, **choice}]}


def write_lines(path: Path, records: list[Any]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return path


def audit(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["audit", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def report(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def table(out: str) -> dict[str, str]:
    """The summary table's rows, by name."""
    return {name.strip(): value for name, value in (line.rsplit(None, 1) for line in out.splitlines())}


@functools.cache
def _auditor(name: str) -> Auditor:
    """One auditor per tokenizer, as the command keeps one for a whole file (a codec costs about
    half a second to build; the auditor keeps the ones it built)."""
    return Auditor(tokenizer(name))


# -- the exact text ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
@given(data=st.data())
def test_an_engine_text_that_is_the_decode_of_its_ids_is_equal(name: str, data: st.DataObject) -> None:
    """Contract C from the tokenizer's decode, any prompt, any ids of the whole vocabulary."""
    vocab = vocabulary(name)
    prompt = data.draw(prompt_ids(vocab))
    ids = data.draw(token_ids(vocab))
    request = Request("r", 1, tuple(prompt), tuple(ids), exact(name, prompt, ids))
    assert _auditor(name).check(request) is None


MUTATIONS = ("cut", "replace", "duplicate", "space")


@pytest.mark.parametrize("name", NAMES)
@given(data=st.data())
@settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
def test_a_changed_text_is_found_where_it_changes_and_named(name: str, data: st.DataObject) -> None:
    """Each way engines get text wrong, at a random place: the report names the first differing
    character, both texts around it, and the kind."""
    vocab = vocabulary(name)
    ids = data.draw(text_ids(vocab).filter(lambda ids: len(ids) >= 2))
    text = exact(name, [], ids)
    if not text or "\ufffd" in text:
        return
    mutation = data.draw(st.sampled_from(MUTATIONS))
    at = data.draw(st.integers(0, len(text) - 1))
    if mutation == "cut":
        engine, kind = text[:at], "lost tail"
    elif mutation == "replace":
        engine, kind = text[:at] + "\ufffd" + text[at + 1 :], "replacement characters"
    elif mutation == "duplicate":
        start = data.draw(st.integers(0, at))
        if start == at:
            return
        piece = text[start:at]
        engine = text[:at] + piece + text[at:]
        kind = "cleanup spacing" if not piece.strip(" ") else "duplicated text"
    else:
        engine, kind = text[:at] + " " + text[at:], "cleanup spacing"
    difference = _auditor(name).check(Request("r", 1, (), tuple(ids), engine))
    assert difference is not None
    offset = next((i for i, (a, b) in enumerate(zip(text, engine)) if a != b), min(len(text), len(engine)))
    assert difference.offset == offset
    assert difference.kind == kind
    assert difference.exact == text[max(0, offset - 20) : offset + 20]
    assert difference.engine == engine[max(0, offset - 20) : offset + 20]
    assert (difference.exact_length, difference.engine_length) == (len(text), len(engine))
    assert 0 <= difference.token < len(ids)


def test_the_token_of_the_difference_is_the_one_that_showed_the_character() -> None:
    tok = tokenizer("qwen3")
    ids = tok.encode("ab 你好世界")
    text = exact("qwen3", [], ids)
    at = text.index("界")
    difference = _auditor("qwen3").check(Request("r", 1, (), tuple(ids), text[:at]))
    assert difference is not None and difference.kind == "lost tail"
    shown = next(i for i in range(len(ids)) if "界" in reference("qwen3", ids[: i + 1], True))
    assert difference.token == shown


def test_a_stop_string_is_trimmed_as_the_record_says() -> None:
    ids = tokenizer("qwen3").encode("one\n\ntwo\n\nthree")
    full = exact("qwen3", [], ids)
    auditor = _auditor("qwen3")
    trimmed = Request("r", 1, (), tuple(ids), "one", "stop", "\n\n")
    assert auditor.check(trimmed) is None
    kept = Auditor(tokenizer("qwen3"), AuditOptions(include_stop_str_in_output=True))
    assert kept.check(Request("r", 1, (), tuple(ids), "one\n\n", "stop", "\n\n")) is None
    untrimmed = auditor.check(Request("r", 1, (), tuple(ids), full, "stop", "\n\n"))
    assert untrimmed is not None and untrimmed.kind == "stop trimming" and untrimmed.offset == 3


def test_a_stop_token_is_not_decoded_unless_kept() -> None:
    tok = tokenizer("qwen3")
    ids = [*tok.encode("done"), tok.convert_tokens_to_ids("<|im_end|>")]
    auditor = Auditor(tok, AuditOptions(skip_special_tokens=False))
    assert auditor.check(Request("r", 1, (), tuple(ids), "done", "stop", None, True)) is None
    shown = auditor.check(Request("r", 1, (), tuple(ids), "done<|im_end|>", "stop", None, True))
    assert shown is not None and shown.kind == "stop trimming"


def test_an_auditor_given_its_codec_loads_the_tokenizer_only_when_a_record_needs_it() -> None:
    """A worker of the audit on Ray is given the driver's codec and a deferred tokenizer: records
    of the given codec's options are checked without loading it; one that asks for the other
    options loads it once, and is checked as a fresh auditor checks it."""
    tok = tokenizer("qwen3")
    driver = Auditor(tok)
    driver.codec_of(None)
    loads: list[int] = []

    def load() -> Any:
        loads.append(1)
        return tok

    worker = Auditor(Deferred(load), AuditOptions(), driver.codecs)
    ids = [*tok.encode("done"), tok.convert_tokens_to_ids("<|im_end|>")]
    skipped = Request("r", 1, (), tuple(ids), "done!")
    kept = Request("k", 2, (), tuple(ids), "done", skip_special_tokens=False)
    assert worker.check(skipped) == Auditor(tok).check(skipped) is not None
    assert loads == []
    assert worker.check(kept) == Auditor(tok).check(kept) is not None
    assert worker.check(kept) == Auditor(tok).check(kept)
    assert loads == [1] and {skip for skip, _ in worker.codecs} == {True, False}


@pytest.mark.parametrize("label", CLEANUP_OBJECTS)
@pytest.mark.parametrize("window", [False, True])
def test_the_exact_text_is_the_decode_codec_for_models_with_cleanup(label: str, window: bool) -> None:
    """The exact text is the kit's and replay's: on an object whose decode has no cleanup option,
    ``transformers``' cleanup of its text, whether the codec streams it or ``decode`` is called (the
    fallback's path dropped the cleanup of a raw tokenizer and of a ``MistralCommonBackend``, and
    called mistral-common's and tiktoken's decode with ``skip_special_tokens``: TypeError)."""
    tok, ids = cleanup_object(label)
    options = AuditOptions(clean_up_tokenization_spaces=True)
    built = codec_for(tok, skip_special_tokens=True, clean_up_tokenization_spaces=True, window=window)
    auditor = Auditor(tok, options, {(True, True): built})
    assert auditor.check(Request("r", 1, (), ids, CLEANED[1])) is None
    shown = auditor.check(Request("r", 1, (), ids, CLEANED[0]))
    assert shown is not None and shown.kind == "cleanup spacing"


@pytest.mark.parametrize("name", NAMES)
def test_a_codec_pickled_to_a_worker_checks_as_the_drivers_does(name: str) -> None:
    """The codec goes to the Ray workers pickled by Ray (its cloudpickle, with their other
    arguments): given it, an auditor whose tokenizer would fail to load finds what a fresh auditor
    finds."""
    from ray import cloudpickle

    tok = tokenizer(name)
    driver = Auditor(tok)
    driver.codec_of(None)

    def unloadable() -> Any:
        raise AssertionError("the tokenizer was loaded")

    worker = Auditor(
        Deferred(unloadable), AuditOptions(), cloudpickle.loads(cloudpickle.dumps(driver.codecs))
    )
    ids = tok.encode("naïve café, 你好 world")
    text = exact(name, [], ids)
    for engine in (text, text[:-1], text + "!"):
        request = Request("r", 1, (), tuple(ids), engine)
        assert worker.check(request) == Auditor(tok).check(request)


def test_a_stream_chunk_that_a_later_chunk_contradicts_is_named() -> None:
    ids = tokenizer("qwen3").encode("你好 world")
    text = exact("qwen3", [], ids)
    chunks = (Chunk(text[:1], 1), Chunk("\ufffd", 1), Chunk(text[1:], len(ids) - 2))
    request = Request("r", 1, (), tuple(ids), "".join(c.text for c in chunks), chunks=chunks)
    difference = _auditor("qwen3").check(request)
    assert difference is not None
    assert difference.chunk == 1 and difference.kind == "replacement characters" and difference.offset == 1
    good = (Chunk(text[:1], 1), Chunk("", 1), Chunk(text[1:], len(ids) - 2))
    assert _auditor("qwen3").check(Request("r", 1, (), tuple(ids), text, chunks=good)) is None


# -- the formats, through the command -----------------------------------------------------------


def _sample(name: str = "qwen3") -> tuple[list[int], list[int], str]:
    tok = tokenizer(name)
    prompt = tok.encode("Translate: cat")
    ids = tok.encode(" 猫 (ねこ) is a cat.")
    return prompt, ids, exact(name, prompt, ids)


def test_vllm_completions_and_chat_completions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prompt, ids, text = _sample()
    chat = {
        "id": "chatcmpl-9",
        "object": "chat.completion",
        "prompt_token_ids": prompt,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "token_ids": ids,
                "finish_reason": "length",
            },
            {"index": 1, "message": {"role": "assistant", "content": text[:-1]}, "token_ids": ids},
        ],
    }
    reasoning = {
        **chat,
        "id": "chatcmpl-10",
        "choices": [{"index": 0, "message": {"reasoning_content": "hm", "content": text}, "token_ids": ids}],
    }
    path = write_lines(tmp_path / "vllm.jsonl", [completion("cmpl-1", prompt, ids, text), chat, reasoning])
    out_path = tmp_path / "report.jsonl"
    code, out, err = audit(capsys, str(path), "--report", str(out_path))
    assert code == 1 and not err
    found, split = report(out_path)
    assert (split["id"], split["kind"], split["parts"]) == (
        "chatcmpl-10",
        "parser split",
        ["reasoning", "content"],
    )
    assert found["id"] == "chatcmpl-9/1" and found["kind"] == "lost tail" and found["line"] == 2
    assert found["format"] == "vllm" and found["offset"] == len(text) - 1
    rows = table(out)
    assert (rows["requests"], rows["equal"], rows["differing"], rows["skipped"]) == ("4", "2", "1", "0")
    assert (rows["split by a parser"], rows["not joinable (parser split)"]) == ("1", "1")


def test_a_json_array_of_responses(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prompt, ids, text = _sample()
    path = tmp_path / "array.json"
    path.write_text(
        json.dumps([completion("a", prompt, ids, text), completion("b", prompt, ids, text + "!")])
    )
    out_path = tmp_path / "report.jsonl"
    code, _, _ = audit(capsys, str(path), "--report", str(out_path))
    assert code == 1
    assert [r["id"] for r in report(out_path)] == ["b"]


def _sse(uid: str, prompt: list[int], pieces: list[tuple[str, list[int]]], chat: bool = False) -> list[str]:
    lines = []
    for index, (text, ids) in enumerate(pieces):
        last = index == len(pieces) - 1
        choice: dict[str, Any] = {"index": 0, "token_ids": ids, "finish_reason": "length" if last else None}
        if chat:
            choice["delta"] = {"content": text}
        else:
            choice["text"] = text
        chunk: dict[str, Any] = {
            "id": uid,
            "object": "chat.completion.chunk" if chat else "text_completion",
            "choices": [choice],
        }
        if index == 0:
            if chat:
                chunk["prompt_token_ids"] = prompt
            else:
                choice["prompt_token_ids"] = prompt
        lines += [f"data: {json.dumps(chunk)}", ""]
    return [*lines, "data: [DONE]", ""]


def test_vllm_streams_chunk_by_chunk(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prompt, ids, text = _sample()
    good = _sse("cmpl-s1", prompt, [(text[:2], ids[:2]), (text[2:], ids[2:])])
    bad = _sse("chat-s2", prompt, [(text[:2], ids[:1]), ("\ufffd", ids[1:2]), (text[2:], ids[2:])], chat=True)
    path = write_lines(tmp_path / "stream.sse", [": a comment", *good, *bad])
    out_path = tmp_path / "report.jsonl"
    code, out, _ = audit(capsys, str(path), "--report", str(out_path))
    assert code == 1
    (found,) = report(out_path)
    assert found["id"] == "chat-s2" and found["format"] == "vllm-stream"
    assert found["chunk"] == 1 and found["chunks"] == 3 and found["kind"] == "replacement characters"
    assert "contradicted chunk" in out


def test_sglang_generate_outputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tok = tokenizer("qwen3")
    ids = tok.encode("first line\nsecond")
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    records = [
        {
            "text": "first line",
            "output_ids": ids,
            "meta_info": {"id": "s1", "finish_reason": {"type": "stop", "matched": "\n"}},
        },
        {
            "text": "first line\nsecond",
            "output_ids": [*ids, eos],
            "meta_info": {"id": "s2", "finish_reason": {"type": "stop", "matched": eos}},
        },
        {
            "text": "first line\nsecond",
            "output_ids": ids,
            "meta_info": {"id": "s3", "finish_reason": {"type": "stop", "matched": "\n"}},
        },
        {
            "text": "first line\nsec",
            "output_ids": ids,
            "meta_info": {"id": "s4", "finish_reason": {"type": "length", "length": 5}},
        },
    ]
    path = write_lines(tmp_path / "sglang.jsonl", records)
    out_path = tmp_path / "report.jsonl"
    code, _, _ = audit(capsys, str(path), "--report", str(out_path))
    assert code == 1
    found = report(out_path)
    assert [(r["id"], r["kind"], r["format"]) for r in found] == [
        ("s3", "stop trimming", "sglang"),
        ("s4", "lost tail", "sglang"),
    ]


def _rows() -> list[dict[str, Any]]:
    prompt, ids, text = _sample("llama2")
    return [
        {"uid": "a", "p": prompt, "r": ids, "t": text},
        {"uid": "b", "p": prompt, "r": ids, "t": text.replace(" ", "  ", 1)},
        {"uid": "c", "p": prompt, "r": ids, "t": text},
    ]


COLUMNS = ("--prompt-ids-column", "p", "--response-ids-column", "r", "--text-column", "t")


def test_rollouts_as_json_lines_with_named_columns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from helpers import _folder

    path = write_lines(tmp_path / "rollouts.jsonl", _rows())
    out_path = tmp_path / "report.jsonl"
    code, _, _ = audit(
        capsys, str(path), "--tokenizer", str(_folder("llama2")), *COLUMNS, "--report", str(out_path)
    )
    assert code == 1
    assert [(r["id"], r["kind"]) for r in report(out_path)] == [(1, "cleanup spacing")]
    code, _, _ = audit(
        capsys,
        str(path),
        "--tokenizer",
        str(_folder("llama2")),
        *COLUMNS,
        "--id-column",
        "uid",
        "--report",
        str(out_path),
    )
    assert [r["id"] for r in report(out_path)] == ["b"]


def test_rollouts_as_parquet_one_row_group_per_shard(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import pyarrow
    import pyarrow.parquet

    from helpers import _folder

    rows = _rows() * 3
    path = tmp_path / "rollouts.parquet"
    pyarrow.parquet.write_table(pyarrow.Table.from_pylist(rows), path, row_group_size=2)
    assert len(shards_of(str(path))) == 5
    out_path = tmp_path / "report.jsonl"
    code, out, _ = audit(
        capsys, str(path), "--tokenizer", str(_folder("llama2")), *COLUMNS, "--report", str(out_path)
    )
    assert code == 1
    assert [r["id"] for r in report(out_path)] == [1, 4, 7]
    code, _, err = audit(capsys, str(path), "--tokenizer", str(_folder("llama2")), "--report", str(out_path))
    assert code == 2 and "no column 'response_ids'" in err


def test_a_puredetok_trace_is_audited_through_the_manager(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = audit(capsys, str(ROOT / "docs" / "sample-trace.jsonl"))
    assert code == 0, err
    requests = int(next(line.split()[-1] for line in out.splitlines() if line.startswith("requests")))
    assert requests >= 5
    assert (
        int(next(line.split()[-1] for line in out.splitlines() if line.startswith("skipped"))) == 1
    )  # uid 4 aborted


# -- bad input: named, and the rest still audited ------------------------------------------------


def test_bad_lines_are_named_and_the_rest_is_audited(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prompt, ids, text = _sample()
    no_ids = completion("cmpl-x", prompt, ids, text)
    del no_ids["choices"][0]["token_ids"]
    path = write_lines(
        tmp_path / "log.jsonl",
        [
            completion("cmpl-1", prompt, ids, text),
            "{not json",
            no_ids,
            completion("cmpl-oov", prompt, [10**9], "?"),
            completion("cmpl-4", prompt, ids, text[:-3]),
        ],
    )
    missing = tmp_path / "missing.jsonl"
    out_path = tmp_path / "report.jsonl"
    code, out, err = audit(capsys, str(path), str(missing), "--report", str(out_path))
    assert code == 2
    lines = err.splitlines()
    assert lines[0].startswith(f"puredetok audit: error: {missing}:")
    assert any(f"{path}:2: not a vLLM response" in line for line in lines)
    assert any(f"{path}:3: response cmpl-x: a choice without token_ids" in line for line in lines)
    assert any(f"{path}:4: request cmpl-oov:" in line and "1000000000" in line for line in lines)
    assert lines[4] == (
        "puredetok audit: warning: 1 request has ids past the vocabulary (151,669 ids): the tokenizer "
        "may not be the one that generated these ids: pass --tokenizer (this audit used embedded Qwen3, "
        "byte-level BPE)"
    )
    assert len(lines) == 5
    found = report(out_path)
    assert [r.get("id") for r in found if "error" not in r] == ["cmpl-4"]
    assert [r["line"] for r in found if "error" in r] == [2, 3, 4]


@pytest.mark.parametrize(
    ("content", "message"),
    [("plain words\n", "line 1 is not JSON"), ("", "the file is empty"), ("[1, 2]", "JSON array of neither")],
)
def test_a_file_of_no_known_format_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, message: str
) -> None:
    path = tmp_path / "what.txt"
    path.write_text(content)
    code, _, err = audit(capsys, str(path))
    assert code == 2 and f"{path}: " in err and message in err and len(err.splitlines()) == 1


def test_a_tokenizer_that_cannot_load_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_lines(tmp_path / "log.jsonl", [completion("a", [], [1], '"')])
    code, out, err = audit(capsys, str(path), "--tokenizer", str(tmp_path / "nowhere"))
    assert code == 2 and not out and len(err.splitlines()) == 1 and "nowhere" in err


def test_all_equal_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prompt, ids, text = _sample()
    path = write_lines(tmp_path / "log.jsonl", [completion(str(i), prompt, ids, text) for i in range(3)])
    out_path = tmp_path / "report.jsonl"
    code, out, err = audit(capsys, str(path), "--report", str(out_path))
    assert (code, err, out_path.read_text()) == (0, "", "")


# -- shards: any cut gives the same report ----------------------------------------------------


def _mixed_log(tmp_path: Path, count: int) -> Path:
    prompt, ids, text = _sample()
    records: list[Any] = []
    for i in range(count):
        engine = text if i % 3 else text[: i % len(text)]
        records.append(completion(f"c{i}", prompt, ids, engine))
        if i % 7 == 5:
            records.append("oops")
    return write_lines(tmp_path / "mixed.jsonl", records)


@given(size=st.integers(1, 3000), stream=st.sampled_from([None, "vllm", "sglang"]))
@settings(max_examples=10, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_any_shard_size_gives_the_same_report(tmp_path: Path, size: int, stream: str | None) -> None:
    lines: list[Any] = []
    if stream == "sglang":
        prompt, ids, text = _sample()
        for i in range(12):
            engine = text if i % 3 else text[:-1]
            lines += _sglang_stream(f"g{i}", ids, [engine[:3], engine], [2, len(ids)], SGLANG_MODES[i % 3])
        path = write_lines(tmp_path / "g.sse", lines)
    elif stream:
        prompt, ids, text = _sample()
        for i in range(12):
            engine = text if i % 3 else text[:-1]
            lines += _sse(f"s{i}", prompt, [(engine[:3], ids[:2]), (engine[3:], ids[2:])])
        path = write_lines(tmp_path / "s.sse", lines)
    else:
        path = _mixed_log(tmp_path, 20)
    auditor = _auditor("qwen3")
    whole = [audit_shard(shard, auditor) for shard in shards_of(str(path))]
    cut = [audit_shard(shard, auditor) for shard in shards_of(str(path), size=size)]
    assert len(whole) == 1
    assert [r for result in cut for r in result.records] == whole[0].records
    assert sum(result.tally.requests for result in cut) == whole[0].tally.requests


# -- Ray: the same report as the local run ----------------------------------------------------


@pytest.mark.timeout(300)
def test_on_a_local_ray_the_report_is_the_local_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ray = pytest.importorskip("ray")
    path = _mixed_log(tmp_path, 40)
    local, distributed = tmp_path / "local.jsonl", tmp_path / "ray.jsonl"
    code, out, err = audit(capsys, str(path), "--report", str(local), "--shard-bytes", "2000")
    try:
        ray_code, ray_out, ray_err = audit(
            capsys,
            str(path),
            "--report",
            str(distributed),
            "--shard-bytes",
            "2000",
            "--ray",
            "--ray-cpus",
            "2",
        )
    finally:
        ray.shutdown()
    assert code == ray_code == 2
    assert distributed.read_text() == local.read_text() and report(local)
    ours = [line for line in ray_err.splitlines() if line.startswith("puredetok audit:")]
    assert err.splitlines() == ours and ours
    table = [line for line in out.splitlines() if not line.startswith(("seconds", "tokens/s"))]
    assert table == [line for line in ray_out.splitlines() if not line.startswith(("seconds", "tokens/s"))]


def test_memory_stays_flat_as_the_log_grows(tmp_path: Path) -> None:
    """Shard by shard, a four times longer log (every request differing) peaks no higher."""
    import tracemalloc

    prompt, ids, text = _sample()
    auditor = _auditor("qwen3")
    auditor.check(Request("warm", 1, tuple(prompt), tuple(ids), text))

    def peak(count: int) -> int:
        path = write_lines(
            tmp_path / f"log{count}.jsonl", [completion(str(i), prompt, ids, text[:-1]) for i in range(count)]
        )
        shards = shards_of(str(path), size=20_000)
        tracemalloc.start()
        try:
            differing = sum(audit_shard(shard, auditor).tally.differing for shard in shards)
            assert differing == count
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    small, large = peak(100), peak(400)
    assert large < 1.5 * small


def test_the_documented_report_is_real(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/audit.md shows the report and table of docs/sample-responses.jsonl as they are."""
    monkeypatch.chdir(ROOT)
    page = (ROOT / "docs" / "audit.md").read_text(encoding="utf-8")
    out_path = tmp_path / "report.jsonl"
    code, out, err = audit(capsys, "docs/sample-responses.jsonl", "--report", str(out_path))
    assert code == 2 and err.count("\n") == 1
    shown = page[page.index("```json\n") + 8 :]
    assert shown[: shown.index("```")] == out_path.read_text(encoding="utf-8")
    table = page[page.index("```\ndocs/sample-responses.jsonl:2:") + 4 :]
    rows = table[: table.index("```")].splitlines()
    assert [r for r in rows if not r.startswith(("seconds", "tokens/s"))] == [
        r for r in out.splitlines() if not r.startswith(("seconds", "tokens/s"))
    ]


def test_a_forced_format_reads_chunks_without_events(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prompt, ids, text = _sample()
    lines = [
        line.removeprefix("data: ")
        for line in _sse("c", prompt, [(text[:3], ids[:2]), (text[3:] + "x", ids[2:])])
    ]
    path = write_lines(tmp_path / "chunks.jsonl", [line for line in lines if line and line != "[DONE]"])
    out_path = tmp_path / "report.jsonl"
    code, _, _ = audit(capsys, str(path), "--format", "vllm-stream", "--report", str(out_path))
    assert code == 1
    (found,) = report(out_path)
    assert found["format"] == "vllm-stream" and found["chunks"] == 2 and found["chunk"] == 1


@pytest.mark.timeout(300)
def test_on_ray_data_every_shard_is_the_local_one(tmp_path: Path) -> None:
    """Several shards to a batch, two workers: every shard's findings and counts, in shard
    order, are the local run's; the workers audit with the driver's codec, the tokenizer not
    loaded. Ray warns of none of the audit's own calls (Ray 2.60 warned that the remote arguments
    it passes ``max_retries`` through go in 2.64, a warning its users could not act on)."""
    ray = pytest.importorskip("ray")
    from puredetok_audit import Columns
    from puredetok_audit import _distributed as distributed
    from puredetok_audit._distributed import audit_on_ray, batch_sizes

    shards = shards_of(str(_mixed_log(tmp_path, 30)), size=1500)
    from puredetok.serving._loading import load_tokenizer

    auditor = Auditor(load_tokenizer("qwen3"))
    local = [audit_shard(shard, auditor) for shard in shards]
    assert len(shards) > 3 and batch_sizes(len(shards), 2)[0] > 1
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            # the workers are given the driver's codec: a tokenizer they could not load is never loaded
            found = list(audit_on_ray(shards, auditor, "no-such-tokenizer", Columns(), num_cpus=2))
    finally:
        ray.shutdown()
    assert not [str(w.message) for w in caught if w.filename == distributed.__file__]
    assert [(r.index, r.records, r.tally) for r in found] == [(r.index, r.records, r.tally) for r in local]
    assert all(r.timing is not None and r.timing.cpu >= 0 for r in found)
    assert len({r.timing.pid for r in found}) == 2


@pytest.mark.timeout(300)
def test_a_worker_an_earlier_run_left_idle_audits_the_next_run_without_starting_again(
    tmp_path: Path,
) -> None:
    """Two runs in one local Ray session, the second once the first's workers have sat idle 3 s:
    the second run's shards are audited by the first's processes, which only fetch the run's
    codec (no Ray worker started, nothing imported: an actor pool's are new every run), and
    both runs' findings are the local run's."""
    ray = pytest.importorskip("ray")
    from puredetok_audit import Columns
    from puredetok_audit._distributed import audit_on_ray

    shards = shards_of(str(_mixed_log(tmp_path, 30)), size=1500)
    from puredetok.serving._loading import load_tokenizer

    auditor = Auditor(load_tokenizer("qwen3"))
    local = [(r.index, r.records, r.tally) for r in (audit_shard(shard, auditor) for shard in shards)]
    try:
        first = list(audit_on_ray(shards, auditor, "qwen3", Columns(), num_cpus=2))
        time.sleep(3)
        second = list(audit_on_ray(shards, auditor, "qwen3", Columns(), num_cpus=2))
    finally:
        ray.shutdown()
    for found in (first, second):
        assert [(r.index, r.records, r.tally) for r in found] == local
    started = {r.timing.pid: r.timing.ready_cpu for r in first if r.timing is not None}
    again = {r.timing.pid: r.timing.ready_cpu for r in second if r.timing is not None}
    assert len(again) == len(started) == 2 and set(again) == set(started)
    # a new process had used a second or so of CPU when ready; one left idle only fetches the codec
    assert all(again[pid] < started[pid] / 4 for pid in again)


@given(st.integers(1, 5_000), st.integers(1, 8), st.integers(1, 64))
def test_batches_shrink_as_the_shards_run_out(shards: int, workers: int, most: int) -> None:
    """Every shard in one batch, in order; each batch at most ``most`` shards and one
    ``2 * workers``-th of those left (the last ones small: a worker ending first waits little),
    and few batches: the capped ones, then about ``2 * workers`` per halving of what is left."""
    from puredetok_audit._distributed import batch_sizes

    sizes = batch_sizes(shards, workers, most)
    assert sum(sizes) == shards and min(sizes) >= 1 and max(sizes) <= most
    left = shards
    for size in sizes:
        assert size <= max(1, math.ceil(left / (2 * workers)))
        left -= size
    assert sizes == sorted(sizes, reverse=True) and sizes[-1] == 1
    assert len(sizes) <= shards / most + 2 * workers * (math.log2(most) + 2)


def test_the_benchmark_prints_its_measures(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks.audit import main as bench

    assert bench(["--tokens", "2000", "--repeats", "2", "--no-ray"]) == 0
    out = capsys.readouterr().out
    assert "M tokens / CPU second (one core)" in out and "target >= 1.0" in out
    assert "peak traced memory" in out


@pytest.mark.timeout(300)
def test_the_benchmarks_ray_section_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """Its Ray section, on small logs, once: the plain log's ratio and the one gzip file's."""
    pytest.importorskip("ray")
    from benchmarks.audit import main as bench

    small = ["--tokens", "2000", "--ray-tokens", "4000", "--ray-gzip-tokens", "4000", "--repeats", "1"]
    assert bench([*small, "--ray-shard-bytes", "4000"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"speed-up, 2 workers / 1, end to end +\d+\.\d\d - \d+\.\d\d +target >= 1\.6", out)
    assert re.search(
        r"one gzip file of 4,000 ids, shared by the workers: .*; 2 / 1 in order: \d+\.\d\d$", out, re.M
    )


def test_the_ray_breakdown_says_where_the_time_went() -> None:
    """Two workers, started 2 s into a 10 s run, each auditing two 2-second shards at half a core,
    idle 0.5 s between them."""
    from benchmarks.audit import breakdown
    from puredetok_audit._distributed import Timing

    shards = [
        Timing(pid, 100.5, 100.5 + pid, 0.5 * pid, 102.0 + at, 104.0 + at, 1.0)
        for pid in (1, 2)
        for at in (0.0, 2.5)
    ]
    found = breakdown([(100.0, 8_000_000), *shards], 10.0)
    assert found["start"] == 2.0 and found["span"] == 4.5
    assert found["a worker's CPU s before its first shard"] == 1.0
    assert found["after"] == 3.5 and found["at once"] == 8.0 / 4.5 and found["cpu share"] == 0.5
    assert found["idle between two shards, s"] == 0.5
    assert found["cores"] == 4.0 / 4.5 and found["M ids / worker CPU s"] == 2.0


def test_the_ray_cpu_use_says_what_the_design_costs() -> None:
    """Four shards of 1 CPU second each from 2 s into a 10 s run; the driver spent 0.4 s and
    Ray's own processes 0.4 s: 0.1 s each per shard, 4.8 CPU seconds over 8 s, and two workers
    could be 2 x 1 / 1.2 times as fast as one on two free cores."""
    from benchmarks.audit import cpu_bound, cpu_use
    from puredetok_audit._distributed import Timing

    shards = [
        Timing(pid, 100.5, 101.0, 1.0, 102.0 + at, 104.0 + at, 1.0) for pid in (1, 2) for at in (0.0, 2.5)
    ]
    use = cpu_use([(100.0, 8_000_000), *shards], 10.0, {"driver": 0.4, "ray": 0.4})
    assert use["worker CPU s / shard"] == 1.0 and use["driver CPU s / shard"] == 0.1
    assert use["Ray's own CPU s / shard"] == 0.1 and use["cores busy (all processes)"] == pytest.approx(
        4.8 / 8.0
    )
    assert (
        cpu_bound(use) == 2.0 / 1.2
        and cpu_bound({**use, "driver CPU s / shard": 0.0, "Ray's own CPU s / shard": 0.0}) == 2.0
    )


def test_a_long_audit_shows_a_progress_bar(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bar (on stderr, in bytes of the input) appears once an audit has run ``PROGRESS_AFTER``
    seconds; here that delay is 0, so that a fast machine, which audits this log in less than the
    usual half second, shows it too."""
    import puredetok_audit._cli.audit

    monkeypatch.setattr(puredetok_audit._cli.audit, "PROGRESS_AFTER", 0.0)
    path = _mixed_log(tmp_path, 30)
    code, out, err = audit(capsys, str(path), "--progress", "--skip-special-tokens", "--shard-bytes", "500")
    assert code == 2 and "audit:" in err and ("B/s" in err or "B]" in err)
    code, _, quiet = audit(capsys, str(path), "--skip-special-tokens")
    assert "B/s" not in quiet and "B]" not in quiet


def test_an_auditor_builds_the_codecs_of_trace_replays_once(tmp_path: Path) -> None:
    """Each trace file was replayed by a manager of its own, building its codec's tables again (a
    second or so per file, whatever its size)."""
    auditor = Auditor(tokenizer("qwen3"))
    source = (ROOT / "docs" / "sample-trace.jsonl").read_bytes()
    seen = []
    for name in ("a.jsonl", "b.jsonl"):
        path = tmp_path / name
        path.write_bytes(source)
        assert sum(audit_shard(shard, auditor).tally.requests for shard in shards_of(str(path))) > 0
        seen.append(auditor.replay_codecs.kept())
    assert seen[0] and all(codec in map(id, seen[1]) for codec in map(id, seen[0]))


def test_an_auditor_and_its_trace_replays_share_one_codec() -> None:
    """The auditor built its codec with codec_for and each trace's manager its own again (two
    builds of the same tables, a second or so each)."""
    from puredetok.serving import SamplingParams
    from puredetok_audit.replay import Replayer

    auditor = Auditor(tokenizer("qwen3"))
    replayer = Replayer(auditor.tokenizer, codecs=auditor.replay_codecs)
    assert auditor.codec_of(None) is replayer.manager.codec_of(SamplingParams())


# -- SGLang's streamed /generate -----------------------------------------------------------------


def _sglang_stream(
    uid: str, ids: list[int], texts: list[str], cuts: list[int], mode: str, finish: Any = None
) -> list[str]:
    """SGLang's server-sent events for one request, in one of its servers' modes: ``"whole"``
    (text and ids so far, the default), ``"new"`` (``--incremental-streaming-output``: the new text
    and ids) or ``"new-ids"`` (older servers' ``--stream-output``: the new ids, the text so far).
    ``texts`` are the texts so far after each chunk, ``cuts`` the ids so far."""
    lines, previous_text, previous = [], "", 0
    for index, (text, cut) in enumerate(zip(texts, cuts)):
        last = index == len(texts) - 1
        meta = {
            "id": uid,
            "finish_reason": (finish or {"type": "length", "length": cut}) if last else None,
            "prompt_tokens": 3,
            "completion_tokens": cut,
        }
        chunk = {
            "text": text if mode != "new" else text[len(previous_text) :],
            "output_ids": ids[:cut] if mode == "whole" else ids[previous:cut],
            "meta_info": meta,
        }
        lines += [f"data: {json.dumps(chunk, ensure_ascii=False)}", ""]
        previous_text, previous = text, cut
    return [*lines, "data: [DONE]", ""]


SGLANG_MODES = ("whole", "new", "new-ids")


@pytest.mark.parametrize("mode", SGLANG_MODES)
@given(data=st.data())
@settings(max_examples=15, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_sglang_streams_of_every_mode_are_read_exactly(
    tmp_path: Path, mode: str, data: st.DataObject
) -> None:
    """Any cut of the ids and of the text into chunks, in each server mode: no difference, and
    the ids and text read are the request's own."""
    vocab = vocabulary("qwen3")
    ids = data.draw(text_ids(vocab).filter(lambda ids: len(ids) >= 1))
    text = exact("qwen3", [], ids)
    count = data.draw(st.integers(1, min(6, len(ids))))
    cuts = sorted(data.draw(st.lists(st.integers(1, len(ids)), min_size=count - 1, max_size=count - 1)))
    marks = sorted(data.draw(st.lists(st.integers(0, len(text)), min_size=count - 1, max_size=count - 1)))
    lines = _sglang_stream("g1", ids, [text[:m] for m in marks] + [text], [*cuts, len(ids)], mode)
    path = write_lines(tmp_path / "sglang.sse", lines)
    ((shard),) = shards_of(str(path))
    assert shard.format == "sglang-stream"
    result = audit_shard(shard, _auditor("qwen3"))
    assert result.records == [] and result.tally.requests == result.tally.streams == 1
    assert result.tally.tokens == len(ids)


@pytest.mark.parametrize("mode", SGLANG_MODES)
def test_sglang_stream_chunks_are_checked_one_by_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], mode: str
) -> None:
    """A chunk that shows a replacement character a later chunk takes back is named; a lost tail
    is found; an error chunk is skipped, a bad line named, the rest audited."""
    tok = tokenizer("qwen3")
    ids = tok.encode("猫 and 犬")
    text = exact("qwen3", [], ids)
    taken_back = _sglang_stream("bad", ids, ["\ufffd", text[:1], text], [1, 2, len(ids)], mode)
    if mode == "new":  # new texts: the first chunk's "\ufffd" and then the whole text
        taken_back = _sglang_stream("bad", ids, ["\ufffd", "\ufffd" + text], [1, len(ids)], mode)
    good = _sglang_stream("good", ids, [text[:1], text], [2, len(ids)], mode)
    short = _sglang_stream("short", ids, [text[:1], text[:-1]], [2, len(ids)], mode)
    error = ['data: {"error": {"message": "the request was aborted"}}', "", "data: [DONE]", ""]
    path = write_lines(tmp_path / "g.sse", [*good, *taken_back, "data: {oops", "", *error, *short])
    out_path = tmp_path / "report.jsonl"
    code, out, err = audit(capsys, str(path), "--report", str(out_path))
    assert code == 2
    assert err.splitlines() == [f"puredetok audit: error: {path}:{len(good) + len(taken_back) + 1}: "
                                + err.splitlines()[0].split(": ", 3)[-1]]  # fmt: skip
    assert "not an SGLang /generate stream chunk" in err
    found = [r for r in report(out_path) if "error" not in r]
    assert [(r["id"], r["format"], r["chunk"]) for r in found] == [
        ("bad", "sglang-stream", 0),
        ("short", "sglang-stream", None),
    ]
    assert found[0]["kind"] == "replacement characters" and found[0]["offset"] == 0
    assert found[1]["kind"] == "lost tail"
    rows = table(out)
    assert rows["requests"] == "3" and rows["skipped"] == "1" and rows["with a contradicted chunk"] == "1"


def test_sglang_stream_stop_string_and_token(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tok = tokenizer("qwen3")
    ids = tok.encode("first line\nsecond")
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    stop = _sglang_stream(
        "s1", ids, ["first", "first line"], [1, len(ids)], "whole", {"type": "stop", "matched": "\n"}
    )
    token = _sglang_stream(
        "s2", [*ids, eos], ["first", "first line\nsecond"], [1, len(ids) + 1], "new",
        {"type": "stop", "matched": eos},
    )  # fmt: skip
    path = write_lines(tmp_path / "g.sse", [*stop, *token])
    code, out, err = audit(capsys, str(path))
    assert (code, err) == (0, "")


# -- chat responses a reasoning or tool parser split ---------------------------------------------

THOUGHT = "<think>\n猫 is cat.\n</think>\n\n"


def _chat(uid: str, prompt: list[int], ids: list[int], **message: Any) -> dict[str, Any]:
    """A vLLM chat completion whose text a parser split into ``message``'s fields."""
    choice = {
        "index": 0,
        "message": {"role": "assistant", **message},
        "token_ids": ids,
        "finish_reason": "length",
    }
    return {"id": uid, "object": "chat.completion", "prompt_token_ids": prompt, "choices": [choice]}


def _split_cases() -> tuple[list[dict[str, Any]], list[str], list[str]]:
    """Responses split as vLLM's parsers split them (equal), wrong ones (differing), and ones
    whose pieces cannot be joined again exactly (parser split)."""
    tok = tokenizer("qwen3")
    prompt = tok.encode("Translate: cat")
    call = '<tool_call>\n{"name": "lookup", "arguments": {"word": "猫"}}\n</tool_call>'
    think = tok.encode(THOUGHT + "It means cat.")
    bare = tok.encode("猫 is cat.\n</think>\n\nIt means cat.")  # <think> was in the prompt
    tool = tok.encode(THOUGHT + "Let me look.\n" + call)
    cut = tok.encode("<think>\n猫 is")  # ended by length inside the reasoning
    reasoning = exact("qwen3", prompt, think)[len("<think>") :].split("</think>")[0]
    lookup = {"type": "function", "function": {"name": "lookup", "arguments": '{"word": "猫"}'}}
    equal = [
        _chat("eq-1", prompt, think, reasoning_content=reasoning, content="\n\nIt means cat."),
        _chat("eq-2", prompt, bare, reasoning=reasoning[1:], content="\n\nIt means cat."),
        _chat(
            "eq-3",
            prompt,
            tool,
            reasoning_content=reasoning,
            content="\n\nLet me look.\n",
            tool_calls=[lookup],
        ),
        _chat("eq-4", prompt, cut, reasoning_content="\n猫 is", content=None),
        _chat("eq-5", prompt, tok.encode(call), content=None, tool_calls=[{"id": "x", **lookup}]),
    ]
    differing = [
        _chat("d-1", prompt, think, reasoning_content=reasoning, content="\n\nIt means ca"),
        _chat(
            "d-2",
            prompt,
            think,
            reasoning_content=reasoning.replace("猫", "\ufffd"),
            content="\n\nIt means cat.",
        ),
        _chat("d-3", prompt, tool, reasoning_content=reasoning, content="\n\nLet me\n", tool_calls=[lookup]),
    ]
    unjoinable = [
        _chat("s-1", prompt, think, reasoning_content=reasoning.strip(), content="It means cat."),
        _chat("s-2", prompt, tool, reasoning_content=reasoning, content="\n\nLet me look.\n",
              tool_calls=[{"type": "function", "function": {"name": "search", "arguments": "{}"}}]),
        _chat("s-3", prompt, tok.encode("hm. It means cat."), reasoning_content="hm.",
              content=" It means cat."),
    ]  # fmt: skip
    return equal + differing + unjoinable, ["d-1", "d-2", "d-3"], ["s-1", "s-2", "s-3"]


def test_split_chat_responses_are_compared_as_the_parser_split_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Reasoning, content and tool calls joined again in the parser's order with the text's own
    markers: the parser's split is never a difference; a wrong piece is, where it is wrong; pieces
    that cannot be joined again exactly are kind "parser split", not counted as differing."""
    records, differing, unjoinable = _split_cases()
    path = write_lines(tmp_path / "chat.jsonl", records)
    out_path = tmp_path / "report.jsonl"
    code, out, err = audit(capsys, str(path), "--report", str(out_path))
    assert (code, err) == (1, "")
    found = {r["id"]: r for r in report(out_path)}
    assert [i for i, r in found.items() if r["kind"] != "parser split"] == differing
    assert [i for i, r in found.items() if r["kind"] == "parser split"] == unjoinable
    assert found["d-1"]["kind"] == "lost tail" and found["d-1"]["engine"].endswith("It means ca")
    assert found["d-2"]["kind"] == "replacement characters"
    assert found["d-2"]["offset"] == len("<think>\n")
    assert found["d-3"]["parts"] == ["reasoning", "content", "tool"]
    rows = table(out)
    assert (rows["requests"], rows["equal"], rows["differing"]) == ("11", "5", "3")
    assert (rows["split by a parser"], rows["not joinable (parser split)"]) == ("11", "3")
    only_equal = write_lines(tmp_path / "equal.jsonl", records[:5])
    assert audit(capsys, str(only_equal))[0] == 0


def test_split_chat_streams_are_joined_from_their_deltas(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tok = tokenizer("qwen3")
    prompt = tok.encode("Translate: cat")
    ids = tok.encode(THOUGHT + "It means cat.")
    reasoning = exact("qwen3", prompt, ids)[len("<think>") :].split("</think>")[0]

    def stream(uid: str, content: str) -> list[str]:
        deltas = [
            ({"reasoning_content": reasoning[:3]}, ids[:3]),
            ({"reasoning_content": reasoning[3:]}, ids[3:-4]),
            ({"content": content[:5]}, ids[-4:-2]),
            ({"content": content[5:]}, ids[-2:]),
        ]
        lines = []
        for index, (delta, chunk_ids) in enumerate(deltas):
            last = index == len(deltas) - 1
            choice = {
                "index": 0,
                "delta": delta,
                "token_ids": chunk_ids,
                "finish_reason": "length" if last else None,
            }
            chunk: dict[str, Any] = {"id": uid, "object": "chat.completion.chunk", "choices": [choice]}
            if index == 0:
                chunk["prompt_token_ids"] = prompt
            lines += [f"data: {json.dumps(chunk)}", ""]
        return [*lines, "data: [DONE]", ""]

    path = write_lines(
        tmp_path / "chat.sse", [*stream("good", "\n\nIt means cat."), *stream("bad", "\n\nIt means a cat.")]
    )
    out_path = tmp_path / "report.jsonl"
    code, out, err = audit(capsys, str(path), "--report", str(out_path))
    assert (code, err) == (1, "")
    (found,) = report(out_path)
    assert found["id"] == "bad" and found["format"] == "vllm-stream" and found["kind"] == "other"
    assert found["parts"] == ["reasoning", "content"] and (found["chunk"], found["chunks"]) == (3, 4)
    rows = table(out)
    assert (rows["split by a parser"], rows["streams"], rows["with a contradicted chunk"]) == ("2", "2", "1")


def _vllm_think_parser(output: str) -> tuple[str | None, str | None]:
    """vLLM's ``BaseThinkingReasoningParser.extract_reasoning``, as its source reads."""
    parts = output.partition("<think>")
    output = parts[2] if parts[1] else parts[0]
    if "</think>" not in output:
        return output, None
    reasoning, _, content = output.partition("</think>")
    return reasoning, content or None


@given(data=st.data())
@settings(max_examples=20)
def test_a_parser_split_of_any_output_is_never_a_difference(data: st.DataObject) -> None:
    """Random text with or without each marker, split as vLLM's reasoning parser splits it."""
    tok = tokenizer("qwen3")
    vocab = vocabulary("qwen3")
    start = data.draw(st.sampled_from([[], tok.encode("<think>")]))
    end = data.draw(st.sampled_from([[], tok.encode("</think>")]))
    ids = [*start, *data.draw(text_ids(vocab)), *end, *data.draw(text_ids(vocab))]
    text = exact("qwen3", [], ids)
    reasoning, content = _vllm_think_parser(text)
    parts = tuple((k, v) for k, v in (("reasoning", reasoning), ("content", content)) if v is not None)
    request = Request("r", 1, (), tuple(ids), content or "", parts=parts)
    difference = _auditor("qwen3").check(request)
    assert difference is None or difference.kind == "parser split"


def test_a_stream_of_all_the_ids_so_far_is_held_once() -> None:
    """SGLang's default stream repeats every id in every chunk: the reader keeps the last chunk's
    ids, not all of them (whose size grows as the square of the length)."""
    import tracemalloc

    from puredetok_audit._formats.sglang import read_stream

    def peak(count: int) -> int:
        ids = list(range(1000, 1000 + count))
        lines = _sglang_stream("g", ids, [""] * count, list(range(1, count + 1)), "whole")
        encoded = [(number, line.encode()) for number, line in enumerate(lines, 1)]
        tracemalloc.start()
        try:
            (request,) = read_stream(encoded, "f")
            assert isinstance(request, Request) and request.output_ids == tuple(ids)
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    assert peak(1600) < 6 * peak(400)
