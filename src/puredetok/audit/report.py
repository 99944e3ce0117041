"""The audit's report: one JSON object per differing request (and per bad record, and per split
chat response that cannot be joined again), and the
counts behind the summary table (a :class:`Tally` per shard, added up in shard order).
"""

from __future__ import annotations

__all__ = ["Tally", "difference_record", "error_record", "summary_rows"]

from typing import Any

import attrs

from puredetok.audit.compare import KINDS, Difference
from puredetok.audit.records import InputError


@attrs.define
class Tally:
    """Counts over requests (its size does not grow with the input)."""

    requests: int = 0
    tokens: int = 0
    """Output ids of the requests audited."""
    differing: int = 0
    errors: int = 0
    """Bad records (each also a line of the report)."""
    skipped: int = 0
    """Well-formed records that cannot be compared (a parser split their text, or aborted)."""
    kinds: dict[str, int] = attrs.field(factory=lambda: dict.fromkeys(KINDS, 0))
    streams: int = 0
    contradicted: int = 0
    """Streams with a chunk that a later chunk contradicts."""
    split: int = 0
    """Chat responses a parser split, compared with their pieces joined again."""
    unjoinable: int = 0
    """Of those, the ones whose pieces cannot be joined again exactly or whose parser dropped
    text, and nothing else differs (kind ``parser split``: reported, not counted as differing)."""
    dropped: int = 0
    """Of those, the ones with text the parser dropped (the text before a start marker)."""

    def add(self, other: Tally) -> None:
        """Add another tally's counts to this one."""
        for field in (
            "requests",
            "tokens",
            "differing",
            "errors",
            "skipped",
            "streams",
            "contradicted",
            "split",
            "unjoinable",
            "dropped",
        ):
            setattr(self, field, getattr(self, field) + getattr(other, field))
        for kind, count in other.kinds.items():
            self.kinds[kind] = self.kinds.get(kind, 0) + count

    def to_json(self) -> dict[str, Any]:
        """The counts as a JSON object."""
        return attrs.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Tally:
        """The tally :meth:`to_json` gave."""
        return cls(**data)


def difference_record(difference: Difference, file: str, format: str) -> dict[str, Any]:
    """The report's object for a differing request."""
    request = difference.request
    record: dict[str, Any] = {
        "id": request.id,
        "file": file,
        "line": request.line,
        "format": format,
        "kind": difference.kind,
        "offset": difference.offset,
        "token": difference.token,
        "exact": difference.exact,
        "engine": difference.engine,
        "exact_length": difference.exact_length,
        "engine_length": difference.engine_length,
        "tokens": request.token_count,
        "finish_reason": request.finish_reason,
    }
    if request.stop is not None:
        record["stop"] = request.stop
    if request.parts is not None:
        kinds = [kind for kind, _ in request.parts]
        record["parts"] = [kind for at, kind in enumerate(kinds) if at == 0 or kinds[at - 1] != kind]
    if difference.dropped is not None:
        offset, length = difference.dropped
        record["dropped"] = {"offset": offset, "length": length}
    if request.chunk_count is not None:
        record["chunk"] = difference.chunk
        record["chunks"] = request.chunk_count
    if difference.looked is not None:
        record["looked"] = difference.looked
    return record


def error_record(error: InputError) -> dict[str, Any]:
    """The report's object for a bad record."""
    return {"error": error.message, "file": error.file, "line": error.line}


def summary_rows(tally: Tally, seconds: float) -> list[tuple[str, str]]:
    """The summary table's rows: what was audited, what differed and how."""
    rate = f"{tally.tokens / seconds:,.0f}" if seconds > 0 else "-"
    rows = [
        ("requests", f"{tally.requests:,}"),
        ("tokens", f"{tally.tokens:,}"),
        ("equal", f"{tally.requests - tally.differing - tally.unjoinable:,}"),
        ("differing", f"{tally.differing:,}"),
    ]
    rows += [(f"  {kind}", f"{count:,}") for kind, count in tally.kinds.items() if count]
    if tally.streams:
        rows.append(("streams", f"{tally.streams:,}"))
        rows.append(("  with a contradicted chunk", f"{tally.contradicted:,}"))
    if tally.split:
        rows.append(("split by a parser", f"{tally.split:,}"))
        rows.append(("  not joinable (parser split)", f"{tally.unjoinable:,}"))
        rows.append(("  with text the parser dropped", f"{tally.dropped:,}"))
    rows += [
        ("skipped", f"{tally.skipped:,}"),
        ("bad records", f"{tally.errors:,}"),
        ("seconds", f"{seconds:.2f}"),
        ("tokens/s", rate),
    ]
    return rows
