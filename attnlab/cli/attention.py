"""``attnlab attention``: which tokens each head attends to, as pictures, without a server.

attnlab attention runs/sst2/best --text "the movie was great" --png attention.png
attnlab attention hf/bert-base-uncased --text "the cat sat" --text-pair "it was tired" --html attention.html
attnlab attention runs/gpt/model --text "ROMEO:" --json attention.json

MODEL is an encoder directory (attnlab or HF; pre-trained or fine-tuned) or a GPT directory. ``--png`` draws
every layer and head as a grid of heat maps; ``--html`` writes a standalone page with the web demo's
interactive view (script and data inlined: it opens offline); ``--json`` writes the weights
(``{"tokens", "layers", "heads", "attentions"[layer][head][from][to]}``).
"""

from __future__ import annotations

import argparse
import sys

from .args import positive_int


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "attention",
        help="draw a model's attention for a text: heat maps (--png), an interactive page (--html), JSON",
        description="Attention probabilities of every layer and head for a text (or a pair), from an encoder "
        "(attnlab or HF directory) or a GPT directory, written as a PNG grid of heat maps, a standalone "
        "interactive HTML page (works offline) and/or JSON.",
    )
    p.add_argument("model", metavar="MODEL", help="model directory (config.json, weights, tokenizer files)")
    p.add_argument("--text", required=True, help="the sentence")
    p.add_argument("--text-pair", help="a second sentence (encoders: segment B)")
    p.add_argument("--png", metavar="FILE", help="write heat maps (layers x heads) to this PNG file")
    p.add_argument("--html", metavar="FILE", help="write a standalone interactive page to this file")
    p.add_argument("--json", metavar="FILE", help="write the weights as JSON to this file")
    p.add_argument(
        "--max-tokens", type=positive_int, default=128,
        help="refuse longer inputs (pictures of more tokens are unreadable); the model's limit holds too",
    )  # fmt: skip
    p.add_argument("--dpi", type=positive_int, default=100, help="PNG resolution")
    p.set_defaults(func=run_attention)


def run_attention(args: argparse.Namespace) -> int:
    from pathlib import Path

    from attnlab.atomic import write_json_atomic
    from attnlab.tasks.attention import attention_weights, load_attention_model

    outputs = [o for o in (args.png, args.html, args.json) if o]
    if not outputs:
        raise ValueError("nothing to write: give --png FILE, --html FILE and/or --json FILE")
    if not args.text.strip():
        raise ValueError("--text is empty; give a sentence")
    if args.text_pair is not None and not args.text_pair.strip():
        raise ValueError("--text-pair is empty; leave it out or give a second sentence")
    for out in outputs:
        parent = Path(out).resolve().parent
        if not parent.is_dir():
            raise FileNotFoundError(f"{out}: the directory {parent} does not exist")
    model, tokenizer = load_attention_model(args.model)
    data = attention_weights(model, tokenizer, args.text, args.text_pair, decimals=5)
    if len(data["tokens"]) > args.max_tokens:
        raise ValueError(
            f"the input is {len(data['tokens'])} tokens long, over --max-tokens {args.max_tokens}: shorten "
            "the text or raise --max-tokens"
        )
    shown = args.text if args.text_pair is None else f"{args.text} | {args.text_pair}"
    if args.png:
        from attnlab.viz.attention_png import draw_attention_png

        draw_attention_png(data, args.png, dpi=args.dpi)
    if args.html:
        from attnlab.viz.attention_html import write_attention_page

        write_attention_page(data, args.html, title=f"attention: {Path(args.model).name}", text=shown)
    if args.json:
        write_json_atomic(data, args.json, indent=None)
    shape = f"{len(data['tokens'])} tokens, {data['layers']} layers x {data['heads']} heads"
    print(f"{shape} -> {', '.join(outputs)}", file=sys.stderr)
    return 0
