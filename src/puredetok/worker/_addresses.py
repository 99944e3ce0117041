"""Where workers listen: private default paths (:func:`private_folder`), loopback decided by the
resolved address (:func:`loopback`), malformed addresses refused (:func:`check_address`), and an
address claimed by one live worker at a time (:func:`claim`).
"""

from __future__ import annotations

import errno
import fcntl
import ipaddress
import os
import socket
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from puredetok.errors import PuredetokError

Resolver = Callable[..., list[tuple[Any, Any, Any, Any, tuple[Any, ...]]]]
"""How a host name is resolved: :func:`socket.getaddrinfo` or the like."""


class AddressError(PuredetokError, OSError):
    """An address a worker may not or cannot bind (the message says why and what to do)."""


def private_folder() -> Path:
    """The folder of the default ``ipc://`` addresses: ``$XDG_RUNTIME_DIR/puredetok`` when that is
    set (a per-user folder the system keeps private), else ``puredetok-UID`` in the temporary
    folder. It is created with mode 0700; an existing one must be a real folder (not a link),
    owned by this user and closed to everyone else, or :class:`AddressError` is raised.
    """
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and Path(runtime).is_dir():
        folder = Path(runtime) / "puredetok"
    else:
        folder = Path(tempfile.gettempdir()) / f"puredetok-{os.getuid()}"
    try:
        folder.mkdir(mode=0o700)
    except FileExistsError:
        pass
    info = folder.lstat()
    if not stat.S_ISDIR(info.st_mode):
        raise AddressError(
            f"{folder} is not a folder (a link or a file is there): remove it, or give addresses"
        )
    if info.st_uid != os.getuid():
        raise AddressError(f"{folder} belongs to another user: give addresses in a folder of yours")
    if info.st_mode & 0o077:
        raise AddressError(
            f"{folder} is open to other users (mode {stat.S_IMODE(info.st_mode):o}): "
            "chmod 700 it, or give addresses"
        )
    return folder


def default_address(role: str) -> str:
    """The default ``ipc://`` address of ``role`` (``"worker-0"``, ``"backend"``, ``"frontend"``),
    in :func:`private_folder`; ``{index}`` in ``role`` is kept for the caller to fill in.
    """
    return f"ipc://{private_folder() / f'{role}.ipc'}"


def _host_port(address: str) -> tuple[str, str]:
    """The host (brackets removed) and the port of a ``tcp://host:port`` address."""
    rest = address[len("tcp://") :]
    if ";" in rest:  # ZeroMQ's "source;destination" form: what binds is the destination
        rest = rest.rsplit(";", 1)[1]
    host, _, port = rest.rpartition(":")
    if not host or not port:
        raise AddressError(f"{address!r} is malformed: a tcp:// address is tcp://HOST:PORT")
    return host.strip("[]"), port


TRANSPORTS = ("tcp", "ipc", "inproc", "pgm", "epgm", "vmci", "udp", "ws", "wss", "tipc", "norm")
"""The transports ZeroMQ names (``TRANSPORT://ENDPOINT``)."""


def check_address(address: str) -> None:
    """Raise :class:`AddressError` unless ``address`` is a well-formed ZeroMQ address:
    ``TRANSPORT://ENDPOINT`` with a known transport and an endpoint, and for ``tcp://`` a
    ``HOST:PORT`` whose port is ``*`` (any free port) or a number from 1 to 65535.
    """
    transport, separator, endpoint = address.partition("://")
    if not separator or not transport or not endpoint:
        raise AddressError(
            f"{address!r} is not an address: give TRANSPORT://ENDPOINT, for example "
            "ipc:///path/to/worker.ipc or tcp://127.0.0.1:5555"
        )
    if transport not in TRANSPORTS:
        raise AddressError(
            f"{address!r}: unknown transport {transport!r} (ZeroMQ's are {', '.join(TRANSPORTS)})"
        )
    if transport != "tcp":
        return
    _, port = _host_port(address)
    if port == "*":
        return
    if not (port.isascii() and port.isdigit()):
        raise AddressError(f"{address!r}: port {port!r} is not a number (a tcp:// port is 1-65535, or *)")
    if not 1 <= int(port) <= 65535:
        raise AddressError(f"{address!r}: port {port} is out of range (a tcp:// port is 1-65535, or *)")


def loopback(address: str, resolve: Resolver = socket.getaddrinfo) -> bool:
    """Whether ``address`` can only be reached from this machine: ``ipc://`` and ``inproc://``
    always; ``tcp://`` when its host resolves only to loopback addresses (all of them are checked;
    a name that does not resolve, a network interface's name other than ``lo``, ``*`` and
    ``0.0.0.0`` are not loopback); any other transport never. ``resolve`` resolves host names.
    """
    if address.startswith(("ipc://", "inproc://")):
        return True
    if not address.startswith("tcp://"):
        return False
    host, _ = _host_port(address)
    if host == "lo":
        return True
    if host == "*" or host in _interfaces():  # ZeroMQ binds an interface's name before a host's
        return False
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        pass
    else:
        return ip.is_loopback
    try:
        found = resolve(host, None, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError):
        return False
    ips = {ipaddress.ip_address(str(entry[4][0]).split("%", 1)[0]) for entry in found}
    return bool(ips) and all(ip.is_loopback for ip in ips)


def _interfaces() -> set[str]:
    try:
        return {name for _, name in socket.if_nameindex()}
    except OSError:
        return set()


def check_bind_address(address: str, *, allow_remote: bool = False) -> None:
    """Raise :class:`AddressError` unless a worker may bind ``address``: a loopback one, or any
    with ``allow_remote``; a malformed one (see :func:`check_address`) never.
    """
    check_address(address)
    if not allow_remote and not loopback(address):
        raise AddressError(
            f"{address} is reachable from other machines (or does not resolve to loopback addresses "
            "only) and the protocol has no authentication: bind ipc:// or tcp://127.0.0.1:PORT, or "
            "pass --allow-remote (allow_remote=True) to mean it"
        )


@attrs.define
class Claim:
    """An address held by this process: for ``ipc://``, a lock on ``PATH.lock`` beside the socket
    file, released by :meth:`release` or by the process's death (even by ``kill -9``).
    """

    address: str
    lock: int | None = None
    """The locked file's descriptor (None for addresses that need no lock)."""

    def release(self) -> None:
        """Let another worker take the address."""
        if self.lock is not None:
            os.close(self.lock)
            self.lock = None


def claim(address: str) -> Claim:
    """Claim ``address`` before binding it; raises :class:`AddressError` if a live process holds it.

    For ``ipc://PATH``: the lock on ``PATH.lock`` (a second worker fails here however close in
    time the two start), then a connection attempt on ``PATH`` (a process that is not a puredetok
    worker may be listening there: ZeroMQ would unlink its socket and take its place). A socket
    file nobody listens on any more is stale and left for ZeroMQ to replace. ``tcp://`` addresses
    need no claim: the system refuses a second listener on a port.
    """
    if not address.startswith("ipc://") or address.startswith("ipc://@"):  # @: Linux's abstract names
        return Claim(address)
    path = address[len("ipc://") :]
    if not path or path == "*":
        return Claim(address)
    lock = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(lock)
        raise AddressError(
            f"{address} is held by a live worker (locked {path}.lock): not taking it over"
        ) from None
    except OSError:
        os.close(lock)
        raise
    if _listening(path):
        os.close(lock)
        raise AddressError(f"{address}: a live process is listening on {path}: not taking it over")
    return Claim(address, lock)


def _listening(path: str) -> bool:
    """Whether something accepts connections on the Unix socket at ``path``."""
    if not os.path.exists(path):
        return False
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(path)
    except OSError as error:
        return error.errno not in (errno.ECONNREFUSED, errno.ENOENT, errno.ENOTSOCK)
    finally:
        probe.close()
    return True
