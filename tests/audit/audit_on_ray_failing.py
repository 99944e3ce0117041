"""``python audit_on_ray_failing.py HOW -- AUDIT ARGUMENTS``: ``puredetok audit`` with a failure
provoked in its Ray tasks (for tests/audit/test_audit_on_ray.py), just before the shards go to Ray:

* ``vanish``: the files are deleted (a worker's ``open`` raises ``FileNotFoundError``);
* ``unpicklable``: the codecs the workers are given cannot be unpickled there (``int("x")`` runs
  as they are: ``ValueError``, which Ray raises in the worker as a ``RaySystemError``);
* ``die``: unpickling the codecs ends the worker process (``os._exit``).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import puredetok_audit._distributed as distributed
from puredetok.cli import main


class Rebuilt:
    """A value whose unpickling calls ``function(*arguments)``."""

    def __init__(self, function: Any, *arguments: Any) -> None:
        self.reduced = (function, arguments)

    def __reduce__(self) -> tuple[Any, ...]:
        return self.reduced


def failing(how: str, real: Any) -> Any:
    def audit_on_ray(shards: Any, auditor: Any, *args: Any, **kwargs: Any) -> Any:
        if how == "vanish":
            for path in {shard.path for shard in shards}:
                os.remove(path)
        elif how == "unpicklable":
            auditor._codecs[False] = Rebuilt(int, "x")
        elif how == "die":
            auditor._codecs[False] = Rebuilt(os._exit, 3)
        else:
            raise ValueError(f"no such failure: {how}")
        return real(shards, auditor, *args, **kwargs)

    return audit_on_ray


if __name__ == "__main__":
    how, separator, *argv = sys.argv[1:]
    assert separator == "--"
    distributed.audit_on_ray = failing(how, distributed.audit_on_ray)
    sys.exit(main(["audit", *argv]))
