"""Auditing shards in parallel on Ray Data (the ``ray`` extra): a local Ray, or a cluster's.

Each task reads its own shards (a path and offsets: no log data in the object store); the
driver's codecs are put in the object store once per run; batches shrink towards the end so
that the workers end together; the results come back in shard order, so the report is the local
run's. docs/audit.md ("Scale") says how and what it costs.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import pickle
import time
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import attrs

from puredetok.errors import PuredetokError
from puredetok.serving._loading import load_tokenizer
from puredetok_audit._compare import AuditOptions, Auditor, Deferred
from puredetok_audit._records import Columns
from puredetok_audit._sources import Shard, ShardResult, audit_stretches


@attrs.frozen
class Timing:
    """Where a shard's time went on a Ray worker (wall-clock times in seconds since the epoch)."""

    pid: int
    """The worker's process."""
    loading: float
    """When the worker began setting itself up for the run (the codecs fetched and unpickled)."""
    loaded: float
    """When it was ready."""
    ready_cpu: float
    """The CPU seconds its process spent getting ready for the run: all it had used by then if
    the run is its first (Ray's worker started, the modules imported, the codecs unpickled),
    else what fetching the run's codecs took (a worker an earlier run left idle)."""
    began: float
    """When it began auditing the shard."""
    ended: float
    cpu: float
    """The worker's CPU seconds on the shard."""


MAX_BATCH = 16
"""At most this many shards in a batch (the findings the driver holds at once stay few)."""

MAX_SHARES = 8
"""At most this many shares of one compressed file (each decompresses all of it)."""


class TaskFailedError(PuredetokError, RuntimeError):
    """A Ray task of the audit failed (its code raised, or its worker died): the run stops, as
    nothing is run again. The message is one line naming the cause.
    """


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


@attrs.frozen
class CodecsRef:
    """The driver's codecs (:attr:`Auditor.codecs`) in Ray's object store: the reference is
    what a task is given, and a worker fetches the codecs once per run (:func:`audit_batch`).
    """

    ref: Any
    """The ``ray.ObjectRef`` of the codecs."""


@attrs.frozen
class _Ready:
    auditor: Auditor
    started: tuple[float, float, float]


@functools.lru_cache(maxsize=1)
def _ready(codecs: CodecsRef, tokenizer: str | None, options: AuditOptions) -> _Ready:
    """The auditor of a run in this worker process, made on its first batch of the run and kept
    for the others (one run at a time: the previous run's is dropped).
    """
    import ray

    began, cpu = time.time(), time.process_time()
    # while the first call runs nothing is cached yet; while a later one runs, the previous run's entry is
    first = _ready.cache_info().currsize == 0
    load = Deferred(functools.partial(load_tokenizer, tokenizer))
    try:
        built = ray.get(codecs.ref)
    except Exception as error:
        why = _cause(error)
        raise TaskFailedError(f"the driver's codecs could not be unpickled in a worker: {why}") from None
    auditor = Auditor(load, options, built)
    spent = time.process_time() - (0.0 if first else cpu)
    return _Ready(auditor, (began, time.time(), spent))


def audit_batch(
    batch: Any, *, tokenizer: str | None, options: AuditOptions, columns: Columns, codecs: CodecsRef
) -> Iterator[dict[str, list[Any]]]:
    """Audit the shards of a batch (a ``pyarrow.Table`` of ``shards``, the fields of each, and
    ``orders``, the place of each in the run): a row per result, pickled with its :class:`Timing`,
    given as it is found; the tokenizer (``tokenizer``, for :func:`load_tokenizer`) is loaded only
    if a record needs it. Any exception is raised as a :class:`TaskFailedError` naming the shard
    and the cause in one line (Ray Data runs a task again on some).
    """
    ready = _ready(codecs, tokenizer, options)
    for row in batch.to_pylist():
        for order, fields in zip(row["orders"], row["shards"]):
            shard = Shard(**fields)
            results = audit_stretches(shard, ready.auditor, columns)
            while True:
                began, cpu = time.time(), time.process_time()
                try:
                    result = next(results, None)
                except Exception as error:
                    raise TaskFailedError(f"{shard.path}: {_cause(error)}") from None
                if result is None:
                    break
                timing = Timing(os.getpid(), *ready.started, began, time.time(), time.process_time() - cpu)
                found = attrs.evolve(result, index=order, timing=timing)
                yield {"result": [pickle.dumps(found)]}


def start_ray(address: str | None = None, num_cpus: int | None = None) -> Any:
    """Join the Ray cluster at ``address``, else start a local Ray with ``num_cpus`` CPUs (all
    of them if None), unless this process has a Ray already; lean: no dashboard, the workers'
    logs not sent to the driver. Returns the ``ray`` module.
    """
    try:
        import ray
        import ray.data
    except ImportError:
        raise ValueError("--ray needs Ray: pip install 'puredetok[ray]'") from None
    if not ray.is_initialized():
        ray.init(
            address=address,
            num_cpus=None if address else num_cpus,
            include_dashboard=False,
            log_to_driver=False,
            logging_level=logging.ERROR,
        )
    # a task's failure is audit_on_ray's TaskFailedError, in one line: not Ray Data's traceback too
    logging.getLogger("ray.data").setLevel(logging.CRITICAL)
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
    """Audit ``shards`` on Ray Data, the results in the order of ``shards``, as ``auditor`` does
    (a compressed file's in parts, as :func:`~puredetok_audit._sources.audit_stretches` gives
    them: each result says whether it is its shard's :attr:`~ShardResult.last`).

    ``auditor`` is the driver's: it builds the codec of its options (if not yet built), which
    the workers are given; ``tokenizer`` is the name or path it was loaded from, for the workers
    whose records need the tokenizer itself.

    Ray is started by :func:`start_ray` (``address``, ``num_cpus``) unless it runs already.
    ``workers`` is how many workers audit at once (default: the cluster's CPUs, at most one per
    task: a shard, or a share of a compressed file, :func:`shares`); fewer workers than CPUs take
    the CPUs between them where they divide evenly (a task
    of 2 CPUs for 1 worker of 2 CPUs), so that every batch can wait at Ray for the next free
    worker.

    No task is run again: one that fails (an exception in it, or its worker dying) ends the run,
    raised as :class:`TaskFailedError` naming the cause in one line.
    """
    ray = start_ray(address, num_cpus)
    if not shards:
        return
    options = auditor.options
    auditor.codec_of(options.skip_special_tokens, options.spaces_between_special_tokens)
    cpus = int(ray.cluster_resources().get("CPU", 1))
    tasks = shares(shards, workers or cpus)
    size = max(1, min(workers or cpus, len(tasks)))
    rows, first = [], 0
    for count in batch_sizes(len(tasks), size):
        batch = tasks[first : first + count]
        rows.append({"orders": [order for order, _ in batch], "shards": [attrs.asdict(s) for _, s in batch]})
        first += count
    each = cpus // size if cpus % size == 0 else 1
    # where the CPUs hold no more than `size` tasks at once, every batch is handed to Ray at once:
    # Ray gives a worker the next one, in order, as it ends one (Ray Data handing them out itself
    # left one worker idle at the end of a run while the other ran the last small batches, measured)
    in_flight = len(rows) if size * each >= cpus else size
    context = ray.data.DataContext.get_current()
    # the results are put back in order here (_in_order), as they come
    context.execution_options.preserve_order = False
    context.enable_progress_bars = False
    # with its resource reservation on, Ray Data started the second worker's first task about a
    # second after the first one's and left a worker idle 0.2 s between two batches (measured)
    context.op_resource_reservation_enabled = False
    with warnings.catch_warnings():
        # Ray Data runs a failed task again forever by default (a worker that died, or a
        # RaySystemError raised in it): a run that cannot succeed would never end. max_retries=0
        # says otherwise through Ray's remote arguments, which Ray 2.60 warns go in 2.64 and gives
        # no named parameter for: pyproject.toml's range stops before 2.64 (docs/versions.md), and
        # the warning is nothing a user of the audit can act on.
        warnings.filterwarnings("ignore", "`ray_remote_args` is deprecated", DeprecationWarning)
        dataset = ray.data.from_items(rows, override_num_blocks=len(rows)).map_batches(
            audit_batch,
            fn_kwargs={
                "tokenizer": tokenizer,
                "options": auditor.options,
                "columns": columns,
                "codecs": CodecsRef(ray.put(auditor.codecs)),
            },
            batch_size=1,
            batch_format="pyarrow",
            compute=ray.data.TaskPoolStrategy(size=in_flight),
            num_cpus=each,
            max_retries=0,
        )
    try:
        yield from _in_order(pickle.loads(row["result"]) for row in dataset.iter_rows())
    except ray.exceptions.RayError as error:
        raise TaskFailedError(f"a Ray task failed: {_cause(error)}") from None


def _cause(error: BaseException) -> str:
    """Why a task failed, in one line: the innermost exception inside Ray's wrappers (a task's
    error holds the one its code raised), its type and the first line of its message (Ray Data
    adds lines of its own).
    """
    import ray

    while True:
        inner: object = None
        if isinstance(error, ray.exceptions.RayTaskError):
            inner = error.cause
        elif isinstance(error, ray.exceptions.RaySystemError):
            inner = error.client_exc
        if not isinstance(inner, BaseException) or inner is error:
            break
        error = inner
    lines = str(error).strip().splitlines()
    first = lines[0] if lines else ""
    if isinstance(error, TaskFailedError):
        return first
    return f"{type(error).__name__}: {first}" if first else type(error).__name__


def shares(shards: Sequence[Shard], workers: int, most: int = MAX_SHARES) -> list[tuple[int, Shard]]:
    """The tasks of a run: each shard with its place, a compressed file of lines cut into shares
    (:attr:`~puredetok_audit._sources.Shard.first_stretch`; each share reads the whole file and
    audits every n-th of its stretches) when the shards are fewer than ``workers``, so that each
    worker has one; at most ``most`` shares a file, and none for bzip2, whose decompression
    costs more than the audit it would share.
    """
    cut = 1 if len(shards) >= workers else min(most, math.ceil(workers / len(shards)))
    tasks: list[tuple[int, Shard]] = []
    for order, shard in enumerate(shards):
        lines = shard.layout == "lines" and shard.format != "trace"
        step = cut if lines and shard.compression not in (None, "bzip2") else 1
        tasks += [(order, attrs.evolve(shard, first_stretch=k, stretch_step=step)) for k in range(step)]
    return tasks


def _in_order(results: Iterator[ShardResult]) -> Iterator[ShardResult]:
    """``results`` in order of their shard and their stretch in it, from the first on, each as
    soon as those before it came (a result that ends before an earlier one is held until it has).
    """
    held: dict[tuple[int, int], ShardResult] = {}
    due = (0, 0)
    for result in results:
        held[result.index, result.part] = result
        while due in held:
            ready = held.pop(due)
            yield ready
            due = (due[0] + 1, 0) if ready.last else (due[0], due[1] + 1)
