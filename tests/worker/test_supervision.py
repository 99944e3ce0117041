"""A pool restarts a worker that died, at once, and the frontend can tell every request the dead
worker held; none hangs, and the scheduler is told to stop each one. Real processes, ``kill -9``,
real sockets."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from puredetok.client import (
    AsyncBackendClient,
    AsyncFrontendClient,
    BackendClient,
    FrontendClient,
    RequestLost,
)
from puredetok.serving._messages import (
    AbortBackendMsg,
    AbortMsg,
    DetokenizeMsg,
    HealthCheckMsg,
    HealthReply,
    Opening,
    ReadyMsg,
    UserMsg,
    UserReply,
)
from puredetok.worker._routing import Incarnations, WorkerProcesses, route
from test_worker import NO_EOS, core_text, encode
from zmq_harness import TIMEOUT, Harness, stop_processes


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


def _serve_pool(folder: Path, workers: int) -> tuple[subprocess.Popen[bytes], list[str], str, str]:
    """``serve --workers N`` on addresses in ``folder``: the process, the workers' addresses, the
    frontend's and the scheduler's (the clients bind those two)."""
    frontend, backend = f"ipc://{folder}/frontend", f"ipc://{folder}/backend"
    command = [sys.executable, "-m", "puredetok.cli", "serve", "--workers", str(workers), "--quiet"]
    command += ["--listen", f"ipc://{folder}/worker-{{index}}", "--backend", backend, "--frontend", frontend]
    log = open(folder / "serve.log", "wb")  # noqa: SIM115
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    return process, [f"ipc://{folder}/worker-{index}" for index in range(workers)], frontend, backend


def _aborts_heard(backend: BackendClient, seconds: float) -> Counter[object]:
    """The scheduler's side: the aborts it hears within ``seconds``, counted by uid."""
    heard: Counter[object] = Counter()
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        heard.update(m.uid for m in backend.receive(left) if isinstance(m, AbortBackendMsg))
    return heard


def test_a_lost_request_is_aborted_at_the_scheduler_exactly_once(tmp_path: Path) -> None:
    """``kill -9`` of one worker of ``serve --workers 2``; the restarted worker's ReadyMsg makes the
    frontend client raise RequestLost for each request the dead worker owned or was tokenizing
    (before its first reply), and the scheduler's socket hears one AbortBackendMsg for each lost
    uid, exactly once, while it keeps sending ids for them (answered as unknown by the new worker,
    which aborts nothing). The other requests go on exactly. Sync client first, then the asyncio one
    on the same pool (killed again)."""
    process, addresses, frontend, backend_address = _serve_pool(tmp_path, 2)
    line = encode("lost 推理 naïve 🦩 requests stop generating")
    try:
        with (
            # worker-1 alone tokenizes: the requests the other worker owns are lost too while
            # worker-1 had their tokenize and no reply had come.
            FrontendClient(addresses, frontend, tokenize=addresses[1:], timeout=120) as client,
            BackendClient(addresses, backend_address) as backend,
        ):
            deadline = time.monotonic() + 120
            while len(health := client.health(timeout=1.0)) < 2:
                assert time.monotonic() < deadline
            victim = next(h for h in health if h.worker == "worker-1")
            opened = {f"open-{n}": client.tokenize(f"open-{n}", f"prompt {n}") for n in range(16)}
            waiting = {f"wait-{n}": client.tokenize(f"wait-{n}", f"later {n}") for n in range(16)}
            users: dict[object, UserMsg] = {}
            while len(users) < len(opened) + len(waiting):
                users |= {m.uid: m for m in backend.receive(60) if isinstance(m, UserMsg)}
            for uid in opened:  # the scheduler starts the first 16; the other 16 wait for it
                user = users[uid]
                backend.send([DetokenizeMsg(uid, (line[0],), False, Opening(tuple(user.input_ids), NO_EOS))])
            said = {uid: next(request).incremental_output for uid, request in opened.items()}
            os.kill(victim.pid, signal.SIGKILL)
            # The scheduler, unaware, keeps generating every open request.
            backend.send([DetokenizeMsg(uid, (line[1],)) for uid in opened])
            owner = {uid: addresses[route(uid, 2)] for uid in opened}
            lost: set[object] = set()
            for uid, request in opened.items():
                if owner[uid] == addresses[1]:
                    with pytest.raises(RequestLost, match="restarted"):
                        next(request)  # at once when the new worker's ReadyMsg comes
                    lost.add(uid)
                else:
                    said[uid] += next(request).incremental_output
            backend.send([DetokenizeMsg(uid, tuple(line[2:4])) for uid in opened])  # still unaware
            for uid, request in waiting.items():  # tokenized by worker-1, never answered: lost
                with pytest.raises(RequestLost, match="restarted"):
                    next(request)
                lost.add(uid)
            backend.send([DetokenizeMsg(uid, tuple(line[4:]), True) for uid in opened if uid not in lost])
            for uid, request in opened.items():
                if uid not in lost:
                    assert said[uid] + request.text() == core_text(line), uid
            heard = _aborts_heard(backend, 3.0)
            assert heard == Counter(dict.fromkeys(lost, 1)), heard  # each lost uid once, nothing else
            assert client.health(timeout=10.0)  # both workers serve again

        async def asyncio_clients() -> None:
            async with (
                AsyncFrontendClient(addresses, frontend, timeout=120) as client,
                AsyncBackendClient(addresses, backend_address) as backend,
            ):
                deadline = time.monotonic() + 120
                while len(health := await client.health(timeout=1.0)) < 2:
                    assert time.monotonic() < deadline
                victim = next(h for h in health if h.worker == "worker-1")
                requests = {f"async-{n}": client.request(f"async-{n}") for n in range(16)}
                backend.send([DetokenizeMsg(uid, (line[0],), False, Opening((), NO_EOS)) for uid in requests])
                for request in requests.values():
                    await anext(request)
                os.kill(victim.pid, signal.SIGKILL)
                backend.send([DetokenizeMsg(uid, (line[1],)) for uid in requests])
                lost = set()
                for uid, request in requests.items():
                    if route(uid, 2) == 1:
                        with pytest.raises(RequestLost):
                            await anext(request)
                        lost.add(uid)
                heard: Counter[object] = Counter()
                end = time.monotonic() + 3.0
                while (left := end - time.monotonic()) > 0:
                    got = await backend.receive(left)
                    heard.update(m.uid for m in got if isinstance(m, AbortBackendMsg))
                assert lost and heard == Counter(dict.fromkeys(lost, 1)), heard

        asyncio.run(asyncio_clients())
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0
    finally:
        stop_processes([process])
