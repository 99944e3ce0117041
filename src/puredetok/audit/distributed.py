"""Auditing shards in parallel on Ray Data (the ``ray`` extra): a local Ray, or a cluster's.

The shards are the rows of a dataset that a Ray Data actor pool maps (``map_batches``): each
worker (one CPU) audits whole shards, which it reads itself (a shard is a path and two offsets:
no log data goes through the object store). The driver builds the codec once and Ray Data
puts it in the object store with the workers' other arguments: a worker unpickles it (a few
hundredths of a second) rather than loading the tokenizer and building the codec (about 2 s of
CPU each), and loads the tokenizer only if a record needs it
(:class:`~puredetok.audit.compare.Deferred`). A batch is a run
of consecutive shards, large while many remain and smaller towards the end
(:func:`batch_sizes`), so that Ray Data's cost per batch (its scheduling, the block passed
back) is paid a few times per worker rather than once per shard, and the workers end
together; the results come back pickled, in shard order, so the report is the local run's. On
a cluster the input files must be at the same paths on every node, and the tokenizer too where
a record needs it.
"""

from __future__ import annotations

__all__ = ["MAX_BATCH", "audit_on_ray", "batch_sizes", "start_ray", "ShardAuditor", "Timing"]

import functools
import logging
import math
import os
import pickle
import time
from collections.abc import Iterator, Sequence
from typing import Any

import attrs

from puredetok.audit.compare import AuditOptions, Auditor, Deferred
from puredetok.audit.records import Columns
from puredetok.audit.sources import Shard, ShardResult, audit_shard
from puredetok.core import Codec
from puredetok.serving.loading import load_tokenizer


@attrs.frozen
class Timing:
    """Where a shard's time went on a Ray worker (wall-clock times in seconds since the epoch)."""

    pid: int
    """The worker's process."""
    loading: float
    """When the worker began setting itself up (its arguments, the codecs among them, unpickled)."""
    loaded: float
    """When it was ready."""
    ready_cpu: float
    """The CPU seconds its process had used when it was ready (Ray's worker started, the
    modules imported, the codecs unpickled)."""
    began: float
    """When it began auditing the shard."""
    ended: float
    cpu: float
    """The worker's CPU seconds on the shard."""


MAX_BATCH = 16
"""At most this many shards in a batch (the findings the driver holds at once stay few)."""


def batch_sizes(shards: int, workers: int, most: int = MAX_BATCH) -> list[int]:
    """How many consecutive shards each batch holds, in order: a share of those that remain
    (one ``2 * workers``-th, at most ``most``, at least 1), so that the batches are few while
    many shards remain and a worker that ends first waits at most for one small batch.
    """
    sizes: list[int] = []
    remaining = shards
    while remaining > 0:
        size = max(1, min(most, math.ceil(remaining / (2 * workers))))
        sizes.append(size)
        remaining -= size
    return sizes


class ShardAuditor:
    """A worker of the actor pool: audits the shards of each batch it is given, one by one.

    ``codecs`` are the driver's (:attr:`Auditor.codecs`); the tokenizer ``tokenizer`` (a name
    or path for :func:`load_tokenizer`) is loaded only if a record needs it.
    """

    def __init__(
        self,
        tokenizer: str | None,
        options: dict[str, Any],
        columns: dict[str, Any],
        codecs: dict[bool, Codec],
    ) -> None:
        began = time.time()
        load = Deferred(functools.partial(load_tokenizer, tokenizer))
        self.auditor = Auditor(load, AuditOptions(**options), codecs)
        self.columns = Columns(**columns)
        self.started = (began, time.time(), time.process_time())

    def audit(self, shard: Shard, order: int) -> ShardResult:
        """Audit one shard; its result carries ``order`` and where its time went."""
        wall, cpu = time.time(), time.process_time()
        result = audit_shard(shard, self.auditor, self.columns)
        timing = Timing(os.getpid(), *self.started, wall, time.time(), time.process_time() - cpu)
        return ShardResult(order, result.records, result.tally, timing)

    def __call__(self, batch: Any) -> dict[str, list[Any]]:
        """Audit the shards of a batch (a ``pyarrow.Table`` whose rows hold ``first``, the
        place of their first shard, and ``shards``, the fields of each): a row per shard, its
        result pickled.
        """
        out: dict[str, list[Any]] = {"result": []}
        for row in batch.to_pylist():
            for order, fields in enumerate(row["shards"], row["first"]):
                out["result"].append(pickle.dumps(self.audit(Shard(**fields), order)))
        return out


def _ray() -> Any:
    try:
        import ray
        import ray.data
    except ImportError:
        raise ValueError("--ray needs Ray: pip install 'puredetok[ray]'") from None
    return ray


def start_ray(address: str | None = None, num_cpus: int | None = None) -> Any:
    """Join the Ray cluster at ``address``, else start a local Ray with ``num_cpus`` CPUs (all
    of them if None), unless this process has a Ray already; lean: no dashboard, the workers'
    logs not sent to the driver. Returns the ``ray`` module.
    """
    ray = _ray()
    if not ray.is_initialized():
        ray.init(
            address=address,
            num_cpus=None if address else num_cpus,
            include_dashboard=False,
            log_to_driver=False,
            logging_level=logging.ERROR,
        )
    logging.getLogger("ray.data").setLevel(logging.ERROR)
    return ray


def audit_on_ray(
    shards: Sequence[Shard],
    auditor: Auditor,
    tokenizer: str | None,
    columns: Columns,
    *,
    address: str | None = None,
    num_cpus: int | None = None,
    workers: int | None = None,
) -> Iterator[ShardResult]:
    """Audit ``shards`` on Ray Data, the results in the order of ``shards``, as ``auditor`` does.

    ``auditor`` is the driver's: it builds the codec of its options (if not yet built), which
    the workers are given; ``tokenizer`` is the name or path it was loaded from, for the workers
    whose records need the tokenizer itself.

    Ray is started by :func:`start_ray` (``address``, ``num_cpus``) unless it runs already.
    ``workers`` is how many workers audit at once (default: the cluster's CPUs, at most one per
    shard).
    """
    ray = start_ray(address, num_cpus)
    if not shards:
        return
    auditor.codec_of(auditor.options.skip_special_tokens)
    cpus = int(ray.cluster_resources().get("CPU", 1))
    size = max(1, min(workers or cpus, len(shards)))
    context = ray.data.DataContext.get_current()
    context.execution_options.preserve_order = True
    context.enable_progress_bars = False
    rows, first = [], 0
    for count in batch_sizes(len(shards), size):
        rows.append({"first": first, "shards": [attrs.asdict(s) for s in shards[first : first + count]]})
        first += count
    dataset = ray.data.from_items(rows, override_num_blocks=len(rows)).map_batches(
        ShardAuditor,
        fn_constructor_kwargs={
            "tokenizer": tokenizer,
            "options": attrs.asdict(auditor.options),
            "columns": attrs.asdict(columns),
            "codecs": auditor.codecs,
        },
        batch_size=1,
        batch_format="pyarrow",
        # the next batch waits at each worker, so that none waits for Ray Data between two
        compute=ray.data.ActorPoolStrategy(size=size, max_tasks_in_flight_per_actor=2),
        num_cpus=1,
    )
    for row in dataset.iter_rows():
        yield pickle.loads(row["result"])
