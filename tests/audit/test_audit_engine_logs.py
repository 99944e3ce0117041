"""The audit on logs the engines' own serving code wrote (tests/data/engine_logs, made by
engine_tests/vllm/serving_logs.py and engine_tests/sglang/generate_logs.py with the engines' own
detokenizers; see that folder's README): the main suite holds their shapes without the engines.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from test_audit import audit, report, table

LOGS = Path(__file__).parents[1] / "data" / "engine_logs"


def test_vllm_streams_of_two_choices_with_usage_chunks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """vLLM 0.33.0's completion stream (logprobs, ``include_usage``) and chat stream (a role chunk
    per choice carrying the prompt's ids beside ``choices``, ``continuous_usage_stats``), two
    choices interleaved, a usage chunk without choices, ``[DONE]``; decoded by vLLM's own
    detokenizer on Qwen3 after a prompt ending inside "🌶": each choice is read whole (the stop
    token of one not decoded) and differs from the first chunk that sends the prompt's text."""
    files = [LOGS / "vllm-0.33.0-completion-stream-n2.txt", LOGS / "vllm-0.33.0-chat-stream-n2.txt"]
    code, out, err = audit(capsys, *map(str, files), "--report", str(tmp_path / "r.jsonl"))
    assert (code, err) == (1, "")
    rows = table(out)
    assert (rows["requests"], rows["tokens"], rows["differing"], rows["streams"]) == ("4", "14", "4", "4")
    found = {
        (r["id"], r["exact"], r["engine"], r["tokens"], r["chunk"]) for r in report(tmp_path / "r.jsonl")
    }
    assert found == {
        ("cmpl-0/0", "🌶 is spicy", "Hello world 🌶 is spi", 4, 1),
        ("cmpl-0/1", " Fine.", "Hello world � Fine.", 3, 0),
        ("chatcmpl-2/0", " Fine.", "Hello world � Fine.", 3, 1),
        ("chatcmpl-2/1", "🌶 is spicy", "Hello world 🌶 is spi", 4, 2),
    }


def test_a_vllm_chat_response_with_token_placeholders(capsys: pytest.CaptureFixture[str]) -> None:
    """vLLM 0.33.0's chat completion without ``token_ids``, its logprobs asked with
    ``return_tokens_as_token_ids`` (``"token_id:N"``, ``bytes`` empty), no prompt: read from
    the placeholders, and equal (two lone continuation bytes are two U+FFFD)."""
    code, out, err = audit(capsys, str(LOGS / "vllm-0.33.0-chat-token-placeholders.jsonl"))
    assert (code, err) == (0, "")
    assert (table(out)["requests"], table(out)["tokens"], table(out)["equal"]) == ("1", "4", "1")


def test_sglang_outputs_and_streams_both_ways(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """SGLang 0.5.23's ``/generate``: whole outputs (``prompt_token_ids``, ``meta_info`` with a stop
    token ``matched``, not decoded), a stream of texts and ids so far (the default) and one of new
    texts and ids with logprobs (``--incremental-streaming-output``, two ids a step); decoded by
    SGLang's own detokenizer on Llama-2, which sends the ``k`` of the byte run ``<0x6B> <0xD2>``
    before the run ends: both streams differ, from the chunk that sent it."""
    from helpers import _folder

    files = sorted(LOGS.glob("sglang-0.5.23-*"))
    out_path = tmp_path / "r.jsonl"
    code, out, err = audit(
        capsys, *map(str, files), "--tokenizer", str(_folder("llama2")), "--report", str(out_path)
    )
    assert (code, err) == (1, "")
    rows = table(out)
    assert (rows["requests"], rows["tokens"], rows["equal"], rows["streams"]) == ("4", "16", "2", "2")
    found = {(r["id"], r["exact"], r["engine"], r["kind"], r["chunk"]) for r in report(out_path)}
    assert found == {
        ("s1", " ok�� fine", " okk� fine", "replacement characters", 1),
        ("s2", " ok�� fine", " okk� fine", "replacement characters", 0),
    }
