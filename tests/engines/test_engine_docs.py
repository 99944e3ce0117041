"""docs/engines/ shows ``puredetok audit`` checking what engines streamed where no Python plugin
is in the path (vLLM's Rust frontend, SGLang's Rust server): each documented command runs here on
the log it names, and writes the report and prints the table the page shows (but for the
timings)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import helpers
from test_audit import ROOT, audit, report

DOCS = ROOT / "docs" / "engines"


def _documented(page: str, command: str) -> tuple[list[str], str, str]:
    """The arguments of the ``puredetok audit`` command shown in ``page`` that starts with
    ``command``, and the report and table shown after it."""
    text = (DOCS / page).read_text(encoding="utf-8")
    start = text.index(f"puredetok audit {command}")
    line = text[start : text.index("\n", start)]
    shown_report = text[text.index("```json\n", start) + 8 :]
    shown_table = shown_report[shown_report.index("```\n\n```\n") + 9 :]
    shown_report, shown_table = (
        shown_report[: shown_report.index("```")],
        shown_table[: shown_table.index("```")],
    )
    return line.split()[2:], shown_report, shown_table


def _untimed(table: str) -> list[str]:
    return [row for row in table.splitlines() if not row.startswith(("seconds", "tokens/s"))]


def _run(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, args: list[str]
) -> tuple[int, str, str]:
    """The documented command from the repository's root, its report written to ``tmp_path``."""
    monkeypatch.chdir(ROOT)
    args = [str(tmp_path / "report.jsonl") if arg == "report.jsonl" else arg for arg in args]
    code, out, err = audit(capsys, *args)
    return code, out, (tmp_path / "report.jsonl").read_text(encoding="utf-8")


def test_the_documented_audit_of_vllms_rust_frontend_is_real(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """docs/engines/vllm.md: the log vLLM 0.33.0's Rust frontend streamed (kept beside the page;
    engine_tests/vllm/test_rust_frontend.py checks that the Rust frontend sends it), audited with
    the embedded Qwen3: one request differs, as shown."""
    args, shown_report, shown_table = _documented("vllm.md", "docs/engines/vllm-rs-")
    code, out, written = _run(capsys, monkeypatch, tmp_path, args)
    assert code == 1
    assert written == shown_report
    assert _untimed(out) == _untimed(shown_table)
    [found] = report(tmp_path / "report.jsonl")
    assert (found["exact"], found["engine_length"]) == ("🌶 is spicy", len("Hello world 🌶 is spicy"))


def test_the_documented_audit_of_an_sglang_stream_is_real(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """docs/engines/sglang.md: an SGLang ``/generate`` stream (the format its Rust server writes as
    its Python server does), audited with Llama-2's tokenizer (the page's ``Llama-2-7b-hf/`` is
    the test data's): the request whose byte run SGLang sent early differs, as shown."""
    args, shown_report, shown_table = _documented("sglang.md", "tests/data/engine_logs/")
    folder = str(helpers._folder("llama2"))
    args = [folder if arg == "Llama-2-7b-hf/" else arg for arg in args]
    code, out, written = _run(capsys, monkeypatch, tmp_path, args)
    out = out.replace(folder, "Llama-2-7b-hf/")  # the tokenizer's line names the path as given
    assert code == 1
    assert written == shown_report
    assert _untimed(out) == _untimed(shown_table)


def test_the_documented_commands_are_found() -> None:
    """The pages show the commands these tests run (a page that lost one fails here, not silently)."""
    for page, command in (("vllm.md", "docs/engines/vllm-rs-"), ("sglang.md", "tests/data/engine_logs/")):
        args, shown_report, shown_table = _documented(page, command)
        assert args[0].startswith(command) and "--report" in args
        assert re.match(r"\{\"id\": ", shown_report) and "\nfiles " in shown_table
