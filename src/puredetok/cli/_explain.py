"""``puredetok explain TEXT``: the per-token table of a streamed decode."""

from __future__ import annotations

import argparse
import json
from typing import Any

from puredetok._build import codec_for
from puredetok._core import finish, start, step
from puredetok.cli._loaded import load, loaded
from puredetok.cli._options import add_tokenizer_option, tokenizer_choice

NAME = "explain"
HELP = "show, token by token, what each id decodes to alone and what the stream emits"


def configure(parser: argparse.ArgumentParser) -> None:
    """Declare the arguments."""
    parser.add_argument("text", nargs="?", help="text to encode and stream (or use --ids)")
    parser.add_argument("--ids", help="explain these ids instead (comma or space separated)")
    add_tokenizer_option(parser)
    parser.add_argument("--skip-special-tokens", action="store_true", help="drop special tokens")
    parser.add_argument("--add-special-tokens", action="store_true", help="let the tokenizer add BOS/EOS")
    parser.add_argument(
        "--max-byte-run",
        type=int,
        metavar="N",
        help="hold at most N byte-fallback tokens of a still-valid run (default: no cap, always exact)",
    )
    parser.add_argument(
        "--out-of-vocab",
        choices=("raise", "ignore"),
        default="raise",
        help="ids past the vocabulary: an error, or nothing as tokenizer.decode skips them "
        "(default: %(default)s)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")


def _ids(args: argparse.Namespace, tokenizer: Any) -> list[int]:
    if (args.text is None) == (args.ids is None):
        raise ValueError("give either TEXT or --ids")
    if args.ids is not None:
        try:
            return [int(part) for part in args.ids.replace(",", " ").split()]
        except ValueError:
            raise ValueError(f"--ids must be integers, got {args.ids!r}") from None
    encoded = tokenizer.encode(args.text, add_special_tokens=args.add_special_tokens)
    return list(getattr(encoded, "ids", encoded))  # a tokenizers.Tokenizer gives an Encoding


def _show(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def run(args: argparse.Namespace) -> int:
    """Print the table; exit 1 if the streamed text differs from the full decode."""
    tokenizer = load(args.tokenizer)
    codec = codec_for(
        tokenizer,
        skip_special_tokens=args.skip_special_tokens,
        max_byte_run=args.max_byte_run,
        out_of_vocab=args.out_of_vocab,
    )
    ids = _ids(args, tokenizer)
    decode_kwargs: dict[str, Any] = {"skip_special_tokens": args.skip_special_tokens}
    rows: list[dict[str, Any]] = []
    state = start(codec)
    for token_id in ids:
        state, delta = step(state, token_id)
        rows.append({"id": token_id, "alone": tokenizer.decode([token_id], **decode_kwargs), "delta": delta})
    tail = finish(state)
    streamed = "".join(row["delta"] for row in rows) + tail
    full = tokenizer.decode(ids, **decode_kwargs)
    said = loaded(args.tokenizer, tokenizer_choice(args), codec)
    report = {
        "tokenizer": said.to_json(),
        "codec": {
            "family": codec.family,
            "exact": codec.exact,
            "reason": codec.reason,
            "max_byte_run": args.max_byte_run,
            "out_of_vocab": codec.out_of_vocab,
        },
        "tokens": rows,
        "finish": tail,
        "streamed": streamed,
        "decode": full,
        "equal": streamed == full,
    }
    if args.json:
        print(json.dumps(report, ensure_ascii=False))
    else:
        print(f"tokenizer: {said.line}")
        width = max([len(str(row["id"])) for row in rows] + [2])
        alone_width = max([len(_show(row["alone"])) for row in rows] + [5])
        print(f"{'#':>3}  {'id':>{width}}  {'alone':<{alone_width}}  delta")
        for index, row in enumerate(rows):
            alone = _show(row["alone"])
            print(f"{index:>3}  {row['id']:>{width}}  {alone:<{alone_width}}  {_show(row['delta'])}")
        print(f"finish: {_show(tail)}")
        print(f"streamed: {_show(streamed)}")
        verdict = "yes" if streamed == full else f"NO (decode gives {_show(full)})"
        print(f"equals the full decode: {verdict}   [{codec.family} codec, {codec.reason}]")
    return 0 if streamed == full else 1
