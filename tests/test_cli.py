"""The command line: explain and bench, exit codes, one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from helpers import _folder
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
