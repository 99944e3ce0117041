"""``puredetok replay TRACE`` (docs/trace.md): the trace format, the per-request checks, exit codes."""

from __future__ import annotations

import bz2
import functools
import gzip
import io
import json
import lzma
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

import helpers
from helpers import id_lists, reference, shared_codecs, tokenizer
from puredetok.cli import main
from puredetok.serving._detokenize_manager import DetokenizeManager
from puredetok.serving._loading import load_tokenizer
from puredetok.serving._messages import SamplingParams, UserReply
from puredetok.testing.strategies import MULTILINGUAL
from puredetok_audit._cli import replay as replay_cli
from puredetok_audit.replay import _replay as replay_module
from puredetok_audit.replay._replay import Replayer
from puredetok_audit.replay._trace import TraceEvent, TraceHeader, read_trace
from sources import vocabulary_of

SAMPLE = Path(__file__).resolve().parents[2] / "docs" / "sample-trace.jsonl"


@functools.cache
def _load(name: str | None) -> Any:
    return load_tokenizer(name)


@pytest.fixture(autouse=True)
def _shared_tokenizers_and_codecs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each replay loads its tokenizer and builds codecs: share them across tests (seconds each)."""

    def replayer(tokenizer: Any, defaults: SamplingParams, **options: Any) -> Replayer:
        return Replayer(tokenizer, defaults, codecs=shared_codecs(), **options)

    monkeypatch.setattr(replay_cli, "load", _load)
    monkeypatch.setattr(replay_cli, "Replayer", replayer)


def write(tmp_path: Path, lines: list[Any], name: str = "trace.jsonl") -> Path:
    path = tmp_path / name
    path.write_text(
        "".join(
            (line if isinstance(line, str) else json.dumps(line, ensure_ascii=False)) + "\n" for line in lines
        )
    )
    return path


def test_the_sample_trace_replays_cleanly(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", str(SAMPLE)]) == 0
    out = capsys.readouterr().out
    assert "鱻䨻🦩 is rare, 推理 naïve" in out and "🌶 is spicy" in out and "Hello world" not in out
    assert "6 requests" in out and "0 failed" in out and "FAIL" not in out


def test_json_lines_stream_each_reply_and_end_with_a_summary(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", str(SAMPLE), "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    summary = lines.pop()["summary"]
    assert summary["requests"] == 6 and summary["failed"] == 0 and summary["ignored_after_stop"] == 2
    requests = [line["request"] for line in lines if "request" in line]
    lines = [line for line in lines if "request" not in line]
    text: dict[int, str] = {}
    for line in lines:
        text[line["uid"]] = text.get(line["uid"], "") + line["delta"]
    assert (
        text[1] == "鱻䨻🦩 is rare, 推理 naïve" and text[3] == "推理引擎 😀 streams text: naïve café, 1+1=2."
    )
    finished = {line["uid"]: line for line in lines if line["finished"]}
    assert finished[3]["finish_reason"] == "stop" and finished[3]["matched_stop"] == "\n"
    assert finished[4]["finish_reason"] == "abort" and finished[5]["matched_stop"] == 151645
    checks = {r["uid"]: r["checks"] for r in requests}
    assert checks[4] == {"G1": None, "G2": True, "G4": True}
    assert all(all(v in (True, None) for v in c.values()) for c in checks.values())


def test_a_trace_on_standard_input(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(SAMPLE.read_bytes())))
    assert main(["replay", "-", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "6 requests" in out and "---" not in out


COMPRESSORS: dict[str, Callable[[bytes], bytes]] = {
    "gzip": gzip.compress,
    "bzip2": bz2.compress,
    "xz": lzma.compress,
    "zstd": zstandard.ZstdCompressor().compress,
}


@pytest.mark.parametrize("compression", sorted(COMPRESSORS))
def test_a_compressed_trace_replays_as_the_plain_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], compression: str
) -> None:
    assert main(["replay", str(SAMPLE), "--json"]) == 0
    plain = capsys.readouterr().out.splitlines()
    packed = tmp_path / "trace.jsonl.any"  # told by its content, not its name
    packed.write_bytes(COMPRESSORS[compression](SAMPLE.read_bytes()))
    assert main(["replay", str(packed), "--json"]) == 0
    replayed = capsys.readouterr().out.splitlines()
    assert [json.loads(line) for line in replayed[:-1]] == [json.loads(line) for line in plain[:-1]]
    summary = json.loads(replayed[-1])["summary"]
    assert summary["requests"] == 6 and summary["failed"] == 0


@pytest.mark.parametrize("stdin", [False, True])
def test_a_utf8_bom_and_crlf_line_endings_are_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, stdin: bool
) -> None:
    """A trace written by a Windows tool (a BOM, CRLF) replays as the same trace without, as
    ``audit`` reads such a log."""
    assert main(["replay", str(SAMPLE), "--json"]) == 0
    plain = capsys.readouterr().out.splitlines()
    windows = tmp_path / "trace.jsonl"
    windows.write_bytes(b"\xef\xbb\xbf" + SAMPLE.read_bytes().replace(b"\n", b"\r\n"))
    if stdin:
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(windows.read_bytes())))
    assert main(["replay", "-" if stdin else str(windows), "--json"]) == 0
    replayed = capsys.readouterr().out.splitlines()
    assert [json.loads(line) for line in replayed[:-1]] == [json.loads(line) for line in plain[:-1]]
    assert json.loads(replayed[-1])["summary"]["requests"] == 6


@pytest.mark.parametrize("compression", sorted(COMPRESSORS))
def test_a_compressed_trace_cut_short_replays_what_came_then_names_the_break(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], compression: str
) -> None:
    assert main(["replay", str(SAMPLE), "--json"]) == 0
    plain = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    data = COMPRESSORS[compression](SAMPLE.read_bytes())
    came = []
    for keep in range(len(data) // 3, len(data) - 1, max(1, len(data) // 7)):
        cut = tmp_path / "cut"
        cut.write_bytes(data[:keep])
        code = main(["replay", str(cut), "--json"])
        out, err = capsys.readouterr()
        assert code == 2
        assert re.search(rf"{re.escape(str(cut))}:\d+: {compression}-compressed data cut short", err), err
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
        # what the data before the break held was replayed: the plain trace's first replies
        replies = [json.loads(line) for line in out.splitlines()]
        assert replies == plain[: len(replies)]
        came.append(len(replies))
    # gzip and xz give their data as it comes; bzip2 and zstd a whole block (here: all) at once
    assert max(came) > 0 if compression in ("gzip", "xz") else max(came) == 0


def test_a_compressed_trace_on_standard_input_is_refused_clearly(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(gzip.compress(SAMPLE.read_bytes()))))
    assert main(["replay", "-", "--quiet"]) == 2
    assert "standard input is gzip-compressed: give the file, or decompress it" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("not json", "JSON is malformed"),
        ({"uid": 1, "tokenz": [1]}, "unknown field `tokenz`"),
        ({"tokens": [1]}, "missing required field `uid`"),
        ({"uid": 1, "tokens": 5}, "Expected `array`, got `int` - at `$.tokens`"),
        ({"uid": 1, "finished": True, "abort": True}, "both finish and abort"),
        ({"uid": 1, "options": {"stopp": ["x"]}}, "unknown field `stopp`"),
        ({"tokenizer": "qwen3"}, "a header (tokenizer, options) belongs on the trace's first line"),
        ({"uid": 1, "options": {"stop": [""]}}, "Expected `str` of length >= 1 - at `$.stop[0]`"),
        (
            {"uid": 1, "options": {"min_tokens": 5, "max_tokens": 2}},
            "invalid SamplingParams: min_tokens (5) must not exceed",
        ),
        ({"uid": 1, "options": {"max_tokens": 2, "max_new_tokens": 2}}, "give max_tokens or max_new_tokens"),
        ({"uid": 1, "options": {"max_new_tokens": 0}}, "Expected `int` >= 1 - at `$.max_new_tokens`"),
        ({"uid": 0, "prompt": [33]}, "'prompt' and 'options' belong on request 0's first event"),
    ],
)
@pytest.mark.parametrize("json_lines", [False, True])
def test_a_malformed_line_is_named_by_file_and_line_and_the_rest_is_replayed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], line: Any, why: str, json_lines: bool
) -> None:
    """One malformed line used to end the whole replay, named by its line alone."""
    path = write(tmp_path, [{"uid": 0, "tokens": [32]}, line, {"uid": 5, "tokens": [33], "finished": True}])
    assert main(["replay", str(path), *(["--json"] if json_lines else [])]) == 2
    out, err = capsys.readouterr()
    assert err == ""
    if json_lines:
        records = [json.loads(line) for line in out.splitlines()]
        [error] = [r["input_error"] for r in records if "input_error" in r]
        assert error.startswith(f"{path}:2: ") and why in error
        summary = records[-1]["summary"]
        assert (summary["requests"], summary["bad_lines"], summary["failed"]) == (2, 1, 0)
    else:
        assert f"--- {path}:2: " in out and f"{why}" in out and " (input error) ---\n" in out
        assert "--- request 5 (length, 1 token, 1 event) G1 ok, G2 ok, G4 ok ---\nB\n" in out
        assert (
            "--- request 0 (length, 1 token, 1 event) G1 ok, G2 ok, G4 ok; closed at end of trace ---\nA\n"
            in out
        )
        assert out.splitlines()[-1].startswith(
            "2 requests, 2 tokens, 0 failed, 0 with input errors, 1 bad line skipped"
        )


BAD_IDS = [2**64, 2**64 - 1, 2**70, -1, 151_669, 1.5, True, "5", None, [1], {"id": 1}]
"""Every kind of value an id in a trace may be that is not an id of Qwen3's vocabulary."""


@pytest.mark.parametrize("bad", BAD_IDS, ids=repr)
def test_every_bad_id_is_its_requests_input_error_naming_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], bad: Any
) -> None:
    """An id past 2**64 - 1 ended the whole replay without a line number (where -1 was the request's
    error), a float, a bool or a string ended it too, and so did a bad prompt id; each is now an
    input error of its request, naming the file and line, and the request's other ids and every
    other request are still replayed and checked."""
    path = write(
        tmp_path,
        [
            {"uid": 1, "tokens": [32]},
            {"uid": 2, "tokens": [33, bad, 34], "finished": True},
            {"uid": 3, "prompt": [bad, 9707], "tokens": [11]},
            {"uid": 1, "tokens": [35], "finished": True},
        ],
    )
    assert main(["replay", str(path)]) == 2
    out, err = capsys.readouterr()
    assert err == ""
    shown = json.dumps(bad)
    assert (
        f"--- request 2 (length, 2 tokens, 1 event) G1 ok, G2 ok, G4 ok; {path}:2: invalid token id(s) "
        f"{shown} at position 1 skipped: ids are ints in [0, 151669) ---\nBC\n"
    ) in out
    assert (
        f"--- request 3 (length, 1 token, 1 event) G1 ok, G2 ok, G4 ok; {path}:3: invalid prompt id(s) "
        f"{shown} at position 0 skipped: ids are ints in [0, 151669); closed at end of trace ---\n,\n"
    ) in out
    assert "--- request 1 (length, 2 tokens, 2 events) G1 ok, G2 ok, G4 ok ---\nAD\n" in out
    assert out.splitlines()[-1].startswith("3 requests, 5 tokens, 0 failed, 2 with input errors [")


def test_options_the_manager_refuses_refuse_their_request_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """More stop strings than the manager takes (256) ended the whole replay, and the audit of the
    trace, naming neither file nor line; the request is refused, its events skipped, and the others
    replayed."""
    stops = [f"s{n}" for n in range(300)]
    path = write(
        tmp_path,
        [
            {"uid": 1, "tokens": [32]},
            {"uid": 2, "tokens": [33], "options": {"stop": stops}},
            {"uid": 2, "tokens": [34], "finished": True},
            {"uid": 1, "tokens": [35], "finished": True},
        ],
    )
    assert main(["replay", str(path)]) == 2
    out, err = capsys.readouterr()
    assert err == "" and "--- request 1 (length, 2 tokens, 2 events) G1 ok, G2 ok, G4 ok ---\nAD\n" in out
    assert (
        f"--- {path}:2: request 2 refused, its events skipped: request refused: 300 stop strings > the "
        "limit of 256 (max_stops) (input error) ---"
    ) in out
    assert out.splitlines()[-1].startswith("1 request, 2 tokens, 0 failed, 1 with input errors [")
    assert main(["audit", str(path)]) == 2
    out, err = capsys.readouterr()
    assert (
        err == f"puredetok audit: error: {path}:2: request 2 refused, its events skipped: request refused: "
        "300 stop strings > the limit of 256 (max_stops)\n"
    )
    assert "requests                     1" in out


def test_the_ids_of_one_event_are_named_five_at_most(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, [{"uid": 1, "tokens": [-1] * 8 + [32], "finished": True}])
    assert main(["replay", str(path), "--quiet"]) == 2
    named = "-1 at position 0, -1 at position 1, -1 at position 2, -1 at position 3, -1 at position 4"
    assert f"{path}:1: invalid token id(s) {named} and 3 more skipped" in capsys.readouterr().out


def test_bad_ids_and_events_after_the_end_are_input_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(
        tmp_path,
        [
            {"uid": 1, "tokens": [32, 99_999_999, 33], "finished": True},
            {"uid": 2, "tokens": [34], "finished": True},
            {"uid": 2, "tokens": [35]},
            {"uid": 3, "tokens": [36, 37]},
        ],
    )
    assert main(["replay", str(path)]) == 2
    out = capsys.readouterr().out
    assert "99999999 at position 1" in out and f"--- {path}:3: event for request 2 after it ended" in out
    assert "closed at end of trace" in out and "FAIL" not in out
    assert f"--- request 1 (length, 2 tokens, 1 event) G1 ok, G2 ok, G4 ok; {path}:1: invalid token id" in out
    assert "---\nAB\n" in out and "2 with input errors" in out


def test_a_request_counts_the_ids_it_decoded_and_those_after_its_end(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """max_tokens 4 and 11 ids used to report "length, 11 tokens"; it decoded 4, 7 came after."""
    ids = list(range(32, 43))
    path = write(tmp_path, [{"uid": 1, "tokens": ids, "options": {"max_tokens": 4}, "finished": True}])
    assert main(["replay", str(path)]) == 0
    out = capsys.readouterr().out
    assert "--- request 1 (length, 4 tokens, 7 after the end, 1 event) G1 ok, G2 ok, G4 ok ---" in out
    assert "1 request, 4 tokens, 7 after the end, 0 failed" in out
    assert main(["replay", str(path), "--json"]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    [request] = [r["request"] for r in records if "request" in r]
    [summary] = [r["summary"] for r in records if "summary" in r]
    assert (request["tokens"], request["after_end"]) == (4, 7)
    assert (summary["tokens"], summary["after_end"]) == (4, 7)


@pytest.mark.parametrize("json_lines", [False, True])
def test_quiet_still_names_each_input_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], json_lines: bool
) -> None:
    """``--quiet`` used to print the count of input errors alone; each is named (not the texts)."""
    path = write(
        tmp_path,
        [
            {"uid": 1, "tokens": [32, 99_999_999, 33], "finished": True},
            {"uid": 2, "tokens": [34], "finished": True},
            {"uid": 2, "tokens": [35]},
        ],
    )
    assert main(["replay", str(path), "--quiet", *(["--json"] if json_lines else [])]) == 2
    out = capsys.readouterr().out.splitlines()
    named = out[:-1] if json_lines else out[:-2]  # the summary (with --json, its tokenizer inside)
    assert len(named) == 2, out
    assert f"request 1: {path}:1: invalid token id(s) 99999999 at position 1" in named[0]
    assert f"{path}:3: event for request 2 after it ended" in named[1]
    if json_lines:
        assert all("input_error" in json.loads(line) for line in named)
    else:
        assert all(line.startswith("--- ") and line.endswith(" (input error) ---") for line in named)
    assert "2 with input errors" in out[-1] or '"with_input_errors": 2' in out[-1]
    assert "AB" not in out  # the texts are not printed


def _extra_character(reply: UserReply) -> UserReply:
    if not reply.incremental_output:
        return reply
    return UserReply(
        reply.uid, reply.incremental_output + "!", reply.finished, reply.finish_reason, reply.matched_stop
    )


def _lost_tail(reply: UserReply) -> UserReply:
    if not reply.finished:
        return reply
    return UserReply(reply.uid, "", reply.finished, reply.finish_reason, reply.matched_stop)


@pytest.mark.parametrize(("corrupt", "check"), [(_extra_character, "G2"), (_lost_tail, "G1")])
def test_a_wrong_text_is_found_and_exit_1(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    corrupt: Callable[[UserReply], UserReply],
    check: str,
) -> None:
    class Broken(DetokenizeManager):
        def handle(self, messages: Any) -> list[UserReply]:
            return [corrupt(reply) for reply in super().handle(messages)]

    monkeypatch.setattr(replay_module, "DetokenizeManager", Broken)
    assert main(["replay", str(SAMPLE), "--quiet"]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out and f"{check}: " in out


def test_a_failed_check_and_an_input_error_exit_2_as_audit_does(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Replay's 1 won over 2 where audit's 2 wins over 1: part of the input was not checked."""

    class Broken(DetokenizeManager):
        def handle(self, messages: Any) -> list[UserReply]:
            return [_extra_character(reply) for reply in super().handle(messages)]

    monkeypatch.setattr(replay_module, "DetokenizeManager", Broken)
    path = write(tmp_path, [{"uid": 1, "tokens": [32, -1], "finished": True}])
    assert main(["replay", str(path), "--quiet"]) == 2
    assert "1 failed, 1 with input errors" in capsys.readouterr().out


def test_the_trace_names_its_tokenizer_relative_to_itself(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = helpers._folder("gpt2")
    ids = list(tokenizer("gpt2").encode("Hello world, naïve 🦩"))
    link = tmp_path / "tok"
    link.symlink_to(folder)
    path = write(
        tmp_path,
        [{"tokenizer": "tok", "options": {"skip_special_tokens": True}}, {"uid": "a", "tokens": ids}],
    )
    assert main(["replay", str(path)]) == 0
    out = capsys.readouterr().out
    assert reference("gpt2", ids) in out and "closed at end of trace" in out


def test_an_unknown_tokenizer_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, [{"tokenizer": "no/such/folder"}, {"uid": 1, "tokens": [1]}])
    assert main(["replay", str(path)]) == 2
    assert "no tokenizer" in capsys.readouterr().err
    assert main(["replay", str(tmp_path / "missing.jsonl")]) == 2


def test_the_progress_bar_shows_rate_and_time_left_when_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, [{"uid": n % 7, "tokens": [32 + n % 20]} for n in range(600)])
    monkeypatch.setattr(replay_cli, "PROGRESS_AFTER", 0.0)
    monkeypatch.setattr(replay_cli, "PROGRESS_INTERVAL", 0.0)
    assert main(["replay", str(path), "--quiet"]) == 0
    assert capsys.readouterr().err == ""  # stderr is not a tty here: no bar unless asked
    assert main(["replay", str(path), "--quiet", "--progress"]) == 0
    captured = capsys.readouterr()
    size = path.stat().st_size
    # tqdm's bar: the share of the trace read, bytes per second, elapsed<left, the events so far
    assert "replay:" in captured.err and "%|" in captured.err and "B/s" in captured.err
    assert re.search(r"\[\d\d:\d\d<\d\d:\d\d", captured.err) and "512 events" in captured.err
    assert f"{size / 1024:.1f}k/{size / 1024:.1f}k" in captured.err
    tokenizer, summary = captured.out.splitlines()  # --quiet: the summary alone
    assert tokenizer.startswith("tokenizer: embedded Qwen3 (byte-level BPE, exact)")
    assert summary.startswith("7 requests, 600 tokens, 0 failed")


def test_the_progress_bar_waits_a_moment(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, [{"uid": 1, "tokens": [32]}])
    assert main(["replay", str(path), "--quiet", "--progress"]) == 0
    assert capsys.readouterr().err == ""


@st.composite
def traces(draw: st.DrawFn, name: str) -> list[TraceEvent]:
    events: list[list[TraceEvent]] = []
    for uid in range(draw(st.integers(1, 4))):
        ids = draw(id_lists(name, max_size=24))
        cuts = sorted(draw(st.lists(st.integers(0, len(ids)), max_size=3)))
        pieces = [ids[a:b] for a, b in zip([0, *cuts], [*cuts, len(ids)])]
        skip = draw(st.booleans())
        prompt = tuple(draw(id_lists(name, max_size=5))) if draw(st.booleans()) else None
        text = reference(name, ids)
        stop = (text[len(text) // 2 : len(text) // 2 + 2],) if text and draw(st.booleans()) else ()
        options = SamplingParams(
            skip_special_tokens=skip,
            stop=stop,
            include_stop_str_in_output=draw(st.booleans()),
            ignore_eos=draw(st.booleans()),
            max_new_tokens=draw(st.none() | st.integers(1, 30)),
        )
        end = draw(st.sampled_from(["finished", "abort", "open"]))
        mine = [
            TraceEvent(0, uid, tuple(piece), prompt if i == 0 else None, options if i == 0 else None)
            for i, piece in enumerate(pieces)
        ]
        last = mine[-1]
        mine[-1] = TraceEvent(
            0, uid, last.tokens, last.prompt, last.options, end == "finished", end == "abort"
        )
        events.append(mine)
    order: list[TraceEvent] = []
    while any(events):
        pick = draw(st.sampled_from([i for i, e in enumerate(events) if e]))
        order.append(events[pick].pop(0))
    return order


@pytest.mark.parametrize("name", ["qwen3", "llama2", "distilbert_base_uncased"])
@settings(max_examples=max(4, settings().max_examples // 6))
@given(data=st.data())
def test_random_traces_pass_every_check(name: str, data: st.DataObject) -> None:
    replayer = Replayer(
        tokenizer(name), SamplingParams(), codecs=shared_codecs(), vocabulary=vocabulary_of(name)
    )
    drawn = data.draw(traces(name))
    for event in drawn:
        replayer.event(event)
    replayer.close_all()
    reports = replayer.take_ended()
    assert len(reports) == replayer.summary.requests == len({event.uid for event in drawn})
    for report in reports:
        assert report.ok, report.failures
        assert not report.errors
    assert len(replayer.manager) == 0 and not replayer.live


def test_read_trace_gives_the_header_then_numbered_events() -> None:
    header, event = read_trace(
        ['{"tokenizer": "qwen3", "options": {"stop": ["x"]}}', "", '{"uid": 1, "tokens": [5]}']
    )
    assert isinstance(header, TraceHeader) and header.tokenizer == "qwen3" and header.options.stop == ("x",)
    assert event == TraceEvent(3, 1, (5,))


def test_detokenize_message_after_a_stop_is_ignored_not_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ids = list(tokenizer("qwen3").encode("one\ntwo", add_special_tokens=False))
    path = write(
        tmp_path,
        [
            {"uid": 1, "tokens": ids[:2], "options": {"stop": ["\n"]}},
            {"uid": 1, "tokens": ids[2:], "finished": True},
        ],
    )
    assert main(["replay", str(path)]) == 0
    out = capsys.readouterr().out
    assert "1 event ignored after a stop" in out
    assert (
        os.linesep.join(['--- request 1 (stop "\\n", 2 tokens, 1 event) G1 ok, G2 ok, G4 ok ---', "one"])
        in out
    )


# --- contract C, computed from decode alone ----------------------------------------------------


class Scripted(DetokenizeManager):
    """A manager that streams a given text (to test replay's checks, not the core)."""

    script: dict[Any, list[str]] = {}

    def handle(self, messages: Any) -> list[UserReply]:
        replies = super().handle(messages)
        return [
            UserReply(r.uid, self.script[r.uid].pop(0), r.finished, r.finish_reason, r.matched_stop, r.error)
            for r in replies
        ]


@pytest.mark.parametrize(
    ("name", "prompt_text", "cut", "output", "right", "wrong"),
    [
        # Llama-2's "...:\n" ends in the byte token <0x0A>: the newline is the prompt's own text.
        ("llama2", "Answer:\n", 0, "Yes", " Yes", "\n Yes"),
        # A prompt ending inside a character that the output (the prompt's last id) completes: the
        # character is new text.
        ("qwen3", "ok 🦩", 1, "", "🦩", "ok 🦩"),
        # ... and one that the output spoils: the prompt already showed that U+FFFD.
        ("qwen3", "ok 🦩", 1, " a", " a", "\ufffd a"),
    ],
)
@pytest.mark.parametrize("checked_whole", [False, True])
def test_replay_expects_the_text_contract_c_gives_after_a_prompt(
    monkeypatch: pytest.MonkeyPatch,
    checked_whole: bool,
    name: str,
    prompt_text: str,
    cut: int,
    output: str,
    right: str,
    wrong: str,
) -> None:
    """``decode(p + s)[len(L):]``, L the longest common prefix of ``decode(p)`` and ``decode(p + s)``:
    replay computes the expected text from decode itself; text the prompt showed is never new."""
    tok = tokenizer(name)
    whole = tuple(tok.encode(prompt_text, add_special_tokens=False))
    prompt = whole[: len(whole) - cut]
    ids = tuple(tok.encode(output, add_special_tokens=False)) if output else whole[len(prompt) :]
    monkeypatch.setattr(replay_module, "DetokenizeManager", Scripted)
    for text, ok in ((right, True), (wrong, False)):
        Scripted.script = {1: [text]}
        replayer = Replayer(tok, SamplingParams(), whole=checked_whole, keep_text=True)
        replayer.event(TraceEvent(1, 1, ids, prompt, None, True))
        [report] = replayer.take_ended()
        assert report.text == text and report.ok is ok, report.failures
        if not ok:
            assert report.checks["G1"] is False and report.checks["G2"] is False


@pytest.mark.parametrize("label", helpers.CLEANUP_OBJECTS)
@pytest.mark.parametrize("checked_whole", [False, True])
def test_replay_checks_against_the_decode_codec_for_models_with_cleanup(
    monkeypatch: pytest.MonkeyPatch, checked_whole: bool, label: str
) -> None:
    """The oracle is the one the kit and the audit use: on an object whose decode has no cleanup
    option, ``transformers``' cleanup of its text (mistral-common's and tiktoken's decode were
    called with ``skip_special_tokens`` and the check raised TypeError)."""
    tok, ids = helpers.cleanup_object(label)
    params = SamplingParams(clean_up_tokenization_spaces=True)
    replayer = Replayer(tok, params, whole=checked_whole, keep_text=True)
    replayer.event(TraceEvent(1, 1, ids, (), None, True))
    [report] = replayer.take_ended()
    assert report.text == helpers.CLEANED[1] and report.ok, report.failures
    monkeypatch.setattr(replay_module, "DetokenizeManager", Scripted)
    Scripted.script = {1: [helpers.CLEANED[0]]}
    replayer = Replayer(tok, params, whole=checked_whole)
    replayer.event(TraceEvent(1, 1, ids, (), None, True))
    [report] = replayer.take_ended()
    assert report.checks["G1"] is False


@pytest.mark.parametrize("checked_whole", [False, True])
def test_replay_passes_spaces_between_special_tokens_to_a_class_that_acts_on_it(
    tmp_path: Path, checked_whole: bool
) -> None:
    """Wav2Vec2's CTC class spaces its tokens out with the option: the oracle passes it as the codec
    does (it was passed only to a class with a ``tokenizers`` backend, and this text failed G1 and G2)."""
    from transformers import Wav2Vec2CTCTokenizer

    vocab = "<pad> <s> </s> <unk> | E L H O".split(" ")
    (tmp_path / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(vocab)}), encoding="utf-8")
    tok = Wav2Vec2CTCTokenizer(str(tmp_path / "vocab.json"))
    tok.add_tokens(["!"])
    ids = (7, 5, 6, 0, 6, 8, 9)
    params = SamplingParams(skip_special_tokens=False, spaces_between_special_tokens=True)
    replayer = Replayer(tok, params, whole=checked_whole, keep_text=True)
    replayer.event(TraceEvent(1, 1, ids, (), None, True))
    [report] = replayer.take_ended()
    assert report.text == "H E L L O !" and report.ok, report.failures


@pytest.mark.parametrize("whole", [False, True])
def test_a_stop_string_that_completes_earlier_is_found(monkeypatch: pytest.MonkeyPatch, whole: bool) -> None:
    """A stop layer that missed the earlier stop string would agree with itself; the decode does not."""

    class MissesTheFirstStop(DetokenizeManager):
        def rules(self, params: SamplingParams) -> Any:
            return super().rules(msgspec.structs.replace(params, stop=params.stop[1:]))

    monkeypatch.setattr(replay_module, "DetokenizeManager", MissesTheFirstStop)
    tok = tokenizer("qwen3")
    ids = tuple(tok.encode("a Z b XY c", add_special_tokens=False))
    replayer = Replayer(tok, SamplingParams(), whole=whole, keep_text=True)
    replayer.event(TraceEvent(1, 1, ids, None, SamplingParams(stop=("Z", "XY")), True))
    [report] = replayer.take_ended()
    assert report.text == "a Z b " and report.matched == "XY"
    assert report.failures == ["G1: the stop string 'Z' completes before the text ends"]


# --- linear time, bounded memory --------------------------------------------------------------


def _one_request(
    n: int, prompt: tuple[int, ...] = (), per_event: int = 1, whole: bool = True
) -> tuple[int, int]:
    """Replay one request of ``n`` ids; the work its checks did, and its size (ids and characters
    of the prompt and of the output)."""
    tok = tokenizer("qwen3")
    ids = tok.encode(MULTILINGUAL * (1 + n // 50), add_special_tokens=False)[:n]
    replayer = Replayer(tok, SamplingParams(), codecs=shared_codecs(), whole=whole)
    starts = range(0, n, per_event)
    for line, begin in enumerate(starts, 1):
        chunk = tuple(ids[begin : begin + per_event])
        replayer.event(TraceEvent(line, 1, chunk, prompt if line == 1 else None, None, line == len(starts)))
    [report] = replayer.take_ended()
    assert report.ok and report.checks == {"G1": True, "G2": True, "G4": True}
    size = len(prompt) + len(tok.decode(list(prompt))) + n + report.length
    return replayer.work, size


@pytest.mark.parametrize("whole", [True, False])
@pytest.mark.parametrize(("prompt", "per_event"), [(0, 1), (300, 1), (0, 7)])
def test_replay_work_grows_linearly_with_a_requests_events(prompt: int, per_event: int, whole: bool) -> None:
    """The cost of the checks, counted (ids decoded, characters decoded and compared), per unit of
    the request's size stays a small constant as its events grow 16x (it grew with them: every
    event decoded everything so far, 2k events 0.38 s, 8k 5.3 s). Measured: 3.6 to 5.1 checked
    whole; compared as it runs, every event is checked and the work is the characters compared."""
    ids = tuple(tokenizer("qwen3").encode(MULTILINGUAL * 20, add_special_tokens=False)[:prompt])
    per_size = [
        work / size for work, size in (_one_request(n, ids, per_event, whole) for n in (500, 2000, 8000))
    ]  # compared as it runs, the prompt's fixed share (in the size, not in the work) shows more
    assert max(per_size) < 6 and max(per_size) < (1.5 if whole else 2) * min(per_size), per_size


def test_replay_still_checks_a_long_request_as_it_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The checks made while a request runs grow rarer with its length, but go on to its end."""
    checked: list[int] = []
    original = Replayer._continuation

    def counting(self: Replayer, report: Any, ids: Any) -> str:
        checked.append(len(ids))
        return original(self, report, ids)

    monkeypatch.setattr(Replayer, "_continuation", counting)
    _one_request(2000)
    during = checked[:-1]  # the last is the final check
    assert during[:10] == list(range(1, 11))  # every event of a short request
    assert 15 < len(during) < 200 and during[-1] > 1500  # then fewer, up to the end


def test_replay_memory_is_bounded_by_the_live_requests() -> None:
    """tracemalloc's peak over a replay: the same for 500 and 3,000 requests one after the other,
    and larger with 300 requests live at once (the measure sees live requests)."""
    import tracemalloc

    tok = tokenizer("qwen3")
    ids = tok.encode(MULTILINGUAL, add_special_tokens=False)

    def peak(requests: int, live: int) -> int:
        replayer = Replayer(tok, SamplingParams(), codecs=shared_codecs(), remember_ended=200)
        tracemalloc.start()
        try:
            line = 0
            for first in range(0, requests, live):
                for part in range(3):
                    for uid in range(first, min(requests, first + live)):
                        line += 1
                        chunk = tuple(ids[(uid + 5 * part) % 60 : (uid + 5 * part) % 60 + 5])
                        replayer.event(TraceEvent(line, uid, chunk, None, None, part == 2))
                replayer.take_ended()
            assert replayer.summary.requests == requests and replayer.summary.failed == 0
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    peak(300, 1)  # first-use allocations (caches, interned values) out of the way
    few, many, wide = peak(500, 1), peak(3000, 1), peak(3000, 300)
    assert many < 1.5 * few + 50_000, (few, many)
    assert wide > 4 * many, (many, wide)


def test_quiet_names_the_first_failures_and_counts_them_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    class Broken(DetokenizeManager):
        def handle(self, messages: Any) -> list[UserReply]:
            return [_extra_character(reply) for reply in super().handle(messages)]

    monkeypatch.setattr(replay_module, "DetokenizeManager", Broken)
    path = write(tmp_path, [{"uid": n, "tokens": [32, 33], "finished": True} for n in range(25)])
    assert main(["replay", str(path), "--quiet"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 23 and all(line.startswith("FAILED request ") for line in lines[:20])
    assert lines[20] == "... and 5 more failed (the first 20 are named)"
    assert lines[21].startswith("tokenizer: embedded Qwen3")
    assert lines[22].startswith("25 requests, 50 tokens, 25 failed, 0 with input errors [")


class Perturbed(DetokenizeManager):
    """A manager whose replies are changed as :attr:`changes` says (by uid and reply number), to
    give the checks something to find."""

    changes: dict[tuple[Any, int], str] = {}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.replied: dict[Any, int] = {}

    def handle(self, messages: Any) -> list[UserReply]:
        replies = []
        for r in super().handle(messages):
            number = self.replied[r.uid] = self.replied.get(r.uid, -1) + 1
            text = r.incremental_output
            change = self.changes.get((r.uid, number))
            if change == "drop":
                text = text[1:]
            elif change == "repeat":
                text += text
            elif change is not None:
                text += change
            replies.append(UserReply(r.uid, text, r.finished, r.finish_reason, r.matched_stop, r.error))
        return replies


def _findings(report: Any) -> tuple[Any, ...]:
    """What the final checks of a request found (the checks made while it ran are made after
    other events in the two ways, so their messages are left out)."""
    final = [failure for failure in report.failures if not failure.startswith("G2: after")]
    return (report.uid, report.decoded, report.finish_reason, report.matched, report.checks["G1"], final)


@pytest.mark.parametrize("name", ["qwen3", "llama2"])
@settings(max_examples=max(10, settings().max_examples // 3))
@given(data=st.data())
def test_comparing_as_it_runs_finds_what_comparing_the_whole_texts_finds(
    name: str, data: st.DataObject
) -> None:
    """Streaming the expected text through the core and comparing as both arrive gives every
    request the same final findings (G1, G2, G4, with their messages: the lengths compared, the
    stop string found early) as decoding its kept ids whole, on random traces whose text is
    changed here and there (a character dropped or added, a U+FFFD, a piece repeated)."""
    drawn = data.draw(traces(name))
    uids = sorted({event.uid for event in drawn})
    kinds = st.sampled_from(["drop", "repeat", "x", "\ufffd", " "])
    Perturbed.changes = data.draw(st.dictionaries(st.tuples(st.sampled_from(uids), st.integers(0, 4)), kinds))
    found = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(replay_module, "DetokenizeManager", Perturbed)
        for whole in (False, True):
            codecs = shared_codecs()
            replayer = Replayer(
                tokenizer(name), SamplingParams(), codecs=codecs, vocabulary=vocabulary_of(name), whole=whole
            )
            for event in drawn:
                replayer.event(event)
            replayer.close_all()
            reports = sorted(replayer.take_ended(), key=lambda report: report.uid)
            assert all((report.reference is None) is whole for report in reports)
            found.append([_findings(report) for report in reports])
    assert found[0] == found[1]
