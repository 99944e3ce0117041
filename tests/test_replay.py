"""``puredetok replay TRACE`` (SPEC 6): the trace format, the per-request checks, exit codes."""

from __future__ import annotations

import functools
import io
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import helpers
from helpers import id_lists, reference, tokenizer
from puredetok.adapters import replay as replay_module
from puredetok.adapters.detokenize_manager import DetokenizeManager
from puredetok.adapters.loading import load_tokenizer
from puredetok.adapters.messages import SamplingParams, UserReply
from puredetok.adapters.replay import Replayer
from puredetok.adapters.trace import TraceEvent, TraceHeader, read_trace
from puredetok.cli import main
from puredetok.cli import replay as replay_cli

CODECS: dict[str, Any] = {}
SAMPLE = Path(__file__).resolve().parents[1] / "docs" / "sample-trace.jsonl"


@functools.cache
def _load(name: str) -> Any:
    return load_tokenizer(name)


@pytest.fixture(autouse=True)
def _shared_tokenizers_and_codecs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each replay loads its tokenizer and builds codecs: share them across tests (seconds each)."""

    def replayer(tokenizer: Any, defaults: SamplingParams) -> Replayer:
        return Replayer(tokenizer, defaults, codecs=CODECS.setdefault(str(id(tokenizer)), {}))

    monkeypatch.setattr(replay_cli, "load_tokenizer", _load)
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
    assert summary["requests"] == 6 and summary["failed"] == 0
    text: dict[int, str] = {}
    for line in lines:
        text[line["uid"]] = text.get(line["uid"], "") + line["delta"]
    assert (
        text[1] == "鱻䨻🦩 is rare, 推理 naïve" and text[3] == "推理引擎 😀 streams text: naïve café, 1+1=2."
    )
    finished = {line["uid"]: line for line in lines if line["finished"]}
    assert finished[3]["finish_reason"] == "stop" and finished[3]["matched_stop"] == "\n"
    assert finished[4]["finish_reason"] == "abort" and finished[5]["matched_stop"] == 151645
    checks = {r["uid"]: r["checks"] for r in summary["per_request"]}
    assert checks[4] == {"G1": None, "G2": True, "G4": True}
    assert all(all(v in (True, None) for v in c.values()) for c in checks.values())


def test_a_trace_on_standard_input(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(SAMPLE.read_bytes())))
    assert main(["replay", "-", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "6 requests" in out and "---" not in out


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("not json", "line 2: JSON is malformed"),
        ({"uid": 1, "tokens": [1.5]}, "line 2: Expected `int`"),
        ({"uid": 1, "tokenz": [1]}, "unknown field `tokenz`"),
        ({"tokens": [1]}, "missing required field `uid`"),
        ({"uid": 1, "finished": True, "abort": True}, "both finish and abort"),
        ({"uid": 1, "options": {"stopp": ["x"]}}, "unknown field `stopp`"),
        ({"tokenizer": "qwen3"}, "line 2"),
    ],
)
def test_a_malformed_line_is_a_one_line_error_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], line: Any, why: str
) -> None:
    path = write(tmp_path, [{"uid": 0, "tokens": [32]}, line])
    assert main(["replay", str(path)]) == 2
    err = capsys.readouterr().err
    assert why in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_options_on_a_later_event_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, [{"uid": 0, "tokens": [32]}, {"uid": 0, "prompt": [33]}])
    assert main(["replay", str(path)]) == 2
    assert "first event" in capsys.readouterr().err


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
    assert "99999999 at position 1" in out and "event after the request ended" in out
    assert "closed at end of trace" in out and "FAIL" not in out
    assert "--- request 1 (length, 2 tokens) ---\nAB\n" in out


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


def test_the_progress_bar_shows_on_long_replays_when_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, [{"uid": n % 7, "tokens": [32 + n % 20]} for n in range(300)])
    monkeypatch.setattr(replay_cli, "PROGRESS_AFTER", 0.0)
    monkeypatch.setattr(replay_cli.Progress, "INTERVAL", 0.0)
    assert main(["replay", str(path), "--quiet"]) == 0
    assert capsys.readouterr().err == ""  # stderr is not a tty here: no bar unless asked
    assert main(["replay", str(path), "--quiet", "--progress"]) == 0
    err = capsys.readouterr().err
    assert "events" in err and "%" in err and "#" in err and err.endswith("\x1b[K")


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
        prompt = tuple(draw(id_lists(name, max_size=5))) if draw(st.booleans()) else None
        text = reference(name, ids)
        stop = (text[len(text) // 2 : len(text) // 2 + 2],) if text and draw(st.booleans()) else ()
        options = SamplingParams(
            skip_special_tokens=draw(st.booleans()),
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
    replayer = Replayer(tokenizer(name), SamplingParams(), codecs=CODECS.setdefault(name, {}))
    for event in data.draw(traces(name)):
        replayer.event(event)
    replayer.close_all()
    for report in replayer.requests.values():
        assert report.ok, report.failures
        assert not report.errors
    assert len(replayer.manager) == 0


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
    assert "1 later event(s) ignored after the stop" in out
    assert os.linesep.join(['--- request 1 (stop "\\n", 2 tokens) ---', "one"]) in out
