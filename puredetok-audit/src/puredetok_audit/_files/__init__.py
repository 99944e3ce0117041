"""Reading files by their content, compressed or not, in bounded memory.

Plain, or compressed (gzip, bzip2, xz, zstd) and decompressed as they are read; lines cut into
stretches that can be read again.
"""

from __future__ import annotations

__all__ = ["COMPRESSIONS", "Decompressed", "Stretch", "compression_of", "stretches"]

from puredetok_audit._files.compressed import COMPRESSIONS, Decompressed, compression_of
from puredetok_audit._files.stretches import Stretch, stretches
