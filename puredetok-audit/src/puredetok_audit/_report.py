"""The audit's report: one JSON object per differing request (and per bad record, and per split
chat response that cannot be joined again), and the
counts behind the summary table (a :class:`Tally` per shard, added up in shard order).
"""

from __future__ import annotations

import re
from typing import Any

import attrs

from puredetok_audit._compare import KINDS, Difference
from puredetok_audit._records import InputError
from puredetok_audit.replay._incremental import common_prefix


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
    past_vocabulary: int = 0
    """Bad records with an id at or past the end of the tokenizer's vocabulary (the sign of
    another tokenizer; see :func:`past_vocabulary`)."""
    unrelated: int = 0
    """Differing requests whose texts have nothing in common after the difference (the sign of
    another tokenizer; see :func:`unrelated`)."""

    def add(self, other: Tally) -> None:
        """Add another tally's counts to this one."""
        for field in attrs.fields(Tally):
            if field.name != "kinds":
                setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))
        for kind, count in other.kinds.items():
            self.kinds[kind] = self.kinds.get(kind, 0) + count

    def to_json(self) -> dict[str, Any]:
        """The counts as a JSON object."""
        return attrs.asdict(self)


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


MAX_NAMED = 20
"""The summary names at most this many differing requests (the report lists every one)."""


def difference_line(record: dict[str, Any]) -> str:
    """A differing request of the report in one line, its place first as compilers name one."""
    chunk = "" if record.get("chunk") is None else f", chunk {record['chunk']} of {record['chunks']}"
    return (
        f"{record['file']}:{record['line']}: request {record['id']} differs at character "
        f"{record['offset']:,} (token {record['token']:,}{chunk}): {record['kind']}"
    )


_INVALID_IDS = re.compile(
    r"invalid (?:token|prompt) id(?:\(s\))? (?P<ids>.*?)(?: skipped)?: .*?\[0, (?P<size>\d+)\)"
)
_NAMED_ID = re.compile(r"(?:^|, )(\d+)(?= at position|,| and|$)")


def past_vocabulary(message: str) -> bool:
    """Whether an error names a token id at or past the end of the vocabulary: the message of an
    :class:`~puredetok.InvalidTokenError` (``invalid token id N ...: outside the vocabulary
    [0, SIZE)``) or of the ids a replay skipped (``invalid token id(s) N at position P, ...
    skipped: ids are ints in [0, SIZE)``) with such an ``N``.
    """
    found = _INVALID_IDS.search(message)
    if found is None:
        return False
    size = int(found["size"])
    return any(int(named) >= size for named in _NAMED_ID.findall(found["ids"]))


RELATED = 4
"""How many characters in a row two texts agree on again after their difference to be related."""


def unrelated(difference: Difference) -> bool:
    """Whether the exact and the engine's texts never agree again after their difference (in
    the report's windows): an engine's faults lose, repeat, replace or add a little of a text that
    is otherwise the exact one, after which the two run on alike (for :data:`RELATED` characters
    at least, to the end of a window); another tokenizer's text has nothing to do with it (where
    either text has fewer than :data:`RELATED` characters after the difference, nothing is told). A kind
    that names an engine's fault (:data:`~puredetok_audit._compare.KINDS` but ``other`` and
    ``replacement characters``) relates them by itself.
    """
    if difference.kind not in ("other", "replacement characters"):
        return False
    exact, engine = difference.exact, difference.engine
    at = common_prefix(exact, engine)  # both windows start at the same place of the texts
    after_exact, after_engine = exact[at:], engine[at:]
    if len(after_exact) < RELATED or len(after_engine) < RELATED:
        return False  # too little to tell
    for i in range(len(after_exact)):
        for j in range(len(after_engine)):
            alike = common_prefix(after_exact[i:], after_engine[j:])
            if alike >= RELATED and (i + alike == len(after_exact) or j + alike == len(after_engine)):
                return False
    return True


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
