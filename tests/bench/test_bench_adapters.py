"""The repository's benchmarks run (no timing is asserted: figures come from ``python3 tasks.py bench``)."""

from __future__ import annotations

import pytest

from benchmarks.manager import BatchedTwoWindow, manager_section, memory_section
from benchmarks.worker import worker_section
from helpers import tokenizer
from puredetok.cli._measure import TwoWindow, trace_ids


def test_the_batched_two_window_baseline_is_the_engines_algorithm_per_request() -> None:
    tok = tokenizer("qwen3")
    ids = trace_ids(tok, 60)
    rows = [ids[n:] + ids[:n] for n in range(0, 60, 12)]
    batched = BatchedTwoWindow(tok, len(rows))
    single = [TwoWindow(tok.decode) for _ in rows]
    for position in range(60):
        deltas = batched.step([row[position] for row in rows])
        assert deltas == [window.step(row[position]) for window, row in zip(single, rows)]


def test_the_manager_and_memory_sections_measure_side_by_side() -> None:
    tok = tokenizer("qwen3")
    plain, batch, handle, four, baseline = manager_section(tok, requests=8, steps=8, repeats=2)
    for served in (batch, handle):
        assert served.target and served.ratio is not None and served.ok is not None
        assert served.repeats == 2 and served.low is not None and served.high is not None
        assert served.low <= served.ratio <= served.high
    assert baseline.ratio == 1.0 and four.ratio is not None and plain.ratio is not None
    [held, messages, saved] = memory_section(tok, requests=500)
    assert held.ok is True and "500 live requests" in held.name
    assert saved.ok is True and "saved as bytes" in saved.name


def test_the_worker_section_drives_a_real_worker_process() -> None:
    results = worker_section(tokenizer("qwen3"), "qwen3", requests=16, rounds=5)
    names = [result.name for result in results]
    assert any("16 requests x 1 id(s)/msg" in name for name in names)
    assert all(
        result.ratio is not None and result.ratio > 0 for result in results if "id(s)/msg" in result.name
    )
    assert any("round trip: p50" in name for name in names)


def test_the_serving_rows_run_with_stops_eos_and_token_limits() -> None:
    from puredetok.cli._measure import stops_section

    rows = {row.name: row for row in stops_section(tokenizer("qwen3"), tokens=300, repeats=2)}
    assert rows["advance, 4 stops + EOS + min_tokens"].target == "<= 1.5 x core step"
    assert rows["advance, + max_new_tokens"].target == "<= 2.0 x core step"
    assert all(row.repeats == 2 for row in rows.values())


def test_the_sglang_bench_runs_qwen3_and_llama2_by_default_from_a_source_checkout() -> None:
    from pathlib import Path

    from benchmarks.engines.sglang import default_tokenizers

    sources = default_tokenizers()
    assert sorted(sources) == ["llama2", "qwen3"]
    assert Path(sources["llama2"]) == Path(__file__).resolve().parents[1] / "data" / "tokenizers" / "llama2"


def test_the_whole_report_serving_only_prints_the_serving_path_side_by_side(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from benchmarks.__main__ import main

    assert main(["--serving-only", "--no-worker", "--requests", "8", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "handle (one UserReply each)" in out and "two-window, 2 batch_decode per step" in out
    assert "flatness" not in out and "memory" not in out
