"""Auditing shards in parallel on Ray (the ``ray`` extra): a local Ray, or a cluster's.

Each worker (a Ray actor, one CPU) loads the tokenizer once and audits whole shards, which it
reads itself (a shard is a path and two offsets); the driver keeps two shards queued at each
worker, so that it never waits for the next, and hands the results on in shard order, so the
report is the local run's. ``via="data"`` runs the same workers as a Ray Data actor pool
(``map_batches``), which leaves each worker idle about 0.1 s between two batches. On a cluster
the input files and the tokenizer must be at the same paths on every node.
"""

from __future__ import annotations

__all__ = ["VIAS", "audit_on_ray", "ShardAuditor", "Timing"]

import json
import logging
import os
import time
from collections.abc import Iterator, Sequence
from typing import Any

import attrs

from puredetok.audit.compare import AuditOptions, Auditor
from puredetok.audit.records import Columns
from puredetok.audit.report import Tally
from puredetok.audit.sources import Shard, ShardResult, audit_shard
from puredetok.serving.loading import load_tokenizer


@attrs.frozen
class Timing:
    """Where a shard's time went on a Ray worker (wall-clock times in seconds since the epoch)."""

    pid: int
    """The worker's process."""
    loading: float
    """When the worker began loading the tokenizer."""
    loaded: float
    """When it was ready (tokenizer and options)."""
    began: float
    """When it began auditing the shard."""
    ended: float
    cpu: float
    """The worker's CPU seconds on the shard."""


VIAS = ("actors", "data")
"""How shards reach the workers: Ray actors fed by the driver, or a Ray Data actor pool."""


class ShardAuditor:
    """A worker: audits the shards it is given, one by one (as a Ray actor, or in a Ray Data
    actor pool, a batch at a time).
    """

    def __init__(self, tokenizer: str | None, options: dict[str, Any], columns: dict[str, Any]) -> None:
        began = time.time()
        self.auditor = Auditor(load_tokenizer(tokenizer), AuditOptions(**options))
        self.columns = Columns(**columns)
        self.started = (began, time.time())

    def audit(self, shard: Shard, order: int) -> ShardResult:
        """Audit one shard; its result carries ``order`` and where its time went."""
        wall, cpu = time.time(), time.process_time()
        result = audit_shard(shard, self.auditor, self.columns)
        timing = Timing(os.getpid(), *self.started, wall, time.time(), time.process_time() - cpu)
        return ShardResult(order, result.records, result.tally, timing)

    def __call__(self, batch: dict[str, Any]) -> dict[str, list[Any]]:
        """Audit the shards of a batch (a column per field of :class:`Shard`)."""
        out: dict[str, list[Any]] = {"order": [], "records": [], "tally": [], "timing": []}
        names = [field.name for field in attrs.fields(Shard)]
        for row in range(len(batch["order"])):
            shard = Shard(**{name: _plain(batch[name][row]) for name in names})
            result = self.audit(shard, int(batch["order"][row]))
            out["order"].append(result.index)
            out["records"].append(json.dumps(result.records, ensure_ascii=False))
            out["tally"].append(json.dumps(result.tally.to_json()))
            out["timing"].append(json.dumps(attrs.astuple(result.timing)))
        return out


def _plain(value: Any) -> Any:
    """A numpy scalar as the Python value it holds."""
    return value.item() if hasattr(value, "item") else value


def _ray() -> Any:
    try:
        import ray
        import ray.data
    except ImportError:
        raise ValueError("--ray needs Ray: pip install 'puredetok[ray]'") from None
    return ray


def audit_on_ray(
    shards: Sequence[Shard],
    tokenizer: str | None,
    options: AuditOptions,
    columns: Columns,
    *,
    address: str | None = None,
    num_cpus: int | None = None,
    workers: int | None = None,
    via: str = "actors",
) -> Iterator[ShardResult]:
    """Audit ``shards`` on Ray, the results in the order of ``shards``.

    With ``address`` it joins that cluster, else it starts a local Ray with ``num_cpus`` CPUs
    (all of them if None); a Ray already started in this process is used as it is. ``workers``
    is how many workers audit at once (default: the cluster's CPUs, at most one per shard);
    ``via`` one of :data:`VIAS`.
    """
    if via not in VIAS:
        raise ValueError(f"via must be one of {', '.join(VIAS)}, not {via!r}")
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
    if not shards:
        return
    cpus = int(ray.cluster_resources().get("CPU", 1))
    size = max(1, min(workers or cpus, len(shards)))
    arguments = {"tokenizer": tokenizer, "options": attrs.asdict(options), "columns": attrs.asdict(columns)}
    if via == "actors":
        yield from _on_actors(ray, shards, size, arguments)
    else:
        yield from _on_data(ray, shards, size, arguments)


QUEUED = 2
"""Shards handed to each actor ahead (the next is there when one ends)."""

AHEAD = 8
"""At most this many shards per actor are handed out past the first one whose result is still
awaited (the results held for the report's order stay few behind a slow shard)."""


def _on_actors(
    ray: Any, shards: Sequence[Shard], size: int, arguments: dict[str, Any]
) -> Iterator[ShardResult]:
    worker = ray.remote(num_cpus=1)(ShardAuditor)
    actors = [worker.remote(**arguments) for _ in range(size)]
    queued = dict.fromkeys(range(size), 0)
    running: dict[Any, int] = {}
    done: dict[int, ShardResult] = {}
    following = wanted = 0

    def hand() -> None:
        nonlocal following
        for _ in range(QUEUED):
            for index, actor in enumerate(actors):
                if following >= min(len(shards), wanted + AHEAD * size) or queued[index] >= QUEUED:
                    continue
                running[actor.audit.remote(shards[following], following)] = index
                queued[index] += 1
                following += 1

    try:
        hand()
        while running:
            (ready,), _ = ray.wait(list(running), num_returns=1)
            queued[running.pop(ready)] -= 1
            hand()
            result = ray.get(ready)
            done[result.index] = result
            while wanted in done:
                yield done.pop(wanted)
                wanted += 1
            hand()
    finally:
        for actor in actors:
            ray.kill(actor)


def _on_data(
    ray: Any, shards: Sequence[Shard], size: int, arguments: dict[str, Any]
) -> Iterator[ShardResult]:
    context = ray.data.DataContext.get_current()
    context.execution_options.preserve_order = True
    context.enable_progress_bars = False
    rows = [{**attrs.asdict(shard), "order": order} for order, shard in enumerate(shards)]
    dataset = ray.data.from_items(rows, override_num_blocks=len(rows)).map_batches(
        ShardAuditor,
        fn_constructor_kwargs=arguments,
        batch_size=1,
        compute=ray.data.ActorPoolStrategy(size=size),
        num_cpus=1,
    )
    for row in dataset.iter_rows():
        yield ShardResult(
            int(row["order"]),
            json.loads(row["records"]),
            Tally.from_json(json.loads(row["tally"])),
            Timing(*json.loads(row["timing"])),
        )
