"""``attnlab generate`` and ``attnlab perplexity``: a causal language model (GPT) from the command line.

attnlab generate runs/gpt/model --prompt "ROMEO:" --max-new-tokens 200 --sample --top-p 0.9 --seed 1
echo "Once upon a time" | attnlab generate path/to/hf-gpt2 --beams 4
attnlab perplexity path/to/hf-gpt2 --file ../shared/data/wikitext-2/raw/test.txt --stride 512
attnlab perplexity runs/pretrain-transfo-xl/model --file input.txt --mem-len 256   # Transformer-XL

MODEL is an attnlab GPT directory, a HF GPT-2 directory, or an attnlab Transformer-XL directory
(`attnlab.io.families.transfo_xl`; generated and scored with its memory, ``perplexity`` in segments), with its
tokenizer files. One prompt
is streamed to the terminal as it is generated (greedy and sampling); several prompts (``--prompt`` repeated,
or ``--lines`` on standard input) run as one left-padded batch and print one continuation per prompt.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path
from typing import Any


def register(subparsers: argparse._SubParsersAction) -> None:
    from attnlab.cli.args import (
        non_negative_int,
        positive_float,
        positive_int,
        probability_mass,
        real_number,
    )

    gen = subparsers.add_parser(
        "generate",
        help="continue a prompt with a causal language model (GPT), streaming the text",
        description="Continue prompts with a GPT model (attnlab or HF GPT-2 directory). Greedy by default; "
        "--beams N for beam search, --sample for sampling with --temperature/--top-k/--top-p.",
    )
    gen.add_argument("model", metavar="MODEL", help="model directory (config.json, weights, tokenizer files)")
    gen.add_argument(
        "--prompt", action="append", help="prompt text (repeat for a batch); default: standard input"
    )
    gen.add_argument("--lines", action="store_true", help="standard input holds one prompt per line")
    gen.add_argument("--max-new-tokens", type=positive_int, default=50)
    search = gen.add_argument_group("search")
    search.add_argument("--beams", type=positive_int, default=1, help="beam width (1: greedy)")
    search.add_argument(
        "--length-penalty", type=real_number, default=1.0, help="beam: score / length ** this"
    )
    search.add_argument(
        "--early-stopping", choices=["true", "false", "never"], default="false",
        help="beam: stop at K finished hypotheses (true), HF's heuristic (false), or exact (never)",
    )  # fmt: skip
    search.add_argument(
        "--sample", action="store_true", help="sample instead of taking the most probable token"
    )
    search.add_argument(
        "--temperature", type=positive_float, default=1.0, help="sampling: logits / this (> 0)"
    )
    search.add_argument("--top-k", type=positive_int, help="sample among the k most probable tokens")
    search.add_argument(
        "--top-p", type=probability_mass, help="nucleus: the smallest set reaching probability p, in (0, 1]"
    )
    search.add_argument(
        "--repetition-penalty", type=positive_float, default=1.0, help="> 1 discourages repeats (CTRL)"
    )
    search.add_argument(
        "--seed", type=non_negative_int, help="sampling seed (the same seed gives the same text)"
    )
    end = gen.add_argument_group("ending")
    end.add_argument(
        "--stop", action="append", default=[], help="stop at this string (repeatable; not printed)"
    )
    end.add_argument("--ignore-eos", action="store_true", help="do not stop at the end-of-text token")
    end.add_argument(
        "--truncate-prompt", action="store_true",
        help="a prompt longer than the context keeps its last tokens (with a warning) instead of an error",
    )  # fmt: skip
    gen.add_argument(
        "--no-cache", action="store_true", help="recompute the prefix each step (slow; for checks)"
    )
    gen.add_argument("--json", action="store_true", help="print a JSON list of {prompt, text, tokens}")
    gen.set_defaults(func=run_generate)

    ppl = subparsers.add_parser(
        "perplexity",
        help="perplexity of a text file under a causal language model (sliding window with stride)",
        description="Perplexity with a sliding window: windows of --max-length tokens every --stride tokens, "
        "each scoring only the tokens no earlier window scored (HF's method for fixed-length models). A "
        "Transformer-XL reads the text in segments of --max-length tokens with a memory of --mem-len (state "
        "reuse, Dai et al. 2019): no window is recomputed.",
    )
    ppl.add_argument("model", metavar="MODEL")
    ppl.add_argument("--file", required=True, help="UTF-8 text file (read whole, joined as written)")
    ppl.add_argument("--max-length", type=positive_int, help="window length (default: the model's context)")
    ppl.add_argument("--stride", type=positive_int, help="GPT: window step (default: half the window)")
    ppl.add_argument(
        "--mem-len", type=non_negative_int,
        help="Transformer-XL: memory in tokens (default: the training memory; the paper evaluates with a "
        "longer one)",
    )  # fmt: skip
    ppl.add_argument("--max-tokens", type=positive_int, help="score only the first N tokens of the file")
    ppl.add_argument("--json", action="store_true")
    ppl.set_defaults(func=run_perplexity)


def load_model_and_tokenizer(directory: str) -> tuple[Any, Any]:
    from attnlab.accel import optimize
    from attnlab.io import load
    from attnlab.tokenizers.files import load_tokenizer

    model = optimize(load(directory, expect=("gpt2", "transfo_xl")))  # the CPU fast paths of decoding
    try:
        tokenizer = load_tokenizer(directory)
    except (OSError, ValueError) as e:
        raise ValueError(
            f"{directory}: no usable tokenizer files (tokenizer.json, or vocab.json + merges.txt): {e}"
        ) from e
    return model, tokenizer


def load_transfo_xl_and_tokenizer(directory: str) -> tuple[Any, Any]:
    from attnlab.accel import optimize
    from attnlab.io import load
    from attnlab.tokenizers.files import load_tokenizer

    model = optimize(load(directory, expect="transfo_xl"))  # its products on the fast layouts (attnlab.accel)
    try:
        tokenizer = load_tokenizer(directory)
    except (OSError, ValueError) as e:
        raise ValueError(f"{directory}: no usable tokenizer files (tokenizer.json): {e}") from e
    return model, tokenizer


def _encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=False).ids)


def _print_piece(token: int, piece: str) -> None:
    """`TextStream`'s emit for the terminal: one row's new text as it comes."""
    sys.stdout.write(piece)
    sys.stdout.flush()


def _prompts(args: argparse.Namespace) -> list[str]:
    if args.prompt:
        prompts = list(args.prompt)
    else:
        from .inputs import read_stdin

        data = read_stdin()  # bytes that are not UTF-8: an error naming the line, never U+FFFD in a prompt
        prompts = [line for line in data.splitlines() if line.strip()] if args.lines else [data.rstrip("\n")]
    for i, p in enumerate(prompts):
        if not p:
            raise ValueError(f"prompt {i + 1} is empty: give some text (--prompt TEXT or standard input)")
    return prompts


def run_generate(args: argparse.Namespace) -> int:
    from attnlab.generation import GenerationConfig, generate, left_pad
    from attnlab.generation.api import check_for_model
    from attnlab.generation.text_stream import TextStream, cut_at_stop

    if "" in args.stop:  # every text contains "": generation would stop before its first token
        raise ValueError("--stop: expected a non-empty string, got ''")
    prompts = _prompts(args)
    cfg = GenerationConfig(
        max_new_tokens=args.max_new_tokens, do_sample=args.sample, num_beams=args.beams,
        length_penalty=args.length_penalty,
        early_stopping={"true": True, "false": False, "never": "never"}[args.early_stopping],
        temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
        repetition_penalty=args.repetition_penalty, seed=args.seed, use_cache=not args.no_cache,
        truncate_prompt=args.truncate_prompt, ignore_eos=args.ignore_eos,
    )  # fmt: skip
    from attnlab.io import family_of

    xl = family_of(args.model, expect=("gpt2", "transfo_xl")).name == "transfo_xl"
    model, tokenizer = (load_transfo_xl_and_tokenizer if xl else load_model_and_tokenizer)(args.model)
    check_for_model(cfg, model.config.vocab_size)  # before the prompt is echoed
    eos = None if args.ignore_eos else model.config.eos_token_id
    ids = [_encode(tokenizer, p) for p in prompts]
    for i, row in enumerate(ids):
        if not row:
            raise ValueError(f"prompt {i + 1} encodes to no tokens")
    input_ids, mask = left_pad(ids, eos if eos is not None else 0)

    def decode(row: list[int]) -> str:
        return tokenizer.decode([t for t in row if t != eos], skip_special_tokens=True)

    stop = None
    if args.stop:
        stops = list(args.stop)

        def stop(row: int, toks: list[int]) -> bool:
            text = decode(toks)
            return any(s in text for s in stops)

    stream = len(prompts) == 1 and args.beams == 1 and not args.json
    streamer = TextStream(decode, args.stop, _print_piece) if stream else None
    on_step = (lambda toks, done, _: streamer.step(int(toks[0]), bool(done[0]))) if streamer else None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if streamer is not None:
            sys.stdout.write(prompts[0])
            sys.stdout.flush()
        out = generate(model, input_ids, mask, cfg, on_step=on_step, stop=stop)
    for w in caught:
        print(f"attnlab generate: warning: {w.message}", file=sys.stderr)
    texts = [cut_at_stop(decode(seq), args.stop) for seq in out.sequences]
    if streamer is not None:
        sys.stdout.write(texts[0][streamer.sent :] + "\n")  # what was held back, up to a stop string
        sys.stdout.flush()
        return 0
    if args.json:
        rows = [{"prompt": p, "text": t, "tokens": s} for p, t, s in zip(prompts, texts, out.sequences)]
        print(json.dumps(rows, ensure_ascii=False, indent=2))
        return 0
    for p, t in zip(prompts, texts):
        print(p + t)
    return 0


def run_perplexity(args: argparse.Namespace) -> int:
    from attnlab.generation.perplexity import (
        sliding_window_perplexity,
        state_reuse_perplexity,
        window_and_stride,
    )
    from attnlab.io import family_of

    path = Path(args.file)
    if path.is_dir():
        raise IsADirectoryError(f"--file {path}: is a directory, expected a text file")
    if not path.is_file():
        raise FileNotFoundError(f"--file {path}: no such file")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"--file {path}: not UTF-8 text (byte {e.start})") from None
    if not text.strip():
        raise ValueError(f"--file {path}: the file is empty")
    xl = family_of(args.model, expect=("gpt2", "transfo_xl")).name == "transfo_xl"
    if args.mem_len is not None and not xl:
        raise ValueError(f"--mem-len is a Transformer-XL's memory; {args.model} holds no Transformer-XL")
    load = load_transfo_xl_and_tokenizer if xl else load_model_and_tokenizer
    model, tokenizer = load(args.model)
    ids = _encode(tokenizer, text)
    if args.max_tokens is not None:
        ids = ids[: args.max_tokens]
    if xl:
        result = state_reuse_perplexity(model, ids, args.max_length, args.mem_len)
        how = {"segment_length": args.max_length or model.config.segment_length}
        how["mem_len"] = model.config.mem_len if args.mem_len is None else args.mem_len
    else:
        window, stride = window_and_stride(model.config.max_positions, args.max_length, args.stride)
        result = sliding_window_perplexity(model, ids, window, stride)
        how = {"stride": stride}
    if args.json:
        print(json.dumps({"file": str(args.file), **how, **result.__dict__}, indent=2))
    else:
        unit = (
            f"{result.windows} segments of {how['segment_length']}, memory {how['mem_len']}"
            if xl
            else f"{result.windows} windows, stride {how['stride']}"
        )
        print(
            f"perplexity {result.perplexity:.4f} (mean NLL {result.nll:.4f} nats/token over "
            f"{result.tokens:,} tokens, {unit})"
        )
    return 0
