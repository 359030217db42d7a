"""Pre-train bert-mini on the Project Gutenberg books in a fixed time budget on a small CPU machine.

    python experiments/pretrain_books.py                         # the full run: 30 minutes in all, 2 cores
    python experiments/pretrain_books.py --minutes 3 --max-mb 5 --output runs/books-smoke    # a smoke run

What it does, with the library's pieces (attnlab.pretraining.run):
1. trains a WordPiece vocabulary (``--vocab-size``, uncased) on the first ``--tokenizer-mb`` MB of the books;
2. prepares the books (``--max-mb`` MB, all by default) into shards, every 20th book held out;
3. pre-trains bert-mini (Turc et al. 2019: L=4, H=256) with the ``--recipe`` (default ``bert``: SEGMENT-PAIR
   + NSP, 80/10/10 masking; scaled down to batch ``--batch-size`` at length ``--max-length``, warm-up kept
   as the paper's fraction, peak learning rate ``--lr``) for what is left of ``--minutes`` after steps 1-2,
   with ``max_steps`` set to what fits so that the learning rate decays to zero when time runs out;
4. reports held-out MLM accuracy and perplexity over the masked tokens of the held-out books, writes
   OUTPUT/loss_curve.png and OUTPUT/results.json, and prints fill-mask examples.

Preparation is cached in OUTPUT/data, so a second run with the same output trains (again, from scratch) for
the whole budget.
The books are at ../shared/data/books/en relative to the repository (``--data``); 82 MB, 120 books, with
Gutenberg's licence text still inside.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "books" / "en"
EXAMPLES = (
    "The old man looked at the [MASK] and smiled.",
    "She opened the [MASK] and walked into the room.",
    "It was the best of times, it was the worst of [MASK].",
)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=str(DEFAULT_DATA), help="folder of .txt books")
    p.add_argument("--output", default="runs/books-bert-mini")
    p.add_argument("--minutes", type=float, default=30.0, help="the whole budget: preparation + training")
    p.add_argument("--recipe", default="bert", help="bert, roberta, albert, spanbert or electra")
    p.add_argument("--preset", default="bert-mini")
    p.add_argument("--max-mb", type=float, default=None, help="read only the first MB of the books")
    p.add_argument(
        "--tokenizer-mb", type=float, default=10.0, help="MB of books the vocabulary is trained on"
    )
    p.add_argument("--vocab-size", type=int, default=16000)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument(
        "--lr", type=float, default=5e-4, help="peak learning rate (BERT's 1e-4 learns little in minutes)"
    )
    p.add_argument("--max-length", type=int, default=128)
    p.add_argument("--workers", type=int, default=2, help="tokenising processes")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)

    from attnlab.data import read_documents
    from attnlab.pretraining import get_recipe
    from attnlab.pretraining.corpus import files_key, prepare_corpus
    from attnlab.pretraining.fill_mask import fill_mask, format_predictions, mask_token_of
    from attnlab.pretraining.model import masked_lm_of
    from attnlab.pretraining.run import pretrain
    from attnlab.pretraining.tokenizer import train_or_load_tokenizer

    t0 = time.monotonic()
    data = Path(args.data)
    if not data.is_dir():
        print(f"{data}: no such folder of books (see --data)", file=sys.stderr)
        return 2
    out = Path(args.output)
    max_bytes = None if args.max_mb is None else int(args.max_mb * (1 << 20))

    def source():
        used = 0
        for doc in read_documents([str(data)], "text", split=False):
            yield doc
            used += sum(len(par) for par in doc)
            if max_bytes is not None and used >= max_bytes:
                return

    # Deliberate: ELECTRA-Small's 5e-4 (a small model's rate, Clark et al. 2020 Table 6) rather than BERT's
    # 1e-4, for a run of minutes; the rest is the recipe's, scaled down (warm-up as the paper's fraction).
    recipe = get_recipe(args.recipe).scaled_down(batch_size=args.batch_size, max_length=args.max_length)
    recipe = recipe.override(lr=args.lr)
    tokenizer = train_or_load_tokenizer(
        recipe, source, out / "tokenizer", vocab_size=args.vocab_size,
        sample_chars=int(args.tokenizer_mb * (1 << 20)),
    )  # fmt: skip
    key = {**files_key([data], "text"), "max_mb": args.max_mb}
    train, heldout = prepare_corpus(source, tokenizer, out / "data", source_key=key, workers=args.workers)
    left = args.minutes - (time.monotonic() - t0) / 60
    if left <= 0.5:
        print(f"preparation used the budget of {args.minutes:g} minutes; run again (it is cached)")
        return 1
    print(f"training {args.preset} with the {recipe.name} recipe for {left:.1f} minutes")
    result = pretrain(
        recipe, tokenizer, train, heldout, out, preset=args.preset, minutes=left, auto_steps=True,
        trainer_overrides={"progress_bar": not args.no_progress, "save_every": 500, "log_every": 10},
        eval_examples=512, seed=args.seed, overwrite=True,
    )  # fmt: skip
    m = result.eval_metrics
    curve = out / "train" / "loss_curve.png"
    if curve.is_file():
        shutil.copyfile(curve, out / "loss_curve.png")
    results = {
        "recipe": recipe.name,
        "preset": args.preset,
        "steps": result.steps,
        "batch_size": recipe.batch_size,
        "max_length": recipe.stages[-1].max_length,
        "train_tokens": train.n_tokens,
        "heldout_mlm_accuracy": m.get("eval_mlm_accuracy"),
        "heldout_mlm_perplexity": m.get("eval_mlm_perplexity"),
        "heldout_masked_tokens": m.get("eval_mlm_tokens"),
        "minutes_total": (time.monotonic() - t0) / 60,
    }
    (out / "results.json").write_text(json.dumps(results, indent=1))
    print(json.dumps(results, indent=1))
    mlm = masked_lm_of(result.model)
    mask, _ = mask_token_of(tokenizer)
    for text in EXAMPLES:
        text = text.replace("[MASK]", mask)
        print(format_predictions(text, fill_mask(mlm, tokenizer, text)))
    print(f"loss curve: {out / 'loss_curve.png'}; model: {result.model_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
