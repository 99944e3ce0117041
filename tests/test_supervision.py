"""Issue 12, item 4: a pool restarts a worker that died, at once, and the frontend can tell every
request the dead worker held; none hangs. Real processes, ``kill -9``, real sockets."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from puredetok.serving.messages import (
    AbortBackendMsg,
    AbortMsg,
    DetokenizeMsg,
    HealthCheckMsg,
    HealthReply,
    Opening,
    ReadyMsg,
    UserReply,
)
from puredetok.worker.routing import Incarnations, WorkerProcesses
from test_worker import NO_EOS, core_text, encode
from zmq_harness import TIMEOUT, Harness


def children(pid: int) -> set[int]:
    """The pids of a process's children (Linux)."""
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return {int(child) for child in path.read_text().split()} if path.exists() else set()


def test_a_killed_worker_is_restarted_at_once_and_every_request_ends(tmp_path: Path) -> None:
    """``kill -9`` of one worker of ``serve --workers 2`` with 1,000 live requests streaming: the
    pool starts a new one within a second; its ReadyMsg tells the frontend (the test) to fail the
    requests routed to it; the others end exactly. Every request ends; none hangs."""
    h = Harness(tmp_path)
    try:
        parent = h.start(2, "--quiet")
        ready = {m.worker: m for m in h.wait_ready(2)}
        incarnations = Incarnations()
        for message in ready.values():
            assert not incarnations.restarted(message)
        pool = h.pool([0, 1])
        uids = [f"r{n}" for n in range(1000)]
        line = encode("supervised 推理 naïve 🦩 text, streaming on " * 2)
        said = dict.fromkeys(uids, "")
        ended: dict[str, str] = {}  # uid -> "final" or the error
        generating = set(uids)  # the scheduler's side: stops on AbortBackendMsg
        victim = ready["worker-1"]
        killed_at = restarted_at = 0.0
        new_ready: ReadyMsg | None = None

        def listen() -> None:
            nonlocal new_ready
            while h.frontend.poll(0):
                for message in h.from_frontend.decode(h.frontend.recv()).batch.items:
                    if isinstance(message, ReadyMsg) and incarnations.restarted(message):
                        new_ready = message
                        lost = [
                            uid for uid in uids if uid not in ended and pool.owner(uid) == message.address
                        ]
                        for uid in lost:
                            ended[uid] = f"lost with {message.worker} (restarted)"
                        pool.send([AbortMsg(uid) for uid in lost])
                    elif isinstance(message, UserReply) and message.uid in said and message.uid not in ended:
                        said[message.uid] += message.incremental_output
                        if message.error is not None:
                            ended[message.uid] = message.error
                        elif message.finished:
                            ended[message.uid] = "final"
            while h.backend.poll(0):
                for message in h.from_backend.decode(h.backend.recv()).batch.items:
                    if isinstance(message, AbortBackendMsg):
                        generating.discard(message.uid)

        for step, token in enumerate(line):
            last = step == len(line) - 1
            opening = Opening((), NO_EOS) if step == 0 else None
            pool.send([DetokenizeMsg(uid, (token,), last, opening) for uid in uids if uid in generating])
            if step == 4:
                before = children(parent.pid)
                os.kill(victim.pid, signal.SIGKILL)
                killed_at = time.monotonic()
                while not children(parent.pid) - before and time.monotonic() - killed_at < 5:
                    time.sleep(0.005)
                restarted_at = time.monotonic()
            listen()
            time.sleep(0.02)
        deadline = time.monotonic() + 3 * TIMEOUT
        while len(ended) < len(uids) and time.monotonic() < deadline:
            listen()
            time.sleep(0.01)
        assert restarted_at - killed_at < 1.0, restarted_at - killed_at
        assert new_ready is not None and new_ready.worker == "worker-1" and new_ready.incarnation == 1
        assert new_ready.instance != victim.instance and new_ready.pid != victim.pid
        assert len(ended) == len(uids), f"{len(uids) - len(ended)} requests never ended"
        survivors = [uid for uid in uids if pool.owner(uid) == h.worker_address(0)]
        assert all(ended[uid] == "final" and said[uid] == core_text(line) for uid in survivors)
        lost = [uid for uid in uids if uid not in survivors]
        assert all(ended[uid].startswith("lost with worker-1") for uid in lost)
        print(
            f"\nkill -9 under load: restarted in {(restarted_at - killed_at) * 1000:.0f} ms; "
            f"{len(survivors)} requests ended exactly, {len(lost)} failed as lost; none hung"
        )
        # The new incarnation serves: a request routed to it streams exactly.
        fresh = next(f"fresh-{n}" for n in range(100) if pool.owner(f"fresh-{n}") == h.worker_address(1))
        pool.send([DetokenizeMsg(fresh, tuple(line), True, Opening((), NO_EOS))])
        replies = h.replies_until_finished({fresh})
        assert "".join(r.incremental_output for r in replies[fresh]) == core_text(line)
        parent.send_signal(signal.SIGTERM)
        assert parent.wait(60) == 0
    finally:
        h.close()


def test_the_python_pool_restarts_a_dead_worker_and_stops_when_asked(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    arguments = ["--quiet", "--listen", f"ipc://{tmp_path}/worker-{{index}}"]
    arguments += ["--backend", h.backend_address, "--frontend", h.frontend_address]
    try:
        with WorkerProcesses(1, arguments) as workers:
            [first] = h.wait_ready(1)
            assert first.incarnation == 0 and workers.processes[0].pid == first.pid
            os.kill(first.pid, signal.SIGKILL)
            [second] = h.wait_ready(1)
            assert second.worker == first.worker and second.incarnation == 1 and second.pid != first.pid
            assert workers.incarnations == {0: 1}
            pool = h.pool([0])
            pool.send([HealthCheckMsg(3)])
            [health] = h.receive(h.frontend, lambda got: any(isinstance(m, HealthReply) for m in got))
            assert isinstance(health, HealthReply) and health.pid == second.pid
        assert workers.exit_code == 0 and workers.processes[0].poll() is not None
    finally:
        h.close()


def test_a_worker_that_cannot_start_stops_the_pool_with_exit_code_2(tmp_path: Path) -> None:
    """A worker that refuses to start (here: its address is held by a live pool) is not restarted
    in a loop: the new pool stops at once with exit code 2, and the live pool goes on serving."""
    h = Harness(tmp_path)
    try:
        h.start(2, "--quiet")
        h.wait_ready(2)
        second = subprocess.run(
            [sys.executable, "-m", "puredetok.cli", "serve", "--workers", "2", "--quiet"]
            + ["--listen", f"ipc://{tmp_path}/worker-{{index}}"]
            + ["--backend", h.backend_address, "--frontend", h.frontend_address],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert second.returncode == 2, second.stderr
        assert "held by a live worker" in second.stderr and "Traceback" not in second.stderr
        pool = h.pool([0, 1])
        pool.send([HealthCheckMsg(9)])
        health = h.receive(h.frontend, lambda got: sum(isinstance(m, HealthReply) for m in got) >= 2)
        assert {m.worker for m in health if isinstance(m, HealthReply)} == {"worker-0", "worker-1"}
    finally:
        h.close()
