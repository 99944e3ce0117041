"""One module per ``tokenizers`` decoder; :func:`from_config` reads a decoder's JSON config.

========================  ===========================================================
module                    decoder
========================  ===========================================================
:mod:`.byte_level`        ``ByteLevel`` (token characters stand for bytes; lossy UTF-8)
:mod:`.byte_fallback`     ``ByteFallback`` (``<0xNN>`` runs)
:mod:`.fuse`              ``Fuse`` (join into one element)
:mod:`.strip`             ``Strip``
:mod:`.replace`           ``Replace`` with a literal pattern
:mod:`.metaspace`         ``Metaspace``
:mod:`.wordpiece`         ``WordPiece``
:mod:`.spaces`            no decoder (tokens joined with spaces)
:mod:`.cleanup`           ``transformers``' and WordPiece's space cleanup
:mod:`.config`            reading a decoder config (``Sequence`` is a list of the above)
========================  ===========================================================
"""

from __future__ import annotations

__all__ = ["from_config", "Decoder", "Stage", "Unmodelled"]

from puredetok.core.decoders.base import Decoder, Stage, Unmodelled
from puredetok.core.decoders.config import from_config
