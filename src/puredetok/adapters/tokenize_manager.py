"""``TokenizeManager``: plain text or chat messages to int32 token ids, many requests at a time."""

from __future__ import annotations

__all__ = ["TokenizeManager", "TokenizeResult", "TokenizeError", "RESERVED_TEMPLATE_OPTIONS"]

from array import array
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from puredetok.adapters.messages import TokenizeMsg, Uid

RESERVED_TEMPLATE_OPTIONS = frozenset(
    {
        "conversation",
        "tokenize",
        "add_generation_prompt",
        "continue_final_message",
        "chat_template",
        "return_tensors",
        "return_dict",
        "return_assistant_tokens_mask",
        "padding",
        "truncation",
        "max_length",
        "tokenizer_kwargs",
    }
)
"""``apply_chat_template`` arguments the manager sets itself; a request may not pass them."""


class TokenizeError(ValueError):
    """A request that cannot be tokenized (the reason is the message)."""


@attrs.frozen
class TokenizeResult:
    """One request's ids (``array('i')``, int32) or the reason it could not be tokenized."""

    uid: Uid
    input_ids: array[int] | None
    error: str | None = None


def _content_text(index: int, content: Any) -> str:
    """The text of a message's content: a string, or a list of text parts joined by newlines."""
    if isinstance(content, str):
        return content
    if isinstance(content, list | tuple):
        texts = []
        for part in content:
            if not isinstance(part, Mapping):
                raise TokenizeError(f"message {index}: a content part must be an object, got {part!r:.40}")
            kind = part.get("type")
            if kind != "text" or not isinstance(part.get("text"), str):
                raise TokenizeError(
                    f"message {index}: non-text content part (type {kind!r}): this worker tokenizes text only"
                )
            texts.append(part["text"])
        return "\n".join(texts)
    raise TokenizeError(f"message {index}: content must be text, got {type(content).__name__}")


def normalize_messages(messages: Any) -> list[dict[str, Any]]:
    """Check a chat message list and give each message's content as one string.

    Raises :class:`TokenizeError` for a list that is empty or not a list, a message without a
    string role, and content that is missing, empty (unless the message carries tool calls) or
    not text.
    """
    if not isinstance(messages, list | tuple) or not messages:
        raise TokenizeError("messages must be a non-empty list of {'role': ..., 'content': ...} objects")
    normalized = []
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise TokenizeError(f"message {index} must be an object, got {type(message).__name__}")
        role = message.get("role")
        if not isinstance(role, str) or not role:
            raise TokenizeError(f"message {index} has no role (a non-empty string)")
        content = message.get("content")
        if content is None and message.get("tool_calls"):
            content = ""
        elif content is None:
            raise TokenizeError(f"message {index} ({role}) has no content")
        text = _content_text(index, content)
        if not text and not message.get("tool_calls"):
            raise TokenizeError(f"message {index} ({role}) has empty content")
        normalized.append({**message, "content": text})
    return normalized


class TokenizeManager:
    """Tokenizes requests for one tokenizer (a ``transformers`` tokenizer or a ``tokenizers.Tokenizer``).

    :meth:`tokenize` handles a batch: chat messages are rendered through the tokenizer's own chat
    template (with the generation prompt), then all texts are encoded together. A request that
    cannot be tokenized gets an error; the others are unaffected.
    """

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self._transformers = hasattr(tokenizer, "backend_tokenizer")
        self.name = str(getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__)

    def render_chat(self, messages: Any, options: Mapping[str, Any] | None = None) -> str:
        """The prompt text of a chat: the model's template with the generation prompt added.

        ``options`` become template variables (for example ``enable_thinking`` for Qwen3).
        Raises :class:`TokenizeError`.
        """
        if not getattr(self.tokenizer, "chat_template", None):
            raise TokenizeError(f"tokenizer {self.name!r} has no chat template: send plain text instead")
        options = dict(options or {})
        reserved = sorted(RESERVED_TEMPLATE_OPTIONS & options.keys())
        if reserved:
            raise TokenizeError(f"template option(s) {', '.join(reserved)} are set by the tokenize manager")
        conversation = normalize_messages(messages)
        try:
            rendered = self.tokenizer.apply_chat_template(
                conversation, tokenize=False, add_generation_prompt=True, **options
            )
        except Exception as error:  # a template raises whatever its author chose
            raise TokenizeError(f"chat template failed: {type(error).__name__}: {error}") from None
        if not isinstance(rendered, str):
            raise TokenizeError(f"chat template gave {type(rendered).__name__}, not text")
        for index, message in enumerate(conversation):
            # A template silently skips roles it does not know (Qwen3 drops "robot"): catch it.
            if message["role"] != "assistant" and message["content"] and message["content"] not in rendered:
                raise TokenizeError(
                    f"message {index} ({message['role']}) is not in the rendered prompt: "
                    "the chat template does not accept that role"
                )
        return rendered

    def tokenize(self, messages: Sequence[TokenizeMsg]) -> list[TokenizeResult]:
        """One result per request, in order."""
        results: list[TokenizeResult | None] = [None] * len(messages)
        groups: dict[bool, list[tuple[int, str]]] = {}
        for index, msg in enumerate(messages):
            try:
                text, special = self._prompt(msg)
            except TokenizeError as error:
                results[index] = TokenizeResult(msg.uid, None, str(error))
                continue
            groups.setdefault(special, []).append((index, text))
        for special, entries in groups.items():
            for (index, _), encoded in zip(entries, self._encode_all([text for _, text in entries], special)):
                uid = messages[index].uid
                results[index] = (
                    TokenizeResult(uid, None, encoded)
                    if isinstance(encoded, str)
                    else TokenizeResult(uid, encoded)
                )
        return [result for result in results if result is not None]

    def _prompt(self, msg: TokenizeMsg) -> tuple[str, bool]:
        """The text to encode for one request and whether the tokenizer adds its special tokens."""
        if (msg.text is None) == (msg.messages is None):
            raise TokenizeError("give exactly one of text and messages")
        if msg.messages is not None:
            return self.render_chat(msg.messages, msg.template_options), False
        if msg.template_options:
            raise TokenizeError("template_options apply to chat messages only")
        if not msg.text:
            raise TokenizeError("empty text")
        return msg.text, msg.add_special_tokens

    def _encode_all(self, texts: list[str], add_special_tokens: bool) -> list[array[int] | str]:
        """Ids of each text (one call for all); a text the tokenizer refuses gets its error message."""
        try:
            return list(self._encode(texts, add_special_tokens))
        except Exception:  # one bad text (a lone surrogate, say) fails the whole call: find it
            pass
        encoded: list[array[int] | str] = []
        for text in texts:
            try:
                encoded.extend(self._encode([text], add_special_tokens))
            except Exception as error:
                encoded.append(f"the tokenizer cannot encode this text: {type(error).__name__}: {error}")
        return encoded

    def _encode(self, texts: list[str], add_special_tokens: bool) -> list[array[int]]:
        if self._transformers:
            rows = self.tokenizer(texts, add_special_tokens=add_special_tokens)["input_ids"]
        else:
            rows = [e.ids for e in self.tokenizer.encode_batch(texts, add_special_tokens=add_special_tokens)]
        return [array("i", row) for row in rows]
