"""The concurrency benchmark runs (``python -m benchmarks.concurrency``; no timing is asserted):
its streams churn as continuous batching churns them, the manager decodes them exactly, and every
side is measured at every concurrency, the figures printed as ranges."""

from __future__ import annotations

import re
from collections import Counter, defaultdict

import pytest

from benchmarks.concurrency import (
    IN_PROCESS,
    Churn,
    in_process_levels,
    main,
    measure,
    memory_per_stream,
    process_clock,
    report,
)
from benchmarks.manager import serving_params
from helpers import tokenizer
from puredetok.cli._measure import trace_ids
from puredetok.serving._detokenize_manager import DetokenizeManager
from puredetok.serving._messages import DetokenizeBatch, Opening


def test_every_slot_carries_one_request_after_another_and_they_end_in_different_steps() -> None:
    churn = Churn(list(range(1_000)), streams=8, length=16)
    steps = [churn.next() for _ in range(50)]
    assert all(len(step.uids) == len(step.tokens) == 8 for step in steps)
    assert steps[0].opened == tuple(range(8))  # every request opens in the first step
    for slot in range(8):
        uids = [step.uids[slot] for step in steps]
        for now, step in enumerate(steps):
            if slot in step.ended:  # a request's last id: the next step opens a new one
                assert now + 1 == len(steps) or (slot in steps[now + 1].opened and uids[now + 1] != uids[now])
            elif now + 1 < len(steps):
                assert uids[now + 1] == uids[now] and slot not in steps[now + 1].opened
        lengths = Counter(uids)
        whole = [count for uid, count in lengths.items() if uid not in (uids[0], uids[-1])]
        assert whole and set(whole) == {16}  # every request between the first and the last: 16 ids
    firsts = [Counter(step.uids[slot] for step in steps)[steps[0].uids[slot]] for slot in range(8)]
    assert firsts == [16, 14, 12, 10, 8, 6, 4, 2]  # staggered: the first requests end apart
    # after the first requests, one in every two steps ends (8 streams / 16 ids)
    assert [len(step.ended) for step in steps[16:48]] == [0, 1] * 16
    assert len({uid for step in steps for uid in step.uids}) == sum(len(step.opened) for step in steps)


def test_a_churn_refuses_what_it_cannot_stream() -> None:
    for streams, length, trace in ((0, 4, [1]), (4, 0, [1]), (4, 4, [])):
        with pytest.raises(ValueError, match="streams >= 1"):
            Churn(trace, streams, length)


def test_the_manager_decodes_every_churned_request_exactly_with_the_serving_parameters() -> None:
    tok = tokenizer("llama2")
    churn = Churn(trace_ids(tok, 4_096), streams=12, length=40)
    manager = DetokenizeManager(tok, remember_ended=0)
    opening = Opening((), serving_params(40))
    ids: defaultdict[int, list[int]] = defaultdict(list)
    texts: defaultdict[int, str] = defaultdict(str)
    ended = set()
    for _ in range(100):
        step = churn.next()
        batch = DetokenizeBatch(
            step.uids, step.tokens, finished=step.ended, opens=tuple((slot, opening) for slot in step.opened)
        )
        replies = manager.handle_batch(batch)
        assert not replies.errors
        for uid, token, output in zip(step.uids, step.tokens, replies.outputs):
            ids[uid].append(token)
            texts[uid] += output
        ended |= {step.uids[position] for position, _, _ in replies.ended}
    assert len(ended) > 12 and len(manager) == 12 - len(step.ended)  # the last step ended some
    for uid in ended:
        assert texts[uid] == tok.decode(ids[uid])


def test_every_side_is_measured_at_every_concurrency_and_printed_as_ranges() -> None:
    tok = tokenizer("qwen3")
    levels = in_process_levels(tok, (4, 16), length=8, tokens=32)
    assert [(level.streams, level.steps) for level in levels] == [(4, 8), (16, 2)]
    samples = measure(levels, rounds=2, repeats=2)
    assert len(samples.wall) == len(samples.cpu) == 2
    for sample in (*samples.wall, *samples.cpu):
        assert sorted(sample) == [
            "puredetok 16",
            "puredetok 4",
            "puredetok, collector between steps 16",
            "puredetok, collector between steps 4",
            "two-window 16",
            "two-window 4",
        ]
        assert all(value > 0 for value in sample.values())
    table = report(IN_PROCESS, samples, (4, 16), {4: (100.0, 200.0), 16: (50.0, 400.0)}).splitlines()
    span = r"\d[\d,]*\.\d+ - \d[\d,]*\.\d+"
    assert table[0] == IN_PROCESS.title
    assert table[1].strip() == "wall-clock" and table[6].strip().startswith("CPU time")
    for line, streams in zip([*table[3:5], *table[8:10]], (4, 16, 4, 16)):
        assert re.match(rf" +{streams} +{span} +{span} +{span} +{span} +\d\.\d\d - \d+\.\d\d", line)
    assert table[3].endswith("100 B, 200 B") and table[4].endswith("50 B, 400 B")
    assert "B" not in table[8] + table[9]  # memory is shown once
    for line in (table[5], table[10]):
        assert re.fullmatch(
            rf"  per-stream cost at 16 / at 4 streams \(flat: 1\.0\): handle_batch {span}, two-window {span}",
            line,
        )


def test_the_cpu_time_of_another_process_is_its_own() -> None:
    import subprocess
    import sys
    import time

    child = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: pass"])
    try:
        clock = process_clock(child.pid)
        began, waited = clock(), time.perf_counter()
        time.sleep(0.5)
        spent = clock() - began
        assert 0 < spent <= (time.perf_counter() - waited) * 1e9 * 2  # at most both cores
    finally:
        child.kill()
        child.wait()


def test_the_collector_is_held_to_between_steps_and_left_as_it_was(monkeypatch: pytest.MonkeyPatch) -> None:
    import gc

    from puredetok.worker._worker import _Collector

    [level] = in_process_levels(tokenizer("qwen3"), (8,), length=8, tokens=64)
    between = level.sides["puredetok, collector between steps"]
    manager = between.__self__.between  # type: ignore[attr-defined]
    handle, enabled_during = manager.handle_batch, []

    def watched(batch: DetokenizeBatch) -> object:
        enabled_during.append(gc.isenabled())
        return handle(batch)

    monkeypatch.setattr(manager, "handle_batch", watched)
    monkeypatch.setattr(_Collector, "BUSY", -1)  # a collection after every step
    collections: list[str] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(phase)

    gc.callbacks.append(count)
    try:
        for enabled in (True, False):
            (gc.enable if enabled else gc.disable)()
            level.prepare()
            collections.clear()
            between()
            assert gc.isenabled() is enabled
            assert len(collections) >= 8  # between the 8 steps
    finally:
        gc.callbacks.remove(count)
        gc.enable()
    assert enabled_during == [False] * 16


def test_the_memory_per_stream_is_what_the_live_streams_hold() -> None:
    manager, two_window = memory_per_stream(tokenizer("qwen3"), streams=32, length=24)
    # the two-window algorithm keeps every id of a request (12 on average here, 8 bytes each)
    assert two_window > 12 * 8
    assert 0 < manager


def test_the_command_prints_the_pair(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["--streams", "4,8", "--tokens", "16", "--length", "8", "--rounds", "1", "--repeats", "1"]) == 0
    )
    out = capsys.readouterr().out
    assert "4, 8 concurrent streams" in out and "load average" in out
    assert IN_PROCESS.title in out and "per-stream cost at 8 / at 4 streams" in out


@pytest.mark.parametrize(
    "arguments",
    [["--streams", "256,x"], ["--streams", "0"], ["--streams", "4,4"], ["--tokens", "0"], ["--repeats", "0"]],
)
def test_the_command_refuses_bad_counts(arguments: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as raised:
        main(arguments)
    assert raised.value.code == 2 and "--" in capsys.readouterr().err
