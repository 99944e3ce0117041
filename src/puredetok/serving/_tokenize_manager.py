"""``TokenizeManager``: plain text or chat messages to int32 token ids, many requests at a time.

Chat input is data: the text a caller puts into a chat never becomes a control id, special or
merely added (:class:`ContentAsData` encodes it so); the template's own markers, and by default
the assistant turns, keep theirs. docs/adapters.md ("Chat input is data") says how and why.
"""

from __future__ import annotations

import json
import re
from array import array
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import tokenizers

from puredetok.errors import PuredetokError
from puredetok.serving._messages import TokenizeMsg, Uid

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


class TokenizeError(PuredetokError, ValueError):
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


_PRIVATE_USE = 0xF0000
"""Where the characters that mask added-token text are looked for (Supplementary Private Use
Area-A: no tokenizer's template writes them)."""


def _strings(value: Any) -> list[str]:
    """Every string value inside a message or option (not the keys of mappings)."""
    found: list[str] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            found.append(item)
        elif isinstance(item, Mapping):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return found


def _replace_strings(value: Any, replace: Any) -> Any:
    """``value`` with ``replace`` applied to every string inside it (a copy; keys untouched)."""
    if isinstance(value, str):
        return replace(value)
    if isinstance(value, Mapping):
        return {key: _replace_strings(item, replace) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_replace_strings(item, replace) for item in value)
    return value


def _without_first_prepend(config: Any) -> tuple[Any, bool]:
    """A pre-tokenizer config with Metaspace's ``prepend_scheme`` "first" made "never"; whether any was."""
    if isinstance(config, dict):
        changed = False
        out = {}
        for key, value in config.items():
            value, inner = _without_first_prepend(value)
            changed = changed or inner
            out[key] = value
        if out.get("type") == "Metaspace" and out.get("prepend_scheme") == "first":
            out["prepend_scheme"] = "never"
            changed = True
        return out, changed
    if isinstance(config, list):
        items = [_without_first_prepend(value) for value in config]
        return [value for value, _ in items], any(changed for _, changed in items)
    return config, False


class ContentAsData:
    """Encodes rendered chat prompts in which only the template's own added tokens are tokens.

    One per tokenizer (it needs a ``tokenizers`` backend): :meth:`encode` takes the prompt rendered
    from masked values and the table that unmasks them (docs/adapters.md, "Chat input is data",
    says how). The two copies of the backend this takes are made on first use.
    """

    def __init__(self, backend: tokenizers.Tokenizer) -> None:
        self.backend = backend
        added = backend.get_added_tokens_decoder()
        self.specials = {token.content: token_id for token_id, token in added.items() if token.special}
        """Each special token's text, and its id."""
        self.controls = {token.content: token_id for token_id, token in added.items() if token.content}
        """Each added token's text (special or not), and its id: what caller text never becomes."""
        self._first: tokenizers.Tokenizer | None = None
        self._later: tokenizers.Tokenizer | None = None

    def _encoders(self) -> tuple[tokenizers.Tokenizer, tokenizers.Tokenizer]:
        if self._first is None or self._later is None:
            config = json.loads(self.backend.to_str())
            # Marked special, every added token is skipped by ``encode_special_tokens``: text.
            config["added_tokens"] = [{**token, "special": True} for token in config.get("added_tokens", [])]
            self._first = tokenizers.Tokenizer.from_str(json.dumps(config))
            self._first.encode_special_tokens = True
            later, changed = _without_first_prepend(config.get("pre_tokenizer"))
            self._later = self._first
            if changed:
                self._later = tokenizers.Tokenizer.from_str(json.dumps({**config, "pre_tokenizer": later}))
                self._later.encode_special_tokens = True
        return self._first, self._later

    def encode(self, masked: str, unmask: Mapping[int, str]) -> list[int]:
        """The ids of the prompt rendered from masked values (see the class)."""
        encoding = self.backend.encode(masked, add_special_tokens=False)
        by_id = {token_id: content for content, token_id in self.controls.items()}
        pieces: list[tuple[int, str | int]] = []  # (where it starts, text or a special id)
        cursor = 0
        for token_id, (start, end) in zip(encoding.ids, encoding.offsets):
            content = by_id.get(token_id)
            if content is None or content not in masked[start:end]:
                continue  # text (an unknown character's <unk> is not the template's)
            if start > cursor:
                pieces.append((cursor, masked[cursor:start].translate(unmask)))
            pieces.append((start, token_id))
            cursor = end
        if cursor < len(masked):
            pieces.append((cursor, masked[cursor:].translate(unmask)))
        first, later = self._encoders()
        encoded: dict[int, list[int]] = {}
        for encoder, starting in ((first, True), (later, False)):
            group = [
                (start, text) for start, text in pieces if isinstance(text, str) and (start == 0) is starting
            ]
            if group:
                rows = encoder.encode_batch([text for _, text in group], add_special_tokens=False)
                encoded.update({start: row.ids for (start, _), row in zip(group, rows)})
        ids: list[int] = []
        for start, piece in pieces:
            if isinstance(piece, str):
                ids.extend(encoded[start])
            else:
                ids.append(piece)
        return ids


def _added_vocab(tokenizer: Any) -> list[str]:
    """The added tokens' texts of a tokenizer without a ``tokenizers`` backend (where it says)."""
    try:
        return list(tokenizer.get_added_vocab())
    except Exception:  # not every tokenizer has it, or can answer it
        return []


class TokenizeManager:
    """Tokenizes requests for one tokenizer (a ``transformers`` tokenizer or a ``tokenizers.Tokenizer``).

    :meth:`tokenize` handles a batch: chat messages are rendered through the tokenizer's own chat
    template (with the generation prompt), their text kept as data (see the module), then all
    texts are encoded together. A request that cannot be tokenized gets an error; the others are
    unaffected. ``assistant_as_data``: the values of assistant messages are data too (by default
    they are trusted as the model's own output, and keep their control ids).
    """

    def __init__(self, tokenizer: Any, *, assistant_as_data: bool = False) -> None:
        if type(assistant_as_data) is not bool:
            raise ValueError(f"assistant_as_data must be a bool, not {assistant_as_data!r}")
        self.tokenizer = tokenizer
        self.assistant_as_data = assistant_as_data
        """Whether assistant messages are data (not trusted as the model's own output)."""
        self._transformers = hasattr(tokenizer, "backend_tokenizer")
        self.name = str(getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__)
        backend = (
            tokenizer
            if isinstance(tokenizer, tokenizers.Tokenizer)
            else getattr(tokenizer, "backend_tokenizer", None)
        )
        self._data = None if backend is None else ContentAsData(backend)
        specials = (
            list(self._data.controls)
            if self._data is not None
            else [
                token
                for token in [*getattr(tokenizer, "all_special_tokens", ()), *_added_vocab(tokenizer)]
                if isinstance(token, str) and token
            ]
        )
        longest_first = sorted(specials, key=len, reverse=True)
        self._specials = re.compile("|".join(map(re.escape, longest_first)) if longest_first else "(?!)")

    def content_as_data(self) -> ContentAsData:
        """The encoder that keeps chat values as data; :class:`TokenizeError` for a tokenizer
        without a ``tokenizers`` backend.
        """
        if self._data is None:
            raise TokenizeError(
                f"tokenizer {self.name!r} has no tokenizers backend: added-token text in chat "
                "messages cannot be kept as data (remove it, or send parse_special_tokens=True if trusted)"
            )
        return self._data

    def render_chat(self, messages: Any, options: Mapping[str, Any] | None = None) -> str:
        """The prompt text of a chat: the model's template with the generation prompt added.

        ``options`` become template variables (for example ``enable_thinking`` for Qwen3).
        Raises :class:`TokenizeError`.
        """
        conversation, options = self._chat(messages, options)
        return self._render(conversation, options)

    def chat_ids(self, messages: Any, options: Mapping[str, Any] | None = None) -> list[int] | None:
        """The ids of a chat whose caller values hold added-token text, kept as data (see the
        module); None when they hold none (then encoding :meth:`render_chat` gives the ids).
        Raises :class:`TokenizeError`, also when the template changes such values so that its own
        text cannot be told from theirs.
        """
        return self._kept_as_data(*self._chat(messages, options))

    def _kept_as_data(self, conversation: list[dict[str, Any]], options: dict[str, Any]) -> list[int] | None:
        """:meth:`chat_ids` of a chat already checked (:meth:`_chat`)."""
        caller = [message for message in conversation if not self._trusted(message)]
        strings = _strings([caller, options])
        present = sorted({found for text in strings for found in self._specials.findall(text)})
        if not present:
            return None
        data = self.content_as_data()
        used = set("".join(strings))
        masks: dict[str, str] = {}
        code = _PRIVATE_USE
        for special in present:
            while chr(code) in used:
                code += 1
            masks[special] = chr(code)
            code += 1

        def mask(text: str) -> str:
            return self._specials.sub(lambda found: masks[found.group()], text)

        masked_chat = [
            message if self._trusted(message) else _replace_strings(message, mask) for message in conversation
        ]
        masked = self._render(masked_chat, _replace_strings(options, mask))
        unmask = {ord(char): special for special, char in masks.items()}
        rendered = self._render(conversation, options)
        if masked.translate(unmask) != rendered:
            if self.assistant_as_data and self._assistant_rewritten(
                conversation, options, mask, unmask, rendered
            ):
                raise TokenizeError(
                    "the chat template rewrites added-token text in an assistant turn (Qwen3's splits "
                    "an earlier turn's reasoning out at '</think>'): with assistant turns as data it "
                    "cannot be kept as data (send the reasoning apart as reasoning_content, or remove it)"
                )
            raise TokenizeError(
                "the chat template rewrites added-token text in the messages: it cannot be kept as "
                "data with this template (remove it, or send parse_special_tokens=True if trusted)"
            )
        return data.encode(masked, unmask)

    def _assistant_rewritten(
        self,
        conversation: list[dict[str, Any]],
        options: dict[str, Any],
        mask: Any,
        unmask: Mapping[int, str],
        rendered: str,
    ) -> bool:
        """Whether the template renders the chat exactly when only its assistant turns are left
        unmasked: then what it rewrites is in them (for a clearer error).
        """
        masked_chat = [
            message if message["role"] == "assistant" else _replace_strings(message, mask)
            for message in conversation
        ]
        return self._render(masked_chat, _replace_strings(options, mask)).translate(unmask) == rendered

    def _trusted(self, message: Mapping[str, Any]) -> bool:
        """Whether ``message`` is rendered as it is: an assistant turn, unless those are data."""
        return message["role"] == "assistant" and not self.assistant_as_data

    def _chat(
        self, messages: Any, options: Mapping[str, Any] | None
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        if not getattr(self.tokenizer, "chat_template", None):
            raise TokenizeError(f"tokenizer {self.name!r} has no chat template: send plain text instead")
        options = dict(options or {})
        reserved = sorted(RESERVED_TEMPLATE_OPTIONS & options.keys())
        if reserved:
            raise TokenizeError(f"template option(s) {', '.join(reserved)} are set by the tokenize manager")
        return normalize_messages(messages), options

    def _render(self, conversation: list[dict[str, Any]], options: dict[str, Any]) -> str:
        try:
            rendered = self.tokenizer.apply_chat_template(
                conversation, tokenize=False, add_generation_prompt=True, **options
            )
        except Exception as error:  # a template raises whatever its author chose
            raise TokenizeError(f"chat template failed: {type(error).__name__}: {error}") from None
        if not isinstance(rendered, str):
            raise TokenizeError(f"chat template gave {type(rendered).__name__}, not text")
        # A template silently skips roles it does not know (Qwen3 drops "robot"): catch it. Each
        # content is looked for after the one before it (templates write messages in order), and
        # in the whole prompt only if not found there (one that moves a message, as Mistral's
        # moves the system prompt): linear in the prompt, where a search of the whole prompt per
        # message was quadratic in the messages.
        after = 0
        for index, message in enumerate(conversation):
            content = message["content"]
            if message["role"] == "assistant" or not content:
                continue
            found = rendered.find(content, after)
            if found < 0:
                found = rendered.find(content)
            if found < 0:
                raise TokenizeError(
                    f"message {index} ({message['role']}) is not in the rendered prompt: "
                    "the chat template does not accept that role"
                )
            after = found + len(content)
        return rendered

    def tokenize(self, messages: Sequence[TokenizeMsg]) -> list[TokenizeResult]:
        """One result per request, in order."""
        results: list[TokenizeResult | None] = [None] * len(messages)
        groups: dict[bool, list[tuple[int, str]]] = {}
        for index, msg in enumerate(messages):
            try:
                prompt = self._prompt(msg)
            except TokenizeError as error:
                results[index] = TokenizeResult(msg.uid, None, str(error))
                continue
            if isinstance(prompt, list):
                results[index] = TokenizeResult(msg.uid, array("i", prompt))
                continue
            text, special = prompt
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

    def _prompt(self, msg: TokenizeMsg) -> tuple[str, bool] | list[int]:
        """The text to encode for one request and whether the tokenizer adds its special tokens,
        or the ids themselves (a chat with added-token text kept as data).
        """
        if (msg.text is None) == (msg.messages is None):
            raise TokenizeError("give exactly one of text and messages")
        if msg.messages is not None:
            conversation, options = self._chat(msg.messages, msg.template_options)  # checked once
            if not msg.parse_special_tokens:
                ids = self._kept_as_data(conversation, options)
                if ids is not None:
                    return ids
            return self._render(conversation, options), False
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
