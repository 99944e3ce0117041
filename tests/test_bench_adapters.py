"""The adapters' benchmark sections run (no timing is asserted: figures come from ``puredetok bench``)."""

from __future__ import annotations

from helpers import tokenizer
from puredetok.baselines import TwoWindow
from puredetok.bench.core import trace_ids
from puredetok.bench.manager import BatchedTwoWindow, manager_section, memory_section
from puredetok.bench.worker import worker_section


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
    manager, four, baseline = manager_section(tok, requests=8, steps=8)
    assert manager.target and manager.ratio is not None and manager.ok is not None
    assert baseline.ratio == 1.0 and four.ratio is not None
    [held, messages, saved] = memory_section(tok, requests=500)
    assert held.ok is True and "500 live requests" in held.name
    assert saved.ok is True and "saved as bytes" in saved.name


def test_the_worker_section_drives_a_real_worker_process() -> None:
    results = worker_section(tokenizer("qwen3"), "qwen3", requests=16, rounds=5)
    names = [result.name for result in results]
    assert any("16 requests x 1 id(s)/msg" in name for name in names)
    assert any("round trip: p50" in name for name in names)
