"""What ``audit`` and ``replay`` say of inputs a user gets wrong: one clear line naming the file
(and the line, as compilers do), the documented exit code, and one convention for both: an input
with nothing in it to check is an input error (exit 2)."""

from __future__ import annotations

import gzip
import io
import json
import random
from collections.abc import Callable
from pathlib import Path

import pytest

from helpers import _folder
from puredetok.cli import main

SAMPLE_TRACE = Path(__file__).resolve().parents[2] / "docs" / "sample-trace.jsonl"
SAMPLE_LOG = Path(__file__).resolve().parents[2] / "docs" / "sample-responses.jsonl"


def _garbage(size: int) -> bytes:
    return random.Random(35).randbytes(size)


def _made(content: bytes | None) -> Callable[[Path], Path]:
    """Something at a path: a file of ``content``, or a directory (None)."""

    def make(path: Path) -> Path:
        if content is None:
            path.mkdir()
        else:
            path.write_bytes(content)
        return path

    return make


INPUTS: dict[str, Callable[[Path], Path | None]] = {
    "missing": lambda path: None,
    "directory": _made(None),
    "empty": _made(b""),
    "blank lines": _made(b"\n  \n\r\n"),
    "gzip of nothing": _made(gzip.compress(b"")),
    "binary": _made(_garbage(3000)),
    "gzip of binary": _made(gzip.compress(_garbage(3000))),
    "gzip of words": _made(gzip.compress(b"garbage garbage\n")),
    "a bad first line": _made(b'{"uid": 1, "tokens": [1, 2\n{"uid": 2, "tokens": [3]}\n'),
    "a header alone": _made(b'{"tokenizer": "qwen3"}\n'),
}
"""Each bad input, made at a path (None: nothing there)."""

AUDIT = {
    "missing": "No such file or directory",
    "directory": "Is a directory",
    "empty": "the file is empty: nothing to audit",
    "blank lines": "the file is empty: nothing to audit",
    "gzip of nothing": "the file is gzip-compressed and holds nothing: nothing to audit",
    "binary": "binary data: not JSON lines, a JSON array nor Parquet",
    "gzip of binary": "gzip-compressed binary data: not JSON lines, a JSON array nor Parquet",
    "gzip of words": "line 1 is not JSON (JSON is malformed: invalid character (byte 0)): cannot tell "
    "the format (give --format to read the lines after it)",
    "a bad first line": "line 1 is not JSON (Input data was truncated): cannot tell the format",
    "a header alone": "no records in it: nothing to audit",
}

REPLAY = {
    "missing": ": No such file or directory",
    "directory": ": Is a directory",
    "empty": ": the trace is empty: no events to replay",
    "blank lines": ": the trace is empty: no events to replay",
    "gzip of nothing": ": the trace is empty: no events to replay",
    "binary": ": binary data, not a trace (JSON lines of events)",
    "gzip of binary": ": gzip-compressed binary data, not a trace (JSON lines of events)",
    "gzip of words": ":1: not a trace's first line (a header or an event): JSON is malformed",
    "a bad first line": ":1: not a trace's first line (a header or an event): Input data was truncated",
    "a header alone": ": the trace holds only its header: no events to replay",
}


@pytest.mark.parametrize("kind", sorted(INPUTS))
def test_audit_says_what_is_wrong_with_a_file_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    path = INPUTS[kind](tmp_path / "input") or tmp_path / "input"
    assert main(["audit", str(path)]) == 2
    out, err = capsys.readouterr()
    assert err == f"puredetok audit: error: {path}: {AUDIT[kind]}\n" or (
        err.startswith(f"puredetok audit: error: {path}: {AUDIT[kind]}") and err.count("\n") == 1
    ), err
    assert (out == "") == (kind != "a header alone")  # a file read has its summary; none else


@pytest.mark.parametrize("kind", sorted(INPUTS))
def test_replay_says_what_is_wrong_with_a_file_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    path = INPUTS[kind](tmp_path / "input") or tmp_path / "input"
    assert main(["replay", str(path)]) == 2
    out, err = capsys.readouterr()
    assert err.startswith(f"puredetok replay: error: {path}{REPLAY[kind]}") and err.count("\n") == 1, err
    assert out == ""


def test_empty_standard_input_is_named(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"")))
    assert main(["replay", "-"]) == 2
    assert (
        capsys.readouterr().err
        == "puredetok replay: error: <stdin>: the trace is empty: no events to replay\n"
    )


@pytest.mark.parametrize("kind", ["binary", "gzip of binary"])
def test_a_binary_file_given_its_format_is_not_told_to_give_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    """It said "cannot tell the format (give --format)" when --format had been given."""
    path = INPUTS[kind](tmp_path / "input")
    assert path is not None
    assert main(["audit", str(path), "--format", "vllm"]) == 2
    err = capsys.readouterr().err
    assert err == f"puredetok audit: error: {path}: {AUDIT[kind]}\n" and "--format" not in err


def test_a_given_format_reads_the_lines_after_one_that_is_not_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "log.jsonl"
    path.write_text("garbage\n" + SAMPLE_LOG.read_text(encoding="utf-8"))
    assert main(["audit", str(path), "--format", "vllm"]) == 2
    out, err = capsys.readouterr()
    assert err.startswith(f"puredetok audit: error: {path}:1: ") and "--format" not in err
    assert f"{path}:3: request cmpl-a2 differs at character 4 (token 1): replacement characters" in out


def test_a_log_of_engine_errors_alone_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """It said "line 1 is not JSON" of a file whose lines all were (engines' error answers)."""
    path = tmp_path / "errors.jsonl"
    path.write_text(json.dumps({"error": {"message": "overloaded", "type": "x", "code": 503}}) + "\n")
    assert main(["audit", str(path)]) == 2
    assert capsys.readouterr().err == (
        f"puredetok audit: error: {path}: every record is an engine's error answer: no response tells "
        "the format (give --format to count them as skipped)\n"
    )
    assert main(["audit", str(path), "--format", "vllm"]) == 0
    assert "skipped      1" in capsys.readouterr().out


def test_a_file_of_nothing_among_others_is_named_and_the_others_audited(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert main(["audit", str(SAMPLE_LOG), str(empty)]) == 2
    out, err = capsys.readouterr()
    assert f"puredetok audit: error: {empty}: the file is empty: nothing to audit" in err.splitlines()
    assert "requests                  3" in out


def _model_id(tmp_path: Path) -> str:
    return "Qwen/Qwen3-0.6B"


def _not_a_tokenizer(tmp_path: Path) -> str:
    (tmp_path / "README.md").write_text("notes\n")
    return str(tmp_path)


TOKENIZERS: dict[str, tuple[Callable[[Path], str], str]] = {
    "missing": (lambda tmp_path: str(tmp_path / "nowhere"), "no tokenizer at "),
    "not a tokenizer": (_not_a_tokenizer, "the folder has none of the usual tokenizer files"),
    "model id": (
        _model_id,
        "no tokenizer at 'Qwen/Qwen3-0.6B': give a folder with tokenizer files (a model id such as "
        "'Qwen/Qwen3-0.6B' is not looked up: puredetok reads tokenizers offline, from a folder)",
    ),
}


@pytest.mark.parametrize("which", sorted(TOKENIZERS))
@pytest.mark.parametrize(
    "command",
    [
        ["audit", str(SAMPLE_LOG)],
        ["replay", str(SAMPLE_TRACE)],
        ["explain", "x"],
        ["bench"],
        ["serve"],
    ],
    ids=lambda command: command[0],
)
def test_a_tokenizer_that_cannot_load_is_one_line_for_every_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], which: str, command: list[str]
) -> None:
    name, message = TOKENIZERS[which]
    assert main([*command, "--tokenizer", name(tmp_path)]) == 2
    out, err = capsys.readouterr()
    assert err.startswith(f"puredetok {command[0]}: error: ") and err.count("\n") == 1, err
    assert message in err and out == ""


def test_a_real_folder_is_named_whole(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A path with a slash that is there is not taken for a model id."""
    folder = _folder("gpt2")
    assert main(["explain", "x", "--tokenizer", str(folder)]) == 0
    assert str(folder) in capsys.readouterr().out
