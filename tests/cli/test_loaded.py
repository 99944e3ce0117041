"""Every command says which tokenizer it loaded: its path or the embedded Qwen3, what chose it, its
decoder family and whether its codec is exact; ``audit`` warns when the ids look like another
tokenizer's."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import synthetic
from helpers import _folder, codec, reference, tokenizer
from puredetok import codec_for
from puredetok._core import continuation_text
from puredetok.cli import _bench as bench_cli
from puredetok.cli import _serve as serve_cli
from puredetok.cli import main
from puredetok.cli._loaded import DEFAULT_NAME, FAMILIES, family_name, loaded
from puredetok.serving._messages import ReadyMsg
from puredetok_audit._compare import Difference
from puredetok_audit._records import Request
from puredetok_audit._report import unrelated
from puredetok_audit.replay._incremental import common_prefix

EMBEDDED = "embedded Qwen3 (byte-level BPE, exact), the default (--tokenizer PATH chooses another)"
"""What every command says of the tokenizer it falls back to."""


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    ("name", "family"),
    [
        ("qwen3", "byte-level BPE"),
        ("llama2", "SentencePiece byte-fallback"),
        ("t5_small", "Metaspace (SentencePiece)"),
        ("distilbert_base_uncased", "WordPiece"),
    ],
)
def test_the_family_is_named_from_the_codecs_decoding_model(name: str, family: str) -> None:
    assert family_name(codec(name, skip=True)) == family


@pytest.mark.parametrize(
    ("made", "family"),
    [
        (synthetic.no_decoder, "tokens joined with spaces"),
        (synthetic.bpe_suffix_after_byte_fallback, "decoders ByteFallback+BPEDecoder"),
        (synthetic.unmodelled_regex, "not modelled (the generic fallback)"),
    ],
)
def test_a_chain_no_family_names_is_named_by_its_decoders(made: Any, family: str) -> None:
    built = codec_for(made())
    assert family_name(built) == family
    said = loaded("/some/tokenizer.json", "--tokenizer", built)
    assert said.exact == built.exact and said.codec_family == built.family
    if not built.exact:  # the reason why is said with it
        assert str(said) == f"/some/tokenizer.json ({family}, not exact: {built.reason})"


def test_every_family_the_codecs_name_has_words() -> None:
    """The families of the core's models (docs/families.md's table) all have a name in words."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "families.md").read_text(encoding="utf-8")
    table = page[page.index("## Every family and class") :].split("\n## ")[0]
    named = {row.split("`")[1] for row in table.splitlines() if row.startswith("| `")}
    chains = {"BPEDecoder", "CTC"}  # decoders alone, named by themselves
    assert named - chains <= set(FAMILIES), named - chains - set(FAMILIES)


# -- explain, bench, serve ---------------------------------------------------------------------


def test_explain_names_the_tokenizer_in_its_table_and_its_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "explain", "Hi")
    assert code == 0 and out.splitlines()[0] == f"tokenizer: {EMBEDDED}"
    folder = str(_folder("t5_small"))
    code, out, _ = run(capsys, "explain", "Hi", "--tokenizer", folder, "--json")
    assert code == 0 and json.loads(out)["tokenizer"] == {
        "name": folder,
        "chosen_by": "--tokenizer",
        "family": "Metaspace (SentencePiece)",
        "codec_family": "metaspace",
        "exact": True,
        "reason": "exact model: Metaspace + cleanup",
        "vocab_size": 32100,
    }


def test_bench_names_the_tokenizer_on_its_first_line() -> None:
    """``puredetok bench``'s header (``python3 tasks.py bench`` prints it too)."""
    line = bench_cli.header(argparse.Namespace(tokenizer=None, repeats=3), tokenizer("qwen3"))
    assert line.startswith(f"puredetok bench: tokenizer {EMBEDDED}; Python ")
    folder = str(_folder("llama2"))
    line = bench_cli.header(argparse.Namespace(tokenizer=folder, repeats=3), tokenizer("llama2"))
    assert line.startswith(
        f"puredetok bench: tokenizer {folder} (SentencePiece byte-fallback, exact); Python "
    )


def test_the_ready_line_names_the_tokenizer_before_the_address() -> None:
    ready = ReadyMsg("worker-3", 42, "ipc:///run/pd/worker-3.ipc")
    said = loaded(None, "default", codec("qwen3", skip=True))
    assert serve_cli.ready_line(ready, said) == (
        f"ready: worker-3 (pid 42), tokenizer {EMBEDDED}, on ipc:///run/pd/worker-3.ipc"
    )


def test_serve_says_what_it_loaded_when_ready(tmp_path: Path) -> None:
    """A real ``puredetok serve`` of Llama-2: its ready line names the folder and its family."""
    folder = str(_folder("llama2"))
    env = {**os.environ, "XDG_RUNTIME_DIR": str(tmp_path)}
    command = [sys.executable, "-m", "puredetok.cli", "serve", "--quiet", "--tokenizer", folder]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0
    assert line.startswith("ready: worker-0 (pid ")
    assert f"), tokenizer {folder} (SentencePiece byte-fallback, exact), on ipc://{tmp_path}/" in line


# -- replay -------------------------------------------------------------------------------------


def _trace(path: Path, *lines: Any) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_replay_names_the_tokenizer_and_what_chose_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    event = {"uid": 1, "tokens": [32, 33], "finished": True}
    plain = _trace(tmp_path / "plain.jsonl", event)
    code, out, _ = run(capsys, "replay", str(plain), "--quiet")
    assert code == 0 and out.splitlines()[0] == f"tokenizer: {EMBEDDED}"
    gpt2 = str(_folder("gpt2"))
    named = _trace(tmp_path / "named.jsonl", {"tokenizer": gpt2}, event)
    code, out, _ = run(capsys, "replay", str(named), "--quiet")
    assert (
        code == 0 and out.splitlines()[0] == f"tokenizer: {gpt2} (byte-level BPE, exact), named by the trace"
    )
    t5 = str(_folder("t5_small"))
    code, out, _ = run(capsys, "replay", str(named), "--quiet", "--tokenizer", t5, "--json")
    summary = json.loads(out.splitlines()[-1])["summary"]
    assert code == 0 and summary["tokenizer"]["name"] == t5
    assert (summary["tokenizer"]["chosen_by"], summary["tokenizer"]["family"]) == (
        "--tokenizer",
        "Metaspace (SentencePiece)",
    )


# -- audit --------------------------------------------------------------------------------------


def _llama2_log(path: Path, count: int) -> Path:
    """vLLM completions Llama-2 generated: their texts are the exact texts of their ids."""
    llama = tokenizer("llama2")
    texts = ["Hello world, how are you?", "The answer is 42.", "naïve café 推理 😀", "Once upon a time"]
    prompt = llama.encode("Prompt: ", add_special_tokens=False)
    lines = []
    for n in range(count):
        ids = llama.encode(f"{texts[n % 4]} {texts[(n + 1) % 4]}", add_special_tokens=False)
        text = continuation_text(reference("llama2", prompt, True), reference("llama2", prompt + ids, True))
        body = {
            "index": 0,
            "text": text,
            "token_ids": ids,
            "prompt_token_ids": prompt,
            "finish_reason": "length",
        }
        lines.append({"id": f"cmpl-{n}", "object": "text_completion", "model": "m", "choices": [body]})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_a_forgotten_tokenizer_is_said_and_warned_of(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A Llama-2 log audited without --tokenizer reported every request as differing, and nothing
    named the embedded Qwen3 it was audited with."""
    log = _llama2_log(tmp_path / "llama2.jsonl", 25)
    code, out, err = run(capsys, "audit", str(log))
    assert code == 1
    assert f"tokenizer    {EMBEDDED}" in out.splitlines()
    assert err == (
        "puredetok audit: warning: 25 of 25 requests differ, with unrelated texts: the tokenizer "
        "may not be the one that generated these ids: pass --tokenizer (this audit used embedded Qwen3, "
        "byte-level BPE)\n"
    )
    folder = str(_folder("llama2"))
    code, out, err = run(capsys, "audit", str(log), "--tokenizer", folder)
    assert (code, err) == (0, "")
    assert f"tokenizer    {folder} (SentencePiece byte-fallback, exact)" in out.splitlines()


def _qwen3_log(path: Path, count: int) -> Path:
    """vLLM completions Qwen3 generated (no prompt)."""
    qwen = tokenizer("qwen3")
    texts = [
        "Hello world, how are you?",
        "The answer is 42.",
        "naïve café 推理 😀",
        "def f(x):\n    return x+1",
    ]
    lines = []
    for n in range(count):
        ids = qwen.encode(f"{texts[n % 4]} {texts[(n + 1) % 4]}", add_special_tokens=False)
        body = {"index": 0, "text": qwen.decode(ids), "token_ids": ids, "finish_reason": "length"}
        lines.append({"id": f"q{n}", "object": "text_completion", "choices": [body]})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


@pytest.mark.parametrize(
    ("log", "name", "unlike", "past"),
    [
        ("llama2", "t5_small", 12, 0),
        ("llama2", "llama3", 12, 0),
        ("llama2", "phi3_mini", 0, 0),  # Phi-3 has Llama-2's vocabulary: the texts are exact
        ("qwen3", "llama3", 12, 0),  # both byte-level BPE: some texts share a few words
        ("qwen3", "gpt2", 6, 6),  # half the ids past GPT-2's 50,257
        ("qwen3", "qwen2_5", 0, 0),  # the same vocabulary
    ],
)
def test_another_tokenizers_ids_are_told_whatever_the_two_families(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], log: str, name: str, unlike: int, past: int
) -> None:
    """Logs of Llama-2 and Qwen3 audited with tokenizers of other families (and with ones of the
    same vocabulary): every request of another vocabulary is unrelated or past its end."""
    made = _llama2_log if log == "llama2" else _qwen3_log
    code, out, err = run(
        capsys, "audit", str(made(tmp_path / "log.jsonl", 12)), "--tokenizer", str(_folder(name)), "--json"
    )
    summary = json.loads(out)["summary"]
    assert (summary["unrelated"], summary["past_vocabulary"]) == (unlike, past)
    assert len(summary["warnings"]) == (unlike > 0) + (past > 0)
    assert code == (2 if past else 1 if unlike else 0), err


@pytest.mark.parametrize(
    ("exact", "engine", "kind", "far"),
    [
        ("Hello world, naïve", "Hello world, naïve", "other", False),  # equal (no difference there)
        ("Hello world, naïve café", "Hello world, na", "lost tail", False),
        ("Hello world, naïve café", "Hello world, na\ufffd\ufffdve café", "replacement characters", False),
        ("Hello world, naïve café", "Hello world, naïve naïve café", "duplicated text", False),
        ("🌶 is spicy", "Hello world 🌶 is spi", "other", False),  # the prompt's text sent again
        ("It is done.", "It is done.\n\nUser:", "stop trimming", False),
        ("It is done.", "It  is done .", "cleanup spacing", False),
        ("Hello world, how are you?", "ĠwellĠdonećĢĶ", "other", True),  # another tokenizer's text
        ("x推理引擎 streams", "xolleH dlrow", "other", True),
        ("ownPost is 42.LOWER ", "The answer is 42. na", "other", True),  # Qwen3's ids as Llama-3's
        ("ally f75yle    com m", "def f(x):\n    return", "other", True),
        ("\ufffd is 42.LOWER ", "The answer is 42. na", "replacement characters", True),
        ("Hello world, naïve café", "Hello world, nax", "other", False),  # too little to tell
    ],
)
def test_unrelated_texts_are_told_from_an_engines_faults(
    exact: str, engine: str, kind: str, far: bool
) -> None:
    offset = common_prefix(exact, engine)
    window = slice(max(0, offset - 20), offset + 20)
    request = Request("r", 1, (), (), engine)
    difference = Difference(request, kind, offset, 0, exact[window], engine[window], len(exact), len(engine))
    assert unrelated(difference) is far


def test_ids_past_the_vocabulary_are_warned_of(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Qwen3's ids audited with Llama-2's tokenizer (32,000 ids): each is a bad record, and the
    warning says why that may be."""
    qwen = tokenizer("qwen3")
    ids = qwen.encode("推理引擎 streams text", add_special_tokens=False)
    body = {"index": 0, "text": qwen.decode(ids), "token_ids": ids, "finish_reason": "length"}
    log = tmp_path / "qwen3.jsonl"
    log.write_text(
        "".join(
            json.dumps({"id": f"c{n}", "object": "text_completion", "choices": [body]}) + "\n"
            for n in range(3)
        )
    )
    folder = str(_folder("llama2"))
    code, _, err = run(capsys, "audit", str(log), "--tokenizer", folder)
    warning = err.splitlines()[-1]
    assert code == 2 and len(err.splitlines()) == 4  # three bad records, one warning
    assert warning == (
        "puredetok audit: warning: 3 requests have ids past the vocabulary (32,000 ids): the tokenizer "
        f"may not be the one that generated these ids: check --tokenizer (this audit used {folder}, "
        "SentencePiece byte-fallback)"
    )
    code, out, _ = run(capsys, "audit", str(log), "--tokenizer", folder, "--json")
    summary = json.loads(out)["summary"]
    assert (summary["errors"], summary["past_vocabulary"]) == (3, 3)
    assert summary["warnings"] == [warning.removeprefix("puredetok audit: warning: ")]


@pytest.mark.parametrize("stream", [False, True])
def test_ids_past_the_vocabulary_are_counted_in_every_format(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], stream: bool
) -> None:
    """A stream compared as it comes (its error a message), a trace (the replay's), rollouts."""
    if stream:
        chunks = [
            {
                "id": "s",
                "object": "text_completion",
                "choices": [{"index": 0, "text": "A", "token_ids": [32], "finish_reason": None}],
            },
            {
                "id": "s",
                "object": "text_completion",
                "choices": [{"index": 0, "text": "?", "token_ids": [200_000], "finish_reason": "length"}],
            },
        ]
        log = tmp_path / "stream.txt"
        log.write_text("".join(f"data: {json.dumps(chunk)}\n\n" for chunk in chunks) + "data: [DONE]\n\n")
    else:
        log = _trace(tmp_path / "trace.jsonl", {"uid": 1, "tokens": [32, 200_000, -1], "finished": True})
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"prompt_ids": [], "response_ids": [5, 151_700], "response_text": "&"}) + "\n")
    code, out, err = run(capsys, "audit", str(log), str(rows), "--json")
    summary = json.loads(out)["summary"]
    assert code == 2 and (summary["errors"], summary["past_vocabulary"]) == (2, 2), err
    assert "2 requests have ids past the vocabulary (151,669 ids)" in err


def test_a_negative_id_is_no_sign_of_another_tokenizer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = _trace(tmp_path / "trace.jsonl", {"uid": 1, "tokens": [32, -1], "finished": True})
    code, out, err = run(capsys, "audit", str(log), "--json")
    assert code == 2 and json.loads(out)["summary"]["past_vocabulary"] == 0 and "warning" not in err


def test_audit_names_the_first_differing_requests_and_counts_the_rest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The summary used to name no differing request."""
    qwen = tokenizer("qwen3")
    ids = qwen.encode("Hello world, naïve café", add_special_tokens=False)
    text = qwen.decode(ids)
    body = {"index": 0, "token_ids": ids, "finish_reason": "length"}
    lines = [
        {
            "id": f"c{n}",
            "object": "text_completion",
            "choices": [{**body, "text": text if n % 2 else text[:-3]}],
        }
        for n in range(50)
    ]
    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps(line) + "\n" for line in lines))
    code, out, _ = run(capsys, "audit", str(log))
    named = out.splitlines()[:21]
    assert code == 1
    assert (
        named[0]
        == f"{log}:1: request c0 differs at character {len(text) - 3} (token {len(ids) - 1}): lost tail"
    )
    assert named[19].startswith(f"{log}:39: request c38 differs at character ")
    assert named[20] == "... and 5 more differ (--report FILE lists every one)"
    code, out, _ = run(capsys, "audit", str(log), "--report", str(tmp_path / "r.jsonl"), "--json")
    summary = json.loads(out)["summary"]
    assert summary["differing"] == 25 and len(summary["differing_named"]) == 20
    assert summary["differing_named"][1] == {
        "file": str(log),
        "line": 3,
        "id": "c2",
        "offset": len(text) - 3,
        "token": len(ids) - 1,
        "chunk": None,
        "kind": "lost tail",
    }
    assert summary["tokenizer"]["name"] == DEFAULT_NAME and summary["warnings"] == []


# -- --help ------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", [[], ["explain"], ["bench"], ["replay"], ["serve"], ["audit"]])
def test_every_help_names_the_default_tokenizer_and_how_to_choose_another(
    capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main([*command, "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert exited.value.code == 0
    assert "the embedded Qwen3" in shown and "--tokenizer PATH" in shown
