"""Audit what engines streamed: the exact text of each logged request's ids against the engine's text.

:func:`shards_of` cuts logs (any of :data:`FORMATS`, told by their content; read as
:class:`Columns` say) into :class:`Shard` s, :func:`audit_shard` audits one with an
:class:`Auditor` (its :class:`AuditOptions`) and counts in a :class:`Tally`: each
:class:`Request` (its :class:`Chunk` s) whose text differs is a :class:`Difference` (its kind
named), each bad record an :class:`InputError`. :func:`audit_on_ray` runs the shards on a Ray
cluster (:func:`start_ray`; a failed task raises :class:`TaskFailedError`). See docs/audit.md.
"""

from __future__ import annotations

__all__ = [
    "AuditOptions",
    "Auditor",
    "Chunk",
    "Columns",
    "Difference",
    "FORMATS",
    "InputError",
    "Request",
    "Shard",
    "Tally",
    "TaskFailedError",
    "audit_on_ray",
    "audit_shard",
    "shards_of",
    "start_ray",
]

from puredetok_audit._compare import AuditOptions, Auditor, Difference
from puredetok_audit._distributed import TaskFailedError, audit_on_ray, start_ray
from puredetok_audit._records import Chunk, Columns, InputError, Request
from puredetok_audit._report import Tally
from puredetok_audit._sources import FORMATS, Shard, audit_shard, shards_of

for _public in (
    AuditOptions,
    Auditor,
    Chunk,
    Columns,
    Difference,
    InputError,
    Request,
    Shard,
    Tally,
    TaskFailedError,
):
    _public.__module__ = __name__  # a pickle names the public path, never the private module
