"""docs/stops.md: every example in it runs and shows what it says."""

from __future__ import annotations

import doctest
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "stops.md"


def test_the_examples_in_docs_stops_md_run() -> None:
    result = doctest.testfile(
        str(DOC), module_relative=False, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    )
    assert result.attempted > 20
    assert result.failed == 0
