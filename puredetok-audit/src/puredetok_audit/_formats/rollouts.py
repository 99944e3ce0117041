"""Tables of rollouts as trainers keep them: one row per response, with its prompt ids, response
ids and response text in columns whose names are options (:class:`Columns`).

JSON lines (one object per row) or Parquet (read one row group at a time, only the columns
needed; needs ``pyarrow``, the ``audit`` extra). A row's id is its ``id`` column if one is named,
else its index in the file, from 0.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import msgspec

from puredetok_audit._records import Columns, InputError, Item, Request, request_id, token_ids

PARQUET_BATCH = 4096
"""Rows read from a Parquet file at once."""


def row_request(row: Any, columns: Columns, index: int, file: str, line: int) -> Item:
    """The request of one row (a mapping), or the error that it is not one."""
    if not isinstance(row, dict):
        return InputError(file, line, "a row that is not an object")
    try:
        for column, what in ((columns.response_ids, "response ids"), (columns.id, "--id-column")):
            if column and column not in row:
                raise ValueError(f"no {column!r} ({what}) in the row")
        output = token_ids(row[columns.response_ids], repr(columns.response_ids))
        prompt = row.get(columns.prompt_ids)
        prompt_ids = () if prompt is None else token_ids(prompt, repr(columns.prompt_ids))
        text = row.get(columns.text)
        if not isinstance(text, str):
            raise ValueError(f"{columns.text!r} (the response text) is missing or not a string")
    except ValueError as error:
        return InputError(file, line, str(error))
    name = request_id(row.get(columns.id), index) if columns.id else index
    return Request(name, line, prompt_ids, output, text)


def read_json_rows(
    lines: Iterable[tuple[int, bytes]], columns: Columns, file: str, first_row: int
) -> Iterator[Item]:
    """Rows of a JSON-lines table; ``first_row`` is the index of the first row these lines hold."""
    index = first_row
    for number, line in lines:
        if not line.strip():
            continue
        try:
            row = msgspec.json.decode(line)
        except msgspec.DecodeError as error:
            yield InputError(file, number, f"not JSON: {error}")
            index += 1
            continue
        yield row_request(row, columns, index, file, number)
        index += 1


def _parquet(path: str) -> Any:
    try:
        import pyarrow.parquet
    except ImportError:
        raise ValueError("reading Parquet needs pyarrow: pip install 'puredetok[audit]'") from None
    return pyarrow.parquet.ParquetFile(path)


def row_groups(path: str) -> list[tuple[int, int]]:
    """Each row group's index and first row."""
    metadata = _parquet(path).metadata
    groups, row = [], 0
    for group in range(metadata.num_row_groups):
        groups.append((group, row))
        row += metadata.row_group(group).num_rows
    return groups


def read_parquet(path: str, group: int, first_row: int, columns: Columns, file: str) -> Iterator[Item]:
    """The rows of one row group of a Parquet table (a row's place is its index, from 1)."""
    table = _parquet(path)
    names = set(table.schema_arrow.names)
    wanted = [name for name in (columns.prompt_ids, columns.response_ids, columns.text, columns.id) if name]
    missing = [
        name for name in (columns.response_ids, columns.text, columns.id) if name and name not in names
    ]
    if missing:
        yield InputError(
            file, first_row + 1, f"no column {missing[0]!r} (columns: {', '.join(sorted(names))})"
        )
        return
    index = first_row
    for batch in table.iter_batches(
        PARQUET_BATCH, row_groups=[group], columns=[n for n in wanted if n in names]
    ):
        for row in batch.to_pylist():
            yield row_request(row, columns, index, file, index + 1)
            index += 1
