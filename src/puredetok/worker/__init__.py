"""The worker process: the ZeroMQ loop, its wire format, flow control, routing and addresses.

- :func:`tokenize_worker` runs a :class:`Worker` (within its :class:`Limits`; its counts in
  :class:`WorkerStats`) between the API server's and the scheduler's addresses
  (:func:`default_address`, an :class:`AddressError` for one it cannot use).
- :class:`WorkerPool` routes each request's messages to the worker that holds it (:func:`route`),
  :class:`Incarnations` tells a worker that restarted, and :class:`WorkerProcesses` starts and
  restarts a pool of workers.
- The wire (docs/worker.md): :func:`encode_batch` writes a frame, :class:`FrameDecoder` reads
  one (a :class:`FrameError` for a frame that is not one), :func:`frame_type` names the record
  of a kind.
"""

from __future__ import annotations

__all__ = [
    "AddressError",
    "FrameDecoder",
    "FrameError",
    "Incarnations",
    "Limits",
    "Worker",
    "WorkerPool",
    "WorkerProcesses",
    "WorkerStats",
    "default_address",
    "encode_batch",
    "frame_type",
    "route",
    "tokenize_worker",
]

from puredetok.worker._addresses import AddressError, default_address
from puredetok.worker._routing import Incarnations, WorkerPool, WorkerProcesses, route
from puredetok.worker._wire import (
    FrameDecoder,
    FrameError,
    encode_batch,
    frame_type,
)
from puredetok.worker._worker import Limits, Worker, WorkerStats, tokenize_worker

for _public in (
    AddressError,
    FrameDecoder,
    FrameError,
    Incarnations,
    Limits,
    Worker,
    WorkerPool,
    WorkerProcesses,
    WorkerStats,
):
    _public.__module__ = __name__  # a pickle names the public path, never the private module
