"""Reading files by their content: plain, or compressed (gzip, bzip2, xz, zstd) and decompressed
as they are read, in bounded memory.
"""

from __future__ import annotations

__all__ = ["COMPRESSIONS", "Decompressed", "compression_of"]

from puredetok.files.compressed import COMPRESSIONS, Decompressed, compression_of
