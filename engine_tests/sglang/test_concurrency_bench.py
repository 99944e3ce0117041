"""The concurrency benchmark of SGLang's detokenizer process (``python -m
benchmarks.engines.sglang_concurrency``) at tiny sizes: its requests follow one another in every
slot as continuous batching has them, SGLang's process with puredetok gives every one of them its
exact text (so the benchmark times the right work), and both pairs are printed at every
concurrency (no timing is asserted).
"""

from __future__ import annotations

import re
from collections import defaultdict

import pytest

from benchmarks.concurrency import COLLECTOR, IN_PROCESS
from benchmarks.engines.sglang_concurrency import MIN_CUT, SGLANG_PROCESS, churned, main
from sglang_helpers import TOKENIZERS, decoder, detokenizer, exact_text, needs_plugin, tokenizer
from sglang_process import Request, iterations
from test_streams import streamed_before_the_end


def test_every_slot_carries_one_request_after_another() -> None:
    requests = churned(tokenizer("qwen3"), streams=4, length=32, horizon=100)
    assert len({request.rid for request in requests}) == len(requests)
    slots: defaultdict[str, list[Request]] = defaultdict(list)
    for request in requests:
        slots[request.rid.split("-")[1]].append(request)
    assert sorted(slots) == ["0", "1", "2", "3"]
    for slot, mine in slots.items():
        # staggered: the first requests end apart (one ending on a stop string may be a few ids shorter)
        assert 32 - int(slot) * 8 - 8 < len(mine[0].output) <= 32 - int(slot) * 8
        assert all(32 - 8 < len(request.output) <= 32 for request in mine[1:])
        for before, after in zip(mine, mine[1:]):
            assert after.start_at == before.start_at + len(before.output)
        assert mine[-1].start_at < 100 <= mine[-1].start_at + len(mine[-1].output)
    # every iteration before the horizon generates one id for every slot
    for now in range(100):
        live = [r for r in requests if r.start_at <= now < r.start_at + len(r.output)]
        assert len(live) == 4
    endings = {str((r.finished_reason or {}).get("matched")) for r in requests if len(r.output) >= MIN_CUT}
    assert len(endings) > 2  # stop strings and EOS among them, not only lengths


def _sglang_trim(text: str, request: Request) -> str:
    """SGLang's ``trim_matched_stop`` of a whole text (a stop string not in it: unchanged)."""
    matched = (request.finished_reason or {}).get("matched")
    if not isinstance(matched, str) or matched not in text:
        return text
    return text[: text.index(matched)]


@needs_plugin
@pytest.mark.parametrize("name", ["qwen3", "llama2"])
def test_the_process_with_puredetok_gives_every_churned_request_its_exact_text(name: str) -> None:
    decode = decoder(name)
    requests = churned(tokenizer(name), streams=6, length=24, horizon=60)
    rows = list(iterations(requests, decode))
    texts = detokenizer(name).run(requests, decode)
    for request in requests:
        sent = streamed_before_the_end(name, request, rows)
        final = _sglang_trim(exact_text(name, request), request)
        assert texts[request.rid] == sent + final[len(sent) :], request.rid


def test_the_bench_prints_every_pair_at_every_concurrency(capsys: pytest.CaptureFixture[str]) -> None:
    arguments = ["--streams", "4,8", "--tokens", "32", "--length", "16", "--rounds", "1", "--repeats", "1"]
    # --freeze-gc: the processes take SGLang's FreezeGCReq (no reply) and go on answering
    arguments += ["--no-memory", "--freeze-gc", "--tokenizer", f"llama2={TOKENIZERS / 'llama2'}"]
    assert main(arguments) == 0
    out = capsys.readouterr().out
    span = r"\d[\d,]*\.\d+ - \d[\d,]*\.\d+"
    for pair in (IN_PROCESS, COLLECTOR, SGLANG_PROCESS):
        table = out[out.index(pair.title) :].splitlines()
        assert table[1].strip() == "wall-clock" and table[6].strip().startswith("CPU time")
        for line, streams in zip([*table[3:5], *table[8:10]], (4, 8, 4, 8)):
            assert re.fullmatch(rf" +{streams} +{span} +{span} +{span} +{span} +{span}", line)
        for line in (table[5], table[10]):
            assert re.fullmatch(
                rf"  per-stream cost at 8 / at 4 streams \(flat: 1\.0\): {pair.ours_label} {span},"
                rf" {pair.theirs_label} {span}",
                line,
            )
