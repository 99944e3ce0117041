"""``puredetok audit`` on compressed logs: gzip, bzip2, xz and zstd files are told by their content,
read as a stream, and give the plain file's report (the same findings, lines, counts and errors); a
file cut short or corrupt is named at the line reached after everything before it is audited."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import sys
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
import zstandard
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from puredetok_audit import Request, Tally, audit_shard, shards_of
from puredetok_audit._files import Decompressed
from puredetok_audit._sources import ShardResult, audit_stretches
from test_audit import (
    ROOT,
    SGLANG_MODES,
    _auditor,
    _sample,
    _sglang_stream,
    _sse,
    audit,
    completion,
    report,
    write_lines,
)

COMPRESS: dict[str, Callable[[bytes], bytes]] = {
    "gzip": gzip.compress,
    "bzip2": lambda data: bz2.compress(data, 1),  # blocks of 100 kB: a file cut short gives some
    "xz": lzma.compress,
    "zstd": zstandard.ZstdCompressor().compress,
}


def _prefix(compression: str, data: bytes) -> bytes:
    """What an independent decompressor gets out of ``data``, a compressed file cut short."""
    if compression == "gzip":
        return zlib.decompressobj(wbits=31).decompress(data)
    if compression == "bzip2":
        return bz2.BZ2Decompressor().decompress(data)
    if compression == "xz":
        return lzma.LZMADecompressor().decompress(data)
    return zstandard.ZstdDecompressor().decompressobj().decompress(data)


FORMATS = ("vllm", "vllm-array", "vllm-stream", "sglang", "sglang-stream", "rollouts")


def _log(format: str, wrong: list[bool], bad: list[bool]) -> list[str]:
    """A log of ``format``: one request per item of ``wrong`` (its text one character short if
    true), a line that is no record after each request marked in ``bad`` but the first."""
    prompt, ids, text = _sample()
    lines: list[str] = []
    for index, (short, junk) in enumerate(zip(wrong, bad, strict=True)):
        engine = text[:-1] if short else text
        if format in ("vllm", "vllm-array"):
            lines.append(json.dumps(completion(f"c{index}", prompt, ids, engine)))
        elif format == "vllm-stream":
            lines += _sse(f"s{index}", prompt, [(engine[:3], ids[:2]), (engine[3:], ids[2:])])
        elif format == "sglang":
            meta = {"id": f"g{index}", "finish_reason": {"type": "length"}}
            lines.append(json.dumps({"text": engine, "output_ids": ids, "meta_info": meta}))
        elif format == "sglang-stream":
            mode = SGLANG_MODES[index % 3]
            lines += _sglang_stream(f"g{index}", ids, [engine[:3], engine], [2, len(ids)], mode)
        else:
            lines.append(json.dumps({"prompt_ids": prompt, "response_ids": ids, "response_text": engine}))
        if junk and index:
            lines.append('{"not": "a record"' if format != "vllm-array" else '{"broken": ')
    if format == "vllm-array":
        return ["[", ",\n".join(lines), "]"]
    return lines


LOGS = {
    "format": st.sampled_from(FORMATS),
    "compression": st.sampled_from(sorted(COMPRESS)),
    "wrong": st.lists(st.booleans(), min_size=1, max_size=12),
    "bad": st.lists(st.booleans(), min_size=12, max_size=12),
}
"""A log (its format, which requests are wrong, where bad lines go) and how it is compressed."""


def _results(path: Path, size: int, format: str | None = None) -> tuple[list[dict[str, Any]], Tally]:
    """The findings and counts of a file, audited shard by shard (a compressed file's stretch
    by stretch, as the command does), the file named ``FILE``."""
    auditor = _auditor("qwen3")
    records, tally = [], Tally()
    for shard in shards_of(str(path), format, size):
        for result in audit_stretches(shard, auditor):
            records += [{**record, "file": "FILE"} for record in result.records]
            tally.add(result.tally)
    return records, tally


@given(
    **LOGS,
    size=st.integers(1, 4000),
    members=st.integers(1, 3),
)
@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_a_compressed_log_gives_the_plain_files_report(
    tmp_path: Path, format: str, compression: str, wrong: list[bool], bad: list[bool], size: int, members: int
) -> None:
    """Every format the audit reads as lines, compressed each way (in one stream or several
    concatenated, as ``cat a.gz b.gz`` writes them), cut into stretches of any size: the plain
    file's findings, at the same lines, and the same counts."""
    plain = write_lines(tmp_path / "log.txt", _log(format, wrong, bad[: len(wrong)]))
    data = plain.read_bytes()
    cuts = [len(data) * part // members for part in range(members + 1)]
    packed = tmp_path / "log.txt.packed"
    packed.write_bytes(b"".join(COMPRESS[compression](data[a:b]) for a, b in zip(cuts, cuts[1:])))
    (shard,) = shards_of(str(packed), size=size)
    assert shard.compression == compression
    assert _results(packed, size) == _results(plain, size)
    records, _ = _results(plain, size)
    assert records or not any(wrong)


@pytest.mark.parametrize("compression", sorted(COMPRESS))
def test_the_command_reports_a_compressed_file_as_the_plain_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], compression: str
) -> None:
    """The report, the table and the error lines of docs/sample-responses.jsonl and of a trace,
    compressed, are the plain files' (today's main refused them: "not read")."""
    for name in ("sample-responses.jsonl", "sample-trace.jsonl"):
        plain = ROOT / "docs" / name
        packed = tmp_path / f"{name}.{compression}"
        packed.write_bytes(COMPRESS[compression](plain.read_bytes()))
        runs = []
        for path in (plain, packed):
            out_path = tmp_path / "report.jsonl"
            code, out, err = audit(capsys, str(path), "--report", str(out_path))
            found = [{**r, "file": "FILE"} for r in report(out_path)]
            table = [
                row.replace(str(path), "FILE")  # the differing requests named by their place
                for row in out.splitlines()
                if not row.startswith(("seconds", "tokens/s"))
            ]
            runs.append((code, found, table, err.replace(str(path), "FILE")))
        assert runs[0] == runs[1]
        assert runs[0][0] in (0, 2) and runs[0][2]


@given(
    format=st.sampled_from(FORMATS),
    compression=st.sampled_from(sorted(COMPRESS)),
    cut=st.floats(0.05, 0.95),
    size=st.integers(200, 4000),
)
@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
# xz's block check, index and footer follow the data: a cut among them gives all of it (hypothesis
# 6.100 found this one), and the file is still cut short
@example(format="vllm", compression="xz", cut=0.94, size=1000)
def test_a_compressed_file_cut_short_is_audited_as_far_as_it_goes(
    tmp_path: Path, format: str, compression: str, cut: float, size: int
) -> None:
    """What the compressed data gives up to the cut is audited as a plain file cut there would be
    (its last line cut short too), then one error names the file, the line reached and why."""
    lines = _log(format, [index % 4 == 1 for index in range(40)], [index % 9 == 4 for index in range(40)])
    data = "".join(line + "\n" for line in lines).encode()
    packed_bytes = COMPRESS[compression](data)
    packed = tmp_path / "log.packed"
    packed.write_bytes(packed_bytes[: max(1, int(len(packed_bytes) * cut))])
    got = _prefix(compression, packed.read_bytes())
    assert data.startswith(got)  # all of it where the cut falls after the data (xz, above)
    reached = got.count(b"\n") + 1 if format != "vllm-array" else 1  # an array is named at its start
    message = f"{compression}-compressed data cut short: the file ends inside its stream"
    error = {"error": message, "file": "FILE", "line": reached}
    if not got.strip():
        with pytest.raises(ValueError, match=message):
            shards_of(str(packed))
        return
    plain = tmp_path / "log.plain"
    plain.write_bytes(got)
    forced = {"vllm-array": "vllm"}.get(format, format)  # a file cut short may no longer tell it
    try:
        expected, tally = _results(plain, size, forced)
    except ValueError as raised:  # it cannot be told at all: both say why, and so does the data
        with pytest.raises(ValueError) as told:
            _results(packed, size, forced)
        assert str(told.value) == f"{message} ({raised})"
        return
    tally.errors += 1
    assert _results(packed, size, forced) == ([*expected, error], tally)


@pytest.mark.parametrize("compression", sorted(COMPRESS))
def test_corrupt_compressed_data_is_one_line_naming_the_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], compression: str
) -> None:
    """Bytes changed in the middle of the compressed data: the lines before are audited, and the
    last error line names the file, the line reached and the compression."""
    prompt, ids, text = _sample()
    records = [completion(f"c{i}", prompt, ids, text if i % 5 else text[:-1]) for i in range(3000)]
    data = "".join(json.dumps(r) + "\n" for r in records).encode()
    packed_bytes = bytearray(COMPRESS[compression](data))
    middle = len(packed_bytes) // 2
    packed_bytes[middle : middle + 64] = bytes(b ^ 0x5A for b in packed_bytes[middle : middle + 64])
    path = tmp_path / "log.jsonl.packed"
    path.write_bytes(bytes(packed_bytes))
    out_path = tmp_path / "report.jsonl"
    code, _, err = audit(capsys, str(path), "--report", str(out_path))
    assert code == 2
    last = report(out_path)[-1]
    assert last["file"] == str(path) and last["line"] >= 1
    assert last["error"].startswith(f"{compression}-compressed data ")
    assert err.splitlines()[-1] == f"puredetok audit: error: {path}:{last['line']}: {last['error']}"
    assert last["line"] > 1 and any(r.get("kind") == "lost tail" for r in report(out_path))


@pytest.mark.parametrize("compression", sorted(COMPRESS))
def test_a_compressed_empty_file_is_empty(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], compression: str
) -> None:
    path = tmp_path / "empty.jsonl.packed"
    path.write_bytes(COMPRESS[compression](b""))
    code, _, err = audit(capsys, str(path))
    assert code == 2 and err.splitlines() == [
        f"puredetok audit: error: {path}: the file is {compression}-compressed and holds nothing: "
        "nothing to audit"
    ]


def test_not_compressed_data_after_a_magic_number_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "log.jsonl.gz"
    path.write_bytes(b"\x1f\x8b" + b"not gzip at all" * 4)
    code, _, err = audit(capsys, str(path))
    assert code == 2 and err.splitlines() == [
        f"puredetok audit: error: {path}: gzip-compressed data corrupt: Unknown compression method"
    ]


def test_compressed_parquet_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Parquet compresses its own pages: a gzipped table is refused with a clear error."""
    import pyarrow
    import pyarrow.parquet

    table = tmp_path / "rollouts.parquet"
    pyarrow.parquet.write_table(pyarrow.Table.from_pylist([{"prompt_ids": [1], "response_ids": [2]}]), table)
    path = tmp_path / "rollouts.parquet.gz"
    path.write_bytes(gzip.compress(table.read_bytes()))
    code, _, err = audit(capsys, str(path))
    assert code == 2 and err.splitlines() == [
        f"puredetok audit: error: {path}: gzip-compressed Parquet: not read (decompress it first)"
    ]


def test_zstd_without_zstandard_names_what_to_install(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    prompt, ids, text = _sample()
    path = tmp_path / "log.jsonl.zst"
    path.write_bytes(COMPRESS["zstd"](json.dumps(completion("a", prompt, ids, text)).encode()))
    monkeypatch.setitem(sys.modules, "zstandard", None)  # the import then raises ImportError
    code, _, err = audit(capsys, str(path))
    assert code == 2 and err.splitlines() == [
        f"puredetok audit: error: {path}: zstd-compressed: reading it needs the zstandard package "
        "(pip install 'puredetok[audit]')"
    ]


def test_a_compressed_file_is_one_shard_told_by_content_not_name(tmp_path: Path) -> None:
    """The name says nothing: a ``.jsonl`` file holding xz data is read as xz, a ``.gz`` file
    holding plain lines as plain lines."""
    prompt, ids, text = _sample()
    lines = [json.dumps(completion(f"c{i}", prompt, ids, text)) for i in range(50)]
    data = "".join(line + "\n" for line in lines).encode()
    hidden = tmp_path / "log.jsonl"
    hidden.write_bytes(lzma.compress(data))
    named = tmp_path / "log.jsonl.gz"
    named.write_bytes(data)
    (shard,) = shards_of(str(hidden), size=100)
    assert (shard.compression, shard.layout, shard.end) == ("xz", "lines", hidden.stat().st_size)
    assert all(s.compression is None for s in shards_of(str(named), size=100))
    result = audit_shard(shard, _auditor("qwen3"))
    assert (result.tally.requests, result.tally.differing) == (50, 0)


def test_memory_stays_flat_as_a_compressed_log_grows(tmp_path: Path) -> None:
    """A compressed log four times as long, every request differing, read stretch by stretch
    (as the command does): the peak of traced memory does not grow with it."""
    import tracemalloc

    prompt, ids, text = _sample()
    auditor = _auditor("qwen3")
    auditor.check(Request("warm", 1, tuple(prompt), tuple(ids), text))

    def peak(count: int) -> int:
        line = json.dumps(completion("c", prompt, ids, text[:-1])) + "\n"
        path = tmp_path / f"log{count}.jsonl.gz"
        with gzip.open(path, "wb") as sink:
            for _ in range(count):
                sink.write(line.encode())
        (shard,) = shards_of(str(path), size=20_000)
        tracemalloc.start()
        try:
            differing = 0
            for result in audit_stretches(shard, auditor):
                differing += result.tally.differing
            assert differing == count
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    small, large = peak(400), peak(1600)
    assert large < 1.5 * small


def test_decompressed_lines_are_a_binary_files_lines(tmp_path: Path) -> None:
    """Lines of any length across blocks, CR kept inside a line, the last one without a newline."""
    data = b"a\r\nb\n" + b"x" * 200_000 + b"\n\n" + b"y" * 70_000 + b"\nlast"
    path = tmp_path / "lines.gz"
    path.write_bytes(gzip.compress(data))
    reading = Decompressed.open(path=str(path))
    assert list(reading.lines()) == data.splitlines(keepends=True) == list(open(_plain(tmp_path, data), "rb"))
    assert reading.error is None


def _plain(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / "lines.txt"
    path.write_bytes(data)
    return path


@pytest.mark.timeout(300)
def test_on_ray_data_a_compressed_file_is_the_local_one(tmp_path: Path) -> None:
    """A compressed file is one shard on Ray too: the worker's findings and counts are the
    local run's, a compressed file cut short included, given a stretch at a time."""
    ray = pytest.importorskip("ray")
    from puredetok.serving._loading import load_tokenizer
    from puredetok_audit import Auditor, Columns
    from puredetok_audit._distributed import audit_on_ray

    lines = _log("vllm-stream", [i % 3 == 0 for i in range(30)], [False] * 30)
    data = "".join(line + "\n" for line in lines).encode()
    whole, cut = tmp_path / "whole.sse.zst", tmp_path / "cut.sse.gz"
    whole.write_bytes(COMPRESS["zstd"](data))
    cut.write_bytes(gzip.compress(data)[:-40])
    shards = [*shards_of(str(whole), size=500), *shards_of(str(cut), size=500)]
    auditor = Auditor(load_tokenizer("qwen3"))
    local = [audit_shard(shard, auditor) for shard in shards]
    stretches = [list(audit_stretches(shard, auditor)) for shard in shards]
    try:
        found = list(audit_on_ray(shards, auditor, "qwen3", Columns(), num_cpus=2))
    finally:
        ray.shutdown()
    # one result per stretch, in order, each saying whether it ends its shard: a worker and the
    # driver hold one stretch's findings at a time, not the whole file's
    assert [(r.index, r.part, r.last) for r in found] == [
        (index, part, part == len(parts) - 1)
        for index, parts in enumerate(stretches)
        for part in range(len(parts))
    ]
    assert all(len(parts) > 3 for parts in stretches)
    assert [(r.records, r.tally) for r in found] == [
        (r.records, r.tally) for parts in stretches for r in parts
    ]
    joined = [[r for r in found if r.index == index] for index in range(len(shards))]
    assert [sum((r.records for r in parts), []) for parts in joined] == [r.records for r in local]
    assert local[1].records[-1]["error"].startswith("gzip-compressed data cut short")
    assert all(isinstance(r, ShardResult) for r in found)


@given(
    **LOGS,
    size=st.integers(1, 3000),
    step=st.integers(1, 5),
    cut=st.booleans(),
)
@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@example(format="vllm", compression="gzip", wrong=[False], bad=[False] * 12, size=1, step=1, cut=True)
def test_the_shares_of_a_compressed_file_give_its_stretches_between_them(
    tmp_path: Path,
    format: str,
    compression: str,
    wrong: list[bool],
    bad: list[bool],
    size: int,
    step: int,
    cut: bool,
) -> None:
    """Shares of a compressed file (each audits every n-th stretch, as the workers of a Ray run
    share one file): their stretches together, in order, are the file's own, with the same
    lines, rows, counts, and the error of a file cut short once, at its end; a file cut inside its
    first line is one error naming the cut."""
    data = "".join(line + "\n" for line in _log(format, wrong, bad[: len(wrong)])).encode()
    packed = COMPRESS[compression](data)
    path = tmp_path / "log.packed"
    # gzip and xz give what precedes a break (bzip2 and zstd: a whole block, here all of it)
    path.write_bytes(packed[:-10] if cut and compression in ("gzip", "xz") else packed)
    auditor = _auditor("qwen3")
    try:
        (shard,) = shards_of(str(path), size=size)
        whole = list(audit_stretches(shard, auditor))
    except ValueError as error:
        # a cut inside the first line leaves no line to tell the format by: the file is named cut
        # short, with what to do (hypothesis 6.100 found a one-request gzip log cut so)
        assert b"\n" not in _prefix(compression, path.read_bytes()), error
        assert str(error).startswith(f"{compression}-compressed data cut short: the file ends inside")
        assert "cannot tell the format (give --format" in str(error)
        return
    shared = [
        result
        for first in range(step)
        for result in audit_stretches(attrs.evolve(shard, first_stretch=first, stretch_step=step), auditor)
    ]
    assert [r.part for r in whole] == list(range(len(whole))) and [r.last for r in whole][-1]
    assert sorted(shared, key=lambda r: r.part) == whole
    assert all(r.part % step == first for first in range(step) for r in shared if r.part % step == first)


def test_a_ray_run_shares_a_compressed_file_only_where_workers_would_idle() -> None:
    from puredetok_audit._distributed import MAX_SHARES, shares
    from puredetok_audit._sources import Shard

    def packed(name: str, compression: str | None) -> Shard:
        return Shard(name, "vllm", "lines", compression=compression)

    one = [packed("a.gz", "gzip")]
    assert [(o, s.first_stretch, s.stretch_step) for o, s in shares(one, 2)] == [(0, 0, 2), (0, 1, 2)]
    assert len(shares(one, 64)) == MAX_SHARES
    # as many files as workers: each worker has one already
    assert all(s.stretch_step == 1 for _, s in shares([packed("a.gz", "gzip"), packed("b.xz", "xz")], 2))
    # bzip2 decompresses slower than the audit runs; a plain file is cut into shards already
    assert len(shares([packed("a.bz2", "bzip2")], 4)) == 1
    assert len(shares([packed("a.jsonl", None)], 4)) == 1
    assert len(shares([Shard("t.gz", "trace", "whole", compression="gzip")], 4)) == 1
    mixed = shares([packed("a.gz", "gzip"), packed("b.jsonl", None)], 4)
    assert [(o, s.first_stretch) for o, s in mixed] == [(0, 0), (0, 1), (1, 0)]


@pytest.mark.timeout(300)
def test_on_ray_data_one_compressed_file_is_shared_between_the_workers(tmp_path: Path) -> None:
    """One compressed file and two workers: two shares, whose stretches come back in the
    file's order with the local run's findings and counts."""
    ray = pytest.importorskip("ray")
    from puredetok.serving._loading import load_tokenizer
    from puredetok_audit import Auditor, Columns
    from puredetok_audit._distributed import audit_on_ray, shares

    lines = _log("rollouts", [i % 4 == 0 for i in range(40)], [i % 7 == 3 for i in range(40)])
    path = tmp_path / "rollouts.jsonl.xz"
    path.write_bytes(lzma.compress("".join(line + "\n" for line in lines).encode()))
    shards = shards_of(str(path), size=700)
    assert len(shards) == 1 and len(shares(shards, 2)) == 2
    auditor = Auditor(load_tokenizer("qwen3"))
    local = list(audit_stretches(shards[0], auditor))
    try:
        found = list(audit_on_ray(shards, auditor, "qwen3", Columns(), num_cpus=2))
    finally:
        ray.shutdown()
    assert len(local) > 4
    assert [(r.part, r.last, r.records, r.tally) for r in found] == [
        (r.part, r.last, r.records, r.tally) for r in local
    ]


def test_the_compressed_bench_prints_its_measures(capsys: pytest.CaptureFixture[str]) -> None:
    """benchmarks/compressed.py, whose figures docs/audit.md gives, runs (a small log, once)."""
    from benchmarks.compressed import main

    assert main(["--tokens", "2000", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    for name in ("repeated", "random"):
        assert all(f"{name:8} {suffix:5}" in out for suffix in ("plain", "gz", "bz2", "xz", "zst"))
    assert out.count("peak traced memory") == 4 and "/ plain 1.00 - 1.00" in out
