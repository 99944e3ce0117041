"""The end-of-sequence ids of a tokenizer: its own, and those of the model's generation config."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from puredetok._build import mistral_tokenizer_of

GENERATION_CONFIG = "generation_config.json"
"""The file, next to the tokenizer files, whose ``eos_token_id`` (an id or a list) also ends generation."""


def _ids(value: object, where: str) -> set[int]:
    """An ``eos_token_id`` value (None, an id, or a list of ids) as a set of ids."""
    if value is None:
        return set()
    values = value if isinstance(value, list) else [value]
    for token_id in values:
        if isinstance(token_id, bool) or not isinstance(token_id, int) or token_id < 0:
            raise ValueError(f"{where}: eos_token_id must be a token id or a list of them, got {value!r}")
    return set(values)


def eos_token_ids(tokenizer: Any) -> frozenset[int]:
    """The tokenizer's ``eos_token_id`` plus the ``eos_token_id`` (one id or a list) of the
    ``generation_config.json`` in the tokenizer's folder (its ``name_or_path``), if there is one.
    For a mistral-common tokenizer or a wrapper of one (see :func:`puredetok._build.mistral_tokenizer_of`),
    also its inner tokenizer's ``eos_id``.

    Reads a local file at most; never the network. A tokenizer without either gives an empty set.
    Raises :class:`ValueError` naming the file if that file is not a JSON object with valid ids.
    """
    found = _ids(getattr(tokenizer, "eos_token_id", None), "the tokenizer")
    mistral = mistral_tokenizer_of(tokenizer)
    if mistral is not None:
        found |= _ids(getattr(mistral[0], "eos_id", None), "the mistral-common tokenizer")
    folder = getattr(tokenizer, "name_or_path", None)
    if isinstance(folder, str) and folder:
        config = Path(folder) / GENERATION_CONFIG
        if config.is_file():
            try:
                data = json.loads(config.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
                raise ValueError(f"cannot read {config}: {error}") from None
            if not isinstance(data, dict):
                raise ValueError(f"{config}: expected a JSON object, got {type(data).__name__}")
            found |= _ids(data.get("eos_token_id"), str(config))
    return frozenset(found)
