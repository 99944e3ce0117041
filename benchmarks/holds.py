"""How long the byte-fallback hold lasts on real text: ``python -m benchmarks.holds``.

SentencePiece tokenizers with ByteFallback (Llama-2, Mistral, Phi-3) spell characters outside
their vocabulary with ``<0xNN>`` byte tokens. A run of them is text only as a whole (one invalid
byte turns every byte of the run into U+FFFD), so an exact stream holds a still-valid run until
a non-byte token ends it (G5's documented exception); ``max_byte_run`` caps that hold. This
module measures it on real CJK, emoji and mixed text, token by token, with and without a cap:

* **held runs**: maximal stretches of consecutive tokens after which the stream holds text
  (``finish(state) != ""``), in tokens;
* **held characters**: after a token, how many characters the decode of the ids so far shows
  that the stream has not sent yet (what an exact stream holds back that a streamer trusting the
  decode, as ``transformers``' does, would already show);
* **delay**: for each character, the tokens between the first one after which the decode of the
  ids so far shows it and the one whose delta carries it.

Everything is a count, not a timing: the figures are exact and the same on every machine.
"""

from __future__ import annotations

__all__ = ["TEXTS", "CAPS", "HoldStats", "hold_stats", "hold_table", "main"]

import argparse
import math
from collections.abc import Sequence
from typing import Any

import attrs

from puredetok import codec_for, finish, start, step

TEXTS: dict[str, str] = {
    "CJK": (
        # Chinese: the Universal Declaration of Human Rights, article 1; the Tao Te Ching, chapter 1.
        "人人生而自由，在尊严和权利上一律平等。他们赋有理性和良心，并应以兄弟关系的精神相对待。"
        "道可道，非常道。名可名，非常名。无名天地之始；有名万物之母。故常无欲，以观其妙；常有欲，以观其徼。"
        "此两者，同出而异名，同谓之玄。玄之又玄，众妙之门。"
        # Japanese: the same article; the first lines of Natsume Soseki's "I Am a Cat".
        "すべての人間は、生れながらにして自由であり、かつ、尊厳と権利とについて平等である。"
        "人間は、理性と良心とを授けられており、互いに同胞の精神をもって行動しなければならない。"
        "吾輩は猫である。名前はまだ無い。どこで生れたかとんと見当がつかぬ。"
        "何でも薄暗いじめじめした所でニャーニャー泣いていた事だけは記憶している。"
        # Korean: the same article.
        "모든 인간은 태어날 때부터 자유로우며 그 존엄과 권리에 있어 동등하다. "
        "인간은 천부적으로 이성과 양심을 부여받았으며 서로 형제애의 정신으로 행동하여야 한다. "
        # Rare characters, explained.
        "“鱻”同“鲜”；“龘”形容龙腾飞的样子；“䨻”和“靐”都是雷声；“齉”指鼻子不通气。"
    ),
    "rare CJK": "The rarest characters of the dictionary: 䨻靐齉龖鱻龘𪚥𠔻䲜䶑𩇯𨰻𤴓𥫗𦧲𧆞𩙰𪓕𫇭𬌗.",
    "emoji": (
        "Congrats on the launch!! 🎉🎉 The demo was 🔥🔥 and the team 💪. See you at the 🏖️ next week 😎\n"
        "Weather: ☀️ 28°C today, 🌧️ tomorrow, ❄️ never. Votes: 👍 12, 👎 1, ❤️ 5, 😂 3.\n"
        "Trip: 👨‍👩‍👧‍👦 + 🐶 in the 🚗, flags 🇯🇵 🇰🇷 🇨🇳 🇫🇷, waves 👋🏻 👋🏽 👋🏿, and a 🏳️‍🌈 at the end. 🦩🌶️🫠"
    ),
    "mixed": (
        "## 安装 (Installation)\n\n```bash\npip install puredetok  # 推理引擎 😀\n```\n\n"
        "日本語: ストリーミングは正確です。한국어도 지원합니다 ✅. Ελληνικά, Русский текст, ภาษาไทย 🚀\n"
        "| model | 速度 | note |\n|---|---|---|\n| Llama-2 | 快 | byte runs 🦩 |\n"
        "def 你好(name):  # こんにちは\n    return f'{name} 👋'\n"
    ),
}
"""The measured texts: real CJK prose (Chinese, Japanese, Korean, and some rare characters), twenty
rare ideographs in a row (the worst case: one long run of byte tokens), a chat message full of emoji
(ZWJ families, flags, skin tones, U+FE0F), and mixed Markdown and code."""

CAPS: tuple[int | None, ...] = (None, 16, 4)
"""The ``max_byte_run`` values measured (None: no cap, always exact)."""


def _percentile(values: Sequence[int], share: float) -> int:
    """Nearest-rank percentile (0 for no values)."""
    if not values:
        return 0
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


@attrs.frozen
class HoldStats:
    """The holds of one text streamed through one codec."""

    tokens: int
    """Tokens in the text."""
    held_tokens: int
    """Tokens after which the stream held some text."""
    runs: tuple[int, ...]
    """The length in tokens of each maximal stretch of held tokens."""
    held_characters: tuple[int, ...]
    """After each token that leaves some, how many characters the decode of the ids so far shows
    that the stream has not sent yet."""
    delays: tuple[int, ...]
    """Per character of the text, the tokens between when the decode shows it and when it is sent."""
    exact: bool
    """Whether the streamed text equals the decode (a cap may break it; on these texts it does not)."""

    def summary(self) -> dict[str, str]:
        """The figures of one table row."""
        delayed = [d for d in self.delays if d]

        def spread(values: Sequence[int]) -> str:
            if not values:
                return "-"
            return f"{_percentile(values, 0.5)} / {_percentile(values, 0.9)} / {max(values)}"

        return {
            "tokens": str(self.tokens),
            "held after": f"{self.held_tokens} ({100 * self.held_tokens / max(1, self.tokens):.0f} %)",
            "held runs, tokens": spread(self.runs),
            "held characters": spread(self.held_characters),
            "characters delayed": f"{len(delayed)} of {len(self.delays)}",
            "delay, tokens": spread(delayed),
        }


def _shown_after(decode: Any, ids: Sequence[int], text: str) -> list[int]:
    """Per character of ``text``, the number of ids after which the decode of the ids so far
    first shows it, at its place (when a streamer that trusts the decode would send it).
    """
    prefixes = decode([list(ids[:count]) for count in range(len(ids) + 1)])
    shown = [len(ids)] * len(text)
    reached = 0
    for count, decoded in enumerate(prefixes):
        same = 0
        for a, b in zip(decoded, text):
            if a != b:
                break
            same += 1
        for position in range(reached, same):
            shown[position] = count
        reached = max(reached, same)
    return shown


def hold_stats(tokenizer: Any, text: str, max_byte_run: int | None = None) -> HoldStats:
    """Stream ``text`` (as the tokenizer encodes it) through a codec with ``max_byte_run``."""
    backend = getattr(tokenizer, "backend_tokenizer", tokenizer)
    ids = list(backend.encode(text, add_special_tokens=False).ids)
    full = backend.decode(ids)
    codec = codec_for(tokenizer, max_byte_run=max_byte_run)
    state, emitted, sent_after = start(codec), "", []
    holding: list[bool] = []
    for count, token_id in enumerate(ids, 1):
        state, delta = step(state, token_id)
        emitted += delta
        sent_after += [count] * len(delta)
        holding.append(bool(finish(state)))
    tail = finish(state)
    sent_after += [len(ids)] * len(tail)
    shown = _shown_after(lambda batch: backend.decode_batch(batch), ids, full)
    runs, current = [], 0
    for held in [*holding, False]:
        if held:
            current += 1
        elif current:
            runs.append(current)
            current = 0
    # After token k, the characters the decode already shows that the stream has not sent.
    waiting = [0] * (len(ids) + 1)
    for when, sent in zip(shown, sent_after):
        for count in range(when, sent):
            waiting[count] += 1
    held_characters = tuple(n for n in waiting[1:] if n)
    delays = tuple(max(0, sent - when) for sent, when in zip(sent_after, shown))
    exact = emitted + tail == full
    return HoldStats(len(ids), sum(holding), tuple(runs), held_characters, delays, exact)


def hold_table(
    tokenizers: dict[str, Any], texts: dict[str, str] = TEXTS, caps: Sequence[int | None] = CAPS
) -> str:
    """The Markdown table of every tokenizer, text and cap."""
    header = [
        "tokenizer",
        "text",
        "max_byte_run",
        "tokens",
        "held after",
        "held runs, tokens",
        "held characters",
        "characters delayed",
        "delay, tokens",
        "exact",
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, tokenizer in tokenizers.items():
        for label, text in texts.items():
            for cap in caps:
                stats = hold_stats(tokenizer, text, cap)
                row = [name, label, "no cap" if cap is None else str(cap), *stats.summary().values()]
                row.append("yes" if stats.exact else "**no**")
                lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Print the table for the tokenizers given (folders or tokenizer.json files)."""
    from puredetok.serving._loading import load_tokenizer

    parser = argparse.ArgumentParser(prog="python -m benchmarks.holds", description=__doc__.splitlines()[0])
    parser.add_argument("tokenizers", nargs="+", metavar="NAME=PATH", help="tokenizers to measure, named")
    args = parser.parse_args(argv)
    loaded = {}
    for spec in args.tokenizers:
        name, _, path = spec.rpartition("=")
        loaded[name or path] = load_tokenizer(path)
    print("Cells with three figures are median / p90 / max.")
    print(hold_table(loaded))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
