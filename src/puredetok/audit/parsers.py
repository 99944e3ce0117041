"""Chat responses that a reasoning or tool parser split: the pieces joined again as the parser
took them from the text, so that they can be compared with the exact text of the ids.

vLLM's reasoning parsers (``vllm/reasoning/``: ``BaseThinkingReasoningParser``, and the Qwen3
and DeepSeek-R1 parsers) drop the text up to the start marker (``<think>``) when the output has
one, and cut the rest at the end marker (``</think>``): the reasoning before it
(``message.reasoning_content``; ``message.reasoning`` in newer servers), the content after it
(``message.content``, None when empty); with no end marker, the whole is reasoning. Its tool
parsers (``vllm/entrypoints/openai/tool_parsers/``, e.g. Hermes's ``<tool_call>``) keep the
content before the first tool call and return each call's function name and its arguments
re-serialized (``message.tool_calls``), which cannot be joined back byte for byte: the calls are
checked by their names, in order, in the text after the content.
"""

from __future__ import annotations

__all__ = ["REASONING_MARKERS", "TOOL_MARKERS", "plain_join", "rejoin"]

from collections.abc import Sequence

REASONING_MARKERS = (
    ("<think>", "</think>"),
    ("<seed:think>", "</seed:think>"),
    ("\u25c1think\u25b7", "\u25c1/think\u25b7"),
    ("[THINK]", "[/THINK]"),
)
"""The start and end markers of reasoning the parsers look for (Qwen3, DeepSeek-R1 and most
others; Seed-OSS; Kimi; Mistral's Magistral), tried in this order."""

TOOL_MARKERS = (
    "<tool_call>",
    "[TOOL_CALLS]",
    "<|tool_calls_section_begin|>",
    "<\uff5ctool\u2581calls\u2581begin\uff5c>",
    "<|python_tag|>",
)
"""The markers that start a tool call (Hermes and Qwen; Mistral; Kimi K2; DeepSeek-V3; Llama 3)."""


def _joined(parts: Sequence[tuple[str, str]], kind: str) -> str | None:
    pieces = [text for piece, text in parts if piece == kind]
    return "".join(pieces) if pieces else None


def plain_join(parts: Sequence[tuple[str, str]]) -> str:
    """The reasoning, content and tool names of a split response, one after the other."""
    return "".join(text for _, text in parts)


def _tool_at(text: str) -> int:
    found = [at for at in (text.find(marker) for marker in TOOL_MARKERS) if at >= 0]
    return min(found) if found else -1


def _in_order(names: Sequence[str], text: str) -> bool:
    at = 0
    for name in names:
        at = text.find(name, at)
        if at < 0:
            return False
        at += len(name)
    return True


def rejoin(exact: str, parts: Sequence[tuple[str, str]]) -> str | None:
    """The engine's text as the parser split it from its output, joined again with the markers
    ``exact`` has (the text before a start marker, which the parser drops, taken from ``exact``).

    None when it cannot be joined so that it is comparable: no known marker in ``exact`` around a
    reasoning piece and some content, tool calls whose names are not in the text after the
    content in order, or pieces that differ from ``exact``'s own only by spaces at their ends (a
    parser that trims them).
    """
    reasoning = _joined(parts, "reasoning")
    content = _joined(parts, "content") or ""
    tools = [text for kind, text in parts if kind == "tool"]
    engine, rest = "", exact
    pieces: list[tuple[str, str]] = []
    if reasoning is not None:
        pair = next(((s, e) for s, e in REASONING_MARKERS if s in exact or e in exact), None)
        if pair is None:
            if content or tools:
                return None
            return reasoning  # no end marker: the whole output is reasoning
        start, end = pair
        before, found, after = exact.partition(start)
        if found:
            engine, rest = before + start, after
        if end in rest:
            thought, _, rest = rest.partition(end)
            engine += reasoning + end
        else:
            thought, rest = rest, ""
            engine += reasoning
        pieces.append((reasoning, thought))
    if tools:
        at = _tool_at(rest)
        if at < 0 or not _in_order(tools, rest[at:]):
            return None
        said, calls = rest[:at], rest[at:]
        engine += content + calls
        pieces.append((content, said))
    else:
        engine += content
        pieces.append((content, rest))
    if engine != exact and all(ours.strip() == theirs.strip() for ours, theirs in pieces):
        return None
    return engine
