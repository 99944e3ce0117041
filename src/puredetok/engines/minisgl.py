"""puredetok as mini-sglang's tokenizer process, in mini-sglang's own server, with no change to it.

mini-sglang (sgl-project/mini-sglang, not on the package index) runs its tokenizer and
detokenizer as processes of ``minisgl.tokenizer.tokenize_worker``, started by
``minisgl.server.launch.launch_server``, which looks the function up when it starts them.
:func:`tokenize_worker` here has the same signature and speaks the same messages on the same
sockets, with mini-sglang's own classes (``minisgl.message``, ``minisgl.utils.ZmqPushQueue``,
``ZmqPullQueue``), over puredetok's :class:`~puredetok.serving._tokenize_manager.TokenizeManager`
and :class:`~puredetok.serving._detokenize_manager.DetokenizeManager`; :class:`MiniSglTokenizer`
is the work of one batch of messages, with no sockets.

``python -m puredetok.engines.minisgl <mini-sglang's own arguments>`` runs mini-sglang's own server
(``launch_server``) with :func:`install` done first: the API server, the schedulers and everything
else are mini-sglang's; its tokenizer processes are this module's.

What a request gets (see docs/engines/minisgl.md):

* its text is ``tokenizer.decode`` of its generated ids, the finishing EOS left out, with the
  decode options mini-sglang uses (its own offline ``LLM.generate`` returns exactly that text):
  special tokens kept, the tokenizer's own space cleanup, no prompt before the ids (:data:`PARAMS`);
  the text held back (the first bytes of a character, a byte run) is sent when the request finishes;
* a chat's text is data (``<|im_end|>`` written by a user is those characters), and a chat prompt
  is encoded without the tokenizer's special tokens added again;
* a request's state is dropped when it finishes or is aborted; an abort goes on to the scheduler;
* a bad input costs its own request at most: an undecodable frame is dropped and logged, a message
  of the wrong shape or an invalid id is logged and skipped, a prompt that cannot be tokenized
  ends its request with an empty text (logged).
"""

from __future__ import annotations

__all__ = [
    "PARAMS",
    "MiniSglTokenizer",
    "tokenize_worker",
    "install",
    "launch",
    "ready_message",
]

import logging
import sys
from collections.abc import Sequence
from itertools import repeat
from multiprocessing.queues import Queue
from typing import Any

from puredetok._options import MAX_INT
from puredetok.engines._versions import installed
from puredetok.serving._detokenize_manager import DEFAULT_MAX_LIVE, DetokenizeManager
from puredetok.serving._messages import DetokenizeBatch, DetokenizeMsg, Opening, SamplingParams, TokenizeMsg
from puredetok.serving._tokenize_manager import TokenizeError, TokenizeManager

_logger = logging.getLogger(__name__)

PARAMS = SamplingParams(skip_special_tokens=False, ignore_eos=True)
"""How mini-sglang's requests are decoded: ``tokenizer.decode(ids)`` with its default options (special
tokens kept, the tokenizer's own cleanup), and the end decided by the scheduler alone (no EOS, stop
string or length rule on this side)."""


def ready_message(tokenizer_id: int) -> str:
    """What a worker puts on ``ack_queue`` when it is ready (``launch_server`` logs it)."""
    return f"Tokenize server {tokenizer_id} is ready ({installed('puredetok')})"


class MiniSglTokenizer:
    """The work of mini-sglang's tokenizer process on one batch of its messages, without sockets.

    :meth:`handle` takes mini-sglang's ``TokenizeMsg``, ``DetokenizeMsg`` and ``AbortMsg`` records
    in the order they arrived and returns mini-sglang's records to send: ``UserReply`` to the API
    server, ``UserMsg`` and ``AbortBackendMsg`` to the scheduler. A request opens with its first
    ``DetokenizeMsg`` (the detokenizer never sees the prompt when mini-sglang runs separate
    tokenizer processes); a message for a request that has ended (a token the scheduler sent after
    the end, or after an abort) changes nothing and is not answered.

    At most ``max_live`` requests are held. With separate tokenizer processes
    (``--num-tokenizer`` > 0) an abort reaches a tokenizer process, not the detokenizer, and the
    scheduler then stops sending: past ``max_live``, the requests that have had no message for the
    longest are dropped, a sixteenth of ``max_live`` more than needed (a running request has a
    message every step), each ended at the API server and the scheduler in case it was running.
    """

    def __init__(self, tokenizer: Any, *, max_live: int = DEFAULT_MAX_LIVE) -> None:
        self.tokenizer = tokenizer
        self.eos_token_id = tokenizer.eos_token_id
        """The id whose finishing message adds no text (mini-sglang's ``tokenizer.eos_token_id``)."""
        self.tokenize_manager = TokenizeManager(tokenizer)
        _warm_up(self.tokenize_manager)
        self.detokenize_manager = DetokenizeManager(tokenizer, out_of_vocab="ignore", max_live=max_live)
        self.max_live = max_live
        """The most requests held at once (see the class)."""
        codec = self.detokenize_manager.codec_of(PARAMS)  # built now: no request waits for it
        if not codec.exact:
            _logger.warning(
                "puredetok: no exact model of this tokenizer (%s): its generic fallback decodes (the text "
                "is still decode's, streamed later)",
                codec.reason,
            )
        self._last: dict[Any, int] = {}
        """The live requests, each with the number of the batch of its last message."""
        self._batches = 0

    def handle(self, messages: Sequence[Any]) -> tuple[list[Any], list[Any]]:
        """The messages to send for ``messages``: ``(to the API server, to the scheduler)``.

        Runs of one kind are handled together, in order (an abort after a request's message applies
        after it).
        """
        from minisgl.message import AbortMsg, DetokenizeMsg, TokenizeMsg

        handlers = {DetokenizeMsg: self._detokenize, TokenizeMsg: self._tokenize, AbortMsg: self._abort}
        frontend: list[Any] = []
        backend: list[Any] = []
        kinds = list(map(type, messages))
        start = 0
        while start < len(messages):
            kind = kinds[start]
            # a batch of one kind (the usual) is one run, found without a loop over it
            end = len(kinds) if not start and kinds.count(kind) == len(kinds) else start + 1
            while end < len(messages) and kinds[end] is kind:
                end += 1
            handler = handlers.get(kind)
            if handler is None:
                _logger.error(
                    "puredetok: %d message(s) of type %s dropped: not a tokenizer message", end - start, kind
                )
            else:
                handler(messages[start:end], frontend, backend)
            start = end
        return frontend, backend

    def _detokenize(self, messages: Sequence[Any], frontend: list[Any], backend: list[Any]) -> None:
        from minisgl.message import UserReply

        self._batches += 1
        uids = [message.uid for message in messages]
        tokens = [message.next_token for message in messages]
        finished = [message.finished for message in messages]
        last = self._last
        # The decode step: one id for each of many live requests, none ending (checked in C loops).
        if (
            True not in finished
            and set(map(type, uids)) <= _UID_TYPES
            and set(map(type, tokens)) == {int}
            and set(map(type, finished)) == {bool}
            and all(map(last.__contains__, uids))
            and len(set(uids)) == len(uids)
        ):
            replies = self.detokenize_manager.handle_batch(DetokenizeBatch(tuple(uids), tuple(tokens)))
            for position, error in replies.errors:
                _logger.warning("puredetok: request %r: %s", uids[position], error)
            last.update(zip(uids, repeat(self._batches)))
            frontend += map(UserReply, uids, replies.outputs, repeat(False))
            return
        self._detokenize_each(messages, frontend, backend)

    def _detokenize_each(self, messages: Sequence[Any], frontend: list[Any], backend: list[Any]) -> None:
        """:meth:`_detokenize` of a batch that opens, ends or repeats requests, or holds a bad message."""
        from minisgl.message import UserReply

        manager = self.detokenize_manager
        last = self._last
        ours: list[DetokenizeMsg] = []
        opened: set[Any] = set()
        ended: set[Any] = set()
        for message in messages:
            uid, token, finished = message.uid, message.next_token, message.finished
            if type(uid) not in _UID_TYPES or type(finished) is not bool:
                _logger.error("puredetok: a DetokenizeMsg with uid %r, finished %r dropped", uid, finished)
                continue
            if uid in ended or uid not in opened and uid not in last and manager.known(uid):
                continue  # its request has ended: nothing to say
            opening = None
            if uid not in opened and uid not in last:
                opening = Opening(params=PARAMS)
                opened.add(uid)
            ids: tuple[int, ...] = (token,)
            if type(token) is not int or not 0 <= token <= MAX_INT:
                _logger.error("puredetok: request %r: token %r is not an id: skipped", uid, token)
                ids = ()
            if finished:
                ended.add(uid)
                last.pop(uid, None)
                eos = ids == (self.eos_token_id,)
                ours.append(
                    DetokenizeMsg(uid, ids, True, opening, "stop" if eos else None, token if eos else None)
                )
            else:
                last[uid] = self._batches
                ours.append(DetokenizeMsg(uid, ids, False, opening))
        self._make_room(opened, frontend, backend)
        for message, reply in zip(ours, manager.handle(ours)):
            if reply.error is not None:
                _logger.warning("puredetok: request %r: %s", message.uid, reply.error)
            if reply.finished and not message.finished:  # refused: it has ended here
                backend.append(_abort_backend(message.uid))
                last.pop(message.uid, None)
            frontend.append(UserReply(message.uid, reply.incremental_output, reply.finished))

    def _make_room(self, opening: set[Any], frontend: list[Any], backend: list[Any]) -> None:
        """Drop the requests quiet for longest so that those ``opening`` fit in :attr:`max_live`
        (and a sixteenth more, so that room is not looked for at every opening).
        """
        from minisgl.message import UserReply

        manager = self.detokenize_manager
        over = len(manager) + len(opening) - self.max_live
        if over <= 0:
            return
        quiet = [uid for uid in self._last if uid not in opening]
        quiet.sort(key=self._last.__getitem__)
        dropped = quiet[: over + self.max_live // 16]
        manager.abort(dropped)
        for uid in dropped:
            del self._last[uid]
        _logger.warning(
            "puredetok: %d request(s) dropped for room (%d held, the most: their aborts never reached "
            "this detokenizer, or they have had no token for longest): %s",
            len(dropped),
            self.max_live,
            ", ".join(map(repr, dropped[:8])) + (" ..." if len(dropped) > 8 else ""),
        )
        frontend += [UserReply(uid, "", True) for uid in dropped]
        backend += map(_abort_backend, dropped)

    def _tokenize(self, messages: Sequence[Any], frontend: list[Any], backend: list[Any]) -> None:
        from minisgl.message import UserMsg

        ours: list[TokenizeMsg] = []
        asked: list[Any] = []
        for message in messages:
            text = message.text
            try:
                if isinstance(text, str):
                    ours.append(TokenizeMsg(message.uid, text=text))
                elif isinstance(text, list):
                    ours.append(TokenizeMsg(message.uid, messages=text))
                else:
                    raise ValueError(
                        f"text must be a string or a list of chat messages, not {type(text).__name__}"
                    )
            except ValueError as error:
                self._refuse(message.uid, str(error), frontend)
                continue
            asked.append(message)
        for message, result in zip(asked, self.tokenize_manager.tokenize(ours)):
            if result.input_ids is None or not len(result.input_ids):
                self._refuse(message.uid, result.error or "the prompt has no token ids", frontend)
                continue
            ids = _int32_tensor(result.input_ids)
            backend.append(UserMsg(uid=message.uid, input_ids=ids, sampling_params=message.sampling_params))

    def _refuse(self, uid: Any, error: str, frontend: list[Any]) -> None:
        """End a request that cannot be tokenized: an empty, finished reply (mini-sglang's replies
        carry no error: the log says why).
        """
        from minisgl.message import UserReply

        _logger.warning("puredetok: request %r not tokenized: %s", uid, error)
        frontend.append(UserReply(uid=uid, incremental_output="", finished=True))

    def _abort(self, messages: Sequence[Any], frontend: list[Any], backend: list[Any]) -> None:
        uids = [message.uid for message in messages]
        good = [uid for uid in uids if type(uid) in _UID_TYPES]
        if len(good) < len(uids):
            _logger.error("puredetok: an AbortMsg with a uid that is not an int or a string dropped")
        self.detokenize_manager.abort(good)  # remembered as ended: a late token opens nothing
        for uid in good:
            self._last.pop(uid, None)
        backend.extend(_abort_backend(uid) for uid in good)


_UID_TYPES = {int, str}
"""The types of a request's uid (mini-sglang's API server counts ints)."""


def _warm_up(manager: TokenizeManager) -> None:
    """Tokenize a chat that holds an added token's text (plain text without a chat template), so
    that the template is compiled and the encoders that keep a chat's text as data are built (some
    seconds for a large vocabulary) before a request needs them.
    """
    try:
        marker = next(iter(manager.content_as_data().controls), "")
    except TokenizeError:
        marker = ""
    if getattr(manager.tokenizer, "chat_template", None):
        manager.tokenize([TokenizeMsg(0, messages=[{"role": "user", "content": f"warm up {marker}"}])])
    else:
        manager.tokenize([TokenizeMsg(0, text="warm up")])


def _abort_backend(uid: Any) -> Any:
    from minisgl.message import AbortBackendMsg

    return AbortBackendMsg(uid=uid)


def _int32_tensor(ids: Any) -> Any:
    """A prompt's ids (``array('i')``) as the CPU int32 tensor of mini-sglang's ``UserMsg``."""
    import torch

    return torch.frombuffer(bytearray(ids), dtype=torch.int32)


def tokenize_worker(
    *,
    tokenizer_path: str,
    addr: str,
    create: bool,
    backend_addr: str,
    frontend_addr: str,
    local_bs: int,
    tokenizer_id: int = -1,
    model_source: str = "huggingface",
    ack_queue: Queue[str] | None = None,
) -> None:
    """mini-sglang's ``tokenize_worker``, on puredetok: the same arguments, sockets and messages.

    PULLs mini-sglang's tokenizer messages on ``addr`` (binding it if ``create``), PUSHes
    ``UserMsg`` and ``AbortBackendMsg`` to ``backend_addr`` and ``UserReply`` to ``frontend_addr``;
    the tokenizer is mini-sglang's ``load_tokenizer(tokenizer_path)`` (``model_source`` is unused,
    as in mini-sglang). Each turn reads one frame, and more while fewer than ``local_bs`` messages
    have been read and more are waiting; handles them (:class:`MiniSglTokenizer`); sends one frame
    per peer. Puts :func:`ready_message` on ``ack_queue`` when ready. Runs until interrupted.
    """
    from minisgl.message import (
        BaseBackendMsg,
        BaseFrontendMsg,
        BatchBackendMsg,
        BatchFrontendMsg,
        BatchTokenizerMsg,
    )
    from minisgl.utils import ZmqPullQueue, ZmqPushQueue, init_logger, load_tokenizer

    if type(local_bs) is not int or local_bs < 1:
        raise ValueError(f"local_bs must be an int >= 1, not {local_bs!r}")
    send_backend: Any = ZmqPushQueue(backend_addr, create=False, encoder=BaseBackendMsg.encoder)
    send_frontend: Any = ZmqPushQueue(frontend_addr, create=False, encoder=BaseFrontendMsg.encoder)
    receive: Any = ZmqPullQueue(addr, create=create, decoder=BatchTokenizerMsg.decoder)
    init_logger(__name__, f"tokenizer_{tokenizer_id}")
    worker = MiniSglTokenizer(load_tokenizer(tokenizer_path))
    if ack_queue is not None:
        ack_queue.put(ready_message(tokenizer_id))

    def read() -> list[Any]:
        raw = receive.get_raw()
        try:
            message = receive.decode(raw)
        except Exception as error:  # noqa: BLE001 - whatever the frame made mini-sglang's decoder raise
            _logger.error(
                "puredetok: a frame of %d bytes dropped: not a tokenizer message (%r)", len(raw), error
            )
            return []
        return list(message.data) if isinstance(message, BatchTokenizerMsg) else [message]

    try:
        while True:
            pending = read()
            while len(pending) < local_bs and not receive.empty():
                pending += read()
            frontend, backend = worker.handle(pending)
            if frontend:
                send_frontend.put(frontend[0] if len(frontend) == 1 else BatchFrontendMsg(data=frontend))
            if backend:
                send_backend.put(backend[0] if len(backend) == 1 else BatchBackendMsg(data=backend))
    except KeyboardInterrupt:
        pass


def install() -> None:
    """Make :func:`tokenize_worker` the one mini-sglang starts: ``minisgl.tokenizer.tokenize_worker``
    (what ``launch_server`` looks up when it starts its processes) and the one of
    ``minisgl.tokenizer.server``. ``launch_server`` gives the function to processes it starts with
    ``spawn``, which take it by its module and name: they import it from here.
    """
    import minisgl.tokenizer
    import minisgl.tokenizer.server

    minisgl.tokenizer.tokenize_worker = tokenize_worker
    minisgl.tokenizer.server.tokenize_worker = tokenize_worker


def launch(arguments: Sequence[str], *, run_shell: bool = False) -> None:
    """mini-sglang's server (``minisgl.server.launch_server``) with :func:`install` done first,
    given mini-sglang's own command-line ``arguments``.
    """
    install()
    from minisgl.server import launch_server

    sys.argv[1:] = list(arguments)
    launch_server(run_shell=run_shell)


if __name__ == "__main__":
    # Taken from the module by its name, not from this copy run as __main__: processes that
    # launch_server spawns then import the worker from puredetok.engines.minisgl.
    from puredetok.engines.minisgl import launch as _launch

    _launch(sys.argv[1:])
