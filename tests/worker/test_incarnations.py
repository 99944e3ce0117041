"""A worker is its address; a restart is another Worker announcing itself there. Two unnamed
Workers in one process (both named ``worker-{pid}``), or two processes given one name, are two
workers, and a Worker that died and the one started after it on its address in the same process
(same pid) are a restart. Real Workers, real sockets, the real clients."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from puredetok.client import BackendClient, FrontendClient, Request, RequestLost
from puredetok.serving import load_tokenizer
from puredetok.serving._messages import AbortBackendMsg, DetokenizeMsg, Opening, ReadyMsg, UserMsg
from puredetok.worker import Incarnations, Worker, tokenize_worker
from puredetok.worker._routing import route
from zmq_harness import stop_processes

TEXT = "Two workers, one process: 推理 🦩 naïve."


class Crashed(RuntimeError):
    """What the test makes a worker's loop raise: an in-process worker dying."""


class InThread:
    """An unnamed worker (``tokenize_worker`` with no ``name``) serving in a thread of this process."""

    def __init__(self, listen: str, frontend: str, backend: str) -> None:
        self.ready: ReadyMsg | None = None
        self.worker: Worker | None = None
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self._up = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(listen, frontend, backend))
        self.thread.start()
        assert self._up.wait(120), "the worker did not start"
        self.announced()

    def _run(self, listen: str, frontend: str, backend: str) -> None:
        def on_ready(message: ReadyMsg) -> None:
            self.ready = message
            self._up.set()

        def on_start(worker: Worker) -> None:
            self.worker = worker

        try:
            tokenize_worker(
                listen=listen,
                frontend=frontend,
                backend=backend,
                stop_event=self.stop,
                on_ready=on_ready,
                on_start=on_start,
            )
        except Crashed as error:
            self.error = error
        finally:
            self._up.set()

    def announced(self) -> ReadyMsg:
        """The ReadyMsg it sent (it started)."""
        assert self.ready is not None, f"the worker did not start: {self.error!r}"
        return self.ready

    def crash(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Make its loop raise, as a bug would: ``serve`` closes the sockets and hands nothing back."""
        assert self.worker is not None

        def crashing(collector: object) -> None:
            raise Crashed("the worker's loop raised")

        monkeypatch.setattr(self.worker, "_loop", crashing)
        self.thread.join(60)
        assert not self.thread.is_alive() and isinstance(self.error, Crashed)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(60)


def uid_of(worker: int, tag: str) -> str:
    """A uid that worker ``worker`` of two owns."""
    return next(f"{tag}-{n}" for n in range(100) if route(f"{tag}-{n}", 2) == worker)


def opened(scheduler: BackendClient, uid: str, ids: list[int]) -> list[int]:
    """Play the scheduler for a tokenized request: open it with ``ids[:2]``; its prompt."""
    deadline = time.monotonic() + 60
    while True:
        users = [m for m in scheduler.receive(1.0) if isinstance(m, UserMsg) and m.uid == uid]
        if users:
            break
        assert time.monotonic() < deadline, f"{uid} never reached the scheduler"
    [user] = users
    scheduler.send([DetokenizeMsg(uid, tuple(ids[:2]), False, Opening(tuple(user.input_ids), user.params))])
    return list(user.input_ids)


@pytest.fixture
def places(tmp_path: Path) -> Iterator[tuple[list[str], str, str]]:
    """Two worker addresses, a frontend and a backend, in a private folder."""
    yield [f"ipc://{tmp_path}/w0", f"ipc://{tmp_path}/w1"], f"ipc://{tmp_path}/f", f"ipc://{tmp_path}/b"


def test_two_unnamed_workers_in_one_process_are_two_workers_and_a_crash_of_one_is_a_restart(
    places: tuple[list[str], str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both Workers are named ``worker-{pid}``: ``Incarnations`` took the second for a restart of
    the first (its frontend would fail the requests sent to it), ``health`` counted one answer
    for the two, and the client, which compared pids, missed the crash of one and the start of
    the next on its address (its request waited for its timeout instead of failing at once)."""
    addresses, frontend, backend = places
    ids = list(load_tokenizer().encode(TEXT, add_special_tokens=False))
    mine, theirs = uid_of(0, "a"), uid_of(1, "b")
    incarnations = Incarnations()
    workers: list[InThread] = []
    with (
        FrontendClient(addresses, frontend, timeout=30) as api,
        BackendClient(addresses, backend) as scheduler,
    ):
        try:
            workers.append(InThread(addresses[0], frontend, backend))
            assert not incarnations.restarted(workers[0].announced())
            first = api.tokenize(mine, "Hello")
            opened(scheduler, mine, ids)
            said = {mine: next(first).incremental_output}
            second = api.tokenize(theirs, "Hello")  # waits in the queue for its worker's start
            workers.append(InThread(addresses[1], frontend, backend))
            a, b = (worker.announced() for worker in workers)
            assert a.worker == b.worker == f"worker-{os.getpid()}" and a.pid == b.pid
            assert a.address != b.address and a.instance != b.instance
            assert not incarnations.restarted(b)  # another worker, not a restart of the first
            opened(scheduler, theirs, ids)
            said[theirs] = next(second).incremental_output
            scheduler.send([DetokenizeMsg(mine, tuple(ids[2:4]))])
            said[mine] += next(first).incremental_output  # not failed by the second's start
            replies = api.health(timeout=10.0)
            assert sorted(reply.address for reply in replies) == addresses
            assert {reply.instance for reply in replies} == {a.instance, b.instance}

            workers[0].crash(monkeypatch)  # dies holding `mine`: lost
            monkeypatch.undo()
            workers.append(InThread(addresses[0], frontend, backend))
            again = workers[2].announced()
            assert (again.worker, again.pid, again.address) == (a.worker, a.pid, a.address)
            assert incarnations.restarted(again)
            started = time.monotonic()
            with pytest.raises(RequestLost, match="restarted"):
                next(first)
            assert time.monotonic() - started < 10  # at once, not at the 30 s timeout
            aborts = [m for m in scheduler.receive(10.0) if isinstance(m, AbortBackendMsg)]
            assert [m.uid for m in aborts] == [mine]  # the scheduler stops generating it, only it

            scheduler.send([DetokenizeMsg(theirs, tuple(ids[2:]), True)])
            said[theirs] += second.text()  # the other worker's request goes on, exactly
            assert said[theirs] == load_tokenizer().decode(ids)
        finally:
            for worker in workers:
                worker.close()


def serve(address: str, frontend: str, backend: str, log: Path) -> subprocess.Popen[bytes]:
    """``puredetok serve`` on ``address`` with the default ``--index`` 0: named ``worker-0``."""
    command = [sys.executable, "-m", "puredetok.cli", "serve", "--quiet", "--listen", address]
    command += ["--frontend", frontend, "--backend", backend]
    with log.open("wb") as output:
        return subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, env={**os.environ})


def test_two_worker_processes_given_one_name_are_two_workers(
    places: tuple[list[str], str, str], tmp_path: Path
) -> None:
    """Two ``puredetok serve`` processes on two addresses, both ``worker-0`` (neither was given
    ``--index``): the client took the second's ReadyMsg for a restart of the first, as their pids
    differ, and failed the request already sent to the second; ``health`` counted one answer."""
    addresses, frontend, backend = places
    ids = list(load_tokenizer().encode(TEXT, add_special_tokens=False))
    theirs = uid_of(1, "b")
    processes: list[subprocess.Popen[bytes]] = []
    with (
        FrontendClient(addresses, frontend, timeout=60) as api,
        BackendClient(addresses, backend) as scheduler,
    ):
        try:
            processes.append(serve(addresses[0], frontend, backend, tmp_path / "serve-0.log"))
            deadline = time.monotonic() + 120
            while not api.health(timeout=1.0):
                assert time.monotonic() < deadline, "the first worker did not start"
            request = api.tokenize(theirs, "Hello")  # waits in the queue for its worker's start
            processes.append(serve(addresses[1], frontend, backend, tmp_path / "serve-1.log"))
            opened(scheduler, theirs, ids)
            scheduler.send([DetokenizeMsg(theirs, tuple(ids[2:]), True)])
            assert request.text() == load_tokenizer().decode(ids)
            replies = api.health(timeout=10.0)
            assert sorted(reply.address for reply in replies) == addresses
            assert {reply.worker for reply in replies} == {"worker-0"}
            assert {reply.pid for reply in replies} == {process.pid for process in processes}
        finally:
            stop_processes(processes)


def test_incarnations_tells_workers_by_address_and_a_restart_by_instance() -> None:
    """Names and pids are labels: two workers may share them (two unnamed Workers of one process,
    two processes given one name), and a restart in the same process keeps the pid."""
    incarnations = Incarnations()
    assert not incarnations.restarted(ReadyMsg("worker-7", 7, "ipc:///w0", instance="a"))
    assert not incarnations.restarted(ReadyMsg("worker-7", 7, "ipc:///w1", instance="b"))
    assert not incarnations.restarted(ReadyMsg("worker-7", 7, "ipc:///w0", instance="a"))  # said again
    assert incarnations.restarted(ReadyMsg("worker-7", 7, "ipc:///w0", instance="c"))
    assert incarnations.restarted(ReadyMsg("other", 8, "ipc:///w1", instance="d"))
    assert not incarnations.restarted(ReadyMsg("worker-7", 7, "ipc:///w1", instance="d"))


def test_a_sender_that_keeps_sending_through_an_in_process_restart_sees_each_request_end(
    places: tuple[list[str], str, str],
) -> None:
    """The limit of a stop (docs/worker.md): a tokenize that reaches a stopping worker after its
    drain has ended is never read (one to four per stop with a tokenize every 2 ms), and its
    request can only be failed. Three times a worker of this process stops and the next starts on
    its address at once while the API server sends a tokenize every 2 ms: every request ends,
    with its exact text or as lost when the next worker announces itself (as is every request
    tokenized there and not answered yet, those sent while no worker listened included); none
    waits for its timeout (the client missed such a restart: the same pid)."""
    addresses, frontend, backend = places
    address = addresses[0]
    tokenizer = load_tokenizer()
    ids = list(tokenizer.encode("fine 🦩", add_special_tokens=False))
    workers = [InThread(address, frontend, backend)]

    def cycle() -> None:
        for _ in range(3):
            time.sleep(0.5)
            workers[-1].close()
            workers.append(InThread(address, frontend, backend))

    cycling = threading.Thread(target=cycle)
    with (
        FrontendClient([address], frontend, timeout=20) as api,
        BackendClient([address], backend) as scheduler,
    ):
        try:
            requests: list[Request] = []
            cycling.start()
            quiet_since = time.monotonic()
            while cycling.is_alive() or time.monotonic() - quiet_since < 3.0:
                if cycling.is_alive():
                    requests.append(api.tokenize(f"r{len(requests)}", "Hello"))
                users = [m for m in scheduler.receive(0.002) if isinstance(m, UserMsg)]
                if users:
                    quiet_since = time.monotonic()
                scheduler.send(
                    [
                        DetokenizeMsg(m.uid, tuple(ids), True, Opening(tuple(m.input_ids), m.params))
                        for m in users
                    ]
                )
                api.poll(0)
            lost = 0
            for request in requests:
                try:
                    assert request.text() == tokenizer.decode(ids)
                except RequestLost:
                    lost += 1
            assert len(requests) > 500 and lost < len(requests)  # none timed out; most were served
            print(f"\n{len(requests)} requests through 3 in-process restarts: {lost} lost, the rest exact")
        finally:
            cycling.join(120)
            for worker in workers:
                worker.close()
