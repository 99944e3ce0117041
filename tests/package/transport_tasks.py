"""What tests/package/test_transport.py runs in another process (a spawned one, a Ray worker): it imports
nothing but puredetok, so that a process that unpickles these functions has all they need."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import puredetok


def echo(values: Any) -> Any:
    """The values as they were unpickled here, to be pickled back."""
    return values


def future(value: puredetok.DecodeState | puredetok.Stream, ids: Sequence[int]) -> str:
    """The text a state or stream gives from here on, token by token, with its final flush."""
    text = ""
    if isinstance(value, puredetok.Stream):
        for token_id in ids:
            if value.finished:
                break
            value, delta = puredetok.advance(value, token_id)
            text += delta
        value, tail = puredetok.close(value)
        return text + tail
    for token_id in ids:
        value, delta = puredetok.step(value, token_id)
        text += delta
    return text + puredetok.finish(value)


def resume_and_continue(
    codec: puredetok.Codec, saved: Sequence[tuple[Any, Sequence[int]]]
) -> list[tuple[str, bytes]]:
    """Each state or stream as it was unpickled here (a :class:`puredetok.SavedState` or
    :class:`puredetok.SavedStream`), resumed with ``codec`` (as it was unpickled here too): its
    bytes once resumed and its :func:`future` through its ids.
    """
    results = []
    for value, ids in saved:
        resumed = value.resume(codec)
        results.append((future(resumed, ids), resumed.to_bytes()))
    return results
