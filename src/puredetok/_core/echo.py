"""Contract C: the text a prompt already showed is never emitted again.

After a prompt ``p``, the core has committed some of ``decode(p)`` (the prompt's deltas) and holds
the rest, which is exactly ``finish(state_p)`` (G1). That rest may still be changed by the output
(a byte-fallback run the next byte poisons, a space cleanup removes, a split character the next
byte completes) or may stay as it is. The output's text is ``decode(p + s)[len(L):]``, where ``L``
is the longest common prefix of ``decode(p)`` and ``decode(p + s)``.

So the primed state keeps that rest as an *echo* beside the decoder's hold: each later certain
delta is first matched against the echo; the matching part is consumed silently, and at the first
character that differs the echo is dropped and everything from there on is emitted. ``finish``
treats the final tail the same way. This is exact because the committed text is a prefix of both
decodes (G2), and deltas are prefix-safe, so the output's text is seen in order.

A hold with an echo is an :class:`Echo`, never the decoding's ``idle`` object, so the per-token
fast path (``hold is idle``) never meets one; only the slow path looks for it. The echo is at most
the text the prompt's state held (G5).
"""

from __future__ import annotations

from collections.abc import Hashable
from os.path import commonprefix

import attrs


@attrs.frozen
class Echo:
    """A decoder hold together with the prompt's text that the output has not yet shown again."""

    hold: Hashable
    """The decoding's own hold."""
    text: str
    """What ``decode(prompt)`` still shows beyond the text matched so far (never empty)."""


def continuation_text(prompt_text: str, text: str) -> str:
    """Contract C's output: ``text[len(L):]``, ``L`` the longest common prefix of ``prompt_text``
    (``decode(p)``) and ``text`` (``decode(p + s)``). The reference the tests check against.
    """
    return text[len(commonprefix([prompt_text, text])) :]


def consume(old: Echo, hold: Hashable, delta: str) -> tuple[Hashable, str]:
    """The new hold and the text to emit, after a step from ``old`` gave ``hold`` and ``delta``."""
    echo = old.text
    if echo.startswith(delta):
        if not delta and hold is old.hold:
            return old, ""
        rest = echo[len(delta) :]
        return (Echo(hold, rest) if rest else hold), ""
    return hold, delta[len(commonprefix([echo, delta])) :]


def consume_tail(old: Echo, tail: str) -> str:
    """What the final flush emits: ``tail`` after the part of it that matches the echo."""
    return tail[len(commonprefix([old.text, tail])) :]
