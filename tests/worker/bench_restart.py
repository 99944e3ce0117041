"""Restart under load, repeated: ``.venv/bin/python tests/worker/bench_restart.py [RUNS]`` (from the
repository root). Prints the figures of tests/worker/test_restart.py's scenario, run by run (the ranges
in docs/benchmarks.md come from here)."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path[:0] = [str(Path(__file__).parent), str(Path(__file__).parents[1])]

from test_restart import restart_under_load  # noqa: E402


def main(runs: int) -> None:
    for run in range(runs):
        with tempfile.TemporaryDirectory(prefix="puredetok-restart-") as folder:
            figures = restart_under_load(Path(folder), seed=run)
        print(
            f"run {run + 1}: "
            + ", ".join(f"{key} {value:,.2f}".replace(".00", "") for key, value in figures.items())
        )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
