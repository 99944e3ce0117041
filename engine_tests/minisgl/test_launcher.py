"""``python -m puredetok.engines.minisgl`` runs mini-sglang's own server (``launch_server``) with
puredetok's tokenizer process, as far as a machine without a GPU goes: mini-sglang parses its
arguments, its API server makes its sockets, and it spawns its processes; the tokenizer process is
puredetok's (its ready message, which ``launch_server`` logs, and its tokenizing of a chat on the
socket it binds); the scheduler process fails on its first CUDA call (``Engine``'s
``torch.cuda.set_device``), so the server waits for the scheduler's message for ever and its HTTP
server never starts: there the test ends it.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

from minisgl.core import SamplingParams
from minisgl.message import BaseBackendMsg, BaseTokenizerMsg, TokenizeMsg, UserMsg
from minisgl.utils import ZmqPullQueue, ZmqPushQueue
from minisgl_helpers import folder, tokenizer

from puredetok.engines._versions import installed


def _launch(*arguments: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "puredetok.engines.minisgl", "--model", str(folder("qwen3")), *arguments],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its processes are one group: ended together
    )


def _read_until(server: subprocess.Popen[bytes], wanted: list[str], timeout: float = 240) -> str:
    """The server's output until every string of ``wanted`` is in it."""
    assert server.stdout is not None
    output, deadline = b"", time.monotonic() + timeout
    while not all(text.encode() in output for text in wanted):
        assert time.monotonic() < deadline, output.decode(errors="replace")
        if select.select([server.stdout], [], [], 0.5)[0]:
            chunk = os.read(server.stdout.fileno(), 1 << 16)
            assert chunk, output.decode(errors="replace")  # the server ended
            output += chunk
    return output.decode(errors="replace")


def _end(server: subprocess.Popen[bytes]) -> None:
    os.killpg(server.pid, signal.SIGKILL)
    server.wait(30)
    for path in Path("/tmp").glob(f"minisgl_*.pid={server.pid}"):
        path.unlink()


def test_mini_sglangs_own_server_starts_puredetoks_tokenizer_process() -> None:
    # --num-tokenizer 0 (the default): one process tokenizes and detokenizes, on a socket it binds
    server = _launch("--port", str(21_000 + os.getpid() % 10_000))
    try:
        output = _read_until(
            server, [f"Tokenize server 0 is ready ({installed('puredetok')})", "torch.cuda.set_device"]
        )
        assert "Process minisgl-TP0-scheduler" in output and "Scheduler is ready" not in output
        assert "API server is ready" not in output
        # its socket, and the scheduler's (whose process has failed), named as mini-sglang names them
        suffix = f".pid={server.pid}"
        backend = ZmqPullQueue(f"ipc:///tmp/minisgl_0{suffix}", create=True, decoder=BaseBackendMsg.decoder)
        send = ZmqPushQueue(f"ipc:///tmp/minisgl_1{suffix}", create=False, encoder=BaseTokenizerMsg.encoder)
        chat = [{"role": "user", "content": "Say <|im_end|> please"}]
        send.put(TokenizeMsg(uid=7, text=chat, sampling_params=SamplingParams()))
        assert backend.socket.poll(60_000)
        message = backend.get()
        assert isinstance(message, UserMsg) and message.uid == 7
        end = tokenizer("qwen3").convert_tokens_to_ids("<|im_end|>")
        assert (
            message.input_ids.tolist().count(end) == 1
        )  # the user's <|im_end|> is text (mini-sglang's own: 2)
        for queue in (backend, send):
            queue.socket.close(linger=0)
            queue.context.term()
    finally:
        _end(server)
