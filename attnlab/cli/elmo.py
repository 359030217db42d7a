"""``attnlab embed`` (ELMo's contextual word vectors) and ``attnlab pretrain --recipe elmo``.

attnlab pretrain --recipe elmo --corpus ../shared/data/books/en --format text --minutes 20 --output runs/elmo
attnlab embed --model runs/elmo/model --text "I deposited cash at the bank ." --layer mix
attnlab embed --model path/to/elmo_2x4096_512_2048cnn_2xhighway/ --file sentences.txt --layer 2

Input sentences are split into words as the pre-training split them (`attnlab.pretraining.elmo.split_words`;
``--pre-tokenized`` takes whitespace-separated tokens as they are). Output: one JSON object per sentence,
``{"tokens": [...], "layer": ..., "vectors": [[...], ...]}`` (``--layer all``: ``"layers"``, one list of
vectors per layer). ``mix`` is the scalar mix with equal weights (``--mix-weights`` to choose them) and
gamma 1, the starting point of a task's learned mix (ELMo eq. 1).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

# what a pre-training run writes in --output
ELMO_OUTPUTS = ("train", "model", "vocab.txt", "elmo_config.json", "corpus")


def register(subparsers: argparse._SubParsersAction) -> None:
    from attnlab.cli.args import positive_int

    p = subparsers.add_parser(
        "embed",
        help="ELMo contextual word vectors (per layer or mixed) for sentences",
        description="Load an ELMo model (an attnlab `pretrain --recipe elmo` directory, or the released "
        "options.json + weights.hdf5) and print each word's vectors as JSON lines.",
    )
    p.add_argument("--model", required=True, metavar="ELMO_DIR", help="ELMo model directory")
    p.add_argument("--text", action="append", default=[], metavar="SENTENCE", help="a sentence (repeatable)")
    p.add_argument("--file", metavar="FILE", help="sentences, one per line (UTF-8)")
    p.add_argument(
        "--layer",
        default="mix",
        help="'mix' (scalar mix, default), 'all', or a layer number (0 = character token layer, then LSTMs)",
    )
    p.add_argument(
        "--mix-weights", metavar="W0,W1,...", help="scalar mix weights before softmax (default equal)"
    )
    p.add_argument("--pre-tokenized", action="store_true", help="split sentences on whitespace only")
    p.add_argument("--batch-size", type=positive_int, default=32, help="sentences per batch (default 32)")
    p.add_argument(
        "--stateful",
        action="store_true",
        help="read the sentences as one document: each starts from the LSTM states the previous one left "
        "(one sentence per batch); default: every sentence on its own, the same vectors in any batch",
    )
    p.add_argument("--decimals", type=positive_int, default=5, help="decimals printed (default 5)")
    p.set_defaults(func=run_embed)


def read_sentences(args: argparse.Namespace) -> list[list[str]]:
    from attnlab.cli.inputs import check_text_file
    from attnlab.pretraining.elmo import split_words

    texts = [(f"--text {i + 1}", t) for i, t in enumerate(args.text)]
    if args.file:
        path = check_text_file(args.file, "--file")
        lines = path.read_text(encoding="utf-8").splitlines()
        texts += [(f"{path}:{n}", line) for n, line in enumerate(lines, 1)]
    if not texts:
        raise ValueError("no sentences: give --text SENTENCE (repeatable) or --file FILE")
    sentences = []
    for where, text in texts:
        words = text.split() if args.pre_tokenized else split_words(text)
        if not words:
            raise ValueError(f"{where}: empty sentence (ELMo needs at least one word)")
        sentences.append(words)
    return sentences


def run_embed(args: argparse.Namespace) -> int:
    import torch

    from attnlab.io import load
    from attnlab.models.elmo import embed_sentences
    from attnlab.models.elmo.chars import is_truncated
    from attnlab.nn.scalar_mix import ScalarMix

    sentences = read_sentences(args)
    model = load(args.model, expect="elmo")
    n_layers = model.num_layers
    if args.layer not in ("mix", "all") and not (args.layer.isdigit() and int(args.layer) < n_layers):
        raise ValueError(f"--layer {args.layer!r}: expected 'mix', 'all' or a layer number 0..{n_layers - 1}")
    mix = ScalarMix(n_layers)
    if args.mix_weights:
        try:
            weights = [float(w) for w in args.mix_weights.split(",")]
        except ValueError:
            raise ValueError(
                f"--mix-weights {args.mix_weights!r}: expected numbers separated by commas"
            ) from None
        if len(weights) != n_layers:
            raise ValueError(
                f"--mix-weights: expected {n_layers} numbers (one per layer), got {len(weights)}"
            )
        with torch.no_grad():
            mix.scalars.copy_(torch.tensor(weights))
    long = sorted({w for s in sentences for w in s if is_truncated(w, model.config.max_chars)})
    if long:
        print(
            f"attnlab embed: note: {len(long)} token(s) longer than {model.config.max_chars - 2} UTF-8 bytes "
            f"truncated, as the original ELMo does: {', '.join(repr(w[:20] + '...') for w in long[:3])}",
            file=sys.stderr,
        )
    if args.stateful:
        model.set_stateful(True)
    layers = embed_sentences(model, sentences, batch_size=1 if args.stateful else args.batch_size)
    for words, h in zip(sentences, layers):  # h: (L+1, n, 2P)
        record: dict = {"tokens": words, "layer": args.layer}
        if args.layer == "all":
            record["layers"] = [_rounded(layer, args.decimals) for layer in h]
        else:
            with torch.no_grad():
                v = mix(h) if args.layer == "mix" else h[int(args.layer)]
            record["vectors"] = _rounded(v, args.decimals)
        print(json.dumps(record))
    return 0


def _rounded(t, decimals: int) -> list:
    return [[round(float(x), decimals) for x in row] for row in t]


def run_pretrain_elmo(args: argparse.Namespace) -> int:
    """``attnlab pretrain --recipe elmo``: options mapped onto `ElmoRecipe`; ``--set model.FIELD=V`` sets
    an ElmoConfig field, ``--set lr=V`` (and other ElmoRecipe fields) the recipe."""
    import dataclasses

    from attnlab.cli.overrides import collect_overrides
    from attnlab.data.corpus import FORMATS
    from attnlab.models.elmo.config import ElmoConfig, get_preset
    from attnlab.pretraining.builtin_corpus import write_corpus
    from attnlab.pretraining.elmo import PAPER, ElmoRecipe, pretrain_elmo
    from attnlab.train.run_dir import prepare_run_directory

    builtin = not args.corpus  # as every recipe: the built-in corpus of stdlib docstrings for 4 minutes
    for path in args.corpus or ():
        if not Path(path).exists():
            raise FileNotFoundError(f"{path}: no such corpus file or directory")
    if args.format not in FORMATS:
        raise ValueError(f"--format {args.format!r}: expected one of {', '.join(FORMATS)}")
    overrides = collect_overrides(args.config, args.set)
    known = {f.name for f in dataclasses.fields(ElmoConfig)}
    unknown = sorted(set(overrides["model"]) - known)
    if unknown:
        raise ValueError(
            f"model: unknown ElmoConfig field(s) {', '.join(unknown)}; valid: {', '.join(sorted(known))}"
        )
    if args.paper and any(v is not None for v in (args.max_steps, args.batch_size, args.max_length)):
        raise ValueError(
            "--paper takes the paper's steps, batch and lengths; drop --max-steps, --batch-size and "
            "--max-length"
        )
    base = dataclasses.asdict(PAPER) if args.paper else {"preset": "elmo-cpu"}
    values = {
        **base,
        "preset": args.preset or base["preset"],
        "minutes": args.minutes if args.minutes is not None else (4.0 if builtin else None),
        "seed": args.seed,
        "heldout_every": args.heldout_every,
        "model": overrides["model"],
        **{k: v for k, v in (("max_steps", args.max_steps), ("batch_size", args.batch_size),
                             ("vocab_size", args.vocab_size), ("max_words", args.max_length),
                             ("min_count", args.tokenizer_min_frequency)) if v is not None},
    }  # fmt: skip
    recipe_fields = {f.name for f in dataclasses.fields(ElmoRecipe)}
    unknown = sorted(set(overrides["recipe"]) - recipe_fields)
    if unknown:
        raise ValueError(
            f"unknown ElmoRecipe field(s) {', '.join(unknown)}; valid: {', '.join(sorted(recipe_fields))}"
        )
    values.update(overrides["recipe"])
    recipe = ElmoRecipe(**values)
    get_preset(recipe.preset, **{k: v for k, v in recipe.model.items() if k != "vocab_size"})  # checks fields
    if recipe.vocab_size < 4:
        raise ValueError(f"--vocab-size {recipe.vocab_size}: expected >= 4 (<S>, </S>, <UNK> and a word)")
    out = Path(args.output or "runs/pretrain-elmo")
    overwrite = args.overwrite or (builtin and not args.resume)
    run = prepare_run_directory(out, "pretrain", ELMO_OUTPUTS, resume=args.resume, overwrite=overwrite)
    paths, fmt = [Path(p) for p in args.corpus or ()], args.format
    if builtin:
        paths, fmt = [out / "corpus" / "stdlib_docstrings.txt"], "sentences"
        if not paths[0].is_file():
            docs, chars = write_corpus(paths[0])
            print(f"built-in corpus: {docs} stdlib modules' docstrings, {chars:,} characters -> {paths[0]}")
    result = pretrain_elmo(
        recipe, paths, fmt, out, resume=args.resume, run_id=run.run_id, progress=not args.no_progress
    )
    m = result.metrics
    print(
        f"trained {result.steps} steps in {result.seconds / 60:.1f} min; held-out perplexity forward "
        f"{m['eval_ppl_forward']:.1f}, backward {m['eval_ppl_backward']:.1f}, mean {m['eval_ppl']:.1f} over "
        f"{int(m['eval_words']):,} words (unigram model {result.unigram_ppl:.0f}; vocabulary "
        f"{len(result.vocab):,} words, <UNK> counted as a word)"
    )
    print(f"model: {result.model_dir}  (attnlab embed --model {result.model_dir} --text ...)")
    return 0
