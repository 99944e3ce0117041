"""Default addresses private to the user, no silent takeover of a live worker's address (ipc:// and
tcp://), loopback decided by the resolved address, and a non-loopback bind only with an explicit
flag."""

from __future__ import annotations

import os
import re
import signal
import socket
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq

from helpers import tokenizer
from puredetok.serving._messages import HealthCheckMsg, HealthReply, ReadyMsg
from puredetok.worker._addresses import (
    AddressError,
    check_address,
    claim,
    default_address,
    loopback,
    private_folder,
)
from puredetok.worker._routing import WorkerPool
from puredetok.worker._worker import Worker
from zmq_harness import Harness, free_port


def serve(
    *arguments: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "puredetok.cli", "serve", "--quiet", *arguments]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)


def resolver(*ips: str) -> Any:
    """A resolver that answers ``ips`` for any name (what a DNS server could answer)."""

    def resolve(
        host: str, port: object, **options: object
    ) -> list[tuple[Any, Any, Any, Any, tuple[Any, ...]]]:
        return [(socket.AF_INET6 if ":" in ip else socket.AF_INET, 0, 0, "", (ip, 0)) for ip in ips]

    return resolve


def test_loopback_is_decided_by_every_resolved_address_never_by_the_name() -> None:
    evil = "tcp://127.evil.example.com:5555"
    assert not loopback(evil)  # does not resolve here: not loopback
    assert not loopback(evil, resolver("93.184.216.34"))
    assert not loopback(evil, resolver("127.0.0.1", "93.184.216.34"))  # one non-loopback is enough
    assert loopback(evil, resolver("127.0.0.1", "::1"))
    assert loopback("tcp://localhost:5555") and loopback("tcp://127.0.0.1:1") and loopback("tcp://[::1]:1")
    for remote in (
        "tcp://0.0.0.0:1",
        "tcp://*:1",
        "tcp://10.0.0.1:1",
        "tcp://[::]:1",
        "pgm://eth0;239.1.1.1:5",
    ):
        assert not loopback(remote), remote
    assert all(not loopback(f"tcp://{name}:1") for _, name in socket.if_nameindex() if name != "lo")
    assert loopback("ipc:///anywhere") and loopback("inproc://x")


def test_default_addresses_live_in_a_folder_private_to_the_user(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    address = default_address("worker-0")
    folder = tmp_path / "puredetok"
    assert address == f"ipc://{folder}/worker-0.ipc"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700 and folder.stat().st_uid == os.getuid()
    folder.chmod(0o755)
    with pytest.raises(AddressError, match="open to other users"):
        private_folder()
    folder.rmdir()
    folder.symlink_to(tmp_path)
    with pytest.raises(AddressError, match="not a folder"):
        private_folder()
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    assert private_folder().name == f"puredetok-{os.getuid()}"


def test_serve_uses_the_private_defaults(tmp_path: Path) -> None:
    env = {**os.environ, "XDG_RUNTIME_DIR": str(tmp_path)}
    process = subprocess.Popen(
        [sys.executable, "-m", "puredetok.cli", "serve", "--quiet"],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.endswith(f"on ipc://{tmp_path}/puredetok/worker-0.ipc\n"), line
        assert stat.S_IMODE((tmp_path / "puredetok").stat().st_mode) == 0o700
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0


@pytest.fixture(params=[False, True], ids=["ipc", "tcp"])
def live(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    h = Harness(tmp_path, tcp=request.param)
    h.start(1)
    h.wait_ready(1)
    yield h
    h.close()


def test_a_second_worker_never_takes_over_a_live_workers_address(live: Harness) -> None:
    """A second ``serve`` on the same ipc address started without error and silently took the
    address over (ZeroMQ unlinks the live socket file and binds anew)."""
    address = live.worker_address(0)
    second = serve(
        "--listen", address, "--backend", live.backend_address, "--frontend", live.frontend_address
    )
    assert second.returncode == 2, second.stderr
    assert "Traceback" not in second.stderr and address in second.stderr
    assert "held by a live worker" in second.stderr or "in use" in second.stderr, second.stderr
    pool = live.pool([0])
    pool.send([HealthCheckMsg(5)])  # the live worker still has its address, and answers
    [health] = live.receive(live.frontend, lambda got: any(isinstance(m, HealthReply) for m in got))
    assert isinstance(health, HealthReply) and health.probe == 5


def test_a_foreign_listener_is_not_taken_over_and_a_stale_socket_file_is(tmp_path: Path) -> None:
    path = tmp_path / "worker.ipc"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen()
    try:
        with pytest.raises(AddressError, match="a live process is listening"):
            claim(f"ipc://{path}")
    finally:
        listener.close()
    assert path.exists()  # a socket file nobody listens on any more: stale, free to take
    held = claim(f"ipc://{path}")
    with pytest.raises(AddressError, match="held by a live worker"):
        claim(f"ipc://{path}")
    held.release()
    claim(f"ipc://{path}").release()


def test_a_worker_that_cannot_bind_leaves_no_socket_open(tmp_path: Path) -> None:
    """Its sockets to the frontend and backend, made before the bind failed, are closed with the
    error: the context it was given terminates at once, while the error (and the half-made worker
    its traceback holds) is still kept, as a supervisor that logs and retries keeps it."""
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen()
    context: zmq.Context[Any] = zmq.Context()
    try:
        address = f"tcp://127.0.0.1:{held.getsockname()[1]}"
        with pytest.raises(OSError, match="cannot bind") as kept:
            Worker(
                listen=address, backend=f"ipc://{tmp_path}/b", frontend=f"ipc://{tmp_path}/f", context=context
            )
        terminating = threading.Thread(target=context.term, daemon=True)
        terminating.start()
        terminating.join(10)
        assert not terminating.is_alive(), "a socket of the failed worker is still open"
        assert kept.value is not None
    finally:
        held.close()


def taken(address: str) -> bool:
    """Whether something still listens on ``address`` (plain sockets, closed synchronously)."""
    if address.startswith("ipc://"):
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(address[len("ipc://") :])
        except (ConnectionRefusedError, FileNotFoundError):
            return False
        finally:
            probe.close()
        return True
    host, port = address[len("tcp://") :].rsplit(":", 1)
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as ZeroMQ binds
        try:
            probe.bind((host, int(port)))
        except OSError:
            return True
    return False


@pytest.mark.parametrize("kind", ["ipc", "tcp"])
def test_a_closed_worker_leaves_its_address_free_at_once_in_the_same_process(
    kind: str, tmp_path: Path
) -> None:
    """When ``close()`` returns nothing listens on the address: another worker of this process
    binds it at once, 10 times, and the last one serves. ZeroMQ's I/O thread closes a listening
    socket after the socket's close has returned, so ``close()`` returned while it still
    listened: an ``ipc://`` path still took connections (the next worker's claim then refused the
    address as held by a live process: 2 of 50 in-process rebinds) and a ``tcp://`` port was
    still in use (a bind at once: ``EADDRINUSE``)."""
    qwen = tokenizer("qwen3")
    address = f"ipc://{tmp_path}/w" if kind == "ipc" else f"tcp://127.0.0.1:{free_port()}"
    h = Harness(tmp_path)
    pool = WorkerPool([address], context=h.context)
    try:
        for _ in range(10):
            worker = Worker(
                qwen,
                listen=address,
                backend=h.backend_address,
                frontend=h.frontend_address,
                context=h.context,
            )
            worker.close()
            assert not taken(address)
        worker = Worker(
            qwen, listen=address, backend=h.backend_address, frontend=h.frontend_address, context=h.context
        )
        thread = threading.Thread(target=worker.serve)
        thread.start()
        try:
            # Sent once it is ready, not before: one sent in the instant after a close can go down
            # the connection the pool has not yet seen close, and be lost (docs/worker.md).
            h.receive(h.frontend, lambda got: any(isinstance(m, ReadyMsg) for m in got))
            pool.send([HealthCheckMsg(7)])
            replies = h.receive(h.frontend, lambda got: any(isinstance(m, HealthReply) for m in got))
            [health] = [m for m in replies if isinstance(m, HealthReply)]
            assert health.probe == 7 and health.address == address
        finally:
            worker.stop()
            thread.join(60)
        assert not taken(address)
    finally:
        pool.close()
        h.close()


@pytest.mark.parametrize("host", ["0.0.0.0", "127.evil.example.com", "*"])
def test_a_non_loopback_bind_needs_allow_remote(host: str, tmp_path: Path) -> None:
    listen = f"tcp://{host}:{free_port()}"
    refused = serve(
        "--listen", listen, "--backend", f"ipc://{tmp_path}/b", "--frontend", f"ipc://{tmp_path}/f"
    )
    assert (
        refused.returncode == 2 and "--allow-remote" in refused.stderr and "Traceback" not in refused.stderr
    )
    with pytest.raises(AddressError, match="allow_remote"):
        Worker(listen=listen, backend=f"ipc://{tmp_path}/b", frontend=f"ipc://{tmp_path}/f")


def test_allow_remote_binds_another_interface(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    try:
        port = free_port()
        h.start(1, "--allow-remote", "--listen", f"tcp://0.0.0.0:{port}")
        [ready] = h.wait_ready(1)
        assert ready.address == f"tcp://0.0.0.0:{port}"
    finally:
        h.close()


@pytest.mark.parametrize(
    ("option", "address", "says"),
    [
        ("--listen", "tcp://127.0.0.1:99999", "port 99999 is out of range"),
        ("--listen", "tcp://127.0.0.1:0", "port 0 is out of range"),
        ("--listen", "tcp://127.0.0.1:http", "port 'http' is not a number"),
        ("--listen", "tcp://127.0.0.1", "malformed: a tcp:// address is tcp://HOST:PORT"),
        ("--listen", "foo", "'foo' is not an address"),
        ("--listen", "udq://x", "unknown transport 'udq'"),
        ("--backend", "tcp://127.0.0.1:70000", "port 70000 is out of range"),
        ("--frontend", "bar", "'bar' is not an address"),
    ],
)
def test_serve_refuses_malformed_addresses_and_out_of_range_ports(
    option: str, address: str, says: str, tmp_path: Path
) -> None:
    """``--listen tcp://127.0.0.1:99999`` printed ready and listened on another port, and
    ``--listen foo`` was refused as "reachable from other machines". Each is refused for what it
    is, exit code 2, with or without --allow-remote."""
    addresses = {
        "--listen": f"ipc://{tmp_path}/w",
        "--backend": f"ipc://{tmp_path}/b",
        "--frontend": f"ipc://{tmp_path}/f",
        option: address,
    }
    for extra in ([], ["--allow-remote"]):
        refused = serve(*[item for pair in addresses.items() for item in pair], *extra, timeout=60)
        assert refused.returncode == 2, refused
        assert refused.stdout == "" and "Traceback" not in refused.stderr
        [line] = refused.stderr.splitlines()
        assert says in line and "other machines" not in line, line
    with pytest.raises(AddressError, match=re.escape(says)):
        check_address(address)


def test_well_formed_addresses_pass_the_check() -> None:
    for address in (
        "tcp://127.0.0.1:1",
        "tcp://[::1]:65535",
        "tcp://localhost:*",
        "ipc:///x/y",
        "inproc://z",
    ):
        check_address(address)
