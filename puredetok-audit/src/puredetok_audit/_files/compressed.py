"""A file's bytes told from its content and decompressed as they are read.

gzip, bzip2 and xz are read with the standard library, zstd with the ``zstandard`` package
(``puredetok[audit]``), concatenated streams whole, in memory of one block and one line. An error
of the compressed data ends what is read after all before it, and is kept
(:attr:`Decompressed.error`) for the reader to report where it reached (docs/audit.md,
"Compressed files").
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import zlib
from collections.abc import Callable, Iterator
from typing import IO, Any

import attrs

COMPRESSIONS = {b"\x1f\x8b": "gzip", b"BZh": "bzip2", b"\xfd7zXZ\x00": "xz", b"\x28\xb5\x2f\xfd": "zstd"}
"""The compressions read, by the magic bytes their files begin with."""

BLOCK = 1 << 16
"""How many decompressed bytes are read at a time."""

_BOM = b"\xef\xbb\xbf"
_OPEN: dict[str, Callable[[IO[bytes]], Any]] = {"gzip": gzip.open, "bzip2": bz2.open, "xz": lzma.open}
_ZSTD_INPUT = 1 << 10  # zstd's decompressor has no bound on its output, and gives none of a call that fails


def compression_of(head: bytes) -> str | None:
    """The compression of a file whose first bytes are ``head`` (None: none known)."""
    return next((name for magic, name in COMPRESSIONS.items() if head.startswith(magic)), None)


def _zstandard() -> Any:
    try:
        import zstandard
    except ImportError:
        raise ValueError(
            "zstd-compressed: reading it needs the zstandard package (pip install 'puredetok[audit]')"
        ) from None
    return zstandard


@attrs.define
class Decompressed:
    """The bytes of the file at ``path``, decompressed as they are read if it is compressed
    (``compression``, told from its first bytes by :meth:`open`).

    Each of :meth:`blocks`, :meth:`lines` and :meth:`read` reads the file again from its start.
    An error of the compressed data ends them after all that could be decompressed before it,
    and is kept in :attr:`error` (a sentence naming the compression); an error reading the file
    itself (``OSError``) is raised.
    """

    path: str
    compression: str | None
    error: str | None = None
    """Why the compressed data ended early (cut short, corrupt), after a read that met it."""
    line: int = 0
    """The line (from 1) in which :meth:`lines` met that error: the last one it gave if that
    one has no ``\\n``, else the next."""

    @classmethod
    def open(cls, path: str) -> Decompressed:
        """The file at ``path``, its compression told from its first bytes. Raises ``OSError``
        if it cannot be read, ``ValueError`` if it is zstd-compressed and ``zstandard`` is not
        installed.
        """
        with open(path, "rb") as source:
            compression = compression_of(source.read(8))
        if compression == "zstd":
            _zstandard()
        return cls(path, compression)

    def blocks(self) -> Iterator[bytes]:
        """The decompressed bytes, a block (at most :data:`BLOCK` bytes, never empty) at a time."""
        self.error = None
        with open(self.path, "rb") as raw:
            if self.compression is None:
                yield from iter(lambda: raw.read(BLOCK), b"")
                return
            corrupt: tuple[type[Exception], ...] = (OSError, zlib.error, lzma.LZMAError)
            if self.compression == "zstd":
                corrupt += (_zstandard().ZstdError,)
            try:
                if self.compression == "zstd":
                    yield from _zstd_blocks(raw)
                    return
                with _OPEN[self.compression](raw) as source:
                    yield from iter(lambda: source.read1(BLOCK), b"")
            except EOFError:
                self.error = f"{self.compression}-compressed data cut short: the file ends inside its stream"
            except corrupt as error:
                if isinstance(error, OSError) and error.errno is not None:
                    raise  # the file could not be read, as a plain file's read raises it
                self.error = f"{self.compression}-compressed data corrupt: {error}"

    def lines(self) -> Iterator[bytes]:
        """The decompressed lines, each with its newline (the last one may have none), as a file
        opened in binary mode gives them, less a UTF-8 byte order mark at the start.
        """
        pieces: list[bytes] = []
        complete = 0
        for index, read in enumerate(self.blocks()):
            block = read.removeprefix(_BOM) if index == 0 else read
            parts = block.split(b"\n")
            if len(parts) == 1:
                pieces.append(block)
                continue
            pieces += (parts[0], b"\n")
            yield b"".join(pieces)
            for part in parts[1:-1]:
                yield part + b"\n"
            complete += len(parts) - 1
            pieces = [parts[-1]] if parts[-1] else []
        self.line = complete + 1
        if pieces:
            yield b"".join(pieces)

    def head(self, size: int) -> bytes:
        """The first ``size`` decompressed bytes or a few more (fewer: the whole file, or all
        before an error of its data).
        """
        head = b""
        for block in self.blocks():
            head += block
            if len(head) >= size:
                break
        return head

    def read(self) -> bytes:
        """All the decompressed bytes (a whole file in memory: for a format read whole)."""
        return b"".join(self.blocks())


def _zstd_blocks(raw: IO[bytes]) -> Iterator[bytes]:
    """A zstd file's frames, one after the other; raises ``EOFError`` if it ends inside one."""
    decompressor = _zstandard().ZstdDecompressor()
    frame = decompressor.decompressobj()
    started = False
    for data in iter(lambda: raw.read(_ZSTD_INPUT), b""):
        while data:
            if frame.eof:
                frame = decompressor.decompressobj()
            started = True
            out = frame.decompress(data)
            data = frame.unused_data if frame.eof else b""
            for start in range(0, len(out), BLOCK):
                yield out[start : start + BLOCK]
    if started and not frame.eof:
        raise EOFError
