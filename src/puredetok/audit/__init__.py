"""Audit what engines streamed: the exact text of each logged request's ids against the engine's text."""

from __future__ import annotations

__all__ = [
    "AuditOptions",
    "Auditor",
    "Chunk",
    "Columns",
    "Difference",
    "FORMATS",
    "InputError",
    "KINDS",
    "Request",
    "Shard",
    "Tally",
    "audit_shard",
    "detect_format",
    "shards_of",
]

from puredetok.audit.compare import KINDS, AuditOptions, Auditor, Difference
from puredetok.audit.records import Chunk, Columns, InputError, Request
from puredetok.audit.report import Tally
from puredetok.audit.sources import FORMATS, Shard, audit_shard, detect_format, shards_of
