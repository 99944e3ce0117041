"""``spaces_between_special_tokens`` in the audit: vLLM and SGLang pass it to ``tokenizer.decode``
(True unless a request says otherwise), and Wav2Vec2's CTC class acts on it (it joins every token
with a space; its own default is False). The audit took neither the record's option nor an option
of its own: it decoded with the tokenizer's default, so a CTC request made with the engines'
default was a false difference and one whose engine ignored the option was missed.

The exact texts here are ``tokenizer.decode``'s own, with the option passed.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Literal

import pytest

from families import wav2vec2
from helpers import tokenizer
from puredetok_audit import AuditOptions, Auditor, Request, audit_shard, shards_of
from puredetok_audit._compare import Deferred
from puredetok_audit._records import NOT_PASSED
from test_audit import audit, completion, report, write_lines


@functools.cache
def ctc() -> Any:
    """A Wav2Vec2 CTC tokenizer (capital letters, ``|`` the word delimiter)."""
    return wav2vec2()


def ids() -> list[int]:
    """'HELO WORLD' (no letter twice in a row: CTC would merge them)."""
    tok = ctc()
    return [
        *tok.convert_tokens_to_ids(list("HELO")),
        tok.convert_tokens_to_ids("|"),
        *tok.convert_tokens_to_ids(list("WORLD")),
    ]


def decoded(spaces: bool) -> str:
    return str(ctc().decode(ids(), skip_special_tokens=True, spaces_between_special_tokens=spaces))


def request(text: str, spaces: bool | Literal["not passed"] | None = None) -> Request:
    """A record of :func:`ids` whose engine returned ``text``, with its own option ``spaces``."""
    return Request("r", 1, (), tuple(ids()), text, spaces_between_special_tokens=spaces)


def test_the_option_changes_this_tokenizers_text() -> None:
    """The premise of every test below."""
    assert decoded(False) == "HELO WORLD" and decoded(True) == "H E L O   W O R L D"
    assert ctc().decode(ids(), skip_special_tokens=True) == decoded(False)


def test_by_default_the_engines_default_true_is_audited() -> None:
    """A record that does not say is decoded with the option True, as vLLM and SGLang do (the
    audit passed nothing: the tokenizer's False, a false difference, and a missed one)."""
    auditor = Auditor(ctc())
    assert auditor.check(request(decoded(True))) is None
    missed = auditor.check(request(decoded(False)))
    assert missed is not None and missed.exact == decoded(True)[:20]


@pytest.mark.parametrize("spaces", [False, True])
def test_a_records_own_option_is_audited(spaces: bool) -> None:
    """The record's option decides; the text of the other one is a difference."""
    auditor = Auditor(ctc())
    assert auditor.check(request(decoded(spaces), spaces)) is None
    other = auditor.check(request(decoded(not spaces), spaces))
    assert other is not None and other.offset == 1


def test_a_record_whose_engine_passed_no_option_is_audited_with_the_tokenizers_default() -> None:
    auditor = Auditor(ctc())
    assert auditor.check(request(decoded(False), NOT_PASSED)) is None
    assert auditor.check(request(decoded(True), NOT_PASSED)) is not None


@pytest.mark.parametrize("spaces", [False, True])
def test_the_audits_option_wins_over_the_records(spaces: bool) -> None:
    auditor = Auditor(ctc(), AuditOptions(spaces_between_special_tokens=spaces))
    for record in (None, not spaces, NOT_PASSED):
        assert auditor.check(request(decoded(spaces), record)) is None
        assert auditor.check(request(decoded(not spaces), record)) is not None


def test_a_prompt_is_decoded_with_the_option_too() -> None:
    """Contract C's prompt: decode(prompt + output) after decode(prompt), both with the option."""
    tok, prompt = ctc(), tuple(ids()[:4])
    whole = tok.decode([*prompt, *ids()], skip_special_tokens=True, spaces_between_special_tokens=True)
    start = tok.decode(list(prompt), skip_special_tokens=True, spaces_between_special_tokens=True)
    assert whole.startswith(start)
    assert Auditor(ctc()).check(Request("r", 1, prompt, tuple(ids()), whole[len(start) :])) is None


def trace(path: Path, options: dict[str, Any] | None, in_header: bool = False) -> Path:
    """A trace of one request of :func:`ids`, its options on its first event (or in a header)."""
    event: dict[str, Any] = {"uid": 1, "tokens": ids(), "finished": True}
    lines: list[Any] = []
    if options is not None and in_header:
        lines.append({"options": options})
    elif options is not None:
        event["options"] = options
    return write_lines(path, [*lines, event])


@pytest.mark.parametrize("header", [False, True])
@pytest.mark.parametrize(
    "options", [{"spaces_between_special_tokens": True}, {"spaces_between_special_tokens": False}, {}]
)
def test_a_traces_requests_are_audited_with_their_option(
    tmp_path: Path, options: dict[str, Any], header: bool
) -> None:
    """The manager replays each request with its option (not passed where it has none): the audit
    decodes as it did (it passed nothing: True was a false difference)."""
    path = trace(tmp_path / "t.jsonl", options, header)
    [shard] = shards_of(str(path))
    result = audit_shard(shard, Auditor(ctc()))
    assert result.tally.requests == 1 and result.tally.differing == 0, result.records


def test_the_flag_sets_the_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--spaces-between-special-tokens`` / ``--no-spaces-between-special-tokens``, as
    ``--skip-special-tokens``; without either, the engines' True."""
    folder = tmp_path / "ctc"
    ctc().save_pretrained(folder)
    log = write_lines(
        tmp_path / "log.jsonl",
        [completion("s", [], ids(), decoded(True)), completion("p", [], ids(), decoded(False))],
    )
    out = tmp_path / "report.jsonl"
    for flag, differing in (
        ("--spaces-between-special-tokens", "p"),
        ("--no-spaces-between-special-tokens", "s"),
        (None, "p"),
    ):
        argv = [str(log), "--tokenizer", str(folder), "--report", str(out), *([flag] if flag else [])]
        code, _, err = audit(capsys, *argv)
        assert code == 1, err
        assert [record["id"] for record in report(out)] == [differing]


@pytest.mark.parametrize("header", [False, True])
def test_a_bad_value_in_a_trace_is_an_input_error_naming_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], header: bool
) -> None:
    folder = tmp_path / "ctc"
    ctc().save_pretrained(folder)
    bad = {"spaces_between_special_tokens": "no"}
    good = {"uid": 2, "tokens": ids(), "finished": True, "options": {"spaces_between_special_tokens": True}}
    lines: list[Any] = (
        [{"options": bad}] if header else [{"uid": 1, "tokens": ids(), "finished": True, "options": bad}]
    )
    path = write_lines(tmp_path / "t.jsonl", [*lines, good])
    [shard] = shards_of(str(path))
    result = audit_shard(shard, Auditor(ctc()))
    [error] = [record for record in result.records if "error" in record]
    assert error["line"] == 1 and "spaces_between_special_tokens" in error["error"]
    assert result.tally.errors == 1 and result.tally.requests == 1 and result.tally.differing == 0
    code, _, err = audit(capsys, str(path), "--tokenizer", str(folder))
    assert code == 2 and f"{path}:1: " in err and "spaces_between_special_tokens" in err


def test_a_bad_value_of_the_audits_option_is_named() -> None:
    from puredetok.errors import OptionTypeError

    with pytest.raises(OptionTypeError, match="spaces_between_special_tokens"):
        Auditor(ctc(), AuditOptions(spaces_between_special_tokens="no")).check(request(decoded(True)))  # type: ignore[arg-type]


def test_a_worker_given_the_drivers_codec_needs_no_tokenizer_where_decode_ignores_the_option() -> None:
    """Qwen3's decode ignores the option: the driver's codec serves a worker's records of either
    value (the worker would otherwise load the tokenizer to build the same codec again)."""
    tok = tokenizer("qwen3")
    driver = Auditor(tok)
    driver.codec_of(None)

    def unloadable() -> Any:
        raise AssertionError("the tokenizer was loaded")

    worker = Auditor(Deferred(unloadable), AuditOptions(), driver.codecs)
    tokens = tuple(tok.encode("naïve café"))
    for spaces in (True, False, NOT_PASSED, None):
        record = Request("r", 1, (), tokens, "naïve café", spaces_between_special_tokens=spaces)
        assert worker.check(record) is None
