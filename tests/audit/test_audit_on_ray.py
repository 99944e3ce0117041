"""``puredetok audit --ray`` as a user runs it (a process of its own, with a deadline): a
byte-fallback tokenizer's log gives the local report, and a task that fails ends the run at once
with one line naming the cause (Llama-2's codec once could not be unpickled in a Ray worker, and Ray
Data ran the task again forever, printing tracebacks)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import _folder, tokenizer
from puredetok._core import continuation_text
from puredetok.cli import main

HERE = Path(__file__).resolve().parent
DEADLINE = 240
"""Seconds a run may take (a local Ray starts in a few; the run before the fix never ended)."""


def llama2_log(path: Path, count: int) -> Path:
    """vLLM completions of Llama-2 ids (split characters, byte-fallback runs), one in four short of
    its last character."""
    tok = tokenizer("llama2")
    lines = []
    for i in range(count):
        prompt = tok.encode(f"Question {i}: name a symbol", add_special_tokens=False)
        ids = tok.encode(f"Answer {i}: 中文 ꙮ 🀄🎉 naïve", add_special_tokens=False)
        text = continuation_text(tok.decode(prompt), tok.decode(prompt + ids))
        choice = {"index": 0, "text": text[:-1] if i % 4 == 0 else text, "token_ids": ids}
        choice |= {"prompt_token_ids": prompt, "finish_reason": "length"}
        lines.append(
            json.dumps({"id": f"c{i}", "object": "text_completion", "model": "m", "choices": [choice]})
        )
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def run(*command: str) -> subprocess.CompletedProcess[str]:
    """Run a command to its end, or fail the test past :data:`DEADLINE` (its processes, Ray's
    among them, killed)."""
    process = subprocess.Popen(
        [sys.executable, *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = process.communicate(timeout=DEADLINE)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        raise AssertionError(f"still running after {DEADLINE} s; stderr ends: {err[-2000:]}") from None
    return subprocess.CompletedProcess(command, process.returncode, out, err)


def timeless(table: str) -> list[str]:
    return [line for line in table.splitlines() if not line.startswith(("seconds", "tokens/s"))]


@pytest.mark.timeout(DEADLINE + 60)
def test_a_byte_fallback_log_on_ray_gives_the_local_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = llama2_log(tmp_path / "llama2.jsonl", 40)
    folder = str(_folder("llama2"))
    local, distributed = tmp_path / "local.jsonl", tmp_path / "ray.jsonl"
    code = main(["audit", str(log), "--tokenizer", folder, "--report", str(local)])
    out, _ = capsys.readouterr()
    done = run(
        "-m", "puredetok.cli", "audit", str(log), "--tokenizer", folder, "--report", str(distributed),
        "--shard-bytes", "3000", "--ray", "--ray-cpus", "1",
    )  # fmt: skip
    assert "Traceback" not in done.stderr and "Error" not in done.stdout, done.stderr[-2000:]
    assert code == done.returncode == 1
    assert distributed.read_text() == local.read_text() and len(local.read_text().splitlines()) == 10
    assert timeless(done.stdout) == timeless(out)


RAYLET = re.compile(r"(\x1b\[\d+m)?\(raylet\)(\x1b\[0m)? A worker died or was killed while executing a task")
"""Ray's own line, on stdout, when a worker dies (in colour or not)."""

FAILURES = {
    "vanish": "FileNotFoundError: [Errno 2] No such file or directory",
    "unpicklable": "codecs could not be unpickled in a worker: ValueError: invalid literal for int()",
    "die": "WorkerCrashedError: The worker died unexpectedly",
}


@pytest.mark.timeout(DEADLINE + 60)
@pytest.mark.parametrize("how", list(FAILURES))
def test_a_failed_task_ends_the_run_with_one_line_naming_the_cause(tmp_path: Path, how: str) -> None:
    """An exception in a task (a shard's file gone, codecs that cannot be unpickled: what Ray Data
    ran again forever) or a worker that dies: no task is run again, the run ends with exit code 2
    and one line on stderr naming the cause, and nothing on stdout (no summary: the run did not
    audit everything). Ray's own line on the death of a worker is its own (``(raylet) A worker
    died``), on stdout."""
    log = llama2_log(tmp_path / "llama2.jsonl", 12)
    done = run(
        str(HERE / "audit_on_ray_failing.py"), how, "--", str(log), "--tokenizer", str(_folder("llama2")),
        "--shard-bytes", "2000", "--ray", "--ray-cpus", "1",
    )  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    (line,) = done.stderr.splitlines()
    assert line.startswith("puredetok audit: error: a Ray task failed: ") and FAILURES[how] in line, line
    if how == "vanish":
        assert line.startswith(f"puredetok audit: error: a Ray task failed: {log}: "), line
    said = done.stdout.splitlines()
    if how == "die":
        assert said and all(RAYLET.match(line) for line in said), done.stdout[-2000:]
    else:
        assert not said, done.stdout[-2000:]


@pytest.mark.timeout(DEADLINE + 60)
def test_the_spaces_option_reaches_the_workers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--no-spaces-between-special-tokens`` on a tokenizer that acts on it (Wav2Vec2's CTC): the
    workers audit with it, as the local run does (half the texts are decoded with it True)."""
    from test_audit_spaces import ctc, decoded, ids

    folder = tmp_path / "ctc"
    ctc().save_pretrained(folder)
    lines = [
        json.dumps({"id": f"c{i}", "object": "text_completion", "model": "m", "choices": [choice]})
        for i in range(16)
        for choice in [
            {"index": 0, "text": decoded(i % 2 == 0), "token_ids": ids(), "finish_reason": "length"}
        ]
    ]
    log = tmp_path / "ctc.jsonl"
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    local, distributed = tmp_path / "local.jsonl", tmp_path / "ray.jsonl"
    flags = ["--tokenizer", str(folder), "--no-spaces-between-special-tokens"]
    code = main(["audit", str(log), *flags, "--report", str(local)])
    out, _ = capsys.readouterr()
    done = run(
        "-m", "puredetok.cli", "audit", str(log), *flags, "--report", str(distributed),
        "--shard-bytes", "500", "--ray", "--ray-cpus", "1",
    )  # fmt: skip
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert code == done.returncode == 1
    assert [json.loads(line)["id"] for line in local.read_text().splitlines()] == [
        f"c{i}" for i in range(0, 16, 2)
    ]
    assert distributed.read_text() == local.read_text()
    assert timeless(done.stdout) == timeless(out)
