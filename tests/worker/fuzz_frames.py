"""Hostile frames for a worker: every shape of bytes that once killed or could kill one.

:func:`hostile_frames` yields ``(kind, frame)``: deep nesting at many depths (the whole frame, the
batch, every field of every inbound kind, unknown fields), random bytes, valid frames cut short or
with bytes flipped, headers that declare huge lengths, and valid frames shaped to cost the most
(:data:`ADVERSARIAL`). Deterministic for a seed.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Iterator

import msgspec

from helpers import tokenizer
from puredetok.serving._detokenize_manager import DetokenizeManager
from puredetok.serving._messages import (
    PROTOCOL_VERSION,
    AbortMsg,
    DetokenizeMsg,
    HealthCheckMsg,
    Opening,
    SamplingParams,
    TokenizeMsg,
)
from puredetok.worker._wire import encode_batch

DEPTHS = (1, 2, 8, 31, 32, 33, 34, 100, 500, 900, 990, 999, 1000, 1001, 1500, 5000, 100_000)
"""Nesting depths tried: around the wire's limit (32), around Python's recursion limit (1000)
and far past both."""

HUGE = (0xDD, 0xDF, 0xDB, 0xC6, 0xC9)
"""array32, map32, str32, bin32, ext32: each followed by a length of 2**32 - 1."""

PLACEHOLDER = "@@PLACEHOLDER@@"


def nested(depth: int, rng: random.Random) -> bytes:
    """``depth`` arrays, maps or a mix nested in each other, around a scalar."""
    style = rng.randrange(3)
    opener = {0: b"\x91", 1: b"\x81\xa1k"}.get(style)
    if opener is not None:
        return opener * depth + b"\x00"
    return b"".join(rng.choice((b"\x91", b"\x81\xa1k", b"\x92\x01")) for _ in range(depth)) + b"\xc0"


def _templates(serial: int) -> list[bytes]:
    """Valid frames of every inbound kind, with one field to be replaced marked by a placeholder."""
    uid = f"junk-{serial}"
    extra = {"x": PLACEHOLDER}
    frames = [
        encode_batch([TokenizeMsg(uid, PLACEHOLDER)]),
        encode_batch([TokenizeMsg(uid, None, ({"role": "user", "content": PLACEHOLDER},))]),
        encode_batch([TokenizeMsg(uid, "a", template_options={"t": PLACEHOLDER})]),
        encode_batch(
            [TokenizeMsg(uid, "a", params=SamplingParams(extra=extra)), TokenizeMsg(f"{uid}b", "b")]
        ),
        encode_batch([DetokenizeMsg(uid, (5,), open=Opening((1,), SamplingParams(extra=extra)))]),
        encode_batch([DetokenizeMsg(uid, (5,), True, None, "stop", PLACEHOLDER)]),
        encode_batch([DetokenizeMsg(PLACEHOLDER, (5,)), DetokenizeMsg(f"{uid}b", (6,), True)]),
        encode_batch([AbortMsg(PLACEHOLDER)]),
        encode_batch([HealthCheckMsg(0)]).replace(
            b"\xa5probe\x00", b"\xa5probe" + msgspec.msgpack.encode(PLACEHOLDER)
        ),
    ]
    unknown = msgspec.msgpack.encode(["abort", PROTOCOL_VERSION, [{"uid": uid, "junk": PLACEHOLDER}]])
    cells = msgspec.msgpack.encode(
        [
            "detokenize",
            PROTOCOL_VERSION,
            {"uids": [uid, f"{uid}b"], "token_ids": [PLACEHOLDER, 6], "finished": [1]},
        ]
    )
    return [*frames, unknown, cells]


def _fill(template: bytes, value: bytes) -> bytes:
    marker = msgspec.msgpack.encode(PLACEHOLDER)
    assert marker in template
    return template.replace(marker, value, 1)


ADVERSARIAL = (
    "one_request",
    "unknown_uids",
    "reopened",
    "open_and_end",
    "repeated_uids",
    "mixed",
    "handed_back",
    "chat_flood",
)
"""Valid frames shaped to cost the most per message: many messages of one request, uids the worker
never opened, one uid opened again and again, requests opened and ended in turn, a few uids repeated
in any order, all of these mixed, re-openings with handed-back states whose stop strings pass the
worker's limits (and one within them), and tokenize requests of a chat with more messages than
``--max-chat-messages`` or of many tiny messages within it."""


@functools.cache
def handed_back_states() -> tuple[bytes, bytes, bytes]:
    """States of qwen3 streams handed back by a manager of looser limits: 300 stop strings (past
    the default ``max_stops``), one stop string of 20,000 characters (past ``max_stop_chars``),
    and two short ones (within both)."""
    loose = DetokenizeManager(tokenizer("qwen3"), max_stops=1_000, max_stop_chars=100_000)
    stops = ([f"stop {k}" for k in range(300)], ["ab" * 10_000], ["stop", "end"])
    for uid, stop in enumerate(stops):
        loose.open(uid, Opening((9707,), SamplingParams(stop=tuple(stop))))
    states = {uid: state for uid, state, _ in loose.drain()}
    return states[0], states[1], states[2]


def adversarial_batch(kind: str, serial: int, rng: random.Random) -> bytes:
    """A valid frame of ``kind`` (one of :data:`ADVERSARIAL`); its uids are its own."""
    size = rng.choice((1, 30, 300))  # their replies are read by the test in Python: keep them few
    ids = [rng.choice((32, 33, 13, 151645, 220, 99999)) for _ in range(size)]
    uid = f"adversary-{serial}"
    if kind == "chat_flood":
        many = rng.choice((9_000, 9_000, 9_000, 500))  # past the default max_chat_messages (8,192), or within
        chat = tuple({"role": ("user", "assistant")[k % 2], "content": f"{k}"} for k in range(many))
        return encode_batch([TokenizeMsg(uid, None, chat)])
    messages = []
    for k, token in enumerate(ids):
        if kind == "one_request":
            message = DetokenizeMsg(uid, (token,), k == size - 1, Opening() if k == 0 else None)
        elif kind == "unknown_uids":
            message = DetokenizeMsg(f"{uid}-{k}", (token,), rng.random() < 0.5)
        elif kind == "reopened":
            message = DetokenizeMsg(uid, (token,), k == size - 1, Opening())
        elif kind == "repeated_uids":
            opened = rng.random() < 0.1
            message = DetokenizeMsg(
                f"{uid}-{rng.randrange(3)}", (token,), rng.random() < 0.05, Opening() if opened else None
            )
        elif kind == "mixed":
            opening = rng.choice((None, None, Opening(), Opening((token,), SamplingParams(stop=("x",)))))
            message = DetokenizeMsg(
                f"{uid}-{rng.randrange(max(1, size // 4))}", (token,), rng.random() < 0.2, opening
            )
        elif kind == "handed_back":
            state = rng.choice(handed_back_states())
            message = DetokenizeMsg(f"{uid}-{k}", (token,), rng.random() < 0.5, Opening(state=state))
        else:
            opening = Opening() if k % 3 == 0 else None
            message = DetokenizeMsg(f"{uid}-{k // 3}", (token,), k % 3 == 2 or k == size - 1, opening)
        messages.append(message)
    return encode_batch(messages)


def hostile_frames(count: int, seed: int, valid: list[bytes]) -> Iterator[tuple[str, bytes]]:
    """``count`` hostile frames: ``(kind, bytes)``; ``valid`` are frames to cut and flip."""
    rng = random.Random(seed)
    kinds = (
        "nested",
        "nested_batch",
        "nested_field",
        "random",
        "truncated",
        "flipped",
        "huge_length",
        *ADVERSARIAL,
    )
    for serial in range(count):
        kind = kinds[serial % len(kinds)]
        depth = rng.choice(DEPTHS)
        if kind in ADVERSARIAL:
            frame = adversarial_batch(kind, serial, rng)
        elif kind == "nested":
            frame = nested(depth, rng)
        elif kind == "nested_batch":
            name = rng.choice(("detokenize", "tokenize", "abort", "health"))
            frame = (
                msgspec.msgpack.encode(name) + msgspec.msgpack.encode(PROTOCOL_VERSION) + nested(depth, rng)
            )
            frame = b"\x93" + frame
        elif kind == "nested_field":
            frame = _fill(rng.choice(_templates(serial)), nested(depth, rng))
        elif kind == "random":
            frame = rng.randbytes(rng.choice((0, 1, 2, 5, 17, 100, 1000, 10_000)))
        elif kind == "truncated":
            source = rng.choice(valid)
            frame = source[: rng.randrange(len(source))]
        elif kind == "flipped":
            flipped = bytearray(rng.choice(valid))
            for _ in range(rng.randrange(1, 6)):
                flipped[rng.randrange(len(flipped))] = rng.randrange(256)
            frame = bytes(flipped)
        else:
            header = bytes([rng.choice(HUGE)]) + b"\xff\xff\xff\xff"
            where = rng.randrange(3)
            if where == 0:
                frame = header + rng.randbytes(rng.randrange(8))
            elif where == 1:
                frame = (
                    b"\x93\xaadetokenize"
                    + bytes([PROTOCOL_VERSION])
                    + header
                    + rng.randbytes(rng.randrange(8))
                )
            else:
                frame = _fill(rng.choice(_templates(serial)), header + rng.randbytes(rng.randrange(8)))
        yield kind, frame
