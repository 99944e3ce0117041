"""Replaying token traces: the trace format and the replayer that checks each request.

A trace is JSON lines, an optional header then one event per line (docs/trace.md):
:func:`read_trace` reads a whole one (:func:`trace_items` line by line, a bad line as a
:class:`TraceError` to skip), and a :class:`Replayer` replays its events through the manager,
checking every request against the tokenizer's ``decode``: a :class:`RequestReport` each, a
:class:`ReplaySummary` at the end.
"""

from __future__ import annotations

__all__ = [
    "ReplaySummary",
    "Replayer",
    "RequestReport",
    "TraceError",
    "TraceEvent",
    "TraceHeader",
    "read_trace",
    "trace_items",
]

from puredetok_audit.replay._replay import Replayer, ReplaySummary, RequestReport
from puredetok_audit.replay._trace import TraceError, TraceEvent, TraceHeader, read_trace, trace_items

for _public in (Replayer, ReplaySummary, RequestReport, TraceError, TraceEvent, TraceHeader):
    _public.__module__ = __name__  # a pickle names the public path, never the private module
