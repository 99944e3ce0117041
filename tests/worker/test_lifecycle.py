"""The request lifecycle as a model: every request the frontend starts gets exactly one finished
reply, whatever the scheduler and the frontend send, in every order.

A hypothesis state machine drives one worker in this process (its managers and its tokenizing
thread, no sockets: what it would send is decoded as its peers would read it) with the frames of
both peers: tokenize (a good text, one over ``max_text_chars``, one whose prompt is over
``max_ids``), openings good and refused (``max_new_tokens=0``, a bad prompt id, a bad state, an
empty stop string, a parameter of the wrong type, past ``max_live``, twice), with and without
``finished``, more ids (an EOS, invalid ids, over ``max_ids``), the scheduler's ends and aborts, the
frontend's aborts, duplicates, unknown uids, health probes, several messages in one frame, and a
hand-back; any of them may name a uid before its tokenize comes (that is one request, whose tokenize
gives no second finished reply). A model predicts, step by step, which uids get a finished reply and
which the scheduler is told to drop; the invariants are the rule itself. Every detokenize frame is
built by hand as msgpack, as a scheduler written in any language would send it (an opening the
schema refuses, or one the manager refuses, must end its request the same way).
"""

from __future__ import annotations

import select
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

from helpers import tokenizer
from puredetok.serving._detokenize_manager import DetokenizeManager
from puredetok.serving._messages import (
    TO_BACKEND,
    TO_FRONTEND,
    AbortBackendMsg,
    AbortMsg,
    HealthCheckMsg,
    HealthReply,
    Message,
    ReplyBatch,
    TokenizeMsg,
    Uid,
    UserMsg,
    UserReply,
)
from puredetok.serving._tokenizing import TokenizeThread
from puredetok.worker._wire import FrameDecoder, encode_batch, encode_frame
from puredetok.worker._worker import Limits, Worker
from zmq_harness import raw_detokenize_frame

EOS = 151645
"""Qwen3's ``<|im_end|>``: ends a request with default parameters (a stop rule)."""
SAFE = (32, 33, 34, 9707)
"""Ids no stop rule of the default parameters ends on ("A", "B", "C", "Hello")."""
MAX_LIVE, MAX_IDS, MAX_TEXT_CHARS = 3, 8, 40
UIDS = (0, 1, 2, 3, "u")
STEPS = 30
"""Steps of one example: 200 examples (the ci profile) run in about 15 s."""

OPENINGS: dict[str, tuple[bool, dict[str, Any]]] = {
    "good": (True, {}),
    "good_prompt": (True, {"prompt_ids": [9707]}),
    "max_tokens_0": (False, {"params": {"max_new_tokens": 0}}),
    "bad_prompt_id": (False, {"prompt_ids": [-5]}),
    "bad_state": (False, {"state": b"not a stream"}),
    "empty_stop": (False, {"params": {"stop": [""]}}),
    "wrong_type": (False, {"params": {"max_new_tokens": "ten"}}),
}
"""Openings as a scheduler sends them on the wire: whether each is accepted, and its fields."""

TEXTS = {"ok": "Say hi", "long_text": "x" * (MAX_TEXT_CHARS + 1), "long_prompt": "a b c d e f g h i j k"}
"""Tokenize texts: one that goes to the scheduler, one over max_text_chars, one of more than
max_ids ids (refused after tokenizing)."""


def opening_fields(kind: str) -> dict[str, Any]:
    fields: dict[str, Any] = {"prompt_ids": [], "params": {}, "state": None, "consumed": 0}
    fields.update(OPENINGS[kind][1])
    return fields


RawMsg = tuple[Uid, list[int], bool, str | None, str | None]
"""A detokenize message: uid, ids, finished, the opening's kind (or None), finish_reason."""


def detokenize_frame(messages: list[RawMsg]) -> bytes:
    """The msgpack frame of these messages, built by hand."""
    return raw_detokenize_frame(
        [
            (uid, ids, end, opening_fields(opening) if opening else None, why)
            for uid, ids, end, opening, why in messages
        ]
    )


class InProcessWorker(Worker):
    """A worker whose frames are kept, decoded as its peers would read them, instead of sent."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.to_frontend: list[Message] = []
        self.to_backend: list[Message] = []
        self._readers = {"frontend": FrameDecoder(TO_FRONTEND), "backend": FrameDecoder(TO_BACKEND)}

    def _send(self, socket: Any, batch: Any) -> None:
        frame = encode_frame(batch) if isinstance(batch, ReplyBatch) else encode_batch(batch)
        side = "backend" if socket is self._backend else "frontend"
        decoded = self._readers[side].decode(frame)
        assert not decoded.rejected
        (self.to_backend if side == "backend" else self.to_frontend).extend(decoded.batch.items)

    def start_over(self) -> None:
        """Hold nothing, remember nothing, with the model's limits (a manager anew, sharing the
        worker's codecs), and forget what it sent."""
        self.limits = Limits(max_text_chars=MAX_TEXT_CHARS, max_ids=MAX_IDS, max_live=MAX_LIVE)
        self.detokenize_manager = DetokenizeManager(
            self.tokenize_manager.tokenizer, codecs=self._codecs, max_live=MAX_LIVE
        )
        self._tokenizing.clear()
        self._cancelled.clear()
        self._named.clear()
        self._waiting_chars = 0
        self.to_frontend.clear()
        self.to_backend.clear()

    def tokenized(self) -> None:
        """Until the tokenizing thread has given back all it was given (the loop's collecting)."""
        thread = self._tokenizer
        assert thread is not None
        while thread.pending:
            select.select([thread.fd], [], [], 30)
            self._tokenized()


class Lifecycle(RuleBasedStateMachine):
    """The worker's messages, and a model of what each request must get back."""

    worker: InProcessWorker

    def __init__(self) -> None:
        super().__init__()
        worker = self.worker
        worker.start_over()
        self.decoder = FrameDecoder()
        # The model, per uid.
        self.state: dict[Uid, str] = {}
        """At the worker's manager: "live", "ended", or "answered" (a message for it was answered
        as an unknown uid; an opening starts it anew, as a hand-back's re-opening does)."""
        self.tokenizing: dict[Uid, str] = {}
        """Given to the tokenizing thread, not collected: the kind of its text."""
        self.cancelled: set[Uid] = set()
        self.waiting: set[Uid] = set()
        """Tokenized, sent to the scheduler, not yet opened."""
        self.named: set[Uid] = set()
        """Named by a tokenize."""
        self.first_named: dict[Uid, str] = {}
        """What kind of message (not a tokenize) first named each uid."""
        self.starts: Counter[Uid] = Counter()
        """Requests the frontend started with each uid (a tokenize; or a request whose first
        message came from the scheduler, or the frontend's abort: a frontend waiting on it; a
        tokenize after such a message is that request's, no other)."""
        self.finished: Counter[Uid] = Counter()
        """Finished replies the worker has sent, by uid."""
        self.told: set[Uid] = set()
        """Uids the scheduler has been told to drop."""
        self.refused: set[Uid] = set()
        """Uids whose request a refusal ended (the scheduler must be told)."""
        self.step_finished: Counter[Uid] = Counter()
        self.step_abort: set[Uid] = set()
        self.step_user: set[Uid] = set()

    # --- the model ----------------------------------------------------------------------------

    def touch(self, uid: Uid, how: str) -> None:
        """A message other than a tokenize names ``uid`` (``how``: which kind of message)."""
        if not self.starts[uid]:
            self.starts[uid] = 1
        self.first_named.setdefault(uid, how)

    def end(self, uid: Uid, *, abort: bool, refused: bool = False) -> None:
        """The request of ``uid`` ends now: its one finished reply."""
        self.step_finished[uid] += 1
        self.state[uid] = "ended"
        self.waiting.discard(uid)
        if abort:
            self.step_abort.add(uid)
        if refused:
            self.refused.add(uid)

    def live(self) -> int:
        return sum(state == "live" for state in self.state.values())

    def refuse(self, uid: Uid, *, opening: bool) -> None:
        """A refusal from outside the manager (over max_ids, a negative id): it ends the request
        unless it has had its finished reply already."""
        self.touch(uid, "a message refused before the manager")
        state = self.state.get(uid)
        if uid in self.tokenizing:
            self.cancelled.add(uid)
        if state == "ended":
            return
        if state == "answered" and not opening:
            self.state[uid] = "ended"
            return
        if state == "answered":
            self.starts[uid] += 1
        self.end(uid, abort=True, refused=True)

    def detokenize(self, message: RawMsg) -> None:
        uid, ids, finished, opening, _ = message
        if opening is None:
            how = "ids" if ids or not finished else "an end"
        else:
            how = "an opening" if OPENINGS[opening][0] else "a refused opening"
        self.touch(uid, how)
        state = self.state.get(uid)
        if opening is not None:
            if state == "ended":
                return
            if state == "live" or not OPENINGS[opening][0] or self.live() >= MAX_LIVE:
                if state == "answered":
                    self.starts[uid] += 1
                self.end(uid, abort=True, refused=True)
                return
            if state == "answered":
                self.starts[uid] += 1
            self.state[uid] = "live"
            self.waiting.discard(uid)
        elif state is None:
            self.step_finished[uid] += 1  # "unknown request", once
            self.state[uid] = "answered"
            self.waiting.discard(uid)
            return
        elif state != "live":
            return
        if EOS in ids:
            self.end(uid, abort=not finished)
        elif finished:
            self.end(uid, abort=False)

    def over(self, message: RawMsg) -> bool:
        """Whether the worker refuses ``message`` before its manager sees it: more than max_ids
        ids, or an id below 0 (the wire's schema refuses it, as any id no int64 holds)."""
        uid, ids, _, opening, _ = message
        prompt = len(opening_fields(opening)["prompt_ids"]) if opening else 0
        return len(ids) + prompt > MAX_IDS or any(i < 0 for i in ids)

    # --- driving the worker -------------------------------------------------------------------

    def send(self, frame: bytes) -> None:
        self.worker.handle([self.decoder.decode(frame)])

    def check_step(self) -> None:
        """What the worker sent in this step is what the model predicted."""
        worker = self.worker
        replies = [m for m in worker.to_frontend if isinstance(m, UserReply)]
        sent_finished = Counter(reply.uid for reply in replies if reply.finished)
        assert sent_finished == self.step_finished, (sent_finished, self.step_finished, replies)
        aborts = {m.uid for m in worker.to_backend if isinstance(m, AbortBackendMsg)}
        assert self.step_abort <= aborts, (self.step_abort, aborts)
        users = {m.uid for m in worker.to_backend if isinstance(m, UserMsg)}
        assert users == self.step_user, (users, self.step_user)
        self.finished.update(sent_finished)
        self.told |= aborts
        worker.to_frontend.clear()
        worker.to_backend.clear()
        self.step_finished.clear()
        self.step_abort.clear()
        self.step_user.clear()

    @initialize()
    def start(self) -> None:
        self.check_step()

    @rule(uid=st.sampled_from(UIDS), kind=st.sampled_from(sorted(TEXTS)))
    def tokenize(self, uid: Uid, kind: str) -> None:
        """The frontend's tokenize. Of a uid an earlier tokenize named: another request, refused (a
        uid names one request). Of a uid only other messages named before (ids, an opening, an
        abort, from either side, in any order): the request those started, which has had its
        finished reply (or, live, will have it): no new start, no reply that finishes, nothing to
        the scheduler (it used to be told twice)."""
        if uid in self.tokenizing or uid in self.named:
            self.starts[uid] += 1
            self.step_finished[uid] += 1
        elif uid in self.state:
            event(f"a tokenize after {self.first_named[uid]}")
        elif kind == "long_text":
            self.starts[uid] += 1
            self.end(uid, abort=False)
        else:
            self.starts[uid] += 1
            self.tokenizing[uid] = kind
        self.named.add(uid)
        self.send(encode_batch([TokenizeMsg(uid, TEXTS[kind])]))
        self.check_step()

    @rule()
    def tokenized(self) -> None:
        """The tokenizing thread's results, collected by the loop."""
        self.worker.tokenized()
        for uid, kind in self.tokenizing.items():
            if uid in self.cancelled or self.state.get(uid) in ("ended", "answered"):
                continue
            if kind == "long_prompt":
                self.end(uid, abort=self.state.get(uid) == "live")
            else:
                self.step_user.add(uid)
                if uid not in self.state:
                    self.waiting.add(uid)
        self.tokenizing.clear()
        self.cancelled.clear()
        self.check_step()

    @rule(
        uid=st.sampled_from(UIDS),
        opening=st.sampled_from(sorted(OPENINGS)),
        ids=st.lists(st.sampled_from(SAFE), max_size=3),
        finished=st.booleans(),
        over=st.booleans(),
    )
    def open(self, uid: Uid, opening: str, ids: list[int], finished: bool, over: bool) -> None:
        message: RawMsg = (uid, [32] * (MAX_IDS + 1) if over else ids, finished, opening, None)
        self.one_message(message)

    @rule(
        uid=st.sampled_from(UIDS),
        ids=st.sampled_from([[32], [33, 34], [], [32, EOS], [-1, 32], [10**9], [32] * (MAX_IDS + 1)]),
        finished=st.booleans(),
        reason=st.sampled_from([None, "length", "stop", "abort"]),
    )
    def more_ids(self, uid: Uid, ids: list[int], finished: bool, reason: str | None) -> None:
        self.one_message((uid, ids, finished, None, reason))

    def one_message(self, message: RawMsg) -> None:
        if self.over(message):
            self.refuse(message[0], opening=message[3] is not None)
        else:
            self.detokenize(message)
        self.send(detokenize_frame([message]))
        self.check_step()

    @rule(
        messages=st.lists(
            st.tuples(
                st.sampled_from(UIDS),
                st.lists(st.sampled_from([*SAFE, EOS]), max_size=2),
                st.booleans(),
                st.none() | st.sampled_from(sorted(OPENINGS)),
                st.none() | st.sampled_from(["length", "abort"]),
            ),
            min_size=2,
            max_size=6,
        )
    )
    def one_frame(self, messages: list[RawMsg]) -> None:
        """Several requests' messages in one frame, in any order (duplicates included). A uid with
        a refused opening has no other message in the frame: a message the schema refuses is
        answered before the rest of its frame, and which refused openings the schema catches (not
        the manager) is the messages' business."""
        refused = {uid for uid, _, _, opening, _ in messages if opening and not OPENINGS[opening][0]}
        kept = [m for m in messages if m[0] not in refused]
        for uid in refused:
            kept.append(next(m for m in messages if m[0] == uid and m[3] and not OPENINGS[m[3]][0]))
        messages = sorted(kept, key=messages.index)
        for message in messages:
            self.detokenize(message)
        self.send(detokenize_frame(messages))
        self.check_step()

    @rule(uid=st.sampled_from(UIDS))
    def frontend_abort(self, uid: Uid) -> None:
        self.touch(uid, "an abort")
        state = self.state.get(uid)
        if uid in self.tokenizing:
            self.cancelled.add(uid)
        if state in (None, "live"):
            self.end(uid, abort=True)
        self.state[uid] = "ended"
        self.waiting.discard(uid)
        self.step_abort.add(uid)
        self.send(encode_batch([AbortMsg(uid)]))
        self.check_step()

    @rule(probe=st.integers(0, 1000))
    def health(self, probe: int) -> None:
        self.send(encode_batch([HealthCheckMsg(probe)]))
        health = [m for m in self.worker.to_frontend if isinstance(m, HealthReply)]
        assert [h.probe for h in health] == [probe] and health[0].live_requests == self.live()
        self.check_step()

    @rule()
    def hand_back(self) -> None:
        """A stopping worker hands every live request back: that is each one's finished reply."""
        for uid, state in list(self.state.items()):
            if state == "live":
                self.end(uid, abort=False)
        self.worker._hand_back()
        self.check_step()

    # --- the rule -----------------------------------------------------------------------------

    @invariant()
    def one_finished_reply_per_request(self) -> None:
        """Each request started has at most one finished reply; once the scheduler or the frontend
        (or a refusal) has ended it, exactly one; so no request waits for a reply that never comes."""
        for uid, starts in self.starts.items():
            going = self.state.get(uid) == "live" or (
                uid not in self.state
                and (uid in self.tokenizing and uid not in self.cancelled or uid in self.waiting)
            )
            assert self.finished[uid] == starts - going, (uid, starts, going, self.finished[uid])

    @invariant()
    def the_scheduler_drops_every_refused_request(self) -> None:
        assert self.refused <= self.told

    @invariant()
    def the_worker_holds_what_the_model_says(self) -> None:
        manager = self.worker.detokenize_manager
        assert {uid for uid in UIDS if uid in manager} == {u for u, s in self.state.items() if s == "live"}

    def teardown(self) -> None:
        thread = self.worker._tokenizer
        assert thread is not None
        while thread.pending:
            select.select([thread.fd], [], [], 30)
            thread.collect()


@pytest.fixture(scope="module")
def in_process_worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessWorker]:
    folder: Path = tmp_path_factory.mktemp("lifecycle")
    worker = InProcessWorker(
        tokenizer("qwen3"),
        listen=f"ipc://{folder}/worker",
        backend=f"ipc://{folder}/backend",
        frontend=f"ipc://{folder}/frontend",
    )
    worker._tokenizer = TokenizeThread(worker.tokenize_manager)
    try:
        yield worker
    finally:
        worker.close()


def test_every_request_gets_exactly_one_finished_reply(in_process_worker: InProcessWorker) -> None:
    Lifecycle.worker = in_process_worker
    run_state_machine_as_test(Lifecycle, settings=settings(settings(), stateful_step_count=STEPS))


EARLY: dict[str, list[RawMsg] | None] = {
    "ids": [("u", [32], False, None, None)],
    "an end": [("u", [], True, None, "length")],
    "an opening, still open": [("u", [32], False, "good", None)],
    "an opening that ends": [("u", [32, 33], True, "good_prompt", "stop")],
    "a refused opening": [("u", [32], False, "max_tokens_0", None)],
    "a refused opening that ends": [("u", [], True, "bad_prompt_id", "length")],
    "a message over max_ids": [("u", [32] * (MAX_IDS + 1), False, None, None)],
    "an opening over max_ids": [("u", [32] * (MAX_IDS + 1), False, "good", None)],
    "an abort": None,
}
"""Messages that name the uid ``"u"`` before its tokenize comes (None: the frontend's abort)."""


@pytest.mark.parametrize("early", sorted(EARLY))
def test_a_uid_named_before_its_tokenize_gets_one_finished_reply(
    in_process_worker: InProcessWorker, early: str
) -> None:
    """A uid named by a stray detokenize, an opening (refused or not), a message over a limit or an
    abort, before the frontend's tokenize of it came, got two finished replies (the second: "this
    uid already names a request"). The tokenize belongs to the request those messages started: it
    gets an error reply that does not finish, its prompt never reaches the scheduler, and whatever
    follows (the scheduler's ids and end, the frontend's abort) gives no second finished reply."""
    worker = in_process_worker
    worker.start_over()
    decoder = FrameDecoder()
    messages = EARLY[early]
    frames = (
        [encode_batch([AbortMsg("u")])] if messages is None else [detokenize_frame([m]) for m in messages]
    )
    frames.append(encode_batch([TokenizeMsg("u", TEXTS["ok"])]))
    for frame in frames:
        worker.handle([decoder.decode(frame)])
    worker.tokenized()
    *_, ignored = [m for m in worker.to_frontend if isinstance(m, UserReply)]  # the tokenize's
    assert not ignored.finished and ignored.error is not None and "tokenize ignored" in ignored.error
    # Later: the scheduler's ids and its end, then the frontend's abort.
    worker.handle([decoder.decode(detokenize_frame([("u", [34], False, None, None)]))])
    worker.handle([decoder.decode(detokenize_frame([("u", [9707], True, None, "length")]))])
    worker.handle([decoder.decode(encode_batch([AbortMsg("u")]))])
    replies = [m for m in worker.to_frontend if isinstance(m, UserReply)]
    assert sum(reply.finished for reply in replies) == 1, replies
    assert not [m for m in worker.to_backend if isinstance(m, UserMsg)]  # its prompt went nowhere
    assert "u" not in worker.detokenize_manager
