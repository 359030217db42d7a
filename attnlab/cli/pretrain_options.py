"""The options of ``attnlab pretrain``, in the groups its ``--help`` shows (`PRETRAIN_OPTIONS`), and the
epilog on the corpus formats. `attnlab.cli.pretrain` registers the command and runs it."""

from __future__ import annotations

import argparse

from attnlab.cli.parallel import add_parallel_options

CORPUS_FORMATS_EPILOG = """\
your own corpus (--corpus FILES_OR_DIRECTORIES, UTF-8 text; a directory: every file under it):
  --format sentences  BERT's: one sentence per line, a blank line between documents (the default)
  --format lines      one document per line, split into sentences here
  --format jsonl      one JSON object per line, its "text" field a document (blank lines: paragraphs)
  --format text       running text, one document per file (a book): wrapped lines joined into
                      paragraphs, paragraphs split into sentences
  Without --tokenizer one is trained on the corpus (--tokenizer-kind, --vocab-size); every 20th
  document is held out for the reported accuracy (--heldout-every).
  e.g. attnlab pretrain --recipe mlm --corpus books/ --format text --minutes 20"""


def _recipe_options(p: argparse.ArgumentParser) -> None:
    """--recipe, --preset, --paper: which paper's recipe, at which size."""
    from attnlab.pretraining.recipes import RECIPES

    p.add_argument(
        "--recipe",
        default="mlm",
        choices=sorted([*RECIPES, "elmo"]),  # elmo: attnlab.cli.elmo (a word-level biLM, not a Recipe)
        help="the paper's recipe (default mlm: BERT's masked LM without NSP, which learns twice as much in "
        "a CPU budget)",
    )
    p.add_argument(
        "--preset",
        default=None,
        help="model preset (default: the budget's, e.g. bert-tiny up to 10 min; the recipe's with --paper)",
    )
    p.add_argument("--paper", action="store_true", help="the paper's steps, batch and lengths (big machines)")


def _data_options(p: argparse.ArgumentParser) -> None:
    """The corpus and its preparation."""
    from attnlab.cli.args import non_negative_int, positive_int
    from attnlab.data.corpus import FORMATS

    p.add_argument(
        "--corpus", nargs="*", metavar="PATH", help="files or directories (default: built-in corpus)"
    )
    p.add_argument("--format", default="sentences", choices=FORMATS, help="corpus format (default sentences)")
    p.add_argument(
        "--workers", type=positive_int, help="tokenising processes for preparation (default: all cores)"
    )
    p.add_argument(
        "--heldout-every", type=positive_int, default=20, help="hold out every N-th document (default 20)"
    )
    p.add_argument(
        "--eval-examples", type=positive_int, default=1024, help="held-out sequences scored (default 1024)"
    )
    p.add_argument("--seed", type=non_negative_int, default=0, help="random seed (default 0)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _tokenizer_options(p: argparse.ArgumentParser) -> None:
    """A given tokenizer, or the one trained on the corpus."""
    from attnlab.cli.args import non_negative_int, positive_int
    from attnlab.pretraining.recipes import TOKENIZER_KINDS

    p.add_argument(
        "--tokenizer", metavar="DIR", help="a tokenizer directory (default: train one on the corpus)"
    )
    p.add_argument(
        "--tokenizer-kind",
        choices=TOKENIZER_KINDS,
        help="kind of the tokenizer trained on the corpus (default: the recipe's; gpt: byte_level_bpe, or "
        "char for a character-level model)",
    )
    p.add_argument(
        "--vocab-size", type=positive_int, help="vocabulary of a trained tokenizer (default: the budget's)"
    )
    p.add_argument(
        "--tokenizer-min-frequency", type=non_negative_int, help="trained tokenizer: drop rarer pairs/words"
    )


def _override_options(p: argparse.ArgumentParser) -> None:
    """--config and --set (see the module docstring)."""
    p.add_argument("--config", metavar="FILE.yaml", help="YAML overrides (see the module docstring)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="an override (repeatable)")


def _size_options(p: argparse.ArgumentParser) -> None:
    """The time budget and the sizes it would otherwise choose."""
    from attnlab.cli.args import positive_float, positive_int

    p.add_argument(
        "--minutes", type=positive_float, help="training time budget (default 4 for the built-in corpus)"
    )
    p.add_argument("--max-steps", type=positive_int, help="optimizer steps (default: what fits in --minutes)")
    p.add_argument("--batch-size", type=positive_int, help="sequences per step (default: the budget's, 32)")
    p.add_argument(
        "--max-length",
        type=positive_int,
        help="tokens per sequence, one length throughout (default: the budget's: 32 up to 20 min; 64, then "
        "128 in two stages, up to 60; 128 beyond)",
    )


def _run_options(p: argparse.ArgumentParser) -> None:
    """The output directory, resume and overwrite, seed, progress."""

    p.add_argument(
        "--output-dir",
        "--output",
        dest="output",
        metavar="DIR",
        help="output directory (default runs/pretrain-RECIPE)",
    )
    p.add_argument("--resume", action="store_true", help="continue from the newest checkpoints in --output")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="delete an earlier run's checkpoints in --output (built-in: always)",
    )


def _attention_options(p: argparse.ArgumentParser) -> None:
    """The self-attention of causal LMs and Transformer-XL's memory."""
    from attnlab.cli.args import non_negative_int, positive_int

    p.add_argument(
        "--attention", choices=("full", "local", "lsh"),
        help="self-attention: full, local = a sliding window, or lsh = Reformer's LSH attention (causal LMs: "
        "--recipe gpt; docs/long_sequences.md)",
    )  # fmt: skip
    p.add_argument("--hashes", type=positive_int, help="lsh attention: hash rounds (default 4)")
    p.add_argument(
        "--window", type=positive_int, help="local attention: keys seen on each side of a query (default 128)"
    )
    p.add_argument(
        "--global-tokens", type=non_negative_int, help="local attention: leading global positions ([CLS] = 1)"
    )
    p.add_argument(
        "--mem-len", type=non_negative_int,
        help="transfo-xl: memory kept between segments, in tokens (default: the segment length, as the "
        "paper; 0: none)",
    )  # fmt: skip


def _parallel_options(p: argparse.ArgumentParser) -> None:
    """Several processes under torchrun: DDP or FSDP (`attnlab.cli.parallel`), and the memory plan."""
    from attnlab.cli.args import positive_int

    add_parallel_options(p)
    p.add_argument(
        "--dry-run", action="store_true",
        help="print the memory one process needs (parameters, gradients, optimizer state, activations at "
        "--batch-size and --max-length) for --preset, --world-size and --parallel; train nothing",
    )  # fmt: skip
    p.add_argument(
        "--world-size", type=positive_int, default=None,
        help="--dry-run: processes (default: torchrun's, else 1)",
    )  # fmt: skip


PRETRAIN_OPTIONS = (  # the option groups of attnlab pretrain, in --help's order
    _recipe_options,
    _data_options,
    _tokenizer_options,
    _override_options,
    _size_options,
    _run_options,
    _attention_options,
    _parallel_options,
)
