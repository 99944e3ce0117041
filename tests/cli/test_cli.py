"""The command line: explain and bench, --version, exit codes, whole one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from helpers import _folder
from puredetok import step
from puredetok.cli import _explain as explain
from puredetok.cli import main
from test_vectors import SEED, SEED_DELTAS


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_explain_seed_table(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "explain", SEED)
    assert code == 0, err
    assert "equals the full decode: yes" in out
    assert '"🦩"' in out and '" naï"' in out


def test_explain_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "explain", SEED, "--json")
    report = json.loads(out)
    assert code == 0 and report["equal"] is True
    assert [row["delta"] for row in report["tokens"]] == SEED_DELTAS
    assert report["tokens"][1] == {"id": 119, "alone": "\ufffd", "delta": "鱻"}


def test_explain_ids_and_a_raw_tokenizer_file(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(_folder("mistral_v03") / "tokenizer.json")
    code, out, _ = run(capsys, "explain", "--ids", "23325, 2294", "--tokenizer", path, "--json")
    assert code == 0 and json.loads(out)["streamed"] == "Hello world"


def test_explain_codec_options(capsys: pytest.CaptureFixture[str]) -> None:
    llama = str(_folder("llama2"))
    flamingos = "243 162 169 172 243 162 169 172"
    code, out, _ = run(capsys, "explain", "--ids", flamingos, "--tokenizer", llama, "--json")
    report = json.loads(out)  # without a cap, the valid run is held to the end
    assert code == 0 and [row["delta"] for row in report["tokens"]] == [""] * 8 and report["finish"] == "🦩🦩"
    code, out, _ = run(
        capsys, "explain", "--ids", flamingos, "--tokenizer", llama, "--max-byte-run", "4", "--json"
    )
    report = json.loads(out)
    assert code == 0 and [row["delta"] for row in report["tokens"]] == ["", "", "", "🦩"] * 2
    assert report["codec"]["max_byte_run"] == 4 and report["codec"]["out_of_vocab"] == "raise"
    code, out, _ = run(
        capsys, "explain", "--ids", "100024 151669 119 4294967295", "--out-of-vocab", "ignore", "--json"
    )
    report = json.loads(out)
    assert (
        code == 0
        and report["streamed"] == report["decode"] == "鱻"
        and report["codec"]["out_of_vocab"] == "ignore"
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["explain", "x", "--tokenizer", "/no/such/folder"], "no tokenizer at"),
        (["explain", "--ids", "1 two"], "--ids must be integers"),
        (["explain", "--ids", "-5"], "invalid token id -5"),
        (["explain", "--ids", "999999999"], "outside the vocabulary"),
        (["explain"], "give either TEXT or --ids"),
        (["explain", "x", "--ids", "1"], "give either TEXT or --ids"),
        (["bench", "--tokens", "3"], "--tokens must be"),
        (["explain", "--ids", "1", "--max-byte-run", "0"], "max_byte_run must be a positive int"),
        (["explain", "--ids", "151669"], "outside the vocabulary [0, 151669)"),
        (["explain", "--ids", "-1", "--out-of-vocab", "ignore"], "invalid token id -1"),
        (["explain", "--ids", "4294967296", "--out-of-vocab", "ignore"], "not below 2**32"),
        (["serve", "--max-byte-run", "0"], "--max-byte-run must be >= 1"),
    ],
)
def test_bad_input_is_one_line_and_exit_code_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, _, err = run(capsys, *argv)
    assert code == 2
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["nonsense"],
        ["explain", "--no-such-option"],
        ["serve", "--out-of-vocab", "skip"],
        ["explain", "--max-byte-run", "x"],
    ],
)
def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert "Traceback" not in capsys.readouterr().err


def test_bench_runs_and_prints_ratios(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "bench", "--tokens", "300", "--long", "1000")
    assert code == 0
    for line in ("step", "DecodeStream.step (tokenizers)", "two-window algorithm (engines)", "flatness"):
        assert line in out
    assert "ratio" in out


def test_installed_entry_point_works_offline() -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    script = os.path.join(os.path.dirname(sys.executable), "puredetok")
    for command in ([script, "--help"], [script, "explain", "--help"], [script, "bench", "--help"]):
        assert subprocess.run(command, env=env, capture_output=True, check=False).returncode == 0
    done = subprocess.run([script, "explain", SEED], env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0 and "equals the full decode: yes" in done.stdout
    assert "Traceback" not in done.stderr


def test_version_is_the_installed_distributions(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib import metadata

    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"puredetok {metadata.version('puredetok')}\n"


def test_a_folder_without_a_tokenizer_gets_the_whole_message_on_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """It was cut at "...from one of: " (the first line of transformers' message)."""
    code, _, err = run(capsys, "explain", "x", "--tokenizer", str(tmp_path))
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert "the folder has none of the usual tokenizer files (tokenizer.json," in err
    assert "from one of: (1) a `tokenizers` library serialization file, (2)" in err
    assert "(3) an equivalent slow tokenizer class to instantiate and convert." in err


def test_a_folder_whose_vocabulary_is_compressed_is_refused_not_loaded_empty(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """tests/data keeps Llama-2's tokenizer.json gzipped: transformers loads the folder as a
    tokenizer of 3 special tokens, which encoded every text to nothing (the bench then divided by
    zero)."""
    folder = Path(__file__).parents[1] / "data" / "tokenizers" / "llama2"
    code, _, err = run(capsys, "explain", "x", "--tokenizer", str(folder))
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert "it has no vocabulary, only its 3 special tokens" in err
    assert "(tokenizer.json.gz must be uncompressed)" in err


def test_an_error_message_of_several_lines_is_printed_whole_on_one(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(name: str | None) -> None:
        raise ValueError("first line:\n  second line\n\nlast line")

    monkeypatch.setattr(explain, "load", broken)
    code, _, err = run(capsys, "explain", "x")
    assert (code, err) == (2, "puredetok explain: error: first line: second line last line\n")


def _corrupted_step(state: Any, token_id: int) -> tuple[Any, str]:
    state, delta = step(state, token_id)
    return state, delta + "!"


@pytest.mark.parametrize(
    ("argv", "code"),
    [
        (["--help"], 0),
        (["explain", "--help"], 0),
        (["replay", "--help"], 0),
        (["serve", "--help"], 0),
        (["bench", "--help"], 0),
        (["--version"], 0),
        ([], 2),
        (["explain", "--tokenz", "x"], 2),
        (["replay"], 2),
    ],
)
def test_argument_parsing_exits_0_or_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], code: int
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == code
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "code"),
    [
        (["explain", SEED], 0),
        (["explain", "--ids", "100024 119"], 0),
        (["explain", SEED, "corrupt"], 1),  # the stream differs from the full decode: a failure
        (["explain", "--ids", "x"], 2),
        (["explain", "x", "--tokenizer", "/no/such/folder"], 2),
        (["replay", "docs/sample-trace.jsonl", "--quiet"], 0),
        (["replay", "/no/such/trace.jsonl"], 2),
        (["serve", "--workers", "0"], 2),
        (["serve", "--workers", "2", "--listen", "ipc:///tmp/puredetok-no-index"], 2),
        (["serve", "--local-bs", "0"], 2),
        (["bench", "--tokens", "3"], 2),
    ],
)
def test_each_command_exits_0_on_success_1_on_a_failure_found_2_on_bad_input(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, argv: list[str], code: int
) -> None:
    """Exit codes: 0 success, 1 the command ran and found a failure, 2 bad usage or input."""
    if argv[-1] == "corrupt":
        argv = argv[:-1]
        monkeypatch.setattr(explain, "step", _corrupted_step)
    monkeypatch.chdir(Path(__file__).resolve().parents[2])
    got, _, err = run(capsys, *argv)
    assert got == code, err
    assert "Traceback" not in err and err.count("\n") <= 1


def test_the_installed_entry_point_exits_as_documented(tmp_path: Path) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    script = os.path.join(os.path.dirname(sys.executable), "puredetok")

    def code(*argv: str) -> int:
        return subprocess.run([script, *argv], env=env, capture_output=True, check=False).returncode

    assert code("--version") == 0
    assert code("explain", "--tokenizer", str(tmp_path), "x") == 2
    assert code("frobnicate") == 2


def test_a_reader_that_goes_away_ends_any_command_quietly() -> None:
    """``puredetok explain ... | head -1``: it said "error: [Errno 32] Broken pipe" (exit 2);
    replay alone stopped quietly."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    command = [sys.executable, "-m", "puredetok.cli", "explain", SEED * 400]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert process.stdout is not None and process.stderr is not None
    assert process.stdout.readline().startswith(b"tokenizer: embedded Qwen3")
    process.stdout.close()  # the table is far longer than a pipe holds
    assert (process.wait(60), process.stderr.read()) == (0, b"")
