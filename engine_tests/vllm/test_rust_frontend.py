"""``VLLM_USE_RUST_FRONTEND=1``: vLLM's Rust frontend (``vllm-rs``, in vLLM's own wheel) serves
the OpenAI API and detokenizes in Rust (``rust/src/text/src/incremental.rs``), a program without
a Python interpreter, so no Python plugin can be in its path. Run here as a user runs it
(``serve.py``, the scripted model of ``fake_model.py``): its text is its own, and
``puredetok audit`` checks what it streamed, from the log a client keeps (the server-sent events
with ``return_token_ids``). The log docs/engines/vllm.md audits is one it wrote."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import vllm

from serve import post, post_raw, served_model, vllm_serve

ROOT = Path(__file__).resolve().parents[2]
DOCS_LOG = ROOT / "docs" / "engines" / "vllm-rs-0.33.0-completion-stream.txt"
"""The log docs/engines/vllm.md audits: what this test's requests got from vLLM 0.33.0's Rust frontend."""

OUTPUT = [234, 114, 374, 47251]
"""What the scripted model generates for every request (Qwen3: the end of "🌶", ``" is spicy"``)."""
REQUESTS = {
    "hot-pepper": [9707, 1879, 11162],
    "pepper-after-hello": [9707],
}
"""The prompts of the documented log: ``"Hello world \\ufffd"`` (it ends inside "🌶", which the
output completes) and ``"Hello"`` (the output starts with the rest of a character it never had)."""


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[int, Path]]:
    """vLLM's own server with its Rust frontend (the plugin installed and on, as everywhere)."""
    with vllm_serve(OUTPUT, VLLM_USE_RUST_FRONTEND="1") as running:
        yield running


def test_the_rust_frontend_is_a_program_without_python(server: tuple[int, Path]) -> None:
    """The process answering HTTP is ``vllm-rs`` (vLLM logs it as ``RustFrontend``), an executable
    that links no Python library: vLLM's plugins, loaded by Python code, cannot reach it."""
    _, log = server
    binary = Path(vllm.__file__).with_name("vllm-rs")
    clean = {"PATH": "/usr/bin:/bin"}  # no LD_PRELOAD (vLLM's CPU platform sets one in this process)
    libraries = subprocess.run(
        ["ldd", str(binary)], capture_output=True, text=True, check=True, env=clean
    ).stdout
    assert "libc.so" in libraries and "python" not in libraries.lower()
    assert "(RustFrontend pid=" in log.read_text(errors="replace")


def test_the_rust_frontend_sends_its_own_text(server: tuple[int, Path]) -> None:
    """With the plugin installed and on, the Rust frontend's text is its own: for the prompt that
    ends inside "🌶" it sends the prompt's text again, as vLLM's own Python detokenizer does
    (with the plugin, the Python server sends ``"🌶 is spicy"``: test_api_servers.py)."""
    port, _ = server
    body = {"model": served_model(port), "prompt": REQUESTS["hot-pepper"], "max_tokens": 4}
    assert post(port, "/v1/completions", body)["choices"][0]["text"] == "Hello world 🌶 is spicy"


def _normalized(log: bytes) -> str:
    """A log without what differs between runs (the ids and creation times the server makes)."""
    text = re.sub(rb'"id":"cmpl-[0-9a-f]+"', b'"id":"cmpl-ID"', log)
    return re.sub(rb'"created":\d+', b'"created":0', text).decode()


def _audit(path: Path, report: Path) -> tuple[int, str, list[dict[str, object]]]:
    done = subprocess.run(
        [sys.executable, "-m", "puredetok.cli", "audit", str(path), "--report", str(report)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    return done.returncode, done.stdout, [json.loads(line) for line in report.read_text().splitlines()]


def test_puredetok_audit_checks_what_the_rust_frontend_streamed(
    server: tuple[int, Path], tmp_path: Path
) -> None:
    """The documented requests, streamed with ``return_token_ids``: the Rust frontend sends what the
    docs' log holds (but for its ids and times), and ``puredetok audit`` (the embedded Qwen3)
    finds the request whose text is not ``decode``'s, the same in both logs."""
    port, _ = server
    model = served_model(port)
    captured = b"".join(
        post_raw(
            port,
            "/v1/completions",
            {"model": model, "prompt": prompt, "max_tokens": 4, "stream": True, "return_token_ids": True},
        )
        for prompt in REQUESTS.values()
    )
    assert _normalized(captured) == _normalized(DOCS_LOG.read_bytes())
    fresh = tmp_path / "rust.txt"
    fresh.write_bytes(captured)
    code, out, found = _audit(fresh, tmp_path / "fresh.jsonl")
    kept_code, kept_out, kept = _audit(DOCS_LOG, tmp_path / "kept.jsonl")
    assert code == kept_code == 1
    assert len(found) == len(kept) == 1
    assert {k: v for k, v in found[0].items() if k not in ("id", "file")} == {
        k: v for k, v in kept[0].items() if k not in ("id", "file")
    }
    assert (found[0]["exact"], found[0]["exact_length"], found[0]["engine_length"]) == ("🌶 is spicy", 10, 22)
    assert _table(out) == _table(kept_out)
    assert (_table(out)["requests"], _table(out)["equal"], _table(out)["differing"]) == ("2", "1", "1")


def _table(out: str) -> dict[str, str]:
    """The audit's summary table, its timings and the differing requests' lines (which name the
    file) left out."""
    lines = (line.strip() for line in out.splitlines() if " differs at character " not in line)
    rows = (re.split(r"\s{2,}", line) for line in lines if line)
    return {row[0]: row[-1] for row in rows if row[0] not in ("seconds", "tokens/s")}
