"""Reading the shape of msgpack data without building it and without recursion.

``msgspec`` decodes (and skips) nested arrays and maps recursively, guarded by the interpreter's
recursion limit: a frame of a thousand nested arrays raises :class:`RecursionError` out of it, at
a depth that depends on how deep the caller's own stack already is, and a frame of many small
arrays decoded as ``Any`` builds a Python object of some 60 bytes for each of its bytes. The
:class:`Scanner` walks the same bytes with a list for a stack: it finds where each value ends,
refuses values nested deeper than ``max_depth`` and stops after ``max_elements`` values, so a
frame can be checked, and split into its messages, before anything in it is built.
"""

from __future__ import annotations

from puredetok.errors import PuredetokError

DEFAULT_MAX_DEPTH = 32
"""Arrays and maps nested in each other at most, in any value of a frame (a chat message's
content parts, a tool's JSON schema in the template options, the sampling parameters' extras)."""

DEFAULT_MAX_ELEMENTS = 1 << 18
"""Values (each scalar, array, map, key) one scan reads at most, 262,144: bounds its time (about
a quarter of a second in pure Python) and what decoding the scanned bytes can build (some 60 bytes
per value at worst)."""


class TaggedError(PuredetokError, ValueError):
    """An error with a short tag for counting (``reason``) and what went wrong (``detail``)."""

    def __init__(self, reason: str, detail: str) -> None:
        self.reason = reason
        self.detail = detail
        super().__init__(f"{reason}: {detail}")


class ScanError(TaggedError):
    """The bytes are not one msgpack value within the limits; ``reason`` is a short tag:
    ``"too_deep"``, ``"too_many_values"`` or ``"not_msgpack"`` (malformed or truncated).
    """


_SCALAR, _SIZED, _CONTAINER, _BAD = 0, 1, 2, 3


def _table() -> list[tuple[int, int, int, int]]:
    """Per first byte: ``(form, header bytes, length or count field bytes, n)``: a scalar of a
    fixed size is all header; a sized value (str, bin, ext) has as many bytes after its header as
    its length field says; a container has ``n`` values (fixarray, fixmap) or ``n`` per unit of
    its count field (1 for array16/32, 2 for map16/32: keys and values).
    """
    table: list[tuple[int, int, int, int]] = [(_BAD, 0, 0, 0)] * 256
    for byte in range(0x00, 0x80):
        table[byte] = (_SCALAR, 1, 0, 0)  # positive fixint
    for byte in range(0xE0, 0x100):
        table[byte] = (_SCALAR, 1, 0, 0)  # negative fixint
    for byte in range(0x80, 0x90):
        table[byte] = (_CONTAINER, 1, 0, 2 * (byte & 0x0F))  # fixmap: keys and values
    for byte in range(0x90, 0xA0):
        table[byte] = (_CONTAINER, 1, 0, byte & 0x0F)  # fixarray
    for byte in range(0xA0, 0xC0):
        table[byte] = (_SCALAR, 1 + (byte & 0x1F), 0, 0)  # fixstr
    for byte in (0xC0, 0xC2, 0xC3):
        table[byte] = (_SCALAR, 1, 0, 0)  # nil, false, true
    for byte, size in ((0xCA, 4), (0xCB, 8), (0xCC, 1), (0xCD, 2), (0xCE, 4), (0xCF, 8)):
        table[byte] = (_SCALAR, 1 + size, 0, 0)  # floats, unsigned ints
    for byte, size in ((0xD0, 1), (0xD1, 2), (0xD2, 4), (0xD3, 8)):
        table[byte] = (_SCALAR, 1 + size, 0, 0)  # signed ints
    for byte, size in ((0xD4, 1), (0xD5, 2), (0xD6, 4), (0xD7, 8), (0xD8, 16)):
        table[byte] = (_SCALAR, 2 + size, 0, 0)  # fixext: type byte and data
    for byte, width in ((0xC4, 1), (0xC5, 2), (0xC6, 4), (0xD9, 1), (0xDA, 2), (0xDB, 4)):
        table[byte] = (_SIZED, 1 + width, width, 0)  # bin, str: length then bytes
    for byte, width in ((0xC7, 1), (0xC8, 2), (0xC9, 4)):
        table[byte] = (_SIZED, 2 + width, width, 0)  # ext: length, type byte, then bytes
    for byte, width in ((0xDC, 2), (0xDD, 4)):
        table[byte] = (_CONTAINER, 1 + width, width, 1)  # array16, array32: count
    for byte, width in ((0xDE, 2), (0xDF, 4)):
        table[byte] = (_CONTAINER, 1 + width, width, 2)  # map16, map32: pairs
    return table


_FORMS = _table()


class Scanner:
    """Walks msgpack bytes: where values end, within a depth and an element budget.

    One scanner keeps one budget: every value it reads counts, across calls, so a frame scanned
    message by message stays within ``max_elements`` in all.
    """

    def __init__(
        self,
        data: bytes | memoryview,
        *,
        max_depth: int = DEFAULT_MAX_DEPTH,
        max_elements: int = DEFAULT_MAX_ELEMENTS,
    ) -> None:
        self.data = data
        self.max_depth = max_depth
        self.left = max_elements
        """Values this scanner may still read."""

    def skip(self, position: int, max_depth: int | None = -1) -> int:
        """The end of the value that starts at ``position``; raises :class:`ScanError`.

        ``max_depth`` (by default the scanner's) is how many arrays or maps may nest in each other
        in it (a flat array has depth 1, a scalar 0); None lifts the limit for this value (its
        values still count against the budget).
        """
        limit = self.max_depth if max_depth == -1 else max_depth
        data, end, forms = self.data, len(self.data), _FORMS
        pending = [1]  # values still to read at each open level (the first: the value itself)
        left = self.left
        try:
            while pending:
                if not pending[-1]:
                    pending.pop()
                    continue
                pending[-1] -= 1
                if position >= end:
                    raise ScanError("not_msgpack", f"truncated at byte {position}")
                left -= 1
                if left < 0:
                    raise ScanError("too_many_values", f"over the budget of values, at byte {position}")
                form, header, width, fixed = forms[data[position]]
                if form == _SCALAR:
                    position += header
                    continue
                if form == _BAD:
                    raise ScanError(
                        "not_msgpack", f"byte {data[position]:#04x} at {position} starts no value"
                    )
                if position + header > end:
                    raise ScanError("not_msgpack", f"truncated header at byte {position}")
                count = int.from_bytes(data[position + 1 : position + 1 + width], "big")
                position += header
                if form == _SIZED:
                    position += count
                    continue
                if limit is not None and len(pending) > limit:
                    raise ScanError(
                        "too_deep", f"more than {limit} nested arrays or maps, at byte {position}"
                    )
                children = count * fixed if width else fixed
                if children > end - position:  # each value takes one byte at least
                    raise ScanError(
                        "not_msgpack", f"{children:,} values declared, {end - position:,} bytes left"
                    )
                if children:
                    pending.append(children)
        finally:
            self.left = max(left, 0)
        if position > end:
            raise ScanError("not_msgpack", f"truncated: a value runs {position - end:,} bytes past the end")
        return position

    def items(self, position: int) -> tuple[list[tuple[int, int, bool]], int]:
        """Each value of the array at ``position`` as ``(start, end, too_deep)``, and the array's
        end. A value nested deeper than the limit (not counting the array) is marked, not raised, so
        that it does not hide the others; raises :class:`ScanError` when the bytes are no array,
        are malformed, or the budget runs out.
        """
        count, position = self.array_header(position)
        spans = []
        for _ in range(count):
            start = position
            try:
                position = self.skip(position)
            except ScanError as error:
                if error.reason != "too_deep":
                    raise
                position = self.skip(start, None)
                spans.append((start, position, True))
            else:
                spans.append((start, position, False))
        return spans, position

    def pairs(self, position: int) -> tuple[list[tuple[str | None, int, int]], int]:
        """Each pair of the map at ``position`` as ``(key, value start, value end)`` (None for a
        key that is not a string), and the map's end; values are not depth-checked.
        """
        count, position = self.map_header(position)
        pairs = []
        for _ in range(count):
            key, position = self.string(position)
            if key is None:
                position = self.skip(position, None)
            start = position
            position = self.skip(position, None)
            pairs.append((key, start, position))
        return pairs, position

    def array_header(self, position: int) -> tuple[int, int]:
        """The number of values of the array at ``position`` and where the first one starts;
        raises :class:`ScanError` (``"bad_shape"`` if another value is there).
        """
        return self._header(position, _ARRAYS)

    def map_header(self, position: int) -> tuple[int, int]:
        """The number of pairs of the map at ``position`` and where the first key starts;
        raises :class:`ScanError` (``"bad_shape"`` if another value is there).
        """
        return self._header(position, _MAPS)

    def _header(self, position: int, forms: tuple[int, int, int]) -> tuple[int, int]:
        data = self.data
        if position >= len(data):
            raise ScanError("not_msgpack", f"truncated at byte {position}")
        first = data[position]
        small, medium, large = forms
        if small <= first <= small + 0x0F:
            return first & 0x0F, position + 1
        width = 2 if first == medium else 4 if first == large else 0
        if not width:
            if _FORMS[first][0] == _BAD:
                raise ScanError("not_msgpack", f"byte {first:#04x} at {position} starts no value")
            what = "an array" if forms == _ARRAYS else "a map"
            raise ScanError("bad_shape", f"expected {what} at byte {position}")
        if position + 1 + width > len(data):
            raise ScanError("not_msgpack", f"truncated header at byte {position}")
        return int.from_bytes(data[position + 1 : position + 1 + width], "big"), position + 1 + width

    def string(self, position: int) -> tuple[str | None, int]:
        """The string at ``position`` and its end, or ``(None, position)`` if the value there is
        not a string.
        """
        data = self.data
        if position >= len(data):
            raise ScanError("not_msgpack", f"truncated at byte {position}")
        first = data[position]
        if 0xA0 <= first <= 0xBF:
            start, size = position + 1, first & 0x1F
        elif first in _STR_WIDTHS:
            start = position + 1 + _STR_WIDTHS[first]
            size = int.from_bytes(data[position + 1 : start], "big")
        else:
            return None, position
        end = start + size
        if end > len(data):
            raise ScanError("not_msgpack", f"truncated string at byte {position}")
        self.left -= 1
        try:
            return bytes(data[start:end]).decode("utf-8"), end
        except UnicodeDecodeError:
            raise ScanError("not_msgpack", f"the string at byte {position} is not UTF-8") from None


_ARRAYS = (0x90, 0xDC, 0xDD)
"""First bytes of an array: fixarray (the smallest), array16, array32."""
_MAPS = (0x80, 0xDE, 0xDF)
"""First bytes of a map: fixmap (the smallest), map16, map32."""
_STR_WIDTHS = {0xD9: 1, 0xDA: 2, 0xDB: 4}
"""The length field's bytes of str8, str16, str32."""
