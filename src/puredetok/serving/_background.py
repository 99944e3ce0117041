"""Work done in a thread beside the worker's loop (:class:`Background`): the loop hands jobs over and
goes on; a pipe wakes it when results wait. The tokenizing thread and the codec builder are two.
"""

from __future__ import annotations

import collections
import os
import queue
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

Job = TypeVar("Job")
Result = TypeVar("Result")


class Background(Generic[Job, Result]):
    """A thread that runs ``work`` on each job given to :meth:`submit`, one at a time, in order.

    ``name`` names the thread. ``after``, if given, runs in the thread after each job, once the
    job's result is out to :meth:`collect` (clean-up that need not hold the result up).
    """

    def __init__(
        self,
        work: Callable[[Job], Result],
        name: str,
        after: Callable[[Job], None] | None = None,
    ) -> None:
        self._work = work
        self._after = after
        self._jobs: queue.SimpleQueue[tuple[Job] | None] = queue.SimpleQueue()
        self._done: collections.deque[tuple[Job, Result | Exception]] = collections.deque()
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_read, False)
        self._pending = 0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    @property
    def fd(self) -> int:
        """A file descriptor that is readable while results wait (for the loop's poller)."""
        return self._wake_read

    @property
    def pending(self) -> int:
        """Jobs submitted whose results have not been collected yet."""
        return self._pending

    def submit(self, job: Job) -> None:
        """Run ``job`` after the ones already given."""
        self._pending += 1
        self._jobs.put((job,))

    def collect(self) -> list[tuple[Job, Result | Exception]]:
        """The jobs finished now with their results (or the error each raised), in the order they
        were given. The wake-up is read whatever else happens: it never stays readable.
        """
        try:
            os.read(self._wake_read, 1 << 16)
        except BlockingIOError:
            pass
        ready = []
        while self._done:
            ready.append(self._done.popleft())
        self._pending -= len(ready)
        return ready

    def close(self) -> None:
        """Finish the jobs given, then stop the thread (collect their results before)."""
        self._jobs.put(None)
        self._thread.join()
        os.close(self._wake_read)
        os.close(self._wake_write)

    def _run(self) -> None:
        while (item := self._jobs.get()) is not None:
            (job,) = item
            result: Result | Exception
            try:
                result = self._work(job)
            except Exception as error:  # the job's caller gets the error; the thread lives on
                result = error
            self._done.append((job, result))
            os.write(self._wake_write, b"\0")
            if self._after is not None:
                self._after(job)
