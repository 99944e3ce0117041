"""Lines cut into stretches that can each be read again, in bounded memory."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from typing import IO

import attrs


@attrs.frozen
class Stretch:
    """A run of consecutive lines, spooled: read again at each :meth:`lines`, until the next
    stretch is asked for.
    """

    spool: IO[bytes]
    first: int
    """The number of its first line (from 1)."""
    count: int
    """How many lines it holds."""
    size: int
    """How many bytes."""
    rows: int
    """How many of its lines are not blank."""
    last: bool
    """Whether it ends the lines."""

    def lines(self) -> Iterator[tuple[int, bytes]]:
        """Its lines, numbered."""
        self.spool.seek(0)
        yield from enumerate(self.spool, self.first)


def stretches(
    lines: Iterator[bytes], size: int, ends: Callable[[bytes], bool] | None = None
) -> Iterator[Stretch]:
    """The consecutive stretches of ``lines`` (at least one, empty if they are): each ends at the
    first line that brings it to ``size`` bytes or more and that ``ends`` accepts (any line if
    None). A stretch is spooled in memory up to ``2 * size`` bytes, past that in a temporary
    file, so that memory holds one line and a bounded spool whatever the stretch's length.
    """
    first, last = 1, False
    while not last:
        with tempfile.SpooledTemporaryFile(max_size=2 * size) as spool:
            written, rows, count = 0, 0, 0
            for line in lines:
                spool.write(line)
                written, rows, count = written + len(line), rows + bool(line.strip()), count + 1
                if written >= size and (ends is None or ends(line)):
                    break
            else:
                last = True
            yield Stretch(spool, first, count, written, rows, last)
        first += count
